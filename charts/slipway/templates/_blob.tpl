{{/*
Names and labels of object storage: the S3 gateway (`slipway s3`) and the bundled versitygw backend.
*/}}
{{- define "slipway.blob.gateway.fullname" -}}
{{- printf "%s-s3" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.blob.gateway.labels" -}}
{{ include "slipway.labels" . }}
app.kubernetes.io/component: s3-gateway
{{- end }}

{{- define "slipway.blob.gateway.selectorLabels" -}}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/component: s3-gateway
{{- end }}

{{- define "slipway.blob.backend.fullname" -}}
{{- printf "%s-s3-backend" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.blob.backend.labels" -}}
{{ include "slipway.labels" . }}
app.kubernetes.io/component: s3-backend
{{- end }}

{{- define "slipway.blob.backend.selectorLabels" -}}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/component: s3-backend
{{- end }}

{{/*
Whether the chart runs the bundled backend: no external URL, and bundling on.
*/}}
{{- define "slipway.blob.bundled" -}}
{{- if and .Values.blob.enabled (not .Values.blob.backend.url) .Values.blob.bundled.enabled }}true{{- end }}
{{- end }}

{{/*
URL of the backend (external, or the bundled Service).
*/}}
{{- define "slipway.blob.backendUrl" -}}
{{- if .Values.blob.backend.url }}
{{- .Values.blob.backend.url }}
{{- else if .Values.blob.bundled.enabled }}
{{- printf "http://%s.%s.svc:%v" (include "slipway.blob.backend.fullname" .) .Release.Namespace .Values.blob.bundled.port }}
{{- else }}
{{- fail "blob.backend.url is required when blob.bundled.enabled is false" }}
{{- end }}
{{- end }}

{{/*
Secret holding the backend's root key pair (accessKeyId, secretAccessKey).
*/}}
{{- define "slipway.blob.backendSecretName" -}}
{{- if .Values.blob.backend.existingSecret }}
{{- .Values.blob.backend.existingSecret }}
{{- else if .Values.blob.backend.url }}
{{- fail "blob.backend.existingSecret is required with an external blob.backend.url" }}
{{- else }}
{{- printf "%s-s3-backend" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
The gateway as pods and the other components reach it: `host:port` (what the edge forwards the public endpoints
to), and as a URL (the S3_ENDPOINT apps get, and where the api probes stores).
*/}}
{{- define "slipway.blob.gatewayAddress" -}}
{{- printf "%s.%s.svc:%v" (include "slipway.blob.gateway.fullname" .) .Release.Namespace .Values.blob.gateway.port }}
{{- end }}

{{- define "slipway.blob.gatewayUrl" -}}
{{- printf "http://%s" (include "slipway.blob.gatewayAddress" .) }}
{{- end }}

{{/*
The backend and its root key pair as container environment: only the gateway, the operator and, with a data server,
the api (for SQL snapshot files) get it (the bundled backend reads the same Secret as its root account).
*/}}
{{- define "slipway.blob.backendEnv" -}}
- name: SLIPWAY_S3_BACKEND_URL
  value: {{ include "slipway.blob.backendUrl" . | quote }}
- name: SLIPWAY_S3_BACKEND_ACCESS_KEY_ID
  valueFrom:
    secretKeyRef:
      name: {{ include "slipway.blob.backendSecretName" . }}
      key: accessKeyId
- name: SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "slipway.blob.backendSecretName" . }}
      key: secretAccessKey
{{- end }}

{{/*
Names and labels of the api component.
*/}}
{{- define "slipway.api.fullname" -}}
{{- printf "%s-api" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.api.labels" -}}
{{ include "slipway.labels" . }}
app.kubernetes.io/component: api
{{- end }}

{{- define "slipway.api.selectorLabels" -}}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/component: api
{{- end }}

{{/*
ServiceAccount the api runs as: its own, so it holds only what the REST API writes.
*/}}
{{- define "slipway.api.serviceAccountName" -}}
{{- if .Values.api.serviceAccount.create }}
{{- default (include "slipway.api.fullname" .) .Values.api.serviceAccount.name }}
{{- else }}
{{- required "api.serviceAccount.name is required when api.serviceAccount.create is false" .Values.api.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Secret holding the database URL: the one named by database.existingSecret, else <fullname>-database (created by
the chart from database.url, or by hand).
*/}}
{{- define "slipway.databaseSecretName" -}}
{{- if and .Values.database.existingSecret .Values.database.url }}
{{- fail "set database.existingSecret or database.url, not both" }}
{{- end }}
{{- default (printf "%s-database" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-") .Values.database.existingSecret }}
{{- end }}

{{/*
Claim holding the api's data: the git repositories (<dataDir>/repos) and the SSH host key (<dataDir>/ssh).
*/}}
{{- define "slipway.api.dataClaimName" -}}
{{- default (printf "%s-data" (include "slipway.api.fullname" .) | trunc 63 | trimSuffix "-") .Values.api.persistence.existingClaim }}
{{- end }}

{{/*
Name of the Secret holding the env keyring (lines of "<key-id> <base64 32-byte key>"; the first seals).
*/}}
{{- define "slipway.envKeysSecretName" -}}
{{- default (printf "%s-env-keys" (include "slipway.fullname" .)) .Values.api.envKeys.existingSecret }}
{{- end }}

{{/*
Name of the Secret holding the key that signs build pods' one-commit source URLs. Only the api mounts it: it signs
the URLs (on the operator's request) and checks them.
*/}}
{{- define "slipway.buildSourceKeySecretName" -}}
{{- printf "%s-build-source-key" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The audience of the ServiceAccount tokens the operator and the edge present on the api's internal listener. A token
minted for this audience is useless against the Kubernetes API, and the api accepts no other.
*/}}
{{- define "slipway.internalAudience" -}}
slipway-internal
{{- end }}

{{/*
A projected volume holding the pod's ServiceAccount token for the api's internal listener (rotated by the kubelet).
*/}}
{{- define "slipway.internalTokenVolume" -}}
- name: internal-token
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          audience: {{ include "slipway.internalAudience" . }}
          expirationSeconds: 3600
          path: token
{{- end }}

{{/*
Name of the api's internal Service: the /internal/v1 listener, reachable only inside the cluster.
*/}}
{{- define "slipway.api.internalServiceName" -}}
{{- printf "%s-internal" (include "slipway.api.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
URL of the api's internal listener, which the operator, the edge and build pods use.
*/}}
{{- define "slipway.api.internalUrl" -}}
{{- printf "http://%s.%s.svc:%v" (include "slipway.api.internalServiceName" .) .Release.Namespace .Values.api.internalPort }}
{{- end }}

{{/*
Names of the ClusterRoles the operator binds in every tenant namespace (rights there, never cluster-wide).
*/}}
{{- define "slipway.operator.tenantRoleName" -}}
{{- printf "%s-tenant" (include "slipway.operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.api.tenantRoleName" -}}
{{- printf "%s-tenant" (include "slipway.api.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The callers of the api's internal listener, ROLE=NAMESPACE/SERVICEACCOUNT: the operator may call every internal
route, the edge only reads static sites' files and reports the bytes it sent.
*/}}
{{- define "slipway.api.internalCallers" -}}
{{- $callers := list (printf "operator=%s/%s" .Release.Namespace (include "slipway.serviceAccountName" .)) }}
{{- if .Values.edge.enabled }}
{{- $callers = append $callers (printf "edge=%s/%s" .Release.Namespace (include "slipway.edge.serviceAccountName" .)) }}
{{- end }}
{{- join "," $callers }}
{{- end }}

{{/*
The data server (channels' SQL databases): whether one is configured, the Secret with its admin URL, and that
URL, the pods' address and the snapshot-download switch as container environment (operator and api only).
*/}}
{{- define "slipway.dataServer.enabled" -}}
{{- if or .Values.dataServer.existingSecret .Values.dataServer.url }}true{{- end }}
{{- end }}

{{/*
"true" when the api serves external SQL access: asked for, and there is a data server to relay to.
*/}}
{{- define "slipway.api.sql.enabled" -}}
{{- if and .Values.api.sql.enabled (include "slipway.dataServer.enabled" .) }}true{{- end }}
{{- end }}

{{- define "slipway.dataServer.secretName" -}}
{{- if and .Values.dataServer.existingSecret .Values.dataServer.url }}
{{- fail "set dataServer.existingSecret or dataServer.url, not both" }}
{{- end }}
{{- default (printf "%s-data-server" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-") .Values.dataServer.existingSecret }}
{{- end }}

{{- define "slipway.dataServer.env" -}}
- name: SLIPWAY_DATA_SERVER_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "slipway.dataServer.secretName" . }}
      key: {{ .Values.dataServer.secretKey | quote }}
{{- end }}

{{- /* Whether the api serves the web console: on, with a URL. */}}
{{- define "slipway.api.console.enabled" -}}
{{- if and .Values.api.enabled .Values.api.console.enabled .Values.api.console.url }}true{{- end }}
{{- end }}

{{- define "slipway.api.ssh.hostKeySecretName" -}}
{{- default (printf "%s-ssh-host-key" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-") .Values.api.ssh.hostKeySecret }}
{{- end }}

{{- define "slipway.api.console.secretName" -}}
{{- default (printf "%s-console" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-") .Values.api.console.existingSecret }}
{{- end }}

{{- /* Whether the console signs people in at the upstream provider (the one end-user sign-in uses). */}}
{{- define "slipway.api.console.upstream" -}}
{{- if and (include "slipway.api.console.enabled" .) .Values.edge.enabled .Values.signIn.enabled .Values.signIn.upstream.issuer }}true{{- end }}
{{- end }}

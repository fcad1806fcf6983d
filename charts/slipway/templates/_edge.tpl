{{/*
Names and labels of the edge component.
*/}}
{{- define "slipway.edge.fullname" -}}
{{- printf "%s-edge" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.edge.labels" -}}
{{ include "slipway.labels" . }}
app.kubernetes.io/component: edge
{{- end }}

{{- define "slipway.edge.selectorLabels" -}}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/component: edge
{{- end }}

{{/*
ServiceAccount the edge runs as: its own, with read access to what routing needs.
*/}}
{{- define "slipway.edge.serviceAccountName" -}}
{{- if .Values.edge.serviceAccount.create }}
{{- default (include "slipway.edge.fullname" .) .Values.edge.serviceAccount.name }}
{{- else }}
{{- required "edge.serviceAccount.name is required when edge.serviceAccount.create is false" .Values.edge.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The forward range as the operator takes it: host:first-last.
*/}}
{{- define "slipway.forward.ports" -}}
{{- $last := add .Values.forward.firstPort .Values.forward.ports -1 -}}
{{- printf "%s:%d-%d" (required "forward.host is required when forward.enabled is true: the public host clients connect to" .Values.forward.host) (int .Values.forward.firstPort) (int $last) -}}
{{- end }}

{{/*
{auth_url}: the issuer of identity cookies, served by the edge.
*/}}
{{- define "slipway.authUrl" -}}
{{- default (printf "https://auth.%s" (include "slipway.appDomain" .)) .Values.signIn.authUrl }}
{{- end }}

{{- define "slipway.signInSecretName" -}}
{{- default (printf "%s-sign-in" (include "slipway.fullname" .)) .Values.signIn.existingSecret }}
{{- end }}

{{- define "slipway.signInClientSecretName" -}}
{{- default (printf "%s-sign-in-client" (include "slipway.fullname" .)) .Values.signIn.upstream.existingSecret }}
{{- end }}

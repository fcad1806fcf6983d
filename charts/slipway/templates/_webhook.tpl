{{/*
Names and labels of the admission webhook component.
*/}}
{{- define "slipway.webhook.fullname" -}}
{{- printf "%s-webhook" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "slipway.webhook.labels" -}}
{{ include "slipway.labels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "slipway.webhook.selectorLabels" -}}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/*
ServiceAccount the webhook runs as: its own, so it holds read access only.
*/}}
{{- define "slipway.webhook.serviceAccountName" -}}
{{- if .Values.webhook.serviceAccount.create }}
{{- default (include "slipway.webhook.fullname" .) .Values.webhook.serviceAccount.name }}
{{- else }}
{{- required "webhook.serviceAccount.name is required when webhook.serviceAccount.create is false" .Values.webhook.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Name of the Secret holding the webhook's serving certificate and its CA.
*/}}
{{- define "slipway.webhook.tlsSecretName" -}}
{{- printf "%s-tls" (include "slipway.webhook.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

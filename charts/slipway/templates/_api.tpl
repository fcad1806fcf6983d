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
Claim holding the git repositories.
*/}}
{{- define "slipway.api.reposClaimName" -}}
{{- default (printf "%s-repos" (include "slipway.api.fullname" .) | trunc 63 | trimSuffix "-") .Values.api.persistence.existingClaim }}
{{- end }}

{{/*
Name of the Secret holding the env keyring (lines of "<key-id> <base64 32-byte key>"; the first seals).
*/}}
{{- define "slipway.envKeysSecretName" -}}
{{- default (printf "%s-env-keys" (include "slipway.fullname" .)) .Values.api.envKeys.existingSecret }}
{{- end }}

{{/*
Name of the Secret holding the internal token the api, the operator and the edge share (the api's /internal/v1
routes, and the key that signs build pods' source URLs).
*/}}
{{- define "slipway.internalTokenSecretName" -}}
{{- printf "%s-internal-token" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
URL of the api inside the cluster, which the operator and build pods use.
*/}}
{{- define "slipway.api.internalUrl" -}}
{{- printf "http://%s.%s.svc:%v" (include "slipway.api.fullname" .) .Release.Namespace .Values.api.port }}
{{- end }}

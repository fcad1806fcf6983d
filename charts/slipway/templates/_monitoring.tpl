{{/*
The components Prometheus scrapes, as a JSON list: each with its job (the name of its Deployment, which the
PodMonitors give its targets as `job`), its pods' selector labels and the name of its metrics port. Only the
components the release runs.
*/}}
{{- define "slipway.monitoring.components" -}}
{{- $components := list (dict "job" (include "slipway.operator.fullname" .) "port" "http-metrics" "selector" (include "slipway.operator.selectorLabels" . | fromYaml)) }}
{{- if .Values.api.enabled }}
{{- $components = append $components (dict "job" (include "slipway.api.fullname" .) "port" "internal" "selector" (include "slipway.api.selectorLabels" . | fromYaml)) }}
{{- end }}
{{- if .Values.edge.enabled }}
{{- $components = append $components (dict "job" (include "slipway.edge.fullname" .) "port" "http-metrics" "selector" (include "slipway.edge.selectorLabels" . | fromYaml)) }}
{{- end }}
{{- if .Values.blob.enabled }}
{{- $components = append $components (dict "job" (include "slipway.blob.gateway.fullname" .) "port" "admin" "selector" (include "slipway.blob.gateway.selectorLabels" . | fromYaml)) }}
{{- end }}
{{- if .Values.webhook.enabled }}
{{- $components = append $components (dict "job" (include "slipway.webhook.fullname" .) "port" "http-metrics" "selector" (include "slipway.webhook.selectorLabels" . | fromYaml)) }}
{{- end }}
{{- toJson $components }}
{{- end }}

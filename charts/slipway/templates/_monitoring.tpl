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

{{/*
The PromQL label matchers of every series of this release's components: its namespace, and a job of one of them
(`job=~"slipway-(operator|api|...)"`, the jobs' common prefix taken out when they share the release's).
*/}}
{{- define "slipway.monitoring.selector" -}}
{{- $prefix := printf "%s-" (include "slipway.fullname" .) }}
{{- $jobs := list }}
{{- $shared := true }}
{{- range include "slipway.monitoring.components" . | fromJsonArray }}
{{- $jobs = append $jobs .job }}
{{- if not (hasPrefix $prefix .job) }}{{ $shared = false }}{{ end }}
{{- end }}
{{- $quoted := list }}
{{- range $jobs }}
{{- $quoted = append $quoted (regexQuoteMeta (ternary (trimPrefix $prefix .) . $shared)) }}
{{- end }}
{{- $regex := join "|" $quoted }}
{{- if $shared }}
{{- $regex = printf "%s(%s)" (regexQuoteMeta $prefix) $regex }}
{{- end }}
{{- /* A backslash of the regex is written twice inside a PromQL string. */}}
{{- printf "namespace=%q, job=~\"%s\"" .Release.Namespace (replace "\\" "\\\\" $regex) }}
{{- end }}

{{/*
An alert's `for` (left out when empty or 0) and labels: its severity and monitoring.rules.alertLabels.
*/}}
{{- define "slipway.monitoring.alertFooter" -}}
{{- with .alert.for }}
{{- if ne (toString .) "0" }}
for: {{ . }}
{{- end }}
{{- end }}
labels:
  severity: {{ required "every monitoring.rules.alerts entry needs a severity" .alert.severity }}
  {{- with .rules.alertLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

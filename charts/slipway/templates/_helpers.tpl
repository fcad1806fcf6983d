{{/*
Chart name, overridable with nameOverride.
*/}}
{{- define "slipway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified name used as the prefix of every object: <release>-<chart>, or the release name alone when it
already contains the chart name. Truncated to 63 characters (the DNS label limit).
*/}}
{{- define "slipway.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Name of the operator's objects.
*/}}
{{- define "slipway.operator.fullname" -}}
{{- printf "%s-operator" (include "slipway.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "slipway.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "slipway.labels" -}}
helm.sh/chart: {{ include "slipway.chart" . }}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: slipway
{{- end }}

{{/*
Selector labels: stable across upgrades, so they must not include versions.
*/}}
{{- define "slipway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "slipway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels and selector labels of the operator component.
*/}}
{{- define "slipway.operator.labels" -}}
{{ include "slipway.labels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "slipway.operator.selectorLabels" -}}
{{ include "slipway.selectorLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
ServiceAccount the operator runs as.
*/}}
{{- define "slipway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "slipway.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "slipway.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}

{{/*
The platform's public names, required by the components that form hostnames and clone URLs.
*/}}
{{- define "slipway.appDomain" -}}
{{- required "appDomain is required: the domain channel hostnames are formed under (for example --set appDomain=apps.example.com)" .Values.appDomain }}
{{- end }}

{{- define "slipway.gitHost" -}}
{{- required "gitHost is required by the api: the host of the git transports (for example --set gitHost=git.example.com)" .Values.gitHost }}
{{- end }}

{{/*
The namespace of certificate Secrets and the ACME account. The edge may read every Secret there, so it must never be
the release namespace, where the database URL and the env keyring are.
*/}}
{{- define "slipway.certificateNamespace" -}}
{{- $ns := required "tls.certificateNamespace is required: a namespace of its own for certificate Secrets, created beforehand" .Values.tls.certificateNamespace }}
{{- if eq $ns .Release.Namespace }}
{{- fail "tls.certificateNamespace must not be the release namespace: the edge reads every Secret in it" }}
{{- end }}
{{- $ns }}
{{- end }}

{{/*
The share of their plan's CPU that apps' pods request, checked here so a wrong value fails the install, not the
operator's start.
*/}}
{{- define "slipway.cpuRequestPercent" -}}
{{- $percent := toString .Values.workloads.cpuRequestPercent }}
{{- if or (not (regexMatch "^[0-9]+$" $percent)) (lt (atoi $percent) 1) (gt (atoi $percent) 100) }}
{{- fail (printf "workloads.cpuRequestPercent must be a whole number from 1 to 100, not %v" .Values.workloads.cpuRequestPercent) }}
{{- end }}
{{- atoi $percent }}
{{- end }}

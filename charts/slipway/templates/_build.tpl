{{/*
What builds are trusted with. The cluster registry's token auth: the api answers the registry's token requests
(/registry/token) and the operator mints build and platform tokens, both with the key in
build.registryAuth.existingSecret. BuildKit's mutual TLS: the operator signs each build's client certificate with
the CA in build.buildkitTls.existingSecret.
*/}}
{{- define "slipway.registryAuth.env" -}}
{{- with .Values.build.registryAuth }}
{{- if .existingSecret }}
- name: SLIPWAY_REGISTRY_TOKEN_KEY_FILE
  value: /etc/slipway/registry-token/{{ .secretKey }}
- name: SLIPWAY_REGISTRY_TOKEN_KEY_ID
  value: {{ .keyId | quote }}
- name: SLIPWAY_REGISTRY_TOKEN_ISSUER
  value: {{ .issuer | quote }}
- name: SLIPWAY_REGISTRY_TOKEN_SERVICE
  value: {{ .service | quote }}
{{- end }}
{{- end }}
{{- end }}

{{- define "slipway.registryAuth.volumeMount" -}}
{{- if .Values.build.registryAuth.existingSecret }}
- name: registry-token-key
  mountPath: /etc/slipway/registry-token
  readOnly: true
{{- end }}
{{- end }}

{{- define "slipway.registryAuth.volume" -}}
{{- with .Values.build.registryAuth.existingSecret }}
- name: registry-token-key
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end }}
{{- end }}

{{- define "slipway.buildkitTls.env" -}}
{{- if .Values.build.buildkitTls.existingSecret }}
- name: SLIPWAY_BUILDKIT_CA_CERT_FILE
  value: /etc/slipway/buildkit-ca/ca.crt
- name: SLIPWAY_BUILDKIT_CA_KEY_FILE
  value: /etc/slipway/buildkit-ca/ca.key
{{- end }}
{{- end }}

{{- define "slipway.buildkitTls.volumeMount" -}}
{{- if .Values.build.buildkitTls.existingSecret }}
- name: buildkit-ca
  mountPath: /etc/slipway/buildkit-ca
  readOnly: true
{{- end }}
{{- end }}

{{- define "slipway.buildkitTls.volume" -}}
{{- with .Values.build.buildkitTls.existingSecret }}
- name: buildkit-ca
  secret:
    secretName: {{ . }}
    defaultMode: 0400
{{- end }}
{{- end }}

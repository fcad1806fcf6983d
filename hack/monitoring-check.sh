#!/usr/bin/env bash
# Checks the chart's monitoring objects without a cluster (the lint tier runs it):
#   1. `helm lint --strict` with monitoring off and on, and `helm template` with every monitoring object on: with
#      every component, with only the operator, and with every alert turned off;
#   2. each rendered PodMonitor and PrometheusRule against its CRD's openAPIV3Schema (prometheus-operator's
#      example/prometheus-operator-crd, from the Go module proxy), refusing fields the schema does not declare;
#   3. `promtool check rules` on the rendered rules, and `promtool test rules` with hack/monitoring/rules-test.yaml
#      beside them: each alert firing when its condition holds and quiet when it does not;
#   4. the dashboard: the ConfigMap carries dashboards/slipway.json unchanged, every query uses the `datasource`
#      variable, and promtool parses every query.
# It prints what it checked and the slipway_* metrics the rules and the dashboard read. promtool is built once
# (hack/build-promtool.sh), the CRDs are downloaded once into the Go module cache, and the checker's Python packages
# are installed once into a virtualenv of their own; a warm run takes a few seconds.
#
# usage: hack/monitoring-check.sh
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
LOG_TAG=monitoring
source "$HACK/lib.sh"

started=$SECONDS
HELM=${HELM:-$("$HACK/build-helm.sh")}
PROMTOOL=$("$HACK/build-promtool.sh")
pypi_venv "$MONITORING_CHECK_VENV" "jsonschema, yaml" -r "$MONITORING_CHECK_REQUIREMENTS"
check() { "$MONITORING_CHECK_VENV/bin/python" -u "$HACK/monitoring/check.py" "$@"; }
module=github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION
# Into the Go module cache, once: the module's source holds the CRDs the operator's releases ship.
download=$(GOTOOLCHAIN=local go mod download -json "$module") || die "go mod download $module: $(jq -r .Error <<<"$download")"
crds=$(jq -r .Dir <<<"$download")/example/prometheus-operator-crd
[ -d "$crds" ] || die "$module has no example/prometheus-operator-crd"
crd_files=("$crds"/monitoring.coreos.com_{podmonitors,servicemonitors,prometheusrules}.yaml)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chart=charts/slipway
on=(--set monitoring.podMonitors.enabled=true --set monitoring.rules.enabled=true
  --set monitoring.dashboard.enabled=true)
only_operator=(--set api.enabled=false --set edge.enabled=false --set webhook.enabled=false --set blob.enabled=false)
no_alerts=()
for alert in $("$MONITORING_CHECK_VENV/bin/python" -c 'import sys, yaml
print(*yaml.safe_load(open(sys.argv[1]))["monitoring"]["rules"]["alerts"])' "$chart/values.yaml"); do
  no_alerts+=(--set "monitoring.rules.alerts.$alert.enabled=false")
done

log "helm lint --strict, monitoring off and on"
"$HELM" lint --strict --quiet "$chart" >/dev/null
"$HELM" lint --strict --quiet "$chart" "${on[@]}" >/dev/null
# The release the unit tests name: `slipway` in `slipway-system`, default values.
"$HELM" template slipway "$chart" --namespace slipway-system "${on[@]}" >"$tmp/all.yaml"
"$HELM" template slipway "$chart" --namespace slipway-system "${on[@]}" "${only_operator[@]}" >"$tmp/operator.yaml"

log "rendered objects against the CRDs of prometheus-operator $PROMETHEUS_OPERATOR_VERSION"
check objects "$tmp/all.yaml" "${crd_files[@]}"
log "the same, with only the operator enabled"
check objects "$tmp/operator.yaml" "${crd_files[@]}"
log "the same, with every alert turned off"
"$HELM" template slipway "$chart" --namespace slipway-system "${on[@]}" "${no_alerts[@]}" >"$tmp/no-alerts.yaml"
check objects "$tmp/no-alerts.yaml" "${crd_files[@]}"

log "alerting rules: promtool check rules and test rules ($("$PROMTOOL" --version | head -1))"
check rules "$tmp/all.yaml" "$tmp/rules.yaml"
"$PROMTOOL" check rules "$tmp/rules.yaml" | sed '/^$/d; s/^/  /'
check rules "$tmp/operator.yaml" "$tmp/rules-operator.yaml"
"$PROMTOOL" check rules "$tmp/rules-operator.yaml" | sed '/^$/d; s/^/  /'
cp hack/monitoring/rules-test.yaml "$tmp/"
(cd "$tmp" && "$PROMTOOL" test rules rules-test.yaml) | sed '/^$/d; s/^/  /'
check cases "$tmp/rules.yaml" hack/monitoring/rules-test.yaml

log "dashboard"
check dashboard "$chart/dashboards/slipway.json" "$tmp/all.yaml" "$tmp/dashboard-queries.yaml"
"$PROMTOOL" check rules "$tmp/dashboard-queries.yaml" | sed '/^$/d; s/^/  /'

log "metrics the rules and the dashboard read"
check metrics "$tmp/rules.yaml" "$tmp/dashboard-queries.yaml"
log "monitoring checked in $((SECONDS - started))s"

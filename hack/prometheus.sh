#!/usr/bin/env bash
# A Prometheus server on this machine that scrapes the chart-installed platform (hack/install.sh) the way
# prometheus-operator would scrape it from the chart's PodMonitors, and evaluates the chart's PrometheusRule.
#
# `start` renders the chart with the release's own values (`helm get values`), hack/monitoring/e2e-values.yaml (the
# monitoring objects on, short intervals and windows) and any further `--set`/`--values` arguments; translates the
# rendered PodMonitors into scrape jobs with Kubernetes pod discovery and the PrometheusRule into a rules file
# (hack/monitoring/prometheus_config.py); checks the rules with promtool; and starts Prometheus (built once from the
# Go module proxy, hack/build-prometheus.sh) on 127.0.0.1:$SLIPWAY_PROMETHEUS_PORT (29090 + the node's slot). It
# reaches the pods over the route to the pod network the node gives this machine. `env` prints
# SLIPWAY_TEST_PROMETHEUS_URL.
#
# usage: hack/prometheus.sh start [HELM-ARGS...] | stop | env
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
source "$HACK/versions.sh"
LOG_TAG=prometheus
source "$HACK/lib.sh"

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
SLOT=${SLIPWAY_NODE_SLOT:-0}
PORT=${SLIPWAY_PROMETHEUS_PORT:-$((29090 + SLOT))}
DIR="$SLIPWAY_RUN/prometheus"
RELEASE=slipway
NAMESPACE=slipway-system

env_lines() {
  echo "export SLIPWAY_TEST_PROMETHEUS_URL=http://127.0.0.1:$PORT"
}

stop() {
  kill_pidfiles "$DIR" prometheus
  stop_naming "$DIR"
}

start() {
  local prometheus promtool helm
  prometheus=$("$HACK/build-prometheus.sh")
  promtool=$("$HACK/build-promtool.sh")
  helm=$("$HACK/build-helm.sh")
  eval "$("$HACK/node.sh" env)"
  pypi_venv "$MONITORING_CHECK_VENV" "jsonschema, yaml" -r "$MONITORING_CHECK_REQUIREMENTS"
  stop
  rm -rf "$DIR"
  mkdir -p "$DIR/pids"
  "$helm" --kubeconfig "$KUBECONFIG" get values "$RELEASE" --namespace "$NAMESPACE" -o yaml >"$DIR/release-values.yaml"
  "$helm" template "$RELEASE" "$ROOT/charts/slipway" --namespace "$NAMESPACE" --values "$DIR/release-values.yaml" \
    --values "$HACK/monitoring/e2e-values.yaml" "$@" >"$DIR/rendered.yaml"
  log "$("$MONITORING_CHECK_VENV/bin/python" "$HACK/monitoring/prometheus_config.py" "$DIR/rendered.yaml" \
    "$KUBECONFIG" "$DIR")"
  "$promtool" check rules "$DIR/rules.yaml" | sed '/^$/d; s/^/  /' >&2
  "$prometheus" --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/data" \
    --web.listen-address="127.0.0.1:$PORT" >"$DIR/prometheus.log" 2>&1 &
  echo $! >"$DIR/pids/prometheus"
  for _ in $(seq 300); do
    if curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null; then
      log "ready on 127.0.0.1:$PORT ($("$prometheus" --version | head -1))"
      return
    fi
    kill -0 "$(cat "$DIR/pids/prometheus")" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 20 "$DIR/prometheus.log" >&2
  die "prometheus did not start"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop; log "stopped" ;;
  env) env_lines ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

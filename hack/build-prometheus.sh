#!/usr/bin/env bash
# Builds the Prometheus server from the Go module proxy, once per machine, into
# $SLIPWAY_CACHE/prometheus-<version>/bin/prometheus. A server already there is not built again. Prints the path of
# the binary on stdout. The e2e tier runs it against the chart-installed platform (hack/prometheus.sh).
#
# usage: hack/build-prometheus.sh
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=build-prometheus

# Of the service discoveries Prometheus registers as plugins (AWS, Azure, GCE, ...), only Kubernetes': their SDKs are
# most of the build, and the e2e tier finds its targets the way prometheus-operator's PodMonitors do, by pod.
# Without `builtinassets` the web UI is left out; the HTTP API the tests read is there.
GO_TAGS="remove_all_sd enable_kubernetes_sd"
# The version `prometheus --version` prints, set the way Prometheus's release build sets it
# (module v0.316.0 is Prometheus 3.16.0).
minor=$(cut -d. -f2 <<<"$PROMETHEUS_VERSION")
release="${minor:0:1}.$((10#${minor:1})).$(cut -d. -f3 <<<"$PROMETHEUS_VERSION")"
GO_LDFLAGS="-X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=HEAD"
GO_TAGS=$GO_TAGS GO_LDFLAGS=$GO_LDFLAGS go_build prometheus "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/prometheus
echo "$SLIPWAY_CACHE/prometheus-$PROMETHEUS_VERSION/bin/prometheus"

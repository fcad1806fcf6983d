#!/usr/bin/env bash
# Builds promtool (Prometheus's rule checker and rule unit-test runner) from the Go module proxy, once per machine,
# into $SLIPWAY_CACHE/promtool-<version>/bin/promtool. A promtool already there is not built again. Prints the path
# of the binary on stdout.
#
# usage: hack/build-promtool.sh
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=build-promtool

# Without the service discoveries promtool registers as plugins (AWS, Azure, GCE, ...): their SDKs are most of the
# build, and checking and testing rules needs none of them.
GO_TAGS=remove_all_sd
# The version `promtool --version` prints, set the way Prometheus's release build sets it
# (module v0.316.0 is Prometheus 3.16.0).
minor=$(cut -d. -f2 <<<"$PROMETHEUS_VERSION")
release="${minor:0:1}.$((10#${minor:1})).$(cut -d. -f3 <<<"$PROMETHEUS_VERSION")"
GO_LDFLAGS="-X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=HEAD"
GO_TAGS=$GO_TAGS GO_LDFLAGS=$GO_LDFLAGS go_build promtool "$PROMETHEUS_VERSION" github.com/prometheus/prometheus/cmd/promtool
echo "$SLIPWAY_CACHE/promtool-$PROMETHEUS_VERSION/bin/promtool"

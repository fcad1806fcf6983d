#!/usr/bin/env bash
# Runs the benchmarks against the real parts (a control plane and Postgres of their own, stopped afterwards) and
# prints their figures. Benchmarks measure; they assert nothing about time.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"

"$HACK/install-deps.sh"
export SLIPWAY_RUN="$SLIPWAY_CACHE/run-bench" SLIPWAY_ETCD_PORT=32379 SLIPWAY_APISERVER_PORT=36443 SLIPWAY_PG_PORT=35432
trap '"$HACK/control-plane.sh" stop; "$HACK/postgres.sh" stop' EXIT
"$HACK/control-plane.sh" start
SLIPWAY_TEST_DATABASE_URL=$("$HACK/postgres.sh" start)
export SLIPWAY_TEST_DATABASE_URL SLIPWAY_KUBECONFIG="$SLIPWAY_RUN/control-plane/admin.kubeconfig"
cargo bench --locked --bench get_apps
cargo bench --locked --bench git_transport
cargo bench --locked --bench edge

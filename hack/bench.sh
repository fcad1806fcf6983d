#!/usr/bin/env bash
# Runs the benchmarks against the real parts (a single-node cluster and Postgres of their own, on node slot
# $SLIPWAY_BENCH_NODE_SLOT (default 6), stopped afterwards) and prints their figures. Benchmarks measure; they
# assert nothing about time.
#
# usage: hack/bench.sh [get_apps|git_transport|edge|deploy_to_ready|blob|forward|postgres|sql_proxy]...   (default: all)
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
benches=("$@")
[ ${#benches[@]} -gt 0 ] || benches=(get_apps git_transport edge deploy_to_ready blob forward postgres sql_proxy)

"$HACK/install-deps.sh"
# The blob benchmark starts its own versitygw from this build.
"$HACK/s3.sh" build
export SLIPWAY_RUN="$SLIPWAY_CACHE/run-bench" SLIPWAY_ETCD_PORT=21389 SLIPWAY_APISERVER_PORT=21643 SLIPWAY_PG_PORT=21442
export SLIPWAY_NODE_SLOT=${SLIPWAY_BENCH_NODE_SLOT:-6}
export SLIPWAY_PEBBLE_PORT=${SLIPWAY_BENCH_PEBBLE_PORT:-21400}
# The postgres and sql_proxy benchmarks' channel databases live on a data server of its own, as in the cluster tier.
data_server() { SLIPWAY_PG_DATA_SERVER=1 SLIPWAY_PG_PORT=${SLIPWAY_BENCH_DATA_PORT:-21443} "$HACK/postgres.sh" "$@"; }
trap '"$HACK/node.sh" stop; "$HACK/postgres.sh" stop; data_server stop; "$HACK/pebble.sh" stop' EXIT
"$HACK/node.sh" start
eval "$("$HACK/node.sh" env)"
# The edge benchmark's custom domain: Pebble issues its certificate, its test DNS answers verification.
"$HACK/pebble.sh" start
eval "$("$HACK/pebble.sh" env)"
SLIPWAY_TEST_DATABASE_URL=$("$HACK/postgres.sh" start)
SLIPWAY_TEST_DATA_SERVER_URL=$(data_server start)
export SLIPWAY_TEST_DATABASE_URL SLIPWAY_TEST_DATA_SERVER_URL SLIPWAY_KUBECONFIG="$KUBECONFIG"
for bench in "${benches[@]}"; do
  cargo bench --locked --bench "$bench"
done

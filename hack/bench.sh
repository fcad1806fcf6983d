#!/usr/bin/env bash
# Runs the benchmarks against the real parts and prints their figures. Benchmarks measure; they assert nothing
# about time.
#
# usage: hack/bench.sh [get_apps|git_transport|edge|edge_scale|deploy_to_ready|blob|forward|postgres|
#                      bucket_checkpoint|sql_proxy|scale]...
#        (default: all)
#
# Every benchmark but `scale` runs on a single-node cluster and Postgres of their own (node slot
# $SLIPWAY_BENCH_NODE_SLOT, default 6), stopped afterwards. `scale` (10,000 channels, ~5 minutes) needs no node: it
# runs on a control plane and Postgres of its own, on ports of their own ($SLIPWAY_BENCH_SCALE_ETCD_PORT 21589 and the
# next, $SLIPWAY_BENCH_SCALE_APISERVER_PORT 21543, $SLIPWAY_BENCH_SCALE_PG_PORT 21542), also stopped afterwards.
# Its components' logs are kept in $SLIPWAY_CACHE/run-bench-scale/scale-logs (the last run's).
#
# The benchmarks build into the tests' target directory, $SLIPWAY_CACHE/target (or $CARGO_TARGET_DIR when set),
# not incrementally, as hack/test.sh does: a benchmark run after the tests compiles only the workspace's own crates
# in release, not every dependency again.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$SLIPWAY_CACHE/target}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
requested=("$@")
[ ${#requested[@]} -gt 0 ] || requested=(get_apps git_transport edge edge_scale deploy_to_ready blob forward postgres bucket_checkpoint sql_proxy scale)
benches=()
scale=""
for bench in "${requested[@]}"; do
  if [ "$bench" = scale ]; then scale=1; else benches+=("$bench"); fi
done

"$HACK/install-deps.sh"

# The benchmarks on a node.
on_node() {
  # The blob benchmarks start their own versitygw from this build.
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
}

# The scale benchmark on a control plane without a node.
on_control_plane() {
  "$HACK/build-kube.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
  export SLIPWAY_RUN="$SLIPWAY_CACHE/run-bench-scale" SLIPWAY_ETCD_PORT=${SLIPWAY_BENCH_SCALE_ETCD_PORT:-21589}
  export SLIPWAY_APISERVER_PORT=${SLIPWAY_BENCH_SCALE_APISERVER_PORT:-21543} SLIPWAY_PG_PORT=${SLIPWAY_BENCH_SCALE_PG_PORT:-21542}
  trap '"$HACK/control-plane.sh" stop; "$HACK/postgres.sh" stop' EXIT
  "$HACK/control-plane.sh" start
  SLIPWAY_TEST_DATABASE_URL=$("$HACK/postgres.sh" start)
  export SLIPWAY_TEST_DATABASE_URL SLIPWAY_KUBECONFIG="$SLIPWAY_RUN/control-plane/admin.kubeconfig"
  cargo bench --locked --bench scale
}

if [ ${#benches[@]} -gt 0 ]; then (on_node); fi
if [ -n "$scale" ]; then (on_control_plane); fi

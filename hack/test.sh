#!/usr/bin/env bash
# Runs every test tier, in order, and stops at the first that fails:
#   1. lint     cargo fmt --check, hack/layers (no cycle between crates or modules), hack/same-features.sh (the
#               shipped binary builds on the tests' build), clippy with -D warnings, and
#               hack/monitoring-check.sh: helm lint --strict with monitoring off and on, the rendered PodMonitors and
#               PrometheusRule against prometheus-operator's CRD schemas, promtool check rules and test rules (each
#               alert firing and quiet on recorded series), the dashboard's queries; and that the chart refuses to
#               render a second api replica
#   2. unit     every crate's unit tests and the CRD drift test (no cluster)
#   3. cluster  tests/cluster/ against a real control plane, a real Postgres and Pebble (ACME CA and test DNS, for
#               custom domains) started for this run and stopped after it
#   4. e2e      tests/e2e_platform/ and tests/e2e/ against a real local cluster (hack/node.sh: kubelet,
#               containerd, CNI, kube-proxy, kube-router, CoreDNS, registry, BuildKit) started for this run (in the
#               background while the cluster tier runs, with the platform installed on it and its alerts' tests run
#               on it first) and stopped after it
# No tier is skipped: a part that cannot be built or started fails the run.
# At the end: each tier's time and the CPU time the machine spent during it, and the whole run's CPU time.
#
# usage: hack/test.sh [lint|unit|cluster|e2e]...   (default: all four)
#
# Each cluster and e2e test binary runs $SLIPWAY_TEST_THREADS (4) tests at once. The cluster tier is one binary
# (tests/cluster/main.rs), and so are the e2e tests that run the components in the test process (tests/e2e/main.rs).
#
# SLIPWAY_TESTS, globs over the test files' names separated by spaces (for example `cluster_forward` or
# `cluster_forward e2e_blob*`; tests/cluster/forward.rs is `cluster_forward`, tests/e2e/blob.rs `e2e_blob`), narrows
# the cluster and e2e tiers to the matching files; the chart is installed only when an e2e_platform file matches.
#
# The test clusters keep apart from `make up`: state under $SLIPWAY_TEST_RUN (default ~/.cache/slipway/run-test),
# ports from $SLIPWAY_TEST_ETCD_PORT (22379; e2e uses +2) and $SLIPWAY_TEST_APISERVER_PORT (26443; e2e uses +1),
# node slot $SLIPWAY_TEST_NODE_SLOT (1), Pebble's ports from $SLIPWAY_TEST_PEBBLE_PORT (24400, see hack/pebble.sh), the
# channels' data server's port from $SLIPWAY_TEST_DATA_PORT (25500; e2e uses +1), the upstream OIDC provider's from
# $SLIPWAY_TEST_OIDC_PORT (29400), the SMTP server's from $SLIPWAY_TEST_SMTP_PORT (29525). Set them to run two test runs side by side.
#
# Every checkout builds into one cargo target directory, $SLIPWAY_CACHE/target (or $CARGO_TARGET_DIR when set), like
# the parts above: a fresh clone then compiles the workspace's own crates again but none of their dependencies. The
# build is not incremental unless $CARGO_INCREMENTAL says so.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$SLIPWAY_CACHE/target}
# Without incremental compilation: a fresh clone's sources sit at another path than the last run's, so the last
# run's incremental state is not reused, and writing it made the workspace's crates build a quarter slower and held
# about 10 GB.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

tiers=("$@")
[ ${#tiers[@]} -gt 0 ] || tiers=(lint unit cluster e2e)
TEST_RUN=${SLIPWAY_TEST_RUN:-$SLIPWAY_CACHE/run-test}
# Tests at once in each cluster and e2e test binary: they spend their time waiting (for the apiserver, reconcilers,
# builds and pods), not computing, so more run at once than the machine has cores.
TEST_THREADS=${SLIPWAY_TEST_THREADS:-4}
ETCD_PORT=${SLIPWAY_TEST_ETCD_PORT:-22379}
APISERVER_PORT=${SLIPWAY_TEST_APISERVER_PORT:-26443}

# The machine's busy CPU time so far, in seconds: every CPU's time outside idle and I/O wait (/proc/stat), whoever
# spent it (the tests, the cluster's components, the tenants' builds).
cpu_busy() {
  awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%d\n", ($2 + $3 + $4 + $7 + $8 + $9) / hz; exit }' /proc/stat
}
cores=$(nproc)
started=$SECONDS run_busy=$(cpu_busy)
results="$(mktemp)"
node_parts_pid=
e2e_prepare_pid=
e2e_prepared=
trap 'rm -f "$results"; [ -z "$node_parts_pid" ] || kill -- "-$node_parts_pid" 2>/dev/null || true; [ -z "$e2e_prepared" ] || e2e_teardown' EXIT
log() { printf '\n[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# Whether the test file named $1 is among those to run.
selected() {
  local glob globs
  read -ra globs <<<"${SLIPWAY_TESTS:-*}"
  for glob in "${globs[@]}"; do [[ $1 == $glob ]] && return 0; done
  return 1
}

# The test filters that run the modules of the test binary tests/$1/ (cluster or e2e) whose names, `$1_<file>`, are
# selected: nothing when all are, `<file>::` for each selected one otherwise; fails when none is.
module_filters() {
  local f name all=1 some=0 filters=()
  for f in "tests/$1"/*.rs; do
    name=$(basename "$f" .rs)
    [ "$name" != main ] || continue
    if selected "$1_$name"; then some=1; filters+=("$name::"); else all=0; fi
  done
  [ "$some" = 1 ] || return 1
  [ "$all" = 1 ] || echo "${filters[*]}"
}

# Runs a cargo test command, echoing its output and keeping the result lines for the summary.
cargo_test() {
  local status=0
  cargo test "$@" 2>&1 | tee -a "$results" || status=$?
  return "$status"
}

"$HACK/install-deps.sh"
"$HACK/build-kube.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
HELM=$("$HACK/build-helm.sh")
# Object storage: the blob tests start a versitygw of their own per test (testkit::s3) from this build.
"$HACK/s3.sh" build
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# The JWT library the sign-in test's app carries (hack/install-deps.sh packed it).
export SLIPWAY_TEST_JOSE_TGZ="$SLIPWAY_CACHE/npm/jose-$JOSE_VERSION.tgz"
# The OpenAPI document's check (hack/install-deps.sh installed it).
export SLIPWAY_TEST_SCHEMATHESIS="$SCHEMATHESIS_VENV/bin/schemathesis"

tier_lint() {
  log "tier lint: rustfmt, layers, clippy, helm lint, the chart's monitoring objects and its refusals"
  cargo fmt --all --check
  hack/layers
  hack/same-features.sh
  cargo clippy --workspace --all-targets --locked -- -D warnings
  # helm lint --strict (monitoring off and on) and the checks of the PodMonitors, rules and dashboard.
  HELM=$HELM hack/monitoring-check.sh
  # The chart refuses what it cannot run: a second api replica, with the repositories on one volume.
  local refused
  if refused=$("$HELM" template t charts/slipway --set appDomain=apps.example.com --set api.git.storage=volume \
    --set api.replicaCount=2 2>&1); then
    echo "the chart rendered api.replicaCount=2 with api.git.storage=volume, which it must refuse" >&2
    return 1
  fi
  if ! grep -q "api.replicaCount must be 1" <<<"$refused"; then
    echo "the chart refused api.replicaCount=2 for another reason: $refused" >&2
    return 1
  fi
  log "the chart refuses api.replicaCount=2 with api.git.storage=volume"
  # By default the repositories are in object storage: two replicas, rolled, with only a cache per pod.
  local rendered api want
  rendered=$("$HELM" template t charts/slipway --set appDomain=apps.example.com)
  api=$(awk '/^# Source: slipway\/templates\/api-deployment.yaml/{on=1;next} /^# Source:/{on=0} on' <<<"$rendered")
  for want in "replicas: 2" "value: object-store" "sizeLimit: 20Gi" "topologyKey: kubernetes.io/hostname"; do
    if ! grep -q "$want" <<<"$api"; then
      echo "the chart's default api lacks \"$want\"" >&2
      return 1
    fi
  done
  if grep -q "type: Recreate" <<<"$api" || grep -q "api-data-pvc.yaml" <<<"$rendered"; then
    echo "the chart's default api still recreates or claims a volume" >&2
    return 1
  fi
  # With api.git.storage=volume alone, one replica on the claim.
  api=$("$HELM" template t charts/slipway --set appDomain=apps.example.com --set api.git.storage=volume |
    awk '/^# Source: slipway\/templates\/api-deployment.yaml/{on=1;next} /^# Source:/{on=0} on')
  for want in "replicas: 1" "type: Recreate" "claimName: t-slipway-api-data"; do
    if ! grep -q "$want" <<<"$api"; then
      echo "the chart's api with api.git.storage=volume lacks \"$want\"" >&2
      return 1
    fi
  done
  log "the chart runs two api replicas in object storage by default, one on a volume when asked"
}

tier_unit() {
  log "tier unit: unit tests and CRD drift (no cluster)"
  # One cargo run for every crate: two (the sub-crates, then slipway) resolved the dependencies' features twice and
  # built most dependencies and every workspace crate twice; the workspace's features are those of slipway's tests,
  # so the cluster and e2e tiers build on this build.
  # When those tiers follow, their test binaries are built in this cargo run too: one run keeps both cores busy to
  # the end, where a run per tier linked each test binary alone on one core (about a minute of a warm run).
  if [[ " ${tiers[*]} " == *" cluster "* || " ${tiers[*]} " == *" e2e "* ]]; then
    cargo test --workspace --locked --no-run --lib --bins --tests
  fi
  cargo_test --workspace --locked --lib --bins --test crd_drift
}

tier_cluster() {
  log "tier cluster: integration tests against a real kube-apiserver"
  if [[ " ${tiers[*]} " == *" e2e "* ]]; then e2e_prepare_in_background; fi
  # A control plane of its own (ports and directory apart from `make up`), fresh for every run.
  (
    export SLIPWAY_RUN="$TEST_RUN/cluster" SLIPWAY_ETCD_PORT=$ETCD_PORT SLIPWAY_APISERVER_PORT=$APISERVER_PORT
    export SLIPWAY_PG_PORT=${SLIPWAY_TEST_PG_PORT:-25432}
    export SLIPWAY_PEBBLE_PORT=${SLIPWAY_TEST_PEBBLE_PORT:-24400}
    data_port=${SLIPWAY_TEST_DATA_PORT:-25500}
    data_server() { SLIPWAY_PG_DATA_SERVER=1 SLIPWAY_PG_PORT=$data_port "$HACK/postgres.sh" "$@"; }
    "$HACK/control-plane.sh" stop >/dev/null 2>&1 || true
    export SLIPWAY_OIDC_PORT=${SLIPWAY_TEST_OIDC_PORT:-29400}
    export SLIPWAY_SMTP_PORT=${SLIPWAY_TEST_SMTP_PORT:-29525}
    trap '"$HACK/control-plane.sh" stop; "$HACK/postgres.sh" stop; data_server stop; "$HACK/pebble.sh" stop; "$HACK/oidc.sh" stop; "$HACK/smtp.sh" stop' EXIT
    "$HACK/control-plane.sh" start
    "$HACK/pebble.sh" start
    eval "$("$HACK/pebble.sh" env)"
    # End-user sign-in's upstream identity provider.
    "$HACK/oidc.sh" start
    eval "$("$HACK/oidc.sh" env)"
    SLIPWAY_TEST_DATABASE_URL=$("$HACK/postgres.sh" start)
    # The channels' databases live on a server of their own, as they do in the chart.
    SLIPWAY_TEST_DATA_SERVER_URL=$(data_server start)
    # The mail relay email verification codes go through; tests read them from its Maildir.
    "$HACK/smtp.sh" start
    eval "$("$HACK/smtp.sh" env)"
    export SLIPWAY_TEST_DATABASE_URL SLIPWAY_TEST_DATA_SERVER_URL
    export SLIPWAY_KUBECONFIG="$SLIPWAY_RUN/control-plane/admin.kubeconfig" SLIPWAY_KUBECTL="$KUBE_DIR/bin/kubectl"
    # The tests leave their namespaces to this control plane, which runs no pods and is stopped after the run:
    # deleting them cost the namespace controller and the apiserver a fifth of the tier's time.
    export SLIPWAY_TEST_KEEP_NAMESPACES=1
    filters=$(module_filters cluster) || { echo "SLIPWAY_TESTS=$SLIPWAY_TESTS names no cluster test file" >&2; exit 2; }
    # shellcheck disable=SC2086 # one filter per selected module
    cargo_test -p slipway --locked --test cluster -- --test-threads="$TEST_THREADS" $filters
  )
}

# The e2e tier's cluster, apart from the cluster tier's: its own control plane ports, node slot, Postgres and data
# server.
e2e_settings() {
  export SLIPWAY_RUN="$TEST_RUN/e2e" SLIPWAY_ETCD_PORT=$((ETCD_PORT + 2)) SLIPWAY_APISERVER_PORT=$((APISERVER_PORT + 1))
  export SLIPWAY_NODE_SLOT=${SLIPWAY_TEST_NODE_SLOT:-1}
  export SLIPWAY_PG_PORT=$((${SLIPWAY_TEST_PG_PORT:-25432} + 1))
  export SLIPWAY_DATA_SERVER_PORT=$((${SLIPWAY_TEST_DATA_PORT:-25500} + 1))
}

platform_selected() {
  selected e2e_platform || selected e2e_platform_s3 || selected e2e_platform_isolation || selected e2e_platform_size \
    || selected e2e_platform_monitoring || selected e2e_platform_backup || selected e2e_platform_git_objects \
    || selected e2e_platform_upgrade
}

# Brings up what the e2e tier runs on, once the node's parts are built: the node, the Postgres its platform keeps
# its database in, and, when a platform test is selected, the platform installed by its chart. Writes the exports
# the tests need to $TEST_RUN/e2e.env. Then, when they are selected, runs the chart's alerts on the fresh install
# (e2e_alerts). Started in the background when the cluster tier starts (its tests are busy on the CPU, while starting
# a node, installing a chart and waiting for alerts to fire mostly wait), and waited for by the e2e tier.
e2e_prepare() {
  local began=$SECONDS
  e2e_settings
  until [ -f "$TEST_RUN/node-parts.status" ]; do sleep 1; done
  [ "$(cat "$TEST_RUN/node-parts.status")" = 0 ] || { echo "building the node's parts failed" >&2; return 1; }
  "$HACK/node.sh" start
  eval "$("$HACK/node.sh" env)"
  # Pods reach this Postgres too: the chart-installed platform keeps its database here.
  SLIPWAY_TEST_DATABASE_URL=$(SLIPWAY_PG_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_PG_CLIENTS=$SLIPWAY_POD_CIDR "$HACK/postgres.sh" start)
  {
    "$HACK/node.sh" env
    echo "export SLIPWAY_TEST_DATABASE_URL=$SLIPWAY_TEST_DATABASE_URL"
  } >"$TEST_RUN/e2e.env"
  if platform_selected; then
    log "e2e: installing the platform by its chart"
    rm -rf "$SLIPWAY_RUN/platform"
    SLIPWAY_TEST_DATABASE_URL=$SLIPWAY_TEST_DATABASE_URL "$HACK/install.sh" install
    "$HACK/install.sh" env >>"$TEST_RUN/e2e.env"
  fi
  log "e2e: the node$(platform_selected && echo " and the platform") ready in $((SECONDS - began))s"
  if platform_selected && selected e2e_platform_monitoring; then e2e_alerts; fi
}

# What the installed components logged at WARN and ERROR, printed on a failure before the uninstall takes it away.
installed_warnings() { log "the installed components' warnings and errors:"; "$HACK/install.sh" logs; }

# The e2e tests' environment: the e2e cluster's settings and the exports e2e_prepare wrote.
e2e_test_env() {
  e2e_settings
  source "$TEST_RUN/e2e.env"
  export SLIPWAY_TEST_DATABASE_URL
  export SLIPWAY_KUBECONFIG="$KUBECONFIG" SLIPWAY_KUBECTL="$KUBE_DIR/bin/kubectl"
}

# The chart's alerts (tests/e2e_platform/monitoring.rs): a real Prometheus scraping the release as its chart's
# PodMonitors say, with the chart's rules. They run first on the fresh install, beside the cluster tier, as they
# spend most of their time waiting for alerts to fire and go quiet. Their output goes to $TEST_RUN/e2e-alerts.log (--show-output: how long each alert took to fire belongs in
# it), which the e2e tier prints and counts; on a failure, with the components' warnings and errors.
e2e_alerts() {
  local began=$SECONDS status=0
  log "e2e: the chart's alerts, beside the cluster tier (output below, when they are done)"
  # Each step chained with &&: under `|| status=$?`, the subshell would not stop at a failing one by itself.
  (
    trap '"$HACK/prometheus.sh" stop' EXIT
    e2e_test_env && "$HACK/prometheus.sh" start && eval "$("$HACK/prometheus.sh" env)" &&
      export SLIPWAY_TEST_PROMETHEUS_URL &&
      cargo test -p slipway --locked --test e2e_platform -- monitoring:: --show-output --test-threads="$TEST_THREADS"
  ) >"$TEST_RUN/e2e-alerts.log" 2>&1 || status=$?
  if [ "$status" != 0 ]; then
    installed_warnings >>"$TEST_RUN/e2e-alerts.log" 2>&1
  fi
  log "e2e: the chart's alerts $([ "$status" = 0 ] && echo passed || echo failed) in $((SECONDS - began))s"
  echo "$status" >"$TEST_RUN/e2e-alerts.status"
}

# Starts e2e_prepare in the background, its output kept for the e2e tier to print.
e2e_prepare_in_background() {
  [ -z "$e2e_prepared" ] || return 0
  e2e_prepared=1
  rm -f "$TEST_RUN/e2e.env" "$TEST_RUN/e2e-alerts.log" "$TEST_RUN/e2e-alerts.status"
  (e2e_prepare) >"$TEST_RUN/e2e-prepare.log" 2>&1 &
  e2e_prepare_pid=$!
}

# Kills process $1 and every process under it.
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}

# Stops everything e2e_prepare started (on the way out, whether or not the e2e tier ran).
e2e_teardown() {
  [ -z "$e2e_prepare_pid" ] || kill_tree "$e2e_prepare_pid"
  (
    e2e_settings
    "$HACK/prometheus.sh" stop; "$HACK/install.sh" stop-host-parts
    "$HACK/node.sh" stop; "$HACK/postgres.sh" stop; "$HACK/data-server.sh" stop; "$HACK/oidc.sh" stop; "$HACK/smtp.sh" stop
    rm -rf "$SLIPWAY_RUN/platform"
  ) >/dev/null 2>&1 || true
}

tier_e2e() {
  log "tier e2e: end-to-end tests on a real local cluster"
  e2e_prepare_in_background
  local prepared=0
  wait "$e2e_prepare_pid" || prepared=$?
  e2e_prepare_pid=
  log "e2e: the node's parts (built in the background since the run began), the node and the platform:"
  cat "$TEST_RUN/node-parts.log" "$TEST_RUN/e2e-prepare.log" >&2
  [ "$prepared" = 0 ] || { echo "preparing the e2e tier's cluster failed (exit $prepared)" >&2; exit 1; }
  if [ -f "$TEST_RUN/e2e-alerts.status" ]; then
    log "e2e: the chart's alerts (tests/e2e_platform/monitoring.rs), run beside the cluster tier:"
    cat "$TEST_RUN/e2e-alerts.log" >&2
    grep '^test result: ' "$TEST_RUN/e2e-alerts.log" >>"$results" || true
    [ "$(cat "$TEST_RUN/e2e-alerts.status")" = 0 ] || { echo "the chart's alerts failed" >&2; exit 1; }
  fi
  (
    e2e_test_env
    # 1. The platform as it ships: the chart installed from the image built here, used over its addresses;
    #    then upgraded under load and uninstalled (its tests run in that order).
    if platform_selected; then
      log "e2e: the platform installed by its chart"
      platform_failed() { installed_warnings; exit 1; }
      # One binary (tests/e2e_platform/), a run per module: each leaves the release as the next expects it.
      platform_tests() { cargo_test -p slipway --locked --test e2e_platform -- "$@" || platform_failed; }
      if selected e2e_platform; then platform_tests platform:: --test-threads="$TEST_THREADS"; fi
      # --show-output: s3-tests' counts (versitygw alone, through the gateway) belong in the log.
      if selected e2e_platform_s3; then platform_tests s3:: --show-output --test-threads="$TEST_THREADS"; fi
      # --show-output: the hostile tenant's attempts and their outcomes, with isolation on and off.
      if selected e2e_platform_isolation; then platform_tests isolation:: --show-output --test-threads="$TEST_THREADS"; fi
      # One at a time (a test kills the API's pod); --show-output: the sizes and times belong in the log.
      if selected e2e_platform_size; then platform_tests size:: --show-output --test-threads=1; fi
      # The chart's alerts ran first, beside the cluster tier (e2e_alerts).
      # The platform backed up, taken away (hack/install.sh purge) and restored into a fresh install; alone.
      # --show-output: the backup's size and each step's time belong in the log.
      if selected e2e_platform_backup; then platform_tests backup:: --show-output --test-threads=1; fi
      # The repositories moved into object storage and two api replicas racing pushes; alone. --show-output: the
      # import's lines and the rounds raced belong in the log.
      if selected e2e_platform_git_objects; then platform_tests git_objects:: --show-output --test-threads=1; fi
      # --show-output: its count of requests answered during the upgrade belongs in the log.
      if selected e2e_platform_upgrade; then platform_tests upgrade:: --show-output; fi
      "$HACK/install.sh" uninstall
    fi
    # 2. The components run in the test process, for the tests that reach inside them (stop an operator
    #    mid-deploy, read the edge's metrics, drive the build and run steps directly).
    if filters=$(module_filters e2e); then
      log "e2e: components in the test process"
      # shellcheck disable=SC2086 # one filter per selected module
      cargo_test -p slipway --locked --test e2e -- --test-threads="$TEST_THREADS" $filters
    fi
  )
}

timings=("setup (parts built or found) $((SECONDS - started))s")
cpu_use=("setup $(($(cpu_busy) - run_busy)) cpu-s")
for tier in "${tiers[@]}"; do
  case "$tier" in
    lint | unit | cluster | e2e) ;;
    *) echo "unknown tier: $tier (lint, unit, cluster, e2e)" >&2; exit 2 ;;
  esac
done
# The node's parts (Go builds and images: on a cold machine the longest step of the run) build in the background at
# the lowest priority while the other tiers compile and run tests that mostly wait; the e2e tier waits for them.
# Warm, the build finds everything cached and ends at once.
if [[ " ${tiers[*]} " == *" e2e "* ]]; then
  mkdir -p "$TEST_RUN"
  rm -f "$TEST_RUN/node-parts.status"
  # The Prometheus server the monitoring tests run is built with them.
  setsid nice -n 19 bash -c '{ "$1" build && "$4" >/dev/null; } >"$2" 2>&1; echo $? >"$3"' - "$HACK/node.sh" \
    "$TEST_RUN/node-parts.log" "$TEST_RUN/node-parts.status" "$HACK/build-prometheus.sh" &
  node_parts_pid=$!
fi
for tier in "${tiers[@]}"; do
  tier_started=$SECONDS tier_busy=$(cpu_busy)
  "tier_$tier"
  timings+=("$tier $((SECONDS - tier_started))s")
  busy=$(($(cpu_busy) - tier_busy)) wall=$((SECONDS - tier_started))
  cpu_use+=("$tier ${busy} cpu-s ($((100 * busy / (cores * (wall > 0 ? wall : 1))))%)")
done

log "all tiers passed (${tiers[*]}) in $((SECONDS - started))s"
printf 'time per tier: %s\n' "$(IFS=,; echo "${timings[*]}" | sed 's/,/, /g')"
# How busy the cores were: a tier well under 100% waits on something (an alert's window, a pod starting), one near
# it can only get shorter by doing less. The whole run's CPU time over the cores is the least it could take here.
run_busy=$(($(cpu_busy) - run_busy))
printf 'CPU per tier (%% of %d cores): %s; in all %d cpu-s, %ds on %d cores at full use\n' "$cores" \
  "$(IFS=,; echo "${cpu_use[*]}" | sed 's/,/, /g')" "$run_busy" "$((run_busy / cores))" "$cores"
awk '/^test result: / { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$results"

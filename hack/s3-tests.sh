#!/usr/bin/env bash
# Ceph's S3 conformance suite (s3-tests: pytest and boto3) against slipway's S3 gateway, as a channel's key pair
# sees it: the suite's default subset in single-bucket mode (every bucket a test makes is the one existing bucket,
# and the key never creates or deletes a bucket). tests/s3/s3-tests (or $SLIPWAY_S3_TESTS) holds the suite: Ceph's
# s3-tests (github.com/ceph/s3-tests at 8f0ae7b4, MIT: its LICENSE) unchanged under s3tests/, and beside it its
# runner (run.sh), the single-bucket plugin (single_bucket_shim.py), the default subset (subset-default.txt, from
# make-subset.py's rules) and presigned-URL tests without ACLs (local_tests/). The measure is versitygw alone, the
# backend the gateway sits in front of: every test versitygw alone passes must pass through the gateway too.
#
# usage:
#   hack/s3-tests.sh baseline
#       Runs the subset against a throwaway versitygw alone (hack/s3.sh's build, a `user`-role key owning one bucket
#       that may not make buckets, as a channel's key) and writes the tests it passes to tests/s3/conformance/
#       versitygw.txt. Run it again when VERSITYGW_VERSION or the subset changes.
#   hack/s3-tests.sh gateway ENDPOINT BUCKET        (ACCESS_KEY and SECRET_KEY in the environment)
#       Runs the subset against ENDPOINT with that key pair on BUCKET, prints both counts and fails when a test
#       that versitygw alone passes fails here, unless tests/s3/conformance/exceptions.txt names it (with why).
#       With SLIPWAY_RESOLVE=<host>=<ip> the endpoint's name is resolved to <ip> (tests/s3/resolve). TLS
#       certificates are not checked (the suite's ssl_verify is off).
#
# The suite's Python modules come from the virtualenv hack/install-deps.sh makes ($S3_CLIENTS_VENV). Results (junit
# XML and the failing tests with their first message line) go to $SLIPWAY_S3_TESTS_OUT (default: a temp dir).
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=s3-tests

SUITE=${SLIPWAY_S3_TESTS:-$ROOT/tests/s3/s3-tests}
CONFORMANCE="$ROOT/tests/s3/conformance"
BASELINE="$CONFORMANCE/versitygw.txt"
EXCEPTIONS="$CONFORMANCE/exceptions.txt"
OUT=${SLIPWAY_S3_TESTS_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/s3-tests.XXXXXX")}
mkdir -p "$OUT"

[ -x "$SUITE/run.sh" ] || die "no s3-tests runner at $SUITE/run.sh (set SLIPWAY_S3_TESTS to the suite's folder)"
[ -x "$S3_CLIENTS_VENV/bin/python" ] || die "no virtualenv at $S3_CLIENTS_VENV (hack/install-deps.sh makes it)"

# run NAME [run.sh arguments...]: the subset with the suite's runner; its summary line on stderr, its junit XML at
# $OUT/NAME.xml. The runner's exit status is not ours: failing tests are judged against the baseline.
run() {
  local name=$1 started=$SECONDS; shift
  PYTHONPATH=$ROOT/tests/s3/resolve VENV=$S3_CLIENTS_VENV TIMEOUT=${SLIPWAY_S3_TESTS_TIMEOUT:-120} \
    "$SUITE/run.sh" --junit "$OUT/$name.xml" "$@" \
    >"$OUT/$name.log" 2>&1 || true
  tail -n 1 "$OUT/$name.log" >&2
  log "$name: the subset ran in $((SECONDS - started))s"
  [ -s "$OUT/$name.xml" ] || { tail -n 40 "$OUT/$name.log" >&2; die "$name: the runner wrote no results"; }
}

# passed NAME: the node ids of the tests that passed in $OUT/NAME.xml, sorted.
passed() {
  "$S3_CLIENTS_VENV/bin/python" - "$OUT/$1.xml" <<'EOF'
import sys, xml.etree.ElementTree as ET
for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    if not {c.tag for c in tc} & {"failure", "error", "skipped"}:
        path = tc.get("file") or tc.get("classname", "").replace(".", "/") + ".py"
        print("%s::%s" % (path, tc.get("name")))
EOF
}

baseline() {
  local port
  # Global: the EXIT trap removes it after this function has returned.
  VERSITYGW_RUN=$(mktemp -d "${TMPDIR:-/tmp}/s3-tests-versitygw.XXXXXX")
  port=$("$S3_CLIENTS_VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export SLIPWAY_RUN=$VERSITYGW_RUN SLIPWAY_S3_PORT=$port SLIPWAY_S3_ADDRESS=127.0.0.1
  trap '"$HACK/s3.sh" stop >/dev/null 2>&1 || true; rm -rf "$VERSITYGW_RUN"' EXIT
  "$HACK/s3.sh" start
  eval "$("$HACK/s3.sh" env)"
  local versitygw="$SLIPWAY_CACHE/versitygw-$VERSITYGW_VERSION/bin/versitygw" access secret bucket=channel-bucket
  access="SVC$(openssl rand -hex 8 | tr a-f A-F)" secret=$(openssl rand -hex 20)
  admin() {
    "$versitygw" admin --access "$SLIPWAY_S3_BACKEND_ACCESS_KEY_ID" --secret "$SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY" \
      --endpoint-url "$SLIPWAY_S3_BACKEND_URL" "$@" >/dev/null
  }
  admin create-user --access "$access" --secret "$secret" --role user
  admin create-bucket --owner "$access" --bucket "$bucket"
  ENDPOINT=$SLIPWAY_S3_BACKEND_URL ACCESS_KEY=$access SECRET_KEY=$secret SHARED_BUCKET=$bucket run versitygw
  local count
  count=$(passed versitygw | wc -l)
  {
    echo "# The tests of s3-tests' default subset versitygw $VERSITYGW_VERSION alone passes in single-bucket mode"
    echo "# (a user-role key owning one bucket), one node id a line: made by \`hack/s3-tests.sh baseline\`."
    echo "versitygw $VERSITYGW_VERSION"
    passed versitygw
  } >"$BASELINE"
  log "versitygw $VERSITYGW_VERSION alone passes $count tests; written to ${BASELINE#"$ROOT"/}"
}

gateway() {
  local endpoint=$1 bucket=$2
  [ -n "${ACCESS_KEY:-}" ] && [ -n "${SECRET_KEY:-}" ] || die "ACCESS_KEY and SECRET_KEY are required"
  local recorded
  recorded=$(sed -n 's/^versitygw //p' "$BASELINE")
  [ "$recorded" = "$VERSITYGW_VERSION" ] \
    || die "${BASELINE#"$ROOT"/} is versitygw ${recorded:-?}'s, the backend is $VERSITYGW_VERSION: run hack/s3-tests.sh baseline"
  local started=$SECONDS
  ENDPOINT=$endpoint SHARED_BUCKET=$bucket run gateway
  "$S3_CLIENTS_VENV/bin/python" - "$BASELINE" "$EXCEPTIONS" "$OUT/gateway.xml" "$((SECONDS - started))" <<'EOF'
import sys, xml.etree.ElementTree as ET
baseline_path, exceptions_path, junit, seconds = sys.argv[1:]
baseline = {l.strip() for l in open(baseline_path) if "::" in l and not l.startswith("#")}
exceptions = {}
for line in open(exceptions_path):
    if "::" in line and not line.startswith("#"):
        node, _, why = line.strip().partition(" ")
        exceptions[node] = why.strip()
status, why_failed = {}, {}
for tc in ET.parse(junit).getroot().iter("testcase"):
    node = "%s::%s" % (tc.get("file") or tc.get("classname", "").replace(".", "/") + ".py", tc.get("name"))
    kinds = {c.tag for c in tc}
    if kinds & {"failure", "error"}:
        status[node] = "failed"
        el = next(c for c in tc if c.tag in ("failure", "error"))
        why_failed[node] = ((el.get("message") or el.tag).strip().splitlines() or [el.tag])[0][:160]
    else:
        status[node] = "skipped" if "skipped" in kinds else "passed"
counts = {k: sum(1 for s in status.values() if s == k) for k in ("passed", "failed", "skipped")}
print("s3-tests default subset, single bucket: versitygw alone passes %d; through the gateway %d passed, "
      "%d failed, %d skipped (%ss)" % (len(baseline), counts["passed"], counts["failed"], counts["skipped"], seconds))
lost = sorted(n for n in baseline if status.get(n) != "passed" and n not in exceptions)
excused = sorted(n for n in baseline if status.get(n) != "passed" and n in exceptions)
gained = sorted(n for n, s in status.items() if s == "passed" and n not in baseline)
for node in excused:
    print("  excused: %s (%s): %s" % (node, status.get(node, "not run"), exceptions[node]))
for node in gained:
    print("  gained over versitygw alone: %s" % node)
for node in lost:
    print("  LOST: %s (%s): %s" % (node, status.get(node, "not run"), why_failed.get(node, "")))
print("%d tests versitygw alone passes failed through the gateway" % len(lost))
sys.exit(1 if lost else 0)
EOF
}

case "${1:-}" in
  baseline) baseline ;;
  gateway) [ $# -eq 3 ] || die "usage: hack/s3-tests.sh gateway ENDPOINT BUCKET"; gateway "$2" "$3" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac

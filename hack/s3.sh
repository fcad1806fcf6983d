#!/usr/bin/env bash
# The object-store backend for the local platform and the tests: versitygw (posix backend, bucket versioning on,
# metadata in xattrs of its own data directory), built once from the Go module proxy into
# ~/.cache/slipway/versitygw-<version>/ and started on an explicit address (its default listens on every
# interface). The root key pair is made per start and printed by `env`; the platform's gateway signs with it,
# tenants never see it.
#
# usage: hack/s3.sh build | start | stop | status | env
#
# SLIPWAY_S3_PORT (default 17070) picks the port, SLIPWAY_S3_ADDRESS (default 127.0.0.1) the address: give the
# node's address when pods must reach it. State lives under $SLIPWAY_RUN/s3-<port>; a start first stops whatever
# an earlier run left there and wipes it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=s3

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
S3_PORT=${SLIPWAY_S3_PORT:-17070}
S3_ADDRESS=${SLIPWAY_S3_ADDRESS:-127.0.0.1}
S3_DIR="$SLIPWAY_RUN/s3-$S3_PORT"
VERSITYGW="$SLIPWAY_CACHE/versitygw-$VERSITYGW_VERSION/bin/versitygw"

build() {
  go_build versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw
}

ready() { curl -s -o /dev/null --max-time 2 "http://$S3_ADDRESS:$S3_PORT/" 2>/dev/null; }

stop() {
  kill_pidfiles "$S3_DIR" versitygw
  stop_naming "$S3_DIR/"
  rm -rf "$S3_DIR"
}

print_env() {
  [ -f "$S3_DIR/root.env" ] || die "not started (no $S3_DIR/root.env)"
  cat "$S3_DIR/root.env"
}

start() {
  build
  if [ -f "$S3_DIR/root.env" ] && ready; then
    log "already running on $S3_ADDRESS:$S3_PORT (reused)"
    return
  fi
  stop
  mkdir -p "$S3_DIR/pids" "$S3_DIR/data" "$S3_DIR/versions" "$S3_DIR/iam"
  local access secret
  access="root$(openssl rand -hex 8)"
  secret=$(openssl rand -hex 20)
  cat >"$S3_DIR/root.env" <<EOT
export SLIPWAY_S3_BACKEND_URL=http://$S3_ADDRESS:$S3_PORT
export SLIPWAY_S3_BACKEND_ACCESS_KEY_ID=$access
export SLIPWAY_S3_BACKEND_SECRET_ACCESS_KEY=$secret
export SLIPWAY_S3_BACKEND_DIR=$S3_DIR
EOT
  chmod 600 "$S3_DIR/root.env"
  # Keep-alive on: clients (the gateway among them) reuse connections, as they do with any production S3.
  ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret \
    nohup "$VERSITYGW" --port "$S3_ADDRESS:$S3_PORT" --iam-dir "$S3_DIR/iam" --keep-alive --quiet \
    posix --versioning-dir "$S3_DIR/versions" "$S3_DIR/data" >"$S3_DIR/versitygw.log" 2>&1 &
  echo $! >"$S3_DIR/pids/versitygw"
  for _ in $(seq 100); do
    if ready; then
      log "versitygw $VERSITYGW_VERSION ready on $S3_ADDRESS:$S3_PORT (data in $S3_DIR)"
      return
    fi
    kill -0 "$(cat "$S3_DIR/pids/versitygw")" 2>/dev/null || break
    sleep 0.1
  done
  tail -n 30 "$S3_DIR/versitygw.log" >&2 || true
  die "versitygw did not start on $S3_ADDRESS:$S3_PORT"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop; log "stopped" ;;
  status) ready && log "running on $S3_ADDRESS:$S3_PORT" || { log "not running"; exit 1; } ;;
  env) print_env ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

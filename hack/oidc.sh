#!/usr/bin/env bash
# A local upstream OpenID Connect provider for the tests of end-user sign-in: oidc-provider-mock, installed once
# from PyPI into a virtualenv at ~/.cache/slipway/oidc-provider-mock-<version>. It signs anyone in: its authorization
# page is a form whose one field is the subject, and any client id and secret are accepted without registration.
# Claims beyond the subject ({"email": sub} by default) are set per user with PUT /users/<sub> and a JSON body.
#
# usage: hack/oidc.sh start | stop | env
#
# SLIPWAY_OIDC_LISTEN (default 127.0.0.1) picks the address, SLIPWAY_OIDC_PORT (default 9400) the port: give the
# node's address when pods must reach it. The issuer is whatever host the request named, so everyone must use the
# address `env` prints (SLIPWAY_TEST_OIDC_ISSUER). Authorization requests must carry a nonce. State and the log
# live under $SLIPWAY_RUN/oidc; a start first stops whatever an earlier run left there and wipes it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
LOG_TAG=oidc
source "$HACK/lib.sh"

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
LISTEN=${SLIPWAY_OIDC_LISTEN:-127.0.0.1}
PORT=${SLIPWAY_OIDC_PORT:-9400}
DIR="$SLIPWAY_RUN/oidc"
VENV="$SLIPWAY_CACHE/oidc-provider-mock-$OIDC_MOCK_VERSION"
case "$LISTEN" in
  '' | 0.0.0.0 | :: | '[::]' | '*') die "SLIPWAY_OIDC_LISTEN must name one address, not every interface" ;;
  *:*) ISSUER="http://[$LISTEN]:$PORT" ;;
  *) ISSUER="http://$LISTEN:$PORT" ;;
esac

env_lines() {
  echo "export SLIPWAY_TEST_OIDC_ISSUER=$ISSUER"
}

install() { pypi_venv "$VENV" oidc_provider_mock "oidc-provider-mock==$OIDC_MOCK_VERSION"; }

stop() {
  kill_pidfiles "$DIR" oidc
  stop_naming "$DIR/"
}

ready() {
  curl -sf --max-time 2 "$ISSUER/.well-known/openid-configuration" 2>/dev/null \
    | jq -e --arg iss "$ISSUER" '.issuer == $iss' >/dev/null 2>&1
}

start() {
  install
  stop
  rm -rf "$DIR"
  mkdir -p "$DIR/pids"
  # Ours are stopped: anything still answering there is someone else's, and would pass for ready.
  ! curl -s -o /dev/null --max-time 2 "$ISSUER/" || die "something else already listens on $LISTEN:$PORT"
  # Started through a link in the state directory, so that its command line names it and a later stop finds it.
  ln -s "$VENV/bin/oidc-provider-mock" "$DIR/oidc-provider-mock"
  NO_COLOR=1 nohup "$VENV/bin/python" "$DIR/oidc-provider-mock" \
    --host "$LISTEN" --port "$PORT" --require-nonce true >"$DIR/oidc.log" 2>&1 &
  echo $! >"$DIR/pids/oidc"
  for _ in $(seq 100); do
    kill -0 "$(cat "$DIR/pids/oidc")" 2>/dev/null || break
    if ready; then
      log "oidc-provider-mock $OIDC_MOCK_VERSION ready: issuer $ISSUER (log in $DIR/oidc.log)"
      return
    fi
    sleep 0.1
  done
  tail -n 30 "$DIR/oidc.log" >&2 || true
  die "oidc-provider-mock did not start on $LISTEN:$PORT"
}

case "${1:-}" in
  start) start ;;
  stop) stop; log "stopped" ;;
  env) env_lines ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A local SMTP server for email verification: aiosmtpd, installed once from PyPI into a virtualenv at
# ~/.cache/slipway/aiosmtpd-<version>, keeping every message it receives as a file in a Maildir (one file per
# message under $SLIPWAY_RUN/smtp/maildir/new). It relays nothing: mail sent to it goes nowhere else.
#
# usage: hack/smtp.sh start | stop | env
#
# SLIPWAY_SMTP_LISTEN (default 127.0.0.1) picks the address, SLIPWAY_SMTP_PORT (default 9525) the port: give the
# node's address when pods must reach it. `env` prints SLIPWAY_TEST_SMTP_URL (what the API's --smtp-url takes) and
# SLIPWAY_TEST_MAILDIR. A start first stops whatever an earlier run left there and wipes it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
LOG_TAG=smtp
source "$HACK/lib.sh"

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
LISTEN=${SLIPWAY_SMTP_LISTEN:-127.0.0.1}
PORT=${SLIPWAY_SMTP_PORT:-9525}
DIR="$SLIPWAY_RUN/smtp"
VENV="$SLIPWAY_CACHE/aiosmtpd-$AIOSMTPD_VERSION"
case "$LISTEN" in
  '' | 0.0.0.0 | :: | '[::]' | '*') die "SLIPWAY_SMTP_LISTEN must name one address, not every interface" ;;
  *:*) URL_HOST="[$LISTEN]" ;;
  *) URL_HOST="$LISTEN" ;;
esac

env_lines() {
  echo "export SLIPWAY_TEST_SMTP_URL=smtp://$URL_HOST:$PORT"
  echo "export SLIPWAY_TEST_MAILDIR=$DIR/maildir"
}

install() { pypi_venv "$VENV" aiosmtpd "aiosmtpd==$AIOSMTPD_VERSION"; }

stop() {
  kill_pidfiles "$DIR" smtp
  stop_naming "$DIR/"
}

# Ready once it greets: a 220 line on connect.
ready() {
  python3 - "$LISTEN" "$PORT" <<'PY' 2>/dev/null
import socket, sys
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2) as s:
    sys.exit(0 if s.recv(512).startswith(b"220") else 1)
PY
}

start() {
  install
  stop
  rm -rf "$DIR"
  mkdir -p "$DIR/pids" "$DIR/maildir/tmp" "$DIR/maildir/new" "$DIR/maildir/cur"
  # Ours are stopped: anything still answering there is someone else's, and would pass for ready.
  ! ready || die "something else already listens on $LISTEN:$PORT"
  # Started through a link in the state directory, so that its command line names it and a later stop finds it.
  ln -s "$VENV/bin/aiosmtpd" "$DIR/aiosmtpd"
  nohup "$VENV/bin/python" "$DIR/aiosmtpd" -n -l "$URL_HOST:$PORT" \
    -c aiosmtpd.handlers.Mailbox "$DIR/maildir" >"$DIR/smtp.log" 2>&1 &
  echo $! >"$DIR/pids/smtp"
  for _ in $(seq 100); do
    kill -0 "$(cat "$DIR/pids/smtp")" 2>/dev/null || break
    if ready; then
      log "aiosmtpd $AIOSMTPD_VERSION ready on $URL_HOST:$PORT, mail in $DIR/maildir (log in $DIR/smtp.log)"
      return
    fi
    sleep 0.1
  done
  tail -n 30 "$DIR/smtp.log" >&2 || true
  die "aiosmtpd did not start on $LISTEN:$PORT"
}

case "${1:-}" in
  start) start ;;
  stop) stop; log "stopped" ;;
  env) env_lines ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

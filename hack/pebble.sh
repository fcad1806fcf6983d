#!/usr/bin/env bash
# Pebble (Let's Encrypt's ACME test CA) and pebble-challtestsrv (a DNS server whose records are set over HTTP) for
# the tests of custom domains: Pebble issues the certificates and validates HTTP-01 by resolving names through
# challtestsrv, which is also the DNS server the platform's verification resolver asks.
#
# usage: hack/pebble.sh start | ensure | stop | env
#
# Built once from the Go module proxy into ~/.cache/slipway/pebble-<version>. Everything listens on
# $SLIPWAY_PEBBLE_LISTEN (loopback unless told otherwise; hack/install.sh gives the host's end of the node's link,
# where pods reach it): Pebble's ACME directory on $SLIPWAY_PEBBLE_PORT (24400), its management port +1,
# challtestsrv's DNS (UDP and TCP) on +53 and its HTTP API on +55. Pebble validates HTTP-01 on port
# $SLIPWAY_PEBBLE_HTTP_PORT (+80) of whatever address challtestsrv gives the domain: tests serve their edge's plain
# HTTP there. Certificates are valid for Pebble's default 90 days, or $SLIPWAY_PEBBLE_VALIDITY_SECONDS. `env` prints
# the variables the tests read (SLIPWAY_TEST_ACME_*, SLIPWAY_TEST_DNS_*). `start` restarts a running Pebble (which
# forgets its accounts); `ensure` leaves one that answers as it is.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
LOG_TAG=pebble
source "$HACK/lib.sh"

PEBBLE_VERSION=v2.10.1
SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
LISTEN=${SLIPWAY_PEBBLE_LISTEN:-127.0.0.1}
PORT=${SLIPWAY_PEBBLE_PORT:-24400}
VALIDITY=${SLIPWAY_PEBBLE_VALIDITY_SECONDS:-}
HTTP_PORT=${SLIPWAY_PEBBLE_HTTP_PORT:-$((PORT + 80))}
DIR="$SLIPWAY_RUN/pebble-$PORT"
BIN="$SLIPWAY_CACHE/pebble-$PEBBLE_VERSION/bin"
DNS="$LISTEN:$((PORT + 53))"
CHALL_API="$LISTEN:$((PORT + 55))"

env_lines() {
  echo "export SLIPWAY_TEST_ACME_DIRECTORY=https://$LISTEN:$PORT/dir"
  echo "export SLIPWAY_TEST_ACME_ROOT_CA=$DIR/listener-ca.pem"
  echo "export SLIPWAY_TEST_ACME_MANAGEMENT=https://$LISTEN:$((PORT + 1))"
  echo "export SLIPWAY_TEST_ACME_HTTP_PORT=$HTTP_PORT"
  echo "export SLIPWAY_TEST_DNS_SERVER=$DNS"
  echo "export SLIPWAY_TEST_DNS_API=http://$CHALL_API"
}

stop() {
  kill_pidfiles "$DIR" pebble challtestsrv
  stop_naming "$DIR"
}

# Whether a Pebble of this directory answers at its address.
answers() {
  [ -s "$DIR/listener-ca.pem" ] && curl -sf --cacert "$DIR/listener-ca.pem" "https://$LISTEN:$PORT/dir" >/dev/null
}

start() {
  go_build pebble "$PEBBLE_VERSION" github.com/letsencrypt/pebble/v2/cmd/pebble github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv
  stop
  rm -rf "$DIR"
  mkdir -p "$DIR/pids"
  # Pebble's own HTTPS listener needs a certificate; a CA made here signs one for its address.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 -subj /CN=slipway-test-pebble-listener-ca \
    -keyout "$DIR/listener-ca.key" -out "$DIR/listener-ca.pem" >/dev/null 2>&1
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$LISTEN" \
    -keyout "$DIR/listener.key" -out "$DIR/listener.csr" >/dev/null 2>&1
  printf 'subjectAltName=IP:%s,IP:127.0.0.1,DNS:localhost\n' "$LISTEN" >"$DIR/listener.ext"
  openssl x509 -req -in "$DIR/listener.csr" -CA "$DIR/listener-ca.pem" -CAkey "$DIR/listener-ca.key" -CAcreateserial \
    -days 30 -extfile "$DIR/listener.ext" -out "$DIR/listener.pem" >/dev/null 2>&1
  local profiles=''
  [ -z "$VALIDITY" ] || profiles=", \"profiles\": {\"default\": {\"description\": \"short-lived\", \"validityPeriod\": $VALIDITY}}"
  cat >"$DIR/pebble.json" <<JSON
{"pebble": {"listenAddress": "$LISTEN:$PORT", "managementListenAddress": "$LISTEN:$((PORT + 1))",
  "certificate": "$DIR/listener.pem", "privateKey": "$DIR/listener.key",
  "httpPort": $HTTP_PORT, "tlsPort": $((PORT + 2)), "ocspResponderURL": "", "externalAccountBindingRequired": false$profiles}}
JSON
  # No default answers: a name without records does not resolve, as on the real internet.
  "$BIN/pebble-challtestsrv" -defaultIPv4 "" -defaultIPv6 "" -dnsserver "$DNS" -management "$CHALL_API" \
    -http01 "" -https01 "" -tlsalpn01 "" -doh "" >"$DIR/challtestsrv.log" 2>&1 &
  echo $! >"$DIR/pids/challtestsrv"
  PEBBLE_VA_NOSLEEP=1 PEBBLE_WFE_NONCEREJECT=0 PEBBLE_AUTHZREUSE=0 \
    "$BIN/pebble" -config "$DIR/pebble.json" -dnsserver "$DNS" >"$DIR/pebble.log" 2>&1 &
  echo $! >"$DIR/pids/pebble"
  for _ in $(seq 100); do
    if answers \
      && curl -sf -X POST -d '{"host":"probe.invalid.","addresses":["127.0.0.1"]}' "http://$CHALL_API/add-a" >/dev/null; then
      log "ready: ACME on $LISTEN:$PORT, DNS on $DNS (HTTP-01 port $HTTP_PORT)"
      return
    fi
    sleep 0.1
  done
  tail -n 20 "$DIR/pebble.log" "$DIR/challtestsrv.log" >&2
  die "pebble did not start"
}

case "${1:-}" in
  start) start ;;
  ensure) if answers; then log "running: ACME on $LISTEN:$PORT"; else start; fi ;;
  stop) stop; log "stopped" ;;
  env) env_lines ;;
  *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

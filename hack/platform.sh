#!/usr/bin/env bash
# Runs slipway's components as local processes against the local control plane: the platform database
# (hack/postgres.sh), the admission webhook (registered with the apiserver by URL on loopback), the operator, the
# REST API and the edge (which reaches pods through the host's route to the node's pod network). Used by
# `make up`; `make down` stops it.
#
# As in a cluster, the operator and the edge call the API's internal listener with ServiceAccount tokens for the
# audience slipway-internal: the ServiceAccounts slipway-operator and slipway-edge in slipway-system, whose
# tokens (valid 24 hours; `start` mints new ones) are written to files the processes re-read when they change.
#
# usage: hack/platform.sh start | stop
#
# Needs target/debug/slipway (make up builds it) and a running node (hack/node.sh start) whose `hack/node.sh env`
# exports are set: SLIPWAY_REGISTRY, SLIPWAY_BUILDKIT_ADDR, SLIPWAY_PROBE_IMAGE, SLIPWAY_BUILDER_IMAGE and
# SLIPWAY_NODE_HOST_IP.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
source "$HACK/versions.sh"

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
DIR="$SLIPWAY_RUN/platform"
BIN="$ROOT/target/debug/slipway"
KUBECTL="$KUBE_DIR/bin/kubectl"
export KUBECONFIG="$SLIPWAY_RUN/control-plane/admin.kubeconfig"
API_PORT=${SLIPWAY_API_PORT:-18080}
SSH_PORT=${SLIPWAY_SSH_PORT:-18022}
WEBHOOK_PORT=${SLIPWAY_WEBHOOK_PORT:-18443}
OPERATOR_ADMIN_PORT=${SLIPWAY_OPERATOR_ADMIN_PORT:-18081}
EDGE_PORT=${SLIPWAY_EDGE_PORT:-18000}
EDGE_ADMIN_PORT=${SLIPWAY_EDGE_ADMIN_PORT:-18082}
INTERNAL_PORT=${SLIPWAY_INTERNAL_PORT:-18083}
WEBHOOK_ADMIN_PORT=${SLIPWAY_WEBHOOK_ADMIN_PORT:-18084}
SYSTEM_NAMESPACE=slipway-system
INTERNAL_AUDIENCE=slipway-internal
APP_DOMAIN=${SLIPWAY_APP_DOMAIN:-apps.slipway.localhost}
GIT_HOST=${SLIPWAY_GIT_HOST:-git.slipway.localhost}
WEBHOOK_NAME=slipway-local

log() { printf '[platform %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

stop() {
  "$KUBECTL" delete validatingwebhookconfiguration "$WEBHOOK_NAME" --ignore-not-found >/dev/null 2>&1 || true
  local pidfile
  for pidfile in "$DIR"/pids/*; do
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  pkill -f -- "$BIN (api|operator|webhook|edge) .*$DIR" 2>/dev/null || true
  rm -rf "$DIR/pids"
}

launch() { # name args...
  local name=$1; shift
  "$BIN" "$@" >"$DIR/logs/$name.log" 2>&1 &
  echo $! >"$DIR/pids/$name"
}

wait_for() { # name seconds url [curl args...]
  local name=$1 seconds=$2 url=$3; shift 3
  local deadline=$((SECONDS + seconds))
  until curl -sf --max-time 2 "$@" "$url" >/dev/null 2>&1; do
    kill -0 "$(cat "$DIR/pids/$name")" 2>/dev/null || { tail -n 20 "$DIR/logs/$name.log" >&2; die "$name exited (log: $DIR/logs/$name.log)"; }
    [ $SECONDS -lt $deadline ] || { tail -n 20 "$DIR/logs/$name.log" >&2; die "$name not ready within ${seconds}s"; }
    sleep 0.3
  done
}

webhook_certs() {
  mkdir -p "$DIR/tls"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$DIR/tls/ca.key" -subj "/CN=slipway-local-webhook-ca" \
    -days 365 -out "$DIR/tls/ca.crt" 2>/dev/null
  openssl req -new -newkey rsa:2048 -nodes -keyout "$DIR/tls/tls.key" -subj "/CN=127.0.0.1" -out "$DIR/tls/tls.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$DIR/tls/ext"
  openssl x509 -req -in "$DIR/tls/tls.csr" -CA "$DIR/tls/ca.crt" -CAkey "$DIR/tls/ca.key" -CAcreateserial -days 365 \
    -extfile "$DIR/tls/ext" -out "$DIR/tls/tls.crt" 2>/dev/null
}

register_webhook() {
  local ca
  ca=$(base64 -w0 <"$DIR/tls/ca.crt")
  "$KUBECTL" apply --server-side --force-conflicts -f - >/dev/null <<EOT
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: $WEBHOOK_NAME
webhooks:
  - name: validate.slipway.dev
    admissionReviewVersions: [v1]
    sideEffects: None
    failurePolicy: Fail
    timeoutSeconds: 10
    clientConfig:
      url: https://127.0.0.1:$WEBHOOK_PORT/validate
      caBundle: $ca
    rules:
      - apiGroups: [slipway.dev]
        apiVersions: [v1alpha1]
        operations: [CREATE, UPDATE]
        resources: [apps, channels, deploys, domains, forwards]
        scope: Namespaced
EOT
}

# Creates the operator's and the edge's ServiceAccounts and writes a fresh token of each to $DIR/<name>-token
# (replaced atomically: a running process never reads half a token).
internal_tokens() {
  "$KUBECTL" create namespace "$SYSTEM_NAMESPACE" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
  local name
  for name in operator edge; do
    "$KUBECTL" -n "$SYSTEM_NAMESPACE" create serviceaccount "slipway-$name" --dry-run=client -o yaml \
      | "$KUBECTL" apply -f - >/dev/null
    (umask 077 && "$KUBECTL" -n "$SYSTEM_NAMESPACE" create token "slipway-$name" --audience "$INTERNAL_AUDIENCE" \
      --duration 24h >"$DIR/$name-token.new") || die "could not mint a token for slipway-$name"
    mv "$DIR/$name-token.new" "$DIR/$name-token"
  done
}

start() {
  [ -x "$BIN" ] || die "$BIN is missing; build it with cargo build --bin slipway"
  stop
  mkdir -p "$DIR/pids" "$DIR/logs" "$DIR/repos"
  local db_admin db_url
  db_admin=$("$HACK/postgres.sh" start)
  psql -q "$db_admin" -tc "SELECT 1 FROM pg_database WHERE datname = 'slipway'" | grep -q 1 \
    || psql -q "$db_admin" -c "CREATE DATABASE slipway" >/dev/null
  db_url="${db_admin%/*}/slipway"

  [ -f "$DIR/tls/tls.crt" ] || webhook_certs
  [ -s "$DIR/env-keys" ] || (umask 077 && "$BIN" admin new-env-key --id "k$(date +%Y%m%d)" >"$DIR/env-keys")
  [ -s "$DIR/build-source-key" ] || (umask 077 && openssl rand -hex 32 >"$DIR/build-source-key")
  internal_tokens
  log "starting the webhook on https://127.0.0.1:$WEBHOOK_PORT (admin port $WEBHOOK_ADMIN_PORT)"
  launch webhook webhook --listen "127.0.0.1:$WEBHOOK_PORT" --admin-listen "127.0.0.1:$WEBHOOK_ADMIN_PORT" --tls-cert "$DIR/tls/tls.crt" --tls-key "$DIR/tls/tls.key"
  wait_for webhook 60 "https://127.0.0.1:$WEBHOOK_PORT/readyz" --cacert "$DIR/tls/ca.crt"
  register_webhook


  # Build pods fetch their sources from the internal listener on the host's end of the node's link, so it listens
  # there too.
  log "starting the API on http://127.0.0.1:$API_PORT (internal listener on port $INTERNAL_PORT)"
  launch api api --listen "0.0.0.0:$API_PORT" --database-url "$db_url" --app-domain "$APP_DOMAIN" \
    --git-host "$GIT_HOST" --repos-dir "$DIR/repos" --env-keys-file "$DIR/env-keys" \
    --internal-listen "0.0.0.0:$INTERNAL_PORT" --internal-audience "$INTERNAL_AUDIENCE" \
    --internal-caller "operator=$SYSTEM_NAMESPACE/slipway-operator" --internal-caller "edge=$SYSTEM_NAMESPACE/slipway-edge" \
    --build-source-key-file "$DIR/build-source-key" \
    --ssh-listen "127.0.0.1:$SSH_PORT" --ssh-host-key "$DIR/ssh/ssh_host_ed25519_key"
  wait_for api 60 "http://127.0.0.1:$API_PORT/healthz"
  wait_for api 10 "http://127.0.0.1:$INTERNAL_PORT/healthz"

  log "starting the operator (admin port $OPERATOR_ADMIN_PORT)"
  launch operator operator --app-domain "$APP_DOMAIN" --admin-port "$OPERATOR_ADMIN_PORT" \
    --internal-url "http://127.0.0.1:$INTERNAL_PORT" --pod-internal-url "http://$SLIPWAY_NODE_HOST_IP:$INTERNAL_PORT" \
    --internal-token-file "$DIR/operator-token" --registry "$SLIPWAY_REGISTRY" --buildkit-addr "$SLIPWAY_BUILDKIT_ADDR" \
    --probe-image "$SLIPWAY_PROBE_IMAGE" --builder-image "$SLIPWAY_BUILDER_IMAGE"
  wait_for operator 30 "http://127.0.0.1:$OPERATOR_ADMIN_PORT/readyz"

  log "starting the edge on http://127.0.0.1:$EDGE_PORT (admin port $EDGE_ADMIN_PORT)"
  "$KUBECTL" apply --server-side --force-conflicts -f - >/dev/null <<EOT
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: slipway
spec:
  controller: slipway.dev/edge
EOT
  launch edge edge --listen "0.0.0.0:$EDGE_PORT" --admin-port "$EDGE_ADMIN_PORT" \
    --internal-url "http://127.0.0.1:$INTERNAL_PORT" --internal-token-file "$DIR/edge-token" \
    --site-disk-dir "$DIR/edge-sites"
  wait_for edge 30 "http://127.0.0.1:$EDGE_ADMIN_PORT/readyz"

  # The builder plan: its apps request half a core and 512 MiB, which a small local node can schedule (a pro app
  # requests 4 cores).
  if ! psql -q "$db_url" -tc "SELECT 1 FROM users WHERE username = 'admin'" | grep -q 1; then
    (umask 077 && "$BIN" admin create-user --username admin --plan builder --database-url "$db_url" >"$DIR/admin-token") \
      || die "could not create the admin user"
  fi
  [ -s "$DIR/admin-token" ] || die "the admin user exists but its token is gone; start afresh with make down && make up"
  echo "http://127.0.0.1:$API_PORT $(cat "$DIR/admin-token") http://127.0.0.1:$EDGE_PORT"
}

case "${1:-}" in
  start) start ;;
  stop) stop; rm -rf "$DIR"; log "stopped" ;;
  *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

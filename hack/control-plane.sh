#!/usr/bin/env bash
# A real Kubernetes control plane on loopback, started the way envtest starts one: etcd, kube-apiserver,
# kube-controller-manager (garbage collection, namespace deletion, Deployments, Jobs) and kube-scheduler, with a
# CA generated for the run, client certificates and service-account keys.
#
# usage: hack/control-plane.sh start    build what is missing, start (or reuse a healthy running one)
#        hack/control-plane.sh stop     stop every process of the control plane and remove its data
#        hack/control-plane.sh status   exit 0 when the apiserver answers /readyz
#        hack/control-plane.sh env      print `export KUBECONFIG=...` for a shell
#
# State lives in $SLIPWAY_RUN/control-plane (default ~/.cache/slipway/run/control-plane). A run that crashed is
# cleaned up by the next start: processes found by pid file or by their data directory are stopped, and the
# data directory is wiped before etcd starts again.
#
# The apiserver listens on $SLIPWAY_APISERVER_ADDRESS (default 127.0.0.1). hack/node.sh sets it to the host's end
# of the node's network link, so that pods reach the apiserver through the `kubernetes` Service.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=control-plane

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
CP="$SLIPWAY_RUN/control-plane"
PKI="$CP/pki"
ETCD_CLIENT_PORT=${SLIPWAY_ETCD_PORT:-12379}
ETCD_PEER_PORT=$((ETCD_CLIENT_PORT + 1))
APISERVER_PORT=${SLIPWAY_APISERVER_PORT:-16443}
APISERVER_ADDRESS=${SLIPWAY_APISERVER_ADDRESS:-127.0.0.1}
SERVICE_CIDR=${SLIPWAY_SERVICE_CIDR:-10.96.0.0/16}
KUBECONFIG_ADMIN="$CP/admin.kubeconfig"
COMPONENTS=(kube-scheduler kube-controller-manager kube-apiserver etcd)

bin() {
  case "$1" in
    etcd) echo "$ETCD_DIR/bin/etcd" ;;
    *) echo "$KUBE_DIR/bin/$1" ;;
  esac
}

apiserver_ready() {
  [ -f "$PKI/admin.crt" ] || return 1
  curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$APISERVER_ADDRESS:$APISERVER_PORT/readyz" >/dev/null 2>&1
}

all_running() {
  local c
  [ "$(cat "$CP/address" 2>/dev/null)" = "$APISERVER_ADDRESS" ] || return 1
  for c in "${COMPONENTS[@]}"; do
    [ -f "$CP/pids/$c" ] && kill -0 "$(cat "$CP/pids/$c")" 2>/dev/null || return 1
  done
}

port_owner() { ss -Hltnp "sport = :$1" 2>/dev/null | sed -n 's/.*users:((\("[^"]*"\).*/\1/p' | head -1; }

# Stops every process of this control plane: by pid file, then anything still running with our directory in its
# command line (a crashed run may have lost its pid files).
stop_processes() {
  kill_pidfiles "$CP" "${COMPONENTS[@]}"
  stop_naming "$CP/"
  rm -rf "$CP/pids"
}

gen_pki() {
  log "generating a CA, serving and client certificates, service-account keys"
  rm -rf "$PKI"; mkdir -p "$PKI"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -subj "/CN=slipway-local-ca" -days 365 \
    -out "$PKI/ca.crt" 2>/dev/null
  local first_service_ip
  first_service_ip=$(echo "$SERVICE_CIDR" | awk -F'[./]' '{print $1"."$2"."$3"."$4+1}')
  cat >"$PKI/serving.ext" <<EOF
subjectAltName=IP:127.0.0.1,IP:$APISERVER_ADDRESS,IP:$first_service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth
EOF
  echo "extendedKeyUsage=clientAuth" >"$PKI/client.ext"
  gen_cert "$PKI" apiserver "/CN=kube-apiserver" "$PKI/serving.ext"
  gen_cert "$PKI" admin "/O=system:masters/CN=slipway-admin" "$PKI/client.ext"
  gen_cert "$PKI" controller-manager "/CN=system:kube-controller-manager" "$PKI/client.ext"
  gen_cert "$PKI" scheduler "/CN=system:kube-scheduler" "$PKI/client.ext"
  gen_cert "$PKI" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$PKI/client.ext"
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
}

launch() { # name args...
  local name=$1; shift
  "$(bin "$name")" "$@" >"$CP/logs/$name.log" 2>&1 &
  echo $! >"$CP/pids/$name"
}

wait_for() { # what seconds command...
  local what=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$(cat "$CP/pids/$what")" 2>/dev/null; then
      log "$what exited or did not come up within ${seconds}s; last lines of its log:"
      tail -n 30 "$CP/logs/$what.log" >&2 || true
      die "$what failed to start (full log: $CP/logs/$what.log)"
    fi
    sleep 0.2
  done
}

etcd_healthy() { curl -sf --max-time 2 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" | grep -q '"health":"true"'; }

start() {
  "$HACK/build-kube.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
  if all_running && apiserver_ready; then
    log "already running at https://$APISERVER_ADDRESS:$APISERVER_PORT (reused)"
    print_env
    return
  fi
  log "cleaning up what an earlier run left behind"
  stop_processes
  local port owner
  for port in "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT"; do
    owner=$(port_owner "$port")
    [ -z "$owner" ] || die "port $port is held by $owner, which is not part of this control plane; stop it or set SLIPWAY_ETCD_PORT / SLIPWAY_APISERVER_PORT"
  done
  rm -rf "$CP"
  mkdir -p "$CP/pids" "$CP/logs" "$CP/etcd"
  gen_pki
  echo "$APISERVER_ADDRESS" >"$CP/address"
  local server="https://$APISERVER_ADDRESS:$APISERVER_PORT"
  write_kubeconfig "$KUBECONFIG_ADMIN" "$server" "$PKI" admin
  write_kubeconfig "$CP/controller-manager.kubeconfig" "$server" "$PKI" controller-manager
  write_kubeconfig "$CP/scheduler.kubeconfig" "$server" "$PKI" scheduler

  log "starting etcd $ETCD_VERSION on 127.0.0.1:$ETCD_CLIENT_PORT"
  launch etcd --name=slipway --data-dir="$CP/etcd" --unsafe-no-fsync \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="slipway=http://127.0.0.1:$ETCD_PEER_PORT" --log-level=warn
  wait_for etcd 30 etcd_healthy

  # On loopback there is no address to publish for the `kubernetes` Service (nothing outside the host could use
  # it); on the node link the apiserver publishes its own, and pods reach it through that Service.
  local reconciler=lease
  [ "$APISERVER_ADDRESS" != 127.0.0.1 ] || reconciler=none
  log "starting kube-apiserver $KUBE_VERSION on https://$APISERVER_ADDRESS:$APISERVER_PORT"
  launch kube-apiserver --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address="$APISERVER_ADDRESS" --advertise-address="$APISERVER_ADDRESS" --secure-port="$APISERVER_PORT" \
    --cert-dir="$CP/apiserver-certs" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --client-ca-file="$PKI/ca.crt" --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-preferred-address-types=InternalIP \
    --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --endpoint-reconciler-type="$reconciler" --profiling=false
  wait_for kube-apiserver 90 apiserver_ready

  log "starting kube-controller-manager and kube-scheduler"
  launch kube-controller-manager --kubeconfig="$CP/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$CP/controller-manager.kubeconfig" --authorization-kubeconfig="$CP/controller-manager.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --use-service-account-credentials=true --controllers='*,-bootstrapsigner,-tokencleaner'
  launch kube-scheduler --kubeconfig="$CP/scheduler.kubeconfig" \
    --authentication-kubeconfig="$CP/scheduler.kubeconfig" --authorization-kubeconfig="$CP/scheduler.kubeconfig" \
    --leader-elect=false --bind-address=127.0.0.1 --secure-port=0
  sleep 1
  for c in kube-controller-manager kube-scheduler; do
    kill -0 "$(cat "$CP/pids/$c")" 2>/dev/null || { tail -n 30 "$CP/logs/$c.log" >&2; die "$c exited at start (log: $CP/logs/$c.log)"; }
  done
  log "ready: $("$(bin kubectl)" --kubeconfig "$KUBECONFIG_ADMIN" version 2>/dev/null | tr '\n' ' ')"
  print_env
}

print_env() {
  log "kubeconfig: $KUBECONFIG_ADMIN"
  log "kubectl:    $(bin kubectl)"
}

case "${1:-}" in
  start) start ;;
  stop)
    stop_processes
    rm -rf "$CP"
    log "stopped"
    ;;
  status)
    if all_running && apiserver_ready; then log "running at https://$APISERVER_ADDRESS:$APISERVER_PORT"; else log "not running"; exit 1; fi
    ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$KUBE_DIR/bin:\$PATH" ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

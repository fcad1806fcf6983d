#!/usr/bin/env bash
# A real single-node Kubernetes cluster on this machine, on top of hack/control-plane.sh: containerd 2 with
# Debian's runc, the kubelet, kube-proxy (iptables mode), CNI bridge networking, kube-router enforcing
# NetworkPolicies (its firewall only: iptables and ipset), CoreDNS, a local image registry and BuildKit, whose build
# steps run on a bridge of their own that reaches nothing internal. It runs pods from images built here
# (hack/build-images.sh) and never pulls from outside.
#
# usage: hack/node.sh start    build what is missing, start the control plane and the node (or reuse a healthy one)
#        hack/node.sh build    build what is missing and start nothing
#        hack/node.sh stop     stop the node and the control plane and remove everything they left
#        hack/node.sh status   exit 0 when the node is Ready
#        hack/node.sh env      print the exports a shell or a test needs (KUBECONFIG, registry, BuildKit, builder image)
#        hack/node.sh build-network open|isolated
#                              drop or restore the rules that keep build steps from internal addresses
#
# The node lives in a network namespace of its own (slipway-node<slot>), linked to the host by a veth pair with
# addresses we create: the host end carries the apiserver, the node end the kubelet and the registry. Pods get
# addresses on a bridge inside it, with no masquerade and no route beyond the host, and a FORWARD drop on both
# sides keeps every packet on this machine. Its processes and containers run under one cgroup
# (/slipway-node<slot>), so a crashed run is cleaned up completely by the next start: processes that name the
# state directory or sit in that cgroup are killed, mounts under the state directory are unmounted, the network
# namespace, our tagged iptables rules and the cgroups are removed.
#
# Settings: SLIPWAY_RUN (state, default ~/.cache/slipway/run), SLIPWAY_NODE_SLOT (0-9, picks the addresses and
# names so that two nodes, `make up` and the test run, live side by side), and the control plane's ports.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
source "$HACK/oci.sh"
source "$HACK/node-config.sh"
LOG_TAG=node

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
NODE="$SLIPWAY_RUN/node"
SLOT=${SLIPWAY_NODE_SLOT:-0}
[[ $SLOT =~ ^[0-9]$ ]] || die "SLIPWAY_NODE_SLOT must be a digit, not '$SLOT'"
NAME=slipway-node$SLOT              # network namespace, cgroup, iptables comment
HOST_IF=slipway$SLOT                # host end of the link (the node end is eth0 inside the namespace)
HOST_IP=10.243.$SLOT.1
# What apps on this node request of their plan's CPU share, in percent (the operator's --cpu-request-percent): the
# node's cores serve the platform, the builds and every app, and the apps idle most of the time. With their whole
# share reserved, a third app of the builder plan already waited unscheduled ("Insufficient cpu") beside the
# platform while the cores were nine tenths idle.
CPU_REQUEST_PERCENT=20
NODE_IP=10.243.$SLOT.2
POD_CIDR=10.$((244 + SLOT)).0.0/16
SERVICE_CIDR=10.$((96 + SLOT)).0.0/16
BUILD_BRIDGE=buildkit0              # build steps' network (inside the node's namespace)
BUILD_CIDR=172.30.$SLOT.0/24
# What build steps may not reach: private, shared and link-local ranges, which hold the cluster's pods, Services
# and nodes, this machine and cloud metadata.
INTERNAL_CIDRS=(10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 169.254.0.0/16)
DNS_IP=10.$((96 + SLOT)).0.10
NODE_NAME=slipway-node
REGISTRY="$NODE_IP:5000"          # public images: the platform's, CoreDNS, the Docker Hub mirror (open to pulls)
# The apps' registry: token auth, with slipway's api as the token issuer (realm) on the node port hack/install.sh
# gives it; hack/install.sh hands the signing key to the chart.
APPS_REGISTRY="$NODE_IP:5001"
API_NODE_PORT=30080
REGISTRY_TOKEN_KEY="$SLIPWAY_RUN/node-keys/registry-token.pem"
BUILDKIT_CA_DIR="$SLIPWAY_RUN/node-keys/buildkit"   # the CA BuildKit trusts for clients (and signs its own cert)
CP="$SLIPWAY_RUN/control-plane"
PKI="$CP/pki"
CONTAINERD_BIN="$SLIPWAY_CACHE/containerd-$CONTAINERD_VERSION/bin"
BUILDKIT_BIN="$SLIPWAY_CACHE/buildkit-$BUILDKIT_VERSION/bin"
KUBECTL="$KUBE_DIR/bin/kubectl"
KUBE_ROUTER_BIN="$SLIPWAY_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin/kube-router"
DAEMONS=(kube-router kubelet kube-proxy buildkitd apps-registry registry containerd)   # stop order
export SLIPWAY_APISERVER_ADDRESS=$HOST_IP SLIPWAY_SERVICE_CIDR=$SERVICE_CIDR
# A proxy set for the outside must never see the node's traffic (containerd's pulls, the kubelet, our curls).
export NO_PROXY="${NO_PROXY:+$NO_PROXY,}10.243.$SLOT.0/24,$POD_CIDR,$SERVICE_CIDR,.svc,.cluster.local"
export no_proxy=$NO_PROXY
export PATH="$CONTAINERD_BIN:$BUILDKIT_BIN:$KUBE_DIR/bin:/usr/local/sbin:/usr/sbin:/sbin:$PATH"

kubectl() { "$KUBECTL" --kubeconfig "$CP/admin.kubeconfig" "$@"; }
in_node() { nsenter --net="/run/netns/$NAME" -- "$@"; }

# --- cgroups ---------------------------------------------------------------------------------------------------

# Every mounted cgroup hierarchy (v1 controllers and the v2 tree).
cgroup_roots() { awk -F' - ' '{ split($1, a, " "); split($2, b, " "); if (b[1] == "cgroup" || b[1] == "cgroup2") print a[5] }' /proc/self/mountinfo; }

# The hierarchy that tracks every process (v1 "pids" controller, else the v2 tree).
pids_root() {
  local r
  r=$(awk -F' - ' '{ split($1, a, " "); split($2, b, " "); if (b[1] == "cgroup" && b[3] ~ /(^|,)pids(,|$)/) print a[5] }' /proc/self/mountinfo | head -1)
  [ -n "$r" ] || r=$(awk -F' - ' '{ split($1, a, " "); split($2, b, " "); if (b[1] == "cgroup2") print a[5] }' /proc/self/mountinfo | head -1)
  [ -n "$r" ] || die "no cgroup hierarchy is mounted"
  echo "$r"
}

# Creates /$NAME in every hierarchy (the kubelet's cgroupRoot) and /$NAME/daemons for our processes.
cgroup_create() {
  local root
  for root in $(cgroup_roots); do
    mkdir -p "$root/$NAME"
    if [ -f "$root/cpuset.cpus" ]; then   # a v1 cpuset cgroup starts empty and takes no process until filled
      cat "$root/cpuset.cpus" >"$root/$NAME/cpuset.cpus"
      cat "$root/cpuset.mems" >"$root/$NAME/cpuset.mems"
    fi
  done
  mkdir -p "$(pids_root)/$NAME/daemons"
}

# Kills every process in our cgroup tree: containers whose shim is gone are found nowhere else.
cgroup_kill() {
  local root procs
  root="$(pids_root)/$NAME"
  [ -d "$root" ] || return 0
  for _ in $(seq 50); do
    procs=$(find "$root" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')
    [ -n "${procs// /}" ] || return 0
    # shellcheck disable=SC2086
    kill -9 $procs 2>/dev/null || true
    sleep 0.1
  done
  die "processes in cgroup $root survived SIGKILL: $procs"
}

cgroup_remove() {
  local root
  for root in $(cgroup_roots); do
    [ ! -d "$root/$NAME" ] || find "$root/$NAME" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
}

# --- network ---------------------------------------------------------------------------------------------------

# Our rules on the host, found by their comment and deleted by their text, not their number: another slot's node
# (`make up` beside a test run) starting or stopping at the same time inserts and deletes rules in the same chain,
# which moves the numbers, and a number read before the move deletes another node's rule.
iptables_tagged_remove() {
  local rule
  while IFS= read -r rule; do
    eval "iptables -D ${rule#-A }"
  done < <(iptables -S FORWARD 2>/dev/null | grep -F -- "--comment \"$NAME:")
}

net_up() {
  ip netns add "$NAME"
  ip link add "$HOST_IF" type veth peer name eth0 netns "$NAME"
  sysctl -qw "net.ipv6.conf.$HOST_IF.disable_ipv6=1" 2>/dev/null || true   # no IPv6 on the link (if the host has it)
  ip addr add "$HOST_IP/24" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  # The host reaches pods and Services through the node (the apiserver calls webhooks and kubelets there).
  ip route add "$POD_CIDR" via "$NODE_IP" dev "$HOST_IF"
  ip route add "$SERVICE_CIDR" via "$NODE_IP" dev "$HOST_IF"
  iptables -I FORWARD 1 -i "$HOST_IF" -m comment --comment "$NAME: the node traffic is never forwarded off this machine" -j DROP

  in_node sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
  in_node sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  in_node ip link set lo up
  in_node ip addr add "$NODE_IP/24" dev eth0
  in_node ip link set eth0 up
  # No default route: nothing but the host is reachable. Services need a route for the node's own connections
  # (kube-proxy rewrites the destination after routing).
  in_node ip route add "$SERVICE_CIDR" dev eth0
}

# Pods reach the host (the apiserver) and nothing else through the link. In the mangle table, which runs before
# the filter table's FORWARD, where kube-router keeps its own chain first and accepts what policies allow.
pods_stay_local() {
  in_node iptables -t mangle -I FORWARD 1 -i cni0 -o eth0 ! -d "$HOST_IP" \
    -m comment --comment "$NAME: pods reach nothing beyond this machine" -j DROP
}

# Build steps reach the outside and nothing of this machine or the cluster: not the node's own services (the
# kubelet, the registry, BuildKit's port, node ports), not pods or Services, not the host, not each other. The
# rules sit in the raw table, before kube-proxy rewrites Service addresses and before kube-router's FORWARD chain
# accepts traffic to pods without policies. Only DNS to the resolvers build steps are given stays open.
build_steps_stay_out() {
  local cidr resolver proto
  for cidr in "${INTERNAL_CIDRS[@]}"; do
    in_node iptables -t raw -I PREROUTING 1 -i "$BUILD_BRIDGE" -d "$cidr" \
      -m comment --comment "$NAME: build steps reach nothing internal" -j DROP
  done
  for resolver in $(awk '$1 == "nameserver" && $2 !~ /^127\./ && $2 !~ /:/ { print $2 }' /etc/resolv.conf); do
    for proto in udp tcp; do
      in_node iptables -t raw -I PREROUTING 1 -i "$BUILD_BRIDGE" -d "$resolver" -p "$proto" --dport 53 \
        -m comment --comment "$NAME: build steps may ask the resolver" -j ACCEPT
    done
  done
}

# Removes build_steps_stay_out's rules (hack/node.sh build-network open: the hostile-tenant suite's control).
build_steps_let_out() {
  local n
  for n in $(in_node iptables -t raw -L PREROUTING -n --line-numbers | awk -v tag="/* $NAME: build steps" 'index($0, tag) { print $1 }' | sort -rn); do
    in_node iptables -t raw -D PREROUTING "$n"
  done
}

net_down() {
  ip netns del "$NAME" 2>/dev/null || true
  ip link del "$HOST_IF" 2>/dev/null || true
  iptables_tagged_remove
}

# --- processes -------------------------------------------------------------------------------------------------

# Starts a daemon inside the node's network namespace and cgroup, logging to $NODE/logs/NAME.log.
launch() {
  local name=$1 cg
  shift
  cg="$(pids_root)/$NAME/daemons/cgroup.procs"
  (
    echo "$BASHPID" >"$cg"
    exec nsenter --net="/run/netns/$NAME" -- "$@"
  ) >"$NODE/logs/$name.log" 2>&1 &
  echo $! >"$NODE/pids/$name"
}

wait_for() { # name seconds command...
  local name=$1 seconds=$2 deadline
  shift 2
  deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$NODE/pids/$name" 2>/dev/null || echo 0)" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      log "$name did not come up within ${seconds}s; last lines of its log:"
      tail -n 40 "$NODE/logs/$name.log" >&2 || true
      die "$name failed to start (full log: $NODE/logs/$name.log)"
    fi
    sleep 0.3
  done
}

stop_node() {
  kill_pidfiles "$NODE" "${DAEMONS[@]}"
  stop_naming "$NODE/"
  cgroup_kill
  # Shims listen in /run/containerd/s whatever the state directory is; each task's bundle names its socket.
  local bootstrap
  for bootstrap in "$NODE"/containerd/state/io.containerd.runtime.v2.task/*/*/bootstrap.json; do
    [ ! -f "$bootstrap" ] || rm -f "$(jq -r '.address | sub("^unix://"; "")' "$bootstrap")"
  done
  unmount_under "$NODE"
  net_down
  cgroup_remove
  if [ -d "$NODE/logs" ]; then   # kept for a look after a failed run
    rm -rf "$SLIPWAY_RUN/node-logs.last"
    mv "$NODE/logs" "$SLIPWAY_RUN/node-logs.last"
  fi
  rm -rf "$NODE"
}

# --- start -----------------------------------------------------------------------------------------------------

node_ready() {
  [ "$(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# The apps' registry answers, and asks for a token from slipway.
apps_registry_challenges() {
  curl -s -o /dev/null -D - "http://$APPS_REGISTRY/v2/" | grep -qi '^www-authenticate: bearer realm='
}

healthy() {
  local d
  [ -f "$NODE/env" ] || return 1   # written when a start finished
  for d in "${DAEMONS[@]}"; do
    [ -f "$NODE/pids/$d" ] && kill -0 "$(cat "$NODE/pids/$d")" 2>/dev/null || return 1
  done
  "$HACK/control-plane.sh" status >/dev/null 2>&1 && node_ready
}

push_images() {
  local layout
  while read -r layout; do
    oci_push "$layout" "$REGISTRY"
    log "  $REGISTRY <- $(oci_ref "$layout")"
  done < <("$HACK/build-images.sh")
}

build() {
  "$HACK/build-kube.sh" etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy
  "$HACK/build-node.sh"
  "$HACK/build-images.sh" >/dev/null
}

start() {
  [ "$(id -u)" -eq 0 ] || die "the node needs root (network namespaces, mounts, cgroups, iptables)"
  build
  if healthy; then
    log "already running (reused)"
    print_env >&2
    return
  fi
  log "cleaning up what an earlier run left behind"
  stop_node
  "$HACK/control-plane.sh" stop >/dev/null 2>&1 || true

  log "network namespace $NAME: node $NODE_IP, host $HOST_IP, pods $POD_CIDR, services $SERVICE_CIDR"
  mkdir -p "$NODE"
  net_up
  cgroup_create
  "$HACK/control-plane.sh" start
  write_configs

  log "starting containerd $CONTAINERD_VERSION with $(runc --version | head -1)"
  launch containerd containerd --config "$NODE/containerd/config.toml"
  wait_for containerd 30 ctr --address "$NODE/containerd/containerd.sock" version

  log "starting the registry $REGISTRY_VERSION on http://$REGISTRY"
  launch registry "$SLIPWAY_CACHE/registry-$REGISTRY_VERSION/bin/registry" serve "$NODE/registry.yaml"
  wait_for registry 30 curl -sf "http://$REGISTRY/v2/"
  log "pushing the local images"
  push_images
  log "starting the apps' registry on http://$APPS_REGISTRY (token auth, issuer slipway)"
  launch apps-registry "$SLIPWAY_CACHE/registry-$REGISTRY_VERSION/bin/registry" serve "$NODE/apps-registry.yaml"
  wait_for apps-registry 30 apps_registry_challenges

  log "starting buildkitd $BUILDKIT_VERSION (OCI worker)"
  launch buildkitd buildkitd --config "$NODE/buildkitd.toml"
  wait_for buildkitd 30 buildctl --addr "unix://$NODE/buildkit/buildkitd.sock" debug workers

  log "starting the kubelet $KUBE_VERSION"
  launch kubelet "$KUBE_DIR/bin/kubelet" --config="$NODE/kubelet.yaml" --kubeconfig="$NODE/kubelet.kubeconfig" \
    --root-dir="$NODE/kubelet" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME"
  wait_for kubelet 120 node_ready

  log "starting kube-proxy $KUBE_VERSION (iptables mode)"
  launch kube-proxy "$KUBE_DIR/bin/kube-proxy" --config="$NODE/kube-proxy.yaml"
  wait_for kube-proxy 30 in_node curl -sf http://127.0.0.1:10256/healthz
  pods_stay_local
  build_steps_stay_out

  # Only the NetworkPolicy controller: pod networking is the bridge's and Services are kube-proxy's. Its chains and
  # ipsets live in the node's network namespace and go with it.
  log "starting kube-router $KUBE_ROUTER_VERSION (NetworkPolicy enforcement)"
  launch kube-router "$KUBE_ROUTER_BIN" --run-firewall=true --run-router=false --run-service-proxy=false \
    --kubeconfig="$CP/admin.kubeconfig" --hostname-override="$NODE_NAME" --service-cluster-ip-range="$SERVICE_CIDR" \
    --health-addr=127.0.0.1 --health-port=20244 --metrics-port=0
  wait_for kube-router 60 in_node curl -sf http://127.0.0.1:20244/healthz

  log "deploying CoreDNS $COREDNS_VERSION for cluster.local on $DNS_IP"
  sed -e "s|\${DNS_IP}|$DNS_IP|g" -e "s|\${COREDNS_IMAGE}|registry.k8s.io/coredns/coredns:$COREDNS_VERSION|g" \
    -e "s|\${APP_DOMAIN}|${SLIPWAY_APP_DOMAIN:-apps.slipway.localhost}|g" -e "s|\${NODE_IP}|$NODE_IP|g" \
    "$HACK/manifests/coredns.yaml" | kubectl apply -f - >/dev/null
  if ! kubectl -n kube-system rollout status deployment/coredns --timeout=120s >&2; then
    kubectl -n kube-system describe pods -l k8s-app=kube-dns >&2 || true
    die "CoreDNS did not become available"
  fi
  print_env >"$NODE/env"
  log "ready: node $NODE_NAME runs pods; registry http://$REGISTRY; BuildKit unix://$NODE/buildkit/buildkitd.sock"
  print_env >&2
}

print_env() {
  cat <<EOF
export KUBECONFIG=$CP/admin.kubeconfig
export PATH=$KUBE_DIR/bin:$BUILDKIT_BIN:\$PATH
export BUILDKIT_HOST=unix://$NODE/buildkit/buildkitd.sock
export SLIPWAY_REGISTRY=$REGISTRY
export SLIPWAY_APPS_REGISTRY=$APPS_REGISTRY
export SLIPWAY_REGISTRY_TOKEN_KEY=$REGISTRY_TOKEN_KEY
export SLIPWAY_API_NODE_PORT=$API_NODE_PORT
export SLIPWAY_NODE_HOST_IP=$HOST_IP
export SLIPWAY_NODE_IP=$NODE_IP
export SLIPWAY_CTR=$CONTAINERD_BIN/ctr
export SLIPWAY_CONTAINERD_SOCKET=$NODE/containerd/containerd.sock
export SLIPWAY_POD_CIDR=$POD_CIDR
export SLIPWAY_BUILDKIT_ADDR=tcp://$NODE_IP:1234
export SLIPWAY_BUILDKIT_CA_CERT_FILE=$BUILDKIT_CA_DIR/ca.crt
export SLIPWAY_BUILDKIT_CA_KEY_FILE=$BUILDKIT_CA_DIR/ca.key
export SLIPWAY_PROBE_IMAGE=busybox:$(busybox_version)
export SLIPWAY_BUILDER_IMAGE=$REGISTRY/slipway/builder:$BUILDKIT_VERSION
export SLIPWAY_CPU_REQUEST_PERCENT=$CPU_REQUEST_PERCENT
EOF
}

case "${1:-}" in
  start) start ;;
  build) build ;;
  stop)
    stop_node
    "$HACK/control-plane.sh" stop
    log "stopped"
    ;;
  status)
    if healthy; then log "node $NODE_NAME is Ready"; else log "not running"; exit 1; fi
    ;;
  env) print_env ;;
  build-network)
    case "${2:-}" in
      open) build_steps_let_out; log "build steps reach everything the node reaches" ;;
      isolated) build_steps_let_out; build_steps_stay_out; log "build steps reach nothing internal" ;;
      *) die "usage: hack/node.sh build-network open|isolated" ;;
    esac
    ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

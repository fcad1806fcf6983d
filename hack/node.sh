#!/usr/bin/env bash
# A real Kubernetes cluster of one node or more on this machine, on top of hack/control-plane.sh: containerd 2 with
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
#        hack/node.sh join K   start node K (1-3) beside the first, joined to the same control plane
#        hack/node.sh leave K  drain node K, delete its Node and stop it
#
# Each node lives in a network namespace of its own (slipway-node<slot>, then slipway-node<slot>-K), its veth a port
# of a bridge on the host (slipway<slot>) with addresses we create: the bridge carries the apiserver, the first node
# (10.243.<slot>.2) the kubelet, the registries and BuildKit, node K 10.243.<slot>.(2+K). Node K's pods get
# 10.(244+slot).K.0/24 on a bridge inside it, routed to the other nodes over the link, with no masquerade and no
# route beyond the host, and a FORWARD drop on both sides keeps every packet on this machine. All nodes share this
# machine's disk, so a hostPath volume moves with its pod as a network volume would. Each node's processes and
# containers run under one cgroup (/slipway-node<slot>[-K]), so a crashed run is cleaned up completely by the next
# start: processes that name the state directory or sit in that cgroup are killed, mounts under the state
# directory are unmounted, the network namespace, our tagged iptables rules and the cgroups are removed.
#
# Settings: SLIPWAY_RUN (state, default ~/.cache/slipway/run), SLIPWAY_NODE_SLOT (0-9, picks the addresses and
# names so that two clusters, `make up` and the test run, live side by side), SLIPWAY_NODES (1-4, the nodes `start`
# brings up; default 1), and the control plane's ports.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
source "$HACK/oci.sh"
source "$HACK/node-config.sh"
LOG_TAG=node

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
SLOT=${SLIPWAY_NODE_SLOT:-0}
[[ $SLOT =~ ^[0-9]$ ]] || die "SLIPWAY_NODE_SLOT must be a digit, not '$SLOT'"
HOST_IF=slipway$SLOT                # the host's bridge; each node's link is a port of it
HOST_IP=10.243.$SLOT.1
# What apps on this node request of their plan's CPU share, in percent (the operator's --cpu-request-percent): the
# node's cores serve the platform, the builds and every app, and the apps idle most of the time. With their whole
# share reserved, a third app of the builder plan already waited unscheduled ("Insufficient cpu") beside the
# platform while the cores were nine tenths idle.
CPU_REQUEST_PERCENT=20
FIRST_NODE_IP=10.243.$SLOT.2        # the first node's address: the registries, BuildKit, node ports
POD_CIDR=10.$((244 + SLOT)).0.0/16  # every node's pods; node K's are the /24 10.(244+slot).K.0
SERVICE_CIDR=10.$((96 + SLOT)).0.0/16
BUILD_BRIDGE=buildkit0              # build steps' network (inside the first node's namespace)
BUILD_CIDR=172.30.$SLOT.0/24
# What build steps may not reach: private, shared and link-local ranges, which hold the cluster's pods, Services
# and nodes, this machine and cloud metadata.
INTERNAL_CIDRS=(10.0.0.0/8 172.16.0.0/12 192.168.0.0/16 100.64.0.0/10 169.254.0.0/16)
DNS_IP=10.$((96 + SLOT)).0.10
REGISTRY="$FIRST_NODE_IP:5000"    # public images: the platform's, CoreDNS, the Docker Hub mirror (open to pulls)
# The apps' registry: token auth, with slipway's api as the token issuer (realm) on the node port hack/install.sh
# gives it; hack/install.sh hands the signing key to the chart.
APPS_REGISTRY="$FIRST_NODE_IP:5001"
API_NODE_PORT=30080
REGISTRY_TOKEN_KEY="$SLIPWAY_RUN/node-keys/registry-token.pem"
BUILDKIT_CA_DIR="$SLIPWAY_RUN/node-keys/buildkit"   # the CA BuildKit trusts for clients (and signs its own cert)
CP="$SLIPWAY_RUN/control-plane"
PKI="$CP/pki"
CONTAINERD_BIN="$SLIPWAY_CACHE/containerd-$CONTAINERD_VERSION/bin"
BUILDKIT_BIN="$SLIPWAY_CACHE/buildkit-$BUILDKIT_VERSION/bin"
KUBECTL="$KUBE_DIR/bin/kubectl"
KUBE_ROUTER_BIN="$SLIPWAY_CACHE/kube-router-$KUBE_ROUTER_VERSION/bin/kube-router"
MAX_NODES=4
NODES=${SLIPWAY_NODES:-1}           # nodes `start` brings up
[[ $NODES =~ ^[1-4]$ ]] || die "SLIPWAY_NODES must be 1 to $MAX_NODES, not '$NODES'"

# Selects node K (0 is the first, which also runs the registries, BuildKit and CoreDNS): its network namespace,
# cgroup and iptables comment (NAME), state directory, link, addresses, pods' range and Node name, and the daemons
# it runs, in stop order.
select_node() {
  INDEX=$1
  [[ $INDEX =~ ^[0-9]$ ]] && [ "$INDEX" -lt "$MAX_NODES" ] || die "a node number is 0 to $((MAX_NODES - 1)), not '$INDEX'"
  if [ "$INDEX" = 0 ]; then
    NAME=slipway-node$SLOT NODE="$SLIPWAY_RUN/node" NODE_NAME=slipway-node
    DAEMONS=(kube-router kubelet kube-proxy buildkitd apps-registry registry containerd)
  else
    NAME=slipway-node$SLOT-$INDEX NODE="$SLIPWAY_RUN/node-$INDEX" NODE_NAME=slipway-node-$INDEX
    DAEMONS=(kube-router kubelet kube-proxy containerd)
  fi
  LINK_IF=slipway${SLOT}n$INDEX
  NODE_IP=10.243.$SLOT.$((2 + INDEX))
  NODE_POD_CIDR=10.$((244 + SLOT)).$INDEX.0/24
}
select_node 0

# The nodes running besides the one selected: "index address pods" lines.
other_nodes() {
  local k
  for k in $(seq 0 $((MAX_NODES - 1))); do
    [ "$k" != "$INDEX" ] || continue
    [ "$k" = 0 ] && [ -e "/run/netns/slipway-node$SLOT" ] || [ -e "/run/netns/slipway-node$SLOT-$k" ] || continue
    echo "$k 10.243.$SLOT.$((2 + k)) 10.$((244 + SLOT)).$k.0/24"
  done
}

export SLIPWAY_APISERVER_ADDRESS=$HOST_IP SLIPWAY_SERVICE_CIDR=$SERVICE_CIDR
# A proxy set for the outside must never see the node's traffic (containerd's pulls, the kubelet, our curls).
export NO_PROXY="${NO_PROXY:+$NO_PROXY,}10.243.$SLOT.0/24,$POD_CIDR,$SERVICE_CIDR,.svc,.cluster.local"
export no_proxy=$NO_PROXY
export PATH="$CONTAINERD_BIN:$BUILDKIT_BIN:$KUBE_DIR/bin:/usr/local/sbin:/usr/sbin:/sbin:$PATH"

kubectl() { "$KUBECTL" --kubeconfig "$CP/admin.kubeconfig" "$@"; }
in_node() { nsenter --net="/run/netns/$NAME" -- "$@"; }
in_netns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" -- "$@"; }

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

# The host's bridge, made by the first node: it carries the apiserver's address, routes Services through the
# first node, and forwards nothing off this machine (frames between the nodes' links pass; the rest is dropped).
bridge_up() {
  ip link add "$HOST_IF" type bridge
  sysctl -qw "net.ipv6.conf.$HOST_IF.disable_ipv6=1" 2>/dev/null || true   # no IPv6 on the link (if the host has it)
  ip addr add "$HOST_IP/24" dev "$HOST_IF"
  ip link set "$HOST_IF" up
  # The host reaches Services through the first node (the apiserver calls webhooks there).
  ip route add "$SERVICE_CIDR" via "$FIRST_NODE_IP" dev "$HOST_IF"
  iptables -I FORWARD 1 -i "$HOST_IF" -m comment --comment "$NAME: the node traffic is never forwarded off this machine" -j DROP
  iptables -I FORWARD 1 -i "$HOST_IF" -o "$HOST_IF" -m comment --comment "$NAME: the nodes reach each other" -j ACCEPT
}

net_up() {
  if [ "$INDEX" = 0 ]; then bridge_up; fi
  ip netns add "$NAME"
  ip link add "$LINK_IF" type veth peer name eth0 netns "$NAME"
  sysctl -qw "net.ipv6.conf.$LINK_IF.disable_ipv6=1" 2>/dev/null || true
  ip link set "$LINK_IF" master "$HOST_IF" up
  # The host reaches this node's pods (the apiserver calls webhooks and kubelets there).
  ip route add "$NODE_POD_CIDR" via "$NODE_IP" dev "$HOST_IF"

  in_node sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
  in_node sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
  in_node ip link set lo up
  in_node ip addr add "$NODE_IP/24" dev eth0
  in_node ip link set eth0 up
  # No default route: nothing but the host and the other nodes is reachable. Services need a route for the node's
  # own connections (kube-proxy rewrites the destination after routing).
  in_node ip route add "$SERVICE_CIDR" dev eth0
  # The other nodes' pods through their nodes, and this node's pods from theirs.
  local k ip pods
  while read -r k ip pods; do
    in_node ip route replace "$pods" via "$ip" dev eth0
    in_netns "$(node_netns "$k")" ip route replace "$NODE_POD_CIDR" via "$NODE_IP" dev eth0
  done < <(other_nodes)
}

node_netns() { if [ "$1" = 0 ]; then echo "slipway-node$SLOT"; else echo "slipway-node$SLOT-$1"; fi; }

# Pods reach the host (the apiserver) and nothing else through the link. In the mangle table, which runs before
# the filter table's FORWARD, where kube-router keeps its own chain first and accepts what policies allow.
pods_stay_local() {
  in_node iptables -t mangle -I FORWARD 1 -i cni0 -o eth0 ! -d "$HOST_IP" \
    -m comment --comment "$NAME: pods reach nothing beyond this machine" -j DROP
  # ...and the other nodes' pods, and the nodes (the first one's registries and BuildKit), on the link.
  in_node iptables -t mangle -I FORWARD 1 -i cni0 -o eth0 -d "$POD_CIDR" \
    -m comment --comment "$NAME: pods reach the other nodes' pods" -j RETURN
  in_node iptables -t mangle -I FORWARD 1 -i cni0 -o eth0 -d "10.243.$SLOT.0/24" \
    -m comment --comment "$NAME: pods reach the nodes" -j RETURN
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
  local k ip pods
  while read -r k ip pods; do
    in_netns "$(node_netns "$k")" ip route del "$NODE_POD_CIDR" 2>/dev/null || true
  done < <(other_nodes)
  ip netns del "$NAME" 2>/dev/null || true
  ip link del "$LINK_IF" 2>/dev/null || true
  ip route del "$NODE_POD_CIDR" 2>/dev/null || true
  if [ "$INDEX" = 0 ]; then
    ip link del "$HOST_IF" 2>/dev/null || true
    iptables_tagged_remove
  fi
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
  if [ "$INDEX" = 0 ]; then   # the others hang on its bridge and its registries
    local k
    for k in $(seq 1 $((MAX_NODES - 1))); do (select_node "$k" && stop_node); done
  fi
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
    rm -rf "$NODE-logs.last"
    mv "$NODE/logs" "$NODE-logs.last"
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

# The Kubernetes parts every node runs: the kubelet, kube-proxy, and kube-router for NetworkPolicies.
start_kube_daemons() {
  log "starting the kubelet $KUBE_VERSION on $NODE_NAME"
  launch kubelet "$KUBE_DIR/bin/kubelet" --config="$NODE/kubelet.yaml" --kubeconfig="$NODE/kubelet.kubeconfig" \
    --root-dir="$NODE/kubelet" --node-ip="$NODE_IP" --hostname-override="$NODE_NAME"
  wait_for kubelet 120 node_ready

  log "starting kube-proxy $KUBE_VERSION (iptables mode)"
  launch kube-proxy "$KUBE_DIR/bin/kube-proxy" --config="$NODE/kube-proxy.yaml"
  wait_for kube-proxy 30 in_node curl -sf http://127.0.0.1:10256/healthz
  pods_stay_local

  # Only the NetworkPolicy controller: pod networking is the bridge's and Services are kube-proxy's. Its chains and
  # ipsets live in the node's network namespace and go with it.
  log "starting kube-router $KUBE_ROUTER_VERSION (NetworkPolicy enforcement)"
  launch kube-router "$KUBE_ROUTER_BIN" --run-firewall=true --run-router=false --run-service-proxy=false \
    --kubeconfig="$CP/admin.kubeconfig" --hostname-override="$NODE_NAME" --service-cluster-ip-range="$SERVICE_CIDR" \
    --health-addr=127.0.0.1 --health-port=20244 --metrics-port=0
  wait_for kube-router 60 in_node curl -sf http://127.0.0.1:20244/healthz
}

start_containerd() {
  log "starting containerd $CONTAINERD_VERSION with $(runc --version | head -1)"
  launch containerd containerd --config "$NODE/containerd/config.toml"
  wait_for containerd 30 ctr --address "$NODE/containerd/containerd.sock" version
}

start() {
  [ "$(id -u)" -eq 0 ] || die "the node needs root (network namespaces, mounts, cgroups, iptables)"
  build
  local k
  if healthy && [ -d "/sys/class/net/$HOST_IF/bridge" ]; then
    log "already running (reused)"
    for k in $(seq 1 $((NODES - 1))); do (join "$k"); done
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
  start_containerd

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

  start_kube_daemons
  build_steps_stay_out

  log "deploying CoreDNS $COREDNS_VERSION for cluster.local on $DNS_IP"
  sed -e "s|\${DNS_IP}|$DNS_IP|g" -e "s|\${COREDNS_IMAGE}|registry.k8s.io/coredns/coredns:$COREDNS_VERSION|g" \
    -e "s|\${APP_DOMAIN}|${SLIPWAY_APP_DOMAIN:-apps.slipway.localhost}|g" -e "s|\${NODE_IP}|$FIRST_NODE_IP|g" \
    "$HACK/manifests/coredns.yaml" | kubectl apply -f - >/dev/null
  if ! kubectl -n kube-system rollout status deployment/coredns --timeout=120s >&2; then
    kubectl -n kube-system describe pods -l k8s-app=kube-dns >&2 || true
    die "CoreDNS did not become available"
  fi
  print_env >"$NODE/env"
  log "ready: node $NODE_NAME runs pods; registry http://$REGISTRY; BuildKit unix://$NODE/buildkit/buildkitd.sock"
  for k in $(seq 1 $((NODES - 1))); do (join "$k"); done
  print_env >&2
}

# Node K (1 and up) joins the cluster of the first node: containerd, the kubelet, kube-proxy and kube-router in a
# namespace of its own on the host's bridge, pulling from the first node's registries.
join() {
  [ "$(id -u)" -eq 0 ] || die "the node needs root (network namespaces, mounts, cgroups, iptables)"
  [ "$1" != 0 ] || die "node 0 is the first node: hack/node.sh start"
  healthy || die "the first node is not running: hack/node.sh start"
  select_node "$1"
  if healthy; then
    log "node $NODE_NAME already running (reused)"
    return
  fi
  stop_node
  log "network namespace $NAME: node $NODE_IP, pods $NODE_POD_CIDR"
  mkdir -p "$NODE"
  net_up
  cgroup_create
  write_configs
  start_containerd
  start_kube_daemons
  print_env >"$NODE/env"
  log "ready: node $NODE_NAME runs pods"
}

# Node K leaves: drained (its pods evicted as PodDisruptionBudgets allow), its Node deleted, its parts stopped.
leave() {
  [ "$(id -u)" -eq 0 ] || die "the node needs root (network namespaces, mounts, cgroups, iptables)"
  [ "$1" != 0 ] || die "node 0 is the first node: hack/node.sh stop"
  select_node "$1"
  if kubectl get node "$NODE_NAME" >/dev/null 2>&1; then
    kubectl drain "$NODE_NAME" --ignore-daemonsets --delete-emptydir-data --force --timeout=300s >&2
    kubectl delete node "$NODE_NAME" >/dev/null
  fi
  stop_node
  log "node $NODE_NAME left"
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
export SLIPWAY_NODE_IP=$FIRST_NODE_IP
export SLIPWAY_CTR=$CONTAINERD_BIN/ctr
export SLIPWAY_CONTAINERD_SOCKET=$SLIPWAY_RUN/node/containerd/containerd.sock
export SLIPWAY_POD_CIDR=$POD_CIDR
export SLIPWAY_BUILDKIT_ADDR=tcp://$FIRST_NODE_IP:1234
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
  join) join "${2:?usage: hack/node.sh join K}" ;;
  leave) leave "${2:?usage: hack/node.sh leave K}" ;;
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
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

# A node's configuration files: certificates and kubeconfigs for the kubelet and kube-proxy, containerd (CRI,
# registry mirrors), CNI, the kubelet, kube-proxy, and on the first node the registries and BuildKit. hack/node.sh
# sources it and calls write_configs at each start of a node, with its variables (NODE, NAME, INDEX, the addresses)
# set.
# shellcheck shell=bash

write_configs() {
  mkdir -p "$NODE"/{pki,cni/net.d,containerd/certs.d,registry,buildkit,kubelet,logs,pids,pod-logs}
  cp "$PKI/ca.crt" "$NODE/pki/ca.crt"
  cp "$PKI/ca.key" "$NODE/pki/ca.key"
  echo "extendedKeyUsage=clientAuth" >"$NODE/pki/client.ext"
  gen_cert "$NODE/pki" kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$NODE/pki/client.ext"
  gen_cert "$NODE/pki" kube-proxy "/CN=system:kube-proxy" "$NODE/pki/client.ext"
  rm -f "$NODE/pki/ca.key"
  local server="https://$HOST_IP:${SLIPWAY_APISERVER_PORT:-16443}"
  write_kubeconfig "$NODE/kubelet.kubeconfig" "$server" "$NODE/pki" kubelet
  write_kubeconfig "$NODE/kube-proxy.kubeconfig" "$server" "$NODE/pki" kube-proxy

  # Every registry the cluster would pull from is served by the local one: what is not there fails at once.
  local host
  for host in docker.io registry.k8s.io "$REGISTRY"; do
    mkdir -p "$NODE/containerd/certs.d/$host"
    printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve", "push"]\n' \
      "$REGISTRY" "$REGISTRY" >"$NODE/containerd/certs.d/$host/hosts.toml"
  done
  mkdir -p "$NODE/containerd/certs.d/$APPS_REGISTRY"
  printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve"]\n' \
    "$APPS_REGISTRY" "$APPS_REGISTRY" >"$NODE/containerd/certs.d/$APPS_REGISTRY/hosts.toml"

  cat >"$NODE/containerd/config.toml" <<EOF
version = 4
root = "$NODE/containerd/root"
state = "$NODE/containerd/state"
imports = []

[plugins.'io.containerd.server.v1.grpc']
  address = "$NODE/containerd/containerd.sock"
[plugins.'io.containerd.server.v1.ttrpc']
  address = "$NODE/containerd/containerd.sock.ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$NODE/containerd/opt"
[plugins.'io.containerd.nri.v1.nri']
  disable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "registry.k8s.io/pause:$PAUSE_VERSION"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$NODE/containerd/certs.d"
[plugins.'io.containerd.cri.v1.runtime']
  # These machines withhold CAP_SYS_RESOURCE, so no process may lower its oom_score_adj (the kubelet asks -998
  # for sandboxes); containers get no lower a score than containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = []
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = "$(command -v runc)"
      Root = "$NODE/containerd/runc"
      SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$NODE/cni/net.d"
EOF

  cat >"$NODE/cni/net.d/10-slipway.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "slipway",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {
        "type": "host-local", "dataDir": "$NODE/cni/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

  # Pods with dnsPolicy Default get no outside resolver.
  echo "# no upstream resolvers: nothing is looked up outside the cluster" >"$NODE/resolv.conf"
  cat >"$NODE/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $NODE/pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$NODE/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$NAME
failCgroupV1: false
failSwapOn: false
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
resolvConf: $NODE/resolv.conf
podLogsDir: $NODE/pod-logs
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The disk is shared with everything else on the machine and its free space swings; a disk-pressure taint would
# stop every pod (as kind does, disk-based eviction is off; a full disk still fails loudly on write).
evictionHard: {memory.available: 100Mi, nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%", imagefs.inodesFree: "0%"}
serializeImagePulls: false
EOF

  cat >"$NODE/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: $NODE/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF

  # The rest is the first node's alone: the registries and BuildKit.
  [ "$INDEX" = 0 ] || return 0

  cat >"$NODE/registry.yaml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $NODE/registry}
  delete: {enabled: true}
http: {addr: "$REGISTRY"}
EOF

  # The apps' registry trusts one key, slipway's (kept across restarts: the installed chart holds it), named
  # `slipway` in a JWKS made here from its public half. Nobody reaches it without a token slipway issued.
  local key=$REGISTRY_TOKEN_KEY x y
  if [ ! -s "$key" ]; then
    mkdir -p "$(dirname "$key")"
    (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$key")
  fi
  openssl pkey -in "$key" -pubout -outform DER | tail -c 64 >"$NODE/pki/registry-token.point"
  x=$(head -c 32 "$NODE/pki/registry-token.point" | basenc --base64url | tr -d '=\n')
  y=$(tail -c 32 "$NODE/pki/registry-token.point" | basenc --base64url | tr -d '=\n')
  printf '{"keys":[{"kty":"EC","crv":"P-256","kid":"slipway","use":"sig","alg":"ES256","x":"%s","y":"%s"}]}\n' \
    "$x" "$y" >"$NODE/pki/registry-token.jwks"
  cat >"$NODE/apps-registry.yaml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage:
  filesystem: {rootdirectory: $NODE/apps-registry}
  delete: {enabled: true}
http: {addr: "$APPS_REGISTRY"}
auth:
  token:
    realm: http://$NODE_IP:$API_NODE_PORT/registry/token
    service: slipway-registry
    issuer: slipway
    jwks: $NODE/pki/registry-token.jwks
    signingalgorithms: [ES256]
EOF

  # Builds pull warm bases (docker.io/library/...) from the local registry, and push to the apps' registry, over
  # plain HTTP. Build Jobs reach the daemon over TCP on the node's address, with mutual TLS.
  # The build steps' network: a bridge of its own with masquerade, so that on a connected node they reach outside
  # package registries; hack/node.sh's build_steps_stay_out drops everything else they send.
  cat >"$NODE/buildkit/cni.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "slipway-build",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BUILD_BRIDGE", "isGateway": true, "ipMasq": true,
      "ipam": {
        "type": "host-local", "dataDir": "$NODE/buildkit/ipam",
        "ranges": [[{"subnet": "$BUILD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF

  # BuildKit's TCP listener takes only client certificates of its CA (kept across restarts: the installed chart
  # gives the operator its key, and the operator a certificate to each build); its own certificate is for the
  # node's address. The unix socket (this machine's tools and tests) takes no TLS.
  local ca_dir=$BUILDKIT_CA_DIR
  if [ ! -s "$ca_dir/ca.key" ]; then
    mkdir -p "$ca_dir"
    (umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=slipway BuildKit CA" -keyout "$ca_dir/ca.key" -out "$ca_dir/ca.crt" 2>/dev/null)
  fi
  (umask 077 && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=buildkitd" \
    -keyout "$NODE/pki/buildkitd.key" 2>/dev/null |
    openssl x509 -req -CA "$ca_dir/ca.crt" -CAkey "$ca_dir/ca.key" -set_serial "0x$(openssl rand -hex 16)" \
      -days 365 -out "$NODE/pki/buildkitd.crt" 2>/dev/null \
      -extfile <(printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth\n' "$NODE_IP"))

  cat >"$NODE/buildkitd.toml" <<EOF
root = "$NODE/buildkit"
[grpc]
  address = ["unix://$NODE/buildkit/buildkitd.sock", "tcp://$NODE_IP:1234"]
  [grpc.tls]
    cert = "$NODE/pki/buildkitd.crt"
    key = "$NODE/pki/buildkitd.key"
    ca = "$ca_dir/ca.crt"
[worker.oci]
  enabled = true
  snapshotter = "overlayfs"
  binary = "$(command -v runc)"
  # Build steps (RUN) run in a network of their own (the bridge below), not the node's.
  networkMode = "cni"
  cniConfigPath = "$NODE/buildkit/cni.conflist"
  cniBinaryPath = "/usr/lib/cni"
  defaultCgroupParent = "/$NAME/buildkit"
  gc = false
[worker.containerd]
  enabled = false
[registry."docker.io"]
  mirrors = ["$REGISTRY"]
[registry."$REGISTRY"]
  http = true
[registry."$APPS_REGISTRY"]
  http = true
EOF
}

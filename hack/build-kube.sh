#!/usr/bin/env bash
# Builds the Kubernetes components and etcd that the local control plane and node run, from the Go module
# proxy, once per machine. Binaries land in $SLIPWAY_CACHE/kube-<version>/bin and $SLIPWAY_CACHE/etcd-<version>/bin;
# a component already there is not built again.
#
# usage: hack/build-kube.sh [component...]   (default: the control plane: etcd kube-apiserver
#        kube-controller-manager kube-scheduler kubectl)
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=build-kube

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

components=("$@")
[ ${#components[@]} -gt 0 ] || components=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)

build_etcd() {
  local out="$ETCD_DIR/bin/etcd"
  [ -x "$out" ] && { log "etcd $ETCD_VERSION cached at $out"; return; }
  local src="$SLIPWAY_CACHE/src/etcd-$ETCD_VERSION"
  wrapper_module "$src"
  log "etcd $ETCD_VERSION: resolving modules"
  (cd "$src" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 || (cd "$src" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"))
  log "etcd $ETCD_VERSION: compiling"
  mkdir -p "$ETCD_DIR/bin"
  (cd "$src" && go build -trimpath -ldflags='-s -w' -o "$out.tmp" go.etcd.io/etcd/server/v3)
  mv "$out.tmp" "$out"
  log "etcd $ETCD_VERSION: done"
}

# k8s.io/kubernetes requires its staging modules at v0.0.0; point each at the published v0.<minor>.<patch>.
prepare_kube_module() {
  local src=$1
  [ -f "$src/.prepared" ] && return
  wrapper_module "$src"
  log "kubernetes $KUBE_VERSION: resolving modules (first run only)"
  (cd "$src" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" >"$src/kubernetes.json")
  local gomod
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' "$src/kubernetes.json")
  local staging_version="v0.${KUBE_VERSION#v1.}"
  grep -E '^\s+k8s\.io/[a-z0-9-]+ v0\.0\.0$' "$gomod" | awk '{print $1}' | sort -u | while read -r mod; do
    (cd "$src" && go mod edit -replace "$mod=$mod@$staging_version")
  done
  (cd "$src" && go mod edit -require "k8s.io/kubernetes@$KUBE_VERSION")
  touch "$src/.prepared"
}

build_kube() {
  local name=$1 out="$KUBE_DIR/bin/$1"
  [ -x "$out" ] && { log "$name $KUBE_VERSION cached at $out"; return; }
  local src="$SLIPWAY_CACHE/src/kube-$KUBE_VERSION"
  prepare_kube_module "$src"
  (cd "$src" && go get "k8s.io/kubernetes/cmd/$name@$KUBE_VERSION" >/dev/null 2>&1 || (cd "$src" && go get "k8s.io/kubernetes/cmd/$name@$KUBE_VERSION"))
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  log "$name $KUBE_VERSION: compiling (a cold build of the first component takes the longest)"
  mkdir -p "$KUBE_DIR/bin"
  local started=$SECONDS
  (cd "$src" && go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" -o "$out.tmp" "k8s.io/kubernetes/cmd/$name")
  mv "$out.tmp" "$out"
  log "$name $KUBE_VERSION: done in $((SECONDS - started))s"
}

for c in "${components[@]}"; do
  case "$c" in
    etcd) build_etcd ;;
    *) build_kube "$c" ;;
  esac
done

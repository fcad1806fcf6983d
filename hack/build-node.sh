#!/usr/bin/env bash
# Builds the node's programs that Debian does not ship (or ships too old) from the Go module proxy, once per
# machine: containerd 2 with its runc shim and ctr, CoreDNS, the distribution registry, BuildKit, and kube-router
# (the NetworkPolicy engine). Each lands in $SLIPWAY_CACHE/<part>-<version>/bin and is not built again. runc, the
# CNI plugins and ipset come from Debian (hack/install-deps.sh).
#
# usage: hack/build-node.sh [containerd|coredns|registry|buildkit|kube-router]...   (default: all)
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=build-node

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(containerd coredns registry buildkit kube-router)

for part in "${parts[@]}"; do
  case "$part" in
    containerd)
      m=github.com/containerd/containerd/v2
      GO_LDFLAGS="-X $m/version.Version=$CONTAINERD_VERSION" \
        go_build containerd "$CONTAINERD_VERSION" "$m/cmd/containerd" "$m/cmd/containerd-shim-runc-v2" "$m/cmd/ctr"
      ;;
    coredns)
      go_build coredns "$COREDNS_VERSION" github.com/coredns/coredns
      ;;
    registry)
      m=github.com/distribution/distribution/v3
      GO_LDFLAGS="-X $m/version.version=$REGISTRY_VERSION" go_build registry "$REGISTRY_VERSION" "$m/cmd/registry"
      ;;
    buildkit)
      m=github.com/moby/buildkit
      GO_LDFLAGS="-X $m/version.Version=$BUILDKIT_VERSION" \
        go_build buildkit "$BUILDKIT_VERSION" "$m/cmd/buildkitd" "$m/cmd/buildctl"
      ;;
    kube-router)
      m=github.com/cloudnativelabs/kube-router/v2
      GO_REPLACES=$KUBE_ROUTER_PINS GO_LDFLAGS="-X $m/pkg/version.Version=$KUBE_ROUTER_VERSION" \
        go_build kube-router "$KUBE_ROUTER_VERSION" "$m/cmd/kube-router"
      ;;
    *) die "unknown part: $part (containerd, coredns, registry, buildkit, kube-router)" ;;
  esac
done

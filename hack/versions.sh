# Pinned versions of the parts the scripts build, and where they are cached (outside the repository).
# shellcheck shell=bash
KUBE_VERSION=v1.34.4
ETCD_VERSION=v3.6.16
HELM_VERSION=v4.3.1
SLIPWAY_CACHE=${SLIPWAY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/slipway}
KUBE_DIR="$SLIPWAY_CACHE/kube-$KUBE_VERSION"
ETCD_DIR="$SLIPWAY_CACHE/etcd-$ETCD_VERSION"

#!/usr/bin/env bash
# Brings up the local platform: builds what is missing, starts a single-node Kubernetes cluster on this machine
# (hack/node.sh: control plane, kubelet, containerd, CNI, kube-proxy, CoreDNS, registry, BuildKit), installs the
# CRDs and prints how to reach it. Run it again to reuse what is running; `make down` stops it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=up

"$HACK/install-deps.sh"
"$HACK/node.sh" start
eval "$("$HACK/node.sh" env)"

log "building slipway"
cargo build --quiet --locked --bin slipway
target/debug/slipway crds | kubectl apply --server-side --force-conflicts -f - >&2
kubectl wait --for=condition=Established --timeout=60s -f crds/yaml/ >&2

cat <<EOT

slipway is up: a single-node Kubernetes $KUBE_VERSION cluster on this machine, with the slipway.dev CRDs
installed. It runs pods from the local registry $SLIPWAY_REGISTRY (which also serves the warm bases
node:22-slim, python:3.13-slim and debian:trixie-slim) and builds images with BuildKit.

  export KUBECONFIG=$KUBECONFIG
  export PATH=$KUBE_DIR/bin:$SLIPWAY_CACHE/buildkit-$BUILDKIT_VERSION/bin:\$PATH
  kubectl get nodes,pods -A
  kubectl create namespace demo
  kubectl apply -n demo -f examples/app.yaml
  kubectl get slipway -n demo

Build and run an image:
  export BUILDKIT_HOST=$BUILDKIT_HOST
  buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. \\
    --output type=image,name=$SLIPWAY_REGISTRY/demo/app:1,push=true,registry.insecure=true
  kubectl create deployment app -n demo --image=$SLIPWAY_REGISTRY/demo/app:1

Stop it with: make down
EOT

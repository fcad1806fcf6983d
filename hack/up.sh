#!/usr/bin/env bash
# Brings up the local platform: builds what is missing, starts the control plane on loopback, installs the CRDs
# and prints how to reach it. Run it again to reuse what is running; `make down` stops it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"

"$HACK/install-deps.sh"
"$HACK/control-plane.sh" start
SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
export KUBECONFIG="$SLIPWAY_RUN/control-plane/admin.kubeconfig"
KUBECTL="$KUBE_DIR/bin/kubectl"

printf '[up %s] building slipway\n' "$(date +%H:%M:%S)" >&2
cargo build --quiet --locked --bin slipway
target/debug/slipway crds | "$KUBECTL" apply --server-side --force-conflicts -f - >&2
"$KUBECTL" wait --for=condition=Established --timeout=60s -f crds/yaml/ >&2

cat <<EOT

slipway is up: a Kubernetes $KUBE_VERSION control plane on https://127.0.0.1:${SLIPWAY_APISERVER_PORT:-16443} with the
slipway.dev CRDs installed.

  export KUBECONFIG=$KUBECONFIG
  export PATH=$KUBE_DIR/bin:\$PATH
  kubectl get crds
  kubectl create namespace demo
  kubectl apply -n demo -f examples/app.yaml
  kubectl get slipway -n demo

Stop it with: make down
EOT

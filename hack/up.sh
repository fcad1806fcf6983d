#!/usr/bin/env bash
# Brings up the local platform: builds what is missing, starts the control plane on loopback, installs the CRDs,
# runs the platform's components (hack/platform.sh) and prints the API URL and an admin token. Run it again to reuse what is running; `make down` stops it.
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
read -r API_URL ADMIN_TOKEN < <("$HACK/platform.sh" start)

cat <<EOT

slipway is up: a Kubernetes $KUBE_VERSION control plane on https://127.0.0.1:${SLIPWAY_APISERVER_PORT:-16443} with the
slipway.dev CRDs, the webhook, the operator and the API running as local processes.

  API:          $API_URL   (OpenAPI document at $API_URL/openapi.json)
  admin token:  $ADMIN_TOKEN

  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" -H 'content-type: application/json' -d '{"name":"blog"}' $API_URL/apps
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" $API_URL/apps

  git clone http://admin:$ADMIN_TOKEN@${API_URL#http://}/admin/blog.git     # the token is the password
  git clone ssh://git@127.0.0.1:${SLIPWAY_SSH_PORT:-18022}/admin/blog.git   # after POST /ssh-keys with your public key

  export KUBECONFIG=$KUBECONFIG
  export PATH=$KUBE_DIR/bin:\$PATH
  kubectl get crds
  kubectl create namespace demo
  kubectl apply -n demo -f examples/app.yaml
  kubectl get slipway -n demo

Stop it with: make down
EOT

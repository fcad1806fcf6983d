#!/usr/bin/env bash
# A developer's variant of `make up` (hack/up.sh): the same single-node cluster, but slipway's components run as
# processes on this machine (hack/platform.sh) from target/debug/slipway instead of pods from the chart, so a
# rebuild and a restart take seconds. What ships, and what `make up` runs, is the chart. `make down` stops it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=dev-up

"$HACK/install-deps.sh"
"$HACK/node.sh" start
eval "$("$HACK/node.sh" env)"

log "building slipway"
cargo build --quiet --locked --bin slipway
target/debug/slipway crds | kubectl apply --server-side --force-conflicts -f - >&2
kubectl wait --for=condition=Established --timeout=60s -f crds/yaml/ >&2
read -r API_URL ADMIN_TOKEN EDGE_URL < <("$HACK/platform.sh" start)

cat <<EOT

slipway is up: a single-node Kubernetes $KUBE_VERSION cluster on this machine with the slipway.dev CRDs, and the
webhook, the operator, the API and the edge running as local processes. The node runs pods from the local registry
$SLIPWAY_REGISTRY (which also serves the warm bases node:22-slim, python:3.13-slim and debian:trixie-slim) and
builds images with BuildKit.

  API:          $API_URL   (OpenAPI document at $API_URL/openapi.json)
  admin token:  $ADMIN_TOKEN
  edge:         $EDGE_URL   (serves every channel host: <app>-admin.${SLIPWAY_APP_DOMAIN:-apps.slipway.localhost})

  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" -H 'content-type: application/json' -d '{"name":"blog"}' $API_URL/apps
  curl -s -H "Authorization: Bearer $ADMIN_TOKEN" $API_URL/apps

  # after a deploy (POST $API_URL/apps/<id>/channels/<id>/deploy), the prod channel answers on the edge:
  curl -s -H 'Host: blog-admin.${SLIPWAY_APP_DOMAIN:-apps.slipway.localhost}' $EDGE_URL/

  git clone http://admin:$ADMIN_TOKEN@${API_URL#http://}/admin/blog.git     # the token is the password
  git clone ssh://git@127.0.0.1:${SLIPWAY_SSH_PORT:-18022}/admin/blog.git   # after POST /ssh-keys with your public key

  export KUBECONFIG=$KUBECONFIG
  export PATH=$KUBE_DIR/bin:$SLIPWAY_CACHE/buildkit-$BUILDKIT_VERSION/bin:\$PATH
  kubectl get nodes,pods -A
  kubectl get slipway -A

Build and run an image:
  export BUILDKIT_HOST=$BUILDKIT_HOST
  buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. \\
    --output type=image,name=$SLIPWAY_REGISTRY/demo/app:1,push=true,registry.insecure=true
  kubectl create deployment app -n demo --image=$SLIPWAY_REGISTRY/demo/app:1

Stop it with: make down
EOT

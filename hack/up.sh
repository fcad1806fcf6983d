#!/usr/bin/env bash
# Brings up the local platform: builds what is missing, starts a Kubernetes cluster on this machine, of
# SLIPWAY_NODES nodes (default 1; hack/node.sh: control plane, kubelet, containerd, CNI, kube-proxy, CoreDNS,
# registry, BuildKit), installs slipway
# on it with the Helm chart from the locally built image (hack/install.sh) and prints the addresses and an admin
# token. Run it again to reuse what is running and upgrade the release to the current code; `make down` stops it.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
cd "$HACK/.."
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=up

"$HACK/install-deps.sh"
"$HACK/node.sh" start
eval "$("$HACK/node.sh" env)"
"$HACK/install.sh" install
eval "$("$HACK/install.sh" env)"
API=$SLIPWAY_PLATFORM_API EDGE=$SLIPWAY_PLATFORM_EDGE TOKEN=$SLIPWAY_PLATFORM_ADMIN_TOKEN
SSH_HOST=${SLIPWAY_PLATFORM_SSH%:*} SSH_PORT=${SLIPWAY_PLATFORM_SSH##*:}
NODES=$(kubectl get nodes -o name | wc -l)

cat <<EOT

slipway is up: a Kubernetes $KUBE_VERSION cluster of $NODES node(s) on this machine with slipway installed by its Helm
chart (release slipway in namespace slipway-system) from the image $SLIPWAY_REGISTRY/slipway/slipway, built here.
The platform database is this machine's Postgres, and a second one there holds the channels' SQL databases
(hack/data-server.sh); builds run on the node's BuildKit and push to its registry
$SLIPWAY_REGISTRY (which also serves the warm bases node:22-slim, python:3.13-slim and debian:trixie-slim).

  API:          $API   (OpenAPI document at $API/openapi.json)
  console:      $SLIPWAY_PLATFORM_CONSOLE   (certificate from the CA $SLIPWAY_PLATFORM_EDGE_CA; sign in as
                $SLIPWAY_PLATFORM_ADMIN_EMAIL at the local provider, or by the code mailed there)
  admin token:  $TOKEN
  edge:         $EDGE   (serves every channel host: <app>-admin.$SLIPWAY_PLATFORM_APP_DOMAIN)
  edge HTTPS:   $SLIPWAY_PLATFORM_EDGE_HTTPS   (certificate for *.$SLIPWAY_PLATFORM_APP_DOMAIN from the CA $SLIPWAY_PLATFORM_EDGE_CA)
  git over SSH: $SLIPWAY_PLATFORM_SSH
  TCP forwards: $SLIPWAY_PLATFORM_FORWARD_HOST, ports 31000-31019   (POST .../channels/<id>/forward on a builder plan)
  sign-in:      $SLIPWAY_PLATFORM_AUTH_URL   (the apps' identity provider; people sign in at the local test
                provider $SLIPWAY_PLATFORM_OIDC_ISSUER, which lets anyone in under any name)
  mail:         verification codes (POST /me/email-verifications) land in $SLIPWAY_PLATFORM_MAILDIR/new
                (a local SMTP server that delivers nothing further)
  domains:      certificates from a local ACME CA ($SLIPWAY_PLATFORM_ACME_MANAGEMENT/roots/0 is its root), valid
                for 10 days; names resolve through a local DNS server once set over its API, e.g.
                curl -d '{"host":"shop.example.","addresses":["$SLIPWAY_NODE_IP"]}' $SLIPWAY_PLATFORM_DNS_API/add-a

  curl -s -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{"name":"blog"}' $API/apps
  curl -s -H "Authorization: Bearer $TOKEN" $API/apps

  # after a deploy (POST $API/apps/<id>/channels/<id>/deploy), the prod channel answers on the edge:
  curl -s -H 'Host: blog-admin.$SLIPWAY_PLATFORM_APP_DOMAIN' $EDGE/

  # an agent registers itself with an SSH key (POST /registrations, see the OpenAPI document):
  ssh-keygen -t ed25519 -N '' -f agent && printf 'svc-register\n\n%s\n' "\$(date +%s)" >msg
  ssh-keygen -Y sign -n svc-register -f agent msg   # writes msg.sig; send the key, time and signature as JSON

  git clone http://admin:$TOKEN@${API#http://}/admin/blog.git     # the token is the password
  git clone ssh://git@$SSH_HOST:$SSH_PORT/admin/blog.git   # after POST /ssh-keys with your public key

  export KUBECONFIG=$KUBECONFIG
  export PATH=$KUBE_DIR/bin:\$PATH
  kubectl get pods -n slipway-system
  kubectl get slipway -A

Stop it with: make down
EOT

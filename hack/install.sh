#!/usr/bin/env bash
# Installs slipway on the local node the way a platform team installs it on theirs: the slipway image (built here,
# pushed to the node's registry) and the Helm chart, with the parts a platform team brings itself given as values:
# the platform database (Debian's Postgres on this machine, reached by pods over TLS on the host's end of the node's
# link), the channels' data server (a second Postgres there, hack/data-server.sh), the registries and BuildKit (the
# node's own). Git repositories and the bundled object-store backend's data live on
# PersistentVolumes this script provides (host directories) for the chart's claims to bind; the backend runs from
# the versitygw image hack/build-images.sh makes, pushed to the node's registry. The API, git over SSH and the edge
# (HTTP and HTTPS) are NodePort Services on the node's address. HTTPS serves channel hostnames and their public S3
# endpoints (<label>.s3.<app domain>) with a wildcard certificate signed by a local CA made here
# (<state>/platform/tls/ca.pem, for clients to trust), kept in the certificate namespace this script creates
# (tls.certificateNamespace, apart from slipway-system: the edge reads Secrets there). Custom domains are verified
# against, and get their certificates from, a local ACME CA and DNS server (Pebble and pebble-challtestsrv,
# hack/pebble.sh) on the host's end of the node's link: a name resolves only once a record is set over
# challtestsrv's HTTP API, and Pebble validates HTTP-01 on the edge's HTTP node port and issues certificates valid
# for 10 days (the operator renews them two thirds in).
#
# usage: hack/install.sh install          build the image, install or upgrade the release, create the admin user,
#                                         write the addresses to <state>/platform/env and print them
#        hack/install.sh upgrade TAG      rebuild the image under TAG and `helm upgrade` the release to it
#        hack/install.sh isolation on|off `helm upgrade` the release with isolation.networkPolicies on or off
#        hack/install.sh set KEY=VALUE... `helm upgrade` the release with these values changed
#        hack/install.sh uninstall        `helm uninstall` the release (keeps what the chart README says it keeps)
#        hack/install.sh purge            take everything the platform kept away, as a lost cluster would: the release,
#                                         every slipway object (finalizers dropped: no operator is left to run them),
#                                         the users', release and certificate namespaces, the platform database and
#                                         the api volume's contents; the data server, the object store's volume and
#                                         the host parts stay, as a platform team's own services would
#        hack/install.sh stop-host-parts  stop the identity provider, mail server and ACME CA install started here
#        hack/install.sh logs             print the components' recent warnings and errors (for a failed test run)
#        hack/install.sh env              print the exports of the addresses (after install)
#
# SLIPWAY_API_REPLICAS (default 1) sets the api's replicas on install; more than one keeps the repositories in
# object storage (api.git.storage=objectStore), where any replica serves any repository. An installation is not
# moved between the two by install: see the chart README for the move, or start again with `make down`.
#
# On a cluster of more than one node (SLIPWAY_NODES=2 make up) the API's and the edge's node ports, reached at the
# first node's address, forward to pods on any node (externalTrafficPolicy Cluster): with Local they would answer
# only while a pod of theirs runs on the first node. The TCP forward ports stay Local (their allowlist needs the
# client's own address): they answer while an edge pod runs on the first node.
#
# Needs a running node (hack/node.sh start) with the same SLIPWAY_RUN and SLIPWAY_NODE_SLOT.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
source "$HACK/oci.sh"
LOG_TAG=install

SLIPWAY_RUN=${SLIPWAY_RUN:-$SLIPWAY_CACHE/run}
DIR="$SLIPWAY_RUN/platform"
eval "$("$HACK/node.sh" env)"
HELM=$("$HACK/build-helm.sh")
RELEASE=slipway
NAMESPACE=slipway-system
CERT_NAMESPACE=slipway-certificates
APP_DOMAIN=${SLIPWAY_APP_DOMAIN:-apps.slipway.localhost}
GIT_HOST=${SLIPWAY_GIT_HOST:-git.slipway.localhost}
# Node ports of the API (REST and git over HTTP), git over SSH and the edge.
API_NODE_PORT=$SLIPWAY_API_NODE_PORT   # the node's apps registry asks for tokens there (hack/node.sh)
SSH_NODE_PORT=30022
SQL_NODE_PORT=30432
EDGE_NODE_PORT=30000
EDGE_TLS_NODE_PORT=30443
# The web console, over HTTPS with a certificate for the node's address from the local CA below.
CONSOLE_NODE_PORT=30090
CONSOLE_TLS_SECRET=slipway-console-tls
API_REPLICAS=${SLIPWAY_API_REPLICAS:-1}
[[ $API_REPLICAS =~ ^[1-9][0-9]*$ ]] || die "SLIPWAY_API_REPLICAS must be a positive number, not $API_REPLICAS"
GIT_STORAGE=volume
[ "$API_REPLICAS" -eq 1 ] || GIT_STORAGE=objectStore
# The first user's address: verified, so it signs in to the console (at the local provider, or by a mailed code).
ADMIN_EMAIL=admin@slipway.localhost
# End-user sign-in: the auth host on the edge's HTTPS node port, and a local upstream identity provider
# (hack/oidc.sh, which signs anyone in: for trying the platform out) on the host's end of the node's link, where the
# edge's pods reach it for the token exchange.
OIDC_PORT=$((9400 + ${SLIPWAY_NODE_SLOT:-0}))
# Email verification: a local SMTP server (hack/smtp.sh, which keeps every message in a Maildir and relays none) on
# the host's end of the node's link, where the api pod sends codes.
SMTP_PORT=$((9525 + ${SLIPWAY_NODE_SLOT:-0}))
# Raw TCP forwarding: node ports 31000-31019, one per exposed channel.
FORWARD_FIRST_PORT=31000
WILDCARD_SECRET=slipway-wildcard-tls
SLOT=${SLIPWAY_NODE_SLOT:-0}
# Custom domains: Pebble's ACME directory on this port of the host's end of the node's link, its DNS server on +53
# and the DNS server's HTTP API on +55 (hack/pebble.sh); the CA it signed its listener with, for the operator.
PEBBLE_PORT=$((24500 + 100 * SLOT))
ACME_CA_SECRET=slipway-acme-ca
CERTIFICATE_DAYS=10

helm() { "$HELM" --kubeconfig "$KUBECONFIG" "$@"; }
pebble() {
  SLIPWAY_PEBBLE_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_PEBBLE_PORT=$PEBBLE_PORT SLIPWAY_PEBBLE_HTTP_PORT=$EDGE_NODE_PORT \
    SLIPWAY_PEBBLE_VALIDITY_SECONDS=$((CERTIFICATE_DAYS * 86400)) "$HACK/pebble.sh" "$@"
}

# The platform database on this machine's Postgres, with a role of its own that pods reach with a password.
database_url() {
  local admin password
  admin=$(SLIPWAY_PG_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_PG_CLIENTS="$SLIPWAY_POD_CIDR" "$HACK/postgres.sh" start)
  mkdir -p "$DIR"
  [ -s "$DIR/db-password" ] || (umask 077 && openssl rand -hex 24 >"$DIR/db-password")
  password=$(cat "$DIR/db-password")
  psql -q "$admin" -v ON_ERROR_STOP=1 -v pw="$password" >/dev/null <<'SQL'
SELECT format('CREATE ROLE slipway LOGIN PASSWORD %L', :'pw') WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'slipway') \gexec
ALTER ROLE slipway PASSWORD :'pw';
SELECT 'CREATE DATABASE slipway OWNER slipway' WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'slipway') \gexec
SQL
  local port=${admin##*:}; port=${port%%/*}
  # The tests read the platform database (its jobs) over the loopback, as its administrator.
  echo "${admin%/*}/slipway" >"$DIR/database-url"
  # Over TLS, as a managed Postgres service requires (hack/postgres.sh takes pods over TLS only).
  echo "postgres://slipway:$password@$SLIPWAY_NODE_HOST_IP:$port/slipway?sslmode=require"
}

# A PersistentVolume named NAME for the chart's claim CLAIM: a host directory owned by the uid the chart runs its
# pods as (a hostPath volume gets no fsGroup treatment), with SUBDIRS made in it the same way.
host_volume() { # name claim path [subdirs...]
  local name=$1 claim=$2 path=$3 sub
  shift 3
  mkdir -p "$path"
  chown 65532:65532 "$path"
  for sub in "$@"; do
    mkdir -p "$path/$sub"
    chown 65532:65532 "$path/$sub"
  done
  kubectl apply --server-side --force-conflicts -f - >/dev/null <<EOT
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $name
  labels:
    app.kubernetes.io/part-of: slipway-local
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: slipway-local
  claimRef: {namespace: $NAMESPACE, name: $claim}
  hostPath: {path: $path, type: Directory}
EOT
  # A claim deleted and made again (reinstall) finds the volume Released; free it for the new claim.
  if [ "$(kubectl get pv "$name" -o jsonpath='{.status.phase}')" = Released ]; then
    kubectl patch pv "$name" --type=json -p '[{"op":"remove","path":"/spec/claimRef/uid"}]' >/dev/null
  fi
}

# The volumes of the chart's claims: the api's data (repositories, SSH host key), and the bundled object-store
# backend's (the StatefulSet's claim, with the directories versitygw is given: objects, versions, iam).
volumes() {
  host_volume "slipway-data-slot$SLOT" "$RELEASE-api-data" "$DIR/data"
  host_volume "slipway-s3-slot$SLOT" "data-$RELEASE-s3-backend-0" "$DIR/s3" objects versions iam
}

# The bundled backend's and the runtime-log sandbox's images, in the node's registry (hack/node.sh pushes every
# local image when it starts; this also covers a node started before the images existed).
push_backend_image() {
  oci_push "$("$HACK/build-images.sh" versitygw)" "$SLIPWAY_REGISTRY" >/dev/null
  echo "$SLIPWAY_REGISTRY/versity/versitygw:$VERSITYGW_VERSION"
}
push_sandbox_image() {
  oci_push "$("$HACK/build-images.sh" sandbox)" "$SLIPWAY_REGISTRY" >/dev/null
}

# The certificate for *.$APP_DOMAIN (channel hostnames) and *.s3.$APP_DOMAIN (their public S3 endpoints) the edge
# serves, in the Secret tls.wildcardSecret names (in the certificate namespace): signed by a CA made once per state
# directory, so clients trust ca.pem across reinstalls. One made before it named both is made again.
wildcard_certificate() {
  local d="$DIR/tls" cert="$DIR/tls/$APP_DOMAIN.crt" key="$DIR/tls/$APP_DOMAIN.key"
  local names="DNS:*.$APP_DOMAIN, DNS:*.s3.$APP_DOMAIN"
  mkdir -p "$d"
  if [ ! -s "$d/ca.pem" ]; then
    (umask 077 && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=slipway local CA" -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null)
  fi
  if [ ! -s "$cert" ] || ! openssl x509 -checkend $((30 * 86400)) -noout -in "$cert" >/dev/null ||
    ! openssl x509 -noout -ext subjectAltName -in "$cert" | grep -qF "$names"; then
    (umask 077 && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=*.$APP_DOMAIN" \
      -keyout "$key" 2>/dev/null |
      openssl x509 -req -CA "$d/ca.pem" -CAkey "$d/ca.key" -set_serial "0x$(openssl rand -hex 16)" -days 365 \
        -extfile <(printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n' \
          "$names") -out "$cert" 2>/dev/null)
  fi
  kubectl -n "$CERT_NAMESPACE" create secret tls "$WILDCARD_SECRET" --cert="$cert" --key="$key" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# The console's certificate (for the node's address and console.slipway.localhost), signed by the same local CA,
# in the release namespace where the api pod mounts it.
console_certificate() {
  local d="$DIR/tls" cert="$DIR/tls/console.crt" key="$DIR/tls/console.key"
  if [ ! -s "$cert" ] || ! openssl x509 -checkend $((30 * 86400)) -noout -in "$cert" >/dev/null; then
    (umask 077 && openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=console.slipway.localhost" \
      -keyout "$key" 2>/dev/null |
      openssl x509 -req -CA "$d/ca.pem" -CAkey "$d/ca.key" -set_serial "0x$(openssl rand -hex 16)" -days 365 \
        -extfile <(printf 'subjectAltName=IP:%s,DNS:console.slipway.localhost\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n' \
          "$SLIPWAY_NODE_IP") -out "$cert" 2>/dev/null)
  fi
  kubectl -n "$NAMESPACE" create secret tls "$CONSOLE_TLS_SECRET" --cert="$cert" --key="$key" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# The node ports' traffic policy: Cluster when there is more than one node (see the top of this file).
traffic_policy() {
  if [ "$(kubectl get nodes -o name | wc -l)" -gt 1 ]; then echo Cluster; else echo Local; fi
}

values() { # image-ref backend-image-ref data-server-url
  local image=$1 backend=$2 data_port=${3##*:} buildkit=${SLIPWAY_BUILDKIT_ADDR#tcp://}
  data_port=${data_port%%/*}
  cat <<EOT
appDomain: $APP_DOMAIN
gitHost: $GIT_HOST
image:
  repository: ${image%:*}
  tag: ${image##*:}
database:
  existingSecret: slipway-database
dataServer:
  existingSecret: slipway-data-server
build:
  # Apps' images go to the node's token-auth registry; the warm bases are in the open one (the Docker Hub mirror).
  registry: $SLIPWAY_APPS_REGISTRY
  basesRegistry: $SLIPWAY_REGISTRY
  registryAuth:
    existingSecret: slipway-registry-token
  buildkitTls:
    existingSecret: slipway-buildkit-ca
  buildkitAddr: $SLIPWAY_BUILDKIT_ADDR
  builderImage: $SLIPWAY_BUILDER_IMAGE
  probeImage: $SLIPWAY_PROBE_IMAGE
workloads:
  # The node's apps request part of their plan's CPU share (hack/node.sh says how much, and why).
  cpuRequestPercent: $SLIPWAY_CPU_REQUEST_PERCENT
api:
  replicaCount: $API_REPLICAS
  git:
    storage: $GIT_STORAGE
  # The MCP server's OAuth sign-in for people: issued by the api's own address, through the upstream provider below.
  publicUrl: http://$SLIPWAY_NODE_IP:$API_NODE_PORT
  service:
    type: NodePort
    nodePorts: {http: $API_NODE_PORT, ssh: $SSH_NODE_PORT, sql: $SQL_NODE_PORT}
    externalTrafficPolicy: $(traffic_policy)
  # The console's connection strings name the node's port for SQL.
  sql:
    publicAddress: $SLIPWAY_NODE_IP:$SQL_NODE_PORT
  persistence:
    storageClass: slipway-local
    size: 10Gi
  # The node publishes no podCIDR (the controller manager allocates none), so a git mirror's sync learns the pod
  # range from here; the Service range it reads from the cluster's ServiceCIDR.
  mirror:
    denyCidrs: [$SLIPWAY_POD_CIDR]
  # Verification codes go to the local SMTP server, which keeps them in its Maildir.
  mail:
    smtpUrl: $SLIPWAY_TEST_SMTP_URL
    from: "slipway <noreply@$APP_DOMAIN>"
  logSandbox:
    image: $SLIPWAY_REGISTRY/slipway/log-sandbox:$BASES_SUITE
  console:
    url: https://$SLIPWAY_NODE_IP:$CONSOLE_NODE_PORT
    appsPort: $EDGE_TLS_NODE_PORT
    tlsSecret: $CONSOLE_TLS_SECRET
    service:
      type: NodePort
      nodePort: $CONSOLE_NODE_PORT
edge:
  service:
    type: NodePort
    externalTrafficPolicy: $(traffic_policy)
    nodePort: $EDGE_NODE_PORT
    httpsNodePort: $EDGE_TLS_NODE_PORT
blob:
  # One gateway replica, and small CPU requests for it and the backend, leave the small node's CPU to the apps the
  # tests deploy (two versions of one side by side during a blue/green switch, while an upgrade surges); the chart's
  # defaults are two replicas and 100m each.
  gateway:
    replicaCount: 1
    resources:
      requests:
        cpu: 20m
  bundled:
    image:
      repository: ${backend%:*}
      tag: ${backend##*:}
    resources:
      requests:
        cpu: 20m
    persistence:
      storageClass: slipway-local
      size: 10Gi
forward:
  enabled: true
  host: $SLIPWAY_NODE_IP
  firstPort: $FORWARD_FIRST_PORT
  ports: 20
  service:
    type: NodePort
signIn:
  authUrl: https://auth.$APP_DOMAIN:$EDGE_TLS_NODE_PORT
  upstream:
    issuer: $SLIPWAY_TEST_OIDC_ISSUER
    clientId: slipway
    clientSecret: $(cat "$DIR/oidc-client-secret")
domains:
  resolver: $SLIPWAY_TEST_DNS_SERVER
  edgeAddresses: [$SLIPWAY_NODE_IP]
  acme:
    directory: $SLIPWAY_TEST_ACME_DIRECTORY
    email: $ADMIN_EMAIL
    rootCASecret: $ACME_CA_SECRET
tls:
  certificateNamespace: $CERT_NAMESPACE
  wildcardSecret: $WILDCARD_SECRET
  # HTTPS answers on the node port, not on 443: a redirect to https://<host>/ would lead nowhere.
  redirectHttps: false
# The data server and BuildKit run on this machine and the node, not as pods: tenant pods reach the data server's
# port on the host (and not the platform database's beside it), build Jobs reach BuildKit on the node.
isolation:
  tenantEgress: [{cidr: $SLIPWAY_NODE_HOST_IP/32, port: $data_port}]
  buildEgress: [{cidr: ${buildkit%:*}/32, port: ${buildkit##*:}}]
EOT
}

# The upstream identity provider of end-user sign-in, and the platform's client secret there.
oidc() {
  SLIPWAY_OIDC_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_OIDC_PORT=$OIDC_PORT "$HACK/oidc.sh" start
  eval "$(SLIPWAY_OIDC_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_OIDC_PORT=$OIDC_PORT "$HACK/oidc.sh" env)"
  [ -s "$DIR/oidc-client-secret" ] || (umask 077 && openssl rand -hex 24 >"$DIR/oidc-client-secret")
}

# The ACME CA and DNS server of custom domains (left running, with its accounts, when it answers), and the CA its
# HTTPS listener's certificate is signed by, in the Secret the chart's domains.acme.rootCASecret names.
acme() {
  pebble ensure
  eval "$(pebble env)"
  kubectl -n "$NAMESPACE" create secret generic "$ACME_CA_SECRET" --from-file=ca.crt="$SLIPWAY_TEST_ACME_ROOT_CA" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
}

# The mail relay email verification codes go out through.
smtp() {
  SLIPWAY_SMTP_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_SMTP_PORT=$SMTP_PORT "$HACK/smtp.sh" start
  eval "$(SLIPWAY_SMTP_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_SMTP_PORT=$SMTP_PORT "$HACK/smtp.sh" env)"
}

# Runs helm and, when the release does not become ready, says which pod held it up and why.
helm_or_explain() {
  if ! helm "$@"; then
    kubectl -n "$NAMESPACE" get pods -o wide >&2 || true
    kubectl -n "$NAMESPACE" get events --sort-by=.lastTimestamp 2>/dev/null | tail -n 20 >&2 || true
    for pod in $(kubectl -n "$NAMESPACE" get pods -o name 2>/dev/null); do
      kubectl -n "$NAMESPACE" logs "$pod" --all-containers --tail=15 2>/dev/null | sed "s|^|$pod: |" >&2 || true
    done
    die "helm $1 of $RELEASE did not complete"
  fi
}

write_env() {
  cat >"$DIR/env" <<EOT
export SLIPWAY_PLATFORM_API=http://$SLIPWAY_NODE_IP:$API_NODE_PORT
export SLIPWAY_PLATFORM_EDGE=http://$SLIPWAY_NODE_IP:$EDGE_NODE_PORT
export SLIPWAY_PLATFORM_EDGE_HTTPS=https://$SLIPWAY_NODE_IP:$EDGE_TLS_NODE_PORT
export SLIPWAY_PLATFORM_EDGE_CA=$DIR/tls/ca.pem
export SLIPWAY_PLATFORM_SSH=$SLIPWAY_NODE_IP:$SSH_NODE_PORT
export SLIPWAY_PLATFORM_SQL=$SLIPWAY_NODE_IP:$SQL_NODE_PORT
export SLIPWAY_PLATFORM_FORWARD_HOST=$SLIPWAY_NODE_IP
export SLIPWAY_PLATFORM_APP_DOMAIN=$APP_DOMAIN
export SLIPWAY_PLATFORM_NAMESPACE=$NAMESPACE
export SLIPWAY_PLATFORM_CERTIFICATE_NAMESPACE=$CERT_NAMESPACE
export SLIPWAY_PLATFORM_RELEASE=$RELEASE
export SLIPWAY_PLATFORM_DATA_SERVER_URL=$(cat "$DIR/data-server-url")
export SLIPWAY_PLATFORM_DATABASE_URL=$(cat "$DIR/database-url")
export SLIPWAY_PLATFORM_ADMIN_TOKEN=$(cat "$DIR/admin-token")
export SLIPWAY_PLATFORM_AUTH_URL=https://auth.$APP_DOMAIN:$EDGE_TLS_NODE_PORT
export SLIPWAY_PLATFORM_OIDC_ISSUER=$SLIPWAY_TEST_OIDC_ISSUER
export SLIPWAY_PLATFORM_MAILDIR=$SLIPWAY_TEST_MAILDIR
export SLIPWAY_PLATFORM_CONSOLE=https://$SLIPWAY_NODE_IP:$CONSOLE_NODE_PORT
export SLIPWAY_PLATFORM_ADMIN_EMAIL=$ADMIN_EMAIL
export SLIPWAY_PLATFORM_DNS_API=http://${SLIPWAY_TEST_DNS_SERVER%:*}:$((PEBBLE_PORT + 55))
export SLIPWAY_PLATFORM_ACME_MANAGEMENT=$SLIPWAY_TEST_ACME_MANAGEMENT
export SLIPWAY_PLATFORM_ACME_CA=$SLIPWAY_TEST_ACME_ROOT_CA
EOT
}

install() {
  local url data_server image backend
  url=$(database_url)
  data_server=$("$HACK/data-server.sh" start)
  image=$("$HACK/slipway-image.sh" "$SLIPWAY_REGISTRY")
  backend=$(push_backend_image)
  push_sandbox_image
  # Helm installs a chart's CRDs on first install only; applying them first keeps them current on upgrades too.
  kubectl apply --server-side --force-conflicts -f "$ROOT/charts/slipway/crds/" >/dev/null
  for ns in "$NAMESPACE" "$CERT_NAMESPACE"; do
    kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  done
  kubectl -n "$NAMESPACE" create secret generic slipway-database --from-literal=url="$url" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$NAMESPACE" create secret generic slipway-data-server --from-literal=url="$data_server" \
    --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The CA BuildKit's TCP listener trusts for clients (hack/node.sh made it): the operator signs builds' certificates.
  kubectl -n "$NAMESPACE" create secret generic slipway-buildkit-ca --from-file=ca.crt="$SLIPWAY_BUILDKIT_CA_CERT_FILE" \
    --from-file=ca.key="$SLIPWAY_BUILDKIT_CA_KEY_FILE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The key the node's apps registry trusts tokens from (hack/node.sh made it and the registry's JWKS).
  kubectl -n "$NAMESPACE" create secret generic slipway-registry-token \
    --from-file=key.pem="$SLIPWAY_REGISTRY_TOKEN_KEY" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The same server as this machine reaches it (on loopback), for the addresses written below.
  (umask 077 && echo "${data_server/@$SLIPWAY_NODE_HOST_IP:/@127.0.0.1:}" >"$DIR/data-server-url")
  volumes
  wildcard_certificate
  console_certificate
  oidc
  smtp
  acme
  local installed
  installed=$(kubectl -n "$NAMESPACE" get deployment "$RELEASE-api" --ignore-not-found -o \
    jsonpath='{.spec.template.spec.containers[0].env[?(@.name=="SLIPWAY_GIT_STORAGE")].value}{"/"}{.metadata.name}')
  case "$installed:$GIT_STORAGE" in
    object-store/*:volume) die "the installed release keeps its repositories in object storage: install it with SLIPWAY_API_REPLICAS above 1, or start again (make down)" ;;
    /?*:objectStore) die "the installed release keeps its repositories on a volume: moving them is the chart README's \"Repositories in object storage\"; or start again (make down)" ;;
  esac
  values "$image" "$backend" "$data_server" >"$DIR/values.yaml"
  log "helm upgrade --install $RELEASE ($image, $API_REPLICAS api replicas, repositories: $GIT_STORAGE)"
  helm_or_explain upgrade --install "$RELEASE" "$ROOT/charts/slipway" --namespace "$NAMESPACE" \
    --values "$DIR/values.yaml" --wait --timeout 5m >/dev/null
  # The first user, made the way the chart's notes say: `slipway admin create-user` run in the api pod. The builder
  # plan's apps request half a core and 512 MiB, which a small local node can schedule (a pro app asks 4 cores).
  if [ ! -s "$DIR/admin-token" ]; then
    (umask 077 && kubectl -n "$NAMESPACE" exec "deployment/$RELEASE-api" -- \
      slipway admin create-user --username admin --plan builder --email "$ADMIN_EMAIL" >"$DIR/admin-token") ||
      die "could not create the admin user (if it exists from an earlier install, its token is gone: make down && make up)"
  fi
  write_env
  log "installed: $(kubectl -n "$NAMESPACE" get pods --no-headers | wc -l) pods in $NAMESPACE"
}

upgrade() { # tag
  local image
  image=$("$HACK/slipway-image.sh" "$SLIPWAY_REGISTRY" "$1")
  log "helm upgrade $RELEASE to $image"
  helm_or_explain upgrade "$RELEASE" "$ROOT/charts/slipway" --namespace "$NAMESPACE" --reuse-values \
    --set "image.tag=${image##*:}" --wait --timeout 5m >/dev/null
}

# Stops what install started on this machine besides the databases: the identity provider, the mail server and the
# ACME CA.
stop_host_parts() {
  "$HACK/oidc.sh" stop >/dev/null
  "$HACK/smtp.sh" stop >/dev/null
  pebble stop >/dev/null
}

purge() {
  local kinds=apps.slipway.dev,channels.slipway.dev,deploys.slipway.dev,domains.slipway.dev,forwards.slipway.dev
  helm uninstall "$RELEASE" --namespace "$NAMESPACE" --wait --ignore-not-found >/dev/null
  kubectl get "$kinds" -A -o jsonpath='{range .items[*]}{.kind} {.metadata.namespace} {.metadata.name}{"\n"}{end}' |
    while read -r kind ns name; do
      kubectl -n "$ns" patch "${kind,,}s.slipway.dev" "$name" --type=merge -p '{"metadata":{"finalizers":null}}' \
        >/dev/null 2>&1 || true
    done
  # shellcheck disable=SC2046 # one argument per namespace
  kubectl delete namespace --wait=true --timeout=5m "$NAMESPACE" "$CERT_NAMESPACE" \
    $(kubectl get namespaces -o name | grep '^namespace/slipway-user-' | cut -d/ -f2) >/dev/null
  local admin
  admin=$(SLIPWAY_PG_LISTEN=$SLIPWAY_NODE_HOST_IP SLIPWAY_PG_CLIENTS="$SLIPWAY_POD_CIDR" "$HACK/postgres.sh" start)
  psql -q "$admin" -v ON_ERROR_STOP=1 -c 'DROP DATABASE IF EXISTS slipway WITH (FORCE)' >/dev/null
  find "$DIR/data" -mindepth 1 -delete
  log "purged $RELEASE: namespaces, objects, platform database and repositories are gone"
}

set_values() { # KEY=VALUE...
  local args=() pair
  for pair in "$@"; do args+=(--set "$pair"); done
  log "helm upgrade $RELEASE with $*"
  helm_or_explain upgrade "$RELEASE" "$ROOT/charts/slipway" --namespace "$NAMESPACE" --reuse-values "${args[@]}" \
    --wait --timeout 5m >/dev/null
}

isolation() { # on|off
  case "$1" in
    on) set_values isolation.networkPolicies=true ;;
    off) set_values isolation.networkPolicies=false ;;
    *) die "usage: hack/install.sh isolation on|off" ;;
  esac
}

case "${1:-}" in
  install) install ;;
  upgrade) upgrade "${2:?usage: hack/install.sh upgrade TAG}" ;;
  isolation) isolation "${2:-}" ;;
  set) shift; [ $# -gt 0 ] || die "usage: hack/install.sh set KEY=VALUE..."; set_values "$@" ;;
  uninstall)
    helm uninstall "$RELEASE" --namespace "$NAMESPACE" --wait --ignore-not-found >/dev/null
    stop_host_parts
    log "uninstalled $RELEASE"
    ;;
  purge) purge ;;
  stop-host-parts) stop_host_parts ;;
  logs)
    # Every container of the release, its last lines at WARN or ERROR (tracing's JSON or text format), each line
    # prefixed with its pod and container.
    kubectl -n "$NAMESPACE" logs -l "app.kubernetes.io/instance=$RELEASE" --all-containers --prefix \
      --tail=5000 --max-log-requests=20 2>&1 | grep -E '"level":"(WARN|ERROR)"| (WARN|ERROR) |error' | tail -n 200 || true
    ;;
  env) cat "$DIR/env" ;;
  *) sed -n '18,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Installs the system packages the scripts and tests need, from Debian, when they are missing. Go and Rust come
# with the machine; everything else slipway runs is built by hack/build-*.sh.
set -euo pipefail
source "$(dirname "$0")/versions.sh"
source "$(dirname "$0")/lib.sh"
LOG_TAG=deps

packages=(
  openssl curl git iproute2 procps jq          # the control plane and the scripts
  util-linux iptables conntrack runc            # the node: nsenter, kube-proxy's rules, the OCI runtime
  containernetworking-plugins                   # CNI bridge, host-local, portmap, loopback (/usr/lib/cni)
  ipset                                         # kube-router's NetworkPolicy sets
  mmdebstrap rsync busybox-static               # the local images (hack/build-images.sh)
  postgresql postgresql-client                  # the platform database (hack/postgres.sh) and pg_dump in tests
  postgresql-15-postgis-3 postgresql-15-pgextwlist  # the channels' data server: postgis for channel roles
  openssh-client gzip tar                       # the git transports' tests (ssh, ssh-keygen), code downloads
  openssh-server                                # git mirrors' tests: an SSH git server (hack/git-peer.sh), never the service
  nginx-light wrk nghttp2-client                # the edge benchmark (its own nginx instance, never the service; h2load)
  libnginx-mod-stream                           # the forward benchmark: nginx's TCP proxy beside the edge's forwards
  chromium chromium-driver                      # end-user sign-in tests in a real browser (headless, driven over WebDriver)
  rclone                                        # a client users type, against a channel's public S3 endpoint
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
for tool in go cargo rustfmt cargo-clippy python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed; this project needs Go, Rust (with rustfmt and clippy) and Python 3 with pip"
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  # No package may start a system service here (nginx would take port 80): the scripts run their own instances.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
log "system packages present"

# Python packages the tests drive real clients with (boto3 for the S3 gateway, mcp for the MCP server), pinned, from PyPI.
# (A satisfied pin is a quick no-op that asks no index.)
python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore -r "$(dirname "$0")/../tests/requirements.txt"
log "python test packages present"
pypi_venv "$SCHEMATHESIS_VENV" schemathesis "schemathesis==$SCHEMATHESIS_VERSION"
pypi_venv "$S3_CLIENTS_VENV" "boto3, pytest, awscli" -r "$S3_CLIENTS_REQUIREMENTS"

# JavaScript packages the tests' apps carry in their repositories, packed from npm once (apps' pods reach no registry).
if [ ! -s "$SLIPWAY_CACHE/npm/jose-$JOSE_VERSION.tgz" ]; then
  command -v npm >/dev/null 2>&1 || die "npm is not installed; the sign-in test's app needs jose from npm"
  mkdir -p "$SLIPWAY_CACHE/npm"
  (cd "$SLIPWAY_CACHE/npm" && npm pack --silent "jose@$JOSE_VERSION" >/dev/null) || die "npm pack jose@$JOSE_VERSION failed"
fi
log "npm test packages present"

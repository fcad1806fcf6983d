#!/usr/bin/env bash
# Installs the system packages the scripts and tests need, from Debian, when they are missing. Go and Rust come
# with the machine; everything else slipway runs is built by hack/build-*.sh.
set -euo pipefail

log() { printf '[deps %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# command -> Debian package
declare -A wanted=(
  [openssl]=openssl [curl]=curl [git]=git [ss]=iproute2 [pgrep]=procps [jq]=jq [psql]=postgresql-client
  [ssh]=openssh-client [ssh-keygen]=openssh-client [gzip]=gzip [tar]=tar
)
missing=()
for cmd in "${!wanted[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${wanted[$cmd]}")
done
# One package may provide several commands.
mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u | grep -v '^$' || true)
for tool in go cargo rustfmt cargo-clippy; do
  command -v "$tool" >/dev/null 2>&1 || { log "ERROR: $tool is not installed; this project needs Go and Rust (with rustfmt and clippy)"; exit 1; }
done
# The platform database's tests run Debian's Postgres server.
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
log "system packages present"

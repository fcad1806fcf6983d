#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy, once per machine, into $SLIPWAY_CACHE/helm-<version>/bin/helm.
# A helm already there is not built again. Prints the path of the binary on stdout.
#
# usage: hack/build-helm.sh
set -euo pipefail
source "$(dirname "$0")/versions.sh"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false

HELM_DIR="$SLIPWAY_CACHE/helm-$HELM_VERSION"
out="$HELM_DIR/bin/helm"
major=${HELM_VERSION%%.*}            # v4
module="helm.sh/helm/$major"

log() { printf '[build-helm %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [ -x "$out" ]; then
  log "helm $HELM_VERSION cached at $out"
  echo "$out"
  exit 0
fi

# The same flags helm's Makefile sets for a tagged release build (no git metadata is available from the proxy).
ldflags="-s -w -X $module/internal/version.version=$HELM_VERSION -X $module/internal/version.metadata="
ldflags+=" -X $module/internal/version.gitTreeState=clean"

mkdir -p "$HELM_DIR/bin"
started=$SECONDS
log "helm $HELM_VERSION: compiling $module/cmd/helm (first run only)"
tmpbin=$(mktemp -d "$HELM_DIR/bin/.install.XXXXXX")
trap 'rm -rf "$tmpbin"' EXIT
if ! GOBIN="$tmpbin" go install -trimpath -ldflags "$ldflags" "$module/cmd/helm@$HELM_VERSION" 2>"$tmpbin/err"; then
  if ! grep -q 'replace directives' "$tmpbin/err"; then
    cat "$tmpbin/err" >&2
    exit 1
  fi
  # "go install pkg@version" refuses modules with replace lines; build inside a throwaway module instead.
  src="$SLIPWAY_CACHE/src/helm-$HELM_VERSION"
  log "helm $HELM_VERSION: module has replace directives; building in a wrapper module at $src"
  mkdir -p "$src"
  [ -f "$src/go.mod" ] || (cd "$src" && go mod init slipway.local/wrapper >/dev/null 2>&1)
  (cd "$src" && go get "$module/cmd/helm@$HELM_VERSION")
  (cd "$src" && go build -trimpath -ldflags "$ldflags" -o "$tmpbin/helm" "$module/cmd/helm")
fi
mv "$tmpbin/helm" "$out"
log "helm $HELM_VERSION: done in $((SECONDS - started))s: $("$out" version --short)"
echo "$out"

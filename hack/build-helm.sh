#!/usr/bin/env bash
# Builds the helm CLI from the Go module proxy, once per machine, into $SLIPWAY_CACHE/helm-<version>/bin/helm.
# A helm already there is not built again. Prints the path of the binary on stdout.
#
# usage: hack/build-helm.sh
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
LOG_TAG=build-helm

module="helm.sh/helm/${HELM_VERSION%%.*}"   # helm.sh/helm/v4
# The same flags helm's Makefile sets for a tagged release build (no git metadata is available from the proxy).
GO_LDFLAGS="-X $module/internal/version.version=$HELM_VERSION -X $module/internal/version.metadata="
GO_LDFLAGS+=" -X $module/internal/version.gitTreeState=clean"
GO_LDFLAGS=$GO_LDFLAGS go_build helm "$HELM_VERSION" "$module/cmd/helm"
echo "$SLIPWAY_CACHE/helm-$HELM_VERSION/bin/helm"

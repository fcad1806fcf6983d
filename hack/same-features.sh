#!/usr/bin/env bash
# Fails when the shipped binary's build would compile a dependency with other features than the tests' build.
#
# The test tiers compile the workspace with its dev-dependencies, whose features cargo unifies into the crates they
# share with the binary. When `cargo build --bin slipway` (the image, hack/slipway-image.sh) sees a crate with fewer
# features, that crate and every crate above it, the workspace's own included, are a second build of several
# minutes. The root Cargo.toml asks for such features by name; this check names the crate when one is missing.
#
# usage: hack/same-features.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# Each crate once with its features (a crate seen again prints as `(*)`: --no-dedupe would print every path to it,
# millions of lines and minutes here).
tree() { cargo tree --locked --quiet --prefix none -f '{p} [{f}]' "$@" | sed 's/ (\*)$//' | sort -u; }
shipped=$(tree -p slipway -e normal,build)
tested=$(tree --workspace -e normal,build,dev)
if differ=$(comm -23 <(echo "$shipped") <(echo "$tested")) && [ -n "$differ" ]; then
  echo "the binary's build compiles these crates with other features than the tests' build:" >&2
  sed 's/^/  /' <<<"$differ" >&2
  echo "ask for the tests' features in the root Cargo.toml's feature-unification block (see its comment)" >&2
  exit 1
fi
echo "the binary's build uses the tests' features for all $(wc -l <<<"$shipped") crates"

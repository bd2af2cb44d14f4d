#!/usr/bin/env bash
# Builds mdBook, the builder of the book in docs/, from crates.io (`cargo install --locked`, a
# pinned version, without the `serve`/`watch` features a build check does not use) into
# $CACHE_DIR/mdbook-VERSION, keyed by version and recipe, and prints the binary's path. A
# second run with the binary present only prints it. hack/test.sh builds the book with it.
# To read the book: `$(bash hack/build-mdbook.sh) build docs`, then open docs/book/index.html.
set -euo pipefail
source "$(dirname "$0")/common.sh"

MDBOOK_VERSION=0.5.4
FEATURES=search
bin=$CACHE_DIR/mdbook-$MDBOOK_VERSION/bin
# --debug: a build check renders ~40 pages, which takes a debug binary well under a second, while
# an optimised build of mdBook's 123 crates costs about twice the CPU time of a debug one.
recipe="cargo install mdbook --version $MDBOOK_VERSION --locked --debug --no-default-features --features $FEATURES"
if [ -x "$bin/mdbook" ] && [ "$(cat "$bin/.recipe" 2>/dev/null)" = "$recipe" ]; then
  echo "$bin/mdbook"
  exit 0
fi
command -v cargo >/dev/null || die "cargo not found: mdBook is built with cargo"
logf=$CACHE_DIR/mdbook-build.log
mkdir -p "$CACHE_DIR"
log "building mdBook $MDBOOK_VERSION from crates.io (debug, about 1.5 CPU-minutes, 123 crates; log: $logf)"
# The build directory is cached as well, so an interrupted or repeated build does not start over.
CARGO_TARGET_DIR=$CACHE_DIR/mdbook-build $recipe --root "$CACHE_DIR/mdbook-$MDBOOK_VERSION" >"$logf" 2>&1 ||
  { tail -n 20 "$logf" >&2; die "mdBook build failed; log: $logf"; }
rm -rf "$CACHE_DIR/mdbook-build"
echo "$recipe" >"$bin/.recipe"
echo "$bin/mdbook"

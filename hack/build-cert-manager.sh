#!/usr/bin/env bash
# Builds cert-manager's certificate controllers (hack/cert-manager/main.go, a main of ours over
# the published github.com/cert-manager/cert-manager module: see the comment there for why) and
# caches the binary in $CACHE_DIR (build_go_tool in common.sh), keyed by hack/cert-manager/go.sum.
# Prints the binary's path; a second run with the binary present only prints it.
#
# Not wired into hack/test.sh or hack/cluster.sh yet: issue 31's `certManager` TLS source is the
# user of it (the plan is in docs/src/results/2026-11-29-session-22-monitoring-stack.md, "What is not done").
set -euo pipefail
source "$(dirname "$0")/common.sh"

VERSION=$(awk '$1 == "github.com/cert-manager/cert-manager" { print $2 }' "$HACK_DIR/cert-manager/go.mod")
[ -n "$VERSION" ] || die "hack/cert-manager/go.mod requires no github.com/cert-manager/cert-manager"
# build_go_tool keys its cache on go.sum; main.go is ours, so its hash goes into the version (a
# changed main is built again, in a directory of its own).
SOURCE_HASH=$(sha256sum <"$HACK_DIR/cert-manager/main.go" | cut -c1-12)
build_go_tool cert-manager cert-manager . "$VERSION-$SOURCE_HASH" "" "about 3 minutes on 2 cores when nothing is cached"

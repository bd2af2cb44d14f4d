#!/usr/bin/env bash
# Builds grafana-schema (hack/grafana-schema/main.go), which checks Grafana dashboard JSON
# against Grafana's dashboard schema as the Apache-2.0 Grafana Foundation SDK publishes it
# (Grafana itself is AGPL: not used), and caches it in $CACHE_DIR (build_go_tool in common.sh).
# Prints the binary's path; a second run with the binary present only prints it. The tests check
# the operator's dashboard with it (crates/e2e/tests/monitoring.rs).
set -euo pipefail
source "$(dirname "$0")/common.sh"

SDK_VERSION=$(awk '$1 == "require" && $2 == "github.com/grafana/grafana-foundation-sdk/go" { print $3 }' \
  "$HACK_DIR/grafana-schema/go.mod")
[ -n "$SDK_VERSION" ] || die "hack/grafana-schema/go.mod requires no github.com/grafana/grafana-foundation-sdk/go"
# build_go_tool keys its cache on go.sum, which names only the SDK: the checker's own source is
# here, so its hash goes into the version (a changed checker is built again, in a directory of
# its own).
SOURCE_HASH=$(cat "$HACK_DIR/grafana-schema/main.go" "$HACK_DIR/grafana-schema/enums_gen.go" | sha256sum | cut -c1-12)
build_go_tool grafana-schema grafana-schema . "$SDK_VERSION-$SOURCE_HASH" "" "about 30 s on 2 cores when nothing is cached"

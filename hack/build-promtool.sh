#!/usr/bin/env bash
# Builds promtool from the published Prometheus Go module (hack/promtool/go.mod) and caches it in
# $CACHE_DIR (build_go_tool in common.sh), keyed by hack/promtool/go.sum. Prints the binary's path. A second run with the
# binary present only prints it. The tests check the operator's PrometheusRule with it
# (crates/e2e/tests/monitoring.rs).
set -euo pipefail
source "$(dirname "$0")/common.sh"

# Prometheus 3.X.Y is published as the Go module version v0.(300+X).Y: v0.316.0 is 3.16.0.
MODULE_VERSION=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" { print $3 }' "$HACK_DIR/promtool/go.mod")
[ -n "$MODULE_VERSION" ] || die "hack/promtool/go.mod requires no github.com/prometheus/prometheus"
PROMTOOL_VERSION=$(awk -F. '/^v0\.3[0-9][0-9]\.[0-9]+$/ { printf "3.%d.%s", $2 - 300, $3 }' <<<"$MODULE_VERSION")
[ -n "$PROMTOOL_VERSION" ] || die "hack/promtool/go.mod: $MODULE_VERSION is not a Prometheus 3 module version (v0.3XX.Y)"
build_go_tool promtool promtool github.com/prometheus/prometheus/cmd/promtool "$PROMTOOL_VERSION" \
  "-X github.com/prometheus/common/version.Version=$PROMTOOL_VERSION" "about 3 minutes on 2 cores when nothing is cached"

#!/usr/bin/env bash
# Builds promtool from the published Prometheus Go module (hack/promtool/go.mod) and caches it in
# $PROMTOOL_BIN, keyed by hack/promtool/go.sum. Prints the binary's path. A second run with the
# binary present only prints it. The tests check the operator's PrometheusRule with it
# (crates/e2e/tests/monitoring.rs).
set -euo pipefail
source "$(dirname "$0")/common.sh"

# Prometheus 3.X.Y is published as the Go module version v0.(300+X).Y: v0.316.0 is 3.16.0.
MODULE_VERSION=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" { print $3 }' "$HACK_DIR/promtool/go.mod")
[ -n "$MODULE_VERSION" ] || die "hack/promtool/go.mod requires no github.com/prometheus/prometheus"
PROMTOOL_VERSION=$(awk -F. '/^v0\.3[0-9][0-9]\.[0-9]+$/ { printf "3.%d.%s", $2 - 300, $3 }' <<<"$MODULE_VERSION")
[ -n "$PROMTOOL_VERSION" ] || die "hack/promtool/go.mod: $MODULE_VERSION is not a Prometheus 3 module version (v0.3XX.Y)"
PROMTOOL_BIN=$CACHE_DIR/promtool-$PROMTOOL_VERSION/bin
RECIPE="go modules: hack/promtool/go.sum $(sha256sum "$HACK_DIR/promtool/go.sum" | cut -c1-16); static"
if [ -x "$PROMTOOL_BIN/promtool" ] && [ "$(cat "$PROMTOOL_BIN/.recipe" 2>/dev/null)" = "$RECIPE" ]; then
  echo "$PROMTOOL_BIN/promtool"
  exit 0
fi
go=/usr/local/go/bin/go
[ -x "$go" ] || die "$go not found: promtool builds with the Go installed at /usr/local/go"
cd "$HACK_DIR/promtool"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
export GOCACHE=$CACHE_DIR/go-build GOMODCACHE=$CACHE_DIR/go-mod
logf=$CACHE_DIR/promtool-build.log
log "building promtool $PROMTOOL_VERSION from its Go module (about 3 minutes on 2 cores when nothing is cached)"
mkdir -p "$PROMTOOL_BIN"
"$go" build -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMTOOL_VERSION" \
  -o "$PROMTOOL_BIN/promtool" github.com/prometheus/prometheus/cmd/promtool >"$logf" 2>&1 ||
  { tail -n 20 "$logf" >&2; die "promtool build failed; log: $logf"; }
echo "$RECIPE" >"$PROMTOOL_BIN/.recipe"
echo "$PROMTOOL_BIN/promtool"

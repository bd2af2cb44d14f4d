#!/usr/bin/env bash
# Builds the binaries of the local cluster's monitoring stack (MONITORING=1 hack/cluster.sh up)
# from their published Go modules and caches them (build_go_tool in common.sh):
#   prometheus                  Prometheus 3, from hack/promtool/go.mod (the module promtool comes
#                               from: one module and build cache for both)
#   prometheus-operator         the Prometheus Operator (its cmd/operator), from
#                               hack/prometheus-operator/go.mod
#   prometheus-config-reloader  its config reloader sidecar, from the same module
#
#   build-monitoring.sh          build (cached), print the binaries
#   build-monitoring.sh bundle   print the path of the operator's bundle.yaml (its CRDs, RBAC,
#                                Deployment and Service, the file its docs install from), in the
#                                Go module cache (downloaded from the module proxy if missing)
#
# Prints one line per binary, "NAME IMAGE PATH": IMAGE is the name upstream publishes it under
# (the operator's bundle.yaml names its two that way), which hack/images.sh monitoring gives the
# image it packs the binary into. A second run with the binaries present only prints the lines.
#
# Prometheus is built without the `builtinassets` tag of its release builds: the web UI's
# compiled assets are not in the Go module (npm builds them), so the server has no UI pages; its
# HTTP API (/api/v1/...), /metrics and /-/ready are all there.
set -euo pipefail
source "$(dirname "$0")/common.sh"

# Prometheus 3.X.Y is published as the Go module version v0.(300+X).Y: v0.316.0 is 3.16.0.
PROM_MODULE=$(awk '$1 == "require" && $2 == "github.com/prometheus/prometheus" { print $3 }' "$HACK_DIR/promtool/go.mod")
[ -n "$PROM_MODULE" ] || die "hack/promtool/go.mod requires no github.com/prometheus/prometheus"
PROMETHEUS_VERSION=$(awk -F. '/^v0\.3[0-9][0-9]\.[0-9]+$/ { printf "3.%d.%s", $2 - 300, $3 }' <<<"$PROM_MODULE")
[ -n "$PROMETHEUS_VERSION" ] || die "hack/promtool/go.mod: $PROM_MODULE is not a Prometheus 3 module version (v0.3XX.Y)"

OPERATOR_MODULE=$(awk '$1 == "require" && $2 == "github.com/prometheus-operator/prometheus-operator" { print $3 }' \
  "$HACK_DIR/prometheus-operator/go.mod")
[ -n "$OPERATOR_MODULE" ] || die "hack/prometheus-operator/go.mod requires no github.com/prometheus-operator/prometheus-operator"

if [ "${1:-}" = bundle ]; then
  dir=$CACHE_DIR/go-mod/github.com/prometheus-operator/prometheus-operator@$OPERATOR_MODULE
  # The build extracts the whole module there; a cache whose binaries outlived the module (a
  # cleaned module cache) gets it back from the proxy.
  if [ ! -f "$dir/bundle.yaml" ]; then
    (cd "$HACK_DIR/prometheus-operator" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly GOMODCACHE=$CACHE_DIR/go-mod \
      /usr/local/go/bin/go mod download github.com/prometheus-operator/prometheus-operator) >&2 ||
      die "downloading the module github.com/prometheus-operator/prometheus-operator@$OPERATOR_MODULE failed"
  fi
  [ -f "$dir/bundle.yaml" ] || die "$dir/bundle.yaml not found"
  echo "$dir/bundle.yaml"
  exit 0
fi

# Both projects stamp their version into prometheus/common's version package (their Makefile
# and .promu.yml); the operator's is its VERSION file's, without the v.
VERSION_PKG=github.com/prometheus/common/version
prometheus=$(build_go_tool prometheus promtool github.com/prometheus/prometheus/cmd/prometheus "$PROMETHEUS_VERSION" \
  "-X $VERSION_PKG.Version=$PROMETHEUS_VERSION" "about 6 minutes on 2 cores when nothing is cached")
operator=$(build_go_tool prometheus-operator prometheus-operator github.com/prometheus-operator/prometheus-operator/cmd/operator \
  "$OPERATOR_MODULE" "-X $VERSION_PKG.Version=${OPERATOR_MODULE#v}" "about 4 minutes on 2 cores when nothing is cached")
reloader=$(build_go_tool prometheus-config-reloader prometheus-operator \
  github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader \
  "$OPERATOR_MODULE" "-X $VERSION_PKG.Version=${OPERATOR_MODULE#v}" "seconds after the operator")
echo "prometheus quay.io/prometheus/prometheus:v$PROMETHEUS_VERSION $prometheus"
echo "prometheus-operator quay.io/prometheus-operator/prometheus-operator:$OPERATOR_MODULE $operator"
echo "prometheus-config-reloader quay.io/prometheus-operator/prometheus-config-reloader:$OPERATOR_MODULE $reloader"

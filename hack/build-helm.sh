#!/usr/bin/env bash
# Builds the Helm CLI from its published Go module (hack/helm/go.mod) and caches it in $HELM_BIN.
# Prints the binary's path. A second run with the binary present only prints it.
set -euo pipefail
source "$(dirname "$0")/common.sh"

HELM_VERSION=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 }' "$HACK_DIR/helm/go.mod")
HELM_BIN=$CACHE_DIR/helm-$HELM_VERSION/bin
RECIPE="go modules: hack/helm/go.sum $(sha256sum "$HACK_DIR/helm/go.sum" | cut -c1-16); static"
if [ -x "$HELM_BIN/helm" ] && [ "$(cat "$HELM_BIN/.recipe" 2>/dev/null)" = "$RECIPE" ]; then
  echo "$HELM_BIN/helm"
  exit 0
fi
go=/usr/local/go/bin/go
[ -x "$go" ] || die "$go not found: Helm builds with the Go installed at /usr/local/go"
cd "$HACK_DIR/helm"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
export GOCACHE=$CACHE_DIR/go-build GOMODCACHE=$CACHE_DIR/go-mod
logf=$CACHE_DIR/helm-build.log
log "building helm $HELM_VERSION from its Go module (about a minute on 2 cores)"
mkdir -p "$HELM_BIN"
"$go" build -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" -o "$HELM_BIN/helm" \
  helm.sh/helm/v3/cmd/helm >"$logf" 2>&1 || { tail -n 20 "$logf" >&2; die "helm build failed; log: $logf"; }
echo "$RECIPE" >"$HELM_BIN/.recipe"
echo "$HELM_BIN/helm"

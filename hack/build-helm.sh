#!/usr/bin/env bash
# Builds the Helm CLI from its published Go module (hack/helm/go.mod) and caches it (see
# build_go_tool in common.sh). Prints the binary's path. A second run with the binary present
# only prints it.
set -euo pipefail
source "$(dirname "$0")/common.sh"

HELM_VERSION=$(awk '$1 == "require" && $2 == "helm.sh/helm/v3" { print $3 }' "$HACK_DIR/helm/go.mod")
build_go_tool helm helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "about a minute on 2 cores"

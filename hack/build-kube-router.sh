#!/usr/bin/env bash
# Builds kube-router from its published Go module (hack/netpol/go.mod) and caches it (see
# build_go_tool in common.sh). Prints the binary's path. A second run with the binary present
# only prints it. The local cluster runs its NetworkPolicy (firewall) controller only: see
# start_netpol in hack/cluster.sh and docs/src/development/local-cluster.md.
set -euo pipefail
source "$(dirname "$0")/common.sh"

KUBE_ROUTER_VERSION=$(awk '$1 == "require" && $2 == "github.com/cloudnativelabs/kube-router/v2" { print $3 }' "$HACK_DIR/netpol/go.mod")
[ -n "$KUBE_ROUTER_VERSION" ] || die "hack/netpol/go.mod requires no github.com/cloudnativelabs/kube-router/v2"
build_go_tool kube-router netpol github.com/cloudnativelabs/kube-router/v2/cmd/kube-router "$KUBE_ROUTER_VERSION" \
  "-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION" "about 2 minutes on 2 cores when nothing is cached"

#!/usr/bin/env bash
# Builds cert-manager's certificate controllers (hack/cert-manager/main.go, a main of ours over
# the published github.com/cert-manager/cert-manager module: see the comment there for why) and
# caches the binary in $CACHE_DIR (build_go_tool in common.sh), keyed by hack/cert-manager/go.sum.
#
#   build-cert-manager.sh         build (cached), print the binary's path; a second run with the
#                                 binary present only prints it
#   build-cert-manager.sh image   print the name of the image hack/images.sh cert-manager packs it
#                                 into (no build)
#   build-cert-manager.sh crds    print the directory of the module's CRDs (deploy/crds: plain
#                                 YAML, one CustomResourceDefinition a file), in the Go module
#                                 cache (downloaded from the module proxy if missing)
#
# The local cluster runs it with CERT_MANAGER=1 hack/cluster.sh up (start_cert_manager there);
# its user is issue 31's `certManager` TLS source (docs/src/development, "cert-manager").
set -euo pipefail
source "$(dirname "$0")/common.sh"

VERSION=$(awk '$1 == "github.com/cert-manager/cert-manager" { print $2 }' "$HACK_DIR/cert-manager/go.mod")
[ -n "$VERSION" ] || die "hack/cert-manager/go.mod requires no github.com/cert-manager/cert-manager"

case ${1:-} in
  image)
    # Not upstream's name (quay.io/jetstack/cert-manager-controller): this binary runs a subset
    # of its controllers and takes other flags, so upstream's manifests would not run it.
    echo "quay.io/etcd-operator-rs/cert-manager-controller:$VERSION"
    exit 0
    ;;
  crds)
    dir=$CACHE_DIR/go-mod/github.com/cert-manager/cert-manager@$VERSION/deploy/crds
    # The build extracts the whole module there; a cache whose binary outlived the module (a
    # cleaned module cache) gets it back from the proxy.
    if [ ! -d "$dir" ]; then
      (cd "$HACK_DIR/cert-manager" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly GOMODCACHE=$CACHE_DIR/go-mod \
        /usr/local/go/bin/go mod download github.com/cert-manager/cert-manager) >&2 ||
        die "downloading the module github.com/cert-manager/cert-manager@$VERSION failed"
    fi
    [ -f "$dir/cert-manager.io_certificates.yaml" ] || die "$dir/cert-manager.io_certificates.yaml not found"
    echo "$dir"
    exit 0
    ;;
  "") ;;
  *) die "usage: build-cert-manager.sh [image|crds]" ;;
esac

# build_go_tool keys its cache on go.sum; main.go is ours, so its hash goes into the version (a
# changed main is built again, in a directory of its own).
SOURCE_HASH=$(sha256sum <"$HACK_DIR/cert-manager/main.go" | cut -c1-12)
build_go_tool cert-manager cert-manager . "$VERSION-$SOURCE_HASH" "" "about 3 minutes on 2 cores when nothing is cached"

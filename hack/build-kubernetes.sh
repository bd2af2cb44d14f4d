#!/usr/bin/env bash
# Builds Kubernetes 1.20.2 (apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl)
# from Debian's `kubernetes` source package, and caches the binaries in $K8S_BIN.
# A second run with the binaries present does nothing.
set -euo pipefail
source "$(dirname "$0")/common.sh"

WHAT_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
# Bumped whenever the way the binaries are built changes, so cached builds are redone.
RECIPE="vendor: reflect2 1.0.2; openapi null check as built by Go 1.15"
have_all() {
  for b in "${WHAT_BINS[@]}"; do [ -x "$K8S_BIN/$b" ] || return 1; done
  [ "$(cat "$K8S_BIN/.recipe" 2>/dev/null)" = "$RECIPE" ]
}
if have_all; then log "kubernetes $K8S_VERSION binaries cached in $K8S_BIN"; exit 0; fi

bash "$(dirname "$0")/deps.sh"
command -v go >/dev/null || die "go not found after installing golang-go"

work=$CACHE_DIR/kubernetes-src
mkdir -p "$work"
cd "$work"
if ! ls -d kubernetes-*/ >/dev/null 2>&1; then
  log "fetching Debian source package kubernetes"
  ensure_deb_src
  apt-get update -qq
  # Only the orig tarball: Debian's patches target the packaged layout, the vendored tree is what we build.
  apt-get source --download-only kubernetes >/dev/null
  orig=$(ls kubernetes_*.orig.tar.* | head -n1)
  [ -n "$orig" ] || die "apt-get source kubernetes gave no orig tarball"
  tar xf "$orig"
fi
src=$(ls -d "$work"/kubernetes-*/ | head -n1)
src=${src%/}
cd "$src"
[ -d vendor ] || die "$src has no vendor/ directory"

# Trap 1: Go >= 1.18 crashes the 1.20 apiserver at the first custom-resource create (reflect2).
r2=/usr/share/gocode/src/github.com/modern-go/reflect2
if [ ! -f vendor/github.com/modern-go/reflect2/.replaced-1.0.2 ]; then
  [ -d "$r2" ] || die "$r2 missing (golang-github-modern-go-reflect2-dev)"
  rm -rf vendor/github.com/modern-go/reflect2
  cp -r "$r2" vendor/github.com/modern-go/reflect2
  rm -f vendor/github.com/modern-go/reflect2/go.mod vendor/github.com/modern-go/reflect2/go.sum
  touch vendor/github.com/modern-go/reflect2/.replaced-1.0.2
fi

# Trap 2 (found here): the 1.20 OpenAPI validators test for null with
# `reflect.DeepEqual(reflect.Zero(t), reflect.ValueOf(data))`, which compares reflect.Value
# structs: false for every non-nil value under the Go that built 1.20, true for zero values
# ("" , 0, false) under Go >= 1.18. Built with Debian's Go, the apiserver then refuses a custom
# resource with `repository: ""` or `paused: false` ("must be of type string: null"). Restore the
# original meaning: only nil is null.
for f in vendor/k8s.io/kube-openapi/pkg/validation/validate/type.go vendor/github.com/go-openapi/validate/type.go; do
  [ -f "$f" ] || continue
  sed -i 's/if data == nil || reflect.DeepEqual(reflect.Zero(reflect.TypeOf(data)), reflect.ValueOf(data)) {/if data == nil {/' "$f"
  grep -q 'if data == nil {' "$f" || die "could not patch the null check in $f"
done

# Build the way debian/rules does: a GOPATH with the tree linked in, make runs the generators.
mkdir -p .go/src/k8s.io
ln -sfn ../../.. .go/src/k8s.io/kubernetes
whats=()
for b in "${WHAT_BINS[@]}"; do whats+=("cmd/$b"); done
log "building kubernetes ${WHAT_BINS[*]} (about 10 minutes on 2 cores)"
export GOPATH=$src/.go GO111MODULE=off GOFLAGS=-mod=vendor CGO_ENABLED=0 GOCACHE=$CACHE_DIR/go-build KUBE_GIT_VERSION=v$K8S_VERSION
unset GOFLAGS
cd .go/src/k8s.io/kubernetes
make WHAT="${whats[*]}" >"$work/build.log" 2>&1 || { tail -n 30 "$work/build.log" >&2; die "kubernetes build failed; log: $work/build.log"; }
mkdir -p "$K8S_BIN"
for b in "${WHAT_BINS[@]}"; do install -m 0755 "_output/bin/$b" "$K8S_BIN/$b"; done
echo "$RECIPE" > "$K8S_BIN/.recipe"
log "kubernetes binaries in $K8S_BIN"

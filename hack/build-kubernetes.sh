#!/usr/bin/env bash
# Builds Kubernetes $K8S_VERSION (apiserver, controller-manager, scheduler, kubelet, kube-proxy,
# kubectl) and caches the binaries in $K8S_BIN. A second run with the binaries present does nothing.
#   modern leg (1.37): from the published Go modules, hack/k8s/go.mod, with the Go at /usr/local/go;
#   legacy leg (1.20): from Debian's `kubernetes` source package, with Debian's Go 1.19.
set -euo pipefail
source "$(dirname "$0")/common.sh"

WHAT_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
# Bumped whenever the way the binaries are built changes, so cached builds are redone.
if [ "$K8S_VERSION" = "$K8S_MODERN" ]; then
  RECIPE="go modules: hack/k8s/go.sum $(sha256sum "$HACK_DIR/k8s/go.sum" | cut -c1-16); static; version ldflags r2"
else
  RECIPE="vendor: reflect2 1.0.2; openapi null check as built by Go 1.15"
fi
have_all() {
  for b in "${WHAT_BINS[@]}"; do [ -x "$K8S_BIN/$b" ] || return 1; done
  [ "$(cat "$K8S_BIN/.recipe" 2>/dev/null)" = "$RECIPE" ]
}
if have_all; then log "kubernetes $K8S_VERSION binaries cached in $K8S_BIN"; exit 0; fi

build_modern() {
  local go=/usr/local/go/bin/go out=$CACHE_DIR/kubernetes-$K8S_VERSION/build pkgs=() b v=v$K8S_VERSION date ldflags=""
  [ -x "$go" ] || die "$go not found: the modern leg builds with the Go installed at /usr/local/go"
  cd "$HACK_DIR/k8s"
  # The module's own go line (1.26.0) is what this Go is; never fetch another toolchain silently.
  export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0
  export GOCACHE=$CACHE_DIR/go-build GOMODCACHE=$CACHE_DIR/go-mod
  log "downloading the Go modules of Kubernetes $K8S_VERSION (cached in $GOMODCACHE)"
  "$go" mod download >"$CACHE_DIR/k8s-build.log" 2>&1 || { tail -n 20 "$CACHE_DIR/k8s-build.log" >&2; die "go mod download failed"; }
  # Version stamps as Kubernetes' own build sets them (hack/lib/version.sh), so `kubectl version`
  # and the Node show the real version. The build date is the module's publication time.
  date=$("$go" list -m -json k8s.io/kubernetes | jq -r '.Time // empty' 2>/dev/null || true)
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$K8S_MINOR -X $p.gitTreeState=clean"
    [ -n "$date" ] && ldflags+=" -X $p.buildDate=$date"
  done
  for b in "${WHAT_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "building kubernetes ${WHAT_BINS[*]} $K8S_VERSION from Go modules (about 5 minutes on 2 cores)"
  rm -rf "$out"; mkdir -p "$out"
  "$go" build -ldflags "-s -w$ldflags" -o "$out/" "${pkgs[@]}" >>"$CACHE_DIR/k8s-build.log" 2>&1 ||
    { tail -n 30 "$CACHE_DIR/k8s-build.log" >&2; die "kubernetes build failed; log: $CACHE_DIR/k8s-build.log"; }
  mkdir -p "$K8S_BIN"
  for b in "${WHAT_BINS[@]}"; do install -m 0755 "$out/$b" "$K8S_BIN/$b"; done
  rm -rf "$out"
  echo "$RECIPE" >"$K8S_BIN/.recipe"
  log "kubernetes $K8S_VERSION binaries in $K8S_BIN"
}
if [ "$K8S_VERSION" = "$K8S_MODERN" ]; then build_modern; exit 0; fi

bash "$(dirname "$0")/deps.sh"
# Trap: 1.20's vendored tree does not build with a newer Go (/usr/local/go is first on PATH
# here); Debian's Go 1.19 is the one this recipe was made with.
GO119=/usr/lib/go-1.19/bin
[ -x "$GO119/go" ] || die "$GO119/go not found after installing golang-go (Debian's Go 1.19)"
export PATH=$GO119:$PATH GOTOOLCHAIN=local

work=$CACHE_DIR/kubernetes-src
mkdir -p "$work"
cd "$work"
if ! ls -d kubernetes-*/ >/dev/null 2>&1; then
  log "fetching Debian source package kubernetes"
  ensure_deb_src
  apt-get update -qq
  # Only the orig tarball: Debian's patches target the packaged layout, the vendored tree is what we build.
  apt-get source --download-only kubernetes >/dev/null
  orig=$(ls kubernetes_*.orig.tar.* | sed -n 1p)
  [ -n "$orig" ] || die "apt-get source kubernetes gave no orig tarball"
  tar xf "$orig"
fi
src=$(ls -d "$work"/kubernetes-*/ | sed -n 1p)
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

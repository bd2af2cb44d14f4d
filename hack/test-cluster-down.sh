#!/usr/bin/env bash
# Asserts that `hack/cluster.sh down` left nothing of the local cluster behind: no processes,
# no bridge/veths/network namespaces, no KUBE-*/CNI-* iptables chains or rules, no mounts, no
# state directories, no /etc/hosts block, no host-path volumes (devkit provision's under
# $PV_DIR, the in-tree provisioner's in /tmp/hostpath_pv), no devkit process, no kube-router
# (NetworkPolicy enforcement) process, chain or ipset, no process of the monitoring stack
# (MONITORING=1: Prometheus, the Prometheus Operator, its config reloader; pods whose images and
# API objects lived in $STATE_DIR, its install files in $STATE_DIR/monitoring, its binaries and
# images in $CACHE_DIR, which down keeps), nor of cert-manager (CERT_MANAGER=1: a pod, its marker
# in $STATE_DIR/cert-manager); for a cluster of several nodes (NODES>1)
# no node network namespace (by its mount or a process in it), host bridge, veth, route to a pod
# CIDR or the Service CIDR, loop device of a node's volume filesystem.
#
#   test-cluster-down.sh          check only (after you ran `cluster.sh down`)
#   test-cluster-down.sh --down   run `cluster.sh down` first, then check
# Exit status 1 with one line per leftover.
set -euo pipefail
HACK_DIR=$(cd "$(dirname "$0")" && pwd)
source "$HACK_DIR/common.sh"
source "$HACK_DIR/cluster-env.sh"
need_root

if [ "${1:-}" = --down ]; then bash "$HACK_DIR/cluster.sh" down; fi

failures=0
leftover() { echo "LEFTOVER: $*"; failures=$((failures + 1)); }

# Processes: the cluster's components by name or by our paths in their command line, and
# container processes by their root mount (a snapshot in the cluster's containerd root).
for p in /proc/[0-9]*; do
  pid=${p#/proc/}
  [ "$pid" = $$ ] && continue
  comm=$(cat "$p/comm" 2>/dev/null) || continue
  stat=$(cat "$p/stat" 2>/dev/null) || continue
  # Zombies are dead already; init (the VM's agent here) reaps them a moment later.
  [ "$(cut -d' ' -f1 <<<"${stat##*) }")" = Z ] && continue
  args=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null) || continue
  # (Container processes, such as Prometheus, its operator and cert-manager, are found by their
  # root mount below; generic names like `prometheus` or `operator` would also match a
  # developer's own processes.)
  case $comm in
    kube-apiserver | kube-controller | kube-scheduler | kubelet | kube-proxy | kube-router | containerd-shim* | dnsmasq | devkit | pause)
      leftover "process $pid ($comm): $args"; continue ;;
  esac
  if [[ $args == *"$STATE_DIR"* || $args == *"$RUN_DIR"* || $args == *"$CACHE_DIR/kubernetes-"* || $args == *"$CACHE_DIR/containerd-"* ||
    $args == *"$CACHE_DIR/kube-router-"* ]]; then
    leftover "process $pid ($comm): $args"
  elif awk '$5 == "/"' "$p/mountinfo" 2>/dev/null | grep -F "$CONTAINERD_ROOT/" >/dev/null; then
    leftover "container process $pid ($comm): $args"
  elif [[ $comm == containerd || $comm == etcd ]]; then
    # Not ours by path; report as a warning only (another user's etcd may run on this machine).
    echo "note: process $pid ($comm) is running, not started by the cluster: $args"
  fi
done

# Network.
ip link show "$BRIDGE" >/dev/null 2>&1 && leftover "bridge $BRIDGE"
ip link show "$NODES_BRIDGE" >/dev/null 2>&1 && leftover "bridge $NODES_BRIDGE (several nodes)"
while read -r dev; do
  [ -n "$dev" ] && leftover "veth $dev"
done < <(ip -o link show type veth 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1)
while read -r ns _; do
  [[ $ns == cni-* ]] && leftover "network namespace $ns"
done < <(ip netns list 2>/dev/null)
ip -4 route show | grep -F "${POD_CIDR%/*}" >/dev/null && leftover "route to $POD_CIDR: $(ip -4 route show | grep -F "${POD_CIDR%/*}")"
# Several nodes: the host's routes to each node's pod CIDR (10.244.K.0/24) and to the Services.
while read -r r; do
  [ -n "$r" ] && leftover "route $r"
done < <(ip -4 route show | grep -E "^(10\.244\.[0-9]+\.0/24|${SERVICE_CIDR//./\\.}) " || true)
# A process in a network namespace other than the host's whose namespace file was ours (the
# nodes' namespaces are bind-mounted under $RUN_DIR/nodes; the mounts are checked below).
host_ns=$(readlink /proc/self/ns/net)
for p in /proc/[0-9]*; do
  ns=$(readlink "$p/ns/net" 2>/dev/null) || continue
  [ "$ns" = "$host_ns" ] && continue
  comm=$(cat "$p/comm" 2>/dev/null) || continue
  case $comm in kubelet | kube-proxy | kube-router | containerd | containerd-shim* | pause | nsenter)
    leftover "process ${p#/proc/} ($comm) in network namespace $ns" ;;
  esac
done
# Loop devices of the nodes' volume filesystems (detached when their mounts went).
while read -r l; do
  [ -n "$l" ] && leftover "loop device $l"
done < <(losetup -a 2>/dev/null | grep -F "$STATE_DIR/" || true)

# iptables (IPv4 and IPv6, all tables).
for save in iptables-save ip6tables-save; do
  command -v "$save" >/dev/null || continue
  while read -r line; do
    leftover "$save: $line"
  done < <("$save" 2>/dev/null | grep -E '(KUBE|CNI)-' || true)
done

# kube-router's ipsets (its chains are KUBE-* ones, checked above): KUBE-SRC-*, KUBE-DST-*, and
# the TMP-* it swaps through; "inet6:" in front for IPv6.
if command -v ipset >/dev/null; then
  while read -r set; do
    leftover "ipset $set"
  done < <(ipset list -n 2>/dev/null | grep -E '^(inet6:)?(KUBE-(SRC|DST)-|TMP-)' || true)
fi

# Cgroups runc made for containers.
for d in /sys/fs/cgroup/*/k8s.io /sys/fs/cgroup/k8s.io; do
  [ -d "$d" ] && leftover "cgroup $d"
done

# Mounts, files, directories.
while read -r m; do
  leftover "mount $m"
done < <(awk -v s="$STATE_DIR" -v r="$RUN_DIR" 'index($5, s) == 1 || index($5, r) == 1 { print $5 }' /proc/self/mountinfo)
for d in "$STATE_DIR" "$RUN_DIR" "$PV_DIR" "$HOSTPATH_PV_DIR" "/var/lib/cni/networks/$CNI_NETWORK"; do
  [ -e "$d" ] && leftover "path $d"
done
compgen -G "/var/lib/cni/results/$CNI_NETWORK-*" >/dev/null && leftover "CNI result cache /var/lib/cni/results/$CNI_NETWORK-*"
grep -q 'etcd-operator-dev cluster DNS' /etc/hosts && leftover "/etc/hosts block"
[ -d "$CACHE_DIR" ] || leftover "(not a leftover, but wrong) $CACHE_DIR was removed; down must keep it"

# Ports of the cluster.
for port in "$APISERVER_PORT" "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" 10248 10249 10250 10256 10257 10259; do
  [ -n "$(ss -Hltn "( sport = :$port )")" ] && leftover "port $port still listening"
done

if ((failures)); then
  echo "FAIL: $failures leftovers after cluster.sh down"
  exit 1
fi
echo "OK: nothing of the cluster is left"

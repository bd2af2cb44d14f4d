# Settings of the local cluster shared by cluster.sh, images.sh and test-cluster-down.sh.
# Source it after common.sh; do not run it.

LOG_DIR=$STATE_DIR/logs
PKI_DIR=$STATE_DIR/pki
PID_DIR=$RUN_DIR/pids
KUBECONFIG_PATH=$STATE_DIR/kubeconfig
KUBECTL=$K8S_BIN/kubectl
DEVKIT=$STATE_DIR/bin/devkit

CLUSTER_NAME=etcd-operator-dev
CLUSTER_DOMAIN=cluster.local
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
POD_CIDR=10.244.0.0/24
POD_GATEWAY=10.244.0.1
# The cluster DNS (dnsmasq on the host): the pod gateway on one node, the host bridge on several.
DNS_IP=$POD_GATEWAY
BRIDGE=cni0
CNI_NETWORK=etcd-operator-dev

# The backing etcd stays off 2379/2380: the operator's etcd pods and the tests use those.
ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380
APISERVER_PORT=6443

CONTAINERD_CONFIG=$STATE_DIR/containerd/config.toml
CONTAINERD_ROOT=$STATE_DIR/containerd/root
CONTAINERD_STATE=$RUN_DIR/containerd
CONTAINERD_SOCK=$RUN_DIR/containerd/containerd.sock
SNAPSHOTTER_FILE=$STATE_DIR/containerd/snapshotter
# Kubelet 1.20's default pod infra image; containerd's sandbox_image points at the local build.
PAUSE_IMAGE=k8s.gcr.io/pause:3.2

IMAGES_CACHE=$CACHE_DIR/images
# StorageClass `standard`: `devkit provision` makes a directory per claim under PV_DIR.
PV_DIR=$STATE_DIR/pv
PV_PROVISIONER=dev.etcd-operator/host-path
# The in-tree host-path provisioner's directory (hard-coded there), used by clusters started
# before `devkit provision`: `down` still removes it.
HOSTPATH_PV_DIR=/tmp/hostpath_pv

# ctr of the running leg; containerd 2's deprecation notice for cgroup v1 hosts is said once by
# cluster.sh, not at every call.
ctr_() { "$RUNTIME_BIN/ctr" --address "$CONTAINERD_SOCK" "$@" 2> >(grep -v 'DEPRECATION: The support for cgroup v1' >&2); }
ctr_k8s() { ctr_ --namespace k8s.io "$@"; }

# The machine's primary IPv4 address (the source address of the default route).
node_ip() {
  ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit }}'
}
node_name() { hostname | tr '[:upper:]' '[:lower:]'; }

# ---------------------------------------------------------------------------------------------
# Nodes. NODES=1 (the default): one node, named after this machine, on the host itself (the
# layout above). NODES=N (2..9, modern leg only): N nodes node-1..node-N, each a network
# namespace of its own (bind-mounted at $RUN_DIR/nodes/node-K/netns, entered with
# `nsenter --net=` only: `ip netns exec` would also unshare the mount namespace, and kubelet's
# mounts would not propagate to the containers) with its own containerd, kubelet, kube-proxy
# (and kube-router with NETPOL=1); the control plane, dnsmasq, dns-sync and the provisioner stay
# on the host. Network: the host bridge $NODES_BRIDGE holds $POD_GATEWAY/24 (cluster DNS stays at
# the address pods use on one node) and node K at 10.244.0.(10+K) on a veth pair; node K's pods
# are on its own bridge cni0 in 10.244.K.0/24; nodes route each other's pod CIDRs directly, the
# host routes every pod CIDR via its node. A running cluster keeps its node count: without NODES
# the scripts use the count it was started with ($NODES_FILE).
NODES_FILE=$STATE_DIR/node-count
NODES_BRIDGE=etcdnodes0
NODES_MAX=9
NODES_POD_CIDRS=10.244.0.0/16   # every node's pod CIDR (and the host bridge's 10.244.0.0/24)
NODES_REGION=local
# Each node's volumes live on a filesystem of their own (ext4 in a sparse file, loop-mounted at
# $PV_DIR/<node>), so that `cluster.sh node fill` fills one node's disk and nothing else.
NODE_PV_SIZE=${NODE_PV_SIZE:-2G}
resolve_nodes() {
  local running=""
  [ -f "$NODES_FILE" ] && running=$(cat "$NODES_FILE")
  NODES=${NODES:-${running:-1}}
  [[ $NODES =~ ^[1-9]$ ]] || die "NODES=$NODES: 1 to $NODES_MAX"
  export NODES
}
resolve_nodes
multi_node() { [ "$NODES" -gt 1 ]; }
node_names() {
  local k
  if multi_node; then for ((k = 1; k <= NODES; k++)); do echo "node-$k"; done; else node_name; fi
}
# node_env NAME: the per-node settings of node NAME (node-K) as variables N_*. For the one-node
# layout (NAME is this machine's) the paths are the host's above.
node_env() {
  N_NAME=$1
  if ! [[ $N_NAME =~ ^node-([1-9])$ ]] || ! multi_node; then
    [ "$N_NAME" = "$(node_name)" ] || die "no node $N_NAME (nodes: $(node_names | tr '\n' ' '))"
    N_INDEX=0 N_IP=$(node_ip) N_POD_CIDR=$POD_CIDR N_POD_GATEWAY=$POD_GATEWAY
    N_STATE=$STATE_DIR N_RUN=$RUN_DIR N_NETNS="" N_PV_DIR=$PV_DIR
    N_CONTAINERD_ROOT=$CONTAINERD_ROOT N_CONTAINERD_SOCK=$CONTAINERD_SOCK N_KUBELET_ROOT=$STATE_DIR/kubelet
    return 0
  fi
  N_INDEX=${BASH_REMATCH[1]}
  ((N_INDEX <= NODES)) || die "no node $N_NAME (the cluster has $NODES nodes)"
  N_IP=10.244.0.$((10 + N_INDEX))
  N_POD_CIDR=10.244.$N_INDEX.0/24
  N_POD_GATEWAY=10.244.$N_INDEX.1
  N_STATE=$STATE_DIR/nodes/$N_NAME
  N_RUN=$RUN_DIR/nodes/$N_NAME
  N_NETNS=$N_RUN/netns
  N_PV_DIR=$PV_DIR/$N_NAME
  N_CONTAINERD_ROOT=$N_STATE/containerd/root
  N_CONTAINERD_SOCK=$N_RUN/containerd/containerd.sock
  N_KUBELET_ROOT=$N_STATE/kubelet
}
# in_node NAME CMD...: CMD in node NAME's network namespace (the host's on one node).
in_node() {
  local name=$1; shift
  node_env "$name"
  if [ -n "$N_NETNS" ]; then nsenter --net="$N_NETNS" -- "$@"; else "$@"; fi
}
# A lost node (`cluster.sh node lose`) stays down until `node restore`: `up` and images.sh
# leave it alone.
node_lost() { node_env "$1"; [ -f "$N_STATE/lost" ]; }
live_nodes() {
  local n
  for n in $(node_names); do node_lost "$n" || echo "$n"; done
}

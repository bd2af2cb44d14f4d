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

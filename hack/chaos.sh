#!/usr/bin/env bash
# The chaos command (issue 15): builds the operator (debug) and crates/e2e/src/bin/chaos, loads
# the operator image, and injects faults chosen at random from a printed seed into a mix of
# EtcdClusters (emptyDir and PVC, sizes 1/3/5, periodic backups to a PVC) while the operator
# runs in-cluster with 2 replicas and clients write and read; then checks the history and the
# operator's invariants. Arguments go to the chaos binary, e.g.
#   hack/chaos.sh --faults 20 --seed 1           # the short run (a few minutes per 20 faults)
#   hack/chaos.sh --faults 20                     # a random seed, printed: replay it with --seed
#   hack/chaos.sh --faults 500 --node-faults      # the long run, also restarting kube-apiserver
#                                                 # and the kubelet: ONLY on a machine of your own
#   hack/chaos.sh --ci                            # the CI version: 20 faults of the fixed seed 98
#                                                 # (10 of the 11 pod-level kinds), then 10 of a
#                                                 # random seed (printed); about 6 minutes
#   hack/chaos.sh --dry-run --faults 50 --seed 7  # print the fault sequence of a seed
#   hack/chaos.sh --help
# Report (text + JSON), operator log and samples: target/chaos/chaos-<time>-<seed>/. Exit code 0
# when every check passed, 1 on a violation, 2 when the run itself failed. Needs root (ctr,
# nsenter, iptables on this machine, the cluster's node) and a running cluster: it never starts
# or stops one. hack/test.sh runs `--ci` on the modern leg (CHAOS=0 skips it).
set -euo pipefail
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/cluster-env.sh"
cd "$REPO_DIR"
need_root
export KUBECONFIG=${KUBECONFIG:-$LOCAL_KUBECONFIG}
CHAOS_IMAGE=${CHAOS_IMAGE:-quay.io/etcd-operator-rs/etcd-operator:chaos}

log "building the operator and the chaos command (debug)"
cargo build --locked -p etcd-operator --bin etcd-operator
cargo build --locked -p e2e --bin chaos
if [ "$KUBECONFIG" = "$LOCAL_KUBECONFIG" ]; then
  bash hack/images.sh load # the etcd versions the upgrades walk through (imports only what is missing)
  bash hack/images.sh operator target/debug/etcd-operator "$CHAOS_IMAGE"
else
  log "$KUBECONFIG is not the local cluster: $CHAOS_IMAGE and the etcd images must be pullable there; node faults need the node to be this machine"
fi
mkdir -p target/chaos
# The node's containerd (SIGKILL/SIGSTOP of etcd, the network namespace of a member).
# Several nodes: every live node's containerd (a member's container is known to its node's only).
export CHAOS_CTR=$RUNTIME_BIN/ctr CHAOS_CONTAINERD_SOCK
CHAOS_CONTAINERD_SOCK=$(for n in $(live_nodes); do node_env "$n"; echo "$N_CONTAINERD_SOCK"; done | tr '\n' ' ')
export E2E_OPERATOR_IMAGE=$CHAOS_IMAGE ETCD_OPERATOR_INIT_IMAGE=$CHAOS_IMAGE ETCD_OPERATOR_BIN=target/debug/etcd-operator
if [ "${1:-}" = --ci ]; then
  shift
  status=0
  target/debug/chaos --faults 20 --seed 98 "$@" || status=$?
  # 10 of a random seed: new states on every run at half the cost of the fixed run (the suite's
  # 60-minute budget; each run also spends ~1 min setting up its clusters).
  target/debug/chaos --faults 10 "$@" || status=$?
  exit "$status"
fi
exec target/debug/chaos "$@"

#!/usr/bin/env bash
# The benchmark command: builds the operator and the bench in release mode, loads the operator
# image into the local cluster (the member pods' wait-dns init container runs it), and runs
# crates/e2e/src/bin/bench against the cluster. Arguments go to the bench, e.g.
#   hack/bench.sh                          # everything, 3 runs each
#   hack/bench.sh --only create,heal -n 5  # some measurements, 5 runs each
#   hack/bench.sh --only backup -n 1       # backup throughput (in the default set; ~1.5 min with 3 runs):
#                                          # one-shot EtcdBackups to S3 (a moto server the bench starts) and
#                                          # to a PVC vs. etcdctl snapshot save, 3 members holding 110 MiB
#   hack/bench.sh --only tls -n 1          # TLS.auto: create beside plaintext, a CA rotation per member
#                                          # (~5 min a run; not in the default set)
#   hack/bench.sh --only idle              # the operator at rest (~15 min; not in the default set):
#                                          # RSS, CPU, its apiserver requests with 10 running and
#                                          # 1000 paused EtcdClusters; --idle-window-secs 60 for a quick run
#   hack/bench.sh --only many -n 1         # the operator's scale (not in the default set; ~3 min): 100
#                                          # EtcdClusters of 1 member at once, time until all Running,
#                                          # the operator's CPU seconds and peak RSS (--many-clusters N)
#   hack/bench.sh --only node-loss -n 3    # needs NODES=3 hack/cluster.sh up (not in the default set): the
#                                          # node of an emptyDir member lost, until 3 members again, beside a
#                                          # bare pod start, with the node controller's share and failed writes
#   hack/bench.sh --only archive -n 1      # the continuous archive (not in the default set; ~4 min a run):
#                                          # put latency with it on vs off, ack-to-durable lag (RPO),
#                                          # throughput at 1k/5k puts/s, a point-in-time restore 100k
#                                          # revisions past its snapshot vs a full snapshot restore
#   hack/bench.sh --help
# heal includes a PVC member's heal (etcd 3.6.15, 64Mi) beside a StatefulSet's pod being recreated;
# scale includes 5→3 under a writer through the client Service. Beside the totals, a phase table
# per step (reconcile started, planned, API write, pod scheduled, init containers, etcd started,
# listening, healthy, client Service endpoints) shows where the time goes.
# The result table goes to stdout, per-sample timelines to stderr; both are also saved in
# target/bench-logs/bench-<time>.txt next to the operators' logs. The bench creates and deletes
# its own namespaces and never takes the cluster down. Not part of hack/test.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO_DIR"
need_root
use_cluster # the local cluster (started if it is not up), or $KUBECONFIG's

log "building the operator and the bench (release)"
cargo build --release --locked -p etcd-operator --bin etcd-operator
cargo build --release --locked -p e2e --bin bench
if [ "$LOCAL_CLUSTER" = 1 ]; then
  bash hack/images.sh load # etcd v3.4.23/v3.5.0/v3.5.1 (imports only what is missing)
  bash hack/images.sh operator target/release/etcd-operator "$OPERATOR_IMAGE"
  # What the operator learns from its resolv.conf when it runs in a pod (it runs on the host here).
  export ETCD_OPERATOR_CLUSTER_DOMAIN=${ETCD_OPERATOR_CLUSTER_DOMAIN:-$(source hack/cluster-env.sh && echo "$CLUSTER_DOMAIN")}
else
  log "$KUBECONFIG is not the local cluster: $OPERATOR_IMAGE (built from this tree) and quay.io/coreos/etcd:v3.5.0/v3.5.1 must be pullable there"
fi

mkdir -p target/bench-logs
out=target/bench-logs/bench-$(date -u +%Y%m%dT%H%M%SZ).txt
log "running the bench; output also in $out"
set +e
ETCD_OPERATOR_BIN=target/release/etcd-operator ETCD_OPERATOR_INIT_IMAGE=$OPERATOR_IMAGE \
  target/release/bench "$@" 2> >(tee -i -a "$out" >&2) | tee -i -a "$out"
status=${PIPESTATUS[0]}
wait
exit "$status"

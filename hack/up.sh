#!/usr/bin/env bash
# The main job: a running etcd operator with the example cluster.
#  1. the local Kubernetes comes up (or $KUBECONFIG's cluster is used),
#  2. the operator is built, its image loaded (local cluster) and installed with
#     `etcd-operator manifests` (CRDs, ServiceAccount, RBAC, Deployment) in namespace default,
#  3. examples/example-etcd-cluster.yaml is applied and waited for,
#  4. `kubectl get etcdclusters,pods -l app=etcd` is shown;
#  5. the `kubectl etcd` plugin (crates/kubectl-etcd) is installed beside the cluster's kubectl
#     and linked into /usr/local/bin, where `kubectl plugin list` finds it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO_DIR"
need_root
bash hack/deps.sh
use_cluster
kubectl() { "$K8S_BIN/kubectl" "$@"; }
command -v "$K8S_BIN/kubectl" >/dev/null || kubectl() { command kubectl "$@"; }

log "building the operator and the kubectl etcd plugin"
# One invocation: the plugin shares every dependency (and its features) with the operator.
cargo build --release --locked -p etcd-operator -p kubectl-etcd
if [ "$LOCAL_CLUSTER" = 1 ]; then
  bash hack/images.sh operator target/release/etcd-operator "$OPERATOR_IMAGE"
fi

log "installing the operator (namespace default)"
# CRD validation rules (CEL) where the apiserver has them (1.25+), as the operator detects it.
rules=()
kubectl get --raw /openapi/v3/apis/apiextensions.k8s.io/v1 2>/dev/null | grep -F '"x-kubernetes-validations"' >/dev/null || rules=(--no-validation-rules)
target/release/etcd-operator manifests --namespace default --image "$OPERATOR_IMAGE" "${rules[@]}" | kubectl apply -f -
# A new image under the same tag is only picked up by a new pod.
kubectl -n default rollout restart deployment/etcd-operator >/dev/null
kubectl -n default rollout status deployment/etcd-operator --timeout=180s
kubectl wait --for=condition=Established --timeout=60s crd/etcdclusters.etcd.database.coreos.com >/dev/null

log "creating the example cluster"
kubectl -n default apply -f examples/example-etcd-cluster.yaml
for _ in $(seq 1 180); do
  ready=$(kubectl -n default get etcdcluster example-etcd-cluster -o jsonpath='{.status.readyMembers}' 2>/dev/null || true)
  [ "${ready:-0}" = 3 ] && break
  sleep 1
done
[ "${ready:-0}" = 3 ] || log "the example cluster is not ready yet: see kubectl describe etcdcluster example-etcd-cluster"
kubectl -n default get etcdclusters,pods -l app=etcd

log "installing the kubectl etcd plugin"
plugin_dir=$K8S_BIN
[ -d "$plugin_dir" ] || plugin_dir=/usr/local/bin
install -m 0755 target/release/kubectl-etcd "$plugin_dir/kubectl-etcd"
[ "$plugin_dir" = /usr/local/bin ] || ln -sf "$plugin_dir/kubectl-etcd" /usr/local/bin/kubectl-etcd
plugins=$(kubectl plugin list 2>/dev/null || true)
grep kubectl-etcd <<<"$plugins" || log "kubectl plugin list does not show kubectl-etcd: is /usr/local/bin on PATH?"
echo "try: kubectl etcd status example-etcd-cluster -n default"
echo
echo "KUBECONFIG=$KUBECONFIG"

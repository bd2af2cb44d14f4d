#!/usr/bin/env bash
# The test command: installs what is missing, runs the unit tests, brings up the local
# Kubernetes (or uses $KUBECONFIG's cluster), runs the end-to-end suite with the real operator
# and real etcd (the operator as a process; then the lifecycle suite and an S3 backup/restore
# again with the operator installed in-cluster from its manifests), and ends with one summary
# line "N passed, N failed".
#   KEEP_CLUSTER=1  leave the local cluster up afterwards (default: take it down and check that
#                   nothing is left behind, when this run brought it up).
#   E2E_FILTER=...  run only the e2e tests whose names contain this.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$REPO_DIR"
need_root
bash hack/deps.sh

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
passed=0 failed=0
count() { # add up cargo's "test result: ... N passed; M failed" lines of a log
  local p f
  read -r p f < <(awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
                      END { print p + 0, f + 0 }' "$1")
  passed=$((passed + p)); failed=$((failed + f))
}
status=0

log "building"
cargo build --workspace --all-targets --locked

log "unit tests"
cargo test --workspace --exclude e2e --no-fail-fast --locked 2>&1 | tee "$out/unit.log" || status=1
cargo test -p e2e --lib --bin bench --locked 2>&1 | tee -a "$out/unit.log" || status=1
count "$out/unit.log"

was_up=0
[ -f "$LOCAL_KUBECONFIG" ] && bash hack/cluster.sh status >/dev/null 2>&1 && was_up=1
use_cluster
# The image of in-cluster installs and of the members' init container. On the local cluster a tag
# of its own holding this build (hack/up.sh and hack/bench.sh load theirs as $OPERATOR_IMAGE; the
# tests check that the operator pods run exactly target/debug/etcd-operator).
if [ "$LOCAL_CLUSTER" = 1 ]; then
  export E2E_OPERATOR_IMAGE=${E2E_OPERATOR_IMAGE:-quay.io/etcd-operator-rs/etcd-operator:e2e}
  bash hack/images.sh operator target/debug/etcd-operator "$E2E_OPERATOR_IMAGE"
else
  export E2E_OPERATOR_IMAGE=${E2E_OPERATOR_IMAGE:-$OPERATOR_IMAGE}
fi
export ETCD_OPERATOR_INIT_IMAGE=$E2E_OPERATOR_IMAGE

log "end-to-end tests with KUBECONFIG=$KUBECONFIG"
E2E_ARGS=(--test-threads=1)
[ -n "${E2E_FILTER:-}" ] && E2E_ARGS+=("$E2E_FILTER")
E2E_OPERATOR=process cargo test -p e2e --tests --no-fail-fast --locked -- "${E2E_ARGS[@]}" 2>&1 | tee "$out/e2e.log" || status=1
count "$out/e2e.log"

log "the lifecycle suite again with the operator installed in-cluster (E2E_OPERATOR=in-cluster)"
E2E_OPERATOR=in-cluster cargo test -p e2e --test lifecycle --locked -- "${E2E_ARGS[@]}" 2>&1 \
  | tee "$out/e2e-in-cluster.log" || status=1
count "$out/e2e-in-cluster.log"

log "an S3 backup and restore with the operator installed in-cluster (its shipped RBAC covers backups)"
if [ -z "${E2E_FILTER:-}" ]; then
  E2E_OPERATOR=in-cluster cargo test -p e2e --test backup_restore --locked -- --test-threads=1 s3_backup 2>&1 \
    | tee "$out/e2e-in-cluster-backup.log" || status=1
  count "$out/e2e-in-cluster-backup.log"
fi

if [ "$LOCAL_CLUSTER" = 1 ] && [ "$was_up" = 0 ] && [ -z "${KEEP_CLUSTER:-}" ]; then
  log "taking the local cluster down and checking that nothing is left"
  bash hack/cluster.sh down
  if bash hack/test-cluster-down.sh; then passed=$((passed + 1)); else failed=$((failed + 1)); status=1; fi
fi

echo
echo "$passed passed, $failed failed"
exit $status

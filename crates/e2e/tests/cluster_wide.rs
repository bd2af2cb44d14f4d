//! `-cluster-wide` and the `etcd.database.coreos.com/scope` annotation, with the operator installed
//! in-cluster from `etcd-operator manifests` (CoreOS semantics, `controller::WatchScope::manages`):
//! - a cluster-wide operator manages EtcdClusters annotated `scope: clusterwide` in every namespace
//!   and nothing else;
//! - a namespaced operator manages the EtcdClusters of its namespace that carry no `scope`
//!   annotation, whatever its value.
//!
//! Proving that an object is left alone needs a point in time after which the operator would have
//! acted on it: each test creates the object to be ignored first and a managed one after it, in the
//! same watch. The operator reconciles in the order its watch delivers, and a reconcile of a new
//! object writes its status within milliseconds, so once the later one is healthy (seconds) the
//! earlier one would carry a status, Services and Events if the operator managed it.
//!
//! A cluster-wide operator sees every namespace: while this file runs, no other cluster-wide
//! operator may run on the cluster (each would also take the other's annotated objects).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use e2e::TestNamespace;

const CREATE: Duration = Duration::from_secs(120);
const SCOPE: &str = "etcd.database.coreos.com/scope";

fn annotated_manifest(ns: &str, name: &str, scope: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\n  annotations:\n    {SCOPE}: \"{scope}\"\nspec:\n  size: 1\n  version: \"3.5.1\"\n"
    )
}

/// `reportingInstance` of every Event about the EtcdCluster `name`: the operator pods that acted.
fn reporters(ns: &TestNamespace, name: &str) -> Result<BTreeSet<String>> {
    let evs = ns.json(&["get", "events.v1.events.k8s.io"])?;
    Ok(evs["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["regarding"]["name"] == name && e["regarding"]["kind"] == "EtcdCluster")
        .map(|e| e["reportingInstance"].as_str().unwrap_or("").to_string())
        .collect())
}

/// No operator touched the EtcdCluster: no status, no pods, no Services, no Events.
fn untouched(ns: &TestNamespace, name: &str) -> Result<()> {
    let c = cluster(ns, name)?;
    let st = &c["status"];
    ensure!(st.is_null() || st.as_object().is_some_and(|o| o.is_empty()), "{name} was given a status: {st}");
    let owned = ns.run(&["get", "pods,services,pvc", "-l", &format!("etcd_cluster={name}"), "-o", "name"])?;
    ensure!(owned.trim().is_empty(), "objects were created for {name}: {owned}");
    let evs = events_for(ns, name)?;
    ensure!(evs.is_empty(), "Events about {name}: {evs:?}");
    Ok(())
}

/// Runs `body`; on failure the error carries the operators' logs.
fn with_logs(ops: &[&InClusterOperator], body: impl FnOnce() -> Result<()>) -> Result<()> {
    body().map_err(|e| {
        let logs: Vec<String> = ops
            .iter()
            .map(|op| {
                let l = op.logs();
                let tail: Vec<&str> = l.lines().rev().take(40).collect();
                format!("operator in {} (newest first):\n{}", op.namespace, tail.join("\n"))
            })
            .collect();
        e.context(logs.join("\n---\n"))
    })
}

#[test]
fn cluster_wide_operator_manages_only_annotated_clusters_in_other_namespaces() -> Result<()> {
    let home = TestNamespace::create("e2e-cw-op")?;
    let apps = TestNamespace::create("e2e-cw-apps")?;
    let op = InClusterOperator::install(&home, &Install { cluster_wide: true, ..Install::default() })?;
    with_logs(&[&op], || {
        let me = op.leader()?;
        apps.apply(&cluster_manifest(&apps.name, "plain", 1, "3.5.1", ""))?;
        apps.apply(&annotated_manifest(&apps.name, "shared", "clusterwide"))?;
        let c = wait_healthy(&apps, "shared", 1, CREATE)?;
        ensure!(c["status"]["phase"] == "Running", "{}", c["status"]);
        let by = reporters(&apps, "shared")?;
        ensure!(by == BTreeSet::from([me.clone()]), "Events about shared reported by {by:?}, expected {me}");
        untouched(&apps, "plain")?;

        // The annotation is the switch: set on the ignored one, the operator takes it too.
        apps.run(&["annotate", "etcdcluster", "plain", &format!("{SCOPE}=clusterwide")])?;
        wait_healthy(&apps, "plain", 1, CREATE)?;
        let by = reporters(&apps, "plain")?;
        ensure!(by == BTreeSet::from([me.clone()]), "Events about plain reported by {by:?}, expected {me}");
        Ok(())
    })
}

#[test]
fn namespaced_operator_leaves_scope_annotated_clusters_alone() -> Result<()> {
    let ns = TestNamespace::create("e2e-cw-ns")?;
    let op = InClusterOperator::install(&ns, &Install::default())?;
    with_logs(&[&op], || {
        let me = op.leader()?;
        ns.apply(&annotated_manifest(&ns.name, "shared", "clusterwide"))?;
        // CoreOS: any value of the annotation takes the object away from namespaced operators.
        ns.apply(&annotated_manifest(&ns.name, "typo", "cluster-wide"))?;
        ns.apply(&cluster_manifest(&ns.name, "plain", 1, "3.5.1", ""))?;
        wait_healthy(&ns, "plain", 1, CREATE)?;
        let by = reporters(&ns, "plain")?;
        ensure!(by == BTreeSet::from([me.clone()]), "Events about plain reported by {by:?}, expected {me}");
        untouched(&ns, "shared")?;
        untouched(&ns, "typo")?;

        // Removing the annotation hands the object to the namespaced operator.
        ns.run(&["annotate", "etcdcluster", "shared", &format!("{SCOPE}-")])?;
        wait_healthy(&ns, "shared", 1, CREATE)?;
        untouched(&ns, "typo")?;
        Ok(())
    })
}

/// Two cluster-wide installs in two namespaces manage the same objects: they share one Lease
/// (kube-system/etcd-operator-cluster-wide), so exactly one acts; the other stays a standby
/// (alive, not Ready) and says which install leads.
#[test]
fn two_cluster_wide_installs_never_act_at_once() -> Result<()> {
    let home_a = TestNamespace::create("e2e-cw-a")?;
    let home_b = TestNamespace::create("e2e-cw-b")?;
    let apps = TestNamespace::create("e2e-cw-two")?;
    let a = InClusterOperator::install(&home_a, &Install { cluster_wide: true, ..Install::default() })?;
    let b = InClusterOperator::install(&home_b, &Install { cluster_wide: true, standby: true, ..Install::default() })?;
    with_logs(&[&a, &b], || {
        let leader = a.leader()?;
        apps.apply(&annotated_manifest(&apps.name, "shared", "clusterwide"))?;
        wait_healthy(&apps, "shared", 1, CREATE)?;
        let by = reporters(&apps, "shared")?;
        ensure!(
            by == BTreeSet::from([leader.clone()]),
            "Events about shared reported by {by:?}, expected only {leader}"
        );
        let logs = b.logs();
        ensure!(
            logs.contains("another replica leads") && logs.contains(&format!("{}/{leader}", home_a.name)),
            "the standby does not say who leads:\n{logs}"
        );
        ensure!(b.pods()?.iter().all(|p| !e2e::condition_true(p, "Ready")), "the standby install reports Ready");
        Ok(())
    })
}

//! What the operator does when a node is lost (issue 28; `spec.recovery.nodeLoss`, docs:
//! operations.md "Node loss and partitions"), on a local cluster of three nodes
//! (`NODES=3 hack/cluster.sh up`; the fault tools are `hack/cluster.sh node`). Node faults hit
//! every pod on the node, so hack/test.sh runs this file alone, after the parallel suite. On a
//! cluster of fewer than three nodes each test prints why and passes without doing anything.
//!
//! - an emptyDir member on a lost node is replaced on a live node once its node has not been
//!   Ready for `afterSeconds`, and writes go on;
//! - a PVC member on a lost node waits for it (`Degraded=NodeNotReady` names the claim) and comes
//!   back with it as the same member;
//! - a PVC member whose Node object was deleted (its new pod unschedulable) is replaced with
//!   `volumeMembers: Replace`, its claim kept;
//! - two of three nodes lost and their pods force-deleted: the survivor is never recovered from
//!   on the pods' disappearance alone (they may still run, as on the far side of a partition);
//!   only once the nodes are declared out of service;
//! - a partition that isolates one member's node: writes go on, nobody is removed for a short
//!   partition, and the member catches up once it heals.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::backups::e2e_events;
use common::*;
use e2e::nodes::Nodes;
use e2e::{Kubectl, TestNamespace, wait_until};
use serde_json::Value;

const CREATE: Duration = Duration::from_secs(240);
const VERSION: &str = "3.6.15";
/// The node controller's grace before a silent node turns NotReady, plus margin.
const NOT_READY: Duration = Duration::from_secs(150);

/// (pod, node) of every member pod.
fn placement(ns: &TestNamespace, name: &str) -> Result<Vec<(String, String)>> {
    Ok(member_pods(ns, name)?
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                p["spec"]["nodeName"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

/// A member that does not lead, and its node.
fn follower(ns: &TestNamespace, name: &str) -> Result<(String, String)> {
    let leader = cluster(ns, name)?["status"]["leader"].as_str().unwrap_or_default().to_string();
    placement(ns, name)?.into_iter().find(|(p, _)| *p != leader).context("no member but the leader")
}

fn wait_not_ready(node: &str) -> Result<()> {
    let kubectl = Kubectl::from_env()?;
    wait_until(NOT_READY, &format!("node {node} NotReady"), || {
        Ok(Nodes::list(&kubectl)?.into_iter().find(|n| n.name == node).filter(|n| !n.ready).map(drop))
    })
}

/// The cluster once 3 members are ready again and `gone` is not one of them.
fn wait_replaced(ns: &TestNamespace, name: &str, gone: &str, within: Duration) -> Result<Value> {
    wait_until(within, "a replacement on a live node", || {
        let c = cluster(ns, name)?;
        let ready: Vec<&str> =
            c["status"]["members"]["ready"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        Ok((ready.len() == 3 && !ready.contains(&gone)).then_some(c))
    })
}

fn ids(ep: &str) -> Result<Vec<String>> {
    let mut v: Vec<String> = member_list(ep)?.into_iter().filter_map(|m| m.first().cloned()).collect();
    v.sort();
    Ok(v)
}

#[test]
fn an_emptydir_member_on_a_lost_node_is_replaced_on_a_live_node_after_the_grace() -> Result<()> {
    let Some(nodes) = Nodes::detect(&Kubectl::from_env()?, 3)? else { return Ok(()) };
    with_operator("e2e-node-lost", |ns, _op| {
        let spec = "  recovery:\n    nodeLoss: {afterSeconds: 10}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, spec))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", 20)?;
        let (victim_pod, victim) = follower(ns, "ex")?;
        let _undo = nodes.guard();
        let t0 = Instant::now();
        nodes.lose(&victim)?;
        wait_not_ready(&victim)?;
        println!("{victim} NotReady after {:?}", t0.elapsed());
        // Replaced: a new member on a live node, three healthy voters again, the lost one gone
        // from the membership.
        let c = wait_replaced(ns, "ex", &victim_pod, Duration::from_secs(240))?;
        println!("replaced after {:?}: {}", t0.elapsed(), c["status"]["members"]);
        let evs = e2e_events(ns, "EtcdCluster", "ex")?;
        ensure!(
            evs.iter()
                .any(|(r, m)| r == "MemberRemoved" && m.contains(&victim_pod) && m.contains(&format!("node {victim}"))),
            "no MemberRemoved naming {victim_pod} and its node: {evs:?}"
        );
        for (p, n) in placement(ns, "ex")? {
            ensure!(p == victim_pod || n != victim, "member {p} placed on the lost node {n}");
        }
        check_keys(&ep, "before", 20)?;
        write_keys(&ep, "after", 20)?;
        // The node comes back: its old pod goes (its member is gone), nothing else changes.
        nodes.restore(&victim, false)?;
        wait_until(Duration::from_secs(120), &format!("the old pod {victim_pod} gone"), || {
            Ok(placement(ns, "ex")?.iter().all(|(p, _)| *p != victim_pod).then_some(()))
        })?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(60))?;
        check_keys(&ep, "after", 20)?;
        Ok(())
    })
}

#[test]
fn a_pvc_member_on_a_lost_node_waits_for_it_and_comes_back_as_the_same_member() -> Result<()> {
    let Some(nodes) = Nodes::detect(&Kubectl::from_env()?, 3)? else { return Ok(()) };
    with_operator("e2e-node-pvc", |ns, _op| {
        let spec = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n  recovery:\n    nodeLoss: {afterSeconds: 0}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, spec))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", 20)?;
        let members = ids(&ep)?;
        let (victim_pod, victim) = follower(ns, "ex")?;
        let _undo = nodes.guard();
        nodes.lose(&victim)?;
        wait_not_ready(&victim)?;
        // Waits, saying why and naming the claim; the membership is unchanged.
        let c = wait_until(Duration::from_secs(90), "Degraded=NodeNotReady", || {
            let c = cluster(ns, "ex")?;
            Ok((cond_str(&c, "Degraded", "reason") == "NodeNotReady").then_some(c))
        })?;
        let msg = cond_str(&c, "Degraded", "message");
        ensure!(msg.contains(&victim_pod) && msg.contains(&victim) && msg.contains("waiting for the node"), "{msg}");
        std::thread::sleep(Duration::from_secs(20));
        ensure!(ids(&ep)? == members, "the membership changed while waiting for the node");
        write_keys(&ep, "during", 20)?;
        // Back with its disk: the same member, every key.
        nodes.restore(&victim, false)?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(300))?;
        ensure!(ids(&ep)? == members, "not the same members after the node came back");
        let evs = e2e_events(ns, "EtcdCluster", "ex")?;
        ensure!(!evs.iter().any(|(r, _)| r == "MemberRemoved"), "{evs:?}");
        check_keys(&ep, "before", 20)?;
        check_keys(&ep, "during", 20)?;
        Ok(())
    })
}

/// A PVC member's machine dies and its Node object is deleted (what a cloud's node controller
/// does for a machine that is gone): the pod GC deletes the member's pod, the operator makes it
/// again, and the new pod cannot be scheduled (its volume is bound to the deleted node). With
/// `volumeMembers: Replace` the claim is retired after `volumeAfterSeconds` of that wait and
/// the member replaced on a live node; the claim is kept. The Node is deleted before the node
/// controller could call it NotReady, so only the deleted-Node rule can act.
#[test]
fn a_pvc_member_whose_node_object_was_deleted_is_replaced_and_its_claim_kept() -> Result<()> {
    let kubectl = Kubectl::from_env()?;
    let Some(nodes) = Nodes::detect(&kubectl, 3)? else { return Ok(()) };
    with_operator("e2e-node-deleted", |ns, _op| {
        let spec = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n  recovery:\n    nodeLoss: {volumeMembers: Replace, volumeAfterSeconds: 20}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, spec))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", 20)?;
        let (victim_pod, victim) = follower(ns, "ex")?;
        let claim = format!("{victim_pod}-data");
        ns.run(&["get", "pvc", &claim])?;
        let _undo = nodes.guard();
        let t0 = Instant::now();
        nodes.lose(&victim)?;
        kubectl.run(&["delete", "node", &victim, "--wait=true", "--timeout=60s"])?;
        println!("{victim} lost and its Node deleted after {:?}", t0.elapsed());
        let c = wait_replaced(ns, "ex", &victim_pod, Duration::from_secs(300))?;
        println!("replaced after {:?}: {}", t0.elapsed(), c["status"]["members"]);
        let evs = e2e_events(ns, "EtcdCluster", "ex")?;
        ensure!(
            evs.iter().any(|(r, m)| r == "VolumeRetired" && m.contains(&claim) && m.contains("deleted")),
            "no VolumeRetired naming {claim} and the deleted node: {evs:?}"
        );
        ensure!(evs.iter().any(|(r, m)| r == "MemberRemoved" && m.contains(&victim_pod)), "{evs:?}");
        let kept: Value = ns.json(&["get", "pvc", &claim])?;
        ensure!(
            kept["metadata"]["annotations"]["etcd.database.coreos.com/retired"].as_str().is_some_and(|w| !w.is_empty()),
            "the claim is kept and marked retired: {}",
            kept["metadata"]
        );
        for (p, n) in placement(ns, "ex")? {
            ensure!(n != victim, "member {p} placed on the deleted node {n}");
        }
        check_keys(&ep, "before", 20)?;
        write_keys(&ep, "after", 20)?;
        // The machine comes back and registers again: the retired claim stays unused.
        nodes.restore(&victim, false)?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(120))?;
        ensure!(
            !member_pods(ns, "ex")?.iter().any(|p| p["metadata"]["name"] == victim_pod.as_str()),
            "the retired member came back"
        );
        check_keys(&ep, "after", 20)?;
        Ok(())
    })
}

#[test]
fn force_deleted_pods_of_lost_nodes_are_not_recovered_from_until_the_nodes_are_declared_out_of_service() -> Result<()> {
    let Some(nodes) = Nodes::detect(&Kubectl::from_env()?, 3)? else { return Ok(()) };
    let kubectl = Kubectl::from_env()?;
    with_operator("e2e-node-split", |ns, _op| {
        let spec = "  recovery:\n    quorumLoss: FromSurvivor\n    afterSeconds: 0\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, spec))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", 20)?;
        let placed = placement(ns, "ex")?;
        let leader = cluster(ns, "ex")?["status"]["leader"].as_str().unwrap_or_default().to_string();
        // Two nodes go, not the leader's: the survivor is a minority of one.
        let lost: Vec<(String, String)> = placed.iter().filter(|(p, _)| *p != leader).cloned().collect();
        ensure!(lost.len() == 2, "{placed:?}");
        let _undo = nodes.guard();
        let untaint = Untaint(lost.iter().map(|(_, n)| n.clone()).collect());
        for (_, n) in &lost {
            nodes.lose(n)?;
        }
        for (_, n) in &lost {
            wait_not_ready(n)?;
        }
        // What a person does to "free" the pods: force-delete them. On the far side of a
        // partition they would still run, and serve.
        for (p, _) in &lost {
            ns.run(&["delete", "pod", p, "--force", "--grace-period=0"])?;
        }
        let c = wait_until(Duration::from_secs(60), "Degraded=NoQuorum naming the nodes", || {
            let c = cluster(ns, "ex")?;
            Ok(cond_str(&c, "Degraded", "message").contains("may still run").then_some(c))
        })?;
        println!("{}", cond_str(&c, "Degraded", "message"));
        std::thread::sleep(Duration::from_secs(30));
        let evs = e2e_events(ns, "EtcdCluster", "ex")?;
        ensure!(!evs.iter().any(|(r, _)| r == "QuorumLossRecoveryStarted"), "recovered a minority: {evs:?}");
        // Declared out of service (Kubernetes' non-graceful node shutdown): now the recovery.
        for (_, n) in &lost {
            kubectl.run(&["taint", "node", n, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"])?;
        }
        wait_until(Duration::from_secs(180), "the recovery from the survivor", || {
            let evs = e2e_events(ns, "EtcdCluster", "ex")?;
            Ok(evs.iter().any(|(r, _)| r == "QuorumLossRecoveryStarted").then_some(()))
        })?;
        drop(untaint);
        for (_, n) in &lost {
            nodes.restore(n, true)?;
        }
        wait_healthy(ns, "ex", 3, Duration::from_secs(300))?;
        check_keys(&client_endpoint(ns, "ex")?, "before", 20)?;
        Ok(())
    })
}

/// Takes the out-of-service taint off the nodes again, also when the test failed.
struct Untaint(Vec<String>);

impl Drop for Untaint {
    fn drop(&mut self) {
        if let Ok(k) = Kubectl::from_env() {
            for n in &self.0 {
                let _ = k.run(&["taint", "node", n, "node.kubernetes.io/out-of-service-"]);
            }
        }
    }
}

/// The revision a member's own store is at (`endpoint status`, serializable: a member cut off
/// from its leader still answers it).
fn revision_of(member_ep: &str) -> Result<i64> {
    let out = host_etcdctl(member_ep, &["endpoint", "status", "-w", "json"])?;
    let v: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    v[0]["Status"]["header"]["revision"].as_i64().with_context(|| format!("no revision in {out}"))
}

/// A partition isolates the node of one member from the nodes of the others (the API server and
/// the operator still reach all three): writes through the client Service go on, the member is
/// not removed or replaced for a short partition, and once it heals the member catches up.
#[test]
fn a_partition_isolating_one_member_keeps_writes_going_and_the_member_catches_up() -> Result<()> {
    let Some(nodes) = Nodes::detect(&Kubectl::from_env()?, 3)? else { return Ok(()) };
    with_operator("e2e-node-partition", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", 20)?;
        let members = ids(&ep)?;
        let placed = placement(ns, "ex")?;
        let (victim_pod, victim) = follower(ns, "ex")?;
        let victim_ep = member_endpoints(ns, "ex")?
            .into_iter()
            .find(|(p, _)| *p == victim_pod)
            .map(|(_, e)| e)
            .context("the victim's endpoint")?;
        let _undo = nodes.guard();
        for (_, other) in placed.iter().filter(|(_, n)| *n != victim) {
            nodes.partition(&victim, other, false)?;
        }
        println!("{victim} (member {victim_pod}) cut off from the other members' nodes");
        let cut_at = revision_of(&victim_ep)?;

        // 45 s of writes through the client Service. A put that lands on the cut-off member
        // before its readiness probe (etcd's /health, which needs a leader) takes it out of the
        // Service times out: tried again, counted, never given up on.
        let t0 = Instant::now();
        let (mut i, mut retried) = (0, 0);
        while t0.elapsed() < Duration::from_secs(45) {
            let what = format!("with {victim} cut off");
            retried +=
                put_retrying(&ep, &format!("during/{i}"), &format!("value-{i}"), Duration::from_secs(30), &what)?;
            i += 1;
        }
        println!("{i} writes in {:?} with {victim} cut off, {retried} attempt(s) retried", t0.elapsed());
        ensure!(i >= 20, "only {i} writes went through in 45 s");
        // The cut-off member saw none of them.
        ensure!(revision_of(&victim_ep)? == cut_at, "the cut-off member applied writes: is it really cut off?");

        nodes.heal()?;
        let t1 = Instant::now();
        let target = revision_of(&ep)?;
        wait_until(Duration::from_secs(120), &format!("{victim_pod} caught up to revision {target}"), || {
            Ok((revision_of(&victim_ep)? >= target).then_some(()))
        })?;
        println!("{victim_pod} caught up {:?} after the partition healed", t1.elapsed());
        wait_healthy(ns, "ex", 3, Duration::from_secs(120))?;
        ensure!(ids(&ep)? == members, "the membership changed over a short partition");
        ensure!(
            placement(ns, "ex")?.iter().any(|(p, n)| *p == victim_pod && *n == victim),
            "{victim_pod} is no longer the pod on {victim}"
        );
        let evs = e2e_events(ns, "EtcdCluster", "ex")?;
        ensure!(
            !evs.iter().any(|(r, _)| matches!(r.as_str(), "MemberRemoved" | "MemberAdded" | "MemberReplaced")),
            "a membership change over a short partition: {evs:?}"
        );
        check_keys(&ep, "before", 20)?;
        check_keys(&ep, "during", i)?;
        Ok(())
    })
}

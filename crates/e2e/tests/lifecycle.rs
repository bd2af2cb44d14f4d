//! EtcdCluster lifecycle on the real local cluster, with the real operator binary: create,
//! resize with learners, heal, pause, invalid specs, delete. Every test writes keys first and
//! reads them all back after the change.
//!
//! Run with the cluster up (hack/test.sh does all of it, both ways). `E2E_OPERATOR=in-cluster`
//! runs the same tests with the operator installed in each test's namespace from its manifests,
//! under its own ServiceAccount and the shipped RBAC (see `e2e::harness::Operator`).

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::wait_until;

const CREATE: Duration = Duration::from_secs(120);
const CHANGE: Duration = Duration::from_secs(180);
const KEYS: usize = 50;

#[test]
fn create_resize_3_5_3_and_delete() -> Result<()> {
    with_operator("e2e-resize", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", ""))?;
        let c = wait_healthy(ns, "ex", 3, CREATE)?;
        let st = &c["status"];
        ensure!(st["phase"] == "Running", "phase {}", st["phase"]);
        ensure!(
            st["currentVersion"] == "3.5.1" && st["serviceName"] == "ex-client" && st["clientPort"] == 2379,
            "{st}"
        );
        ensure!(st["leader"].as_str().is_some_and(|l| l.starts_with("ex-")), "no leader in {st}");
        // `kubectl get pods -l app=etcd` shows the members.
        let listed = ns.run(&["get", "pods", "-l", "app=etcd", "-o", "name"])?;
        ensure!(listed.lines().count() == 3, "{listed}");
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "resize", KEYS)?;

        ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", r#"{"spec":{"size":5}}"#])?;
        wait_healthy(ns, "ex", 5, CHANGE)?;
        check_keys(&ep, "resize", KEYS)?;
        let evs = events_for(ns, "ex")?;
        let added = evs.iter().filter(|(r, n)| r == "MemberAdded" && n.contains("learner")).count();
        let promoted = evs.iter().filter(|(r, _)| r == "LearnerPromoted").count();
        ensure!(added == 2 && promoted == 2, "expected 2 learners added and promoted, events: {evs:?}");

        let marks = event_marks(ns, "ex")?;
        ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", r#"{"spec":{"size":3}}"#])?;
        // Watch etcd itself while it shrinks: a member that leads at one look and is gone from
        // the membership at the next was removed as the leader (the planner must pick another).
        let mut last_leader: Option<u64> = None;
        let mut removed_leader = None;
        let mut looks = 0;
        wait_until(CHANGE, "etcd to shrink to 3 members", || {
            let Ok((leader, members)) = leader_and_members(&ep) else { return Ok(None) };
            looks += 1;
            if let Some(l) = last_leader.filter(|l| !members.contains(l)) {
                removed_leader = Some(l);
            }
            last_leader = Some(leader);
            Ok((members.len() == 3).then_some(()))
        })?;
        ensure!(removed_leader.is_none(), "the leader {removed_leader:x?} was removed ({looks} looks)");
        wait_healthy(ns, "ex", 3, CHANGE)?;
        check_keys(&ep, "resize", KEYS)?;
        ensure!(member_list(&ep)?.len() == 3, "etcd member list: {:?}", member_list(&ep)?);
        let removed: Vec<_> = events_for(ns, "ex")?.into_iter().filter(|(r, _)| r == "MemberRemoved").collect();
        ensure!(removed.len() == 2, "{removed:?}");
        // Both leaving members were taken out of the client Service before the first left
        // (draining is no membership change); the removals came one at a time.
        let steps: Vec<(String, String)> = events_since(ns, "ex", &marks)?
            .into_iter()
            .filter(|e| ["MemberDrained", "MemberRemoved"].contains(&e.reason.as_str()))
            .map(|e| (e.reason, e.related))
            .collect();
        let reasons: Vec<&str> = steps.iter().map(|(r, _)| r.as_str()).collect();
        ensure!(reasons == ["MemberDrained", "MemberDrained", "MemberRemoved", "MemberRemoved"], "{steps:?}");

        ns.run(&["delete", "etcdcluster", "ex"])?;
        wait_until(Duration::from_secs(120), "owned objects to be garbage-collected", || {
            let pods = ns.run(&["get", "pods,services,pvc", "-l", "etcd_cluster=ex", "-o", "name"])?;
            Ok(pods.trim().is_empty().then_some(()))
        })?;
        Ok(())
    })
}

/// The leader's ID and every member's ID, as etcd reports them through `endpoint`.
fn leader_and_members(endpoint: &str) -> Result<(u64, Vec<u64>)> {
    let st: serde_json::Value =
        serde_json::from_str(&e2e::host_etcdctl(endpoint, &["endpoint", "status", "-w", "json"])?)?;
    let leader = st[0]["Status"]["leader"].as_u64().unwrap_or(0);
    let list: serde_json::Value =
        serde_json::from_str(&e2e::host_etcdctl(endpoint, &["member", "list", "-w", "json"])?)?;
    let members =
        list["members"].as_array().map(|a| a.iter().filter_map(|m| m["ID"].as_u64()).collect()).unwrap_or_default();
    anyhow::ensure!(leader != 0, "no leader");
    Ok((leader, members))
}

#[test]
fn paused_cluster_is_left_alone_then_healed_on_unpause() -> Result<()> {
    with_operator("e2e-pause", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "pause", KEYS)?;

        ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", r#"{"spec":{"paused":true}}"#])?;
        wait_until(Duration::from_secs(30), "status.controlPaused", || {
            Ok((cluster(ns, "ex")?["status"]["controlPaused"] == true).then_some(()))
        })?;
        let before = pod_names(&member_pods(ns, "ex")?);
        let victim = before[1].clone();
        ns.run(&["delete", "pod", &victim, "--wait=true"])?;
        // The operator saw the loss (status reports the member unready) ...
        wait_until(Duration::from_secs(60), "status to report the lost member", || {
            let unready = cluster(ns, "ex")?["status"]["members"]["unready"].clone();
            Ok(unready.as_array().is_some_and(|a| a.iter().any(|m| m == victim.as_str())).then_some(()))
        })?;
        // ... and, paused, changed nothing: two pods, three etcd members.
        let after = pod_names(&member_pods(ns, "ex")?);
        ensure!(after.len() == 2 && !after.contains(&victim), "pods while paused: {after:?}");
        ensure!(member_list(&ep)?.len() == 3, "membership changed while paused");
        check_keys(&ep, "pause", KEYS)?;

        ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", r#"{"spec":{"paused":false}}"#])?;
        wait_healthy(ns, "ex", 3, CHANGE)?;
        let healed = pod_names(&member_pods(ns, "ex")?);
        ensure!(!healed.contains(&victim), "{healed:?}");
        let members = member_list(&ep)?;
        ensure!(members.len() == 3 && !members.iter().any(|m| m.get(2) == Some(&victim)), "{members:?}");
        check_keys(&ep, "pause", KEYS)?;
        Ok(())
    })
}

#[test]
fn deleted_member_is_replaced_and_data_kept() -> Result<()> {
    with_operator("e2e-heal", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "heal", KEYS)?;
        let victim = pod_names(&member_pods(ns, "ex")?)[0].clone();
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        wait_until(CHANGE, "a replacement member", || {
            let c = cluster(ns, "ex")?;
            let ready: Vec<String> = c["status"]["members"]["ready"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            Ok((ready.len() == 3 && !ready.contains(&victim)).then_some(()))
        })?;
        wait_healthy(ns, "ex", 3, CHANGE)?;
        check_keys(&ep, "heal", KEYS)?;
        let evs = events_for(ns, "ex")?;
        ensure!(evs.iter().any(|(r, n)| r == "MemberRemoved" && n.contains(&victim)), "{evs:?}");
        Ok(())
    })
}

#[test]
fn a_pvc_member_restarts_on_its_volume_as_the_same_member() -> Result<()> {
    with_operator("e2e-pvc", |ns, _op| {
        let pvc = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", pvc))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "pvc", KEYS)?;
        let claims = ns.run(&["get", "pvc", "-l", "etcd_cluster=ex", "-o", "jsonpath={.items[*].status.phase}"])?;
        ensure!(claims.split_whitespace().filter(|p| *p == "Bound").count() == 3, "PVCs: {claims}");
        let members_before = member_list(&ep)?;
        let victim = pod_names(&member_pods(ns, "ex")?)[2].clone();
        let uid = ns.json(&["get", "pod", &victim])?["metadata"]["uid"].clone();
        ns.run(&["delete", "pod", &victim, "--wait=true"])?;
        // The same pod name comes back (a new pod object) on the same claim ...
        wait_until(CHANGE, "the member pod to be re-created", || {
            let p = ns.json(&["get", "pod", &victim]).ok();
            Ok(p.filter(|p| p["metadata"]["uid"] != uid).map(drop))
        })?;
        wait_healthy(ns, "ex", 3, CHANGE)?;
        // ... as the same etcd member: the member list is unchanged and no member was removed.
        let mut a: Vec<String> = members_before.iter().map(|m| m[0].clone()).collect();
        let mut b: Vec<String> = member_list(&ep)?.iter().map(|m| m[0].clone()).collect();
        a.sort();
        b.sort();
        ensure!(a == b, "member IDs changed: {a:?} -> {b:?}");
        let evs = events_for(ns, "ex")?;
        ensure!(!evs.iter().any(|(r, _)| r == "MemberRemoved"), "{evs:?}");
        ensure!(evs.iter().any(|(r, n)| r == "MemberPodCreated" && n.contains(&victim)), "{evs:?}");
        check_keys(&ep, "pvc", KEYS)?;
        Ok(())
    })
}

#[test]
fn invalid_specs_change_nothing_and_say_why() -> Result<()> {
    with_operator("e2e-invalid", |ns, _op| {
        // The seeds' CoreOS default version is refused with the supported range.
        ns.apply(&cluster_manifest(&ns.name, "old", 3, "3.2.13", ""))?;
        let c = wait_until(Duration::from_secs(30), "SpecValid=False", || {
            let c = cluster(ns, "old")?;
            Ok(condition(&c, "SpecValid").is_some_and(|x| x["status"] == "False").then_some(c))
        })?;
        let msg = condition(&c, "SpecValid").unwrap()["message"].as_str().unwrap_or("").to_string();
        ensure!(msg.contains("3.2.13") && msg.contains("3.4.x to 3.7.x"), "{msg}");
        ensure!(
            events_for(ns, "old")?.iter().any(|(r, n)| r == "InvalidSpec" && n.contains("3.2.13")),
            "no InvalidSpec Event"
        );
        ensure!(member_pods(ns, "old")?.is_empty(), "pods were created for an invalid spec");

        // A running cluster edited to an invalid size keeps running untouched.
        ns.apply(&cluster_manifest(&ns.name, "ok", 1, "3.5.1", ""))?;
        wait_healthy(ns, "ok", 1, CREATE)?;
        let ep = client_endpoint(ns, "ok")?;
        write_keys(&ep, "invalid", 10)?;
        let pods = pod_names(&member_pods(ns, "ok")?);
        ns.run(&["patch", "etcdcluster", "ok", "--type=merge", "-p", r#"{"spec":{"size":0}}"#])?;
        wait_until(Duration::from_secs(30), "SpecValid=False on the size edit", || {
            let c = cluster(ns, "ok")?;
            Ok(condition(&c, "SpecValid")
                .is_some_and(|x| x["status"] == "False" && x["message"].as_str().unwrap_or("").contains("spec.size 0"))
                .then_some(()))
        })?;
        ensure!(pod_names(&member_pods(ns, "ok")?) == pods, "pods changed after an invalid edit");
        check_keys(&ep, "invalid", 10)?;
        ns.run(&["patch", "etcdcluster", "ok", "--type=merge", "-p", r#"{"spec":{"size":1}}"#])?;
        wait_until(Duration::from_secs(30), "SpecValid=True again", || {
            Ok(condition(&cluster(ns, "ok")?, "SpecValid").is_some_and(|x| x["status"] == "True").then_some(()))
        })?;

        // Names that cannot make DNS labels: refused at apply time by the CRD's CEL rule where
        // the apiserver has CEL (1.25+), by the operator elsewhere.
        let long = "a".repeat(57);
        let manifest = cluster_manifest(&ns.name, &long, 1, "3.5.1", "");
        if ns.kubectl.has_crd_validation_rules()? {
            let err = ns.apply(&manifest).err().context("the apiserver accepted a 57-character name")?;
            ensure!(format!("{err:#}").contains("at most 56 characters"), "{err:#}");
        } else {
            ns.apply(&manifest)?;
            wait_until(Duration::from_secs(30), "SpecValid=False for a long name", || {
                let c = cluster(ns, &long)?;
                Ok(condition(&c, "SpecValid")
                    .is_some_and(|x| x["message"].as_str().unwrap_or("").contains("57 characters"))
                    .then_some(()))
            })?;
        }
        Ok(())
    })
}

#[test]
fn a_member_that_cannot_pull_its_image_is_surfaced() -> Result<()> {
    with_operator("e2e-pull", |ns, _op| {
        // No registry answers here: the pull fails, as a typo'd repository would.
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.5.1", "  repository: registry.invalid/etcd\n"))?;
        wait_until(Duration::from_secs(90), "Degraded=MemberFailing", || {
            let c = cluster(ns, "ex")?;
            Ok(condition(&c, "Degraded")
                .filter(|x| x["reason"] == "MemberFailing" && x["message"].as_str().unwrap_or("").contains("ex-"))
                .map(|x| x["message"].as_str().unwrap_or("").to_string()))
        })
        .map(|msg| eprintln!("surfaced: {msg}"))?;
        Ok(())
    })
}

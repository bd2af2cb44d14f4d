//! A member's volume rolled back to an older copy of itself, as a restored volume snapshot
//! would leave it: the same marker (member and cluster), older data. Restarted on it the member
//! would have forgotten entries it acknowledged. The operator records the raft index each member
//! acknowledged (the `member-progress` annotation) and the member's data check compares it with
//! how far the volume's write-ahead log reaches: a restart on the volume as it is passes (real
//! etcd 3.5 data read by `data_index`), the rolled-back copy is refused, kept (retired) and its
//! member replaced, every key still there. The copy and the roll-back are made on the node's
//! hostPath directory of the claim (the tests run on the node), with the operator paused and the
//! member's pod gone.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::{TestNamespace, wait_until};
use serde_json::Value;

const PVC_SPEC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";

/// The host directory of a bound claim's hostPath or local volume.
fn volume_dir(ns: &TestNamespace, claim: &str) -> Result<PathBuf> {
    let pvc = ns.json(&["get", "pvc", claim])?;
    let pv = pvc["spec"]["volumeName"].as_str().context("claim not bound")?;
    let v = ns.kubectl.json(&["get", "pv", pv])?;
    let path = v["spec"]["hostPath"]["path"].as_str().or(v["spec"]["local"]["path"].as_str()).context("path")?;
    Ok(path.into())
}

fn sh(cmd: &str) -> Result<()> {
    let out = std::process::Command::new("sh").args(["-ec", cmd]).output()?;
    ensure!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// The index the operator recorded `member` acknowledging (0: none yet).
fn acknowledged(ns: &TestNamespace, member: &str) -> Result<u64> {
    let c = cluster(ns, "ex")?;
    let mark = c["metadata"]["annotations"]["etcd.database.coreos.com/member-progress"].as_str().unwrap_or("{}");
    let v: Value = serde_json::from_str(mark)?;
    Ok(v[member]["acknowledged"].as_u64().unwrap_or(0))
}

fn paused(ns: &TestNamespace, on: bool) -> Result<()> {
    patch_spec(ns, "ex", &format!(r#"{{"paused":{on}}}"#))?;
    wait_until(Duration::from_secs(30), "status.controlPaused", || {
        Ok((cluster(ns, "ex")?["status"]["controlPaused"] == on).then_some(()))
    })
}

/// With the operator paused: the member's pod deleted and gone, then `f` on its volume.
fn with_member_stopped(ns: &TestNamespace, member: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    paused(ns, true)?;
    ns.run(&["delete", "pod", member, "--wait=true", "--timeout=90s"])?;
    f()?;
    paused(ns, false)
}

fn check_data_args(ns: &TestNamespace, pod: &str) -> Result<Vec<String>> {
    let p = ns.pod(pod)?;
    let init = p["spec"]["initContainers"].as_array().cloned().unwrap_or_default();
    let check = init.iter().find(|c| c["name"] == "check-data").context("no check-data")?;
    Ok(check["command"].as_array().into_iter().flatten().filter_map(|a| a.as_str().map(String::from)).collect())
}

#[test]
fn a_member_on_a_rolled_back_volume_is_refused_and_its_volume_kept() -> Result<()> {
    with_operator("e2e-rollback", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", PVC_SPEC))?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(180))?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "old", 20)?;
        let victim = pod_names(&member_pods(ns, "ex")?)[1].clone();
        let claim = format!("{victim}-data");
        let dir = volume_dir(ns, &claim)?;
        let copy = std::env::temp_dir().join(format!("{}-{victim}", ns.name));
        // An older copy of the member's volume, taken while its pod was stopped.
        with_member_stopped(ns, &victim, || sh(&format!("cp -a {}/. {}/", dir.display(), mkdir(&copy)?.display())))?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(180))?;
        write_keys(&ep, "new", 200)?;
        let status: Value = serde_json::from_str(&e2e::host_etcdctl(&ep, &["endpoint", "status", "-w", "json"])?)?;
        let index = status[0]["Status"]["raftIndex"].as_u64().context("raftIndex")?;
        // Once the operator has recorded the member acknowledging the new keys (a reading
        // confirmed a minute later), a restart on the volume as it is passes that check.
        wait_until(Duration::from_secs(240), &format!("{victim} acknowledged index {index}"), || {
            Ok((acknowledged(ns, &victim)? >= index).then_some(()))
        })?;
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        wait_until(Duration::from_secs(120), "the member restarted with the check", || {
            Ok(check_data_args(ns, &victim).ok().filter(|a| a.iter().any(|a| a.starts_with("--acknowledged-index="))))
        })?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(180))?;
        ensure!(pod_names(&member_pods(ns, "ex")?).contains(&victim), "{victim} restarted on its own volume");
        // Rolled back to the copy: refused, kept, replaced; no key lost.
        with_member_stopped(ns, &victim, || {
            sh(&format!("find {d} -mindepth 1 -delete && cp -a {}/. {d}/", copy.display(), d = dir.display()))
        })?;
        let why = wait_until(Duration::from_secs(180), "the rolled-back volume to be retired", || {
            Ok(events_for(ns, "ex")?.into_iter().find(|(r, n)| r == "VolumeRetired" && n.contains(&claim)).map(|e| e.1))
        })?;
        ensure!(why.contains("rolled back"), "{why}");
        wait_healthy(ns, "ex", 3, Duration::from_secs(240))?;
        ensure!(!pod_names(&member_pods(ns, "ex")?).contains(&victim), "a new member replaced {victim}");
        let kept = ns.json(&["get", "pvc", &claim])?;
        ensure!(
            kept["metadata"]["annotations"]["etcd.database.coreos.com/retired"].is_string(),
            "{}",
            kept["metadata"]
        );
        check_keys(&ep, "old", 20)?;
        check_keys(&ep, "new", 200)?;
        let _ = std::fs::remove_dir_all(&copy);
        Ok(())
    })
}

fn mkdir(p: &Path) -> Result<&Path> {
    std::fs::create_dir_all(p)?;
    Ok(p)
}

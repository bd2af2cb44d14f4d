//! Healing on the real local cluster, with the real operator and real etcd: a drain during a
//! scale-down never takes a quorum (the PodDisruptionBudget counts the members there are, not
//! the spec's size), a crash-looping member is replaced when its data is in an emptyDir and
//! kept (until the user deletes its volume) on a PVC, a member that crashed once is left alone,
//! and a spec fixed by the user makes again the pods a broken one left crash-looping (a PVC
//! member, a bootstrap); an edit today's rules refuse, of a cluster with no valid spec on
//! record, is never rolled out. Data is broken on the node itself (`e2e::break_member_data`).
//! Every test writes keys first and reads them all back.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::{TestNamespace, wait_until};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const CREATE: Duration = Duration::from_secs(180);
const KEYS: usize = 50;
const PVC_SPEC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
/// An etcd setting etcd refuses at start ("invalid value"): it exits at once, every time.
const BROKEN_ENV: &str = r#"[{"name":"ETCD_SNAPSHOT_COUNT","value":"not-a-number"}]"#;

fn leader_pod(ns: &TestNamespace, name: &str) -> Result<String> {
    for (pod, ep) in member_endpoints(ns, name)? {
        let out = host_etcdctl(&ep, &["endpoint", "status", "-w", "json"])?;
        let v: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
        let st = &v[0]["Status"];
        if st["leader"].as_u64().is_some_and(|l| Some(l) == st["header"]["member_id"].as_u64()) {
            return Ok(pod);
        }
    }
    anyhow::bail!("no member of {name} says it leads")
}

fn followers(ns: &TestNamespace, name: &str) -> Result<Vec<String>> {
    let leader = leader_pod(ns, name)?;
    Ok(pod_names(&member_pods(ns, name)?).into_iter().filter(|p| *p != leader).collect())
}

/// Events of `reason` that name `pod` (in their note or as the related object).
fn events_about(ns: &TestNamespace, name: &str, reason: &str, pod: &str) -> Result<Vec<EventRecord>> {
    Ok(events_v1(ns, name)?
        .into_iter()
        .filter(|e| e.reason == reason && (e.related == pod || e.note.contains(pod)))
        .collect())
}

/// The pod is there and not being deleted: an eviction of a pod being deleted succeeds without
/// asking the budget (the API server's eviction answers a terminating pod at once).
fn pod_stays(ns: &TestNamespace, pod: &str) -> Result<bool> {
    match ns.pod(pod) {
        Ok(p) => Ok(p["metadata"]["deletionTimestamp"].is_null()),
        Err(e) if format!("{e:#}").contains("NotFound") => Ok(false),
        Err(e) => Err(e),
    }
}

/// The etcd container of `pod` waits in CrashLoopBackOff.
fn crash_looping(ns: &TestNamespace, pod: &str) -> Result<bool> {
    let p = ns.pod(pod)?;
    Ok(p["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["name"] == "etcd" && s["state"]["waiting"]["reason"] == "CrashLoopBackOff"))
}

fn uids(ns: &TestNamespace, name: &str) -> Result<Vec<(String, String)>> {
    Ok(member_pods(ns, name)?
        .iter()
        .map(|p| {
            (p["metadata"]["name"].as_str().unwrap_or("").into(), p["metadata"]["uid"].as_str().unwrap_or("").into())
        })
        .collect())
}

// ---- a drain during a scale-down ----------------------------------------------------------------

/// 5 PVC members scaled down to 3 while a node drain (three member pods) runs as `kubectl
/// drain` does: each eviction retried until the budget allows it. An evicted member restarts on
/// its volume and is down meanwhile. `size − 1` (2) let three go at once, a quorum of 5; the
/// budget counts the five members there are (4), so an eviction is allowed only once the
/// member evicted before it is back (or has left): never two down at once, never a quorum. The
/// cluster ends at 3 members with every key.
#[test]
fn a_drain_during_a_scale_down_from_five_to_three_never_evicts_a_quorum() -> Result<()> {
    with_operator("e2e-heal-drain", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 5, VERSION, PVC_SPEC))?;
        wait_healthy(ns, "ex", 5, Duration::from_secs(300))?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        wait_until(Duration::from_secs(30), "the budget of 5 members", || {
            let pdb = ns.json(&["get", "poddisruptionbudget", "ex"]).ok();
            Ok(pdb.filter(|p| p["spec"]["minAvailable"] == 4 && p["status"]["currentHealthy"] == 5))
        })?;
        let drained: Vec<String> = pod_names(&member_pods(ns, "ex")?).into_iter().take(3).collect();
        patch_spec(ns, "ex", r#"{"size":3}"#)?;
        // The operator planned from the new size (its Scaling condition, written after the
        // budget) and the disruption controller has seen the budget as it is now.
        let pdb = wait_until(Duration::from_secs(60), "the scale-down to start", || {
            let scaling = condition(&cluster(ns, "ex")?, "Scaling").is_some_and(|s| s["reason"] == "ScalingDown");
            let pdb = ns.json(&["get", "poddisruptionbudget", "ex"])?;
            let seen = pdb["status"]["observedGeneration"] == pdb["metadata"]["generation"];
            Ok((scaling && seen).then_some(pdb))
        })?;
        eprintln!("budget during the scale-down: {} / {}", pdb["spec"], pdb["status"]);
        for (i, pod) in drained.iter().enumerate() {
            // A drain counts a pod that is gone as done: the scale-down may remove a member
            // (and delete its pod) before its turn comes, or between two tries. A pod being
            // deleted counts as gone: its eviction would succeed without the budget's say.
            let left = wait_until(Duration::from_secs(300), &format!("the eviction of {pod}"), || {
                if !pod_stays(ns, pod)? {
                    return Ok(Some(true));
                }
                match evict(ns, pod) {
                    Ok(evicted) => Ok(evicted.then_some(false)),
                    Err(_) if !pod_stays(ns, pod)? => Ok(Some(true)),
                    Err(e) => Err(e),
                }
            })?;
            if left {
                eprintln!("{pod} left with the scale-down before it was evicted");
                continue;
            }
            // Allowed only once the member evicted before is back on its volume, or has left.
            if let Some(before) = i.checked_sub(1).map(|j| &drained[j]) {
                let back = ns
                    .pod(before)
                    .is_ok_and(|p| p["metadata"]["deletionTimestamp"].is_null() && condition_true(&p, "Ready"));
                ensure!(
                    back || !events_about(ns, "ex", "MemberRemoved", before)?.is_empty(),
                    "{pod} was evicted while {before}, evicted before it, was still down"
                );
            }
        }
        // (No check of NoQuorum Events: members report no leader for a moment after the leader
        // leaves, which the operator's health view counts as down; the budget is what a drain
        // meets, checked above at every eviction.)
        wait_healthy(ns, "ex", 3, Duration::from_secs(400))?;
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

// ---- crash-looping members ----------------------------------------------------------------------

/// 3 emptyDir members. One follower's etcd is killed once: it restarts on its data and stays a
/// member. The other's data is broken: it crash-loops, and once past the bound (3 restarts, 2
/// minutes not ready) it is removed and a new member joins, one change at a time; every key
/// is kept.
#[test]
fn a_crash_looping_emptydir_member_is_replaced_and_one_that_crashed_once_is_not() -> Result<()> {
    with_operator("e2e-heal-crash", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let f = followers(ns, "ex")?;
        let (once, broken) = (f[0].clone(), f[1].clone());
        let marks = event_marks(ns, "ex")?;

        signal_container(&ns.pod(&once)?, "etcd", "SIGKILL")?;
        wait_until(Duration::from_secs(120), "the member killed once to run again", || {
            let p = ns.pod(&once)?;
            let restarted = p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0) >= 1;
            Ok((restarted && condition_true(&p, "Ready")).then_some(()))
        })?;

        break_member_data(ns, &broken)?;
        let removed = wait_until(Duration::from_secs(480), "the crash-looping member to be removed", || {
            Ok(events_about(ns, "ex", "MemberRemoved", &broken)?.into_iter().next())
        })?;
        ensure!(removed.note.contains("crash-looping"), "{}", removed.note);
        wait_healthy(ns, "ex", 3, Duration::from_secs(300))?;
        let pods = pod_names(&member_pods(ns, "ex")?);
        ensure!(!pods.contains(&broken) && pods.contains(&once), "{pods:?}");
        ensure!(events_about(ns, "ex", "MemberRemoved", &once)?.is_empty(), "the member that crashed once was removed");
        check_keys(&ep, "keep", KEYS)?;
        // One membership change at a time: the removal, then the new member added and promoted.
        let steps: Vec<String> = events_since(ns, "ex", &marks)?
            .into_iter()
            .filter(|e| ["MemberAdded", "LearnerPromoted", "MemberRemoved"].contains(&e.reason.as_str()))
            .map(|e| e.reason)
            .collect();
        ensure!(steps == ["MemberRemoved", "MemberAdded", "LearnerPromoted"], "steps: {steps:?}");
        Ok(())
    })
}

/// 3 PVC members, one with broken data on its volume: it crash-loops and is reported with the
/// volume it keeps and what the user can do, and past the bound it is still a member with its
/// volume (a member that does not answer cannot be shown to be behind). The user deletes the
/// PVC: then it is replaced, and every key is kept.
#[test]
fn a_crash_looping_pvc_member_keeps_its_volume_until_the_user_deletes_it() -> Result<()> {
    with_operator("e2e-heal-pvc", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, PVC_SPEC))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let broken = followers(ns, "ex")?[0].clone();
        let claim = format!("{broken}-data");
        let claim_uid = ns.json(&["get", "pvc", &claim])?["metadata"]["uid"].clone();
        break_member_data(ns, &broken)?;
        let broke = std::time::Instant::now();

        // Past the bound: 3 restarts, not ready for 2 minutes (it stopped being ready when its
        // etcd was killed on the broken data).
        wait_until(Duration::from_secs(360), "the member to crash-loop past the bound", || {
            let p = ns.pod(&broken)?;
            let restarts = p["status"]["containerStatuses"][0]["restartCount"].as_i64().unwrap_or(0);
            let long = broke.elapsed() >= Duration::from_secs(140) && !condition_true(&p, "Ready");
            Ok((restarts >= 3 && long && crash_looping(ns, &broken)?).then_some(()))
        })?;
        // A reconcile planned from what came after: a spec change the pods do not depend on.
        patch_spec(ns, "ex", r#"{"recovery":{"quorumLoss":"Wait"}}"#)?;
        let c = wait_until(Duration::from_secs(60), "the operator to plan again", || {
            let c = cluster(ns, "ex")?;
            Ok((c["status"]["observedGeneration"] == c["metadata"]["generation"]).then_some(c))
        })?;
        let degraded = condition(&c, "Degraded").cloned().unwrap_or_default();
        ensure!(degraded["reason"] == "MemberFailing", "{degraded}");
        let msg = degraded["message"].as_str().unwrap_or("");
        ensure!(msg.contains(&broken) && msg.contains(&format!("{claim} is kept")), "{msg}");
        ensure!(events_about(ns, "ex", "MemberRemoved", &broken)?.is_empty(), "removed without the user's word");
        ensure!(ns.json(&["get", "pvc", &claim])?["metadata"]["uid"] == claim_uid, "its volume was replaced");

        ns.run(&["delete", "pvc", &claim, "--wait=false"])?;
        let removed = wait_until(Duration::from_secs(120), "the member to be replaced", || {
            Ok(events_about(ns, "ex", "MemberRemoved", &broken)?.into_iter().next())
        })?;
        ensure!(removed.note.contains("volume is being deleted"), "{}", removed.note);
        wait_healthy(ns, "ex", 3, Duration::from_secs(300))?;
        ensure!(!pod_names(&member_pods(ns, "ex")?).contains(&broken));
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

// ---- a fixed spec makes again what a broken one made ----------------------------------------------

/// 3 PVC members; an etcd setting etcd refuses is rolled out: the first member restarted with it
/// crash-loops and the rollout stops there. The user removes the setting: that member is made
/// again from the fixed spec on its volume (the same member), the others are left as they are.
#[test]
fn a_fixed_spec_remakes_the_pvc_member_a_broken_one_left_crash_looping() -> Result<()> {
    with_operator("e2e-heal-fix", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, PVC_SPEC))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let ids_before = member_list(&ep)?;
        let before = uids(ns, "ex")?;
        patch_spec(ns, "ex", &format!(r#"{{"pod":{{"etcdEnv":{BROKEN_ENV}}}}}"#))?;
        let failing =
            wait_until(Duration::from_secs(240), "a member restarted with the setting to crash-loop", || {
                for p in pod_names(&member_pods(ns, "ex")?) {
                    if crash_looping(ns, &p)? {
                        return Ok(Some(p));
                    }
                }
                Ok(None)
            })?;
        let now = uids(ns, "ex")?;
        let remade = before.iter().filter(|b| !now.contains(b)).count();
        ensure!(remade == 1, "{remade} members restarted with the broken setting");
        let marks = event_marks(ns, "ex")?;
        patch_spec(ns, "ex", r#"{"pod":{"etcdEnv":null}}"#)?;
        let deleted = wait_until(Duration::from_secs(120), "the failing member's pod to be made again", || {
            Ok(events_since(ns, "ex", &marks)?
                .into_iter()
                .find(|e| e.reason == "PodDeleted" && e.note.contains(&failing)))
        })?;
        ensure!(deleted.note.contains("earlier spec"), "{}", deleted.note);
        wait_healthy(ns, "ex", 3, Duration::from_secs(180))?;
        check_keys(&ep, "keep", KEYS)?;
        let ids = |l: &[Vec<String>]| {
            let mut v: Vec<String> = l.iter().map(|m| m[0].clone()).collect();
            v.sort();
            v
        };
        ensure!(ids(&ids_before) == ids(&member_list(&ep)?), "the same etcd members");
        let after = uids(ns, "ex")?;
        let untouched = before.iter().filter(|b| after.contains(b)).count();
        ensure!(untouched == 2, "the members the broken spec never reached were restarted: {before:?} → {after:?}");
        Ok(())
    })
}

/// A new cluster asked for an etcd setting etcd refuses: its bootstrap pods crash-loop. The user
/// removes the setting: the bootstrap starts over with the fixed spec and the cluster forms.
#[test]
fn a_bootstrap_that_crash_loops_starts_over_once_the_spec_is_fixed() -> Result<()> {
    with_operator("e2e-heal-boot", |ns, _op| {
        let broken = format!("  pod:\n    etcdEnv: {BROKEN_ENV}\n");
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, &broken))?;
        wait_until(Duration::from_secs(180), "a bootstrap pod to crash-loop", || {
            for p in pod_names(&member_pods(ns, "ex")?) {
                if crash_looping(ns, &p)? {
                    return Ok(Some(()));
                }
            }
            Ok(None)
        })?;
        patch_spec(ns, "ex", r#"{"pod":{"etcdEnv":null}}"#)?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(300))?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

// ---- a refused edit with no valid spec on record ---------------------------------------------------

/// A running cluster loses its last-valid-spec mark in the same write that asks for
/// `ETCD_FORCE_NEW_CLUSTER` (and a resources change): today's rules refuse it (`SpecValid`, an
/// Event), nothing is rolled out, and healing goes on: a member whose pod is deleted is
/// replaced by one made without the refused setting, the others keep their pods.
#[test]
fn a_refused_edit_with_no_valid_spec_on_record_is_never_rolled_out() -> Result<()> {
    with_operator("e2e-heal-legacy", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let before = uids(ns, "ex")?;
        let victim = followers(ns, "ex")?[0].clone();
        let marks = event_marks(ns, "ex")?;
        let edit = r#"{"metadata":{"annotations":{"etcd.database.coreos.com/last-valid-spec":null}},"spec":{"pod":{"resources":{"requests":{"cpu":"20m"}},"etcdEnv":[{"name":"ETCD_FORCE_NEW_CLUSTER","value":"true"}]}}}"#;
        ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", edit])?;
        wait_until(Duration::from_secs(60), "the edit to be refused", || {
            let c = cluster(ns, "ex")?;
            let refused = condition(&c, "SpecValid").is_some_and(|s| {
                s["status"] == "False" && s["message"].as_str().unwrap_or("").contains("ETCD_FORCE_NEW_CLUSTER")
            });
            Ok((refused && c["status"]["observedGeneration"] == c["metadata"]["generation"]).then_some(()))
        })?;
        let said = events_since(ns, "ex", &marks)?;
        ensure!(
            said.iter().any(|e| e.reason == "InvalidSpec"
                && e.type_ == "Warning"
                && e.note.contains("ETCD_FORCE_NEW_CLUSTER")),
            "no Warning Event names the refused setting: {:?}",
            said.iter().map(|e| (&e.reason, &e.note)).collect::<Vec<_>>()
        );
        // Healing goes on under the spec without what is refused.
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        wait_until(Duration::from_secs(120), "the lost member to be removed", || {
            Ok(events_about(ns, "ex", "MemberRemoved", &victim)?.into_iter().next())
        })?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(240))?;
        let after = member_pods(ns, "ex")?;
        let new: Vec<&Value> =
            after.iter().filter(|p| !before.iter().any(|(_, uid)| p["metadata"]["uid"] == uid.as_str())).collect();
        ensure!(new.len() == 1, "{} pods were made again: the refused edit was rolled out", new.len());
        let env = &new[0]["spec"]["containers"][0]["env"];
        ensure!(!env.to_string().contains("ETCD_FORCE_NEW_CLUSTER"), "the replacement was made with it: {env}");
        let c = cluster(ns, "ex")?;
        ensure!(
            c["metadata"]["annotations"]["etcd.database.coreos.com/last-valid-spec"].is_null(),
            "a refused spec was recorded as valid"
        );
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

//! Day-2 operations on the real local cluster with real etcd: a full database (NOSPACE) is
//! recovered, fragmented members are defragmented one at a time with the leader last, a drain
//! evicts at most one member at a time (the PodDisruptionBudget), and a changed `spec.pod` is
//! rolled to every member. Writers run through the changes; every acknowledged write is
//! checked afterwards.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use common::writer::*;
use common::*;
use e2e::{TestNamespace, host_etcdctl, wait_until};
use etcd_client::{Client, DeleteOptions};
use serde_json::Value;

const CREATE: Duration = Duration::from_secs(180);
const KEYS: usize = 50;
const MIB: i64 = 1 << 20;

fn rt() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A value bbolt cannot shrink: random bytes, hex-encoded.
fn blob(bytes: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..bytes / 2)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{:02x}", x as u8)
        })
        .collect()
}

/// `(dbSize, dbSizeInUse, is leader)` of the member behind `endpoint`.
fn db_status(endpoint: &str) -> Result<(i64, i64, bool)> {
    let out = host_etcdctl(endpoint, &["endpoint", "status", "-w", "json"])?;
    let v: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    let st = &v[0]["Status"];
    let leader = st["leader"].as_u64().is_some_and(|l| Some(l) == st["header"]["member_id"].as_u64());
    Ok((st["dbSize"].as_i64().unwrap_or(0), st["dbSizeInUse"].as_i64().unwrap_or(0), leader))
}

fn leader_pod(ns: &TestNamespace, name: &str) -> Result<String> {
    for (pod, ep) in member_endpoints(ns, name)? {
        if db_status(&ep).is_ok_and(|(_, _, l)| l) {
            return Ok(pod);
        }
    }
    bail!("no member of {name} says it leads")
}

/// Ready addresses behind the client Service (what clients can reach). The core Endpoints
/// object: served by every Kubernetes version of both legs.
fn client_service_ready(ns: &TestNamespace, name: &str) -> Result<usize> {
    let v = ns.json(&["get", "endpoints", &format!("{name}-client")])?;
    Ok(v["subsets"].as_array().into_iter().flatten().map(|s| s["addresses"].as_array().map_or(0, |a| a.len())).sum())
}

// ---- NOSPACE --------------------------------------------------------------------------------------

/// A 16 MiB quota is filled until etcd refuses writes with "database space exceeded". The
/// members stay ready (the client Service keeps serving reads and deletes), the operator
/// reports NoSpace and, once the test has deleted the filler keys as a user would, compacts,
/// defragments and disarms: writes succeed again within 120 s, and no key the test kept is lost.
#[test]
fn a_full_database_is_recovered_without_losing_a_key() -> Result<()> {
    full_database_is_recovered("e2e-nospace", "3.6.15")
}

/// The same on etcd 3.5.1, whose `/health?exclude=NOSPACE` answers 503 once every member raised
/// NOSPACE (etcd#13467, fixed in 3.5.2; found by hack/chaos.sh): its members probe readiness with
/// a read instead, and stay behind the client Service. The chaos clusters start past 3.5.2 now
/// (etcd#13766), so this test is where that probe meets a real NOSPACE.
#[test]
fn a_full_database_on_etcd_3_5_1_stays_behind_the_client_service() -> Result<()> {
    full_database_is_recovered("e2e-nospace351", "3.5.1")
}

fn full_database_is_recovered(prefix: &str, version: &str) -> Result<()> {
    with_operator(prefix, |ns, _op| {
        let extra = "  maintenance:\n    quotaBackendBytes: 16777216\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, version, extra))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let marks = event_marks(ns, "ex")?;

        // Fill: 64 KiB values until etcd says the space is exceeded.
        let rt = rt()?;
        let filled = rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            for i in 0..2000u64 {
                match c.put(format!("fill/{i:05}"), blob(64 << 10, i), None).await {
                    Ok(_) => {}
                    Err(e) if e.to_string().contains("database space exceeded") => return Ok::<_, anyhow::Error>(i),
                    Err(e) => return Err(e.into()),
                }
            }
            bail!("2000 puts of 64 KiB never filled a 16 MiB quota")
        })?;
        let t_full = Instant::now();
        eprintln!("quota hit after {filled} puts of 64 KiB");
        // Every member raises its own NOSPACE alarm (a write refused for space at a member
        // raises one for that member), as when clients write to every member: etcd 3.5.0/3.5.1
        // excluded NOSPACE from `/health` only while one member had raised it (etcd#13467).
        rt.block_on(async {
            for (pod, mep) in member_endpoints(ns, "ex")? {
                let mut c = Client::connect([mep.as_str()], None).await?;
                match c.put("fill/one-more", blob(64 << 10, 9999), None).await {
                    Err(e) if e.to_string().contains("database space exceeded") => {}
                    other => bail!("{pod}: a put over the quota answered {other:?}"),
                }
            }
            Ok::<_, anyhow::Error>(())
        })?;
        // The alarm goes through raft after the refusal: wait for it to be committed.
        wait_until(Duration::from_secs(20), "a NOSPACE alarm of every member", || {
            let members = rt.block_on(async {
                let mut c = Client::connect([ep.as_str()], None).await?;
                let alarms = c.alarm(etcd_client::AlarmAction::Get, etcd_client::AlarmType::None, None).await?;
                Ok::<_, anyhow::Error>(
                    alarms.alarms().iter().map(|a| a.member_id()).collect::<std::collections::BTreeSet<u64>>(),
                )
            })?;
            Ok((members.len() == 3).then_some(()))
        })?;

        // The operator says so, and the members stay behind the client Service.
        let c = wait_until(Duration::from_secs(60), "the NoSpace condition", || {
            let c = cluster(ns, "ex")?;
            Ok((cond_str(&c, "NoSpace", "status") == "True").then_some(c))
        })?;
        eprintln!("NoSpace: {}", cond_str(&c, "NoSpace", "message"));
        ensure!(cond_str(&c, "Available", "status") == "True", "an alarm is not a lost quorum: {}", c["status"]);
        // The operator's first recovery cannot disarm: the filler keys are all live.
        let not_yet = wait_until(Duration::from_secs(60), "a NoSpaceNotRecovered Warning", || {
            Ok(events_since(ns, "ex", &marks)?.into_iter().find(|e| e.reason == "NoSpaceNotRecovered"))
        })?;
        ensure!(not_yet.type_ == "Warning", "{not_yet:?}");
        // Readiness has had many probe periods (1 s) to fail since: the members must stay behind
        // the client Service, sampled for 10 s.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            ensure!(client_service_ready(ns, "ex")? == 3, "NOSPACE emptied the client Service");
            std::thread::sleep(Duration::from_millis(500));
        }
        check_keys(&ep, "keep", KEYS)?;

        // The user frees space: deletes are allowed under NOSPACE.
        rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            c.delete("fill/", Some(DeleteOptions::new().with_prefix())).await?;
            Ok::<_, anyhow::Error>(())
        })?;
        let t_freed = Instant::now();
        wait_until(Duration::from_secs(120), "writes to succeed again", || {
            Ok(host_etcdctl(&ep, &["put", "after/0", "value-0"]).ok())
        })?;
        eprintln!(
            "writable again {:.1}s after the keys were deleted ({:.1}s after the quota was hit)",
            t_freed.elapsed().as_secs_f64(),
            t_full.elapsed().as_secs_f64()
        );
        check_keys(&ep, "keep", KEYS)?;
        let evs = events_since(ns, "ex", &marks)?;
        let recovered = evs.iter().find(|e| e.reason == "NoSpaceRecovered").context("no NoSpaceRecovered Event")?;
        for what in ["compacted to revision", "defragmented", "disarmed"] {
            ensure!(recovered.note.contains(what), "the Event does not say {what:?}: {}", recovered.note);
        }
        wait_until(Duration::from_secs(30), "the NoSpace condition to go", || {
            Ok(condition(&cluster(ns, "ex")?, "NoSpace").is_none().then_some(()))
        })?;
        for (pod, mep) in member_endpoints(ns, "ex")? {
            let (size, _, _) = db_status(&mep)?;
            ensure!(size < 16 * MIB, "{pod}: database still {size} bytes after the recovery");
        }
        Ok(())
    })
}

// ---- defragmentation policy ------------------------------------------------------------------------

/// 24 MiB written and deleted, then compacted (as the Kubernetes apiserver does every 5 min):
/// each member is defragmented once, followers first, the leader last after handing over
/// leadership, each database shrinks, and a writer running throughout loses nothing.
#[test]
fn fragmented_members_are_defragmented_followers_first_without_failed_writes() -> Result<()> {
    with_operator("e2e-defrag", |ns, _op| {
        let extra = "  maintenance:\n    defragmentation: {minFreePercent: 50, minFreeBytes: 8388608}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", extra))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let rt = rt()?;
        rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            for i in 0..384u64 {
                c.put(format!("junk/{i:05}"), blob(64 << 10, i), None).await?;
            }
            c.delete("junk/", Some(DeleteOptions::new().with_prefix())).await?;
            let rev = c.get("keep/0", None).await?.header().map(|h| h.revision()).unwrap_or(0);
            c.compact(rev, Some(etcd_client::CompactionOptions::new().with_physical())).await?;
            Ok::<_, anyhow::Error>(())
        })?;
        let before: BTreeMap<String, i64> = member_endpoints(ns, "ex")?
            .into_iter()
            .map(|(pod, mep)| Ok((pod, db_status(&mep)?.0)))
            .collect::<Result<_>>()?;
        ensure!(before.values().all(|s| *s > 20 * MIB), "the junk did not grow every database: {before:?}");
        let leader = leader_pod(ns, "ex")?;
        let writer = Writer::through_service(&ep, "w")?;
        let t0 = Instant::now();
        // The watch: every member's size, and the leader throughout.
        let done = wait_until(Duration::from_secs(240), "every member to be defragmented", || {
            let evs: Vec<EventRecord> =
                events_v1(ns, "ex")?.into_iter().filter(|e| e.reason == "MemberDefragmented").collect();
            Ok((evs.len() >= 3).then_some(evs))
        })?;
        let took = t0.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let stats = writer.finish()?;
        eprintln!(
            "3 members defragmented in {:.1}s; writer: {} acknowledged, {} retried, {} re-sent during an election, {} failed",
            took.as_secs_f64(),
            stats.acked.len(),
            stats.retried,
            stats.leader_waits,
            stats.failed.len()
        );
        for e in &done {
            eprintln!("  {}: {}", e.related, e.note);
        }
        let order: Vec<&str> = done.iter().map(|e| e.related.as_str()).collect();
        ensure!(
            order.len() == 3 && order.iter().collect::<std::collections::BTreeSet<_>>().len() == 3,
            "each member once: {order:?}"
        );
        ensure!(order[2] == leader, "the leader {leader} was not last: {order:?}");
        let moved = events_v1(ns, "ex")?
            .into_iter()
            .find(|e| e.reason == "LeaderMoved" && e.note.contains("defragmentation"))
            .context("leadership was not handed away before the leader's defragmentation")?;
        ensure!(moved.last < done[2].last, "leadership moved after the leader's defragmentation");
        ensure!(stats.failed.is_empty(), "failed writes: {:?}", stats.errors);
        check_acked(std::slice::from_ref(&ep), "w", &stats)?;
        check_keys(&ep, "keep", KEYS)?;
        for (pod, mep) in member_endpoints(ns, "ex")? {
            let (size, _, _) = db_status(&mep)?;
            ensure!(size * 2 < before[&pod], "{pod}: {} → {size} bytes", before[&pod]);
        }
        // Once done, nothing more happens (cool-down, and nothing is fragmented any more).
        std::thread::sleep(Duration::from_secs(15));
        let again = events_v1(ns, "ex")?.into_iter().filter(|e| e.reason == "MemberDefragmented").count();
        ensure!(again == 3, "defragmented again: {again} Events");
        Ok(())
    })
}

// ---- disruption budget ------------------------------------------------------------------------------

/// Evicts `pod` through the Eviction API (policy/v1, or v1beta1 before Kubernetes 1.22).
/// `Ok(true)`: evicted; `Ok(false)`: refused by the disruption budget (429).
fn evict(ns: &TestNamespace, pod: &str) -> Result<bool> {
    let minor = e2e::Kubectl::from_env()?.server_minor()?;
    let version = if minor >= 22 { "policy/v1" } else { "policy/v1beta1" };
    let body = serde_json::json!({
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns.name},
    });
    let file = std::env::temp_dir().join(format!("evict-{}-{pod}.json", ns.name));
    std::fs::write(&file, body.to_string())?;
    let path = format!("/api/v1/namespaces/{}/pods/{pod}/eviction", ns.name);
    let r = ns.run(&["create", "--raw", &path, "-f", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(&file);
    match r {
        Ok(_) => Ok(true),
        Err(e) if format!("{e:#}").contains("disruption budget") || format!("{e:#}").contains("429") => Ok(false),
        Err(e) => Err(e),
    }
}

/// A drain of two members of a 3-member cluster: the first eviction is allowed, the second is
/// refused until the first member is replaced and healthy, then allowed.
#[test]
fn a_drain_evicts_one_member_at_a_time() -> Result<()> {
    with_operator("e2e-pdb", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let pdb = wait_until(Duration::from_secs(30), "the PodDisruptionBudget", || {
            Ok(ns.json(&["get", "poddisruptionbudget", "ex"]).ok().filter(|p| p["status"]["currentHealthy"] == 3))
        })?;
        ensure!(pdb["spec"]["minAvailable"] == 2, "{}", pdb["spec"]);
        let pods = pod_names(&member_pods(ns, "ex")?);
        ensure!(evict(ns, &pods[0])?, "the first eviction was refused");
        ensure!(!evict(ns, &pods[1])?, "a second member was evicted while the first was down");
        let t0 = Instant::now();
        wait_until(Duration::from_secs(180), "the second eviction to be allowed", || {
            if evict(ns, &pods[1])? {
                return Ok(Some(()));
            }
            // Refused meanwhile: the first member must not be back yet.
            Ok(None)
        })?;
        eprintln!("second eviction allowed {:.1}s after the first", t0.elapsed().as_secs_f64());
        // It was allowed only once a replacement of the first member was a healthy voter.
        let evs = events_v1(ns, "ex")?;
        ensure!(
            evs.iter().any(|e| e.reason == "LearnerPromoted"),
            "the second eviction came before the first member was replaced: {:?}",
            evs.iter().map(|e| &e.reason).collect::<Vec<_>>()
        );
        wait_healthy(ns, "ex", 3, CREATE)?;
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

// ---- rolling out spec.pod --------------------------------------------------------------------------

/// Changing `spec.pod.resources` of a running 3-member cluster replaces every member (emptyDir:
/// a new member joins before an old one leaves), one at a time, keeps the data, and a writer
/// through the client Service loses nothing.
#[test]
fn a_pod_spec_change_is_rolled_to_every_member_one_at_a_time() -> Result<()> {
    with_operator("e2e-rollout", |ns, _op| {
        let extra = "  pod:\n    resources: {requests: {cpu: 10m, memory: 32Mi}}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", extra))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let before = pod_names(&member_pods(ns, "ex")?);
        let marks = event_marks(ns, "ex")?;
        let writer = Writer::through_service(&ep, "w")?;
        let t0 = Instant::now();
        patch_spec(ns, "ex", r#"{"pod":{"resources":{"requests":{"cpu":"20m","memory":"48Mi"}}}}"#)?;
        let mut max_members = 0;
        let mut min_ready = usize::MAX;
        wait_until(Duration::from_secs(400), "every member to run with the new resources", || {
            let c = cluster(ns, "ex")?;
            max_members = max_members.max(c["status"]["size"].as_u64().unwrap_or(0));
            if c["status"]["phase"] == "Running" {
                min_ready = min_ready.min(c["status"]["readyMembers"].as_u64().unwrap_or(0) as usize);
            }
            let pods = member_pods(ns, "ex")?;
            let all_new = pods.len() == 3
                && pods.iter().all(|p| p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "20m")
                && pods.iter().all(|p| !before.contains(&p["metadata"]["name"].as_str().unwrap_or("").to_string()));
            Ok((all_new && c["status"]["readyMembers"] == 3).then_some(()))
        })?;
        let took = t0.elapsed();
        std::thread::sleep(Duration::from_secs(2));
        let stats = writer.finish()?;
        eprintln!(
            "rollout of 3 members in {:.1}s (at most {max_members} members, at least {min_ready} ready); writer: {} acknowledged, {} retried, {} re-sent during an election, {} failed",
            took.as_secs_f64(),
            stats.acked.len(),
            stats.retried,
            stats.leader_waits,
            stats.failed.len()
        );
        ensure!(max_members <= 4, "more than one replacement at a time: {max_members} members");
        ensure!(min_ready >= 3, "fewer than 3 ready voters during the rollout: {min_ready}");
        // One at a time: each removal of an old member follows a promotion of its replacement.
        let steps: Vec<String> = events_since(ns, "ex", &marks)?
            .into_iter()
            .filter(|e| ["MemberAdded", "LearnerPromoted", "MemberRemoved"].contains(&e.reason.as_str()))
            .map(|e| e.reason)
            .collect();
        let want: Vec<&str> = ["MemberAdded", "LearnerPromoted", "MemberRemoved"].repeat(3);
        ensure!(steps == want, "steps: {steps:?}");
        ensure!(stats.failed.is_empty(), "failed writes: {:?}", stats.errors);
        check_acked(std::slice::from_ref(&ep), "w", &stats)?;
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

/// A 3-member PVC cluster asked for bigger volumes on a StorageClass that cannot expand (the
/// local cluster's host-path provisioner): the refusal is a Warning Event naming the PVC and what
/// the StorageClass lacks, the PVCs stay as they are, and the changed pod spec is rolled: each
/// member restarts on its own volume (same name, new pod), one at a time, keys and writes kept.
#[test]
fn bigger_volumes_are_refused_clearly_and_pvc_members_roll_on_their_volumes() -> Result<()> {
    with_operator("e2e-grow", |ns, _op| {
        let pvc = |size: &str| {
            format!(
                "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {{requests: {{storage: {size}}}}}\n"
            )
        };
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", &pvc("64Mi")))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let uids_before: BTreeMap<String, String> = member_pods(ns, "ex")?
            .iter()
            .map(|p| {
                (
                    p["metadata"]["name"].as_str().unwrap_or("").into(),
                    p["metadata"]["uid"].as_str().unwrap_or("").into(),
                )
            })
            .collect();
        let marks = event_marks(ns, "ex")?;
        let writer = Writer::through_service(&ep, "w")?;
        patch_spec(
            ns,
            "ex",
            r#"{"pod":{"persistentVolumeClaimSpec":{"accessModes":["ReadWriteOnce"],"resources":{"requests":{"storage":"128Mi"}}}}}"#,
        )?;
        let refused = wait_until(Duration::from_secs(60), "a VolumeExpansionRefused Warning", || {
            Ok(events_since(ns, "ex", &marks)?.into_iter().find(|e| e.reason == "VolumeExpansionRefused"))
        })?;
        eprintln!("{}", refused.note);
        ensure!(refused.type_ == "Warning" && refused.note.contains("allowVolumeExpansion"), "{refused:?}");
        ensure!(
            uids_before.keys().any(|m| refused.note.contains(&format!("{m}-data"))),
            "names no PVC: {}",
            refused.note
        );
        // The members restart on their volumes with the new spec, one at a time.
        let t0 = Instant::now();
        wait_until(Duration::from_secs(400), "every member restarted on its volume", || {
            let pods = member_pods(ns, "ex")?;
            let renewed = pods
                .iter()
                .filter(|p| {
                    let name = p["metadata"]["name"].as_str().unwrap_or("");
                    uids_before.get(name).is_some_and(|u| p["metadata"]["uid"].as_str() != Some(u))
                })
                .count();
            let c = cluster(ns, "ex")?;
            Ok((renewed == 3 && pods.len() == 3 && c["status"]["readyMembers"] == 3).then_some(()))
        })?;
        let stats = writer.finish()?;
        eprintln!(
            "3 PVC members rolled in {:.1}s; writer: {} acknowledged, {} retried, {} failed",
            t0.elapsed().as_secs_f64(),
            stats.acked.len(),
            stats.retried,
            stats.failed.len()
        );
        let names: Vec<String> = pod_names(&member_pods(ns, "ex")?);
        ensure!(names.iter().all(|n| uids_before.contains_key(n)), "members were replaced, not restarted: {names:?}");
        let deletes: Vec<String> = events_since(ns, "ex", &marks)?
            .into_iter()
            .filter(|e| ["PodDeleted", "MemberRemoved", "MemberAdded"].contains(&e.reason.as_str()))
            .map(|e| format!("{} {}", e.reason, e.related))
            .collect();
        ensure!(
            deletes.len() == 3 && deletes.iter().all(|d| d.starts_with("PodDeleted")),
            "each member's pod deleted once, none removed or added: {deletes:?}"
        );
        for (_, size) in ns.json(&["get", "pvc", "-l", "etcd_cluster=ex"])?["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| (v["metadata"]["name"].clone(), v["spec"]["resources"]["requests"]["storage"].clone()))
        {
            ensure!(size == "64Mi", "a PVC changed although the API refused: {size}");
        }
        ensure!(stats.failed.is_empty(), "failed writes: {:?}", stats.errors);
        check_acked(std::slice::from_ref(&ep), "w", &stats)?;
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

// ---- CORRUPT ----------------------------------------------------------------------------------------

/// Raises or clears etcd's CORRUPT alarm for member `id` through the alarm API (what etcd's own
/// corruption check does when it finds a member whose data differs).
fn corrupt_alarm(endpoint: &str, id: u64, on: bool) -> Result<()> {
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
    rt()?.block_on(async {
        let mut c = Client::connect([endpoint], None).await?;
        let mut o = AlarmOptions::new();
        o.with_member(id);
        let action = if on { AlarmAction::Activate } else { AlarmAction::Deactivate };
        c.alarm(action, AlarmType::Corrupt, Some(o)).await?;
        Ok(())
    })
}

/// A CORRUPT alarm names the member in a `Corrupt` condition and freezes every change: a lost
/// member is not even replaced while it is raised. Once a person cleared it, healing resumes.
#[test]
fn a_corrupt_alarm_names_the_member_and_freezes_every_change() -> Result<()> {
    with_operator("e2e-corrupt", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "keep", KEYS)?;
        let members = member_endpoints(ns, "ex")?;
        let (suspect, suspect_ep) = members[0].clone();
        let out = host_etcdctl(&suspect_ep, &["endpoint", "status", "-w", "json"])?;
        let v: Value = serde_json::from_str(&out)?;
        let id = v[0]["Status"]["header"]["member_id"].as_u64().context("member id")?;
        corrupt_alarm(&suspect_ep, id, true)?;
        let c = wait_until(Duration::from_secs(60), "the Corrupt condition", || {
            let c = cluster(ns, "ex")?;
            Ok((cond_str(&c, "Corrupt", "status") == "True").then_some(c))
        })?;
        let msg = cond_str(&c, "Corrupt", "message");
        ensure!(msg.contains(&suspect), "the condition does not name {suspect}: {msg}");
        wait_until(Duration::from_secs(30), "Degraded=Corrupt", || {
            Ok((cond_str(&cluster(ns, "ex")?, "Degraded", "reason") == "Corrupt").then_some(()))
        })?;
        // Another member is lost: nothing is done about it while the alarm is raised.
        let (victim, _) = members[1].clone();
        let marks = event_marks(ns, "ex")?;
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        let until = Instant::now() + Duration::from_secs(20);
        while Instant::now() < until {
            let acted: Vec<String> = events_since(ns, "ex", &marks)?
                .into_iter()
                .filter(|e| {
                    ["MemberRemoved", "MemberAdded", "PodDeleted", "MemberPodCreated"].contains(&e.reason.as_str())
                })
                .map(|e| format!("{}: {}", e.reason, e.note))
                .collect();
            ensure!(acted.is_empty(), "the operator acted under a CORRUPT alarm: {acted:?}");
            std::thread::sleep(Duration::from_millis(500));
        }
        // A person cleared it: the lost member is replaced.
        corrupt_alarm(&suspect_ep, id, false)?;
        let c = wait_healthy(ns, "ex", 3, CREATE)?;
        ensure!(condition(&c, "Corrupt").is_none(), "Corrupt left after the alarm was cleared: {}", c["status"]);
        ensure!(!pod_names(&member_pods(ns, "ex")?).contains(&victim), "the lost member was not replaced");
        check_keys(&ep, "keep", KEYS)?;
        Ok(())
    })
}

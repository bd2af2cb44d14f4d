//! Day-2 operations on the real local cluster with real etcd: fragmented members are
//! defragmented one at a time with the leader last, a drain evicts at most one member at a time
//! (the PodDisruptionBudget), and a changed `spec.pod` is rolled to every member. Writers run
//! through the changes; every acknowledged write is checked afterwards. etcd's NOSPACE and
//! CORRUPT alarms: `day2_alarms.rs`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::day2::*;
use common::writer::*;
use common::*;
use e2e::wait_until;
use etcd_client::{Client, DeleteOptions};

/// The member leadership was moved away from, from a `LeaderMoved` Event's note ("leadership
/// moved from X to Y before ...").
fn moved_from(note: &str) -> Result<String> {
    let from = note.strip_prefix("leadership moved from ").and_then(|r| r.split_once(" to ")).map(|(f, _)| f);
    from.map(str::to_string).with_context(|| format!("not a LeaderMoved note: {note}"))
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
        let mut c = rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            for i in 0..384u64 {
                c.put(format!("junk/{i:05}"), blob(64 << 10, i), None).await?;
            }
            c.delete("junk/", Some(DeleteOptions::new().with_prefix())).await?;
            Ok::<_, anyhow::Error>(c)
        })?;
        // The sizes before the compaction, which makes the policy due: from then on a member
        // may be defragmented at any moment.
        let before: BTreeMap<String, i64> = member_endpoints(ns, "ex")?
            .into_iter()
            .map(|(pod, mep)| Ok((pod, db_status(&mep)?.0)))
            .collect::<Result<_>>()?;
        ensure!(before.values().all(|s| *s > 20 * MIB), "the junk did not grow every database: {before:?}");
        rt.block_on(async {
            let rev = c.get("keep/0", None).await?.header().map(|h| h.revision()).unwrap_or(0);
            c.compact(rev, Some(etcd_client::CompactionOptions::new().with_physical())).await?;
            Ok::<_, anyhow::Error>(())
        })?;
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
        // The leader, as etcd had it when the operator handed leadership away (etcd refuses a
        // move asked of a follower): a leader read here or earlier may since have changed by an
        // election of etcd's own.
        let moved = events_v1(ns, "ex")?
            .into_iter()
            .rev()
            .find(|e| e.reason == "LeaderMoved" && e.note.contains("defragmentation") && e.last < done[2].last)
            .context("leadership was not handed away before the leader's defragmentation")?;
        let leader = moved_from(&moved.note)?;
        ensure!(order[2] == leader, "the leader {leader} was not last: {order:?} ({})", moved.note);
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

/// A drain of two members of a 3-member cluster: the first eviction is allowed, the second is
/// refused until the first member is replaced and healthy, then allowed (`evict`: the
/// harness's Eviction API call). A drain during a scale-down: `tests/healing.rs`.
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
            // Reported only: one observation that meets an election or a slow member counts
            // fewer; the Events below prove that a replacement was a voter before a removal.
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

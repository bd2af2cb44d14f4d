//! Rolling upgrades on the real local cluster, with the real operator binary and real etcd
//! images: a two-step upgrade under continuous writes, refused version changes, and upgrades
//! that fail on the first member and are healed by setting the version back. Every test writes
//! keys first and reads them all back after the change.
//!
//! Needs the images of `hack/images.sh` (etcd v3.4.23, v3.5.0, v3.5.1) and, for the crash test,
//! `hack/images.sh broken` (`quay.io/coreos/etcd:v3.5.99-broken`, i.e. `spec.version:
//! 3.5.99-broken`), which the test loads itself when it runs against the local cluster.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use common::writer::*;
use common::*;
use e2e::{TestNamespace, host_etcdctl, wait_until};
use serde_json::Value;

const CREATE: Duration = Duration::from_secs(180);
/// One upgrade step of three members: each restarts on its new image and must report the new
/// version before the next one goes (the operator's own per-member deadline is 120 s).
const UPGRADE: Duration = Duration::from_secs(360);
/// How long "nothing else happens" is watched: three of the operator's 5 s re-checks and more.
const HOLD: Duration = Duration::from_secs(20);
const KEYS: usize = 50;
const REPOSITORY: &str = "quay.io/coreos/etcd";

// ---- cluster observations ------------------------------------------------------------------------

fn endpoints_of(ns: &TestNamespace, name: &str) -> Result<Vec<String>> {
    Ok(member_endpoints(ns, name)?.into_iter().map(|(_, ep)| ep).collect())
}

/// The pod of the current raft leader, from etcd itself (each member's `endpoint status`).
fn etcd_leader(ns: &TestNamespace, name: &str) -> Result<String> {
    for (pod, ep) in member_endpoints(ns, name)? {
        let Ok(out) = host_etcdctl(&ep, &["endpoint", "status", "-w", "json"]) else { continue };
        let v: Value = serde_json::from_str(&out)?;
        let st = &v[0]["Status"];
        if st["leader"].as_u64().is_some_and(|l| l != 0 && Some(l) == st["header"]["member_id"].as_u64()) {
            return Ok(pod);
        }
    }
    bail!("no member of {name} says it is the leader")
}

/// Every member answers `endpoint status` with `version`.
fn all_report(ns: &TestNamespace, name: &str, version: &str) -> Result<bool> {
    for (_, ep) in member_endpoints(ns, name)? {
        match server_version(&ep) {
            Ok(v) if v == version => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// status says the whole cluster runs `version`: current == it, no target, `size` ready
/// members, no Upgrading condition left True and nothing Degraded.
fn settled_at(c: &Value, version: &str, size: usize) -> bool {
    let st = &c["status"];
    st["currentVersion"] == version
        && st["targetVersion"] == ""
        && st["members"]["ready"].as_array().is_some_and(|a| a.len() == size)
        && cond_str(c, "Upgrading", "status") != "True"
        && cond_str(c, "Degraded", "status") != "True"
}

/// Waits for the upgrade to `version` to finish: status settled and every member reporting it.
/// Fails at once when the operator declares the upgrade failed or refused.
fn wait_upgraded(ns: &TestNamespace, name: &str, version: &str, size: usize, timeout: Duration) -> Result<Value> {
    wait_until(timeout, &format!("{name} to run {version} on all {size} members"), || {
        let c = cluster(ns, name)?;
        if cond_str(&c, "Upgrading", "status") == "False" && cond_str(&c, "Upgrading", "reason") != "UpgradeDeferred" {
            bail!("upgrade stopped: {} {}", cond_str(&c, "Upgrading", "reason"), cond_str(&c, "Upgrading", "message"));
        }
        Ok((settled_at(&c, version, size) && all_report(ns, name, version)?).then_some(c))
    })
}

/// Polls for `hold` and fails as soon as the member pods differ from `before`.
fn hold_unchanged(ns: &TestNamespace, name: &str, before: &[PodVersion], hold: Duration, what: &str) -> Result<()> {
    let until = Instant::now() + hold;
    while Instant::now() < until {
        let now = pod_versions(ns, name)?;
        let changed: Vec<_> =
            now.iter().filter(|p| before.iter().find(|b| b.pod == p.pod).is_none_or(|b| b != *p)).collect();
        ensure!(
            changed.is_empty() && now.len() == before.len(),
            "{what}: pods changed: {changed:?} (before {before:?})"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    Ok(())
}

// ---- scenario 1: a two-step rolling upgrade under writes ---------------------------------------------

/// One upgrade step of a 3-member cluster while the writer runs; returns its duration.
fn upgrade_step(ns: &TestNamespace, name: &str, from: &str, to: &str, writer: &Writer) -> Result<Duration> {
    let before_pods = pod_versions(ns, name)?;
    ensure!(before_pods.iter().all(|p| p.annotation == from), "not all pods at {from}: {before_pods:?}");
    let leader = etcd_leader(ns, name)?;
    let marks = event_marks(ns, name)?;
    let w0 = writer.stats();

    let t0 = Instant::now();
    patch_spec(ns, name, &format!(r#"{{"version":"{to}"}}"#))?;
    let c = wait_upgraded(ns, name, to, 3, UPGRADE)?;
    let took = t0.elapsed();
    let w1 = writer.stats();
    eprintln!(
        "upgrade {from} -> {to}: {:.1}s; writer during the step: {} acknowledged, {} retried on another endpoint, {} re-sent during a leader election, {} failed",
        took.as_secs_f64(),
        w1.acked.len() - w0.acked.len(),
        w1.retried - w0.retried,
        w1.leader_waits - w0.leader_waits,
        w1.failed.len() - w0.failed.len()
    );

    // In place: the same pods (same UIDs, so the same data volumes) with the new image.
    let after = pod_versions(ns, name)?;
    ensure!(after.len() == 3, "{after:?}");
    for p in &after {
        let b = before_pods.iter().find(|b| b.pod == p.pod).with_context(|| format!("new pod {p:?}"))?;
        ensure!(p.uid == b.uid, "pod {} was replaced, not upgraded in place", p.pod);
        ensure!(p.image == format!("{REPOSITORY}:v{to}") && p.annotation == to, "{p:?}");
    }
    let st = &c["status"];
    ensure!(st["currentVersion"] == to && st["targetVersion"] == "", "{st}");
    ensure!(condition(&c, "Upgrading").is_none_or(|u| u["status"] != "True"), "Upgrading left: {st}");

    // The order, from the operator's Events: the two followers, then leadership moved away from
    // the leader, then the leader. Each Event names its member (related) and says what changed.
    let evs = events_since(ns, name, &marks)?;
    let steps: Vec<&EventRecord> =
        evs.iter().filter(|e| e.reason == "MemberUpgraded" || e.reason == "LeaderMoved").collect();
    let summary: Vec<String> = steps.iter().map(|e| format!("{} {} ({})", e.reason, e.related, e.note)).collect();
    eprintln!("upgrade {from} -> {to}: {summary:#?}");
    let reasons: Vec<&str> = steps.iter().map(|e| e.reason.as_str()).collect();
    ensure!(
        reasons == ["MemberUpgraded", "MemberUpgraded", "LeaderMoved", "MemberUpgraded"],
        "expected two followers, a leader move, then the leader; got {summary:#?}"
    );
    let upgraded: BTreeSet<&str> =
        steps.iter().filter(|e| e.reason == "MemberUpgraded").map(|e| e.related.as_str()).collect();
    ensure!(upgraded == after.iter().map(|p| p.pod.as_str()).collect(), "each member exactly once: {summary:#?}");
    ensure!(steps[3].related == leader && steps[2].related == leader, "the leader {leader} was not last: {summary:#?}");
    ensure!(!steps[..2].iter().any(|e| e.related == leader), "the leader went before a follower: {summary:#?}");
    for e in steps.iter().filter(|e| e.reason == "MemberUpgraded") {
        ensure!(
            e.note.contains(&e.related) && e.note.contains(&format!("{from} → {to}")),
            "MemberUpgraded Event does not say which member went from {from} to {to}: {e:?}"
        );
    }
    ensure!(steps[2].note.contains(&leader), "{:?}", steps[2]);
    Ok(took)
}

/// A 3-member cluster created at `start` is upgraded through `steps` (each `(from, to)`) while a
/// writer writes through every member: every step in place, followers first, the leader last,
/// no failed write, every acknowledged write readable afterwards.
fn rolling_upgrade_under_writes(prefix: &str, start: &str, extra: &str, steps: &[(&str, &str)]) -> Result<()> {
    with_operator(prefix, |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, start, extra))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", KEYS)?;
        let endpoints = endpoints_of(ns, "ex")?;
        ensure!(all_report(ns, "ex", start)?, "members do not all report {start}");

        let prefix = "writer";
        let writer = Writer::start(endpoints.clone(), prefix)?;
        // The writer is really writing before anything changes.
        wait_until(Duration::from_secs(30), "the writer's first acknowledged puts", || {
            let s = writer.stats();
            if !s.failed.is_empty() {
                bail!("writes fail before the upgrade: {:?}", s.errors);
            }
            Ok((s.acked.len() >= 3 * endpoints.len()).then_some(()))
        })?;

        let mut timings = vec![];
        for &(from, to) in steps {
            timings.push((format!("{from} -> {to}"), upgrade_step(ns, "ex", from, to, &writer)?));
            // The same endpoints throughout: members are upgraded in place.
            ensure!(endpoints_of(ns, "ex")? == endpoints, "member endpoints changed");
        }

        if start.starts_with("3.5.") && steps.iter().any(|(_, to)| to.starts_with("3.7.")) {
            let deferred = events_v1(ns, "ex")?.into_iter().find(|e| e.reason == "UpgradeDeferred");
            let deferred = deferred.context("3.6 -> 3.7 after 3.5 went ahead without waiting for a snapshot")?;
            eprintln!("deferred: {}", deferred.note);
        }
        let stats = writer.finish()?;
        eprintln!(
            "writer: {} acknowledged, {} retried on another endpoint, {} failed; puts per endpoint {:?}; first errors: {:#?}",
            stats.acked.len(),
            stats.retried,
            stats.failed.len(),
            stats.per_endpoint,
            stats.errors
        );
        eprintln!("timings: {timings:?}");
        ensure!(
            stats.per_endpoint.len() == endpoints.len(),
            "not every endpoint was written to: {:?}",
            stats.per_endpoint
        );
        check_acked(&endpoints, prefix, &stats)?;
        ensure!(
            stats.failed.is_empty(),
            "{} writes failed on two endpoints: {:?}; errors: {:#?}",
            stats.failed.len(),
            stats.failed,
            stats.errors
        );
        check_keys(&ep, "before", KEYS)?;
        for (_, member_ep) in member_endpoints(ns, "ex")? {
            let v = server_version(&member_ep)?;
            let last = steps.last().map_or(start, |s| s.1);
            ensure!(v == last, "{member_ep} reports {v}, not {last}");
        }
        Ok(())
    })
}

#[test]
fn rolling_upgrade_3_4_to_3_5_0_to_3_5_1_under_continuous_writes() -> Result<()> {
    rolling_upgrade_under_writes("e2e-upgrade", "3.4.23", "", &[("3.4.23", "3.5.0"), ("3.5.0", "3.5.1")])
}

/// The path upstream supports from an old 3.5 to 3.7: a patch upgrade to the 3.5 stepping stone
/// (3.5.26+), then 3.6 (to a patch past its own stepping stone to 3.7, 3.6.11), then 3.7 —
/// which waits (UpgradeDeferred) until every member took a raft snapshot past the 3.5-era
/// entries (etcd 3.7.2 panics replaying them: "unmarshal should never fail"). The snapshot
/// count is lowered through etcdEnv so that the writer reaches it in seconds.
#[test]
fn rolling_upgrade_3_5_1_to_3_5_34_to_3_6_15_to_3_7_2_under_continuous_writes() -> Result<()> {
    let extra = "  pod:\n    etcdEnv: [{name: ETCD_SNAPSHOT_COUNT, value: '1000'}]\n";
    rolling_upgrade_under_writes(
        "e2e-upgrade-path",
        "3.5.1",
        extra,
        &[("3.5.1", "3.5.34"), ("3.5.34", "3.6.15"), ("3.6.15", "3.7.2")],
    )
}

/// 3.6 → 3.7 from a cluster whose raft log holds only 3.6 entries: no wait.
#[test]
fn rolling_upgrade_3_6_15_to_3_7_2_under_continuous_writes() -> Result<()> {
    rolling_upgrade_under_writes("e2e-upgrade-3-7", "3.6.15", "", &[("3.6.15", "3.7.2")])
}

// ---- scenario 2: refused version changes --------------------------------------------------------------

/// `name` runs `from`; `spec.version: to` must be refused with `words` in the message, a Warning
/// Event, and no change at all; setting `from` back clears the refusal.
fn refused(ns: &TestNamespace, name: &str, from: &str, to: &str, words: &str) -> Result<()> {
    let before = pod_versions(ns, name)?;
    ensure!(before.iter().all(|p| p.annotation == from && p.image == format!("{REPOSITORY}:v{from}")), "{before:?}");
    let marks = event_marks(ns, name)?;
    patch_spec(ns, name, &format!(r#"{{"version":"{to}"}}"#))?;
    let generation = cluster(ns, name)?["metadata"]["generation"].as_i64().context("no generation")?;

    // The operator processed this edit: it observed the generation and says why it refuses.
    let c = wait_until(Duration::from_secs(60), &format!("Upgrading=False/UpgradeRefused for {from} -> {to}"), || {
        let c = cluster(ns, name)?;
        let seen = c["status"]["observedGeneration"].as_i64() >= Some(generation);
        let refused =
            cond_str(&c, "Upgrading", "status") == "False" && cond_str(&c, "Upgrading", "reason") == "UpgradeRefused";
        Ok((seen && refused).then_some(c))
    })?;
    let msg = cond_str(&c, "Upgrading", "message");
    eprintln!("{name}: {from} -> {to} refused: {msg}");
    ensure!(msg.contains(words) && msg.contains(from) && msg.contains(to), "unclear refusal: {msg}");
    ensure!(msg.contains("nothing was changed"), "{msg}");
    ensure!(c["status"]["currentVersion"] == from, "{}", c["status"]);
    let warning = wait_until(Duration::from_secs(30), "a Warning Event UpgradeRefused", || {
        Ok(events_since(ns, name, &marks)?.into_iter().find(|e| {
            e.type_ == "Warning" && e.reason == "UpgradeRefused" && e.note.contains(words) && e.note.contains(to)
        }))
    })?;
    eprintln!("{name}: Warning Event {}: {}", warning.reason, warning.note);

    // Nothing changes: same pods, images, annotations, no restarts, same server versions.
    hold_unchanged(ns, name, &before, HOLD, &format!("after the refused change to {to}"))?;
    for (pod, ep) in member_endpoints(ns, name)? {
        let v = server_version(&ep)?;
        ensure!(v == from, "member {pod} reports {v} after a refused change");
    }
    let c = cluster(ns, name)?;
    ensure!(c["status"]["currentVersion"] == from, "{}", c["status"]);
    ensure!(!events_since(ns, name, &marks)?.iter().any(|e| e.reason == "MemberUpgraded" || e.reason == "LeaderMoved"));

    // Setting the version back clears the refusal.
    patch_spec(ns, name, &format!(r#"{{"version":"{from}"}}"#))?;
    wait_until(Duration::from_secs(60), "the refusal to clear", || {
        let c = cluster(ns, name)?;
        Ok((settled_at(&c, from, 3) && condition(&c, "Upgrading").is_none()).then_some(()))
    })?;
    Ok(())
}

#[test]
fn downgrade_minor_skip_and_missing_stepping_stone_are_refused_and_change_nothing() -> Result<()> {
    with_operator("e2e-refuse", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "new", 3, "3.5.1", ""))?;
        ns.apply(&cluster_manifest(&ns.name, "old", 3, "3.4.23", ""))?;
        ns.apply(&cluster_manifest(&ns.name, "mid", 3, "3.6.6", ""))?;
        for name in ["new", "old", "mid"] {
            wait_healthy(ns, name, 3, CREATE)?;
            write_keys(&client_endpoint(ns, name)?, name, KEYS)?;
        }
        refused(ns, "new", "3.5.1", "3.4.23", "downgrade")?;
        refused(ns, "old", "3.4.23", "3.6.0", "skips a minor")?;
        // Below the stepping stones: the refusal names the patch to reach first.
        refused(ns, "new", "3.5.1", "3.6.6", "upgrade to 3.5.26+ first")?;
        refused(ns, "mid", "3.6.6", "3.7.2", "upgrade to 3.6.11+ first")?;
        for name in ["new", "old", "mid"] {
            check_keys(&client_endpoint(ns, name)?, name, KEYS)?;
        }
        Ok(())
    })
}

// ---- scenario 3: an upgrade that fails on its first member ------------------------------------------

/// Loads `quay.io/coreos/etcd:v3.5.99-broken` (its etcd exits at start) into the local cluster.
fn load_broken_image() -> Result<()> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    e2e::run(std::process::Command::new("bash").arg("hack/images.sh").arg("broken").current_dir(&repo))
        .map(drop)
        .context("loading the broken etcd image with `hack/images.sh broken` (local cluster only)")
}

/// A 3.5.1 cluster is moved to `bad`, which cannot run: the upgrade must stop after the first
/// member with a quorum left, say which member and why, touch no second member, and setting
/// 3.5.1 back must heal it.
fn failed_upgrade(prefix: &str, bad: &str, why: &[&str]) -> Result<()> {
    with_operator(prefix, |ns, _op| {
        let good = "3.5.1";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, good, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", KEYS)?;
        let before = pod_versions(ns, "ex")?;
        let leader = etcd_leader(ns, "ex")?;
        let marks = event_marks(ns, "ex")?;

        let t0 = Instant::now();
        patch_spec(ns, "ex", &format!(r#"{{"version":"{bad}"}}"#))?;
        let (msg, member) = wait_until(UPGRADE, &format!("the upgrade to {bad} to be declared failed"), || {
            let c = cluster(ns, "ex")?;
            let failed = [("Upgrading", "False"), ("Degraded", "True")].iter().find_map(|(t, s)| {
                (cond_str(&c, t, "status") == *s && cond_str(&c, t, "reason") == "UpgradeFailed")
                    .then(|| cond_str(&c, t, "message"))
            });
            let Some(msg) = failed else { return Ok(None) };
            let member = before.iter().find(|p| msg.contains(&p.pod)).map(|p| p.pod.clone());
            let member = member.with_context(|| format!("the failure names no member: {msg}"))?;
            Ok(Some((msg, member)))
        })?;
        eprintln!("upgrade to {bad} stopped after {:.1}s: {msg}", t0.elapsed().as_secs_f64());
        ensure!(why.iter().any(|w| msg.contains(w)), "the failure does not say why (one of {why:?}): {msg}");
        ensure!(member != leader, "the leader {leader} went first");
        wait_until(Duration::from_secs(30), "a Warning Event UpgradeFailed naming the member", || {
            Ok(events_since(ns, "ex", &marks)?
                .into_iter()
                .find(|e| e.type_ == "Warning" && e.reason == "UpgradeFailed" && e.note.contains(&member)))
        })?;
        let upgraded: Vec<String> = events_since(ns, "ex", &marks)?
            .into_iter()
            .filter(|e| e.reason == "MemberUpgraded" || e.reason == "LeaderMoved")
            .map(|e| e.related)
            .collect();
        ensure!(upgraded == [member.clone()], "members acted on: {upgraded:?}");

        // Only that member was touched; the other two run 3.5.1 and form a quorum that serves.
        let check_only_first = |pods: &[PodVersion]| -> Result<()> {
            for p in pods {
                let b = before.iter().find(|b| b.pod == p.pod).with_context(|| format!("new pod {p:?}"))?;
                ensure!(p.uid == b.uid, "pod {} was replaced", p.pod);
                if p.pod == member {
                    ensure!(p.annotation == bad && p.image == format!("{REPOSITORY}:v{bad}"), "{p:?}");
                } else {
                    ensure!(p == b, "a second member was touched: {p:?} (was {b:?})");
                }
            }
            Ok(())
        };
        check_only_first(&pod_versions(ns, "ex")?)?;
        let mut answering = 0;
        for (pod, member_ep) in member_endpoints(ns, "ex")? {
            match server_version(&member_ep) {
                Ok(v) => {
                    ensure!(pod != member && v == good, "{pod} reports {v}");
                    answering += 1;
                }
                Err(_) => ensure!(pod == member, "healthy member {pod} does not answer"),
            }
        }
        ensure!(answering == 2, "{answering} members answer");
        write_keys(&ep, "during", 10)?;
        ensure!(cond_str(&cluster(ns, "ex")?, "Available", "status") == "True");
        // ... and stays so: the operator re-checks every 5 s and must not go on.
        let until = Instant::now() + HOLD;
        while Instant::now() < until {
            check_only_first(&pod_versions(ns, "ex")?)?;
            std::thread::sleep(Duration::from_millis(500));
        }

        // Setting the version back rolls the member back in place.
        let t1 = Instant::now();
        patch_spec(ns, "ex", &format!(r#"{{"version":"{good}"}}"#))?;
        wait_until(UPGRADE, "the cluster to heal at 3.5.1", || {
            let c = cluster(ns, "ex")?;
            Ok((settled_at(&c, good, 3) && all_report(ns, "ex", good)?).then_some(()))
        })?;
        eprintln!("rolled back to {good} in {:.1}s", t1.elapsed().as_secs_f64());
        let healed = pod_versions(ns, "ex")?;
        for p in &healed {
            let b = before.iter().find(|b| b.pod == p.pod).with_context(|| format!("new pod {p:?}"))?;
            ensure!(p.uid == b.uid && p.image == b.image && p.annotation == good, "{p:?}");
        }
        check_keys(&ep, "before", KEYS)?;
        check_keys(&ep, "during", 10)?;
        Ok(())
    })
}

#[test]
fn upgrade_to_a_missing_image_stops_after_the_first_member_and_reverting_heals() -> Result<()> {
    // No registry answers here, so pulling quay.io/coreos/etcd:v3.5.99 fails.
    failed_upgrade("e2e-upg-pull", "3.5.99", &["ErrImagePull", "ImagePullBackOff"])
}

#[test]
fn upgrade_to_a_crashing_image_stops_after_the_first_member_and_reverting_heals() -> Result<()> {
    load_broken_image()?;
    failed_upgrade("e2e-upg-crash", "3.5.99-broken", &["CrashLoopBackOff", "did not become healthy"])
}

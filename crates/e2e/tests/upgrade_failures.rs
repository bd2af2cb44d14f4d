//! Upgrades that fail on their first member, on the real local cluster with the real operator
//! binary: the upgrade stops after that member with a quorum left, says which member and why,
//! touches no second member, and setting the version back heals the cluster. Every test writes
//! keys first and reads them all back after the change.
//!
//! Needs the etcd v3.5.1 image of `hack/images.sh` and, for the crash test,
//! `hack/images.sh broken` (`quay.io/coreos/etcd:v3.5.99-broken`, i.e. `spec.version:
//! 3.5.99-broken`), which the test loads itself when it runs against the local cluster.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::upgrade::*;
use common::*;
use e2e::{TestNamespace, wait_until};

// ---- cluster observations ------------------------------------------------------------------------

/// How many lines each member's etcd has logged so far, by pod.
fn log_marks(ns: &TestNamespace, name: &str) -> Result<Vec<(String, usize)>> {
    pod_names(&member_pods(ns, name)?)
        .into_iter()
        .map(|p| Ok((p.clone(), ns.run(&["logs", &p, "-c", "etcd"])?.lines().count())))
        .collect()
}

/// Whether a member's etcd logged, after `marks`, that the member with ID `id` (hex) handed it
/// leadership: what a leader does as it stops (and when asked to move leadership). A member
/// upgraded as a follower hands nothing over.
fn handed_leadership_over(ns: &TestNamespace, marks: &[(String, usize)], id: &str) -> Result<Option<String>> {
    let needle = format!("received MsgTimeoutNow from {id} ");
    for (pod, seen) in marks {
        let Ok(log) = ns.run(&["logs", pod, "-c", "etcd"]) else { continue };
        if let Some(l) = log.lines().skip(*seen).find(|l| l.contains(&needle)) {
            return Ok(Some(format!("{pod}: {l}")));
        }
    }
    Ok(None)
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
        let ids: Vec<Vec<String>> = member_list(&ep)?;
        let logs = log_marks(ns, "ex")?;
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
        // A follower went first: etcd says so (a leader read before the patch may have changed).
        let id = ids.iter().find(|m| m.get(2) == Some(&member)).map(|m| m[0].clone());
        let id = id.with_context(|| format!("{member} not in the member list {ids:?}"))?;
        let handed = handed_leadership_over(ns, &logs, &id)?;
        ensure!(
            handed.is_none(),
            "the leader {member} went first: it handed leadership over as it stopped: {handed:?}"
        );
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

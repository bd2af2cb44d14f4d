//! The operator installed the way a user installs it: `etcd-operator manifests` applied to the
//! real cluster, running in-cluster under its own ServiceAccount and the shipped RBAC, with two
//! replicas and leader election.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::{TestNamespace, wait_until};

/// The per-cluster gauges of `/metrics`, scraped from the leader pod's IP.
fn scrape(ns: &TestNamespace, pod: &str) -> Result<BTreeMap<String, f64>> {
    let ip = ns.json(&["get", "pod", pod])?["status"]["podIP"].as_str().context("no pod IP")?.to_string();
    let out = Command::new("curl").args(["-sf", "--max-time", "5", &format!("http://{ip}:8080/metrics")]).output()?;
    ensure!(out.status.success(), "scrape of {pod} failed");
    let text = String::from_utf8(out.stdout)?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("etcd_operator_cluster_"))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| v.parse().ok().map(|v| (k.to_string(), v))))
        .collect())
}

#[test]
fn two_replicas_leader_killed_mid_resize_and_metrics_match() -> Result<()> {
    let ns = TestNamespace::create("e2e-incluster")?;
    let op = InClusterOperator::install(&ns, &Install { replicas: 2, ..Install::default() })?;
    let r = (|| -> Result<()> {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.5.1", ""))?;
        wait_healthy(&ns, "ex", 3, Duration::from_secs(120))?;
        let ep = client_endpoint(&ns, "ex")?;
        write_keys(&ep, "incluster", 30)?;

        // Resize, and kill the leading replica as soon as the first learner is added.
        ns.run(&["patch", "etcdcluster", "ex", "--type=merge", "-p", r#"{"spec":{"size":5}}"#])?;
        let first = op.leader()?;
        wait_until(Duration::from_secs(60), "the first learner", || {
            Ok(events_for(&ns, "ex")?.iter().any(|(r, _)| r == "MemberAdded").then_some(()))
        })?;
        ns.run(&["delete", "pod", &first, "--grace-period=0", "--force"])?;
        wait_healthy(&ns, "ex", 5, Duration::from_secs(240))?;
        let second = op.leader()?;
        ensure!(second != first, "leadership did not move: {first}");
        check_keys(&ep, "incluster", 30)?;

        // No member was changed twice: exactly two learners added, each promoted once, none removed.
        let evs = events_for(&ns, "ex")?;
        let added: Vec<_> = evs.iter().filter(|(r, _)| r == "MemberAdded").collect();
        let promoted: Vec<_> = evs.iter().filter(|(r, _)| r == "LearnerPromoted").collect();
        ensure!(added.len() == 2 && promoted.len() == 2, "events: {evs:?}");
        ensure!(!evs.iter().any(|(r, _)| r == "MemberRemoved"), "a member was removed: {evs:?}");
        ensure!(member_list(&ep)?.len() == 5, "member list: {:?}", member_list(&ep)?);

        // /metrics of the new leader matches the cluster.
        let key = |m: &str| format!(r#"etcd_operator_cluster_{m}{{namespace="{}",name="ex"}}"#, ns.name);
        let metrics = wait_until(Duration::from_secs(60), "gauges to match", || {
            let m = scrape(&ns, &second)?;
            let ok = m.get(&key("desired_size")) == Some(&5.0)
                && m.get(&key("ready_members")) == Some(&5.0)
                && m.get(&key("leader_present")) == Some(&1.0)
                && m.get(&key("learners")) == Some(&0.0)
                && m.get(&key("db_size_bytes")).is_some_and(|v| *v > 0.0);
            Ok(ok.then_some(m))
        })?;
        let version =
            format!(r#"etcd_operator_cluster_version_info{{namespace="{}",name="ex",version="3.5.1"}}"#, ns.name);
        ensure!(metrics.get(&version) == Some(&1.0), "{metrics:?}");
        Ok(())
    })();
    if let Err(e) = r {
        let logs = op.logs();
        let tail: Vec<&str> = logs.lines().rev().take(60).collect();
        return Err(e.context(format!("operator logs (newest first):\n{}", tail.join("\n"))));
    }
    Ok(())
}

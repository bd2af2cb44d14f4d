//! The operator installed the way a user installs it: `etcd-operator manifests` applied to the
//! real cluster, running in-cluster under its own ServiceAccount and the shipped RBAC, with two
//! replicas and leader election; its `/metrics` only for a token allowed to read it.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::{TestNamespace, wait_until};

/// The per-cluster gauges of `/metrics`, scraped from the leader pod's IP with `token`.
fn scrape(ns: &TestNamespace, pod: &str, token: &str) -> Result<BTreeMap<String, f64>> {
    let ip = ns.json(&["get", "pod", pod])?["status"]["podIP"].as_str().context("no pod IP")?.to_string();
    let auth = format!("Authorization: Bearer {token}");
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", "-H", &auth, &format!("http://{ip}:8080/metrics")])
        .output()?;
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
        // Who finished the resize, from the Events (their reportingInstance): the lease may still
        // name a killed leader until it expires.
        let promoters: Vec<String> =
            events_v1(&ns, "ex")?.into_iter().filter(|e| e.reason == "LearnerPromoted").map(|e| e.reporter).collect();
        let second = promoters.last().cloned().unwrap_or_default();
        ensure!(
            !second.is_empty() && second != first,
            "the killed leader {first} promoted every learner: {promoters:?}"
        );
        check_keys(&ep, "incluster", 30)?;

        // No member was changed twice: exactly two learners added, each promoted once, none removed.
        let evs = events_for(&ns, "ex")?;
        let added: Vec<_> = evs.iter().filter(|(r, _)| r == "MemberAdded").collect();
        let promoted: Vec<_> = evs.iter().filter(|(r, _)| r == "LearnerPromoted").collect();
        ensure!(added.len() == 2 && promoted.len() == 2, "events: {evs:?}");
        ensure!(!evs.iter().any(|(r, _)| r == "MemberRemoved"), "a member was removed: {evs:?}");
        ensure!(member_list(&ep)?.len() == 5, "member list: {:?}", member_list(&ep)?);

        // /metrics of the new leader matches the cluster (read with a token allowed to).
        let (token, _rbac) = metrics_reader(&ns)?;
        let key = |m: &str| format!(r#"etcd_operator_cluster_{m}{{namespace="{}",name="ex"}}"#, ns.name);
        let metrics = wait_until(Duration::from_secs(60), "gauges to match", || {
            let m = scrape(&ns, &second, &token)?;
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

/// The HTTP status of a GET of `url`, with `token` as bearer token if any.
fn status_of(url: &str, token: Option<&str>) -> Result<u16> {
    let mut args = vec!["-s".to_string(), "-o".into(), "/dev/null".into(), "-w".into(), "%{http_code}".into()];
    args.extend(["--max-time".into(), "5".into()]);
    if let Some(t) = token {
        args.extend(["-H".into(), format!("Authorization: Bearer {t}")]);
    }
    args.push(url.to_string());
    let out = Command::new("curl").args(&args).output()?;
    Ok(String::from_utf8(out.stdout)?.trim().parse()?)
}

/// A ClusterRole and ClusterRoleBinding a test made, removed when it ends.
struct ClusterRbac(e2e::Kubectl, String);

impl Drop for ClusterRbac {
    fn drop(&mut self) {
        let _ = self.0.run(&["delete", "clusterrolebinding,clusterrole", &self.1, "--ignore-not-found"]);
    }
}

/// ServiceAccount `scraper` of `ns`, allowed to `get /metrics` (a ClusterRole and binding
/// removed when the second value is dropped), and its token.
fn metrics_reader(ns: &TestNamespace) -> Result<(String, ClusterRbac)> {
    ns.run(&["create", "serviceaccount", "scraper"])?;
    let token = ns.kubectl.service_account_token(&ns.name, "scraper")?;
    let name = format!("e2e-metrics-{}", ns.name);
    let rbac = ClusterRbac(ns.kubectl.clone(), name.clone());
    ns.kubectl.run(&["create", "clusterrole", &name, "--verb=get", "--non-resource-url=/metrics"])?;
    let sa = format!("--serviceaccount={}:scraper", ns.name);
    ns.kubectl.run(&["create", "clusterrolebinding", &name, &format!("--clusterrole={name}"), &sa])?;
    Ok((token, rbac))
}

/// `/metrics` of an install (`--metrics-auth=kubernetes`, what `manifests` renders) answers only
/// a bearer token the API server authenticates (TokenReview) and allows `get` on the
/// non-resource URL `/metrics` (SubjectAccessReview), as kube-rbac-proxy does: what Prometheus
/// sends from a token Secret. `/healthz` and `/readyz` stay open for the kubelet's probes.
#[test]
fn metrics_answer_only_a_token_allowed_to_read_them() -> Result<()> {
    let ns = TestNamespace::create("e2e-metrics-auth")?;
    let op = InClusterOperator::install(&ns, &Install::default())?;
    let leader = op.leader()?;
    let ip = ns.json(&["get", "pod", &leader])?["status"]["podIP"].as_str().context("no pod IP")?.to_string();
    let url = |path: &str| format!("http://{ip}:8080{path}");
    ensure!(status_of(&url("/healthz"), None)? == 200, "/healthz");
    ensure!(status_of(&url("/readyz"), None)? == 200, "/readyz");
    ensure!(status_of(&url("/metrics"), None)? == 401, "/metrics without a token");
    ensure!(status_of(&url("/metrics"), Some("not-a-token"))? == 401, "/metrics with a bad token");
    ns.run(&["create", "serviceaccount", "nobody"])?;
    let nobody = ns.kubectl.service_account_token(&ns.name, "nobody")?;
    ensure!(status_of(&url("/metrics"), Some(&nobody))? == 403, "/metrics for a token without the right");
    let (token, _rbac) = metrics_reader(&ns)?;
    wait_until(Duration::from_secs(30), "the scraper's token to be allowed", || {
        Ok((status_of(&url("/metrics"), Some(&token))? == 200).then_some(()))
    })?;
    let body = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-H", &format!("Authorization: Bearer {token}"), &url("/metrics")])
        .output()?;
    let text = String::from_utf8(body.stdout)?;
    // No EtcdCluster here, so no series: the exposition is its end marker alone.
    ensure!(
        text.trim_end().ends_with("# EOF"),
        "not a metrics exposition: {text} {}",
        String::from_utf8_lossy(&body.stderr)
    );
    Ok(())
}

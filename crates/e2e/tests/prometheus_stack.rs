//! The monitoring objects of `etcd-operator manifests --monitoring` in a real Prometheus: the
//! local cluster's Prometheus Operator and Prometheus (`MONITORING=1 hack/cluster.sh up`, both
//! built from their Go modules) pick up the PodMonitors and the PrometheusRule as they do for a
//! user, scrape every member and the operator, and the alerts go pending and fire on real faults
//! and resolve once the fault is mended. Every query of the Grafana dashboard returns data.
//!
//! Alerts with a `for` of a minute are awaited until they fire; longer ones (5 and 10 minutes)
//! until Prometheus holds them pending, with the moment their expression began to hold: from there
//! Prometheus fires them after their `for` while the expression holds (promtool's unit tests in
//! tests/monitoring.rs check each alert's `for` and wording). That keeps this file to minutes.
//!
//! The operator runs in-cluster (a PodMonitor scrapes pods), whatever `$E2E_OPERATOR` says.
//! Without the local cluster's Prometheus these tests fail, saying how to start it.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use common::backups::claim_manifest;
use common::day2::*;
use common::*;
use e2e::{TestNamespace, host_etcdctl, wait_until};
use etcd_client::{Client, DeleteOptions};

/// Discovery of a new PodMonitor: the Prometheus Operator writes the configuration into a
/// Secret, the kubelet syncs the mounted Secret (up to about a minute), the reloader reloads,
/// then the first scrape within the PodMonitors' 30 s interval.
const SCRAPED: Duration = Duration::from_secs(240);
/// An alert's expression held for a scrape (30 s) and an evaluation (5 s) after the fault.
const PENDING: Duration = Duration::from_secs(150);

/// A namespace with the operator installed in-cluster with `--monitoring`, and Prometheus.
fn with_monitored_operator(
    prefix: &str,
    body: impl FnOnce(&TestNamespace, &InClusterOperator, &Prometheus) -> Result<()>,
) -> Result<()> {
    let prom = Prometheus::find(&e2e::Kubectl::from_env()?)?;
    let ns = TestNamespace::create(prefix)?;
    let op = InClusterOperator::install(&ns, &Install { monitoring: true, ..Install::default() })?;
    body(&ns, &op, &prom).map_err(|e| {
        let alerts = prom.alerts().map(|a| format!("{a:#?}")).unwrap_or_else(|e| format!("{e:#}"));
        e.context(format!("{}\n--- Prometheus alerts:\n{alerts}", diagnostics(&ns, None)))
            .context(format!("--- operator log:\n{}", tail(&op.logs(), 40)))
    })
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Waits until every member of cluster `name` and the operator answer Prometheus' scrapes, with
/// the labels the rules and the dashboard join on.
fn wait_scraped(prom: &Prometheus, ns: &TestNamespace, name: &str, size: usize) -> Result<()> {
    let members = format!(r#"up{{job="etcd-members", namespace="{}", name="{name}"}}"#, ns.name);
    wait_until(SCRAPED, &format!("Prometheus to scrape the {size} members of {name}"), || {
        let up = prom.query(&members)?;
        let answering = up.iter().filter(|s| s.value == 1.0).count();
        Ok((answering == size && up.iter().all(|s| !s.label("pod").is_empty())).then_some(()))
    })?;
    let operator = format!(r#"up{{job="etcd-operator", namespace="{}"}} == 1"#, ns.name);
    wait_until(
        SCRAPED,
        "Prometheus to scrape the operator",
        || Ok((!prom.query(&operator)?.is_empty()).then_some(())),
    )?;
    // The operator's per-cluster series keep the EtcdCluster's namespace (honorLabels).
    let desired = format!(r#"etcd_operator_cluster_desired_size{{namespace="{}", name="{name}"}}"#, ns.name);
    wait_until(SCRAPED, "the operator's series of the cluster", || {
        Ok(prom.query(&desired)?.first().is_some_and(|s| s.value == size as f64).then_some(()))
    })
}

/// Waits for alert `alert` of namespace `ns` with the `extra` labels to be held in one of
/// `states`; returns it.
fn wait_alert(
    prom: &Prometheus,
    ns: &TestNamespace,
    alert: &str,
    extra: &[(&str, &str)],
    states: &[&str],
    timeout: Duration,
) -> Result<Alert> {
    wait_until(timeout, &format!("alert {alert} {extra:?} to be {states:?}"), || {
        Ok(prom.alerts()?.into_iter().find(|a| {
            a.name == alert
                && ours(a, ns)
                && a.label("namespace") == ns.name
                && extra.iter().all(|(k, v)| a.label(k) == *v)
                && states.contains(&a.state.as_str())
        }))
    })
}

/// The alert comes from the rules of the test's own namespace (the PrometheusRule its install
/// made), not from another namespace's copy, which may be older.
fn ours(a: &Alert, ns: &TestNamespace) -> bool {
    a.file.contains(&format!("/{}-", ns.name))
}

/// Waits until no alert `alert` of namespace `ns` is held, pending or firing.
fn wait_alert_gone(prom: &Prometheus, ns: &TestNamespace, alert: &str, timeout: Duration) -> Result<()> {
    wait_until(timeout, &format!("alert {alert} to resolve"), || {
        Ok((!prom.alerts()?.iter().any(|a| a.name == alert && ours(a, ns) && a.label("namespace") == ns.name))
            .then_some(()))
    })
}

/// None of these alerts is held for namespace `ns` (a healthy cluster raises none).
fn ensure_quiet(prom: &Prometheus, ns: &TestNamespace, alerts: &[&str]) -> Result<()> {
    let held: Vec<Alert> = prom
        .alerts()?
        .into_iter()
        .filter(|a| a.label("namespace") == ns.name && alerts.contains(&a.name.as_str()))
        .collect();
    ensure!(held.is_empty(), "alerts on a healthy cluster: {held:#?}");
    Ok(())
}

/// A dashboard query as Grafana sends it for namespace `ns` and cluster `name`.
fn panel_query(expr: &str, ns: &str, name: &str) -> String {
    expr.replace("$namespace", ns).replace("$cluster", name).replace("$__rate_interval", "2m")
}

/// Scraped, then NOSPACE for real: the alarm alert fires and resolves after the recovery; a
/// periodic backup's lost claim makes its backup too old, and its return resolves that; and every
/// query of the Grafana dashboard returns data for the cluster.
#[test]
fn members_and_operator_are_scraped_alarms_and_backups_alert_and_every_panel_has_data() -> Result<()> {
    with_monitored_operator("e2e-prom", |ns, _op, prom| {
        let extra = "  maintenance:\n    quotaBackendBytes: 16777216\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", extra))?;
        ns.apply(&claim_manifest(&ns.name, "backups"))?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(180))?;
        let policy = "  backupPolicy: {backupIntervalInSecond: 10, maxBackups: 2, timeoutInSecond: 10}\n";
        let storage = "pvc: {claimName: backups, path: ex/etcd.backup}";
        ns.apply(&common::backups::backup_manifest(&ns.name, "every10s", "ex", "PVC", storage, policy))?;
        wait_scraped(prom, ns, "ex", 3)?;
        // The PrometheusRule is loaded: its group is there (a rule file takes as long as a
        // PodMonitor to arrive: the kubelet's sync of the mounted Secret).
        wait_until(SCRAPED, "the PrometheusRule's group to be loaded", || {
            let groups = prom.rule_groups()?;
            Ok(groups.iter().any(|(file, g)| g == "etcd-operator" && file.contains(&ns.name)).then_some(()))
        })?;
        ensure_quiet(prom, ns, &["EtcdAlarmActive", "EtcdBackupTooOld", "EtcdMemberDown", "EtcdQuorumAtRisk"])?;

        // NOSPACE: the operator paused so that the alarm holds for the alert's minute.
        patch_spec(ns, "ex", r#"{"paused":true}"#)?;
        wait_until(Duration::from_secs(30), "status.controlPaused", || {
            Ok((cluster(ns, "ex")?["status"]["controlPaused"] == true).then_some(()))
        })?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = rt()?;
        rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            for i in 0..2000u64 {
                match c.put(format!("fill/{i:05}"), blob(64 << 10, i), None).await {
                    Ok(_) => {}
                    Err(e) if e.to_string().contains("database space exceeded") => return Ok::<_, anyhow::Error>(()),
                    Err(e) => return Err(e.into()),
                }
            }
            bail!("2000 puts of 64 KiB never filled a 16 MiB quota")
        })?;
        let full = Instant::now();
        let alarm = wait_alert(
            prom,
            ns,
            "EtcdAlarmActive",
            &[("name", "ex"), ("alarm", "NOSPACE")],
            &["firing"],
            PENDING + Duration::from_secs(60),
        )?;
        eprintln!(
            "EtcdAlarmActive firing {:.0}s after the quota was hit (active since {})",
            full.elapsed().as_secs_f64(),
            alarm.active_at
        );
        ensure!(alarm.label("severity") == "critical", "{alarm:?}");
        // Mended as a user would: the operator let act, the filler keys deleted.
        patch_spec(ns, "ex", r#"{"paused":false}"#)?;
        rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            c.delete("fill/", Some(DeleteOptions::new().with_prefix())).await?;
            Ok::<_, anyhow::Error>(())
        })?;
        wait_until(Duration::from_secs(180), "writes to succeed again", || {
            Ok(host_etcdctl(&ep, &["put", "after/0", "v"]).ok())
        })?;
        eprintln!("writes succeed again {:.0}s after the quota was hit", full.elapsed().as_secs_f64());
        wait_alert_gone(prom, ns, "EtcdAlarmActive", PENDING).map_err(|e| {
            let series = |m: &str| {
                prom.query(&format!(r#"{m}{{namespace="{}"}}"#, ns.name))
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_else(|e| format!("{e:#}"))
            };
            e.context(format!(
                "etcd_operator_alarms: {}\netcd_debugging_server_alarms: {}",
                series("etcd_operator_alarms"),
                series("etcd_debugging_server_alarms")
            ))
        })?;

        eprintln!("EtcdAlarmActive resolved {:.0}s after the quota was hit", full.elapsed().as_secs_f64());

        // Every dashboard query has data for this cluster (the recovery defragmented, a backup
        // succeeded). Counters born by the recovery need two scrapes before `increase` has a value.
        wait_until(Duration::from_secs(120), "a successful backup", || {
            Ok((common::backups::get(ns, "etcdbackup", "every10s")?["status"]["succeeded"] == true).then_some(()))
        })?;
        eprintln!("a backup succeeded {:.0}s after the quota was hit", full.elapsed().as_secs_f64());
        let queries = operator_dashboard_queries()?;
        wait_until(SCRAPED, "every dashboard query to return data", || {
            let mut empty = vec![];
            for q in &queries {
                let expr = panel_query(q, &ns.name, "ex");
                if prom.query(&expr)?.is_empty() {
                    empty.push(expr);
                }
            }
            if empty.is_empty() {
                return Ok(Some(()));
            }
            std::thread::sleep(Duration::from_secs(2));
            bail!("dashboard queries without data: {empty:#?}")
        })?;
        let png = render_dashboard(prom, ns, "ex")?;
        eprintln!("the dashboard of ns/ex: {}", png.display());

        // A periodic backup whose claim goes: no success for twice its interval and 90 s (110 s
        // for this one), then an evaluation.
        ns.run(&["patch", "etcdbackup", "every10s", "--type=merge", "-p", r#"{"spec":{"pvc":{"claimName":"gone"}}}"#])?;
        let late = wait_alert(
            prom,
            ns,
            "EtcdBackupTooOld",
            &[("name", "every10s")],
            &["pending", "firing"],
            PENDING + Duration::from_secs(120),
        )?;
        eprintln!("EtcdBackupTooOld {} since {}", late.state, late.active_at);
        ns.run(&[
            "patch",
            "etcdbackup",
            "every10s",
            "--type=merge",
            "-p",
            r#"{"spec":{"pvc":{"claimName":"backups"}}}"#,
        ])?;
        wait_alert_gone(prom, ns, "EtcdBackupTooOld", PENDING)?;
        Ok(())
    })
}

/// A member whose data is broken (the operator paused, so it stays broken): the member is down
/// and the quorum at risk. Let act, the operator replaces the member and both resolve. The
/// operator scaled to 0: the operator is down, until it is back.
#[test]
fn a_broken_member_and_a_stopped_operator_raise_their_alerts_and_resolve() -> Result<()> {
    with_monitored_operator("e2e-prom-faults", |ns, op, prom| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(180))?;
        wait_scraped(prom, ns, "ex", 3)?;
        // Members are scraped before the operator's first scrape says it manages the cluster:
        // EtcdOperatorDown is pending until the next rule evaluation after that scrape.
        wait_alert_gone(prom, ns, "EtcdOperatorDown", SCRAPED)?;
        ensure_quiet(prom, ns, &["EtcdMemberDown", "EtcdQuorumAtRisk", "EtcdOperatorDown", "EtcdNoLeader"])?;

        patch_spec(ns, "ex", r#"{"paused":true}"#)?;
        wait_until(Duration::from_secs(30), "status.controlPaused", || {
            Ok((cluster(ns, "ex")?["status"]["controlPaused"] == true).then_some(()))
        })?;
        let victim = pod_names(&member_pods(ns, "ex")?).into_iter().next().context("no member pod")?;
        let broken_at = now_rfc3339();
        break_member_data(ns, &victim)?;
        let down = wait_alert(prom, ns, "EtcdMemberDown", &[("pod", &victim)], &["pending", "firing"], PENDING)?;
        let at_risk = wait_alert(
            prom,
            ns,
            "EtcdQuorumAtRisk",
            &[("name", "ex"), ("severity", "warning")],
            &["pending", "firing"],
            PENDING,
        )?;
        for a in [&down, &at_risk] {
            ensure!(
                a.active_at.as_str() >= broken_at.as_str(),
                "{} active since {}, before the fault ({broken_at})",
                a.name,
                a.active_at
            );
        }
        eprintln!(
            "EtcdMemberDown {} since {}; EtcdQuorumAtRisk {} since {}",
            down.state, down.active_at, at_risk.state, at_risk.active_at
        );
        // One member of three: a quorum is left, so no critical quorum alert.
        let critical = prom.alerts()?.into_iter().find(|a| {
            a.name == "EtcdQuorumAtRisk" && a.label("namespace") == ns.name && a.label("severity") == "critical"
        });
        ensure!(critical.is_none(), "one member down of three called a lost quorum: {critical:?}");

        patch_spec(ns, "ex", r#"{"paused":false}"#)?;
        wait_healthy(ns, "ex", 3, Duration::from_secs(240))?;
        wait_alert_gone(prom, ns, "EtcdMemberDown", PENDING)?;
        wait_alert_gone(prom, ns, "EtcdQuorumAtRisk", PENDING)?;

        // The operator stopped as a Deployment scaled to 0 is.
        op.run(&["scale", "deployment", "etcd-operator", "--replicas=0"])?;
        let stopped = wait_alert(prom, ns, "EtcdOperatorDown", &[("name", "ex")], &["pending", "firing"], PENDING)?;
        eprintln!("EtcdOperatorDown {} since {}", stopped.state, stopped.active_at);
        op.run(&["scale", "deployment", "etcd-operator", "--replicas=1"])?;
        wait_alert_gone(prom, ns, "EtcdOperatorDown", SCRAPED)?;
        Ok(())
    })
}

/// Now as Prometheus prints `activeAt` (RFC 3339, UTC), to compare as text.
fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S").to_string()
}

/// Every query of the dashboard.
fn operator_dashboard_queries() -> Result<Vec<String>> {
    let dashboard = operator_dashboard()?;
    let mut queries = vec![];
    for p in dashboard["panels"].as_array().into_iter().flatten() {
        for t in p["targets"].as_array().into_iter().flatten() {
            queries.push(t["expr"].as_str().context("a target without expr")?.to_string());
        }
    }
    ensure!(queries.len() >= 10, "the dashboard has {} queries", queries.len());
    Ok(queries)
}

/// The dashboard drawn from Prometheus' data for cluster `name` (hack/dashboard-png.sh) into
/// `target/e2e-logs/dashboard-<namespace>.png`: every panel has data to draw.
fn render_dashboard(prom: &Prometheus, ns: &TestNamespace, name: &str) -> Result<std::path::PathBuf> {
    let dir = log_dir()?;
    let board = dir.join(format!("dashboard-{}.json", ns.name));
    std::fs::write(&board, serde_json::to_string_pretty(&operator_dashboard()?)?)?;
    let png = dir.join(format!("dashboard-{}.png", ns.name));
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/dashboard-png.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .arg("render")
        .args(["--prometheus", &prom.base, "--namespace", &ns.name, "--cluster", name, "--minutes", "10"])
        .arg("--dashboard")
        .arg(&board)
        .arg("--out")
        .arg(&png)
        .output()
        .context("hack/dashboard-png.sh")?;
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    ensure!(out.status.success(), "hack/dashboard-png.sh: {said}{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("{}", said.trim());
    ensure!(said.contains(" 0 without data"), "panels drawn without data: {said}");
    ensure!(std::fs::metadata(&png)?.len() > 10_000, "{} is too small to be the dashboard", png.display());
    Ok(png)
}

/// The dashboard of the operator's `manifests --monitoring` ConfigMap.
fn operator_dashboard() -> Result<serde_json::Value> {
    let out = std::process::Command::new(operator_bin())
        .args(["manifests", "--monitoring", "--no-crds", "--namespace", "x"])
        .output()
        .context("etcd-operator manifests --monitoring")?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout)?;
    for doc in text.split("\n---\n") {
        let Ok(v) = serde_yaml::from_str::<serde_json::Value>(doc) else { continue };
        if let Some(json) = v["data"]["etcd-operator.json"].as_str().filter(|_| v["kind"] == "ConfigMap") {
            return Ok(serde_json::from_str(json)?);
        }
    }
    bail!("no dashboard ConfigMap in `manifests --monitoring`")
}

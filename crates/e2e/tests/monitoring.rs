//! The monitoring objects of `etcd-operator manifests --monitoring` against real checkers:
//! promtool checks the PrometheusRule's rules, then runs unit tests of the alerts (input series
//! in, expected alerts with their rendered annotations out); grafana-schema (hack/grafana-schema,
//! Grafana's dashboard schema as the Grafana Foundation SDK publishes it) checks the dashboard.
//!
//! Needs no cluster: only the operator binary (`cargo build -p etcd-operator`, or
//! `$ETCD_OPERATOR_BIN`), promtool (`$PROMTOOL`, else the path `hack/build-promtool.sh` prints:
//! it builds promtool from the Go module proxy once, then only prints the cached binary) and
//! grafana-schema (`$GRAFANA_SCHEMA`, else `hack/build-grafana-schema.sh`, likewise). Without
//! them these tests fail; they never pass silently.
//!
//! Every test name starts with `monitoring_`: `hack/test.sh` runs this file with the unit tests and
//! skips these names in its cluster runs.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The promtool to check with.
fn promtool() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| go_tool("promtool", "PROMTOOL", "build-promtool.sh")).clone()
}

/// The Grafana dashboard schema checker (hack/grafana-schema) to check with.
fn grafana_schema() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| go_tool("grafana-schema", "GRAFANA_SCHEMA", "build-grafana-schema.sh")).clone()
}

/// A tool built from Go modules: `$var`, else the path `hack/<script>` prints.
fn go_tool(name: &str, var: &str, script: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "{name} not found: {var}={} is not a file (unset it to build one with hack/{script})",
            p.display()
        );
        return p;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack").join(script);
    let out = Command::new("bash")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("{name} not found: cannot run bash {}: {e}", path.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let bin = stdout.lines().last().map(PathBuf::from).filter(|p| p.is_file());
    match (out.status.success(), bin) {
        (true, Some(p)) => p,
        _ => panic!(
            "{name} not found: hack/{script} (which builds it from the Go module proxy with /usr/local/go) failed \
             or printed no binary; set {var} to a {name} to use instead.\nstdout: {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// A fresh directory for one test's files.
fn work_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("monitoring").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the test's output directory");
    dir
}

/// The objects `etcd-operator manifests --monitoring` prints.
fn monitoring_objects() -> Vec<Value> {
    let bin = common::operator_bin();
    let out = Command::new(&bin)
        .args(["manifests", "--monitoring", "--no-crds", "--namespace", "etcd"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} (cargo build -p etcd-operator): {e}", bin.display()));
    assert!(out.status.success(), "etcd-operator manifests --monitoring: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("manifests print UTF-8");
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line == "---" {
            docs.push(String::new());
        } else {
            let d = docs.last_mut().expect("docs starts with one document");
            d.push_str(line);
            d.push('\n');
        }
    }
    docs.iter().filter(|d| !d.trim().is_empty()).map(|d| serde_yaml::from_str(d).expect("a YAML document")).collect()
}

/// The PrometheusRule's spec, a rules file as Prometheus reads it.
fn rule_groups() -> Value {
    let objs = monitoring_objects();
    let rule = objs.iter().find(|o| o["kind"] == "PrometheusRule").expect("a PrometheusRule in the output");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    rule["spec"].clone()
}

fn write_rules(dir: &Path) -> PathBuf {
    let path = dir.join("etcd-operator.rules.yaml");
    std::fs::write(&path, serde_yaml::to_string(&rule_groups()).expect("rules print as YAML")).expect("the rules file");
    path
}

fn run_promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new(promtool()).args(args).current_dir(dir).output().expect("running promtool");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn monitoring_rules_pass_promtool_check() {
    let dir = work_dir("check");
    let rules = write_rules(&dir);
    let out = run_promtool(&["check", "rules", "--lint=all", "--lint-fatal", rules.to_str().unwrap()], &dir);
    let n = rule_groups()["groups"][0]["rules"].as_array().unwrap().len();
    assert!(out.contains(&format!("SUCCESS: {n} rules found")), "{out}");
}

/// The annotation template of `alert` (of the given severity) with `{{ $labels.x }}` filled in;
/// templates that use anything else are spelled out by the test instead.
fn expand(groups: &Value, alert: &str, severity: &str, annotation: &str, labels: &BTreeMap<&str, &str>) -> String {
    let rule = groups["groups"][0]["rules"]
        .as_array()
        .expect("the PrometheusRule has rules")
        .iter()
        .find(|r| r["alert"] == alert && r["labels"]["severity"] == severity)
        .unwrap_or_else(|| panic!("no {severity} rule {alert}"));
    let mut text = rule["annotations"][annotation].as_str().expect("annotations are strings").to_string();
    for (k, v) in labels {
        text = text.replace(&format!("{{{{ $labels.{k} }}}}"), v);
    }
    assert!(!text.contains("{{"), "{alert} {annotation} needs more than labels: {text}");
    text
}

/// One expected alert: its labels (besides alertname), and its summary spelled out.
fn expect(groups: &Value, alert: &str, labels: &[(&str, &str)], summary: &str) -> Value {
    let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
    let severity = labels["severity"];
    json!({
        "exp_labels": labels,
        "exp_annotations": {
            "summary": summary,
            "description": expand(groups, alert, severity, "description", &labels),
        },
    })
}

fn series(name: &str, labels: &[(&str, &str)], values: &str) -> Value {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    json!({ "series": format!("{name}{{{}}}", l.join(", ")), "values": values })
}

/// Labels of an etcd member's series, as the members' PodMonitor makes them.
fn member(name: &str, pod: &str) -> Vec<(&'static str, String)> {
    vec![
        ("job", "etcd-members".into()),
        ("namespace", "ns".into()),
        ("name", name.into()),
        ("pod", pod.into()),
        ("instance", "10.0.0.1:2379".into()),
    ]
}

/// Labels of the operator's per-cluster series, as its PodMonitor makes them (honorLabels).
fn operator(name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("job", "etcd-operator".into()),
        ("namespace", "ns".into()),
        ("name", name.into()),
        ("pod", "etcd-operator-5d9c7-x2x4q".into()),
        ("instance", "10.0.0.9:8080".into()),
    ]
}

fn with(mut labels: Vec<(&'static str, String)>, extra: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    labels.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    labels
}

fn s(name: &str, labels: Vec<(&'static str, String)>, values: &str) -> Value {
    let l: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    series(name, &l, values)
}

#[test]
fn monitoring_alerts_pass_promtool_unit_tests() {
    let dir = work_dir("unit");
    let rules = write_rules(&dir);
    let g = rule_groups();
    let ns = ("namespace", "ns");
    let critical = ("severity", "critical");
    let warning = ("severity", "warning");
    let tests = json!([
        {
            "name": "no leader",
            "interval": "1m",
            "input_series": [
                s("etcd_server_has_leader", member("ex", "ex-a"), "1 1 0x6"),
                s("etcd_server_has_leader", member("ex", "ex-b"), "1x8"),
            ],
            "alert_rule_test": [
                { "eval_time": "2m", "alertname": "EtcdNoLeader", "exp_alerts": [] },
                {
                    "eval_time": "4m",
                    "alertname": "EtcdNoLeader",
                    "exp_alerts": [expect(&g, "EtcdNoLeader", &[critical, ns, ("name", "ex"), ("pod", "ex-a")],
                        "etcd member ex-a of cluster ns/ex has no leader")],
                },
            ],
        },
        {
            "name": "quorum at risk",
            "interval": "1m",
            "input_series": [
                // 3 members, 2 ready: a quorum, one short.
                s("etcd_operator_cluster_desired_size", operator("degraded"), "3x20"),
                s("etcd_operator_cluster_ready_members", operator("degraded"), "3 3 2x18"),
                // 5 members, 3 ready: still a quorum.
                s("etcd_operator_cluster_desired_size", operator("five"), "5x20"),
                s("etcd_operator_cluster_ready_members", operator("five"), "3x20"),
                // 3 members, 1 ready: no quorum.
                s("etcd_operator_cluster_desired_size", operator("lost"), "3x20"),
                s("etcd_operator_cluster_ready_members", operator("lost"), "1x20"),
                // Healthy, and a refused spec (size 0): nothing.
                s("etcd_operator_cluster_desired_size", operator("healthy"), "3x20"),
                s("etcd_operator_cluster_ready_members", operator("healthy"), "3x20"),
                s("etcd_operator_cluster_desired_size", operator("invalid"), "0x20"),
                s("etcd_operator_cluster_ready_members", operator("invalid"), "0x20"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "8m",
                    "alertname": "EtcdQuorumAtRisk",
                    "exp_alerts": [expect(&g, "EtcdQuorumAtRisk", &[critical, ns, ("name", "lost")],
                        "etcd cluster ns/lost has lost its quorum (ready members: 1)")],
                },
                {
                    "eval_time": "13m",
                    "alertname": "EtcdQuorumAtRisk",
                    "exp_alerts": [
                        expect(&g, "EtcdQuorumAtRisk", &[warning, ns, ("name", "degraded")],
                            "etcd cluster ns/degraded is down to 2 ready members"),
                        expect(&g, "EtcdQuorumAtRisk", &[warning, ns, ("name", "five")],
                            "etcd cluster ns/five is down to 3 ready members"),
                        expect(&g, "EtcdQuorumAtRisk", &[critical, ns, ("name", "lost")],
                            "etcd cluster ns/lost has lost its quorum (ready members: 1)"),
                    ],
                },
            ],
        },
        {
            "name": "NOSPACE and CORRUPT alarms, from the operator or from etcd",
            "interval": "1m",
            "input_series": [
                // The operator sees NOSPACE from minute 2; etcd's own gauge said so all along:
                // one alert.
                s("etcd_operator_alarms", with(operator("full"), &[("alarm", "NOSPACE")]), "0 0 1x10"),
                s("etcd_operator_alarms", with(operator("full"), &[("alarm", "CORRUPT")]), "0x12"),
                s("etcd_debugging_server_alarms",
                    with(member("full", "full-a"), &[("server_id", "8e9e05c5"), ("alarm_type", "NOSPACE")]), "1x12"),
                // Only the operator knows (etcd's gauge starts at 0 after a restart).
                s("etcd_operator_alarms", with(operator("op-only"), &[("alarm", "NOSPACE")]), "1x12"),
                // Only etcd's gauge.
                s("etcd_debugging_server_alarms",
                    with(member("etcd-only", "etcd-only-a"), &[("server_id", "1"), ("alarm_type", "CORRUPT")]), "1x12"),
                // Disarmed at minute 3: the operator's alarm list is empty again, but etcd's
                // gauge stays at 1 (it counts activations: a member that raised the alarm twice
                // is decremented once on the disarm). The operator's word wins: no alert.
                s("etcd_operator_alarms", with(operator("disarmed"), &[("alarm", "NOSPACE")]), "1 1 1 0x9"),
                s("etcd_operator_alarms", with(operator("disarmed"), &[("alarm", "CORRUPT")]), "0x12"),
                s("etcd_debugging_server_alarms",
                    with(member("disarmed", "disarmed-a"), &[("server_id", "2"), ("alarm_type", "NOSPACE")]), "1x12"),
                // No alarm.
                s("etcd_operator_alarms", with(operator("fine"), &[("alarm", "NOSPACE")]), "0x12"),
                s("etcd_operator_alarms", with(operator("fine"), &[("alarm", "CORRUPT")]), "0x12"),
            ],
            "alert_rule_test": [{
                "eval_time": "5m",
                "alertname": "EtcdAlarmActive",
                "exp_alerts": [
                    expect(&g, "EtcdAlarmActive", &[critical, ns, ("name", "full"), ("alarm", "NOSPACE")],
                        "etcd cluster ns/full has a NOSPACE alarm"),
                    expect(&g, "EtcdAlarmActive", &[critical, ns, ("name", "op-only"), ("alarm", "NOSPACE")],
                        "etcd cluster ns/op-only has a NOSPACE alarm"),
                    expect(&g, "EtcdAlarmActive", &[critical, ns, ("name", "etcd-only"), ("alarm", "CORRUPT")],
                        "etcd cluster ns/etcd-only has a CORRUPT alarm"),
                ],
            }],
        },
        {
            "name": "an alarm only etcd's gauge shows, once the operator stopped reporting the cluster",
            "interval": "1m",
            "input_series": [
                // The operator read the alarm list until minute 1, then could not reach etcd
                // (it drops the series); etcd's own gauge says CORRUPT all along.
                s("etcd_operator_alarms", with(operator("unreached"), &[("alarm", "NOSPACE")]), "0 0 _x10"),
                s("etcd_operator_alarms", with(operator("unreached"), &[("alarm", "CORRUPT")]), "0 0 _x10"),
                s("etcd_debugging_server_alarms",
                    with(member("unreached", "unreached-a"), &[("server_id", "3"), ("alarm_type", "CORRUPT")]), "1x12"),
            ],
            "alert_rule_test": [
                // Its last answer is believed for 5 minutes (an operator restart), then etcd's.
                { "eval_time": "5m", "alertname": "EtcdAlarmActive", "exp_alerts": [] },
                {
                    "eval_time": "10m",
                    "alertname": "EtcdAlarmActive",
                    "exp_alerts": [expect(&g, "EtcdAlarmActive", &[critical, ns, ("name", "unreached"), ("alarm", "CORRUPT")],
                        "etcd cluster ns/unreached has a CORRUPT alarm")],
                },
            ],
        },
        {
            "name": "a managed certificate not renewed in time",
            "interval": "1m",
            "input_series": [
                // Overdue from minute 3 to 6 (the renewal came then); another never overdue.
                s("etcd_operator_cluster_certificate_renewal_overdue", operator("late"), "0 0 0 1 1 1 0x6"),
                s("etcd_operator_cluster_certificate_renewal_overdue", operator("renewed"), "0x12"),
            ],
            "alert_rule_test": [
                { "eval_time": "3m", "alertname": "EtcdCertificateRenewalOverdue", "exp_alerts": [] },
                {
                    "eval_time": "5m",
                    "alertname": "EtcdCertificateRenewalOverdue",
                    "exp_alerts": [expect(&g, "EtcdCertificateRenewalOverdue", &[critical, ns, ("name", "late")],
                        "etcd cluster ns/late: a TLS certificate was not renewed in time")],
                },
                { "eval_time": "8m", "alertname": "EtcdCertificateRenewalOverdue", "exp_alerts": [] },
            ],
        },
        {
            "name": "a failed restore drill",
            "interval": "1m",
            "input_series": [
                // Passed, then the drill at minute 3 failed, then one passed again at minute 8.
                s("etcd_operator_backup_drill_last_success", operator("drilled"), "1 1 1 0 0 0 0 0 1x4"),
                // Always passed.
                s("etcd_operator_backup_drill_last_success", operator("healthy"), "1x12"),
            ],
            "alert_rule_test": [
                { "eval_time": "3m", "alertname": "EtcdBackupDrillFailed", "exp_alerts": [] },
                {
                    "eval_time": "5m",
                    "alertname": "EtcdBackupDrillFailed",
                    "exp_alerts": [expect(&g, "EtcdBackupDrillFailed", &[warning, ns, ("name", "drilled")],
                        "EtcdBackup ns/drilled: the last restore drill failed")],
                },
                { "eval_time": "9m", "alertname": "EtcdBackupDrillFailed", "exp_alerts": [] },
            ],
        },
        {
            "name": "backup older than twice its interval",
            "interval": "1m",
            "input_series": [
                // Last success at time 0, every 10 minutes: late from minute 21.5 (twice the interval + 90 s).
                s("etcd_operator_backup_last_success_timestamp_seconds", operator("nightly"), "0x40"),
                s("etcd_operator_backup_interval_seconds", operator("nightly"), "600x40"),
                // Succeeds every minute.
                s("etcd_operator_backup_last_success_timestamp_seconds", operator("fresh"), "0+60x40"),
                s("etcd_operator_backup_interval_seconds", operator("fresh"), "600x40"),
                // One-shot: never late.
                s("etcd_operator_backup_last_success_timestamp_seconds", operator("once"), "0x40"),
                s("etcd_operator_backup_interval_seconds", operator("once"), "0x40"),
                // Every 10 s, seen by a scrape every minute: the newest success a scrape shows is
                // 50 s old, more than twice the interval, and nothing is late (seen on the real
                // stack: the age of a 10 s backup reached 27 s at a 30 s scrape interval).
                s("etcd_operator_backup_last_success_timestamp_seconds", operator("often"), "-50+60x40"),
                s("etcd_operator_backup_interval_seconds", operator("often"), "10x40"),
            ],
            "alert_rule_test": [
                { "eval_time": "22m", "alertname": "EtcdBackupTooOld", "exp_alerts": [] },
                {
                    "eval_time": "30m",
                    "alertname": "EtcdBackupTooOld",
                    "exp_alerts": [expect(&g, "EtcdBackupTooOld", &[warning, ns, ("name", "nightly")],
                        "EtcdBackup ns/nightly last succeeded 30m 0s ago")],
                },
            ],
        },
        {
            "name": "operator down",
            "interval": "1m",
            "input_series": [
                // Cluster ex: its operator scraped for 5 minutes, then scaled to 0 (its series go
                // stale); the members still answer.
                s("up", member("ex", "ex-a"), "1x20"),
                s("etcd_operator_cluster_managed", operator("ex"), "1x4 stale"),
                // Cluster kept: its operator replaced by another pod, which reports: never down.
                s("up", member("kept", "kept-a"), "1x20"),
                s("etcd_operator_cluster_managed", operator("kept"), "1x4 stale"),
                series(
                    "etcd_operator_cluster_managed",
                    &[("job", "etcd-operator"), ("namespace", "ns"), ("name", "kept"), ("pod", "etcd-operator-2"),
                      ("instance", "10.0.0.8:8080")],
                    "_x4 1x16",
                ),
                // Cluster gone: deleted with its operator; its members' series end too.
                s("up", member("gone", "gone-a"), "1x4 stale"),
                s("etcd_operator_cluster_managed", operator("gone"), "1x4 stale"),
                // Cluster never: no operator ever said it handles it; its member answers no scrape.
                s("up", member("never", "never-a"), "0x20"),
            ],
            "alert_rule_test": [
                // ex: stale from minute 5, pending until minute 10; never: firing from minute 5.
                {
                    "eval_time": "8m",
                    "alertname": "EtcdOperatorDown",
                    "exp_alerts": [expect(&g, "EtcdOperatorDown", &[warning, ns, ("name", "never")],
                        "No etcd operator reports on the etcd cluster ns/never")],
                },
                {
                    "eval_time": "11m",
                    "alertname": "EtcdOperatorDown",
                    "exp_alerts": [
                        expect(&g, "EtcdOperatorDown", &[warning, ns, ("name", "ex")],
                            "No etcd operator reports on the etcd cluster ns/ex"),
                        expect(&g, "EtcdOperatorDown", &[warning, ns, ("name", "never")],
                            "No etcd operator reports on the etcd cluster ns/never"),
                    ],
                },
            ],
        },
        {
            "name": "continuous archive behind",
            "interval": "1m",
            "input_series": [
                // Writes fail from minute 2 on: the newest durable change ages.
                s("etcd_operator_archive_lag_seconds", operator("behind"), "0 0 60+60x20"),
                // Current throughout.
                s("etcd_operator_archive_lag_seconds", operator("current"), "0x22"),
                // Behind for 3 minutes only, then current again.
                s("etcd_operator_archive_lag_seconds", operator("blip"), "0 400 460 520 0x18"),
            ],
            "alert_rule_test": [
                { "eval_time": "8m", "alertname": "EtcdBackupArchiveBehind", "exp_alerts": [] },
                {
                    "eval_time": "12m",
                    "alertname": "EtcdBackupArchiveBehind",
                    "exp_alerts": [expect(&g, "EtcdBackupArchiveBehind", &[warning, ns, ("name", "behind")],
                        "The continuous archive of EtcdBackup ns/behind is 11m 0s behind")],
                },
            ],
        },
        {
            "name": "member down, database near its quota, upgrade stopped",
            "interval": "1m",
            "input_series": [
                s("up", member("ex", "ex-a"), "1 0x10"),
                s("up", member("ex", "ex-b"), "1x11"),
                s("etcd_mvcc_db_total_size_in_bytes", member("ex", "ex-b"), "90x15"),
                s("etcd_server_quota_backend_bytes", member("ex", "ex-b"), "100x15"),
                s("etcd_mvcc_db_total_size_in_bytes", member("ex", "ex-a"), "50x15"),
                s("etcd_server_quota_backend_bytes", member("ex", "ex-a"), "100x15"),
                s("etcd_operator_cluster_waiting", with(operator("ex"), &[("reason", "UpgradeFailed")]), "1x5"),
                s("etcd_operator_cluster_waiting", with(operator("other"), &[("reason", "MemberUpgrading")]), "1x5"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "7m",
                    "alertname": "EtcdMemberDown",
                    "exp_alerts": [{
                        "exp_labels": {
                            "severity": "warning", "job": "etcd-members", "namespace": "ns", "name": "ex",
                            "pod": "ex-a", "instance": "10.0.0.1:2379",
                        },
                        "exp_annotations": {
                            "summary": "etcd member ex-a of cluster ns/ex is down",
                            "description": expand(&g, "EtcdMemberDown", "warning", "description",
                                &BTreeMap::from([("namespace", "ns"), ("name", "ex"), ("pod", "ex-a")])),
                        },
                    }],
                },
                {
                    "eval_time": "12m",
                    "alertname": "EtcdDatabaseNearQuota",
                    "exp_alerts": [expect(&g, "EtcdDatabaseNearQuota", &[warning, ns, ("name", "ex"), ("pod", "ex-b")],
                        "etcd member ex-b of cluster ns/ex uses 90% of its space quota")],
                },
                {
                    "eval_time": "3m",
                    "alertname": "EtcdUpgradeStuck",
                    "exp_alerts": [expect(&g, "EtcdUpgradeStuck", &[warning, ns, ("name", "ex")],
                        "etcd cluster ns/ex: the upgrade is stopped")],
                },
            ],
        },
    ]);
    let unit = json!({
        "rule_files": [rules.file_name().unwrap().to_str().unwrap()],
        "evaluation_interval": "1m",
        "tests": tests,
    });
    let path = dir.join("etcd-operator.rules.test.yaml");
    std::fs::write(&path, serde_yaml::to_string(&unit).unwrap()).unwrap();
    let out = run_promtool(&["test", "rules", path.to_str().unwrap()], &dir);
    assert!(out.contains("SUCCESS"), "{out}");
}

/// The other monitoring objects are there too, and parse as what they claim to be.
#[test]
fn monitoring_objects_parse_as_what_they_claim() {
    let objs = monitoring_objects();
    let kinds: Vec<_> = objs.iter().map(|o| o["kind"].as_str().unwrap()).collect();
    for want in ["PodMonitor", "PrometheusRule", "ConfigMap"] {
        assert!(kinds.contains(&want), "{want} missing: {kinds:?}");
    }
    let cm = objs.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value = serde_json::from_str(cm["data"]["etcd-operator.json"].as_str().unwrap()).unwrap();
    assert!(dashboard["panels"].as_array().unwrap().len() >= 10);
}

/// Runs grafana-schema on the files: whether it passed them, and what it printed.
fn run_grafana_schema(files: &[&Path]) -> (Option<i32>, String) {
    let out = Command::new(grafana_schema()).args(files).output().expect("running grafana-schema");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

/// The dashboard of `manifests --monitoring` and the chart's copy load in Grafana's dashboard
/// schema (strictly: no unknown field, every required one, enum values, each panel's options by
/// its panel type's schema, each query by Prometheus' query schema); and a broken copy is refused,
/// each fault named.
#[test]
fn monitoring_dashboard_loads_in_grafanas_schema() {
    let dir = work_dir("grafana-schema");
    let objs = monitoring_objects();
    let cm = objs.iter().find(|o| o["kind"] == "ConfigMap").expect("the dashboard's ConfigMap");
    let text = cm["data"]["etcd-operator.json"].as_str().expect("the dashboard in the ConfigMap");
    let generated = dir.join("manifests-dashboard.json");
    std::fs::write(&generated, text).expect("the dashboard file");
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../charts/etcd-operator/files/grafana-dashboard.json");
    let (code, out) = run_grafana_schema(&[&generated, &chart]);
    assert_eq!(code, Some(0), "grafana-schema refused the dashboard:\n{out}");
    assert_eq!(out.lines().filter(|l| l.ends_with(": ok")).count(), 2, "{out}");

    // A panel type that is no string, an unknown top-level field, a missing required one, a
    // legend display mode outside its enum, and an unknown field in a query.
    let mut broken: Value = serde_json::from_str(text).expect("the dashboard is JSON");
    broken["panels"][0]["type"] = json!(5);
    broken["refreshEvery"] = json!("1m");
    broken.as_object_mut().unwrap().remove("schemaVersion");
    broken["panels"][1]["options"]["legend"]["displayMode"] = json!("sideways");
    broken["panels"][2]["targets"][0]["expression"] = json!("up");
    let path = dir.join("broken-dashboard.json");
    std::fs::write(&path, serde_json::to_string_pretty(&broken).unwrap()).expect("the broken dashboard");
    let (code, out) = run_grafana_schema(&[&path]);
    assert_eq!(code, Some(1), "grafana-schema did not refuse the broken dashboard:\n{out}");
    for want in [
        "panels[0].type: json: cannot unmarshal number",
        "unexpected field 'refreshEvery'",
        "schemaVersion: required field is missing",
        "panels[1].options.legend.displayMode: \"sideways\" is not one of \"list\", \"table\", \"hidden\"",
        "panels[2].targets[0]",
        "unexpected field 'expression'",
    ] {
        assert!(out.contains(want), "grafana-schema did not say {want:?}:\n{out}");
    }
}

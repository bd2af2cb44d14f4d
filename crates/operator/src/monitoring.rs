//! What `etcd-operator manifests --monitoring` adds for users of the Prometheus Operator: a
//! PodMonitor for the etcd members, one for the operator, a PrometheusRule with the alerts, and a
//! Grafana dashboard in a ConfigMap. Pure builders from the install options to JSON values (the
//! `monitoring.coreos.com/v1` kinds are plain JSON here: no dependency on their Rust types).
//!
//! Every etcd series carries `namespace` and `name` (the EtcdCluster), like the operator's own
//! per-cluster series (`metrics.rs`), so rules and panels join the two on `(namespace, name)`.
//! Member series also carry `pod` (the member) and `job="etcd-members"`.

use serde_json::{Value, json};

use crate::OPERATOR_NAME;
use crate::manifests::Options;
use crate::naming::{APP_LABEL, CLUSTER_LABEL};

pub const API_VERSION: &str = "monitoring.coreos.com/v1";
/// `job` of the etcd members' series (set by the members' PodMonitor).
pub const MEMBERS_JOB: &str = "etcd-members";
/// `job` of the operator's own series.
pub const OPERATOR_JOB: &str = "etcd-operator";
/// Name of the etcd members' PodMonitor.
pub const MEMBERS_MONITOR: &str = "etcd-operator-members";
/// Label the Grafana sidecar looks for on dashboard ConfigMaps.
pub const DASHBOARD_LABEL: (&str, &str) = ("grafana_dashboard", "1");
/// File name of the dashboard in its ConfigMap.
pub const DASHBOARD_FILE: &str = "etcd-operator.json";

fn meta(name: &str, o: &Options) -> Value {
    json!({ "name": name, "namespace": o.namespace, "labels": crate::manifests::labels() })
}

/// The namespaces the operator manages: its own, or all of them when cluster-wide.
fn watched_namespaces(o: &Options) -> Value {
    if o.cluster_wide { json!({ "any": true }) } else { json!({ "matchNames": [o.namespace] }) }
}

// ----------------------------------------------------------------------------------------------
// PodMonitor: the etcd members
// ----------------------------------------------------------------------------------------------

/// Scrapes `/metrics` on every member's client port (plaintext, as the members serve it). The
/// pod label `etcd_cluster` becomes `name`, and `job` is [`MEMBERS_JOB`] whatever the
/// PodMonitor's own name and namespace.
pub fn members_pod_monitor(o: &Options) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": meta(MEMBERS_MONITOR, o),
        "spec": {
            "selector": {
                "matchLabels": { APP_LABEL.0: APP_LABEL.1 },
                "matchExpressions": [{ "key": CLUSTER_LABEL, "operator": "Exists" }],
            },
            "namespaceSelector": watched_namespaces(o),
            "podMetricsEndpoints": [{
                "port": "client",
                "path": "/metrics",
                "scheme": "http",
                "interval": "30s",
                "relabelings": [
                    {
                        "sourceLabels": [format!("__meta_kubernetes_pod_label_{CLUSTER_LABEL}")],
                        "targetLabel": "name",
                    },
                    { "targetLabel": "job", "replacement": MEMBERS_JOB },
                ],
            }],
        },
    })
}

// ----------------------------------------------------------------------------------------------
// PodMonitor: the operator
// ----------------------------------------------------------------------------------------------

/// Scrapes the operator's `/metrics` (the Deployment's `http` port). `honorLabels`: the
/// operator's series name the EtcdCluster's `namespace`, which must win over the target's (the
/// operator's own namespace).
pub fn operator_pod_monitor(o: &Options) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": meta(OPERATOR_NAME, o),
        "spec": {
            "selector": { "matchLabels": crate::manifests::labels() },
            "namespaceSelector": { "matchNames": [o.namespace] },
            "podMetricsEndpoints": [{
                "port": "http",
                "path": "/metrics",
                "interval": "30s",
                "honorLabels": true,
                "relabelings": [{ "targetLabel": "job", "replacement": OPERATOR_JOB }],
            }],
        },
    })
}

// ----------------------------------------------------------------------------------------------
// PrometheusRule: the alerts
// ----------------------------------------------------------------------------------------------

/// One alerting rule.
#[derive(Clone, Debug)]
pub struct Alert {
    pub name: &'static str,
    pub severity: &'static str,
    /// How long the condition must hold.
    pub for_: &'static str,
    pub expr: String,
    pub summary: &'static str,
    pub description: &'static str,
}

/// The operator's per-cluster series, aggregated over operator replicas and targets.
fn op(metric: &str) -> String {
    format!("max by (namespace, name) ({metric})")
}

/// Quorum of the desired size: `floor(size / 2) + 1`.
fn quorum() -> String {
    format!("(floor({} / 2) + 1)", op("etcd_operator_cluster_desired_size"))
}

/// Every alert, in the order of the rule group.
pub fn alerts() -> Vec<Alert> {
    let m = format!(r#"job="{MEMBERS_JOB}""#);
    let ready = op("etcd_operator_cluster_ready_members");
    let desired = op("etcd_operator_cluster_desired_size");
    vec![
        Alert {
            name: "EtcdNoLeader",
            severity: "critical",
            for_: "1m",
            expr: format!("max by (namespace, name, pod) (etcd_server_has_leader{{{m}}}) == 0"),
            summary: "etcd member {{ $labels.pod }} of cluster {{ $labels.namespace }}/{{ $labels.name }} \
                      has no leader",
            description: "Member {{ $labels.pod }} of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} \
                          has seen no leader for a minute: it serves no writes and no linearizable reads. When a \
                          majority of the members say so, the cluster has lost its quorum.",
        },
        Alert {
            name: "EtcdQuorumAtRisk",
            severity: "warning",
            for_: "10m",
            expr: format!("{ready} < {desired}\nand\n{ready} >= {}", quorum()),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} is down to {{ $value }} ready members",
            description: "Fewer members of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} are ready \
                          than its spec.size, though still a quorum: one more lost member may stop it. See the \
                          EtcdCluster's conditions and Events.",
        },
        Alert {
            name: "EtcdQuorumAtRisk",
            severity: "critical",
            for_: "5m",
            expr: format!("{ready} < {}\nand\n{desired} > 0", quorum()),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} has lost its quorum \
                      (ready members: {{ $value }})",
            description: "Fewer members of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} are ready \
                          than a quorum of its spec.size: it accepts no writes. The operator changes no membership \
                          without a quorum; see the EtcdCluster's conditions, its Events and spec.recovery.",
        },
        Alert {
            name: "EtcdMemberDown",
            severity: "warning",
            for_: "5m",
            expr: format!("up{{{m}}} == 0"),
            summary: "etcd member {{ $labels.pod }} of cluster {{ $labels.namespace }}/{{ $labels.name }} is down",
            description: "Prometheus cannot scrape member {{ $labels.pod }} of the etcd cluster \
                          {{ $labels.namespace }}/{{ $labels.name }} on its client port.",
        },
        Alert {
            name: "EtcdBackupTooOld",
            severity: "warning",
            for_: "5m",
            expr: format!(
                "time() - {}\n  > 2 * {}",
                op("etcd_operator_backup_last_success_timestamp_seconds"),
                op("etcd_operator_backup_interval_seconds > 0")
            ),
            summary: "EtcdBackup {{ $labels.namespace }}/{{ $labels.name }} last succeeded \
                      {{ $value | humanizeDuration }} ago",
            description: "More than twice backupIntervalInSecond has passed since the last successful backup of \
                          the EtcdBackup {{ $labels.namespace }}/{{ $labels.name }}. See its status.reason and its \
                          BackupFailed Events.",
        },
        Alert {
            name: "EtcdDatabaseNearQuota",
            severity: "warning",
            for_: "10m",
            expr: format!(
                "max by (namespace, name, pod) (etcd_mvcc_db_total_size_in_bytes{{{m}}})\n  \
                 / max by (namespace, name, pod) (etcd_server_quota_backend_bytes{{{m}}})\n  > 0.8"
            ),
            summary: "etcd member {{ $labels.pod }} of cluster {{ $labels.namespace }}/{{ $labels.name }} \
                      uses {{ $value | humanizePercentage }} of its space quota",
            description: "The database of member {{ $labels.pod }} of the etcd cluster \
                          {{ $labels.namespace }}/{{ $labels.name }} is above 80% of its quota. At the quota etcd \
                          raises a NOSPACE alarm and refuses writes: compact and defragment, or raise the quota.",
        },
        Alert {
            name: "EtcdAlarmActive",
            severity: "critical",
            for_: "1m",
            // The operator's gauge (from etcd's alarm list) or etcd's own per-member gauge, one
            // alert per cluster and alarm either way.
            expr: format!(
                "max by (namespace, name, alarm) (etcd_operator_alarms{{alarm=~\"NOSPACE|CORRUPT\"}}) > 0\nor\n\
                 max by (namespace, name, alarm) (label_replace(etcd_debugging_server_alarms{{{m}, \
                 alarm_type=~\"NOSPACE|CORRUPT\"}}, \"alarm\", \"$1\", \"alarm_type\", \"(.+)\")) > 0"
            ),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} has a {{ $labels.alarm }} alarm",
            description: "The etcd cluster {{ $labels.namespace }}/{{ $labels.name }} reports the alarm \
                          {{ $labels.alarm }}. NOSPACE: the database reached its quota and etcd takes only reads \
                          and deletes until space is freed and the alarm is disarmed. CORRUPT: members disagree \
                          on their data.",
        },
        Alert {
            name: "EtcdFrequentLeaderChanges",
            severity: "warning",
            for_: "5m",
            expr: format!("max by (namespace, name) (increase(etcd_server_leader_changes_seen_total{{{m}}}[1h])) > 3"),
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }} changed leader \
                      {{ $value | humanize }} times in an hour",
            description: "The etcd cluster {{ $labels.namespace }}/{{ $labels.name }} elects new leaders often: \
                          slow disks (WAL fsync), an overloaded member or trouble on the network between members.",
        },
        Alert {
            name: "EtcdUpgradeStuck",
            severity: "warning",
            for_: "1m",
            expr: op(r#"etcd_operator_cluster_waiting{reason="UpgradeFailed"}"#) + " == 1",
            summary: "etcd cluster {{ $labels.namespace }}/{{ $labels.name }}: the upgrade is stopped",
            description: "An upgraded member of the etcd cluster {{ $labels.namespace }}/{{ $labels.name }} did \
                          not come back healthy in time, so the operator stopped the rolling upgrade (reason \
                          UpgradeFailed). The EtcdCluster's conditions and Events name the member and why.",
        },
    ]
}

/// The rule groups, as Prometheus reads them from a rules file (and as a PrometheusRule's spec).
pub fn rule_groups() -> Value {
    let rules: Vec<Value> = alerts()
        .into_iter()
        .map(|a| {
            json!({
                "alert": a.name,
                "expr": a.expr,
                "for": a.for_,
                "labels": { "severity": a.severity },
                "annotations": { "summary": a.summary, "description": a.description },
            })
        })
        .collect();
    json!({ "groups": [{ "name": "etcd-operator", "rules": rules }] })
}

pub fn prometheus_rule(o: &Options) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "PrometheusRule",
        "metadata": meta(OPERATOR_NAME, o),
        "spec": rule_groups(),
    })
}

// ----------------------------------------------------------------------------------------------
// Grafana dashboard
// ----------------------------------------------------------------------------------------------

/// Label matchers of the dashboard's variables, for etcd's series and the operator's.
const ETCD_SEL: &str = r#"job="etcd-members", namespace=~"$namespace", name=~"$cluster""#;
const OP_SEL: &str = r#"namespace=~"$namespace", name=~"$cluster""#;

/// One time-series panel: title, unit, and (query, legend) pairs.
struct Panel {
    title: &'static str,
    unit: &'static str,
    queries: Vec<(String, &'static str)>,
}

fn panels() -> Vec<Panel> {
    let (e, o) = (ETCD_SEL, OP_SEL);
    // `{namespace}` for the dashboard's namespace variable alone (backups are not per cluster).
    let n = r#"namespace=~"$namespace""#;
    let rate = |metric: &str| format!("rate({metric}{{{e}}}[$__rate_interval])");
    let p99 = |metric: &str| format!("histogram_quantile(0.99, sum by (namespace, name, pod, le) ({}))", rate(metric));
    let per_cluster = |agg: &str, metric: &str, sel: &str| format!("{agg} by (namespace, name) ({metric}{{{sel}}})");
    vec![
        Panel {
            title: "Members ready vs desired",
            unit: "short",
            queries: vec![
                (per_cluster("max", "etcd_operator_cluster_ready_members", o), "{{namespace}}/{{name}} ready"),
                (per_cluster("max", "etcd_operator_cluster_desired_size", o), "{{namespace}}/{{name}} desired"),
            ],
        },
        Panel {
            title: "Leader changes (per hour) and leader present",
            unit: "short",
            queries: vec![
                (format!("increase(etcd_server_leader_changes_seen_total{{{e}}}[1h])"), "{{pod}} leader changes"),
                (per_cluster("min", "etcd_server_has_leader", e), "{{namespace}}/{{name}} has leader"),
            ],
        },
        Panel {
            title: "Database size vs quota",
            unit: "bytes",
            queries: vec![
                (format!("etcd_mvcc_db_total_size_in_bytes{{{e}}}"), "{{pod}} allocated"),
                (format!("etcd_mvcc_db_total_size_in_use_in_bytes{{{e}}}"), "{{pod}} in use"),
                (per_cluster("max", "etcd_server_quota_backend_bytes", e), "{{namespace}}/{{name}} quota"),
            ],
        },
        Panel {
            title: "Proposals",
            unit: "short",
            queries: vec![
                (rate("etcd_server_proposals_committed_total"), "{{pod}} committed/s"),
                (rate("etcd_server_proposals_applied_total"), "{{pod}} applied/s"),
                (format!("etcd_server_proposals_pending{{{e}}}"), "{{pod}} pending"),
                (rate("etcd_server_proposals_failed_total"), "{{pod}} failed/s"),
            ],
        },
        Panel {
            title: "WAL fsync and backend commit p99",
            unit: "s",
            queries: vec![
                (p99("etcd_disk_wal_fsync_duration_seconds_bucket"), "{{pod}} WAL fsync"),
                (p99("etcd_disk_backend_commit_duration_seconds_bucket"), "{{pod}} backend commit"),
            ],
        },
        Panel {
            title: "gRPC requests (unary)",
            unit: "reqps",
            queries: vec![(
                format!(
                    "sum by (namespace, name, grpc_code) \
                     (rate(grpc_server_handled_total{{{e}, grpc_type=\"unary\"}}[$__rate_interval]))"
                ),
                "{{namespace}}/{{name}} {{grpc_code}}",
            )],
        },
        Panel {
            title: "Backup age",
            unit: "s",
            queries: vec![
                (
                    format!(
                        "time() - {}",
                        per_cluster("max", "etcd_operator_backup_last_success_timestamp_seconds", n)
                    ),
                    "EtcdBackup {{namespace}}/{{name}}",
                ),
                (
                    format!("2 * max by (namespace, name) (etcd_operator_backup_interval_seconds{{{n}}} > 0)"),
                    "EtcdBackup {{namespace}}/{{name}} alert threshold",
                ),
            ],
        },
        Panel {
            title: "Defragmentations (per hour)",
            unit: "short",
            queries: vec![(format!("increase(etcd_operator_defrag_total{{{o}}}[1h])"), "{{member}}")],
        },
        Panel {
            title: "Bytes reclaimed by defragmentation (per hour)",
            unit: "bytes",
            queries: vec![(
                format!("increase(etcd_operator_defrag_reclaimed_bytes_total{{{o}}}[1h])"),
                "{{namespace}}/{{name}}",
            )],
        },
        Panel {
            title: "Alarms",
            unit: "short",
            queries: vec![
                (
                    format!("max by (namespace, name, alarm) (etcd_operator_alarms{{{o}}})"),
                    "{{namespace}}/{{name}} {{alarm}}",
                ),
                (format!("etcd_debugging_server_alarms{{{e}}}"), "{{pod}} reports {{alarm_type}}"),
                (
                    format!("increase(etcd_operator_alarm_recoveries_total{{{o}}}[1h])"),
                    "{{namespace}}/{{name}} recoveries/h",
                ),
            ],
        },
        Panel {
            title: "What the operator waits for",
            unit: "short",
            queries: vec![(
                format!("max by (namespace, name, reason) (etcd_operator_cluster_waiting{{{o}}})"),
                "{{namespace}}/{{name}} {{reason}}",
            )],
        },
    ]
}

/// Every PromQL query of the dashboard.
pub fn dashboard_queries() -> Vec<String> {
    panels().into_iter().flat_map(|p| p.queries.into_iter().map(|(q, _)| q)).collect()
}

/// The Grafana dashboard (JSON model): a data source variable, namespace and cluster variables,
/// and the panels two to a row.
pub fn dashboard() -> Value {
    let ds = json!({ "type": "prometheus", "uid": "${datasource}" });
    let panels: Vec<Value> = panels()
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let targets: Vec<Value> = p
                .queries
                .into_iter()
                .zip('A'..)
                .map(|((expr, legend), ref_id)| {
                    json!({ "datasource": ds, "expr": expr, "legendFormat": legend, "refId": ref_id.to_string() })
                })
                .collect();
            json!({
                "id": i + 1,
                "type": "timeseries",
                "title": p.title,
                "datasource": ds,
                "gridPos": { "h": 8, "w": 12, "x": (i % 2) * 12, "y": (i / 2) * 8 },
                "fieldConfig": { "defaults": { "unit": p.unit }, "overrides": [] },
                "options": { "legend": { "displayMode": "list", "placement": "bottom" } },
                "targets": targets,
            })
        })
        .collect();
    let variable = |name: &str, label: &str, query: &str| {
        json!({
            "name": name,
            "label": label,
            "type": "query",
            "datasource": ds,
            "query": { "query": query, "refId": name },
            "definition": query,
            "refresh": 2,
            "includeAll": true,
            "multi": true,
            "allValue": ".*",
            "current": { "text": "All", "value": "$__all" },
            "sort": 1,
        })
    };
    json!({
        "title": "etcd clusters (etcd-operator)",
        "uid": "etcd-operator",
        "tags": ["etcd", "etcd-operator"],
        "schemaVersion": 39,
        "editable": true,
        "refresh": "30s",
        "time": { "from": "now-6h", "to": "now" },
        "templating": {
            "list": [
                { "name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus" },
                variable("namespace", "Namespace", "label_values(etcd_operator_cluster_desired_size, namespace)"),
                variable(
                    "cluster",
                    "EtcdCluster",
                    "label_values(etcd_operator_cluster_desired_size{namespace=~\"$namespace\"}, name)",
                ),
            ],
        },
        "panels": panels,
    })
}

/// The dashboard in a ConfigMap the Grafana sidecar picks up (label [`DASHBOARD_LABEL`]).
pub fn dashboard_config_map(o: &Options) -> Value {
    let mut labels = crate::manifests::labels();
    labels.insert(DASHBOARD_LABEL.0.into(), DASHBOARD_LABEL.1.into());
    let text = serde_json::to_string_pretty(&dashboard()).expect("JSON values serialize");
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": format!("{OPERATOR_NAME}-dashboard"), "namespace": o.namespace, "labels": labels },
        "data": { DASHBOARD_FILE: text },
    })
}

/// Every monitoring object, in apply order.
pub fn objects(o: &Options) -> Vec<Value> {
    vec![members_pod_monitor(o), operator_pod_monitor(o), prometheus_rule(o), dashboard_config_map(o)]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn opts(cluster_wide: bool) -> Options {
        Options {
            namespace: "etcd".into(),
            image: "img:1".into(),
            cluster_wide,
            replicas: 1,
            with_crds: false,
            validation_rules: true,
            monitoring: true,
        }
    }

    /// Metric names etcd itself exports, with where etcd defines them (etcd-io/etcd, 3.5-3.7):
    const ETCD_METRICS: &[&str] = &[
        // server/etcdserver/metrics.go
        "etcd_server_has_leader",
        "etcd_server_leader_changes_seen_total",
        "etcd_server_proposals_committed_total",
        "etcd_server_proposals_applied_total",
        "etcd_server_proposals_pending",
        "etcd_server_proposals_failed_total",
        "etcd_server_quota_backend_bytes",
        // server/storage/mvcc/metrics.go (3.4+; before: etcd_debugging_mvcc_db_total_size_in_bytes)
        "etcd_mvcc_db_total_size_in_bytes",
        "etcd_mvcc_db_total_size_in_use_in_bytes",
        // server/storage/wal/metrics.go
        "etcd_disk_wal_fsync_duration_seconds_bucket",
        // server/storage/backend/metrics.go
        "etcd_disk_backend_commit_duration_seconds_bucket",
        // server/etcdserver/apply/metrics.go (labels server_id, alarm_type; a debugging metric
        // that etcd counts up and down as alarms are applied, so the operator's gauge leads)
        "etcd_debugging_server_alarms",
        // go-grpc-prometheus, registered by etcd's gRPC server (server/etcdserver/api/v3rpc/grpc.go)
        "grpc_server_handled_total",
    ];
    /// Series Prometheus makes itself for every target.
    const SCRAPE_METRICS: &[&str] = &["up"];

    /// Every series name the operator's registry exports: counters get `_total`, histograms
    /// `_bucket`, `_sum` and `_count`.
    fn operator_metrics() -> BTreeSet<String> {
        let text = crate::metrics::Metrics::with_every_series().encode();
        let mut names = BTreeSet::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
            let mut it = rest.split_whitespace();
            let (Some(name), Some(kind)) = (it.next(), it.next()) else { continue };
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for s in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{s}"));
                    }
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        }
        names
    }

    /// The metric names a PromQL expression selects: identifiers outside strings, label
    /// matchers `{}`, ranges `[]` and the label lists of `by`/`without`/`on`/`ignoring`/
    /// `group_left`/`group_right`, that are neither keywords, aggregations nor function calls.
    fn metric_names(expr: &str) -> BTreeSet<String> {
        const KEYWORDS: &[&str] = &[
            "and",
            "or",
            "unless",
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
            "bool",
            "offset",
            // Aggregations, which may be followed by `by (...)` rather than `(`.
            "sum",
            "min",
            "max",
            "avg",
            "group",
            "stddev",
            "stdvar",
            "count",
            "count_values",
            "bottomk",
            "topk",
            "quantile",
            "limitk",
            "limit_ratio",
        ];
        const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
        let b = expr.as_bytes();
        let mut out = BTreeSet::new();
        let mut i = 0;
        let mut skip_list = false;
        let skip_to = |i: usize, close: u8| i + b[i..].iter().position(|&c| c == close).expect("balanced") + 1;
        while i < b.len() {
            let c = b[i];
            if c == b'"' {
                i = skip_to(i + 1, b'"');
            } else if c == b'{' {
                i = skip_to(i, b'}');
            } else if c == b'[' {
                i = skip_to(i, b']');
            } else if c == b'(' && skip_list {
                i = skip_to(i, b')');
                skip_list = false;
            } else if c.is_ascii_alphabetic() || c == b'_' || c == b':' {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':') {
                    i += 1;
                }
                let word = &expr[start..i];
                let next = expr[i..].trim_start().chars().next();
                skip_list = LABEL_LISTS.contains(&word);
                if !KEYWORDS.contains(&word) && next != Some('(') {
                    out.insert(word.to_string());
                }
            } else if c.is_ascii_digit() || c == b'.' {
                // A number (or a duration such as 1h outside a range): skip it whole.
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            } else {
                i += 1;
            }
        }
        out
    }

    #[test]
    fn the_metric_name_scanner_finds_names_only() {
        let names = metric_names(
            r#"max by (namespace, name) (increase(a_total{job="x", le=~"y"}[1h])) > 3 * 0.8
               or on (pod) group_left (z) label_replace(b, "c", "$1", "d", "(.+)") and bool time() - c:rule"#,
        );
        assert_eq!(names, BTreeSet::from(["a_total".to_string(), "b".into(), "c:rule".into()]));
    }

    #[test]
    fn every_metric_the_rules_and_the_dashboard_use_is_exported_by_someone() {
        let operator = operator_metrics();
        assert!(operator.contains("etcd_operator_cluster_ready_members"), "{operator:?}");
        assert!(operator.contains("etcd_operator_defrag_total"), "{operator:?}");
        assert!(operator.contains("etcd_operator_reconcile_duration_seconds_bucket"), "{operator:?}");
        let known = |n: &str| operator.contains(n) || ETCD_METRICS.contains(&n) || SCRAPE_METRICS.contains(&n);
        let exprs = alerts().into_iter().map(|a| a.expr).chain(dashboard_queries());
        let mut used = BTreeSet::new();
        for expr in exprs {
            for name in metric_names(&expr) {
                assert!(known(&name), "{name} (in `{expr}`) is neither the operator's (metrics.rs) nor etcd's");
                used.insert(name);
            }
        }
        // The list of etcd names holds no name nothing uses (it would hide a typo above).
        for n in ETCD_METRICS.iter().chain(SCRAPE_METRICS) {
            assert!(used.contains(*n), "{n} is listed but unused");
        }
    }

    #[test]
    fn every_alert_has_for_severity_and_names_namespace_and_cluster() {
        let groups = rule_groups();
        let rules = groups["groups"][0]["rules"].as_array().unwrap();
        assert_eq!(rules.len(), alerts().len());
        for r in rules {
            let name = r["alert"].as_str().unwrap();
            assert!(r["for"].as_str().is_some_and(|f| !f.is_empty()), "{name}");
            assert!(["warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap()), "{name}");
            for a in ["summary", "description"] {
                let text = r["annotations"][a].as_str().unwrap();
                assert!(text.contains("{{ $labels.namespace }}/{{ $labels.name }}"), "{name} {a}: {text}");
            }
        }
        let quorum: Vec<_> = rules.iter().filter(|r| r["alert"] == "EtcdQuorumAtRisk").collect();
        let severities: Vec<_> = quorum.iter().map(|r| r["labels"]["severity"].as_str().unwrap()).collect();
        assert_eq!(severities, ["warning", "critical"]);
    }

    #[test]
    fn member_monitor_follows_the_install_scope_and_the_member_pods_labels() {
        let m = members_pod_monitor(&opts(false));
        assert_eq!(m["metadata"]["namespace"], "etcd");
        assert_eq!(m["spec"]["namespaceSelector"], json!({ "matchNames": ["etcd"] }));
        assert_eq!(members_pod_monitor(&opts(true))["spec"]["namespaceSelector"], json!({ "any": true }));
        // The selector matches what pod_spec puts on member pods, and the port is their client port.
        let sel = &m["spec"]["selector"];
        let pod_labels = crate::pod_spec::selector_labels("ex");
        for (k, v) in sel["matchLabels"].as_object().unwrap() {
            assert_eq!(pod_labels.get(k).map(String::as_str), v.as_str(), "{k}");
        }
        assert!(pod_labels.contains_key(sel["matchExpressions"][0]["key"].as_str().unwrap()));
        let ep = &m["spec"]["podMetricsEndpoints"][0];
        assert_eq!(ep["port"], "client");
        assert_eq!(ep["relabelings"][0]["sourceLabels"][0], "__meta_kubernetes_pod_label_etcd_cluster");
    }

    #[test]
    fn operator_monitor_scrapes_the_deployments_http_port_with_its_labels() {
        let m = operator_pod_monitor(&opts(true));
        let d = crate::manifests::deployment(&opts(true));
        let tpl = d.spec.unwrap().template;
        let pod_labels = tpl.metadata.unwrap().labels.unwrap();
        for (k, v) in m["spec"]["selector"]["matchLabels"].as_object().unwrap() {
            assert_eq!(pod_labels.get(k).map(String::as_str), v.as_str(), "{k}");
        }
        let port = &tpl.spec.unwrap().containers[0].ports.clone().unwrap()[0];
        assert_eq!(port.name.as_deref(), Some("http"));
        assert_eq!(port.container_port, crate::manifests::HTTP_PORT);
        let ep = &m["spec"]["podMetricsEndpoints"][0];
        assert_eq!(ep["port"], "http");
        assert_eq!(ep["honorLabels"], true);
    }

    #[test]
    fn dashboard_has_the_panels_and_a_labelled_config_map() {
        let d = dashboard();
        let panels = d["panels"].as_array().unwrap();
        let titles: Vec<_> = panels.iter().map(|p| p["title"].as_str().unwrap()).collect();
        for want in [
            "Members ready",
            "Leader changes",
            "quota",
            "Proposals",
            "fsync",
            "gRPC",
            "Backup age",
            "Defrag",
            "reclaimed",
            "Alarms",
        ] {
            assert!(titles.iter().any(|t| t.contains(want)), "no panel for {want}: {titles:?}");
        }
        let ids: BTreeSet<_> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
        assert_eq!(ids.len(), panels.len());
        for p in panels {
            let g = &p["gridPos"];
            assert!(g["x"].as_u64().unwrap() + g["w"].as_u64().unwrap() <= 24, "{p}");
            assert!(!p["targets"].as_array().unwrap().is_empty());
        }
        let cm = dashboard_config_map(&opts(false));
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
        let text = cm["data"][DASHBOARD_FILE].as_str().unwrap();
        assert_eq!(serde_json::from_str::<Value>(text).unwrap(), d);
    }

    #[test]
    fn monitoring_objects_come_only_with_the_flag() {
        let kinds = |o: &Options| -> Vec<String> {
            crate::manifests::objects(o).unwrap().iter().map(|v| v["kind"].as_str().unwrap().to_string()).collect()
        };
        let with = kinds(&opts(false));
        assert_eq!(with[with.len() - 4..], ["PodMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"]);
        let without = kinds(&Options { monitoring: false, ..opts(false) });
        assert_eq!(without.len(), with.len() - 4);
        assert!(!without.iter().any(|k| k == "PodMonitor" || k == "PrometheusRule" || k == "ConfigMap"));
    }
}

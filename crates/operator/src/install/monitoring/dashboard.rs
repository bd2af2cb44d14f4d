//! The Grafana dashboard (JSON model) and the ConfigMap the Grafana sidecar picks up. Pure.

use serde_json::{Value, json};

use super::{DASHBOARD_FILE, DASHBOARD_LABEL, Options};
use crate::OPERATOR_NAME;

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
                    format!("2 * max by (namespace, name) (etcd_operator_backup_interval_seconds{{{n}}} > 0) + 90"),
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
                // etcd's own gauge counts activations, and may stay above 0 after a disarm.
                (format!("etcd_debugging_server_alarms{{{e}}}"), "{{pod}} counted {{alarm_type}} of {{server_id}}"),
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
                // Grafana's schema for timeseries panels requires the whole legend and tooltip
                // (hack/grafana-schema checks it); these are Grafana's defaults.
                "options": {
                    "legend": { "displayMode": "list", "placement": "bottom", "showLegend": true, "calcs": [] },
                    "tooltip": { "mode": "single", "sort": "none" },
                },
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
        // Required by the schema; Grafana adds its built-in annotations query to an empty list.
        "annotations": { "list": [] },
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
    let mut labels = crate::naming::operator_labels();
    labels.insert(DASHBOARD_LABEL.0.into(), DASHBOARD_LABEL.1.into());
    let text = serde_json::to_string_pretty(&dashboard()).expect("JSON values serialize");
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": { "name": format!("{OPERATOR_NAME}-dashboard"), "namespace": o.namespace, "labels": labels },
        "data": { DASHBOARD_FILE: text },
    })
}

//! Tests: every metric the rules and panels use is exported by the operator or etcd; the
//! objects follow the install options.

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
        metrics_auth: true,
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
    let text = crate::runtime::metrics::Metrics::with_every_series().encode();
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
            assert!(known(&name), "{name} (in `{expr}`) is neither the operator's (metrics) nor etcd's");
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
    let pod_labels = crate::naming::selector_labels("ex");
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
    let d = crate::install::manifests::deployment(&opts(true));
    let tpl = d.spec.unwrap().template;
    let pod_labels = tpl.metadata.unwrap().labels.unwrap();
    for (k, v) in m["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(pod_labels.get(k).map(String::as_str), v.as_str(), "{k}");
    }
    let port = &tpl.spec.unwrap().containers[0].ports.clone().unwrap()[0];
    assert_eq!(port.name.as_deref(), Some("http"));
    assert_eq!(port.container_port, crate::install::manifests::HTTP_PORT);
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
        crate::install::manifests::objects(o).unwrap().iter().map(|v| v["kind"].as_str().unwrap().to_string()).collect()
    };
    let with = kinds(&opts(false));
    assert_eq!(with[with.len() - 4..], ["PodMonitor", "PodMonitor", "PrometheusRule", "ConfigMap"]);
    let without = kinds(&Options { monitoring: false, ..opts(false) });
    assert_eq!(without.len(), with.len() - 8, "the reader's 4 objects and the 4 above");
    assert!(!without.iter().any(|k| k == "PodMonitor" || k == "PrometheusRule" || k == "ConfigMap"));
    let open = kinds(&Options { metrics_auth: false, ..opts(false) });
    assert_eq!(open.len(), with.len() - 4, "no reader when /metrics is open");
}

/// With `--metrics-auth=kubernetes` the operator's PodMonitor sends the token of a
/// ServiceAccount allowed only `get /metrics`; without, it sends none.
#[test]
fn the_operator_pod_monitor_sends_the_metrics_readers_token() {
    let ep = &operator_pod_monitor(&opts(false))["spec"]["podMetricsEndpoints"][0];
    assert_eq!(ep["authorization"]["type"], "Bearer");
    assert_eq!(ep["authorization"]["credentials"]["name"], METRICS_READER);
    let reader = metrics_reader(&opts(false));
    let secret = reader.iter().find(|o| o["kind"] == "Secret").unwrap();
    assert_eq!(secret["type"], "kubernetes.io/service-account-token");
    assert_eq!(secret["metadata"]["annotations"]["kubernetes.io/service-account.name"], METRICS_READER);
    let role = reader.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    assert_eq!(role["rules"], json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]));
    let binding = reader.iter().find(|o| o["kind"] == "ClusterRoleBinding").unwrap();
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], METRICS_READER);
    let open = Options { metrics_auth: false, ..opts(false) };
    assert!(operator_pod_monitor(&open)["spec"]["podMetricsEndpoints"][0].get("authorization").is_none());
}

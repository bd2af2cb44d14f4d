//! What `etcd-operator manifests --monitoring` adds for users of the Prometheus Operator: a
//! PodMonitor for the etcd members, one for the operator, a PrometheusRule with the alerts, and a
//! Grafana dashboard in a ConfigMap. Pure builders from the install options to JSON values (the
//! `monitoring.coreos.com/v1` kinds are plain JSON here: no dependency on their Rust types).
//!
//! Every etcd series carries `namespace` and `name` (the EtcdCluster), like the operator's own
//! per-cluster series (`metrics`), so rules and panels join the two on `(namespace, name)`.
//! Member series also carry `pod` (the member) and `job="etcd-members"`.
//!
//! With `--metrics-auth=kubernetes` (the default) the operator's `/metrics` needs a token allowed
//! to get it: the objects then also hold a ServiceAccount `etcd-operator-metrics-reader` whose
//! one right is `get /metrics` (a ClusterRole: it is a non-resource URL), its token Secret, and
//! the operator's PodMonitor sends that token. The token is only worth the metrics, so it may
//! cross the pod network in plaintext like the metrics themselves.
//!
//! Here: the two PodMonitors and the reader; the PrometheusRule is in `alerts`, the dashboard in
//! `dashboard`.

mod alerts;
mod dashboard;
#[cfg(test)]
mod tests;

pub use alerts::{Alert, alerts, prometheus_rule, rule_groups};
pub use dashboard::{dashboard, dashboard_config_map, dashboard_queries};

use serde_json::{Value, json};

use crate::OPERATOR_NAME;
use crate::install::Options;
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
    json!({ "name": name, "namespace": o.namespace, "labels": crate::naming::operator_labels() })
}

/// The namespaces the operator manages: its own, or all of them when cluster-wide.
fn watched_namespaces(o: &Options) -> Value {
    if o.cluster_wide { json!({ "any": true }) } else { json!({ "matchNames": [o.namespace] }) }
}

// PodMonitor: the etcd members

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

// PodMonitor: the operator

/// Scrapes the operator's `/metrics` (the Deployment's `http` port). `honorLabels`: the
/// operator's series name the EtcdCluster's `namespace`, which must win over the target's (the
/// operator's own namespace).
pub fn operator_pod_monitor(o: &Options) -> Value {
    let mut endpoint = json!({
        "port": "http",
        "path": "/metrics",
        "interval": "30s",
        "honorLabels": true,
        "relabelings": [{ "targetLabel": "job", "replacement": OPERATOR_JOB }],
    });
    if o.metrics_auth {
        endpoint["authorization"] =
            json!({ "type": "Bearer", "credentials": { "name": METRICS_READER, "key": "token" } });
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "PodMonitor",
        "metadata": meta(OPERATOR_NAME, o),
        "spec": {
            "selector": { "matchLabels": crate::naming::operator_labels() },
            "namespaceSelector": { "matchNames": [o.namespace] },
            "podMetricsEndpoints": [endpoint],
        },
    })
}

/// The ServiceAccount, its token Secret and Secret name, whose token the operator's PodMonitor
/// sends (`--metrics-auth=kubernetes`).
pub const METRICS_READER: &str = "etcd-operator-metrics-reader";

/// The reader of `/metrics`: a ServiceAccount allowed nothing but `get /metrics` (ClusterRole
/// and binding named after the install's namespace, as the operator's own), and its
/// long-lived token Secret (filled in by Kubernetes' token controller).
pub fn metrics_reader(o: &Options) -> Vec<Value> {
    let rbac = "rbac.authorization.k8s.io/v1";
    let cluster_name = format!("{METRICS_READER}-{}", o.namespace);
    let labels = crate::naming::operator_labels();
    vec![
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(METRICS_READER, o) }),
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": METRICS_READER,
                "namespace": o.namespace,
                "labels": labels,
                "annotations": { "kubernetes.io/service-account.name": METRICS_READER },
            },
            "type": "kubernetes.io/service-account-token",
        }),
        json!({
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": { "name": cluster_name, "labels": labels },
            "rules": [{ "nonResourceURLs": [crate::runtime::metrics_auth::PATH], "verbs": ["get"] }],
        }),
        json!({
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": { "name": cluster_name, "labels": labels },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_name },
            "subjects": [{ "kind": "ServiceAccount", "name": METRICS_READER, "namespace": o.namespace }],
        }),
    ]
}

/// Every monitoring object, in apply order.
pub fn objects(o: &Options) -> Vec<Value> {
    let mut out = if o.metrics_auth { metrics_reader(o) } else { vec![] };
    out.extend([members_pod_monitor(o), operator_pod_monitor(o), prometheus_rule(o), dashboard_config_map(o)]);
    out
}

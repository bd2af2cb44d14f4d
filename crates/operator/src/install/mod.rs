//! Install artefacts: what `etcd-operator manifests`/`crds`/`bundle` print and what the
//! operator installs or checks at start-up (CRDs, RBAC, the OLM bundle, monitoring objects).

pub mod crd_install;
pub mod crds;
pub mod manifests;
pub mod monitoring;
pub mod olm_bundle;
pub mod permissions;
pub mod rbac;

/// What `etcd-operator manifests` renders (`manifests`, `monitoring`).
#[derive(Clone, Debug)]
pub struct Options {
    pub namespace: String,
    pub image: String,
    pub cluster_wide: bool,
    pub replicas: i32,
    /// Include the CRDs (the operator can also install them itself at start-up).
    pub with_crds: bool,
    /// CRDs with their CEL validation rules (Kubernetes 1.25+).
    pub validation_rules: bool,
    /// Add the Prometheus Operator objects and the Grafana dashboard (`monitoring/`).
    pub monitoring: bool,
    /// `--metrics-auth=kubernetes`: `/metrics` only for a token allowed to get it (the review
    /// permissions of `rbac::METRICS_AUTH_PERMISSIONS` in the ClusterRole).
    pub metrics_auth: bool,
}

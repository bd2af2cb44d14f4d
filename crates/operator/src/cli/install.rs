//! `crds`, `manifests`, `bundle`: what installs the operator, printed or written.

use clap::Args;
use etcd_operator::{default_image, install::crds, install::manifests};

#[derive(Args, Debug)]
pub struct BundleArgs {
    /// Directory of the bundle (its `manifests/` and `metadata/` are replaced).
    #[arg(long, default_value = "bundle")]
    output_dir: std::path::PathBuf,
    /// Operator image.
    #[arg(long, default_value_t = default_image())]
    image: String,
}

#[derive(Args, Debug)]
pub struct CrdArgs {
    /// Leave out the CEL validation rules (`x-kubernetes-validations`), for apiservers before
    /// 1.25 (1.20 refuses the field). The operator's own start-up install detects this itself.
    #[arg(long)]
    no_validation_rules: bool,
}

#[derive(Args, Debug)]
pub struct ManifestArgs {
    /// Namespace to install into.
    #[arg(long, default_value = "default")]
    namespace: String,
    /// Install in cluster-wide mode (ClusterRole, `-cluster-wide`).
    #[arg(long)]
    cluster_wide: bool,
    /// Operator image.
    #[arg(long, default_value_t = default_image())]
    image: String,
    /// Deployment replicas (leader election keeps one active).
    #[arg(long, default_value_t = 1)]
    replicas: i32,
    /// Leave the CRDs out (the operator installs them itself unless `--create-crd=false`).
    #[arg(long)]
    no_crds: bool,
    /// CRDs without CEL validation rules, for apiservers before 1.25.
    #[arg(long)]
    no_validation_rules: bool,
    /// Also print the monitoring objects: PodMonitors for the etcd members and the operator, a
    /// PrometheusRule with alerts (Prometheus Operator, monitoring.coreos.com/v1), and a Grafana
    /// dashboard in a ConfigMap labelled grafana_dashboard=1.
    #[arg(long)]
    monitoring: bool,
    /// Who may read the operator's /metrics: `kubernetes` (a bearer token the API server
    /// authenticates and allows `get` on /metrics; the operator gets the review permissions) or
    /// `none` (anyone who reaches the port, as before).
    #[arg(long, value_enum, default_value = "kubernetes")]
    metrics_auth: etcd_operator::runtime::metrics_auth::Mode,
}

pub fn crds(c: &CrdArgs) -> anyhow::Result<()> {
    crds::render_yaml(!c.no_validation_rules).and_then(print_out)
}

pub fn manifests(m: ManifestArgs) -> anyhow::Result<()> {
    manifests::render(&manifests::Options {
        namespace: m.namespace,
        image: m.image,
        cluster_wide: m.cluster_wide,
        replicas: m.replicas,
        with_crds: !m.no_crds,
        validation_rules: !m.no_validation_rules,
        monitoring: m.monitoring,
        metrics_auth: m.metrics_auth == etcd_operator::runtime::metrics_auth::Mode::Kubernetes,
    })
    .and_then(print_out)
}

pub fn bundle(b: BundleArgs) -> anyhow::Result<()> {
    etcd_operator::install::olm_bundle::write(
        &b.output_dir,
        &etcd_operator::install::olm_bundle::Options { image: b.image },
    )
    .map(|files| files.iter().for_each(|f| println!("{}", f.display())))
}

/// Print to stdout; a closed pipe (`| head`) is not an error.
fn print_out(s: String) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(s.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

//! `etcd-operator`: the operator binary. With no subcommand it runs the controller, as the
//! CoreOS Deployment (`command: etcd-operator`) expects.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use etcd_operator::{controller, crd_install, crds, default_image, leader_election, manifests, telemetry};

#[derive(Parser, Debug)]
#[command(name = "etcd-operator", version, about = "Kubernetes operator for etcd (etcd.database.coreos.com/v1beta2)")]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controller (the default).
    Run(RunArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crds(CrdArgs),
    /// Print everything to apply to install the operator (CRDs, ServiceAccount, RBAC, Deployment;
    /// with `--monitoring` also PodMonitors, a PrometheusRule and a Grafana dashboard).
    Manifests(ManifestArgs),
    /// Write the OLM bundle (ClusterServiceVersion, CRDs, metadata/annotations.yaml).
    Bundle(BundleArgs),
    /// Wait until a host name resolves (the init container of every etcd member pod).
    WaitDns(WaitDnsArgs),
    /// Take a snapshot and store it with its checksum (what backup pods run).
    BackupSave(etcd_operator::backup::save::SaveArgs),
    /// Check a stored backup against its checksum (what restore verify pods run).
    BackupVerify(etcd_operator::backup::fetch::VerifyArgs),
    /// Fetch and check a backup into a restoring member's volume (its first init container).
    RestorePrepare(etcd_operator::backup::fetch::PrepareArgs),
    /// Move a restored member's data into place (its last restore init container).
    RestoreFinish(etcd_operator::backup::fetch::FinishArgs),
    /// Stream a snapshot from a surviving member to seed a recovered cluster (init container).
    SeedFromMember(etcd_operator::backup::fetch::SeedArgs),
    /// Check that a PVC holds this member's data before it restarts on it (init container).
    CheckData(etcd_operator::member_volume::CheckArgs),
}

#[derive(Args, Debug)]
struct WaitDnsArgs {
    /// The name to resolve.
    #[arg(long)]
    host: String,
    /// Give up after this many seconds; 0 waits forever.
    #[arg(long, default_value_t = 0)]
    timeout_secs: u64,
}

#[derive(Args, Debug, Clone)]
struct RunArgs {
    /// Manage EtcdClusters in every namespace that carry the annotation
    /// `etcd.database.coreos.com/scope: clusterwide`.
    #[arg(long)]
    cluster_wide: bool,
    /// Namespace to manage when not cluster-wide; default: $MY_POD_NAMESPACE, else the
    /// kubeconfig's namespace.
    #[arg(long, env = "MY_POD_NAMESPACE")]
    namespace: Option<String>,
    /// Install or update the CRDs at start-up and wait until they are established.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    create_crd: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t)]
    log_format: telemetry::LogFormat,
    /// Image of the init container that waits for a new member's DNS name (this operator's
    /// own image, which every node can already pull).
    #[arg(long, env = "ETCD_OPERATOR_INIT_IMAGE", default_value_t = default_image())]
    init_image: String,
    /// DNS domain of the Kubernetes cluster (kubelet's `clusterDomain`), used in members' peer
    /// URLs when the EtcdCluster sets no `pod.ClusterDomain`. With a domain a member's own name
    /// is in its pod's /etc/hosts at start, so no init container waits for cluster DNS. Default:
    /// learned from this pod's /etc/resolv.conf when running in a pod, else none (then peer
    /// URLs end in `.svc` and the wait-dns init container runs, as in the CoreOS operator).
    #[arg(long, env = "ETCD_OPERATOR_CLUSTER_DOMAIN")]
    cluster_domain: Option<String>,
    /// Address of /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen_address: std::net::SocketAddr,
    /// Elect one active replica through a Lease (in the operator's namespace; cluster-wide
    /// operators share one Lease in `--cluster-wide-lease-namespace`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// Where every cluster-wide operator of the cluster takes its one Lease, so that two
    /// cluster-wide installs in different namespaces never act at once.
    #[arg(long, default_value = "kube-system")]
    cluster_wide_lease_namespace: String,
    /// This replica's name, for Events and leader election.
    #[arg(long, env = "MY_POD_NAME")]
    pod_name: Option<String>,
    /// Under OLM: the `olm.targetNamespaces` of the install (the bundle's Deployment sets it).
    /// One namespace is watched instead of `--namespace`; empty means every namespace, as with
    /// `--cluster-wide`.
    #[arg(long, env = etcd_operator::olm_bundle::TARGET_NAMESPACES_ENV)]
    olm_target_namespaces: Option<String>,
}

#[derive(Args, Debug)]
struct BundleArgs {
    /// Directory of the bundle (its `manifests/` and `metadata/` are replaced).
    #[arg(long, default_value = "bundle")]
    output_dir: std::path::PathBuf,
    /// Operator image.
    #[arg(long, default_value_t = default_image())]
    image: String,
}

#[derive(Args, Debug)]
struct CrdArgs {
    /// Leave out the CEL validation rules (`x-kubernetes-validations`), for apiservers before
    /// 1.25 (1.20 refuses the field). The operator's own start-up install detects this itself.
    #[arg(long)]
    no_validation_rules: bool,
}

#[derive(Args, Debug)]
struct ManifestArgs {
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
}

/// Go's flag package accepts `-cluster-wide`; CoreOS manifests use that spelling. Turn
/// single-dash long options into double-dash ones before clap sees them.
fn normalize_go_flags(args: impl Iterator<Item = String>) -> Vec<String> {
    args.enumerate()
        .map(|(i, a)| {
            let b = a.as_bytes();
            if i > 0 && b.len() > 2 && b[0] == b'-' && b[1] != b'-' && b[1].is_ascii_alphabetic() {
                format!("-{a}")
            } else {
                a
            }
        })
        .collect()
}

fn main() {
    let cli = Cli::parse_from(normalize_go_flags(std::env::args()));
    let result = match cli.command {
        Some(Command::Crds(c)) => crds::render_yaml(!c.no_validation_rules).and_then(print_out),
        Some(Command::Manifests(m)) => manifests::render(&manifests::Options {
            namespace: m.namespace,
            image: m.image,
            cluster_wide: m.cluster_wide,
            replicas: m.replicas,
            with_crds: !m.no_crds,
            validation_rules: !m.no_validation_rules,
            monitoring: m.monitoring,
        })
        .and_then(print_out),
        Some(Command::Bundle(b)) => {
            etcd_operator::olm_bundle::write(&b.output_dir, &etcd_operator::olm_bundle::Options { image: b.image })
                .map(|files| files.iter().for_each(|f| println!("{}", f.display())))
        }
        Some(Command::Run(args)) => run(args),
        Some(Command::WaitDns(a)) => wait_dns(&a.host, a.timeout_secs),
        Some(Command::BackupSave(a)) => pod_command(|| async {
            etcd_operator::backup::save::run(a).await.map(etcd_operator::backup::contract::report_json)
        }),
        Some(Command::BackupVerify(a)) => pod_command(|| async {
            etcd_operator::backup::fetch::verify(a).await.and_then(|m| {
                serde_json::to_string(&m).map_err(|e| etcd_operator::backup::contract::PodError::from(e.to_string()))
            })
        }),
        Some(Command::RestorePrepare(a)) => pod_command(|| etcd_operator::backup::fetch::prepare(a)),
        Some(Command::SeedFromMember(a)) => pod_command(|| etcd_operator::backup::fetch::seed_from_member(a)),
        Some(Command::CheckData(a)) => match etcd_operator::member_volume::check(&a) {
            Ok(msg) => {
                println!("{msg}");
                Ok(())
            }
            Err((code, msg)) => {
                eprintln!("{msg}");
                // The kubelet shows this as the init container's termination message.
                let _ = std::fs::write("/dev/termination-log", msg.as_bytes());
                std::process::exit(code);
            }
        },
        Some(Command::RestoreFinish(a)) => pod_command(|| async { etcd_operator::backup::fetch::finish(a) }),
        None => run(cli.run),
    };
    if let Err(e) = result {
        // One line, no backtrace: the chain joined with ": ".
        eprintln!("error: {}", format!("{e:#}").replace('\n', " "));
        std::process::exit(1);
    }
}

/// Print to stdout; a closed pipe (`| head`) is not an error.
fn print_out(s: String) -> anyhow::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(s.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn run(mut args: RunArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format);
    let olm_watch = match args.olm_target_namespaces.as_deref().map(etcd_operator::olm_bundle::watch_scope) {
        Some(Err(e)) => anyhow::bail!(e),
        Some(Ok(None)) => {
            args.cluster_wide = true;
            None
        }
        Some(Ok(watch)) => watch,
        None => None,
    };
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a rustls crypto provider was already installed"))?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let client = connect().await?;
        let namespace = if args.cluster_wide {
            None
        } else {
            Some(olm_watch.or(args.namespace.clone()).unwrap_or_else(|| client.default_namespace().to_string()))
        };
        tracing::info!(
            version = env!("CARGO_PKG_VERSION"),
            scope = namespace.as_deref().unwrap_or("cluster-wide"),
            "etcd-operator started"
        );
        if !etcd_operator::failpoints::active().is_empty() {
            tracing::warn!(
                failpoints = ?etcd_operator::failpoints::active(),
                "failpoints armed by {} (fault injection for tests; never set this in production)",
                etcd_operator::failpoints::ENV
            );
        }
        // Shutdown (SIGTERM / Ctrl-C) is broadcast to every phase below.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            shutdown_signal().await;
            let _ = stop_tx.send(true);
        });
        let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let ready = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let metrics = std::sync::Arc::new(etcd_operator::metrics::Metrics::default());
        let mut http = tokio::spawn(etcd_operator::http::serve(
            args.listen_address,
            ready.clone(),
            metrics.clone(),
            stopped(stop_rx.clone()),
        ));

        // Refuse to act with missing permissions, but do not crash-loop: say what is missing, stay
        // unready, and check again until the Role is fixed.
        let own_ns = args.namespace.clone().unwrap_or_else(|| client.default_namespace().to_string());
        // Namespaced operators lock their own namespace. Cluster-wide ones manage the same
        // objects wherever they are installed, so they also share one Lease in a well-known
        // place; they keep taking their own namespace's Lease first, so that an operator of an
        // earlier version (which took only that one) and this one never act at once during a
        // rolling update.
        let mut lease_places = vec![(own_ns.clone(), etcd_operator::OPERATOR_NAME.to_string())];
        if args.cluster_wide {
            lease_places
                .push((args.cluster_wide_lease_namespace.clone(), leader_election::CLUSTER_WIDE_LEASE.to_string()));
        }
        let lease_ns = own_ns.clone();
        loop {
            let missing =
                etcd_operator::permissions::missing(&client, namespace.as_deref(), &lease_ns, args.create_crd)
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot check permissions (SelfSubjectAccessReview): {e}"))?;
            if missing.is_empty() {
                break;
            }
            let list: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
            tracing::error!("missing permissions, not starting until they are granted: {}", list.join("; "));
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                _ = stopped(stop_rx.clone()) => return Ok(()),
            }
        }
        if args.create_crd {
            crd_install::install(client.clone(), Duration::from_secs(60)).await?;
        }
        let pod = args.pod_name.clone().unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id()));
        // The install's namespace in the identity: a standby of another install says whose.
        let leases: Vec<leader_election::Config> = if args.leader_elect {
            lease_places
                .iter()
                .map(|(ns, name)| leader_election::Config::new(ns, name, &format!("{own_ns}/{pod}")))
                .collect()
        } else {
            vec![]
        };
        let mut held_since = Vec::new();
        for cfg in &leases {
            tokio::select! {
                r = leader_election::acquire(client.clone(), cfg) => held_since.push(r.map_err(|e| {
                    anyhow::anyhow!("leader election on Lease {}/{}: {e}", cfg.namespace, cfg.name)
                })?),
                _ = stopped(stop_rx.clone()) => return Ok(()),
                r = &mut http => { r??; }
            }
        }
        let job_opts = || etcd_operator::backup::jobs::Options {
            client: client.clone(),
            scope: controller::Scope { namespace: namespace.clone() },
            init_image: args.init_image.clone(),
            reporter_instance: args.pod_name.clone(),
            metrics: metrics.clone(),
        };
        let backups = etcd_operator::backup::backup_controller::run(job_opts(), stopped(stop_rx.clone()));
        let restores = etcd_operator::backup::restore_controller::run(job_opts(), stopped(stop_rx.clone()));
        let opts = controller::Options {
            ready,
            metrics,
            scope: controller::Scope { namespace },
            init_image: args.init_image.clone(),
            cluster_domain: args.cluster_domain.clone().unwrap_or_else(detect_cluster_domain),
            reporter_instance: args.pod_name.clone(),
            // A pod (the Deployment sets both): its namespace, which `--namespace` may not be.
            operator_namespace: std::env::var("MY_POD_NAMESPACE").ok().filter(|_| args.pod_name.is_some()),
        };
        let holding = async {
            if leases.is_empty() {
                return std::future::pending().await;
            }
            // Losing any one of the leases ends leadership.
            let holds = leases
                .iter()
                .zip(&held_since)
                .map(|(cfg, since)| Box::pin(leader_election::hold(client.clone(), cfg, *since)));
            futures::future::select_all(holds).await;
        };
        tokio::select! {
            _ = async {
                tokio::join!(controller::run(client.clone(), opts, stopped(stop_rx.clone())), backups, restores)
            } => {}
            _ = holding => {
                // Another replica may act from now on: stop at once, mid-reconcile or not.
                tracing::error!("leadership lost; exiting so that only the new leader acts");
                std::process::exit(1);
            }
            r = &mut http => {
                // The HTTP server only ends early when it could not start.
                r??;
            }
        }
        for cfg in leases.iter().rev() {
            leader_election::release(client.clone(), cfg).await;
        }
        tracing::info!("etcd-operator stopped");
        Ok(())
    })
}

/// How long start-up waits for an apiserver that does not answer (seconds in
/// `ETCD_OPERATOR_CONNECT_PATIENCE_SECS` override it; tests use 0).
fn connect_patience() -> Duration {
    let secs = std::env::var("ETCD_OPERATOR_CONNECT_PATIENCE_SECS").ok().and_then(|v| v.parse().ok());
    Duration::from_secs(secs.unwrap_or(60))
}

/// Build a client from in-cluster config or KUBECONFIG and prove the apiserver answers, so that
/// a bad kubeconfig is one clear line rather than an endless retry loop.
async fn connect() -> anyhow::Result<kube::Client> {
    let where_ = std::env::var("KUBECONFIG")
        .map(|k| format!("KUBECONFIG={k}"))
        .unwrap_or_else(|_| "in-cluster or ~/.kube/config".into());
    let config = kube::Config::infer()
        .await
        .map_err(|e| anyhow::anyhow!("cannot load a Kubernetes client config ({where_}): {e}"))?;
    let url = config.cluster_url.clone();
    let client = kube::Client::try_from(config)
        .map_err(|e| anyhow::anyhow!("cannot build a Kubernetes client for {url}: {e}"))?;
    // An apiserver that answers with an error (401, 403, ...) is a configuration problem: said at
    // once. One that does not answer may be restarting (an upgrade of the control plane): tried
    // again for a minute rather than crash-looping the pod through it.
    let patience = connect_patience();
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let why = match tokio::time::timeout(Duration::from_secs(15), client.apiserver_version()).await {
            Ok(Ok(v)) => {
                tracing::info!(server = %url, version = %v.git_version, "connected to Kubernetes");
                return Ok(client);
            }
            Ok(Err(e @ kube::Error::Api(_))) => {
                anyhow::bail!("the Kubernetes API at {url} ({where_}) refused the operator: {e}")
            }
            Ok(Err(e)) => format!("cannot reach the Kubernetes API at {url} ({where_}): {e}"),
            Err(_) => format!("the Kubernetes API at {url} ({where_}) did not answer within 15s"),
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("{why} (tried for {}s)", patience.as_secs());
        }
        tracing::warn!("{why}; trying again");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// Resolve `host` until it has an address: etcd exits at start when its own peer name does not
/// resolve yet, and cluster DNS publishes a pod's name only after the pod has an IP.
fn wait_dns(host: &str, timeout_secs: u64) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let start = std::time::Instant::now();
        let mut last_err = String::new();
        loop {
            match tokio::net::lookup_host((host, 0)).await {
                Ok(mut addrs) => {
                    if let Some(a) = addrs.next() {
                        println!("{host} resolves to {} after {:?}", a.ip(), start.elapsed());
                        return Ok(());
                    }
                }
                Err(e) => last_err = e.to_string(),
            }
            if timeout_secs > 0 && start.elapsed() > Duration::from_secs(timeout_secs) {
                anyhow::bail!("{host} did not resolve within {timeout_secs}s: {last_err}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Run a command of a pod the operator creates: its result (a JSON report, or the error as
/// `PodError` says it: refused or not) goes to stdout and to the container's termination message,
/// where the operator reads it; a failure exits with 1.
fn pod_command<F, Fut>(f: F) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<String, etcd_operator::backup::contract::PodError>>,
{
    // object_store's HTTP clients use rustls: one crypto provider for the whole process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let result = rt.block_on(f());
    let text = match &result {
        Ok(s) => s.clone(),
        Err(e) => e.to_string(),
    };
    println!("{text}");
    // Absent outside a pod; the operator falls back to the log when it cannot be written.
    let _ = std::fs::write("/dev/termination-log", text.as_bytes());
    result.map(|_| ()).map_err(|e| anyhow::anyhow!(e))
}

/// The cluster domain from a pod's resolv.conf search list (`<ns>.svc.<domain> svc.<domain> …`),
/// when this process runs in a pod; empty otherwise.
fn detect_cluster_domain() -> String {
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        return String::new();
    }
    std::fs::read_to_string("/etc/resolv.conf").map(|t| cluster_domain_of_resolv_conf(&t)).unwrap_or_default()
}

fn cluster_domain_of_resolv_conf(text: &str) -> String {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("search"))
        .flat_map(|rest| rest.split_whitespace())
        .find_map(|d| d.strip_prefix("svc.").map(|d| d.trim_end_matches('.').to_string()))
        .unwrap_or_default()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "etcd-operator".into())
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_domain_comes_from_the_pods_search_list() {
        let conf =
            "nameserver 10.96.0.10\nsearch ops.svc.corp.example svc.corp.example corp.example\noptions ndots:5\n";
        assert_eq!(cluster_domain_of_resolv_conf(conf), "corp.example");
        assert_eq!(cluster_domain_of_resolv_conf("nameserver 1.1.1.1\nsearch example.org\n"), "");
        assert_eq!(cluster_domain_of_resolv_conf(""), "");
    }

    #[test]
    fn go_style_flags_are_accepted() {
        let v = normalize_go_flags(
            ["etcd-operator", "-cluster-wide", "-create-crd=false", "-h"].map(String::from).into_iter(),
        );
        assert_eq!(v, ["etcd-operator", "--cluster-wide", "--create-crd=false", "-h"]);
        let cli = Cli::parse_from(v.into_iter().take(3));
        assert!(cli.run.cluster_wide);
        assert!(!cli.run.create_crd);
    }
}

//! `run` (the default): the controller, with leader election, the CRDs installed, the
//! permission check, `/healthz` and `/metrics`, and the EtcdBackup and EtcdRestore controllers.

use std::time::Duration;

use clap::Args;
use etcd_operator::{controller, default_image, install::crd_install, runtime::leader_election, runtime::telemetry};

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Manage EtcdClusters in every namespace that carry the annotation
    /// `etcd.database.coreos.com/scope: clusterwide`.
    #[arg(long)]
    pub cluster_wide: bool,
    /// Namespace to manage when not cluster-wide; default: $MY_POD_NAMESPACE, else the
    /// kubeconfig's namespace.
    #[arg(long, env = "MY_POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// Install or update the CRDs at start-up and wait until they are established.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub create_crd: bool,
    /// Log format.
    #[arg(long, value_enum, default_value_t)]
    pub log_format: telemetry::LogFormat,
    /// Image of the init container that waits for a new member's DNS name (this operator's
    /// own image, which every node can already pull).
    #[arg(long, env = "ETCD_OPERATOR_INIT_IMAGE", default_value_t = default_image())]
    pub init_image: String,
    /// DNS domain of the Kubernetes cluster (kubelet's `clusterDomain`), used in members' peer
    /// URLs when the EtcdCluster sets no `pod.ClusterDomain`. With a domain a member's own name
    /// is in its pod's /etc/hosts at start, so no init container waits for cluster DNS. Default:
    /// learned from this pod's /etc/resolv.conf when running in a pod, else none (then peer
    /// URLs end in `.svc` and the wait-dns init container runs, as in the CoreOS operator).
    #[arg(long, env = "ETCD_OPERATOR_CLUSTER_DOMAIN")]
    pub cluster_domain: Option<String>,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen_address: std::net::SocketAddr,
    /// Who may read /metrics: `none` (anyone who reaches the port) or `kubernetes` (a bearer
    /// token the API server authenticates and allows `get` on the non-resource URL /metrics;
    /// what the shipped manifests and Helm chart set). /healthz and /readyz stay open.
    #[arg(long, value_enum, default_value_t)]
    pub metrics_auth: etcd_operator::runtime::metrics_auth::Mode,
    /// Elect one active replica through a Lease (in the operator's namespace; cluster-wide
    /// operators share one Lease in `--cluster-wide-lease-namespace`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Where every cluster-wide operator of the cluster takes its one Lease, so that two
    /// cluster-wide installs in different namespaces never act at once.
    #[arg(long, default_value = "kube-system")]
    pub cluster_wide_lease_namespace: String,
    /// This replica's name, for Events and leader election.
    #[arg(long, env = "MY_POD_NAME")]
    pub pod_name: Option<String>,
    /// Under OLM: the `olm.targetNamespaces` of the install (the bundle's Deployment sets it).
    /// One namespace is watched instead of `--namespace`; empty means every namespace, as with
    /// `--cluster-wide`.
    #[arg(long, env = etcd_operator::install::olm_bundle::TARGET_NAMESPACES_ENV)]
    pub olm_target_namespaces: Option<String>,
}

/// The stack of each runtime worker thread.
pub const WORKER_STACK_BYTES: usize = 16 << 20;

pub fn run(mut args: RunArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format);
    let olm_watch = match args.olm_target_namespaces.as_deref().map(etcd_operator::install::olm_bundle::watch_scope) {
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
    // Worker stacks of 16 MiB (address space; only the pages touched are memory): a debug build
    // keeps every await of a reconcile in its frames, and 2 MiB (tokio's default) overflowed
    // executing a NOSPACE recovery — the process aborts, for every cluster it serves.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(WORKER_STACK_BYTES)
        .enable_all()
        .build()?;
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
        let metrics = std::sync::Arc::new(etcd_operator::runtime::metrics::Metrics::default());
        let metrics_auth = (args.metrics_auth == etcd_operator::runtime::metrics_auth::Mode::Kubernetes)
            .then(|| std::sync::Arc::new(etcd_operator::runtime::metrics_auth::Reviewer::new(client.clone())));
        let mut http = tokio::spawn(etcd_operator::runtime::http::serve(
            args.listen_address,
            ready.clone(),
            metrics.clone(),
            metrics_auth,
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
            let missing = etcd_operator::install::permissions::missing(
                &client,
                namespace.as_deref(),
                &lease_ns,
                args.create_crd,
                args.metrics_auth == etcd_operator::runtime::metrics_auth::Mode::Kubernetes,
            )
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
        // One after the other, each renewed from the moment it is won (`take_all`).
        let apis = leases
            .into_iter()
            .map(|cfg| {
                (
                    kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &cfg.namespace),
                    cfg,
                )
            })
            .collect();
        let mut held = tokio::select! {
            r = leader_election::take_all(apis) => r?,
            _ = stopped(stop_rx.clone()) => return Ok(()),
            r = &mut http => {
                r??;
                anyhow::bail!("the HTTP server stopped");
            }
        };
        let job_opts = || etcd_operator::backup_controllers::jobs::Options {
            client: client.clone(),
            scope: controller::WatchScope { namespace: namespace.clone() },
            init_image: args.init_image.clone(),
            reporter_instance: args.pod_name.clone(),
            metrics: metrics.clone(),
        };
        let backups = etcd_operator::backup_controllers::backup_controller::run(job_opts(), stopped(stop_rx.clone()));
        let restores = etcd_operator::backup_controllers::restore_controller::run(job_opts(), stopped(stop_rx.clone()));
        let opts = controller::Options {
            ready,
            metrics,
            scope: controller::WatchScope { namespace },
            init_image: args.init_image.clone(),
            cluster_domain: args.cluster_domain.clone().unwrap_or_else(detect_cluster_domain),
            reporter_instance: args.pod_name.clone(),
            // A pod (the Deployment sets both): its namespace, which `--namespace` may not be.
            operator_namespace: std::env::var("MY_POD_NAMESPACE").ok().filter(|_| args.pod_name.is_some()),
        };
        // Losing any one of the leases ends leadership.
        let holding = leader_election::keep_all(&mut held);
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
        for h in held.iter().rev() {
            h.release().await;
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
}

//! The command line (clap): every command has `--help`.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-etcd",
    bin_name = "kubectl etcd",
    version,
    about = "Status, support report and day-2 conveniences for etcd clusters of the etcd operator",
    long_about = "Status, support report and day-2 conveniences for EtcdClusters \
                  (etcd.database.coreos.com/v1beta2). Uses your kubeconfig; reaches etcd members \
                  through port-forwards to their client port (2379), with the operator's client \
                  certificate when TLS is on and the root login when authentication is on."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Args, Debug, Clone)]
pub struct Global {
    /// Namespace of the EtcdCluster (default: the kubeconfig context's namespace).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use (default: the current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One screen: members, roles, raft lag, database sizes, alarms, conditions, last backup,
    /// certificate expiry and the disruption budget, with a one-line verdict.
    Status(StatusArgs),
    /// Write a support bundle (.tar.gz): objects, Events, logs and member status, with Secret
    /// data and passwords redacted.
    Report(ReportArgs),
    /// Pause the operator for this cluster (`spec.paused: true`): it changes nothing until
    /// unpaused.
    Pause(NameArg),
    /// Resume the operator for this cluster (`spec.paused: false`).
    Unpause(NameArg),
    /// Create a one-shot EtcdBackup of this cluster.
    Backup(BackupArgs),
    /// Create an EtcdRestore: a new EtcdCluster NAME from one backup, or (with `--revision` or
    /// `--time`) from the state at that point of an EtcdBackup's continuous archive.
    Restore(RestoreArgs),
    /// Move raft leadership to a caught-up healthy voting member (`--to`), or to the most
    /// caught-up one; the operator does it once no other change is in progress, and refuses a
    /// learner, a fenced member or a name that is no member.
    Switchover(SwitchoverArgs),
    /// Take a member out of the client Service while it stays a voting member (a suspect
    /// member answers no client); refused when fewer than a quorum of voters would serve.
    Fence(FenceArgs),
    /// Put a fenced member back into the client Service.
    Unfence(FenceArgs),
    /// Stop every member pod of a cluster whose members keep their data on
    /// PersistentVolumeClaims, keeping the claims and the membership; refused for emptyDir
    /// members (their data would go with their pods).
    Hibernate(WaitArgs),
    /// Start a hibernated cluster's members again on their claims.
    Resume(WaitArgs),
    /// Defragment every member (or `--member`) once, one at a time with the leader last, once
    /// no other change is in progress (the operator does it, as its defragmentation policy).
    Defrag(DefragArgs),
    /// etcdctl's `check perf` against the cluster: a load profile's clients write under a prefix
    /// for a while (then the keys are deleted), judged by etcd's criteria (throughput, slowest
    /// request, deviation); exit code 0 on PASS, 1 on FAIL.
    CheckPerf(crate::check_perf::CheckPerfArgs),
}

#[derive(Args, Debug)]
pub struct SwitchoverArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// The member pod to lead (default: the most caught-up healthy voter but the leader).
    #[arg(long)]
    pub to: Option<String>,
    /// Seconds to wait for the operator's answer (0: do not wait). The request stays when it
    /// is not done by then.
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct DefragArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// The one member pod to defragment (default: every member).
    #[arg(long)]
    pub member: Option<String>,
    /// Seconds to wait for the operator to finish (0: do not wait).
    #[arg(long, default_value_t = 300)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct WaitArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// Seconds to wait for the operator to finish (0: do not wait).
    #[arg(long, default_value_t = 300)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct FenceArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// The member pod.
    pub member: String,
    /// Seconds to wait for the operator's answer (0: do not wait).
    #[arg(long, default_value_t = 60)]
    pub wait: u64,
}

#[derive(Args, Debug)]
pub struct NameArg {
    /// Name of the EtcdCluster.
    pub name: String,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// For people (colour on a terminal).
    Text,
    Json,
    Yaml,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// Output format; json and yaml follow the documented schema `kubectl-etcd/status/v1`.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
    /// Time limit for each member's answers (connect and each call), in seconds.
    #[arg(long, default_value = "5")]
    pub member_timeout: u64,
}

impl StatusArgs {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.member_timeout.max(1))
    }
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// The bundle to write (default: `report-<name>-<unix time>.tar.gz`).
    #[arg(short = 'o', long)]
    pub output: Option<String>,
    /// Namespace of the operator's pods (label `app.kubernetes.io/name=etcd-operator`; default:
    /// the cluster's namespace, then every namespace the user may list).
    #[arg(long)]
    pub operator_namespace: Option<String>,
    /// Lines of each log to keep (the latest).
    #[arg(long, default_value = "5000")]
    pub tail: i64,
}

#[derive(Args, Debug)]
pub struct BackupArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// Destination: `pvc:CLAIM[/PATH]`, `s3:BUCKET/KEY`, `abs:CONTAINER/BLOB` or
    /// `gcs:BUCKET/OBJECT`.
    #[arg(long)]
    pub to: String,
    /// Secret with the store's credentials (S3: `awsSecret`, ABS: `absSecret`, GCS:
    /// `gcpSecret`); not used for PVC.
    #[arg(long)]
    pub credentials_secret: Option<String>,
    /// S3 endpoint of an S3-compatible server.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 path-style addressing (most S3-compatible servers).
    #[arg(long)]
    pub force_path_style: bool,
    /// Name of the EtcdBackup (default: `<cluster>-<unix time>`).
    #[arg(long)]
    pub backup_name: Option<String>,
}

#[derive(Args, Debug, Clone)]
pub struct RestoreArgs {
    /// Name of the EtcdCluster to create (it must not exist).
    pub name: String,
    /// The backup (`pvc:CLAIM/PATH`, `s3:BUCKET/KEY`, `abs:…`, `gcs:…`); with `--revision` or
    /// `--time`, the EtcdBackup's path (the series with its archive).
    #[arg(long)]
    pub from: String,
    /// Restore the state right after this revision (point in time).
    #[arg(long, conflicts_with = "time")]
    pub revision: Option<i64>,
    /// Restore the state at this moment, RFC 3339 (point in time).
    #[arg(long)]
    pub time: Option<String>,
    /// Secret with the store's credentials; not used for PVC.
    #[arg(long)]
    pub credentials_secret: Option<String>,
    /// S3 endpoint of an S3-compatible server.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// S3 path-style addressing (most S3-compatible servers).
    #[arg(long)]
    pub force_path_style: bool,
    /// Members of the new cluster (default: the operator's, 3).
    #[arg(long)]
    pub size: Option<i32>,
    /// etcd version of the new cluster (default: the backup's; for a point in time, the
    /// operator's default).
    #[arg(long)]
    pub version: Option<String>,
    /// Name of the EtcdRestore (default: NAME).
    #[arg(long)]
    pub restore_name: Option<String>,
    /// A backup of a cluster with authentication: the Secret holding its root password (the
    /// new cluster's `spec.auth.rootSecret`; a point-in-time replay logs in with it).
    #[arg(long)]
    pub root_secret: Option<String>,
}

/// A client of the kubeconfig's cluster and the context's namespace.
pub async fn kube_client(g: &Global) -> Result<(kube::Client, String)> {
    let opts = kube::config::KubeConfigOptions { context: g.context.clone(), ..Default::default() };
    let config = match kube::Config::from_kubeconfig(&opts).await {
        Ok(c) => c,
        Err(e) if g.context.is_none() => kube::Config::incluster().with_context(|| format!("no kubeconfig ({e})"))?,
        Err(e) => return Err(e).context("reading the kubeconfig"),
    };
    let ns = config.default_namespace.clone();
    Ok((kube::Client::try_from(config)?, ns))
}

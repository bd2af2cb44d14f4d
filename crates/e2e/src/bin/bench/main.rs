//! `bench`: how fast the operator creates, heals, scales, upgrades and backs up etcd clusters on a real
//! Kubernetes, beside baselines measured on the same cluster in the same run.
//!
//! A command, not a test (`cargo test` never runs it). Use `hack/bench.sh`, which builds the
//! release operator, loads its image and runs this; or, with that done:
//!
//!     cargo run --release -p e2e --bin bench -- [--only create,heal,scale,upgrade,backup,idle] [--runs N]
//!
//! `backup` (about 1.5 min with 3 runs) measures the throughput of the operator's EtcdBackup (to
//! S3 on a moto server, and to a PVC) beside `etcdctl snapshot save` of the same 3-member cluster
//! holding `--backup-mib` of data (see `backup.rs`). `idle` (only when named in `--only`; about
//! 15 min) measures the operator at rest instead of a duration: RSS, CPU and its requests to
//! the apiserver (see `idle.rs`). `tls` (only when named; about 5 min a run) creates clusters
//! with `spec.TLS.auto` beside plaintext ones, and rotates a 3-member cluster's CA (see `tls.rs`).
//! `node-loss` (only when named; needs `NODES=3`) loses the node of a member (see `node_loss.rs`).
//! `archive` (only when named; about 4 min a run) measures the continuous archive: put latency
//! with and without it, how soon a put is durable, its throughput, and a point-in-time restore
//! beside a full one (see `archive.rs`).
//!
//! Every sample runs in a fresh namespace that is deleted afterwards (also on errors and on
//! Ctrl-C); operator samples start `target/release/etcd-operator run --namespace NS` as a process
//! of this machine. Per-sample timelines (what was seen when, the operator's actions from its
//! JSON log, pod timestamps and Events) go to stderr; the result table goes to stdout.

mod api_requests;
mod archive;
mod backup;
mod etcd;
mod idle;
mod kube;
mod many;
mod node_loss;
mod observe;
mod phases;
mod pvc_heal;
mod recover;
mod report;
mod scale_down;
mod scenarios;
mod space;
mod table;
mod tls;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use e2e::Kubectl;

use report::Sample;
use scenarios::Ctx;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const MEASUREMENTS: [&str; 13] = [
    "create",
    "heal",
    "scale",
    "upgrade",
    "recover",
    "defrag",
    "nospace",
    "backup",
    "tls",
    "idle",
    "many",
    "node-loss",
    "archive",
];
/// What runs without `--only`: `idle`, `tls`, `many` and `archive` take long and are asked for by name;
/// `node-loss` needs a cluster of 3 nodes.
const DEFAULT_MEASUREMENTS: [&str; 8] =
    ["create", "heal", "scale", "upgrade", "recover", "defrag", "nospace", "backup"];

#[derive(Parser, Debug)]
#[command(about = "Benchmark the etcd operator against baselines on the local Kubernetes")]
struct Args {
    /// Measurements to run, comma-separated: create, heal, scale, upgrade, recover, defrag, nospace,
    /// backup, tls, idle, many, node-loss, archive (default:
    /// all but tls, idle and many). heal includes a PVC member's heal beside a StatefulSet's;
    /// scale includes 5→3 under a writer through the client Service; many runs once. Each includes its baseline; idle runs once whatever --runs says. backup is in
    /// the default set (about 1.5 min with 3 runs): one set-up (a 3-member cluster filled with
    /// --backup-mib, a moto S3 server, a PVC), then --runs S3 backups, PVC backups and `etcdctl
    /// snapshot save` baselines in turn.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Samples of each measurement and baseline.
    #[arg(long, short = 'n', default_value_t = 3)]
    runs: usize,
    /// The operator binary (default: target/release/etcd-operator of this workspace).
    #[arg(long, env = "ETCD_OPERATOR_BIN")]
    operator_bin: Option<PathBuf>,
    /// Image of the member pods' wait-dns init container: the operator image loaded into the
    /// cluster from the same binary.
    #[arg(long, env = "ETCD_OPERATOR_INIT_IMAGE", default_value = "quay.io/etcd-operator-rs/etcd-operator:v0.1.0")]
    operator_image: String,
    /// Bound of every wait, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// Pause after a set-up cluster reports healthy, before a heal/scale/upgrade action. etcd
    /// refuses membership changes until every member has been connected for 5 s; a shorter pause
    /// would measure that start-up rule of a cluster formed a moment ago, not the operator.
    #[arg(long, default_value_t = 6)]
    settle_secs: u64,
    /// Pause between two writes of the upgrade's client.
    #[arg(long, default_value_t = 10)]
    write_interval_ms: u64,
    /// Time one write may take on one member before it is retried on the next.
    #[arg(long, default_value_t = 1000)]
    write_timeout_ms: u64,
    /// Where the operators' logs go (default: target/bench-logs).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// backup: MiB of data (values of 1 MiB) written to the cluster before the backups.
    #[arg(long, default_value_t = 110)]
    backup_mib: usize,
    /// idle: length of each measured window, in seconds (shorten for a quick run).
    #[arg(long, default_value_t = 300)]
    idle_window_secs: u64,
    /// idle: EtcdClusters of size 1 running in the first set-up.
    #[arg(long, default_value_t = 10)]
    idle_clusters: usize,
    /// idle: paused EtcdClusters in the second set-up.
    #[arg(long, default_value_t = 1000)]
    idle_paused: usize,
    /// idle: how long the operator must have sent nothing but Lease renewals and watches before
    /// the window starts.
    #[arg(long, default_value_t = 30)]
    idle_quiet_secs: u64,
    /// many: EtcdClusters of 1 member created at once for one operator.
    #[arg(long, default_value_t = 100)]
    many_clusters: usize,
    /// archive: where the archive goes, `s3` (a moto server on this machine) or `pvc` (a claim
    /// of the cluster's default StorageClass).
    #[arg(long, default_value = "s3", value_parser = ["s3", "pvc"])]
    archive_store: String,
}

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("bench: error: {e:#}");
            std::process::exit(2);
        }
    }
}

pub(crate) fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// Pods outside kube-system that are not the bench's: other work competing for the machine.
fn foreign_pods(k: &Kubectl) -> String {
    let Ok(list) = k.json(&["get", "pods", "--all-namespaces"]) else { return "?".into() };
    let mut by_ns: BTreeMap<String, usize> = BTreeMap::new();
    for p in list["items"].as_array().cloned().unwrap_or_default() {
        let ns = p["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        if ns != "kube-system" && !ns.starts_with("bench-") && p["status"]["phase"] == "Running" {
            *by_ns.entry(ns).or_default() += 1;
        }
    }
    if by_ns.is_empty() {
        "none".into()
    } else {
        by_ns.iter().map(|(n, c)| format!("{n}: {c}")).collect::<Vec<_>>().join(", ")
    }
}

fn run(args: Args) -> Result<bool> {
    for o in &args.only {
        if !MEASUREMENTS.contains(&o.as_str()) {
            bail!("--only {o}: unknown measurement (known: {})", MEASUREMENTS.join(", "));
        }
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let selected: Vec<&str> = MEASUREMENTS
        .iter()
        .copied()
        .filter(
            |m| if args.only.is_empty() { DEFAULT_MEASUREMENTS.contains(m) } else { args.only.iter().any(|o| o == m) },
        )
        .collect();
    let kubectl = Kubectl::from_env()?;
    let nodes =
        kubectl.node_ready_statuses().context("the cluster does not answer (is it up? `hack/cluster.sh status`)")?;
    if nodes.is_empty() || nodes.iter().any(|(_, r)| r != "True") {
        bail!("not every node is Ready: {nodes:?}");
    }
    let operator_bin =
        args.operator_bin.clone().unwrap_or_else(|| PathBuf::from(WORKSPACE).join("target/release/etcd-operator"));
    let operator_bin = operator_bin.canonicalize().with_context(|| {
        format!("operator binary {} not found: build it (hack/bench.sh does)", operator_bin.display())
    })?;
    let workspace = PathBuf::from(WORKSPACE).canonicalize().unwrap_or_else(|_| PathBuf::from(WORKSPACE));
    let log_dir = args.log_dir.clone().unwrap_or_else(|| workspace.join("target/bench-logs"));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;

    // Ctrl-C / SIGTERM / SIGHUP: the harness deletes the namespaces and ends the process
    // (`harness::namespace`); the operators and other processes the bench started die with it
    // (e2e::process).

    let ctx = Ctx {
        kubectl: kubectl.clone(),
        rt,
        operator_bin: operator_bin.clone(),
        init_image: args.operator_image.clone(),
        log_dir: log_dir.clone(),
        timeout: Duration::from_secs(args.timeout_secs),
        settle: Duration::from_secs(args.settle_secs),
        write_interval: Duration::from_millis(args.write_interval_ms),
        write_timeout: Duration::from_millis(args.write_timeout_ms),
    };

    let node_info = kubectl.json(&["get", "nodes"]).ok();
    let kubelet = node_info
        .as_ref()
        .and_then(|n| n["items"][0]["status"]["nodeInfo"]["kubeletVersion"].as_str().map(str::to_string))
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let bin_meta = std::fs::metadata(&operator_bin)?;
    let header = format!(
        "etcd-operator bench, {} UTC: Kubernetes {kubelet}, {} node(s), {cpus} CPUs, load {} at start; operator {} ({} bytes, built {}); {} run(s) each; other running pods: {}",
        sh("date", &["-u", "+%F %T"]),
        nodes.len(),
        loadavg(),
        operator_bin.display(),
        bin_meta.len(),
        sh("date", &["-u", "-r", &operator_bin.to_string_lossy(), "+%F %T"]),
        args.runs,
        foreign_pods(&kubectl),
    );
    eprintln!("{header}\noperator logs: {}\n", log_dir.display());

    type Scenario = fn(&Ctx) -> Result<Sample>;
    let started = Instant::now();
    let mut results: BTreeMap<&str, Vec<Sample>> = BTreeMap::new();
    let mut errors: Vec<String> = vec![];
    for (i, m) in selected.iter().enumerate().filter(|(_, m)| !matches!(**m, "idle" | "backup" | "many" | "archive")) {
        // A measurement's operator sample and its baseline alternate, so a drift of the machine
        // affects both alike. The bare pod start is the baseline of heal (and of scale alone).
        let kinds: Vec<(&str, Scenario)> = match *m {
            "create" => vec![("create", scenarios::create), ("static", scenarios::static_create)],
            "heal" => vec![
                ("heal", scenarios::heal),
                ("bare", scenarios::bare_pod),
                ("heal-pvc", pvc_heal::operator),
                ("statefulset", pvc_heal::statefulset),
            ],
            "scale" if selected.contains(&"heal") => {
                vec![("scale", scenarios::scale), ("scale-down", scale_down::scale_down)]
            }
            "scale" => {
                vec![("scale", scenarios::scale), ("scale-down", scale_down::scale_down), ("bare", scenarios::bare_pod)]
            }
            "recover" if selected.contains(&"heal") => {
                vec![("recover-pvc", recover::pvc), ("recover-survivor", recover::survivor)]
            }
            "recover" => vec![
                ("recover-pvc", recover::pvc),
                ("recover-survivor", recover::survivor),
                ("bare", scenarios::bare_pod),
            ],
            "node-loss" => vec![("node-loss", node_loss::node_loss), ("bare", scenarios::bare_pod)],
            "defrag" => vec![("defrag", space::defrag), ("defrag-etcdctl", space::defrag_etcdctl)],
            "nospace" => vec![("nospace", space::nospace), ("nospace-manual", space::nospace_manual)],
            "tls" => {
                vec![("create-tls", tls::create), ("create", scenarios::create), ("ca-rotation", tls::ca_rotation)]
            }
            _ => vec![("upgrade", scenarios::upgrade)],
        };
        for run in 1..=args.runs {
            for (kind, f) in &kinds {
                eprintln!("[{}/{}] {kind} run {run}/{} (load {})", i + 1, selected.len(), args.runs, loadavg());
                match f(&ctx) {
                    Ok(s) => results.entry(kind).or_default().push(s),
                    Err(e) => {
                        eprintln!("  {kind} run {run} FAILED: {e:#}");
                        errors.push(format!("{kind} run {run}: {}", format!("{e}").lines().next().unwrap_or("")));
                    }
                }
            }
        }
    }

    if let Some(i) = selected.iter().position(|m| *m == "backup") {
        eprintln!("[{}/{}] backup (load {})", i + 1, selected.len(), loadavg());
        let opts = backup::BackupOpts { data_mib: args.backup_mib };
        match backup::run(&ctx, args.runs, &opts) {
            Ok(o) => {
                results.extend(o.results);
                errors.extend(o.errors);
            }
            Err(e) => {
                eprintln!("  backup FAILED: {e:#}");
                errors.push(format!("backup: {}", format!("{e}").lines().next().unwrap_or("")));
            }
        }
    }

    if let Some(i) = selected.iter().position(|m| *m == "archive") {
        eprintln!("[{}/{}] archive (load {})", i + 1, selected.len(), loadavg());
        match archive::run(&ctx, args.runs, &args.archive_store) {
            Ok(o) => {
                results.extend(o.results);
                errors.extend(o.errors);
            }
            Err(e) => {
                eprintln!("  archive FAILED: {e:#}");
                errors.push(format!("archive: {}", format!("{e}").lines().next().unwrap_or("")));
            }
        }
    }

    if let Some(i) = selected.iter().position(|m| *m == "many") {
        eprintln!("[{}/{}] many: {} clusters at once (load {})", i + 1, selected.len(), args.many_clusters, loadavg());
        match many::run(&ctx, args.many_clusters) {
            Ok(s) => results.entry("many").or_default().push(s),
            Err(e) => {
                eprintln!("  many FAILED: {e:#}");
                errors.push(format!("many: {}", format!("{e}").lines().next().unwrap_or("")));
            }
        }
    }

    let mut idle_report = String::new();
    if selected.contains(&"idle") {
        eprintln!("[{}/{}] idle (load {})", selected.len(), selected.len(), loadavg());
        let opts = idle::IdleOpts {
            window: Duration::from_secs(args.idle_window_secs),
            clusters: args.idle_clusters,
            paused: args.idle_paused,
            quiet: Duration::from_secs(args.idle_quiet_secs),
        };
        match idle::run(&ctx, &opts) {
            Ok((text, _all_met)) => idle_report = text,
            Err(e) => {
                eprintln!("  idle FAILED: {e:#}");
                errors.push(format!("idle: {}", format!("{e}").lines().next().unwrap_or("")));
            }
        }
    }

    let table = table::render(&selected, &results, &header, started.elapsed());
    println!("{table}{idle_report}");
    if !errors.is_empty() {
        println!("ERRORS ({}): see the stderr output above for details", errors.len());
        for e in &errors {
            println!("  {e}");
        }
    }
    Ok(errors.is_empty())
}

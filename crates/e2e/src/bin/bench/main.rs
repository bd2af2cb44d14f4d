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
//!
//! Every sample runs in a fresh namespace that is deleted afterwards (also on errors and on
//! Ctrl-C); operator samples start `target/release/etcd-operator run --namespace NS` as a process
//! of this machine. Per-sample timelines (what was seen when, the operator's actions from its
//! JSON log, pod timestamps and Events) go to stderr; the result table goes to stdout.

mod backup;
mod etcd;
mod idle;
mod kube;
mod observe;
mod recover;
mod report;
mod scenarios;
mod space;
mod tls;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use e2e::Kubectl;

use report::{Sample, Stats, fmt_n, fmt_s, stats};
use scenarios::Ctx;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const MEASUREMENTS: [&str; 10] =
    ["create", "heal", "scale", "upgrade", "recover", "defrag", "nospace", "backup", "tls", "idle"];
/// What runs without `--only`: `idle` and `tls` take long and are asked for by name.
const DEFAULT_MEASUREMENTS: [&str; 8] =
    ["create", "heal", "scale", "upgrade", "recover", "defrag", "nospace", "backup"];

#[derive(Parser, Debug)]
#[command(about = "Benchmark the etcd operator against baselines on the local Kubernetes")]
struct Args {
    /// Measurements to run, comma-separated: create, heal, scale, upgrade, recover, defrag, nospace,
    /// backup, tls, idle (default:
    /// all but tls and idle). Each includes its baseline; idle runs once whatever --runs says. backup is in
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

    // Ctrl-C / SIGTERM: delete the namespaces, exit; the operators and other processes the bench
    // started die with it (e2e::process).
    let k2 = kubectl.clone();
    rt.spawn(async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        let _ = std::io::Write::write_all(&mut std::io::stderr(), b"\nbench: interrupted; cleaning up\n");
        e2e::harness::delete_live_namespaces(&k2);
        std::process::exit(130);
    });

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
    for (i, m) in selected.iter().enumerate().filter(|(_, m)| !matches!(**m, "idle" | "backup")) {
        // A measurement's operator sample and its baseline alternate, so a drift of the machine
        // affects both alike. The bare pod start is the baseline of heal (and of scale alone).
        let kinds: Vec<(&str, Scenario)> = match *m {
            "create" => vec![("create", scenarios::create), ("static", scenarios::static_create)],
            "heal" => vec![("heal", scenarios::heal), ("bare", scenarios::bare_pod)],
            "scale" if selected.contains(&"heal") => vec![("scale", scenarios::scale)],
            "scale" => vec![("scale", scenarios::scale), ("bare", scenarios::bare_pod)],
            "recover" if selected.contains(&"heal") => {
                vec![("recover-pvc", recover::pvc), ("recover-survivor", recover::survivor)]
            }
            "recover" => vec![
                ("recover-pvc", recover::pvc),
                ("recover-survivor", recover::survivor),
                ("bare", scenarios::bare_pod),
            ],
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

    let table = render(&selected, &results, &header, started.elapsed());
    println!("{table}{idle_report}");
    if !errors.is_empty() {
        println!("ERRORS ({}): see the stderr output above for details", errors.len());
        for e in &errors {
            println!("  {e}");
        }
    }
    Ok(errors.is_empty())
}

fn values(results: &BTreeMap<&str, Vec<Sample>>, kind: &str) -> Vec<f64> {
    results.get(kind).map(|v| v.iter().map(|s| s.value).collect()).unwrap_or_default()
}

/// The time of milestone `name` in each sample of `kind` that has it.
fn mark(results: &BTreeMap<&str, Vec<Sample>>, kind: &str, name: &str) -> Vec<f64> {
    results
        .get(kind)
        .map(|v| v.iter().filter_map(|s| s.marks.get(name)).map(|d| d.as_secs_f64()).collect())
        .unwrap_or_default()
}

fn extra(results: &BTreeMap<&str, Vec<Sample>>, kind: &str, key: &str) -> Vec<f64> {
    results.get(kind).map(|v| v.iter().filter_map(|s| s.extra.get(key).copied()).collect()).unwrap_or_default()
}

/// `name: value (baseline: x, ratio: y, target: ≤z) PASS/MISS`
fn line(name: &str, value: Option<Stats>, baseline: Option<(&str, Stats)>, target: Option<f64>) -> String {
    let Some(v) = value else { return format!("{name}: no successful sample (ERROR)") };
    let (base, ratio) = match baseline {
        Some((what, b)) => (format!("{what} {}", fmt_s(b)), Some(v.median / b.median)),
        None => ("none".into(), None),
    };
    let ratio_s = ratio.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into());
    let (target_s, verdict) = match (target, ratio) {
        (Some(t), Some(r)) => (format!("≤{t:.1}×"), if r <= t { "PASS" } else { "MISS" }),
        (Some(t), None) => (format!("≤{t:.1}×"), "ERROR (no baseline)"),
        (None, _) => ("none set".into(), "INFO"),
    };
    format!("{name}: {} (baseline: {base}, ratio: {ratio_s}, target: {target_s}) {verdict}", fmt_s(v))
}

/// Median time of each milestone over the runs (only those seen in every run).
fn breakdown(kind: &str, title: &str, results: &BTreeMap<&str, Vec<Sample>>) -> String {
    let Some(samples) = results.get(kind) else { return String::new() };
    let mut names: Vec<String> = vec![];
    for s in samples {
        for (n, _) in &s.marks.0 {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let mut rows: Vec<(f64, String)> = names
        .iter()
        .filter_map(|n| {
            let ts: Vec<f64> = samples.iter().filter_map(|s| s.marks.get(n)).map(|d| d.as_secs_f64()).collect();
            let st = stats(&ts)?;
            let seen = if ts.len() < samples.len() {
                format!("  (in {}/{} runs)", ts.len(), samples.len())
            } else {
                String::new()
            };
            Some((st.median, format!("    {:7.2}s  [{:6.2} … {:6.2}]  {n}{seen}", st.median, st.min, st.max)))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = format!("  {title} — medians [min … max] from the action:\n");
    for (_, r) in rows {
        out.push_str(&r);
        out.push('\n');
    }
    out
}

fn render(selected: &[&str], r: &BTreeMap<&str, Vec<Sample>>, header: &str, took: Duration) -> String {
    let mut out = String::new();
    out.push_str(&format!("\n=== {header}; took {:.0} min ===\n", took.as_secs_f64() / 60.0));
    let st = |k: &str| stats(&values(r, k));
    let bare = st("bare").map(|b| ("bare pod start", b));
    for m in selected {
        match *m {
            "create" => {
                out.push_str(&line(
                    "create 3 members (apply → 3 answer + status 3 ready)",
                    st("create"),
                    st("static").map(|b| ("static 3-pod bootstrap", b)),
                    Some(1.2),
                ));
                out.push('\n');
                out.push_str(&line(
                    "  create, etcd healthy only (3 answer, before status)",
                    stats(&extra(r, "create", "etcd_healthy")),
                    st("static").map(|b| ("static 3-pod bootstrap", b)),
                    None,
                ));
                out.push('\n');
                if let Some(rs) = stats(&extra(r, "static", "restarts")) {
                    out.push_str(&format!("  static bootstrap container restarts: {}\n", fmt_n(rs)));
                }
            }
            "tls" => {
                out.push_str(&line(
                    "create 3 members with TLS.auto (apply → status 3 ready)",
                    st("create-tls"),
                    stats(&mark(r, "create", "status: 3 ready")).map(|b| ("plaintext create, status 3 ready", b)),
                    None,
                ));
                out.push('\n');
                out.push_str(&line(
                    "CA rotation, per member (total / 3; two rolling restarts)",
                    st("ca-rotation"),
                    None,
                    None,
                ));
                out.push('\n');
                if let Some(t) = stats(&extra(r, "ca-rotation", "total")) {
                    out.push_str(&format!("  CA rotation of 3 members total: {}\n", fmt_s(t)));
                }
                out.push_str(&breakdown("ca-rotation", "CA rotation", r));
            }
            "heal" => {
                out.push_str(&line(
                    "heal 1 deleted member (delete → 3 answer + status 3 ready)",
                    st("heal"),
                    bare,
                    Some(2.0),
                ));
                out.push('\n');
                out.push_str(&line(
                    "  heal, etcd healthy only (before status)",
                    stats(&extra(r, "heal", "etcd_healthy")),
                    bare,
                    None,
                ));
                out.push('\n');
            }
            "scale" => {
                out.push_str(&line("scale 3→5, per member (total / 2)", st("scale"), bare, None));
                out.push('\n');
                if let Some(t) = stats(&extra(r, "scale", "total")) {
                    out.push_str(&format!("  scale 3→5 total: {}\n", fmt_s(t)));
                }
            }
            "recover" => {
                out.push_str(&line(
                    "recover 3-member PVC cluster from 2 deleted pods (no quorum meanwhile)",
                    st("recover-pvc"),
                    bare,
                    None,
                ));
                out.push('\n');
                out.push_str(&line(
                    "recover 2-of-3 emptyDir loss, FromSurvivor (afterSeconds 0) → 3 members",
                    st("recover-survivor"),
                    bare,
                    None,
                ));
                out.push('\n');
            }
            "upgrade" => {
                out.push_str(&line("upgrade 3 members 3.5.0→3.5.1 under writes", st("upgrade"), None, None));
                out.push('\n');
                let e = |k| stats(&extra(r, "upgrade", k));
                if let (Some(f), Some(rt), Some(w)) = (e("failed"), e("retries"), e("writes")) {
                    let lw = e("leader_waits").map(fmt_n).unwrap_or_else(|| "-".into());
                    out.push_str(&format!(
                        "  upgrade failed writes: {} (retries on another endpoint: {}; rounds re-sent during a leader election: {lw}; writes in the interval: {})\n",
                        fmt_n(f),
                        fmt_n(rt),
                        fmt_n(w)
                    ));
                }
                if let (Some(l), Some(g), Some(mi)) = (e("max_latency_ms"), e("longest_gap_ms"), e("missing")) {
                    out.push_str(&format!(
                        "  upgrade write max latency ms: {}; longest gap without a completed write ms: {}; acknowledged writes missing afterwards: {}\n",
                        fmt_n(l),
                        fmt_n(g),
                        fmt_n(mi)
                    ));
                }
            }
            "defrag" => {
                out.push_str(&line(
                    "defrag 1 member, s per 100 MiB rewritten (operator policy)",
                    st("defrag"),
                    st("defrag-etcdctl").map(|b| ("defragment call by hand", b)),
                    None,
                ));
                out.push('\n');
                if let Some(t) = stats(&extra(r, "defrag", "total")) {
                    out.push_str(&format!(
                        "  defrag 3 members, compaction → all shrunk (includes the ≤15 s health-check wait): {}\n",
                        fmt_s(t)
                    ));
                }
            }
            "nospace" => {
                out.push_str(&line(
                    "NOSPACE 16 MiB quota: keys deleted → writable again",
                    st("nospace"),
                    st("nospace-manual").map(|b| ("scripted compact+defrag+disarm", b)),
                    None,
                ));
                out.push('\n');
            }
            "backup" => out.push_str(&backup::render(r)),
            _ => {}
        }
    }
    if r.is_empty() {
        return out;
    }
    out.push_str(
        "\nWhere the time goes (milestones from the bench's polls every ~250 ms; `op …` from the operator's log):\n",
    );
    for (k, title) in [
        ("create", "create (operator)"),
        ("static", "static 3-pod bootstrap (baseline)"),
        ("heal", "heal (operator)"),
        ("bare", "bare pod start (baseline)"),
        ("scale", "scale 3→5 (operator)"),
        ("recover-pvc", "recover PVC cluster from 2 lost pods (operator)"),
        ("recover-survivor", "recover FromSurvivor (operator)"),
        ("upgrade", "upgrade 3.5.0→3.5.1 (operator)"),
        (backup::S3, "backup to S3 (operator)"),
        (backup::PVC, "backup to a PVC (operator)"),
        (backup::BASELINE, "etcdctl snapshot save pod (baseline)"),
    ] {
        out.push_str(&breakdown(k, title, r));
    }
    out
}

//! `chaos`: faults injected at random (from a printed seed) into a mix of EtcdClusters while the
//! operator runs in-cluster with 2 replicas and clients write and read through the client
//! Services and member IPs; afterwards the history is checked and the operator's invariants
//! are reported. A command, not a test (`cargo test` never runs it): use `hack/chaos.sh`.
//!
//! | module | what |
//! |---|---|
//! | `plan` | seed → the sequence of faults (pure, replayable); cluster descriptions |
//! | `faults` | injecting and healing one fault (kubectl, ctr, nsenter+iptables, hack/cluster.sh) |
//! | `clients` | the client tasks and the recorded history |
//! | `checker` | per-key linearizable register check; lost and phantom writes |
//! | `monitor` | one sample per cluster per second: status, pods, a probe of each member |
//! | `invariants` | quorum losses and their cause, cluster ID changes, convergence times |
//! | `report` | text table and JSON in target/chaos/<run>/ |

mod checker;
mod clients;
mod faults;
mod invariants;
mod monitor;
mod plan;
mod report;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Parser;
use e2e::harness::{InClusterOperator, Install, client_endpoint, events_v1, wait_healthy};
use e2e::manifests::cluster_manifest;
use e2e::{Kubectl, TestNamespace};

use plan::{ClusterDesc, Gap, Kind, VERSIONS};

pub const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
const DEFAULT_CLUSTERS: &str = "one:1:pvc:backup,three:3:pvc:backup,quota:3:empty:quota,five:5:empty:resize";

#[derive(Parser, Debug)]
#[command(
    about = "Inject faults into etcd clusters run by the operator; check clients' history and the operator's invariants"
)]
struct Args {
    /// Faults to inject.
    #[arg(long, default_value_t = 20)]
    faults: usize,
    /// Seed of the fault sequence (default: a random one, printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Stop injecting after this many minutes even if faults remain (0: no limit).
    #[arg(long, default_value_t = 0)]
    minutes: u64,
    /// Clusters, comma-separated `name:size:pvc|empty[:backup][:quota][:resize]`.
    #[arg(long, default_value = DEFAULT_CLUSTERS)]
    clusters: String,
    /// Only these fault kinds (comma-separated names as in the report; default: all).
    #[arg(long, value_delimiter = ',')]
    kinds: Vec<String>,
    /// Also restart kube-apiserver and the kubelet (hack/cluster.sh restart): they stop the
    /// cluster for everyone on this machine, so only on a machine of your own.
    #[arg(long)]
    node_faults: bool,
    /// Client tasks per cluster (the first of every three goes through the Service).
    #[arg(long, default_value_t = 3)]
    clients: u32,
    /// Pause between two calls of one client, ms.
    #[arg(long, default_value_t = 200)]
    client_pause_ms: u64,
    /// Bound on the convergence after each fault and at the end, seconds.
    #[arg(long, default_value_t = 300)]
    converge_secs: u64,
    /// How long after a fault (or an operator Event) a quorum loss is attributed to it, seconds.
    #[arg(long, default_value_t = 30)]
    window_secs: u64,
    /// Print the plan and exit.
    #[arg(long)]
    dry_run: bool,
    /// Keep the namespace afterwards.
    #[arg(long)]
    keep: bool,
}

pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// `HH:MM:SS.mmm` (UTC) of a unix time in ms.
pub fn fmt_ms(ms: u64) -> String {
    let s = ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02}.{:03}", s / 3600, s / 60 % 60, s % 60, ms % 1000)
}

/// Unix ms of an RFC 3339 UTC time as the apiserver writes them (`2026-11-24T08:10:11.123456Z`).
fn parse_time(s: &str) -> Option<u64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let d: Vec<i64> = date.split('-').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let (y, m, day) = (d[0] - i64::from(d[1] <= 2), d[1], d[2]);
    // Days from civil (Howard Hinnant's algorithm).
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let ms: i64 = format!("{:0<3}", &frac[..frac.len().min(3)]).parse().ok()?;
    Some(((days * 86_400 + t[0] * 3600 + t[1] * 60 + t[2]) * 1000 + ms) as u64)
}

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("chaos: error: {e:#}");
            std::process::exit(2);
        }
    }
}

fn cluster_yaml(ns: &str, d: &ClusterDesc) -> String {
    let mut extra = String::new();
    if d.pvc {
        extra.push_str("  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 256Mi}}\n");
    }
    if d.quota {
        extra.push_str("  maintenance:\n    quotaBackendBytes: 33554432\n");
    }
    let mut y = cluster_manifest(ns, &d.name, d.size, VERSIONS[0], &extra);
    if d.backup {
        let n = &d.name;
        y.push_str(&format!(
            "\n---\napiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: backups-{n}, namespace: {ns}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n---\napiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: {n}-periodic, namespace: {ns}}}\nspec:\n  clusterName: {n}\n  storageType: PVC\n  pvc: {{claimName: backups-{n}, path: {n}/etcd.backup}}\n  backupPolicy: {{backupIntervalInSecond: 60, maxBackups: 3, timeoutInSecond: 30}}\n"
        ));
    }
    y
}

fn run(args: Args) -> Result<bool> {
    let clusters: Vec<ClusterDesc> = args
        .clusters
        .split(',')
        .map(|s| ClusterDesc::parse(s.trim()).map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    let kinds: Vec<Kind> = args
        .kinds
        .iter()
        .map(|k| {
            Kind::parse(k)
                .with_context(|| format!("--kinds {k}: unknown (known: {})", Kind::ALL.map(|k| k.name()).join(", ")))
        })
        .collect::<Result<_>>()?;
    let seed = args.seed.unwrap_or_else(|| {
        let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
        t ^ (u64::from(std::process::id()) << 32)
    });
    let steps = plan::plan(seed, args.faults, &clusters, &kinds, args.node_faults);
    let mut command = format!("hack/chaos.sh --seed {seed} --faults {} --clusters {}", args.faults, args.clusters);
    if !args.kinds.is_empty() {
        command.push_str(&format!(" --kinds {}", args.kinds.join(",")));
    }
    if args.node_faults {
        command.push_str(" --node-faults");
    }
    eprintln!("chaos: seed {seed}; replay with: {command}");
    for s in &steps {
        let c = s.cluster.map(|i| clusters[i].name.as_str()).unwrap_or("-");
        eprintln!("chaos: plan #{:<3} {:<24} {:<8} hold {:>5} ms {:?}", s.index, s.kind.name(), c, s.hold_ms, s.gap);
    }
    if args.dry_run {
        return Ok(true);
    }
    if steps.len() < args.faults {
        bail!("only {} faults can be planned for these clusters and kinds", steps.len());
    }
    let workspace = PathBuf::from(WORKSPACE).canonicalize().unwrap_or_else(|_| PathBuf::from(WORKSPACE));
    let out_dir = workspace.join("target/chaos").join(format!("chaos-{}-{seed}", now_ms() / 1000));
    std::fs::create_dir_all(&out_dir)?;
    let kubectl = Kubectl::from_env()?;
    let nodes = kubectl.node_ready_statuses().context("the cluster does not answer")?;
    if nodes.is_empty() || nodes.iter().any(|(_, r)| r != "True") {
        bail!("not every node is Ready: {nodes:?}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // Ctrl-C / SIGTERM / SIGHUP: the harness deletes the namespace and ends the process
    // (`harness::namespace`).

    let t_start = Instant::now();
    let ns = TestNamespace::create_with(&kubectl, "e2e-chaos")?;
    eprintln!("chaos: namespace {}; installing the operator with 2 replicas", ns.name);
    let op = InClusterOperator::install(&ns, &Install { replicas: 2, ..Install::default() })?;
    for d in &clusters {
        ns.apply(&cluster_yaml(&ns.name, d))?;
    }
    let mut services = HashMap::new();
    for d in &clusters {
        wait_healthy(&ns, &d.name, d.size, Duration::from_secs(300))?;
        services.insert(d.name.clone(), client_endpoint(&ns, &d.name)?);
    }
    eprintln!("chaos: {} clusters healthy after {:.0} s", clusters.len(), t_start.elapsed().as_secs_f64());

    let shared = Arc::new(clients::Shared::new());
    let mon = monitor::Monitor::default();
    let stop_mon = AtomicBool::new(false);
    let names: Vec<String> = clusters.iter().map(|d| d.name.clone()).collect();
    let window_ms = args.window_secs * 1000;
    let mut records: Vec<faults::FaultRecord> = vec![];
    let mut final_converge_s = None;
    let mut final_reads: BTreeMap<(String, String), Option<String>> = BTreeMap::new();
    let mut final_reads_ok = true;
    let inj = faults::Injector::new(&ns, &op, &mon, rt.handle(), &clusters)?;
    let t_faults = Instant::now();
    std::thread::scope(|sc| -> Result<()> {
        sc.spawn(|| monitor::run(&ns, rt.handle(), &names, &services, &shared, &mon, &op, &stop_mon));
        // Clients start once the monitor published the member IPs.
        std::thread::sleep(Duration::from_secs(3));
        let mut tasks = vec![];
        for (ci, c) in names.iter().enumerate() {
            for id in 0..args.clients {
                let s = shared.clone();
                let pause = Duration::from_millis(args.client_pause_ms);
                let cseed = seed ^ ((ci as u64) << 40) ^ u64::from(id);
                tasks.push(rt.spawn(clients::client(s, c.clone(), id, cseed, pause)));
            }
        }
        std::thread::sleep(Duration::from_secs(5));
        let converge = Duration::from_secs(args.converge_secs);
        for step in &steps {
            if args.minutes > 0 && t_faults.elapsed() > Duration::from_secs(args.minutes * 60) {
                eprintln!("chaos: --minutes {} reached; stopping injection", args.minutes);
                break;
            }
            let rec = inj.inject(step, seed);
            eprintln!(
                "chaos: {} fault #{} {} {}: {}{}",
                fmt_ms(rec.inject_ms),
                rec.index,
                rec.kind,
                rec.cluster.as_deref().unwrap_or("-"),
                rec.detail,
                rec.error.as_deref().map(|e| format!(" ERROR {e}")).unwrap_or_default()
            );
            let end = rec.heal_ms.unwrap_or(rec.inject_ms);
            records.push(rec);
            match step.gap {
                Gap::Overlap(ms) => std::thread::sleep(Duration::from_millis(ms)),
                Gap::Converge => {
                    // Give the fault time to show, then wait for every cluster.
                    std::thread::sleep(Duration::from_secs(3));
                    let t = Instant::now();
                    while !mon.all_converged_since(end + 3_000) && t.elapsed() < converge {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                    let outcome = if mon.all_converged_since(end + 3_000) {
                        "every cluster converged"
                    } else {
                        "NOT every cluster converged; going on"
                    };
                    eprintln!(
                        "chaos: {} {outcome} ({:.1} s waited)",
                        fmt_ms(now_ms()),
                        t.elapsed().as_secs_f64() + 3.0
                    );
                }
            }
        }
        if std::env::var("CHAOS_SABOTAGE").as_deref() == Ok("hidden-quorum-loss")
            && let Some(d) = clusters.iter().find(|d| d.size >= 3)
        {
            // Self-test: a quorum loss no fault explains, after the attribution window.
            std::thread::sleep(Duration::from_millis(window_ms + 1_000));
            let r = inj.sabotage_stop_two(&d.name, Duration::from_secs(6));
            eprintln!("chaos: CHAOS_SABOTAGE: SIGSTOPped {r:?} of {} for 6 s, unrecorded", d.name);
        }
        let t = Instant::now();
        let last = now_ms();
        while !mon.all_converged_since(last) && t.elapsed() < converge {
            std::thread::sleep(Duration::from_millis(500));
        }
        if mon.all_converged_since(last) {
            final_converge_s = Some(t.elapsed().as_secs_f64());
        }
        eprintln!("chaos: faults done; final convergence {final_converge_s:?} s; stopping the clients");
        std::thread::sleep(Duration::from_secs(3));
        shared.stop.store(true, Ordering::Relaxed);
        rt.block_on(async {
            for t in tasks {
                let _ = t.await;
            }
        });
        if std::env::var("CHAOS_SABOTAGE").as_deref() == Ok("delete-acked-write") {
            // Self-test of the whole pipeline: one acknowledged write disappears behind the
            // clients' back; the report must say "lost" and the run must fail.
            let victim = shared
                .acked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .next()
                .and_then(|(c, v)| Some((c.clone(), v.first()?.0.clone())));
            if let Some((c, key)) = victim {
                let ep = services.get(&c).cloned().unwrap_or_default();
                let r = rt.block_on(async {
                    etcd_client::Client::connect([ep], None).await?.delete(key.as_str(), None).await
                });
                eprintln!("chaos: CHAOS_SABOTAGE: deleted acknowledged key {key} of {c}: {:?}", r.map(drop));
            }
        }
        for c in &names {
            // The Service first, then each member (a cluster under NOSPACE may have no Ready one).
            let mut eps = vec![services.get(c).cloned().unwrap_or_default()];
            eps.extend(
                shared
                    .targets
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .get(c)
                    .map(|t| t.members.clone())
                    .unwrap_or_default(),
            );
            match rt.block_on(clients::final_read(&eps, args.clients)) {
                Some(kv) => {
                    let seen: Vec<String> = shared
                        .history
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .iter()
                        .filter(|o| &o.cluster == c)
                        .map(|o| o.key.clone())
                        .collect();
                    for k in seen {
                        final_reads.insert((c.clone(), k.clone()), kv.get(&k).cloned());
                    }
                    for (k, v) in kv {
                        final_reads.insert((c.clone(), k), Some(v));
                    }
                }
                None => final_reads_ok = false,
            }
        }
        stop_mon.store(true, Ordering::Relaxed);
        Ok(())
    })?;
    inj.heal_all();
    let duration_s = t_start.elapsed().as_secs_f64();

    // The history.
    let history = std::mem::take(&mut *shared.history.lock().unwrap_or_else(PoisonError::into_inner));
    eprintln!("chaos: checking {} operations", history.len());
    let verdict = checker::check(&history, &final_reads, clients::write_once);

    // Events, logs, invariants.
    let mut events: Vec<invariants::Event> = vec![];
    for c in &names {
        for e in events_v1(&ns, c).unwrap_or_default() {
            if let Some(t) = parse_time(&e.last) {
                events.push((t, c.clone(), e.reason, e.note));
            }
        }
    }
    events.sort();
    let _ = op.logs();
    let logs = out_dir.join("operator.log");
    let _ = std::fs::copy(&op.log, &logs);
    let _ = std::fs::write(out_dir.join("diagnostics.txt"), e2e::harness::diagnostics(&ns, None));
    let mut samples = std::mem::take(&mut *mon.samples.lock().unwrap_or_else(PoisonError::into_inner));
    let refuted = invariants::refute(&mut samples, &history, shared.start_unix_ms);
    let foreign = invariants::foreign_answers(&history);
    let _ = std::fs::write(out_dir.join("samples.txt"), samples.iter().map(|s| s.line() + "\n").collect::<String>());
    let mut losses = vec![];
    let mut id_changes = vec![];
    let mut service_gaps = vec![];
    for c in &names {
        let mine: Vec<&monitor::Sample> = samples.iter().filter(|s| &s.cluster == c).collect();
        for (start, end, n) in invariants::quorum_losses(&mine) {
            let size = mine.iter().rev().find(|s| s.t_ms <= start).map(|s| s.spec_size).unwrap_or(0);
            let cause = invariants::attribute(c, start, size, &records, &events, window_ms);
            losses.push(invariants::Loss { cluster: c.clone(), start_ms: start, end_ms: end, samples: n, cause });
        }
        for (a, b) in invariants::service_gaps(&mine, 10_000) {
            service_gaps.push((c.clone(), a, b));
        }
        let ids = invariants::cluster_ids(&mine);
        if ids.len() > 1 {
            let s: Vec<String> = ids.iter().map(|(t, id)| format!("{} {id:x}", fmt_ms(*t))).collect();
            id_changes.push(format!("{c}: {}", s.join(" → ")));
        }
    }
    for r in records.iter_mut() {
        r.converged_ms = invariants::convergence_ms(r, &samples, 5_000);
    }
    let op_pods = mon.operator_pods.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let backups = ns.json(&["get", "etcdbackups"]).map(|v| {
        serde_json::Value::Array(
            v["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|b| serde_json::json!({"name": b["metadata"]["name"], "status": b["status"]}))
                .collect(),
        )
    });
    let inputs = report::Inputs {
        seed,
        command,
        duration_s,
        planned: steps.len(),
        faults: &records,
        verdict: &verdict,
        losses: &losses,
        refuted_samples: refuted,
        foreign_answers: &foreign,
        id_changes: &id_changes,
        service_gaps: &service_gaps,
        final_converge_s,
        operator_restarts: op_pods.values().map(|p| p.1).sum(),
        operator_exits: &mon.operator_exits.lock().unwrap_or_else(PoisonError::into_inner).clone(),
        operator_pods_seen: op_pods.len(),
        leader_changes: mon.lease_holders.lock().unwrap_or_else(PoisonError::into_inner).len().saturating_sub(1),
        samples: &samples,
        events: &events,
        backups: backups.unwrap_or_default(),
        window_ms,
        logs: format!("{} (operator), samples.txt, diagnostics.txt in {}", logs.display(), out_dir.display()),
        final_reads_ok,
    };
    let (js, text, pass) = report::build(&inputs);
    std::fs::write(out_dir.join("report.json"), serde_json::to_string_pretty(&js)?)?;
    std::fs::write(out_dir.join("report.txt"), &text)?;
    println!("{text}");
    eprintln!("chaos: report in {}; faults took {:.0} s", out_dir.display(), t_faults.elapsed().as_secs_f64());
    drop(inj);
    drop(op);
    if args.keep {
        eprintln!("chaos: keeping namespace {}", ns.name);
        std::mem::forget(ns);
    } else if let Err(e) = ns.finish(Duration::from_secs(180)) {
        eprintln!("chaos: warning: {e:#}");
    }
    Ok(pass)
}

#[cfg(test)]
mod tests {
    #[test]
    fn times() {
        assert_eq!(super::parse_time("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(super::parse_time("2026-11-24T08:10:11.123456Z"), Some(1_795_507_811_123));
        assert_eq!(super::fmt_ms(1_795_507_811_123), "08:10:11.123");
    }
}

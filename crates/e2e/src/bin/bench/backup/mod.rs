//! `backup`: throughput of the operator's one-shot EtcdBackup beside `etcdctl snapshot save` of
//! the same cluster, in the same run.
//!
//! Set-up, once per bench run, in one fresh namespace with its own operator process: a real S3
//! server (moto, on this machine, reached by pods at the node's address), its credentials Secret,
//! a PersistentVolumeClaim (the cluster's default host-path StorageClass), a healthy 3-member
//! EtcdCluster at 3.5.1 filled with `--backup-mib` values of 1 MiB of random bytes (written from
//! this machine straight to the leader's pod IP).
//!
//! Then, `--runs` times, in turn:
//! - `backup_s3`: apply a one-shot EtcdBackup (`clusterName`, `storageType: S3`) → its
//!   `status.succeeded` is true;
//! - `backup_pvc`: the same to the claim (`storageType: PVC`): the operator's own code path
//!   without the S3 server's speed;
//! - `snapshot_save` (baseline): a pod running the etcd 3.5.1 image's `etcdctl snapshot save`
//!   against the member the operator's backup pod picks (the first follower of the member list
//!   at equal revisions), into an emptyDir → the pod has Succeeded.
//!
//! Two durations per sample: end to end (the action until the result is visible in the API,
//! seen by a `kubectl --watch`; both include a pod start) and the transfer alone, measured inside
//! the pod (the operator's backup pod reports `transferSeconds` in its termination message:
//! snapshot stream, upload and completion; etcdctl logs `fetching snapshot` and `saved` with
//! millisecond timestamps: stream, fsync and rename). Throughput is the snapshot's size (the
//! backup's `status.size`; for etcdctl the member's `dbSize` + the 32-byte checksum etcd
//! appends, checked against `status.size`) divided by either duration.
//!
//! Everything is removed afterwards: the namespace (cluster, claim, pods), the stored objects,
//! and moto itself (stopped when dropped).

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use e2e::TestNamespace;
use e2e::harness::Operator;
use e2e::objstore::{MotoServer, ObjectServer};
use serde_json::Value;

use crate::kube::PodInfo;
use crate::observe::{Marks, Observer};
use crate::report::{Sample, operator_timeline, secs};
use crate::scenarios::{self, CLUSTER, Ctx};

/// Result kinds of this measurement.
pub const S3: &str = "backup_s3";
pub const PVC: &str = "backup_pvc";
pub const BASELINE: &str = "snapshot_save";
/// One pseudo-sample describing the set-up (value: the members' largest dbSize in bytes).
pub const SETUP: &str = "backup_setup";

/// The target: the operator's backup throughput at least this fraction of etcdctl's.
pub const TARGET_RATIO: f64 = 0.8;
const MIB: f64 = 1024.0 * 1024.0;
const VALUE_BYTES: usize = 1 << 20;
const BUCKET: &str = "bench-backups";
const SECRET: &str = "bench-s3";
const CLAIM: &str = "bench-backups";
const ETCDCTL_LABEL: &str = "bench-etcdctl";
/// etcd's default `backupPolicy.timeoutInSecond`; the bench sets `--timeout-secs` instead so a
/// slow backup is measured, and warns when a transfer took longer than this.
const DEFAULT_BACKUP_TIMEOUT_SECS: f64 = 60.0;

pub struct BackupOpts {
    /// MiB of values written before the backups (values of 1 MiB).
    pub data_mib: usize,
}

/// What `run` measured: samples by kind (including [`SETUP`]) and the errors of failed samples.
pub struct Outcome {
    pub results: BTreeMap<&'static str, Vec<Sample>>,
    pub errors: Vec<String>,
}

mod report;
mod setup;
#[cfg(test)]
mod tests;
mod watch;

pub use report::render;
use report::{etcdctl_transfer, event_counts, mib_per_s, pod_line, save_report, transfer_from_note};
use setup::{Target, backup_manifest, db_size, etcdctl_pod, fill, moto_put_probe, pvc_manifest};
use watch::Watch;

// --- the samples --------------------------------------------------------------------------------

/// One EtcdBackup to `storage_type`: apply → `status.succeeded`. The EtcdBackup is deleted
/// afterwards, also after a failure (a failed one-shot backup would be retried during the next
/// samples), and its pods are gone before the next sample starts.
fn operator_sample(
    ctx: &Ctx,
    ns: &TestNamespace,
    op: &Operator,
    name: &str,
    storage_type: &str,
    storage: &str,
    title: &str,
) -> Result<Sample> {
    let measured = measure_backup(ctx, ns, op, name, storage_type, storage, title);
    let removed = ns
        .run(&[
            "delete",
            "etcdbackup",
            name,
            "--ignore-not-found",
            "--wait=true",
            &format!("--timeout={}s", ctx.timeout.as_secs()),
        ])
        .and_then(|_| {
            e2e::wait_until(ctx.timeout, &format!("the pods of EtcdBackup {name} to be gone"), || {
                let left = ns.run(&["get", "pods", "-l", &format!("etcd_backup={name}"), "-o", "name"])?;
                Ok(left.trim().is_empty().then_some(()))
            })
        });
    let sample = measured?;
    removed?;
    Ok(sample)
}

fn measure_backup(
    ctx: &Ctx,
    ns: &TestNamespace,
    op: &Operator,
    name: &str,
    storage_type: &str,
    storage: &str,
    title: &str,
) -> Result<Sample> {
    let mut pods = Watch::start(ns, &["pods", "-l", &format!("etcd_backup={name}")])?;
    let mut backups = Watch::start(ns, &["etcdbackups.etcd.database.coreos.com"])?;
    std::thread::sleep(Duration::from_millis(500)); // both watches are established
    let (t0, t0_wall) = (Instant::now(), SystemTime::now());
    ns.apply(&backup_manifest(&ns.name, name, storage_type, storage, ctx.timeout.as_secs()))?;
    let applied = t0.elapsed();
    let (t_done, b) = backups.until(ctx.timeout, &format!("EtcdBackup {name} status.succeeded"), |v| {
        if v["metadata"]["name"] != name {
            return Ok(false);
        }
        let st = &v["status"];
        if st["consecutiveFailures"].as_i64().unwrap_or(0) > 0 {
            bail!("EtcdBackup {name} failed: {}", st["reason"].as_str().unwrap_or("?"));
        }
        Ok(st["succeeded"] == true)
    })?;
    let at = t_done - t0;
    // The terminated pod reaches the watch before the operator records it; allow a moment.
    let terminated = |v: &Value| !v["status"]["containerStatuses"][0]["state"]["terminated"].is_null();
    let _ = pods.until(Duration::from_secs(5), "the terminated backup pod", |v| Ok(terminated(v)));
    let pod_events = pods.stop();
    drop(backups);

    let st = &b["status"];
    let size = st["size"].as_f64().unwrap_or(0.0);
    let mut marks = Marks::default();
    marks.once("kubectl apply returned", true, applied);
    let rel_i = |t: Instant| t.saturating_duration_since(t0);
    if let Some((t, _)) = pod_events.first() {
        marks.once("backup pod seen (watch)", true, rel_i(*t));
    }
    for (t, v) in &pod_events {
        let cs = &v["status"]["containerStatuses"][0]["state"];
        marks.once("backup container running (watch)", !cs["running"].is_null() || terminated(v), rel_i(*t));
        marks.once("backup container terminated (watch)", terminated(v), rel_i(*t));
    }
    marks.once("status.succeeded (watch)", true, at);
    let last_pod = pod_events.iter().rev().find(|(_, v)| terminated(v)).map(|(_, v)| v.clone());
    let report = last_pod
        .as_ref()
        .and_then(|p| save_report(p["status"]["containerStatuses"][0]["state"]["terminated"]["message"].as_str()?));
    let mut transfer = report.as_ref().map(|r| r.0);
    let mut source = "the pod's termination message";
    if transfer.is_none() {
        // The watch missed the terminated pod: the Event note has it at 0.1 s.
        let evs = ns.json(&["get", "events", "--field-selector", &format!("involvedObject.name={name}")])?;
        transfer = evs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "BackupSucceeded")
            .find_map(|e| transfer_from_note(e["message"].as_str()?));
        source = "the BackupSucceeded Event (0.1 s)";
    }
    let mut facts = vec![format!(
        "status: size {size:.0} bytes ({:.1} MiB), sha256 {}, path {}, revision {}",
        size / MIB,
        st["sha256"].as_str().unwrap_or("?"),
        st["path"].as_str().unwrap_or("?"),
        st["etcdRevision"]
    )];
    match (&report, transfer) {
        (Some((t, _, member)), _) => {
            facts.push(format!("backup pod report: member {member}, transferSeconds {t:.3} (from {source})"))
        }
        (None, Some(t)) => facts.push(format!("transfer {t:.1}s (from {source})")),
        (None, None) => facts.push("no transfer time: neither the termination message nor the Event was seen".into()),
    }
    if let Some(p) = &last_pod {
        facts.push(pod_line(p, t0_wall));
    }
    // A success recorded more than once (a reconcile that still sees the finished pod) shows as
    // a BackupSucceeded series of more than one.
    if let Ok(evs) = ns.json(&["get", "events", "--field-selector", &format!("involvedObject.name={name}")]) {
        facts.push(format!("Events of EtcdBackup {name}: {}", event_counts(&evs)));
    }
    if transfer.is_some_and(|t| t > DEFAULT_BACKUP_TIMEOUT_SECS) {
        facts.push(format!(
            "WARNING: the transfer took longer than the default backupPolicy.timeoutInSecond ({DEFAULT_BACKUP_TIMEOUT_SECS}s): \
             with the default this backup would have failed"
        ));
    }
    let (op_marks, steps) = operator_timeline(&op.log_text(), t0_wall, secs(at));
    marks.0.extend(op_marks.0);
    scenarios::print_timeline(
        &format!("{title} (namespace {}, EtcdBackup {name})", ns.name),
        at,
        &marks,
        &steps,
        &facts,
    );

    Ok(throughput_sample(at, marks, size, transfer, "backup container running (watch)"))
}

/// A sample of `bytes` moved: end to end in `at`, in `transfer` seconds inside the pod, the
/// container running at the mark `running`.
fn throughput_sample(at: Duration, marks: Marks, bytes: f64, transfer: Option<f64>, running: &str) -> Sample {
    let mut sample = Sample { value: secs(at), marks, extra: BTreeMap::new() };
    sample.extra.insert("bytes", bytes);
    if let Some(r) = mib_per_s(bytes, secs(at)) {
        sample.extra.insert("e2e_mibs", r);
    }
    if let Some(t) = transfer {
        sample.extra.insert("transfer_s", t);
        if let Some(r) = mib_per_s(bytes, t) {
            sample.extra.insert("transfer_mibs", r);
        }
    }
    if let Some(d) = sample.marks.get(running) {
        sample.extra.insert("start_s", secs(d));
    }
    sample
}

/// The baseline: `etcdctl snapshot save` in a pod → the pod Succeeded. The pod is deleted
/// afterwards, also after a failure.
fn etcdctl_sample(ctx: &Ctx, ns: &TestNamespace, name: &str, member: &Target) -> Result<Sample> {
    let measured = measure_etcdctl(ctx, ns, name, member);
    let timeout = format!("--timeout={}s", ctx.timeout.as_secs());
    let removed = ns.run(&["delete", "pod", name, "--ignore-not-found", "--wait=true", &timeout]);
    let sample = measured?;
    removed?;
    Ok(sample)
}

fn measure_etcdctl(ctx: &Ctx, ns: &TestNamespace, name: &str, member: &Target) -> Result<Sample> {
    // The snapshot etcd streams is the database plus its 32-byte sha256.
    let bytes = (db_size(ctx, &member.ip)? + 32) as f64;
    let mut watch = Watch::start(ns, &["pods", "-l", &format!("app={ETCDCTL_LABEL}")])?;
    std::thread::sleep(Duration::from_millis(500));
    let (t0, t0_wall) = (Instant::now(), SystemTime::now());
    ns.apply(&etcdctl_pod(&ns.name, name, &format!("http://{}:2379", member.ip)))?;
    let applied = t0.elapsed();
    let waited = watch.until(ctx.timeout, &format!("pod {name} to succeed"), |v| {
        if v["metadata"]["name"] != name {
            return Ok(false);
        }
        if let Some(why) = PodInfo::from_json(v).hopeless() {
            bail!("{why}");
        }
        match v["status"]["phase"].as_str() {
            Some("Succeeded") => Ok(true),
            Some("Failed") => bail!("pod {name} failed: {}", v["status"]["containerStatuses"][0]["state"]),
            _ => Ok(false),
        }
    });
    let events = watch.stop();
    let logs = ns.run(&["logs", name]).unwrap_or_default();
    let (t_done, pod) = waited.map_err(|e| anyhow::anyhow!("{e:#}\netcdctl log:\n{logs}"))?;
    let at = t_done - t0;

    let mut marks = Marks::default();
    marks.once("kubectl apply returned", true, applied);
    for (t, v) in &events {
        let t = t.saturating_duration_since(t0);
        let cs = &v["status"]["containerStatuses"][0]["state"];
        marks.once("etcdctl pod seen (watch)", true, t);
        marks.once("etcdctl container running (watch)", !cs["running"].is_null() || !cs["terminated"].is_null(), t);
        marks.once("etcdctl container terminated (watch)", !cs["terminated"].is_null(), t);
    }
    marks.once("pod Succeeded (watch)", true, at);
    let transfer = etcdctl_transfer(&logs);
    let mut facts = vec![format!(
        "member {} ({}): dbSize {} bytes → snapshot {bytes:.0} bytes ({:.1} MiB)",
        member.pod,
        member.ip,
        bytes as i64 - 32,
        bytes / MIB
    )];
    match &transfer {
        Some((t, size)) => facts.push(format!("etcdctl log: \"fetching snapshot\" → \"saved\" {t:.3}s, size {size}")),
        None => facts.push(format!("etcdctl log without both timestamps:\n{logs}")),
    }
    facts.push(pod_line(&pod, t0_wall));
    scenarios::print_timeline(
        &format!("etcdctl snapshot save (namespace {}, pod {name})", ns.name),
        at,
        &marks,
        &[],
        &facts,
    );

    Ok(throughput_sample(at, marks, bytes, transfer.map(|(t, _)| t), "etcdctl container running (watch)"))
}

// --- the measurement ----------------------------------------------------------------------------

pub fn run(ctx: &Ctx, runs: usize, opts: &BackupOpts) -> Result<Outcome> {
    let t = Instant::now();
    let moto = MotoServer::start().context("starting moto (the S3 server)")?;
    moto.create_bucket(BUCKET)?;
    eprintln!(
        "  moto (S3) at {} ({:.1}s to start), log {}",
        moto.endpoint(),
        t.elapsed().as_secs_f64(),
        moto.log_path().display()
    );
    let outcome = scenarios::in_namespace(ctx, "bench-backup", true, |ns, op| {
        let op = op.context("operator")?;
        measure(ctx, ns, op, &moto, runs, opts)
    });
    drop(moto); // stops the server; its objects were in memory
    outcome
}

fn measure(
    ctx: &Ctx,
    ns: &TestNamespace,
    op: &Operator,
    moto: &MotoServer,
    runs: usize,
    opts: &BackupOpts,
) -> Result<Outcome> {
    // Set-up (not measured).
    ns.apply(&moto.secret_manifest(&ns.name, SECRET))?;
    ns.apply(&pvc_manifest(&ns.name))?;
    let mut obs = Observer::new(ns, &ctx.rt, scenarios::SELECTOR, Some(CLUSTER));
    let t = Instant::now();
    let snap = scenarios::healthy_cluster(ctx, ns, &mut obs, 3, "3.5.1")?;
    eprintln!("  set-up: 3 healthy members at 3.5.1 after {:.1}s", t.elapsed().as_secs_f64());
    e2e::wait_until(ctx.timeout, &format!("PersistentVolumeClaim {CLAIM} Bound"), || {
        Ok((ns.json(&["get", "pvc", CLAIM])?["status"]["phase"] == "Bound").then_some(()))
    })?;
    let ip_of = |pod: &str| snap.pods.iter().find(|p| p.name == pod).and_then(|p| p.ip.clone());
    let leader = snap.probes.iter().find(|(_, p)| p.is_leader).map(|(n, _)| n.clone()).context("no leader")?;
    let leader_ip = ip_of(&leader).context("the leader has no IP")?;
    let t = Instant::now();
    fill(ctx, &format!("http://{leader_ip}:2379"), opts.data_mib)?;
    let fill_s = t.elapsed().as_secs_f64();
    // etcd commits its backend in batches: the sizes settle a moment after the last write.
    std::thread::sleep(ctx.settle);
    // The operator's backup pod reads from the first voter in member-list order that is not the
    // leader (equal revisions); the baseline reads from the same one.
    let order: Vec<String> = snap.members.clone().unwrap_or_default().into_iter().map(|m| m.pod).collect();
    let mut targets = Vec::new();
    for pod in &order {
        let ip = ip_of(pod).with_context(|| format!("member {pod} has no pod IP"))?;
        targets.push(Target { pod: pod.clone(), db_size: db_size(ctx, &ip)?, ip });
    }
    let member = targets.iter().find(|t| t.pod != leader).cloned().context("no follower")?;
    let max_db = targets.iter().map(|t| t.db_size).max().unwrap_or(0);
    eprintln!(
        "  set-up: {} values × 1 MiB written through the leader {leader} in {fill_s:.1}s; dbSize {}; baseline reads from {}",
        opts.data_mib,
        targets.iter().map(|t| format!("{} {:.1} MiB", t.pod, t.db_size as f64 / MIB)).collect::<Vec<_>>().join(", "),
        member.pod
    );

    let mut results: BTreeMap<&'static str, Vec<Sample>> = BTreeMap::new();
    let mut setup = Sample { value: max_db as f64, ..Default::default() };
    setup.extra.insert("fill_s", fill_s);
    setup.extra.insert("values", opts.data_mib as f64);
    // The S3 server's own speed, without the operator: one PUT of as many bytes from this host.
    match moto_put_probe(moto, &format!("{}/probe.bin", ns.name), max_db as usize) {
        Ok((put_s, sha_s)) => {
            eprintln!(
                "  set-up: moto took {put_s:.2}s for one PUT of {:.1} MiB from this host (of which {sha_s:.2}s the client's SHA-256 of the body for the signature): {:.1} MiB/s",
                max_db as f64 / MIB,
                mib_per_s(max_db as f64, put_s).unwrap_or(0.0)
            );
            setup.extra.insert("moto_put_s", put_s);
            setup.extra.insert("moto_sha_s", sha_s);
        }
        Err(e) => eprintln!("  set-up: warning: the moto PUT probe failed: {e:#}"),
    }
    std::thread::sleep(ctx.settle);
    results.insert(SETUP, vec![setup]);
    let mut errors = Vec::new();
    let endpoint = moto.endpoint();
    for run in 1..=runs {
        for kind in [S3, PVC, BASELINE] {
            eprintln!("  backup: {kind} run {run}/{runs} (load {})", crate::loadavg());
            let r = match kind {
                S3 => {
                    let key = format!("{}/s3-{run}.db", ns.name);
                    let storage = format!(
                        "s3: {{path: \"{BUCKET}/{key}\", awsSecret: {SECRET}, endpoint: \"{endpoint}\", forcePathStyle: true}}"
                    );
                    let r = operator_sample(ctx, ns, op, &format!("s3-{run}"), "S3", &storage, "backup to S3 (moto)");
                    if let Ok(s) = &r {
                        let stored = moto.list_objects(BUCKET, &key).ok().and_then(|l| l.first().map(|o| o.size));
                        if stored.is_some_and(|n| n as f64 != s.extra.get("bytes").copied().unwrap_or(-1.0)) {
                            eprintln!(
                                "    WARNING: the stored object has {stored:?} bytes, status.size says otherwise"
                            );
                        }
                    }
                    // moto keeps objects in memory: free them.
                    for k in [key.clone(), format!("{key}.meta.json")] {
                        if let Err(e) = moto.delete_object(BUCKET, &k) {
                            eprintln!("    warning: deleting {k} from moto: {e:#}");
                        }
                    }
                    r
                }
                PVC => {
                    let storage = format!("pvc: {{claimName: {CLAIM}, path: bench/pvc-{run}.db}}");
                    operator_sample(ctx, ns, op, &format!("pvc-{run}"), "PVC", &storage, "backup to a PVC")
                }
                _ => etcdctl_sample(ctx, ns, &format!("etcdctl-{run}"), &member),
            };
            match r {
                Ok(s) => results.entry(kind).or_default().push(s),
                Err(e) => {
                    eprintln!("  {kind} run {run} FAILED: {e:#}");
                    errors.push(format!("{kind} run {run}: {}", format!("{e:#}").lines().next().unwrap_or("")));
                }
            }
        }
    }
    Ok(Outcome { results, errors })
}

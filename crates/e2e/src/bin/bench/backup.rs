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
use std::io::BufReader;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use e2e::harness::Operator;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::process::Supervised;
use e2e::{ETCD_IMAGE_3_5_1, TestNamespace};
use etcd_client::{Client, ConnectOptions};
use serde_json::Value;

use crate::kube::PodInfo;
use crate::observe::{Marks, Observer};
use crate::report::{Sample, Stats, operator_timeline, parse_rfc3339_utc, rel, secs, stats};
use crate::scenarios::{self, CLUSTER, Ctx};

/// Result kinds of this measurement.
pub const S3: &str = "backup_s3";
pub const PVC: &str = "backup_pvc";
pub const BASELINE: &str = "snapshot_save";
/// One pseudo-sample describing the set-up (value: the members' largest dbSize in bytes).
pub const SETUP: &str = "backup_setup";

/// The issue's target: the operator's backup throughput at least this fraction of etcdctl's.
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

// --- pure helpers (unit-tested) -----------------------------------------------------------------

/// MiB/s of `bytes` moved in `secs` (None for a zero or negative duration).
pub fn mib_per_s(bytes: f64, secs: f64) -> Option<f64> {
    (secs > 0.0 && bytes >= 0.0).then(|| bytes / MIB / secs)
}

pub fn fmt_rate(s: Stats) -> String {
    format!("{:.1} MiB/s [min {:.1}, max {:.1}, n={}]", s.median, s.min, s.max, s.n)
}

/// `name: value (baseline: what x, ratio: y, target: ≥z×) PASS/MISS` for throughputs, where
/// higher is better; the ratio is of the medians.
pub fn rate_line(name: &str, value: Option<Stats>, baseline: Option<(&str, Stats)>, min_ratio: f64) -> String {
    let Some(v) = value else { return format!("{name}: no successful sample (ERROR)") };
    let target = format!("≥{min_ratio:.1}×");
    match baseline {
        Some((what, b)) if b.median > 0.0 => {
            let r = v.median / b.median;
            let verdict = if r >= min_ratio { "PASS" } else { "MISS" };
            format!(
                "{name}: {} (baseline: {what} {}, ratio: {r:.2}, target: {target}) {verdict}",
                fmt_rate(v),
                fmt_rate(b)
            )
        }
        _ => format!("{name}: {} (baseline: none, ratio: -, target: {target}) ERROR (no baseline)", fmt_rate(v)),
    }
}

/// A zap timestamp as etcdctl logs it: seconds since the epoch as a number, or ISO 8601 with
/// `Z` or a numeric offset (`2021-11-16T10:23:45.123Z`, `...45.123+0000`, `...45.123+01:00`).
pub fn zap_ts(v: &Value) -> Option<f64> {
    if let Some(x) = v.as_f64() {
        return Some(x);
    }
    let s = v.as_str()?;
    if let Some(us) = parse_rfc3339_utc(s) {
        return Some(us as f64 / 1e6);
    }
    // A numeric offset after the time of day (which has no sign in it).
    let t = s.find('T')?;
    let pos = t + s[t..].rfind(['+', '-'])?;
    let (base, off) = s.split_at(pos);
    let sign = if off.starts_with('-') { -1 } else { 1 };
    let digits: String = off[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 {
        return None;
    }
    let hh: i64 = digits[..2].parse().ok()?;
    let mm: i64 = digits[2..].parse().ok()?;
    let us = parse_rfc3339_utc(&format!("{base}Z"))?;
    Some((us - sign * (hh * 3600 + mm * 60) * 1_000_000) as f64 / 1e6)
}

/// From `etcdctl snapshot save`'s log: seconds from `fetching snapshot` (the stream is open) to
/// `saved` (written, fsynced and renamed into place), and the size it logged (humanized).
pub fn etcdctl_transfer(log: &str) -> Option<(f64, String)> {
    let mut fetching = None;
    let mut saved = None;
    let mut size = String::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { continue };
        match v["msg"].as_str() {
            Some("fetching snapshot") => fetching = zap_ts(&v["ts"]),
            Some("fetched snapshot") => size = v["size"].as_str().unwrap_or_default().to_string(),
            Some("saved") => saved = zap_ts(&v["ts"]),
            _ => {}
        }
    }
    let (a, b) = (fetching?, saved?);
    (b >= a).then_some((b - a, size))
}

/// `transferSeconds`, `backup.size` and `backup.member` of a backup pod's termination message.
pub fn save_report(message: &str) -> Option<(f64, f64, String)> {
    let v: Value = serde_json::from_str(message.trim()).ok()?;
    Some((
        v["transferSeconds"].as_f64()?,
        v["backup"]["size"].as_f64()?,
        v["backup"]["member"].as_str().unwrap_or_default().to_string(),
    ))
}

/// The transfer time in a `BackupSucceeded` Event note (`... written to X in 2.3s[; ...]`).
pub fn transfer_from_note(note: &str) -> Option<f64> {
    let head = note.split("; ").next()?;
    let (_, t) = head.rsplit_once(" in ")?;
    t.strip_suffix('s')?.parse().ok()
}

// --- kubectl --watch ----------------------------------------------------------------------------

/// `kubectl get <what> --watch -o json` in the background: every object version the API sends,
/// with the moment it arrived. Finer than polling, and it sees short-lived states (a backup pod
/// terminated and deleted by the operator a moment later).
struct Watch {
    child: Supervised,
    seen: Arc<Mutex<Vec<(Instant, Value)>>>,
    reader: Option<JoinHandle<()>>,
    what: String,
}

impl Watch {
    fn start(ns: &TestNamespace, what: &[&str]) -> Result<Watch> {
        // Not Kubectl::command(): its --request-timeout would end the watch.
        let mut cmd = Command::new(&ns.kubectl.kubectl);
        cmd.arg("--kubeconfig")
            .arg(&ns.kubectl.kubeconfig)
            .args(["-n", &ns.name, "get"])
            .args(what)
            .args(["--watch", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = Supervised::spawn(cmd, "kubectl --watch", Duration::ZERO)?;
        let out = child.child_mut().and_then(|c| c.stdout.take()).context("kubectl stdout")?;
        let seen: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
        let seen2 = seen.clone();
        let reader = std::thread::spawn(move || {
            for v in serde_json::Deserializer::from_reader(BufReader::new(out)).into_iter::<Value>() {
                match v {
                    Ok(v) => seen2.lock().unwrap_or_else(|e| e.into_inner()).push((Instant::now(), v)),
                    Err(_) => break,
                }
            }
        });
        Ok(Watch { child, seen, reader: Some(reader), what: what.join(" ") })
    }

    fn events(&self) -> Vec<(Instant, Value)> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until an object version satisfies `done` (an error from `done` ends the wait).
    fn until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut done: impl FnMut(&Value) -> Result<bool>,
    ) -> Result<(Instant, Value)> {
        let deadline = Instant::now() + timeout;
        let mut checked = 0;
        loop {
            let evs = self.events();
            for (t, v) in &evs[checked..] {
                if done(v)? {
                    return Ok((*t, v.clone()));
                }
            }
            checked = evs.len();
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!("kubectl get {} --watch exited ({status}) while waiting for {what}", self.what);
            }
            if Instant::now() >= deadline {
                let last = evs.last().map(|(_, v)| v["status"].to_string()).unwrap_or_else(|| "nothing seen".into());
                bail!("timed out after {timeout:?} waiting for {what}; last status: {last}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) -> Vec<(Instant, Value)> {
        self.kill();
        self.events()
    }

    fn kill(&mut self) {
        self.child.stop();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.kill();
    }
}

// --- set-up -------------------------------------------------------------------------------------

/// A member as the set-up found it.
#[derive(Clone, Debug)]
struct Target {
    pod: String,
    ip: String,
    db_size: i64,
}

fn pvc_manifest(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {CLAIM}, namespace: {ns}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 2Gi}}}}\n"
    )
}

fn backup_manifest(ns: &str, name: &str, storage_type: &str, storage: &str, timeout_secs: u64) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  clusterName: {CLUSTER}\n  storageType: {storage_type}\n  backupPolicy: {{timeoutInSecond: {timeout_secs}}}\n  {storage}\n"
    )
}

/// The baseline pod: the etcd image's own etcdctl, no shell, the snapshot into an emptyDir.
fn etcdctl_pod(ns: &str, name: &str, endpoint: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{ name: {name}, namespace: {ns}, labels: {{ app: {ETCDCTL_LABEL} }} }}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  enableServiceLinks: false
  automountServiceAccountToken: false
  containers:
  - name: etcdctl
    image: {ETCD_IMAGE_3_5_1}
    imagePullPolicy: IfNotPresent
    command: ["/usr/local/bin/etcdctl", "--endpoints={endpoint}", "snapshot", "save", "/backup/snapshot.db"]
    volumeMounts:
    - {{ name: backup, mountPath: /backup }}
  volumes:
  - name: backup
    emptyDir: {{}}
"#
    )
}

/// Deterministic incompressible bytes (xorshift64*), different for every `seed`.
fn random_value(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn connect_opts(timeout: Duration) -> Option<ConnectOptions> {
    Some(ConnectOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(timeout))
}

/// Writes `n` values of 1 MiB under `bench-data/` through `endpoint`.
fn fill(ctx: &Ctx, endpoint: &str, n: usize) -> Result<()> {
    ctx.rt.block_on(async {
        let mut c = Client::connect([endpoint], connect_opts(Duration::from_secs(60))).await?;
        for i in 0..n {
            let v = random_value(i as u64 + 1, VALUE_BYTES);
            c.put(format!("bench-data/{i:05}"), v, None).await.with_context(|| format!("put {i} of {n}"))?;
        }
        Ok(())
    })
}

/// dbSize of one member.
fn db_size(ctx: &Ctx, ip: &str) -> Result<i64> {
    ctx.rt.block_on(async {
        let mut c = Client::connect([format!("http://{ip}:2379")], connect_opts(Duration::from_secs(10))).await?;
        Ok(c.status().await?.db_size())
    })
}

/// One PUT of `len` random bytes to moto from this host: (seconds in all, seconds of them spent
/// hashing the body, which the client's SigV4 signature needs). The object is deleted again.
fn moto_put_probe(moto: &MotoServer, key: &str, len: usize) -> Result<(f64, f64)> {
    let data = random_value(0xB0B, len);
    let t = Instant::now();
    let _ = ring::digest::digest(&ring::digest::SHA256, &data);
    let sha_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    moto.put_object(BUCKET, key, &data)?;
    let put_s = t.elapsed().as_secs_f64();
    moto.delete_object(BUCKET, key)?;
    Ok((put_s, sha_s))
}

// --- the samples --------------------------------------------------------------------------------

/// `Reason ×count, ...` of an Event list (a folded series counts as its count).
fn event_counts(list: &Value) -> String {
    let mut by_reason: BTreeMap<String, i64> = BTreeMap::new();
    for e in list["items"].as_array().into_iter().flatten() {
        let n = e["count"].as_i64().unwrap_or(1).max(e["series"]["count"].as_i64().unwrap_or(1)).max(1);
        *by_reason.entry(e["reason"].as_str().unwrap_or("?").to_string()).or_default() += n;
    }
    if by_reason.is_empty() {
        return "none".into();
    }
    by_reason.iter().map(|(r, n)| format!("{r} ×{n}")).collect::<Vec<_>>().join(", ")
}

fn pod_line(pod: &Value, t0: SystemTime) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap_or("?");
    let f = |s: &Value| s.as_str().and_then(|s| rel(t0, s)).map(|x| format!("{x:+.0}s")).unwrap_or("?".into());
    let term = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    format!(
        "pod {name}: created {}, container ran {}→{} (exit {}), node {}",
        f(&pod["metadata"]["creationTimestamp"]),
        f(&term["startedAt"]),
        f(&term["finishedAt"]),
        term["exitCode"],
        pod["spec"]["nodeName"].as_str().unwrap_or("?")
    )
}

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

// --- the rows -----------------------------------------------------------------------------------

fn extra(r: &BTreeMap<&str, Vec<Sample>>, kind: &str, key: &str) -> Vec<f64> {
    r.get(kind).map(|v| v.iter().filter_map(|s| s.extra.get(key).copied()).collect()).unwrap_or_default()
}

fn fmt_secs(s: Option<Stats>) -> String {
    s.map(|s| format!("{:.2}s [{:.2}, {:.2}]", s.median, s.min, s.max)).unwrap_or_else(|| "-".into())
}

/// The result rows of the backup measurement.
pub fn render(r: &BTreeMap<&str, Vec<Sample>>) -> String {
    let mut out = String::new();
    if let Some(s) = r.get(SETUP).and_then(|v| v.first()) {
        out.push_str(&format!(
            "backup of a 3-member 3.5.1 cluster, dbSize {:.1} MiB ({} values × 1 MiB written in {:.1}s); throughput = snapshot bytes / duration:\n",
            s.value / MIB,
            s.extra.get("values").copied().unwrap_or(0.0),
            s.extra.get("fill_s").copied().unwrap_or(0.0),
        ));
    }
    if let Some(s) = r.get(SETUP).and_then(|v| v.first())
        && let (Some(put), Some(sha)) = (s.extra.get("moto_put_s"), s.extra.get("moto_sha_s"))
    {
        out.push_str(&format!(
            "  S3 server alone: moto took {put:.2}s for one PUT of as many bytes from this host \
             ({:.1} MiB/s; {:.1} MiB/s without the client's {sha:.2}s of SHA-256)\n",
            mib_per_s(s.value, *put).unwrap_or(0.0),
            mib_per_s(s.value, put - sha).unwrap_or(0.0),
        ));
    }
    let rate = |k: &str, key: &str| stats(&extra(r, k, key));
    let base_e2e =
        rate(BASELINE, "e2e_mibs").map(|b| ("etcdctl snapshot save pod, create → Succeeded, incl. pod start", b));
    let base_transfer =
        rate(BASELINE, "transfer_mibs").map(|b| ("etcdctl in its pod, \"fetching snapshot\" → \"saved\"", b));
    for (kind, what) in [(S3, "S3 (moto)"), (PVC, "PVC")] {
        out.push_str(&rate_line(
            &format!("backup to {what}, end to end incl. pod start (apply → status.succeeded)"),
            rate(kind, "e2e_mibs"),
            base_e2e,
            TARGET_RATIO,
        ));
        out.push('\n');
        out.push_str(&rate_line(
            &format!("  backup to {what}, transfer only (transferSeconds inside the backup pod)"),
            rate(kind, "transfer_mibs"),
            base_transfer,
            TARGET_RATIO,
        ));
        out.push('\n');
    }
    // What a user without this operator does for an S3 backup: `etcdctl snapshot save`, then
    // upload the file. Its time is etcdctl's in-pod transfer plus moto's PUT of as many bytes.
    let put = r.get(SETUP).and_then(|v| v.first()).and_then(|s| s.extra.get("moto_put_s").copied());
    let bytes = r.get(SETUP).and_then(|v| v.first()).map(|s| s.value);
    if let (Some(put), Some(bytes)) = (put, bytes) {
        let save_then_upload: Vec<f64> =
            extra(r, BASELINE, "transfer_s").iter().filter_map(|t| mib_per_s(bytes, t + put)).collect();
        out.push_str(&rate_line(
            "  backup to S3 (moto), transfer only, vs. save-then-upload",
            rate(S3, "transfer_mibs"),
            stats(&save_then_upload).map(|b| ("etcdctl's in-pod transfer + moto's PUT of the file", b)),
            TARGET_RATIO,
        ));
        out.push('\n');
    }
    out.push_str("  backup durations, median [min, max]: end to end (incl. pod start) / apply → container running (watch) / transfer only (in the pod):\n");
    for (kind, what) in [(S3, "S3 backup"), (PVC, "PVC backup"), (BASELINE, "etcdctl snapshot save")] {
        out.push_str(&format!(
            "    {what:22} {} / {} / {}\n",
            fmt_secs(stats(&r.get(kind).map(|v| v.iter().map(|s| s.value).collect::<Vec<_>>()).unwrap_or_default())),
            fmt_secs(stats(&extra(r, kind, "start_s"))),
            fmt_secs(stats(&extra(r, kind, "transfer_s"))),
        ));
    }
    out.push_str(
        "  (end to end is mostly the pod start, and the kubelet notices a container's exit at its 1 s relist: \
         both sides alike; the transfer rows compare the data path. The S3 rows against a local etcdctl write \
         are bounded by moto on this machine: its own PUT from the host is slower than etcdctl's disk write)\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(median: f64, min: f64, max: f64) -> Stats {
        Stats { median, min, max, n: 3 }
    }

    #[test]
    fn s3_is_also_compared_with_save_then_upload() {
        let mut r: BTreeMap<&str, Vec<Sample>> = BTreeMap::new();
        let mut setup = Sample { value: 100.0 * MIB, ..Default::default() };
        setup.extra.insert("moto_put_s", 1.0);
        r.insert(SETUP, vec![setup]);
        let mut base = Sample::default();
        base.extra.insert("transfer_s", 0.5);
        r.insert(BASELINE, vec![base]);
        let mut s3 = Sample::default();
        s3.extra.insert("transfer_mibs", 100.0); // 1 s for 100 MiB
        r.insert(S3, vec![s3]);
        let text = render(&r);
        // save then upload: 100 MiB in 0.5 + 1.0 s = 66.7 MiB/s; 100 / 66.7 = 1.50.
        let line = text.lines().find(|l| l.contains("save-then-upload")).expect(&text);
        assert!(line.contains("66.7 MiB/s") && line.contains("ratio: 1.50") && line.ends_with("PASS"), "{line}");
    }

    #[test]
    fn throughput_is_mib_per_second() {
        assert_eq!(mib_per_s(110.0 * MIB, 2.0), Some(55.0));
        assert_eq!(mib_per_s(1.0, 0.0), None);
        assert_eq!(fmt_rate(st(55.04, 50.0, 60.0)), "55.0 MiB/s [min 50.0, max 60.0, n=3]");
    }

    #[test]
    fn rate_lines_pass_at_or_above_the_target_ratio() {
        let l = rate_line("x", Some(st(40.0, 39.0, 41.0)), Some(("base", st(50.0, 49.0, 51.0))), 0.8);
        assert!(l.ends_with("ratio: 0.80, target: ≥0.8×) PASS"), "{l}");
        let l = rate_line("x", Some(st(30.0, 29.0, 31.0)), Some(("base", st(50.0, 49.0, 51.0))), 0.8);
        assert!(l.ends_with("ratio: 0.60, target: ≥0.8×) MISS"), "{l}");
        assert!(l.starts_with("x: 30.0 MiB/s [min 29.0, max 31.0, n=3] (baseline: base 50.0 MiB/s"), "{l}");
        assert!(rate_line("x", Some(st(1.0, 1.0, 1.0)), None, 0.8).ends_with("ERROR (no baseline)"));
        assert_eq!(rate_line("x", None, None, 0.8), "x: no successful sample (ERROR)");
    }

    #[test]
    fn zap_timestamps_in_every_shape() {
        let t = 1_637_058_225.123;
        let close = |v: Value| (zap_ts(&v).unwrap() - t).abs() < 1e-6;
        assert!(close(Value::from(t)));
        assert!(close(Value::from("2021-11-16T10:23:45.123Z")));
        assert!(close(Value::from("2021-11-16T10:23:45.123+0000")));
        assert!(close(Value::from("2021-11-16T11:23:45.123+01:00")));
        assert!(close(Value::from("2021-11-16T09:23:45.123-0100")));
        assert_eq!(zap_ts(&Value::from("garbage")), None);
    }

    #[test]
    fn etcdctl_log_gives_the_in_pod_transfer() {
        let log = r#"{"level":"info","ts":"2021-11-16T10:23:45.100Z","caller":"snapshot/v3_snapshot.go:68","msg":"created temporary db file","path":"/backup/snapshot.db.part"}
{"level":"info","ts":"2021-11-16T10:23:45.120Z","caller":"snapshot/v3_snapshot.go:76","msg":"fetching snapshot","endpoint":"http://10.0.0.5:2379"}
{"level":"info","ts":"2021-11-16T10:23:47.620Z","caller":"snapshot/v3_snapshot.go:91","msg":"fetched snapshot","endpoint":"http://10.0.0.5:2379","size":"116 MB","took":"2 seconds ago"}
{"level":"info","ts":"2021-11-16T10:23:47.625Z","caller":"snapshot/v3_snapshot.go:100","msg":"saved","path":"/backup/snapshot.db"}
Snapshot saved at /backup/snapshot.db
"#;
        let (t, size) = etcdctl_transfer(log).unwrap();
        assert!((t - 2.505).abs() < 1e-6, "{t}");
        assert_eq!(size, "116 MB");
        assert_eq!(etcdctl_transfer("Error: context deadline exceeded"), None);
    }

    #[test]
    fn backup_pod_reports_and_event_notes() {
        let msg = r#"{"backup":{"path":"s3://b/k","sha256":"ab","size":115343392,"etcdVersion":"3.5.1","etcdRevision":112,"member":"bench-x","time":"2026-01-01T00:00:00Z"},"transferSeconds":2.25,"deleted":[],"kept":[]}"#;
        assert_eq!(save_report(msg), Some((2.25, 115_343_392.0, "bench-x".into())));
        assert_eq!(save_report("connect to ...: refused"), None);
        let note = "backup of member m at revision 9 (5 bytes, sha256 ab) written to s3://b/k in 2.3s";
        assert_eq!(transfer_from_note(note), Some(2.3));
        assert_eq!(transfer_from_note(&format!("{note}; retention deleted s3://b/k_v1")), Some(2.3));
    }

    #[test]
    fn events_are_counted_by_reason_with_their_series() {
        let list = serde_json::json!({"items": [
            {"reason": "BackupStarted", "count": 1},
            {"reason": "BackupSucceeded", "series": {"count": 2}, "count": 2},
            {"reason": "BackupSucceeded"},
        ]});
        assert_eq!(event_counts(&list), "BackupStarted ×1, BackupSucceeded ×3");
        assert_eq!(event_counts(&serde_json::json!({"items": []})), "none");
    }

    #[test]
    fn values_are_distinct_and_sized() {
        let (a, b) = (random_value(1, VALUE_BYTES), random_value(2, VALUE_BYTES));
        assert_eq!(a.len(), VALUE_BYTES);
        assert_ne!(a, b);
        assert_ne!(a[..8], a[8..16]);
    }

    #[test]
    fn render_puts_the_baseline_beside_each_row() {
        let mut r: BTreeMap<&str, Vec<Sample>> = BTreeMap::new();
        let s = |e2e: f64, transfer: f64| {
            let mut x = Sample { value: 110.0 / e2e, ..Default::default() };
            x.extra.insert("e2e_mibs", e2e);
            x.extra.insert("transfer_mibs", transfer);
            x.extra.insert("transfer_s", 110.0 / transfer);
            x
        };
        r.insert(S3, vec![s(20.0, 40.0)]);
        r.insert(PVC, vec![s(30.0, 90.0)]);
        r.insert(BASELINE, vec![s(25.0, 100.0)]);
        let out = render(&r);
        assert!(
            out.contains("backup to S3 (moto), end to end incl. pod start (apply → status.succeeded): 20.0 MiB/s"),
            "{out}"
        );
        assert!(out.contains("ratio: 0.80, target: ≥0.8×) PASS"), "{out}");
        assert!(out.contains("ratio: 0.40, target: ≥0.8×) MISS"), "{out}");
        assert!(out.contains("ratio: 1.20, target: ≥0.8×) PASS"), "{out}");
    }
}

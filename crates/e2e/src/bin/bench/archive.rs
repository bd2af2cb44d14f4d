//! `archive` (issue 29): what the continuous archive costs and what it gives, on a 3-member
//! cluster (etcd 3.6.15) archiving to S3 (a moto server on this machine), one namespace per run:
//!
//! `--archive-store pvc` puts the series on a claim instead (no S3 server sharing the CPUs).
//!
//! - `archive_put_off` (baseline) / `archive_put_on`: one client putting 256-byte values through
//!   the client Service, one at a time for `PUT_SECS`, before the EtcdBackup exists and again
//!   with its archiver following (`flushIntervalInSecond: 1`): p99 latency (p50 beside it). The
//!   issue's target: p99 at most 5 % worse.
//! - `archive_rpo`: during the `on` run the archiver's durable revision is polled from its pod
//!   (`GET /status` on port 8081, every 50 ms); per acknowledged put, the time from its
//!   acknowledgement to the first poll that shows it durable: p99 (p50 and the worst beside
//!   it), against the promised `flushIntervalInSecond`. A poll's own period (≤ 50 ms plus the
//!   request) is included: the lag is measured from outside, as a user would see it.
//! - `archive_rate_1k` / `archive_rate_5k`: puts offered at 1,000 and 5,000 a second (64 in
//!   flight) for `RATE_SECS`: the rate etcd acknowledged, and the rate the archive made them
//!   durable (the revisions of the run over the time from the first put to the moment the last
//!   one was durable; below the acknowledged rate when the archive falls behind).
//! - `archive_restore_point` / `archive_restore_full` (baseline): with at least 100,000
//!   revisions archived after the snapshot, an EtcdRestore of the last revision through the
//!   archive beside an EtcdRestore of a one-shot backup of the same state: apply → the restored
//!   one-member cluster reports its member ready.
//!
//! Everything is removed afterwards: the namespaces (clusters, backups, restores, pods) and moto
//! (stopped when dropped; its objects were in memory).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::TestNamespace;
use e2e::objstore::{MotoServer, ObjectServer};
use etcd_client::{Client, ConnectOptions};

use crate::observe::Observer;
use crate::report::Sample;
use crate::scale_down::service_url;
use crate::scenarios::{self, CLUSTER, Ctx};

pub const PUT_OFF: &str = "archive_put_off";
pub const PUT_ON: &str = "archive_put_on";
pub const RPO: &str = "archive_rpo";
pub const RATE_1K: &str = "archive_rate_1k";
pub const RATE_5K: &str = "archive_rate_5k";
pub const RESTORE_POINT: &str = "archive_restore_point";
pub const RESTORE_FULL: &str = "archive_restore_full";

/// The latency target: p99 with the archiver at most this much of p99 without.
pub const PUT_TARGET_RATIO: f64 = 1.05;
const VERSION: &str = "3.6.15";
const BUCKET: &str = "bench-archive";
const SECRET: &str = "bench-s3";
const CLAIM: &str = "bench-archive";
const BACKUP: &str = "series";
const FLUSH_SECS: u64 = 1;
const PUT_SECS: u64 = 15;
const RATE_SECS: u64 = 15;
const IN_FLIGHT: usize = 64;
const REVISIONS_AFTER_SNAPSHOT: i64 = 100_000;
const VALUE: [u8; 256] = [b'v'; 256];

#[derive(Default)]
pub struct Outcome {
    pub results: BTreeMap<&'static str, Vec<Sample>>,
    pub errors: Vec<String>,
}

pub fn run(ctx: &Ctx, runs: usize, store: &str) -> Result<Outcome> {
    let moto = match store {
        "s3" => {
            let m = MotoServer::start().context("starting moto (the S3 server)")?;
            m.create_bucket(BUCKET)?;
            Some(m)
        }
        _ => None,
    };
    let mut out = Outcome::default();
    for run in 1..=runs {
        eprintln!("  archive run {run}/{runs}");
        let got = scenarios::in_namespace(ctx, "bench-archive", true, |ns, _op| one_run(ctx, ns, moto.as_ref()));
        match got {
            Ok(samples) => {
                for (kind, s) in samples {
                    out.results.entry(kind).or_default().push(s);
                }
            }
            Err(e) => {
                eprintln!("  archive run {run} FAILED: {e:#}");
                out.errors.push(format!("archive run {run}: {}", format!("{e}").lines().next().unwrap_or("")));
            }
        }
    }
    Ok(out)
}

/// The `p`-quantile (0..=1) of `v` (nearest rank), or 0 for none.
pub fn quantile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1]
}

fn connect(ctx: &Ctx, url: &str) -> Result<Client> {
    let opts = ConnectOptions::new().with_connect_timeout(Duration::from_secs(3)).with_timeout(Duration::from_secs(10));
    Ok(ctx.rt.block_on(Client::connect([url], Some(opts)))?)
}

/// One put after another for `secs`: (latency in seconds, acknowledged at, revision) of each.
fn closed_loop(ctx: &Ctx, client: &Client, prefix: &str, secs: u64) -> Result<Vec<(f64, Instant, i64)>> {
    let mut c = client.clone();
    ctx.rt.block_on(async {
        let end = Instant::now() + Duration::from_secs(secs);
        let mut out = Vec::new();
        let mut i = 0u64;
        while Instant::now() < end {
            let t = Instant::now();
            let r = c.put(format!("{prefix}/{:05}", i % 10_000), VALUE.to_vec(), None).await?;
            let at = Instant::now();
            out.push(((at - t).as_secs_f64(), at, r.header().map(|h| h.revision()).unwrap_or_default()));
            i += 1;
        }
        anyhow::Ok(out)
    })
}

/// Puts offered at `rate` a second, `IN_FLIGHT` at most at once, `total` of them: (time from
/// the first put to the last acknowledgement, the last revision, failed puts).
fn open_loop(ctx: &Ctx, client: &Client, prefix: &str, rate: u64, total: u64) -> Result<(f64, i64, u64)> {
    ctx.rt.block_on(async {
        let next = Arc::new(AtomicU64::new(0));
        let start = tokio::time::Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..IN_FLIGHT {
            let (next, mut c, prefix) = (next.clone(), client.clone(), prefix.to_string());
            tasks.push(tokio::spawn(async move {
                let (mut last, mut failed) = (0i64, 0u64);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        return (last, failed);
                    }
                    tokio::time::sleep_until(start + Duration::from_secs_f64(i as f64 / rate as f64)).await;
                    match c.put(format!("{prefix}/{:05}", i % 10_000), VALUE.to_vec(), None).await {
                        Ok(r) => last = last.max(r.header().map(|h| h.revision()).unwrap_or_default()),
                        Err(_) => failed += 1,
                    }
                }
            }));
        }
        let (mut last, mut failed) = (0, 0);
        for t in tasks {
            let (l, f) = t.await?;
            last = last.max(l);
            failed += f;
        }
        anyhow::Ok((start.elapsed().as_secs_f64(), last, failed))
    })
}

/// The archiver's durable revision, polled every 50 ms from its pod until dropped.
struct DurablePoller {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(Instant, i64)>>>,
}

impl DurablePoller {
    fn start(url: String) -> DurablePoller {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            while !s.load(Ordering::Relaxed) {
                if let Some(rev) = durable_revision(&url) {
                    seen.push((Instant::now(), rev));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            seen
        });
        DurablePoller { stop, thread: Some(thread) }
    }

    fn finish(mut self) -> Vec<(Instant, i64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default()
    }
}

impl Drop for DurablePoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn durable_revision(url: &str) -> Option<i64> {
    let body = ureq::get(url).call().ok()?.body_mut().read_to_string().ok()?;
    serde_json::from_str::<serde_json::Value>(&body).ok()?["durableRevision"].as_i64()
}

/// When revision `rev` was first seen durable.
fn durable_at(seen: &[(Instant, i64)], rev: i64) -> Option<Instant> {
    seen.iter().find(|(_, r)| *r >= rev).map(|(t, _)| *t)
}

fn wait_durable(ctx: &Ctx, url: &str, rev: i64) -> Result<Instant> {
    e2e::wait_until(ctx.timeout, &format!("the archive durable to revision {rev}"), || {
        Ok(durable_revision(url).filter(|r| *r >= rev).map(|_| Instant::now()))
    })
}

fn latency_sample(v: &[(f64, Instant, i64)]) -> Sample {
    let l: Vec<f64> = v.iter().map(|(s, _, _)| *s).collect();
    let mut s = Sample { value: quantile(&l, 0.99), ..Default::default() };
    s.extra.insert("p50", quantile(&l, 0.5));
    s.extra.insert("puts", l.len() as f64);
    s
}

/// The storage type and block of object `key` of the run's store: moto's bucket, else a claim.
fn store_of(ns: &TestNamespace, moto: Option<&MotoServer>, key: &str) -> (&'static str, String) {
    match moto {
        Some(m) => (
            "S3",
            format!(
                "s3: {{path: \"{BUCKET}/{}/{key}\", awsSecret: {SECRET}, endpoint: \"{}\", forcePathStyle: true}}",
                ns.name,
                m.endpoint()
            ),
        ),
        None => ("PVC", format!("pvc: {{claimName: {CLAIM}, path: {key}}}")),
    }
}

fn one_run(ctx: &Ctx, ns: &TestNamespace, moto: Option<&MotoServer>) -> Result<Vec<(&'static str, Sample)>> {
    let mut out = Vec::new();
    match moto {
        Some(m) => ns.apply(&m.secret_manifest(&ns.name, SECRET))?,
        None => ns.apply(&format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {CLAIM}, namespace: {}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 2Gi}}}}\n",
            ns.name
        ))?,
    }
    let mut obs = Observer::new(ns, &ctx.rt, scenarios::SELECTOR, Some(CLUSTER));
    scenarios::healthy_cluster(ctx, ns, &mut obs, 3, VERSION)?;
    let url = service_url(ctx, ns)?;
    let client = connect(ctx, &url)?;
    let (kind, _) = store_of(ns, moto, "");
    let s3 = |key: &str| store_of(ns, moto, key).1;

    // Latency without an archiver (a warm-up first: the first puts pay for connections).
    closed_loop(ctx, &client, "warm", 2)?;
    let off = closed_loop(ctx, &client, "lat", PUT_SECS)?;
    out.push((PUT_OFF, latency_sample(&off)));

    ns.apply(&format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: {BACKUP}, namespace: {n}}}\nspec:\n  clusterName: {CLUSTER}\n  storageType: {kind}\n  {storage}\n  backupPolicy: {{backupIntervalInSecond: 86400}}\n  continuous: {{enabled: true, flushIntervalInSecond: {FLUSH_SECS}}}\n",
        n = ns.name,
        storage = s3("series")
    ))?;
    let snapshot = e2e::wait_until(ctx.timeout, "the first snapshot and the archiver following", || {
        let b = ns.json(&["get", "etcdbackup", BACKUP])?;
        let conds = b["status"]["conditions"].as_array().cloned().unwrap_or_default();
        let archiving = conds.iter().any(|c| c["type"] == "Archiving" && c["status"] == "True");
        Ok(b["status"]["etcdRevision"].as_i64().filter(|_| archiving))
    })?;
    let pod = ns.json(&["get", "pod", &format!("{BACKUP}-archiver")])?;
    let ip = pod["status"]["podIP"].as_str().context("the archiver pod has no IP")?;
    let status_url = format!("http://{ip}:8081/status");
    wait_durable(ctx, &status_url, snapshot)?;

    // Latency with the archiver following, and how soon each put was durable.
    closed_loop(ctx, &client, "warm", 2)?;
    let poller = DurablePoller::start(status_url.clone());
    let on = closed_loop(ctx, &client, "lat", PUT_SECS)?;
    let last = on.last().map(|(_, _, r)| *r).unwrap_or_default();
    wait_durable(ctx, &status_url, last)?;
    std::thread::sleep(Duration::from_millis(200));
    let seen = poller.finish();
    out.push((PUT_ON, latency_sample(&on)));
    let lags: Vec<f64> = on
        .iter()
        .filter_map(|(_, at, rev)| durable_at(&seen, *rev).map(|d| d.saturating_duration_since(*at).as_secs_f64()))
        .collect();
    if lags.len() < on.len() {
        bail!("{} of {} puts were never seen durable in {} polls", on.len() - lags.len(), on.len(), seen.len());
    }
    let mut rpo = Sample { value: quantile(&lags, 0.99), ..Default::default() };
    rpo.extra.insert("p50", quantile(&lags, 0.5));
    rpo.extra.insert("max", quantile(&lags, 1.0));
    rpo.extra.insert("flush", FLUSH_SECS as f64);
    rpo.extra.insert("polls", seen.len() as f64);
    out.push((RPO, rpo));

    // Throughput at two offered rates.
    for (kind, rate) in [(RATE_1K, 1_000u64), (RATE_5K, 5_000)] {
        let first = ctx.rt.block_on(client.clone().status())?.header().map(|h| h.revision()).unwrap_or_default();
        let t0 = Instant::now();
        let (took, last, failed) = open_loop(ctx, &client, kind, rate, rate * RATE_SECS)?;
        let durable = wait_durable(ctx, &status_url, last)?;
        let revs = (last - first) as f64;
        let archived_in = durable.duration_since(t0).as_secs_f64();
        let mut s = Sample { value: revs / archived_in, ..Default::default() };
        s.extra.insert("offered", rate as f64);
        s.extra.insert("acked", revs / took);
        s.extra.insert("lag_at_end", (archived_in - took).max(0.0));
        s.extra.insert("failed", failed as f64);
        eprintln!(
            "    {kind}: offered {rate}/s, etcd acknowledged {:.0}/s ({failed} failed), archive durable {:.0}/s, last put durable {:.2}s after it",
            revs / took,
            revs / archived_in,
            (archived_in - took).max(0.0)
        );
        out.push((kind, s));
    }

    // 100,000 revisions after the snapshot, then the same state restored two ways.
    let now = ctx.rt.block_on(client.clone().status())?.header().map(|h| h.revision()).unwrap_or_default();
    let missing = (snapshot + REVISIONS_AFTER_SNAPSHOT - now).max(0) as u64;
    let (_, mut last, _) = open_loop(ctx, &client, "fill", 20_000, missing)?;
    last = last.max(now);
    wait_durable(ctx, &status_url, last)?;
    ns.apply(&format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: full, namespace: {n}}}\nspec:\n  clusterName: {CLUSTER}\n  storageType: {kind}\n  {storage}\n",
        n = ns.name,
        storage = s3("full.db")
    ))?;
    let full_rev = e2e::wait_until(ctx.timeout, "the one-shot backup", || {
        Ok(ns.json(&["get", "etcdbackup", "full"])?["status"]["etcdRevision"].as_i64().filter(|r| *r > 0))
    })?;
    eprintln!(
        "    restores: snapshot at revision {snapshot}, the archive durable to {last}, the full backup at {full_rev}"
    );
    let restore = |name: &str, storage: String, point: &str| -> Result<Sample> {
        let t0 = Instant::now();
        ns.apply(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: {name}, namespace: {n}}}\nspec:\n  etcdCluster: {{name: {name}, spec: {{size: 1, version: \"{VERSION}\"}}}}\n  backupStorageType: {kind}\n  {storage}\n{point}",
            n = ns.name
        ))?;
        let succeeded = e2e::wait_until(ctx.timeout, &format!("EtcdRestore {name} to succeed"), || {
            let r = ns.json(&["get", "etcdrestore", name])?;
            if r["status"]["phase"] == "Failed" {
                bail!("EtcdRestore {name} failed: {}", r["status"]["reason"]);
            }
            Ok((r["status"]["succeeded"] == true).then(|| t0.elapsed()))
        })?;
        let ready = e2e::wait_until(ctx.timeout, &format!("EtcdCluster {name} to report its member ready"), || {
            let c = ns.json(&["get", "etcdcluster", name])?;
            let n = c["status"]["members"]["ready"].as_array().map_or(0, |r| r.len());
            Ok((n == 1).then(|| t0.elapsed()))
        })?;
        let mut s = Sample { value: ready.as_secs_f64(), ..Default::default() };
        s.extra.insert("succeeded", succeeded.as_secs_f64());
        Ok(s)
    };
    let mut point = restore("pit", s3("series"), &format!("  pointInTime: {{revision: {last}}}\n"))?;
    point.extra.insert("revisions", (last - snapshot) as f64);
    out.push((RESTORE_POINT, point));
    out.push((RESTORE_FULL, restore("whole", s3("full.db"), "")?));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!((quantile(&v, 0.5), quantile(&v, 0.99), quantile(&v, 1.0)), (50.0, 99.0, 100.0));
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(quantile(&[], 0.99), 0.0);
    }

    #[test]
    fn a_put_is_durable_at_the_first_poll_that_reaches_it() {
        let t = Instant::now();
        let seen = [(t, 10), (t + Duration::from_millis(50), 12), (t + Duration::from_millis(100), 20)];
        assert_eq!(durable_at(&seen, 11), Some(t + Duration::from_millis(50)));
        assert_eq!(durable_at(&seen, 20), Some(t + Duration::from_millis(100)));
        assert_eq!(durable_at(&seen, 21), None);
    }
}

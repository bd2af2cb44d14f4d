//! `kubectl etcd check-perf`: the workload and the verdict of etcdctl's `check perf`
//! (etcd-io/etcd, `etcdctl/ctlv3/command/check.go`), written natively against a cluster of this
//! operator and reached as `status` reaches it (port-forwards, the operator's client certificate,
//! the root login).
//!
//! The workload: a load profile's number of clients put random keys (256 bytes after the
//! prefix) with 1024-byte values, at most the profile's rate in total (a limiter that makes
//! up at most 50 ms of its own lateness, not a stall of the clients), for the duration; then every key under the
//! prefix is deleted. Refused when the prefix already holds keys (as etcdctl). The verdict (as
//! etcdctl): throughput more than 90% of the profile's rate, slowest request at most 0.5 s,
//! standard deviation of the latencies at most 0.1 s, and no failed request.
//!
//! The profile table, the statistics and the verdict are pure (`stats`, `criteria`, `text`); the
//! rest is I/O.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use etcd_client::{Client, DeleteOptions, GetOptions, KvClient};
use etcd_operator_api::cluster::EtcdCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde::Serialize;
use tokio::sync::{Mutex, mpsc, watch};

use crate::cli::Output;
use crate::connect::{self, Access, Forward};

pub const SCHEMA: &str = "kubectl-etcd/check-perf/v1";
/// etcdctl's: each key is the prefix and this many bytes (random, then zeros).
pub const KEY_SIZE: usize = 256;
/// etcdctl's: each value is this many zero bytes.
pub const VALUE_SIZE: usize = 1024;
/// etcdctl's criteria: throughput above this share of the profile's rate, the slowest request
/// and the standard deviation at most these seconds.
pub const THROUGHPUT_SHARE: f64 = 0.9;
pub const SLOWEST_LIMIT: f64 = 0.5;
pub const STDDEV_LIMIT: f64 = 0.1;
/// At most this many connections (each one port-forward); more clients share them (etcdctl
/// opens one per client; through the API server that many would measure the API server).
const MAX_CONNECTIONS: usize = 64;
/// Connecting to and first answer of a member; also each request's limit (a request that takes
/// longer counts as failed).
const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// The delete of the keys afterwards (etcdctl's 30 s).
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How late the limiter may be and still send what was due (it then sends a few requests
/// together; the long-run rate stays the profile's). etcdctl's limiter (Go's, burst one) makes
/// up a lateness of one request; this process also carries the port-forwards, so its timer may
/// wake several milliseconds late. A longer stall (every client busy) is lost, as with etcdctl.
const LIMITER_SLACK: Duration = Duration::from_millis(50);

#[derive(Args, Debug)]
pub struct CheckPerfArgs {
    /// Name of the EtcdCluster.
    pub name: String,
    /// The load profile (etcdctl's): s = 50 clients at 150 writes/s, m = 200 at 1000, l = 500 at
    /// 8000, xl = 1000 at 15000; each write a 256-byte key (after the prefix) and a 1024-byte
    /// value.
    #[arg(long, value_enum, default_value = "s")]
    pub load: Load,
    /// The prefix of the keys written; it must hold no key before, every key under it is
    /// deleted afterwards.
    #[arg(long, default_value = "/etcdctl-check-perf/")]
    pub prefix: String,
    /// Seconds of load (etcdctl: always 60).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration: u64,
    /// Output format; json and yaml follow the documented schema `kubectl-etcd/check-perf/v1`.
    /// The exit code is 0 on PASS, 1 on FAIL or when the check could not run.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

/// etcdctl's load profiles (`--load s|m|l|xl`, also `small`, `medium`, `large`, `xlarge`).
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    #[value(alias = "small")]
    S,
    #[value(alias = "medium")]
    M,
    #[value(alias = "large")]
    L,
    #[value(alias = "xlarge", alias = "xLarge")]
    Xl,
}

/// A load profile: concurrent clients and the total rate of writes they are offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    pub clients: usize,
    /// Writes per second, at most.
    pub rate: u32,
}

/// etcdctl's `checkPerfCfgMap` (each profile runs 60 s there).
pub const fn profile(load: Load) -> Profile {
    match load {
        Load::S => Profile { name: "s", clients: 50, rate: 150 },
        Load::M => Profile { name: "m", clients: 200, rate: 1000 },
        Load::L => Profile { name: "l", clients: 500, rate: 8000 },
        Load::Xl => Profile { name: "xl", clients: 1000, rate: 15000 },
    }
}

/// What a run measured, over the requests that succeeded (as etcd's `report` package: failed
/// requests count only as errors; the deviation is the population's).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stats {
    /// Requests that succeeded.
    pub requests: u64,
    /// Requests that failed.
    pub errors: u64,
    /// From the first request offered to the last answer.
    pub elapsed_seconds: f64,
    /// Succeeded requests per second of `elapsedSeconds`.
    pub throughput: f64,
    /// Latencies in seconds; `null` without any succeeded request.
    pub average_seconds: Option<f64>,
    pub fastest_seconds: Option<f64>,
    pub slowest_seconds: Option<f64>,
    pub stddev_seconds: Option<f64>,
}

fn round(v: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (v * f).round() / f
}

/// The statistics of latencies (seconds, of the succeeded requests), `errors` failed requests
/// and the run's elapsed seconds; rounded to microseconds (throughput to 0.01/s) and judged
/// as rounded.
pub fn stats(latencies: &[f64], errors: u64, elapsed: f64) -> Stats {
    let n = latencies.len();
    let throughput = if elapsed > 0.0 { n as f64 / elapsed } else { 0.0 };
    let mut s = Stats {
        requests: n as u64,
        errors,
        elapsed_seconds: round(elapsed, 3),
        throughput: round(throughput, 2),
        ..Default::default()
    };
    if n > 0 {
        let avg = latencies.iter().sum::<f64>() / n as f64;
        let var = latencies.iter().map(|l| (l - avg) * (l - avg)).sum::<f64>() / n as f64;
        s.average_seconds = Some(round(avg, 6));
        s.fastest_seconds = Some(round(latencies.iter().copied().fold(f64::INFINITY, f64::min), 6));
        s.slowest_seconds = Some(round(latencies.iter().copied().fold(0.0, f64::max), 6));
        s.stddev_seconds = Some(round(var.sqrt(), 6));
    }
    s
}

/// One of etcdctl's three criteria, with its number.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Criterion {
    /// `throughput`, `slowest` or `stddev`.
    pub name: &'static str,
    pub pass: bool,
    /// The measured number (`null`: no request succeeded).
    pub value: Option<f64>,
    /// `writes/s` or `s`.
    pub unit: &'static str,
    /// The bound: throughput must be above it, the others at most it.
    pub limit: f64,
    /// The rule in words.
    pub rule: String,
}

/// etcdctl's criteria for `s` against profile `p`. Without any succeeded request, slowest and
/// deviation are unknown: they fail (etcdctl would call them 0 and pass).
pub fn criteria(p: &Profile, s: &Stats) -> Vec<Criterion> {
    let min_rate = THROUGHPUT_SHARE * f64::from(p.rate);
    vec![
        Criterion {
            name: "throughput",
            // etcdctl fails `RPS / rate <= 0.9`.
            pass: s.throughput / f64::from(p.rate) > THROUGHPUT_SHARE,
            value: Some(s.throughput),
            unit: "writes/s",
            limit: min_rate,
            rule: format!("more than 90% of the profile's {} writes/s", p.rate),
        },
        Criterion {
            name: "slowest",
            pass: s.slowest_seconds.is_some_and(|v| v <= SLOWEST_LIMIT),
            value: s.slowest_seconds,
            unit: "s",
            limit: SLOWEST_LIMIT,
            rule: "the slowest request at most 0.5 s".into(),
        },
        Criterion {
            name: "stddev",
            pass: s.stddev_seconds.is_some_and(|v| v <= STDDEV_LIMIT),
            value: s.stddev_seconds,
            unit: "s",
            limit: STDDEV_LIMIT,
            rule: "the standard deviation of the latencies at most 0.1 s".into(),
        },
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
}

/// PASS when every criterion passes and no request failed (etcdctl: "too many errors").
pub fn verdict(criteria: &[Criterion], errors: u64) -> Verdict {
    if errors == 0 && criteria.iter().all(|c| c.pass) { Verdict::Pass } else { Verdict::Fail }
}

/// The document of `-o json|yaml`. Fields are only ever added within `v1`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: &'static str,
    pub cluster: String,
    pub namespace: String,
    pub load: LoadInfo,
    /// The member pods the load went to (Ready and not fenced, and answering).
    pub members: Vec<String>,
    /// Connections (port-forwards) the clients shared.
    pub connections: usize,
    pub results: Stats,
    /// Failed requests by error message.
    pub errors: Vec<ErrorCount>,
    pub criteria: Vec<Criterion>,
    pub cleanup: Cleanup,
    pub verdict: Verdict,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadInfo {
    /// `s`, `m`, `l` or `xl`.
    pub name: &'static str,
    pub clients: usize,
    /// Writes per second offered, at most.
    pub rate: u32,
    pub key_size: usize,
    pub value_size: usize,
    pub duration_seconds: u64,
    pub prefix: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ErrorCount {
    pub message: String,
    pub count: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// Keys deleted under the prefix afterwards (`null`: the delete failed).
    pub keys_deleted: Option<i64>,
    pub error: Option<String>,
}

/// The screen for people: the load, one line per criterion, the counts, the verdict line.
pub fn text(r: &Report) -> String {
    let mark = |pass: bool| if pass { "PASS" } else { "FAIL" };
    let num = |v: Option<f64>, unit: &str| match v {
        Some(v) if unit == "s" => format!("{v:.4} s"),
        Some(v) => format!("{v:.1} {unit}"),
        None => "none (no request succeeded)".into(),
    };
    let l = &r.load;
    let mut out = format!(
        "check-perf {}/{}: load {} ({} clients, at most {} writes/s of {}-byte keys and {}-byte values under {:?}) \
         for {} s on {} ({} connections through port-forwards)\n",
        r.namespace,
        r.cluster,
        l.name,
        l.clients,
        l.rate,
        l.key_size,
        l.value_size,
        l.prefix,
        l.duration_seconds,
        r.members.join(", "),
        r.connections
    );
    for c in &r.criteria {
        let what = match c.name {
            "throughput" => "throughput",
            "slowest" => "slowest request",
            _ => "standard deviation",
        };
        out += &format!("{}  {what} {} ({})\n", mark(c.pass), num(c.value, c.unit), c.rule);
    }
    let s = &r.results;
    if s.errors > 0 {
        out += &format!("FAIL  {} of {} requests failed\n", s.errors, s.errors + s.requests);
        for e in r.errors.iter().take(5) {
            out += &format!("      {} x {}\n", e.count, e.message);
        }
    }
    out += &format!(
        "      {} requests in {:.1} s, {} failed, average {}, fastest {}\n",
        s.requests,
        s.elapsed_seconds,
        s.errors,
        num(s.average_seconds, "s"),
        num(s.fastest_seconds, "s")
    );
    match (&r.cleanup.keys_deleted, &r.cleanup.error) {
        (Some(n), _) => out += &format!("      {n} keys under {:?} deleted\n", l.prefix),
        (None, e) => {
            out += &format!(
                "      the keys under {:?} were NOT deleted ({}): delete them with `etcdctl del --prefix {:?}`\n",
                l.prefix,
                e.as_deref().unwrap_or("unknown error"),
                l.prefix
            )
        }
    }
    let failed: Vec<&str> =
        r.criteria.iter().filter(|c| !c.pass).map(|c| c.name).chain((s.errors > 0).then_some("errors")).collect();
    out += &match r.verdict {
        Verdict::Pass => {
            format!("verdict: PASS: the cluster sustains load {} by etcd's `check perf` criteria\n", l.name)
        }
        Verdict::Fail => format!(
            "verdict: FAIL ({}): the cluster does not sustain load {} by etcd's `check perf` criteria\n",
            failed.join(", "),
            l.name
        ),
    };
    out
}

/// The key of the `i`-th write: the prefix, 8 random bytes, zeros up to [`KEY_SIZE`].
fn key(prefix: &[u8], random: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + KEY_SIZE);
    k.extend_from_slice(prefix);
    k.extend_from_slice(&random.to_be_bytes());
    k.resize(prefix.len() + KEY_SIZE, 0);
    k
}

/// splitmix64: random enough for distinct keys, no dependency.
fn next_random(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

pub async fn run(client: &kube::Client, ns: &str, a: &CheckPerfArgs) -> Result<i32> {
    if a.prefix.is_empty() {
        bail!("--prefix must not be empty: every key under it is deleted afterwards");
    }
    let p = profile(a.load);
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let c = clusters.get(&a.name).await.with_context(|| format!("EtcdCluster {ns}/{}", a.name))?;
    let access = connect::access(client, ns, &c).await;
    if !access.problems.is_empty() {
        bail!("cannot reach the members as the operator does: {}", access.problems.join("; "));
    }

    // The members the client Service sends to: Ready, not fenced, not going away.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let selector = crate::status::gather::member_selector(&a.name);
    let mut pods = pods_api.list(&ListParams::default().labels(&selector)).await?.items;
    pods.retain(|p| {
        crate::status::gather::is_ready(p)
            && p.metadata.deletion_timestamp.is_none()
            && p.labels().get(etcd_operator_api::SERVING_LABEL).is_none_or(|v| v != "false")
    });
    pods.sort_by_key(|p| p.name_any());
    if pods.is_empty() {
        bail!("EtcdCluster {ns}/{} has no Ready member pod serving clients", a.name);
    }

    // One port-forward and a first answer per member; a member that does not answer is left out.
    let scheme = if access.tls.is_some() { "https" } else { "http" };
    let mut members: Vec<(String, Forward, Client)> = vec![];
    let opened =
        futures::future::join_all(pods.iter().map(|pod| open_member(&pods_api, pod.name_any(), &access, scheme))).await;
    for (pod, r) in pods.iter().zip(opened) {
        match r {
            Ok((fwd, control)) => members.push((pod.name_any(), fwd, control)),
            Err(e) => eprintln!("warning: member {} left out: {e:#}", pod.name_any()),
        }
    }
    let Some((_, _, control)) = members.first() else { bail!("no member of {ns}/{} answers", a.name) };
    let mut control = control.kv_client();

    // etcdctl's precondition: nothing under the prefix (it is all deleted afterwards).
    let existing = tokio::time::timeout(
        MEMBER_TIMEOUT,
        control.get(a.prefix.as_bytes(), Some(GetOptions::new().with_prefix().with_keys_only().with_limit(1))),
    )
    .await
    .context("reading the prefix: no answer")?
    .context("reading the prefix")?;
    if !existing.kvs().is_empty() {
        bail!(
            "prefix {:?} has keys: delete them first (`etcdctl del --prefix {:?}`) or choose another --prefix",
            a.prefix,
            a.prefix
        );
    }

    // The load's connections, spread over the members in turn.
    let n_conns = p.clients.min(MAX_CONNECTIONS);
    let conns = futures::future::try_join_all((0..n_conns).map(|i| {
        let port = members[i % members.len()].1.port;
        let (access, prefix) = (access.clone(), a.prefix.clone());
        async move {
            let url = format!("{scheme}://127.0.0.1:{port}");
            let opts = connect::options(&access, REQUEST_TIMEOUT, true);
            // Connected and used once, so that no request of the load waits for a port-forward.
            let warm = async {
                let mut kv = Client::connect([url.as_str()], Some(opts)).await?.kv_client();
                kv.get(prefix.as_bytes(), Some(GetOptions::new().with_serializable().with_count_only())).await?;
                Ok::<_, etcd_client::Error>(kv)
            };
            match tokio::time::timeout(MEMBER_TIMEOUT, warm).await {
                Ok(Ok(kv)) => Ok(kv),
                Ok(Err(e)) => Err(anyhow::anyhow!("connecting: {e}")),
                Err(_) => Err(anyhow::anyhow!("connecting: no answer within {}s", MEMBER_TIMEOUT.as_secs())),
            }
        }
    }))
    .await?;

    let (stop_tx, stop_rx) = watch::channel(false);
    let done = Arc::new(AtomicU64::new(0));
    let duration = Duration::from_secs(a.duration);
    let load = tokio::spawn(load(conns, p, duration, a.prefix.clone().into_bytes(), stop_rx, done.clone()));
    let progress = progress(duration, done);
    tokio::pin!(load);
    let mut interrupted = false;
    let sample = loop {
        tokio::select! {
            r = &mut load => break r.context("the load")?,
            _ = tokio::signal::ctrl_c(), if !interrupted => {
                interrupted = true;
                let _ = stop_tx.send(true);
            }
        }
    };
    progress.abort();
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        eprint!("\r\x1b[K");
    }

    // Delete what was written, through any member that answers.
    let mut cleanup = Cleanup::default();
    for (pod, _, c) in &members {
        let mut kv = c.kv_client();
        let r = tokio::time::timeout(
            CLEANUP_TIMEOUT,
            kv.delete(a.prefix.as_bytes(), Some(DeleteOptions::new().with_prefix())),
        )
        .await;
        match r {
            Ok(Ok(d)) => {
                cleanup = Cleanup { keys_deleted: Some(d.deleted()), error: None };
                break;
            }
            Ok(Err(e)) => cleanup.error = Some(format!("through {pod}: {e}")),
            Err(_) => cleanup.error = Some(format!("through {pod}: no answer within {}s", CLEANUP_TIMEOUT.as_secs())),
        }
    }
    if interrupted {
        bail!(
            "interrupted; {}",
            match cleanup.keys_deleted {
                Some(n) => format!("{n} keys under {:?} deleted", a.prefix),
                None =>
                    format!("the keys under {:?} were NOT deleted: {}", a.prefix, cleanup.error.unwrap_or_default()),
            }
        );
    }

    let results = stats(&sample.latencies, sample.errors.values().sum(), sample.elapsed.as_secs_f64());
    let criteria = criteria(&p, &results);
    let verdict = verdict(&criteria, results.errors);
    let mut errors: Vec<ErrorCount> =
        sample.errors.into_iter().map(|(message, count)| ErrorCount { message, count }).collect();
    errors.sort_by(|x, y| y.count.cmp(&x.count).then_with(|| x.message.cmp(&y.message)));
    let report = Report {
        schema: SCHEMA,
        cluster: a.name.clone(),
        namespace: ns.to_string(),
        load: LoadInfo {
            name: p.name,
            clients: p.clients,
            rate: p.rate,
            key_size: KEY_SIZE,
            value_size: VALUE_SIZE,
            duration_seconds: a.duration,
            prefix: a.prefix.clone(),
        },
        members: members.iter().map(|(pod, _, _)| pod.clone()).collect(),
        connections: n_conns,
        results,
        errors,
        criteria,
        cleanup,
        verdict,
    };
    match a.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(&report)?),
        Output::Text => print!("{}", text(&report)),
    }
    if let Some(e) = &report.cleanup.error
        && report.cleanup.keys_deleted.is_none()
    {
        eprintln!("warning: the keys under {:?} were not deleted: {e}", a.prefix);
    }
    Ok(if verdict == Verdict::Pass { 0 } else { 1 })
}

/// A port-forward to `pod` and a client of it that answered a status call.
async fn open_member(pods: &Api<Pod>, pod: String, access: &Access, scheme: &str) -> Result<(Forward, Client)> {
    let fwd = connect::forward(pods.clone(), &pod, connect::CLIENT_PORT).await?;
    let url = format!("{scheme}://127.0.0.1:{}", fwd.port);
    let answer = tokio::time::timeout(MEMBER_TIMEOUT, async {
        let mut c = Client::connect([url.as_str()], Some(connect::options(access, MEMBER_TIMEOUT, true))).await?;
        c.status().await?;
        Ok::<_, etcd_client::Error>(c)
    })
    .await;
    let pf = || fwd.last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_default();
    match answer {
        Ok(Ok(c)) => Ok((fwd, c)),
        Ok(Err(e)) => bail!("{e} {}", pf()),
        Err(_) => bail!("no answer within {}s {}", MEMBER_TIMEOUT.as_secs(), pf()),
    }
}

/// What the load measured.
struct Sample {
    /// Seconds of each succeeded request.
    latencies: Vec<f64>,
    errors: BTreeMap<String, u64>,
    elapsed: Duration,
}

/// etcdctl's workload: `p.clients` workers take writes from a queue of `p.clients` that a
/// limiter fills at `p.rate` for `duration` (or until `stop`); each worker writes through the
/// connections in turn.
async fn load(
    conns: Vec<KvClient>,
    p: Profile,
    duration: Duration,
    prefix: Vec<u8>,
    mut stop: watch::Receiver<bool>,
    done: Arc<AtomicU64>,
) -> Sample {
    let (tx, rx) = mpsc::channel::<Vec<u8>>(p.clients);
    let rx = Arc::new(Mutex::new(rx));
    let start = Instant::now();
    let workers: Vec<_> = (0..p.clients)
        .map(|i| {
            let mut kv = conns[i % conns.len()].clone();
            let (rx, done) = (rx.clone(), done.clone());
            tokio::spawn(async move {
                let value = vec![0u8; VALUE_SIZE];
                let mut latencies = vec![];
                let mut errors: BTreeMap<String, u64> = BTreeMap::new();
                loop {
                    let next = rx.lock().await.recv().await;
                    let Some(k) = next else { break };
                    let t = Instant::now();
                    match kv.put(k, value.clone(), None).await {
                        Ok(_) => latencies.push(t.elapsed().as_secs_f64()),
                        Err(e) => *errors.entry(e.to_string()).or_default() += 1,
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (latencies, errors)
            })
        })
        .collect();

    // The limiter (GCRA): a write may go when its theoretical time, less the slack, has come.
    let period = Duration::from_secs_f64(1.0 / f64::from(p.rate));
    let end = tokio::time::Instant::now() + duration;
    let mut due = tokio::time::Instant::now();
    let mut seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(std::process::id());
    loop {
        let now = tokio::time::Instant::now();
        if now >= end || *stop.borrow() {
            break;
        }
        if now + LIMITER_SLACK < due {
            tokio::select! {
                _ = tokio::time::sleep_until((due - LIMITER_SLACK).min(end)) => {}
                _ = stop.changed() => {}
            }
            continue;
        }
        due = due.max(now) + period;
        let k = key(&prefix, next_random(&mut seed));
        tokio::select! {
            r = tx.send(k) => if r.is_err() { break },
            _ = tokio::time::sleep_until(end) => break,
            _ = stop.changed() => break,
        }
    }
    drop(tx);

    let mut sample = Sample { latencies: vec![], errors: BTreeMap::new(), elapsed: Duration::ZERO };
    for w in workers {
        match w.await {
            Ok((l, e)) => {
                sample.latencies.extend(l);
                for (m, n) in e {
                    *sample.errors.entry(m).or_default() += n;
                }
            }
            Err(e) => *sample.errors.entry(format!("a client task: {e}")).or_default() += 1,
        }
    }
    sample.elapsed = start.elapsed();
    sample
}

/// `12/60 s, 1800 requests` on a terminal's stderr, every second.
fn progress(duration: Duration, done: Arc<AtomicU64>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return;
        }
        let start = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let t = start.elapsed().min(duration).as_secs();
            eprint!("\r{t}/{} s, {} requests", duration.as_secs(), done.load(Ordering::Relaxed));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_are_etcdctls() {
        let rows: Vec<(&str, usize, u32)> =
            [Load::S, Load::M, Load::L, Load::Xl].map(profile).iter().map(|p| (p.name, p.clients, p.rate)).collect();
        assert_eq!(rows, [("s", 50, 150), ("m", 200, 1000), ("l", 500, 8000), ("xl", 1000, 15000)]);
        assert_eq!((KEY_SIZE, VALUE_SIZE), (256, 1024));
        // The aliases etcdctl accepts.
        for (word, load) in [("small", Load::S), ("medium", Load::M), ("large", Load::L), ("xLarge", Load::Xl)] {
            assert_eq!(Load::from_str(word, false), Ok(load), "{word}");
        }
    }

    #[test]
    fn statistics_are_those_of_etcds_report() {
        // Population deviation over the succeeded requests; throughput over the elapsed time.
        let s = stats(&[0.01, 0.02, 0.03, 0.04], 1, 2.0);
        assert_eq!(s.requests, 4);
        assert_eq!(s.errors, 1);
        assert_eq!(s.throughput, 2.0);
        assert_eq!(s.average_seconds, Some(0.025));
        assert_eq!(s.fastest_seconds, Some(0.01));
        assert_eq!(s.slowest_seconds, Some(0.04));
        assert_eq!(s.stddev_seconds, Some(0.01118));
        let none = stats(&[], 3, 1.0);
        assert_eq!((none.requests, none.throughput, none.slowest_seconds, none.stddev_seconds), (0, 0.0, None, None));
    }

    fn run_of(rate: f64, latencies: &[f64], errors: u64) -> (Vec<Criterion>, Verdict) {
        let p = profile(Load::S);
        // `rate` succeeded requests per second over 10 s, the latencies repeated to that count.
        let n = (rate * 10.0) as usize;
        let lats: Vec<f64> = latencies.iter().copied().cycle().take(n).collect();
        let c = criteria(&p, &stats(&lats, errors, 10.0));
        let v = verdict(&c, errors);
        (c, v)
    }

    fn passes(c: &[Criterion]) -> Vec<(&str, bool)> {
        c.iter().map(|c| (c.name, c.pass)).collect()
    }

    #[test]
    fn the_verdict_is_etcdctls() {
        let (c, v) = run_of(149.0, &[0.01, 0.02], 0);
        assert_eq!(passes(&c), [("throughput", true), ("slowest", true), ("stddev", true)]);
        assert_eq!(v, Verdict::Pass);
        assert_eq!(c[0].value, Some(149.0));
        assert_eq!(c[0].limit, 135.0);

        // Exactly 90% of the rate fails (etcdctl: `RPS/rate <= 0.9`); just above passes.
        assert!(!run_of(135.0, &[0.01], 0).0[0].pass);
        assert!(run_of(136.0, &[0.01], 0).0[0].pass);

        // The slowest request: 0.5 s passes, above fails.
        let mut one_slow = vec![0.01; 49];
        one_slow.push(0.5);
        let (c, v) = run_of(150.0, &one_slow, 0);
        assert_eq!(passes(&c), [("throughput", true), ("slowest", true), ("stddev", true)]);
        assert_eq!(v, Verdict::Pass);
        one_slow[49] = 0.501;
        let (c, v) = run_of(150.0, &one_slow, 0);
        assert_eq!(passes(&c), [("throughput", true), ("slowest", false), ("stddev", true)]);
        assert_eq!(v, Verdict::Fail);

        // A wide spread: deviation 0.15 s (half 0.05, half 0.35); the slowest still passes.
        let (c, _) = run_of(150.0, &[0.05, 0.35], 0);
        assert_eq!(passes(&c), [("throughput", true), ("slowest", true), ("stddev", false)]);
        assert_eq!(c[2].value, Some(0.15));

        // Any failed request fails the run, the criteria notwithstanding.
        let (c, v) = run_of(150.0, &[0.01], 1);
        assert!(c.iter().all(|c| c.pass));
        assert_eq!(v, Verdict::Fail);

        // Nothing succeeded: every criterion fails, the numbers unknown.
        let (c, v) = run_of(0.0, &[0.01], 5);
        assert_eq!(passes(&c), [("throughput", false), ("slowest", false), ("stddev", false)]);
        assert_eq!((c[1].value, c[2].value, v), (None, None, Verdict::Fail));
    }

    fn report(lats: &[f64], errors: u64) -> Report {
        let p = profile(Load::S);
        let results = stats(lats, errors, 10.0);
        let criteria = criteria(&p, &results);
        let verdict = verdict(&criteria, errors);
        Report {
            schema: SCHEMA,
            cluster: "kx".into(),
            namespace: "ns".into(),
            load: LoadInfo {
                name: p.name,
                clients: p.clients,
                rate: p.rate,
                key_size: KEY_SIZE,
                value_size: VALUE_SIZE,
                duration_seconds: 10,
                prefix: "/etcdctl-check-perf/".into(),
            },
            members: vec!["kx-a".into(), "kx-b".into()],
            connections: 50,
            results,
            errors: if errors > 0 { vec![ErrorCount { message: "timed out".into(), count: errors }] } else { vec![] },
            criteria,
            cleanup: Cleanup { keys_deleted: Some(lats.len() as i64), error: None },
            verdict,
        }
    }

    #[test]
    fn the_text_has_a_line_per_criterion_and_a_verdict() {
        let t = text(&report(&[0.01; 1490], 0));
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[1].starts_with("PASS  throughput 149.0 writes/s"), "{t}");
        assert!(lines[2].starts_with("PASS  slowest request 0.0100 s"), "{t}");
        assert!(lines[3].starts_with("PASS  standard deviation 0.0000 s"), "{t}");
        assert!(t.contains("1490 keys under \"/etcdctl-check-perf/\" deleted"), "{t}");
        assert!(lines.last().is_some_and(|l| l.starts_with("verdict: PASS")), "{t}");

        let t = text(&report(&[0.01; 100], 2));
        assert!(t.contains("FAIL  throughput 10.0 writes/s"), "{t}");
        assert!(t.contains("FAIL  2 of 102 requests failed\n      2 x timed out"), "{t}");
        assert!(t.lines().last().is_some_and(|l| l.starts_with("verdict: FAIL (throughput, errors)")), "{t}");
    }

    #[test]
    fn the_json_schema() {
        let v = serde_json::to_value(report(&[0.01, 0.03], 0)).expect("json");
        assert_eq!(v["schema"], "kubectl-etcd/check-perf/v1");
        assert_eq!(v["verdict"], "FAIL");
        assert_eq!(v["load"]["keySize"], 256);
        assert_eq!(v["results"]["slowestSeconds"], 0.03);
        assert_eq!(v["criteria"][1]["name"], "slowest");
        assert_eq!(v["criteria"][1]["limit"], 0.5);
        assert_eq!(v["cleanup"]["keysDeleted"], 2);
    }

    #[test]
    fn keys_are_the_prefix_and_256_bytes() {
        let mut seed = 1;
        let (a, b) = (key(b"/p/", next_random(&mut seed)), key(b"/p/", next_random(&mut seed)));
        assert_eq!(a.len(), 3 + KEY_SIZE);
        assert!(a.starts_with(b"/p/") && a != b);
    }
}

//! A continuous writer for e2e tests: unique keys put one after another while the operator
//! changes the cluster, every outcome recorded, and a check that every acknowledged write is
//! there with its value afterwards.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use e2e::wait_until;
use etcd_client::{Client, ConnectOptions, GetOptions, TlsOptions};

/// The client TLS settings a writer connects with, replaceable while it runs (a client that
/// reloads its certificate Secret): every new connection takes the current ones.
pub type SharedTls = Arc<Mutex<TlsOptions>>;

/// What the writer saw, readable while it runs.
#[derive(Clone, Debug, Default)]
pub struct WriterStats {
    /// Indices of acknowledged keys (`<prefix>/<index:08>` = `value-<index>`).
    pub acked: Vec<u64>,
    /// Keys whose first put failed and that were retried once on another endpoint.
    pub retried: u64,
    /// Keys whose put failed on every attempt.
    pub failed: Vec<u64>,
    /// Puts refused with "no leader" / "leader changed" (the election when leadership moves)
    /// and sent again after a short pause, as etcd's documentation tells clients to do: such a
    /// put was never proposed, so re-sending it is safe.
    pub leader_waits: u64,
    /// The first errors seen, for the report.
    pub errors: Vec<String>,
    /// Puts attempted per endpoint (proof that every endpoint was used).
    pub per_endpoint: BTreeMap<String, u64>,
}

/// Sequential puts of unique keys, round-robin over every member's own endpoint; a put that
/// fails is retried on the next endpoints, and a key that fails on each is a failed write.
/// A put refused because the cluster is electing a leader is re-sent after 50 ms, for at most
/// [`LEADER_WAIT`] in all: a leader change (which upgrading the leader needs) takes an
/// election, and a client of etcd is expected to retry that refusal.
pub struct Writer {
    stop: Arc<AtomicBool>,
    /// Asked to hold its puts (`pause`), and whether its loop holds them now.
    paused: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    stats: Arc<Mutex<WriterStats>>,
    thread: Option<JoinHandle<Result<()>>>,
}

/// Per-put deadline, about etcd's own request timeout (5 s): a put that etcd has not answered
/// by then is an error, counted like a refused one.
pub const PUT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a put refused for want of a leader is re-sent before it counts as failed.
pub const LEADER_WAIT: Duration = Duration::from_secs(2);

/// etcd refused the put before proposing it because there is no leader at the moment.
pub fn is_leaderless(e: &anyhow::Error) -> bool {
    let t = format!("{e:#}");
    t.contains("no leader") || t.contains("leader changed") || t.contains("proposal dropped")
}

pub fn connect_options() -> ConnectOptions {
    ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_timeout(PUT_TIMEOUT)
}

fn options_with(tls: Option<&SharedTls>) -> ConnectOptions {
    match tls {
        Some(t) => connect_options().with_tls(t.lock().unwrap_or_else(PoisonError::into_inner).clone()),
        None => connect_options(),
    }
}

pub async fn put(c: &mut Client, key: &str, value: &str) -> Result<()> {
    match tokio::time::timeout(PUT_TIMEOUT + Duration::from_secs(1), c.put(key, value, None)).await {
        Ok(r) => r.map(drop).map_err(Into::into),
        Err(_) => bail!("no answer within {PUT_TIMEOUT:?}"),
    }
}

impl Writer {
    /// Over members' own endpoints, as etcd's client with several endpoints: a put that fails
    /// is sent to the next endpoint, each at most once. With one member restarting at a time
    /// (one just back and still catching up, the next one going), a put that fails on every
    /// endpoint means no quorum served it.
    pub fn start(endpoints: Vec<String>, prefix: &str) -> Result<Writer> {
        let attempts = endpoints.len().max(2);
        Self::start_with(endpoints, prefix, attempts, false, None)
    }

    /// A client of the client Service, as applications use it: two connections through the
    /// Service, and a put that fails on a connection that broke (its member left: a removed
    /// member's connections are reset, which no Service can hide) is sent again on a new
    /// connection, which the Service routes to a member that serves. Three attempts per key.
    pub fn through_service(endpoint: &str, prefix: &str) -> Result<Writer> {
        Self::start_with(vec![endpoint.to_string(), endpoint.to_string()], prefix, 3, true, None)
    }

    /// [`Writer::through_service`] over TLS; a reconnection takes the TLS settings `tls` holds
    /// then.
    pub fn through_service_tls(endpoint: &str, prefix: &str, tls: SharedTls) -> Result<Writer> {
        Self::start_with(vec![endpoint.to_string(), endpoint.to_string()], prefix, 3, true, Some(tls))
    }

    fn start_with(
        endpoints: Vec<String>,
        prefix: &str,
        attempts: usize,
        reconnect: bool,
        tls: Option<SharedTls>,
    ) -> Result<Writer> {
        ensure!(!endpoints.is_empty(), "no endpoints to write to");
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(WriterStats::default()));
        let (stop2, stats2, prefix2) = (stop.clone(), stats.clone(), prefix.to_string());
        let (paused, idle) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (paused2, idle2) = (paused.clone(), idle.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            rt.block_on(async move {
                // Through a Service: the test begins once the Service routes (a first put went
                // through). The members were ready before, but kube-proxy programs a new Service
                // or endpoint a moment later, longer under load; a refusal then is not a write
                // lost to what the test does. Not routing within a minute: the writes count.
                if reconnect {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while Instant::now() < deadline && !stop2.load(Ordering::Relaxed) {
                        let ep = endpoints[0].as_str();
                        if let Ok(mut c) = Client::connect([ep], Some(options_with(tls.as_ref()))).await
                            && put(&mut c, &format!("{prefix2}/routed"), "yes").await.is_ok()
                        {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
                // One client per member: etcd-client would otherwise balance over all of them and
                // hide which endpoint failed.
                let mut clients = vec![];
                for ep in &endpoints {
                    let c = Client::connect([ep.as_str()], Some(options_with(tls.as_ref())))
                        .await
                        .with_context(|| format!("connecting to {ep}"))?;
                    clients.push((ep.clone(), c));
                }
                let n = clients.len();
                let mut i: u64 = 0;
                while !stop2.load(Ordering::Relaxed) {
                    if paused2.load(Ordering::SeqCst) {
                        idle2.store(true, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        continue;
                    }
                    idle2.store(false, Ordering::SeqCst);
                    let (key, value) = (format!("{prefix2}/{i:08}"), format!("value-{i}"));
                    let first = (i as usize) % n;
                    let mut ok = false;
                    let started = Instant::now();
                    let mut attempt = 0;
                    while attempt < attempts {
                        let idx = (first + attempt) % n;
                        let ep = clients[idx].0.clone();
                        *stats2
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .per_endpoint
                            .entry(ep.clone())
                            .or_default() += 1;
                        match put(&mut clients[idx].1, &key, &value).await {
                            Ok(()) => {
                                ok = true;
                                break;
                            }
                            Err(e) if is_leaderless(&e) && started.elapsed() < LEADER_WAIT => {
                                stats2.lock().unwrap_or_else(PoisonError::into_inner).leader_waits += 1;
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                            Err(e) => {
                                if reconnect
                                    && let Ok(fresh) =
                                        Client::connect([ep.as_str()], Some(options_with(tls.as_ref()))).await
                                {
                                    clients[idx].1 = fresh;
                                }
                                let mut s = stats2.lock().unwrap_or_else(PoisonError::into_inner);
                                if attempt == 0 {
                                    s.retried += 1;
                                }
                                if s.errors.len() < 20 {
                                    s.errors.push(format!("{key} at {ep}: {e:#}"));
                                }
                            }
                        }
                        attempt += 1;
                    }
                    {
                        let mut s = stats2.lock().unwrap_or_else(PoisonError::into_inner);
                        if ok { s.acked.push(i) } else { s.failed.push(i) }
                    }
                    i += 1;
                    // Pacing only (a few hundred puts a second would just grow the range read).
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(())
            })
        });
        Ok(Writer { stop, paused, idle, stats, thread: Some(thread) })
    }

    /// Holds the puts: returns once no put is in flight (so the members' raft indexes stay
    /// where they are, as far as this writer goes).
    pub fn pause(&self) -> Result<()> {
        self.paused.store(true, Ordering::SeqCst);
        wait_until(Duration::from_secs(15), "the writer to hold its puts", || {
            Ok(self.idle.load(Ordering::SeqCst).then_some(()))
        })
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    pub fn stats(&self) -> WriterStats {
        self.stats.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Stops the writer and returns what it did; fails if it could not run at all.
    pub fn finish(mut self) -> Result<WriterStats> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take().expect("joined once");
        thread.join().map_err(|_| anyhow::anyhow!("writer thread panicked"))??;
        Ok(self.stats())
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Every key under `prefix/` with its value, read in pages from the cluster (any member).
pub fn read_prefix(endpoints: &[String], prefix: &str) -> Result<BTreeMap<String, String>> {
    read_prefix_with(endpoints, prefix, connect_options())
}

/// [`read_prefix`] with these connection options (TLS).
pub fn read_prefix_with(endpoints: &[String], prefix: &str, opts: ConnectOptions) -> Result<BTreeMap<String, String>> {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut c = Client::connect(endpoints, Some(opts)).await?;
        let start = format!("{prefix}/");
        let end = format!("{prefix}0"); // '0' follows '/': the end of the prefix range
        let mut from = start.clone();
        let mut out = BTreeMap::new();
        loop {
            let r = c.get(from.as_str(), Some(GetOptions::new().with_range(end.as_str()).with_limit(5000))).await?;
            for kv in r.kvs() {
                out.insert(kv.key_str()?.to_string(), kv.value_str()?.to_string());
            }
            match (r.more(), r.kvs().last()) {
                (true, Some(last)) => from = format!("{}\0", last.key_str()?),
                _ => break,
            }
        }
        Ok(out)
    })
}

/// Every acknowledged write of the writer is in etcd with its value.
pub fn check_acked(endpoints: &[String], prefix: &str, stats: &WriterStats) -> Result<()> {
    check_acked_with(endpoints, prefix, stats, connect_options)
}

/// [`check_acked`] with the connection options `opts` makes (TLS).
pub fn check_acked_with(
    endpoints: &[String],
    prefix: &str,
    stats: &WriterStats,
    opts: impl Fn() -> ConnectOptions,
) -> Result<()> {
    let stored = wait_until(Duration::from_secs(30), "a range read of the writer's keys", || {
        Ok(read_prefix_with(endpoints, prefix, opts()).ok())
    })?;
    let missing: Vec<String> = stats
        .acked
        .iter()
        .map(|i| (format!("{prefix}/{i:08}"), format!("value-{i}")))
        .filter(|(k, v)| stored.get(k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    ensure!(
        missing.is_empty(),
        "{} of {} acknowledged writes are missing or wrong, e.g. {:?}",
        missing.len(),
        stats.acked.len(),
        &missing[..missing.len().min(10)]
    );
    Ok(())
}

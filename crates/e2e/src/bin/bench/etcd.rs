//! The etcd side of the bench: health probes straight to each member's pod IP, and the client
//! that writes continuously during an upgrade.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use etcd_client::{Client, ConnectOptions, GetOptions};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

/// How long one probe of one member may take in all (connect, status, read).
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

/// One member's answer, by its pod IP.
#[derive(Clone, Debug, Default)]
pub struct Probe {
    /// A linearizable read succeeded: the member is a started voter of a cluster with a leader
    /// (learners refuse linearizable reads).
    pub read_ok: bool,
    /// Server version from Status.
    pub version: Option<String>,
    pub is_leader: bool,
    pub err: Option<String>,
}

/// One etcd member as the member list shows it; `pod` is the first DNS label of its peer URL.
#[derive(Clone, Debug)]
pub struct Member {
    pub pod: String,
    pub learner: bool,
}

fn options(timeout: Duration) -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(800))
        .with_timeout(timeout)
        .with_require_leader(true)
}

async fn probe_one(url: String) -> (Probe, Option<Client>) {
    let attempt = async {
        let mut c = Client::connect([url.as_str()], Some(options(PROBE_TIMEOUT))).await?;
        let st = c.status().await?;
        let version = st.version().to_string();
        let is_leader = st.header().is_some_and(|h| h.member_id() == st.leader());
        let read = c.get("bench-health", None).await.map(drop);
        Ok::<_, etcd_client::Error>((version, is_leader, read, c))
    };
    match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
        Ok(Ok((version, is_leader, read, c))) => {
            let ok = read.is_ok();
            (Probe { read_ok: ok, version: Some(version), is_leader, err: read.err().map(|e| e.to_string()) }, Some(c))
        }
        Ok(Err(e)) => (Probe { err: Some(e.to_string()), ..Default::default() }, None),
        Err(_) => (Probe { err: Some("no answer within 1.5s".into()), ..Default::default() }, None),
    }
}

fn pod_of_peer_url(url: &str) -> String {
    let rest = url.split_once("://").map(|x| x.1).unwrap_or(url);
    rest.split([':', '/', '.']).next().unwrap_or_default().to_string()
}

/// Probe every `(pod, pod IP)` in parallel; the member list comes from a member that answered a
/// linearizable read (so from one that is part of a working cluster).
pub async fn probe_all(targets: Vec<(String, String)>) -> (BTreeMap<String, Probe>, Option<Vec<Member>>) {
    let mut set = JoinSet::new();
    for (pod, ip) in targets {
        set.spawn(async move {
            let (p, c) = probe_one(format!("http://{ip}:2379")).await;
            (pod, p, c)
        });
    }
    let mut probes = BTreeMap::new();
    let mut reader = None;
    while let Some(r) = set.join_next().await {
        let Ok((pod, p, c)) = r else { continue };
        if p.read_ok && reader.is_none() {
            reader = c;
        }
        probes.insert(pod, p);
    }
    let mut members = None;
    if let Some(mut c) = reader
        && let Ok(Ok(list)) = tokio::time::timeout(PROBE_TIMEOUT, c.member_list()).await
    {
        members = Some(
            list.members()
                .iter()
                .map(|m| Member {
                    pod: m.peer_urls().first().map(|u| pod_of_peer_url(u)).unwrap_or_else(|| m.name().to_string()),
                    learner: m.is_learner(),
                })
                .collect(),
        );
    }
    (probes, members)
}

// --- the writer --------------------------------------------------------------------------------

/// One logical write: tried on one member after another until one accepts it.
#[derive(Clone, Debug)]
pub struct WriteRecord {
    pub started: Instant,
    pub latency: Duration,
    /// Members tried; every attempt after the first is a retry on another endpoint.
    pub attempts: u32,
    pub ok: bool,
    pub seq: u64,
    pub last_err: Option<String>,
    /// Rounds over the members repeated because every one refused for want of a leader (an
    /// election while leadership moves); a client of etcd is expected to re-send those.
    pub leader_waits: u32,
}

/// How long a write refused by every member for want of a leader is re-sent (every 50 ms).
const LEADER_WAIT: Duration = Duration::from_secs(2);

/// etcd refused before proposing: no leader at the moment (safe to send again).
pub fn is_leaderless(err: &str) -> bool {
    err.contains("no leader") || err.contains("leader changed") || err.contains("proposal dropped")
}

/// A client writing `prefix/<seq>` continuously, one write at a time, spreading writes over all
/// member endpoints (each write starts on the next endpoint in turn); a write that fails on a
/// member is retried on the next one, and fails only when every member refused it.
pub struct Writer {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Vec<WriteRecord>>,
    endpoints: Arc<Mutex<Vec<String>>>,
}

impl Writer {
    pub fn start(
        rt: &Runtime,
        endpoints: Vec<String>,
        prefix: &str,
        interval: Duration,
        attempt_timeout: Duration,
    ) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let eps = Arc::new(Mutex::new(endpoints));
        let (stop2, eps2, prefix2) = (stop.clone(), eps.clone(), prefix.to_string());
        let handle = rt.spawn(async move {
            let mut clients: HashMap<String, Client> = HashMap::new();
            let mut records = Vec::new();
            let mut seq = 0u64;
            while !stop2.load(Ordering::Acquire) {
                let eps: Vec<String> = eps2.lock().unwrap_or_else(|e| e.into_inner()).clone();
                seq += 1;
                let key = format!("{prefix2}/{seq:09}");
                let started = Instant::now();
                let (mut attempts, mut ok, mut last_err, mut leader_waits) = (0u32, false, None::<String>, 0u32);
                loop {
                    for k in 0..eps.len() {
                        let ep = &eps[(seq as usize + k) % eps.len()];
                        attempts += 1;
                        let mut c = match clients.get(ep) {
                            Some(c) => c.clone(),
                            None => match Client::connect([ep.as_str()], Some(options(attempt_timeout))).await {
                                Ok(c) => {
                                    clients.insert(ep.clone(), c.clone());
                                    c
                                }
                                Err(e) => {
                                    last_err = Some(format!("{ep}: {e}"));
                                    continue;
                                }
                            },
                        };
                        match tokio::time::timeout(attempt_timeout, c.put(key.as_str(), "x", None)).await {
                            Ok(Ok(_)) => {
                                ok = true;
                                break;
                            }
                            Ok(Err(e)) => last_err = Some(format!("{ep}: {e}")),
                            Err(_) => last_err = Some(format!("{ep}: no answer within {attempt_timeout:?}")),
                        }
                        // A fresh connection next time: a broken one can keep failing.
                        clients.remove(ep);
                    }
                    if ok || !last_err.as_deref().is_some_and(is_leaderless) || started.elapsed() >= LEADER_WAIT {
                        break;
                    }
                    leader_waits += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if eps.is_empty() {
                    last_err = Some("no member endpoint known".into());
                }
                records.push(WriteRecord {
                    started,
                    latency: started.elapsed(),
                    attempts,
                    ok,
                    seq,
                    last_err,
                    leader_waits,
                });
                tokio::time::sleep(interval).await;
            }
            records
        });
        Writer { stop, handle, endpoints: eps }
    }

    pub fn set_endpoints(&self, eps: Vec<String>) {
        if !eps.is_empty() {
            *self.endpoints.lock().unwrap_or_else(|e| e.into_inner()) = eps;
        }
    }

    pub fn stop(self, rt: &Runtime) -> Result<Vec<WriteRecord>> {
        self.stop.store(true, Ordering::Release);
        rt.block_on(self.handle).context("the writer task failed")
    }
}

/// Acknowledged writes (by sequence number) that a linearizable read of the prefix does not
/// find: any would be data loss.
pub fn missing_acknowledged(rt: &Runtime, endpoint: &str, prefix: &str, acked: &BTreeSet<u64>) -> Result<Vec<u64>> {
    rt.block_on(async {
        let mut c = Client::connect([endpoint], Some(options(Duration::from_secs(10)))).await?;
        let resp = c.get(format!("{prefix}/"), Some(GetOptions::new().with_prefix().with_keys_only())).await?;
        let present: BTreeSet<u64> =
            resp.kvs().iter().filter_map(|kv| kv.key_str().ok()?.rsplit('/').next()?.parse().ok()).collect();
        if present.is_empty() && !acked.is_empty() {
            bail!("read of {prefix}/ at {endpoint} returned no keys");
        }
        Ok(acked.difference(&present).copied().collect())
    })
}

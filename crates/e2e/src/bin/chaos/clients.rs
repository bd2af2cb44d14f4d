//! The clients: per cluster, several tasks writing unique keys (`u/<client>/<seq>`), doing
//! read-modify-write transactions on shared keys (`r/<epoch>/<slot>`: a read, then a
//! compare-and-set on the value read) and reading keys others wrote, through the client
//! Service and straight to member pod IPs. Every call is recorded with its call and return
//! time and outcome; an error or a timeout is an unknown outcome.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, Txn, TxnOp};

use crate::checker::{F, Op};
use crate::plan::Rng;

/// One call may take this long before its outcome counts as unknown.
const OP_TIMEOUT: Duration = Duration::from_secs(3);
/// Read-modify-write keys change every this long, so that each key's history stays short.
const EPOCH: Duration = Duration::from_secs(20);
const SLOTS: u64 = 2;

pub fn write_once(key: &str) -> bool {
    key.starts_with("u/")
}

/// Where the clients of one cluster send their calls; refreshed by the monitor.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    pub service: String,
    pub members: Vec<String>,
}

pub struct Shared {
    pub start: Instant,
    /// Unix time in ms at `start`: operation times (ns since `start`) on the monitor's clock.
    pub start_unix_ms: u64,
    pub stop: AtomicBool,
    pub history: Mutex<Vec<Op>>,
    /// Acknowledged unique keys per cluster, with their value, for other clients to read.
    pub acked: Mutex<HashMap<String, Vec<(String, String)>>>,
    pub targets: Mutex<HashMap<String, Targets>>,
}

impl Shared {
    pub fn new() -> Self {
        Shared {
            start: Instant::now(),
            start_unix_ms: crate::now_ms(),
            stop: AtomicBool::new(false),
            history: Mutex::default(),
            acked: Mutex::default(),
            targets: Mutex::default(),
        }
    }

    pub fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
}

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(1500))
        .with_timeout(OP_TIMEOUT)
        .with_require_leader(true)
}

async fn connect(ep: &str) -> Option<Client> {
    tokio::time::timeout(OP_TIMEOUT, Client::connect([ep], Some(options()))).await.ok()?.ok()
}

/// One client of `cluster`: `id` 0 of each cluster goes through the Service, the others to a
/// member pod IP chosen per call.
pub async fn client(shared: Arc<Shared>, cluster: String, id: u32, seed: u64, pause: Duration) {
    let mut rng = Rng::new(seed);
    let mut conns: HashMap<String, Client> = HashMap::new();
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        tokio::time::sleep(pause).await;
        let t =
            shared.targets.lock().unwrap_or_else(PoisonError::into_inner).get(&cluster).cloned().unwrap_or_default();
        let ep = if id.is_multiple_of(3) || t.members.is_empty() {
            t.service.clone()
        } else {
            t.members[rng.below(t.members.len() as u64) as usize].clone()
        };
        if ep.is_empty() {
            continue;
        }
        if !conns.contains_key(&ep) {
            let Some(c) = connect(&ep).await else { continue };
            conns.insert(ep.clone(), c);
        }
        let c = conns.get_mut(&ep).expect("just inserted").clone();
        let roll = rng.below(100);
        let failed = if roll < 60 {
            seq += 1;
            let key = format!("u/{id}/{seq}");
            let val = format!("{cluster}-{id}-{seq}");
            put(&shared, &cluster, id, &ep, c, key, val).await
        } else if roll < 85 {
            let epoch = shared.start.elapsed().as_secs() / EPOCH.as_secs();
            let key = format!("r/{epoch}/{}", rng.below(SLOTS));
            seq += 1;
            rmw(&shared, &cluster, id, &ep, c, key, format!("{cluster}-{id}-{seq}")).await
        } else {
            let pick = {
                let acked = shared.acked.lock().unwrap_or_else(PoisonError::into_inner);
                acked.get(&cluster).filter(|v| !v.is_empty()).map(|v| v[rng.below(v.len() as u64) as usize].clone())
            };
            match pick {
                Some((key, _)) => read(&shared, &cluster, id, &ep, c, key).await.is_none(),
                None => false,
            }
        };
        if failed {
            // A fresh connection next time: the member may be gone.
            conns.remove(&ep);
        }
    }
}

fn record(shared: &Shared, op: Op) {
    shared.history.lock().unwrap_or_else(PoisonError::into_inner).push(op);
}

#[allow(clippy::too_many_arguments)]
fn op(
    shared: &Shared,
    cluster: &str,
    id: u32,
    ep: &str,
    key: &str,
    f: F,
    call: u64,
    err: Option<String>,
    answered_by: Option<&etcd_client::ResponseHeader>,
) -> Op {
    let ret = err.is_none().then(|| shared.now());
    let answered_by = answered_by.map(|h| (h.cluster_id(), h.member_id()));
    Op { client: id, cluster: cluster.into(), key: key.into(), f, call, ret, via: ep.into(), err, answered_by }
}

/// Returns whether it failed.
async fn put(shared: &Shared, cluster: &str, id: u32, ep: &str, mut c: Client, key: String, val: String) -> bool {
    let call = shared.now();
    let r = tokio::time::timeout(OP_TIMEOUT, c.put(key.as_str(), val.as_str(), None)).await;
    let (header, err) = match r {
        Ok(Ok(resp)) => (resp.header().cloned(), None),
        Ok(Err(e)) => (None, Some(e.to_string())),
        Err(_) => (None, Some("timeout".into())),
    };
    let failed = err.is_some();
    record(shared, op(shared, cluster, id, ep, &key, F::Write(val.clone()), call, err, header.as_ref()));
    if !failed {
        shared.acked.lock().unwrap_or_else(PoisonError::into_inner).entry(cluster.into()).or_default().push((key, val));
    }
    failed
}

/// A linearizable read; None when it failed.
async fn read(shared: &Shared, cluster: &str, id: u32, ep: &str, mut c: Client, key: String) -> Option<Option<String>> {
    let call = shared.now();
    let r = tokio::time::timeout(OP_TIMEOUT, c.get(key.as_str(), None)).await;
    let (val, header, err) = match r {
        Ok(Ok(resp)) => (
            Some(resp.kvs().first().map(|kv| String::from_utf8_lossy(kv.value()).to_string())),
            resp.header().cloned(),
            None,
        ),
        Ok(Err(e)) => (None, None, Some(e.to_string())),
        Err(_) => (None, None, Some("timeout".into())),
    };
    record(shared, op(shared, cluster, id, ep, &key, F::Read(val.clone().flatten()), call, err, header.as_ref()));
    val
}

async fn rmw(shared: &Shared, cluster: &str, id: u32, ep: &str, c: Client, key: String, new: String) -> bool {
    let Some(cur) = read(shared, cluster, id, ep, c.clone(), key.clone()).await else { return true };
    let mut c = c;
    let cmp = match &cur {
        Some(v) => Compare::value(key.as_str(), CompareOp::Equal, v.as_str()),
        None => Compare::version(key.as_str(), CompareOp::Equal, 0),
    };
    let txn = Txn::new().when([cmp]).and_then([TxnOp::put(key.as_str(), new.as_str(), None)]);
    let call = shared.now();
    let r = tokio::time::timeout(OP_TIMEOUT, c.txn(txn)).await;
    let (ok, header, err) = match r {
        Ok(Ok(resp)) => (Some(resp.succeeded()), resp.header().cloned(), None),
        Ok(Err(e)) => (None, None, Some(e.to_string())),
        Err(_) => (None, None, Some("timeout".into())),
    };
    let failed = err.is_some();
    record(shared, op(shared, cluster, id, ep, &key, F::Cas { expect: cur, new, ok }, call, err, header.as_ref()));
    failed
}

/// Every key under `u/` and `r/` of a cluster, read after the clients stopped (linearizable,
/// retried for a while). None when no member answered.
pub async fn final_read(eps: &[String], clients: u32) -> Option<BTreeMap<String, String>> {
    // One range per client: a single range over every key could outgrow a gRPC message.
    let prefixes: Vec<String> = (0..clients).map(|c| format!("u/{c}/")).chain(["r/".to_string()]).collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    for ep in eps.iter().cycle() {
        if Instant::now() > deadline {
            break;
        }
        if let Some(mut c) = connect(ep).await {
            let mut out = BTreeMap::new();
            let mut ok = true;
            for prefix in &prefixes {
                match c.get(prefix.as_str(), Some(GetOptions::new().with_prefix())).await {
                    Ok(resp) => {
                        for kv in resp.kvs() {
                            out.insert(
                                String::from_utf8_lossy(kv.key()).to_string(),
                                String::from_utf8_lossy(kv.value()).to_string(),
                            );
                        }
                    }
                    Err(_) => ok = false,
                }
            }
            if ok {
                return Some(out);
            }
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    None
}

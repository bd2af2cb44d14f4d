//! `etcd-operator archive-follow`: the continuous archiver (issue 29). It watches every key of
//! the cluster from the revision right after the newest full snapshot of its series (or after
//! the last durable segment, when it restarts) and writes a segment (`archive::segment`) at
//! least every `--flush-interval-secs`: that interval is the promised recovery point.
//!
//! - Nothing is skipped silently: when etcd has compacted past the revision it needs
//!   (`compact_revision` in the watch's answer), it says so, takes a full snapshot at once
//!   (`save`) and continues from that; the revisions in between show as a gap
//!   (`archive::restorable_ranges::gaps`).
//! - A watch that breaks (a member restarted, the leader changed) is opened again from the next
//!   revision it needs; events received but not yet durable stay in memory and are written with
//!   the next flush. A store that refuses a write keeps them for the next tick.
//! - It runs until it fails: the pod's restart policy brings it back, and it resumes from what
//!   the store holds.
//! - `GET /status` on `--status-port` answers where it stands (`ArchiveStatus`, JSON): the
//!   operator copies it into the EtcdBackup's status.

use std::time::Duration;

use etcd_client::{ConnectOptions, EventType, WatchOptions};
use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::archive::layout;
use super::archive::segment::{Event, Op, Segment};
use super::contract::{AuthArgs, ClientTlsArgs, PodError, StorageArgs};
use super::location;
use super::{one_shot, pod_secrets, save, store};
use crate::auth::Credentials;
use crate::auth::connect::connect;
use crate::tls::connector::Dialer;
use etcd_operator_api::backup::{ArchiveGap, ArchiveStatus};

#[derive(clap::Args, Debug, Clone)]
pub struct ArchiveArgs {
    /// Where the snapshot series lives (`--key` is its base key, as for periodic backups).
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Client URLs of the cluster (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// Write what was received at least this often (the recovery point objective).
    #[arg(long, default_value_t = 10)]
    pub flush_interval_secs: u64,
    /// UID of the EtcdBackup (recorded in the sidecar of a snapshot the archiver takes).
    #[arg(long, default_value = "")]
    pub owner_uid: String,
    /// Port of `GET /status` (0: none).
    #[arg(long, default_value_t = STATUS_PORT)]
    pub status_port: u16,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// Default port of the archiver's status endpoint.
pub const STATUS_PORT: u16 = 8081;

type Shared = std::sync::Arc<std::sync::Mutex<ArchiveStatus>>;

fn now_rfc3339() -> String {
    crate::backup::rfc3339(k8s_openapi::jiff::Timestamp::now())
}

fn update(status: &Shared, f: impl FnOnce(&mut ArchiveStatus)) {
    if let Ok(mut s) = status.lock() {
        f(&mut s);
    }
}

/// Serves `GET /status` until the process ends.
async fn serve_status(port: u16, status: Shared) -> Result<(), PodError> {
    let app = axum::Router::new().route(
        "/status",
        axum::routing::get(move || {
            let body = status.lock().map(|s| serde_json::to_string(&*s).unwrap_or_default()).unwrap_or_default();
            async move { ([(axum::http::header::CONTENT_TYPE, "application/json")], body) }
        }),
    );
    let listener =
        tokio::net::TcpListener::bind(("0.0.0.0", port)).await.map_err(|e| format!("status port {port}: {e}"))?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A watch silent this long is asked where it stands (an etcd progress request, answered at
/// once with the store's revision by a watch that works).
const PROGRESS_EVERY: Duration = Duration::from_secs(10);
/// A watch that answers nothing this long after being asked is stalled: it is opened again.
const STALLED_AFTER: Duration = Duration::from_secs(30);

/// Whether a watch still answers: a stream can stop delivering without an error (a member
/// that hangs, a connection a middlebox dropped silently), and with no writes to the cluster
/// silence is no sign. So a silent watch is asked for its progress, and one that does not answer
/// that counts as stalled.
#[derive(Debug)]
struct Liveness {
    last_heard: std::time::Instant,
    asked: Option<std::time::Instant>,
}

impl Liveness {
    fn new(now: std::time::Instant) -> Self {
        Liveness { last_heard: now, asked: None }
    }

    /// Anything arrived on the stream: events or a progress answer.
    fn heard(&mut self, now: std::time::Instant) {
        (self.last_heard, self.asked) = (now, None);
    }

    /// Whether to send a progress request now (silent for [`PROGRESS_EVERY`], not asked yet).
    fn ask(&mut self, now: std::time::Instant) -> bool {
        if self.asked.is_none() && now.duration_since(self.last_heard) >= PROGRESS_EVERY {
            self.asked = Some(now);
            return true;
        }
        false
    }

    /// Silent for [`STALLED_AFTER`] since it was asked: how long it has been silent.
    fn stalled(&self, now: std::time::Instant) -> Option<Duration> {
        self.asked.filter(|a| now.duration_since(*a) >= STALLED_AFTER).map(|_| now.duration_since(self.last_heard))
    }
}
/// A snapshot taken because compaction overtook the archive gives up after this long.
const SNAPSHOT_TIMEOUT_SECS: u64 = 300;

/// Where the archive of one cluster stands.
struct Position {
    /// Revision of the full snapshot the current chain continues.
    base: i64,
    /// The first revision not yet received.
    next: i64,
}

/// Runs until something fails that a restart must settle.
pub async fn run(args: ArchiveArgs) -> Result<String, PodError> {
    let base = args.storage.location()?;
    let (store, _) = store::open(&base, &args.storage.credentials_dir, &args.storage.s3())?;
    let tls = pod_secrets::client_tls(&args.tls)?;
    let creds = pod_secrets::login(&args.auth)?;
    let dialer =
        Dialer::new(ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT), tls.as_ref(), CONNECT_TIMEOUT, None);
    let cluster_id = cluster_id(&args.endpoints, &dialer, creds.as_ref()).await?;
    let prefix = layout::prefix(&base.key, &cluster_id);
    let mut pos = match resume(&*store, &prefix).await? {
        Some(p) => p,
        None => {
            let s = newest_snapshot(&*store, &base.key, &cluster_id).await?.ok_or_else(|| {
                format!(
                    "no full snapshot of etcd cluster {cluster_id} at {} yet: the archive starts after one",
                    base.url()
                )
            })?;
            Position { base: s, next: s + 1 }
        }
    };
    eprintln!(
        "archiving cluster {cluster_id} into {} from revision {} (snapshot {})",
        base.with_key(prefix.clone()).url(),
        pos.next,
        pos.base
    );
    let status: Shared = std::sync::Arc::new(std::sync::Mutex::new(ArchiveStatus {
        cluster_id: cluster_id.clone(),
        base_revision: pos.base,
        durable_revision: pos.next - 1,
        ..Default::default()
    }));
    if args.status_port != 0 {
        serve_status(args.status_port, status.clone()).await?;
    }
    let flush_every = Duration::from_secs(args.flush_interval_secs.max(1));
    let mut pending: Vec<Event> = Vec::new();
    loop {
        let here = Here { store: &*store, prefix: &prefix, cluster_id: &cluster_id, status: &status };
        match follow(&args, &dialer, creds.as_ref(), &here, &mut pos, &mut pending, flush_every).await {
            Followed::Compacted(compacted) => {
                flush(&here, &pos, &mut pending).await;
                eprintln!(
                    "etcd compacted past revision {} (compact revision {compacted}): taking a full snapshot now; revisions {}.. up to it are a gap",
                    pos.next, pos.next
                );
                let report = save::run(snapshot_args(&args)).await?;
                let gap = ArchiveGap {
                    from_revision: pos.next,
                    to_revision: report.backup.etcd_revision,
                    time: now_rfc3339(),
                };
                pos = Position { base: report.backup.etcd_revision, next: report.backup.etcd_revision + 1 };
                update(&status, |s| {
                    s.gaps.push(gap);
                    s.base_revision = pos.base;
                    s.durable_revision = pos.base;
                });
            }
            Followed::Broken(why) => {
                eprintln!("watch from revision {} broke ({why}); opening it again", pos.next);
                update(&status, |s| s.last_error = format!("watch: {why}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// Where segments go and where progress is reported.
struct Here<'a> {
    store: &'a dyn ObjectStore,
    prefix: &'a str,
    cluster_id: &'a str,
    status: &'a Shared,
}

enum Followed {
    Compacted(i64),
    Broken(String),
}

/// One watch, until it ends. Flushes on every tick.
async fn follow(
    args: &ArchiveArgs,
    dialer: &Dialer,
    creds: Option<&Credentials>,
    here: &Here<'_>,
    pos: &mut Position,
    pending: &mut Vec<Event>,
    flush_every: Duration,
) -> Followed {
    let (mut client, _) = match connect(&args.endpoints, dialer, creds).await {
        Ok(c) => c,
        Err(e) => return Followed::Broken(format!("connect: {e}")),
    };
    let opts = WatchOptions::new().with_all_keys().with_start_revision(pos.next).with_progress_notify();
    let (mut requests, mut stream) = match client.watch("", Some(opts)).await {
        Ok(s) => s.split(),
        Err(e) => return Followed::Broken(format!("watch: {e}")),
    };
    let mut alive = Liveness::new(std::time::Instant::now());
    let mut check = tokio::time::interval(Duration::from_secs(1));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Watching again: a broken watch is no longer the archive's problem (a store error stays
    // until a write succeeds).
    update(here.status, |s| {
        if s.last_error.starts_with("watch") {
            s.last_error.clear();
        }
    });
    let mut tick = tokio::time::interval(flush_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => flush(here, pos, pending).await,
            _ = check.tick() => {
                let now = std::time::Instant::now();
                if let Some(silent) = alive.stalled(now) {
                    return Followed::Broken(format!(
                        "stalled: no answer for {}s, {}s after a progress request",
                        silent.as_secs(),
                        STALLED_AFTER.as_secs()
                    ));
                }
                if alive.ask(now)
                    && let Err(e) = requests.request_progress().await
                {
                    return Followed::Broken(format!("progress request: {e}"));
                }
            }
            msg = stream.message() => {
                let resp = match msg {
                    Ok(Some(r)) => r,
                    Ok(None) => return Followed::Broken("the stream ended".into()),
                    Err(e) => return Followed::Broken(e.to_string()),
                };
                alive.heard(std::time::Instant::now());
                if resp.compact_revision() > 0 {
                    return Followed::Compacted(resp.compact_revision());
                }
                if resp.canceled() {
                    return Followed::Broken(format!("canceled: {}", resp.cancel_reason()));
                }
                let at_ms = k8s_openapi::jiff::Timestamp::now().as_millisecond();
                for e in resp.events() {
                    let Some(kv) = e.kv() else { continue };
                    let put = e.event_type() == EventType::Put;
                    pending.push(Event {
                        op: if put { Op::Put } else { Op::Delete },
                        key: kv.key().to_vec(),
                        value: if put { kv.value().to_vec() } else { vec![] },
                        revision: kv.mod_revision(),
                        create_revision: kv.create_revision(),
                        version: kv.version(),
                        lease: kv.lease(),
                        at_ms,
                    });
                    pos.next = pos.next.max(kv.mod_revision() + 1);
                }
            }
        }
    }
}

/// Writes what is pending as one segment; on failure keeps it for the next tick.
async fn flush(here: &Here<'_>, pos: &Position, pending: &mut Vec<Event>) {
    let Some(seg) = Segment::new(here.cluster_id, pos.base, pending.clone()) else { return };
    let key = layout::segment_key(here.prefix, seg.header.from, seg.header.to);
    let written = match object_store::path::Path::parse(&key) {
        Ok(path) => here.store.put(&path, PutPayload::from(seg.encode())).await.map_err(|e| store::why(&e)),
        Err(e) => Err(e.to_string()),
    };
    match written {
        Ok(_) => {
            eprintln!("durable up to revision {} ({} events in {key})", seg.header.to, seg.header.events);
            pending.clear();
            // The moment the newest durable change was received (whole seconds, rounded down):
            // every change received up to it is in the store, and a restore to it is accepted
            // (`point_in_time::lookup_time` goes by the segments' receipt times).
            let received = super::restorable::whole_seconds(seg.header.last_ms);
            update(here.status, |s| {
                s.durable_revision = seg.header.to;
                s.durable_time = Some(received);
                s.base_revision = pos.base;
                s.pending_events = 0;
                s.last_error.clear();
            });
        }
        Err(e) => {
            eprintln!("writing {key} failed ({e}); {} events kept for the next try", pending.len());
            update(here.status, |s| {
                s.pending_events = pending.len() as i64;
                s.last_error = format!("writing {key}: {e}");
            });
        }
    }
}

/// The etcd cluster ID (hex) the endpoints answer with.
async fn cluster_id(endpoints: &[String], dialer: &Dialer, creds: Option<&Credentials>) -> Result<String, PodError> {
    live_cluster(endpoints, dialer, creds).await.map(|(_, id)| id)
}

/// A client of the live cluster and its etcd cluster ID (hex), as the endpoints answer (also
/// the restore drill's).
pub(crate) async fn live_cluster(
    endpoints: &[String],
    dialer: &Dialer,
    creds: Option<&Credentials>,
) -> Result<(etcd_client::Client, String), PodError> {
    let (mut c, _) = connect(endpoints, dialer, creds).await.map_err(|e| format!("connect to {endpoints:?}: {e}"))?;
    let s = c.status().await.map_err(|e| format!("status of {endpoints:?}: {e}"))?;
    match s.header().map(|h| h.cluster_id()) {
        Some(id) if id != 0 => Ok((c, crate::naming::hex(id))),
        _ => Err("the cluster answered without a cluster ID".into()),
    }
}

/// After a restart: the chain continues after the last durable segment.
async fn resume(store: &dyn ObjectStore, prefix: &str) -> Result<Option<Position>, PodError> {
    let mut last: Option<(i64, i64, String)> = None;
    let mut list = store.list(Some(&object_store::path::Path::from(prefix.trim_end_matches('/'))));
    while let Some(item) = list.next().await {
        let key = item.map_err(|e| format!("list {prefix}: {}", store::why(&e)))?.location.to_string();
        if let Some((from, to)) = layout::parse_segment_key(prefix, &key)
            && last.as_ref().is_none_or(|l| (to, from) > (l.1, l.0))
        {
            last = Some((from, to, key));
        }
    }
    let Some((_, to, key)) = last else { return Ok(None) };
    let path = object_store::path::Path::parse(&key).map_err(|e| format!("{key}: {e}"))?;
    let bytes = store.get(&path).await.map_err(|e| format!("read {key}: {}", store::why(&e)))?.bytes().await;
    let bytes = bytes.map_err(|e| format!("read {key}: {}", store::why(&e)))?;
    let seg =
        Segment::decode(&bytes).map_err(|e| PodError::Refused(format!("the last segment {key} is damaged: {e}")))?;
    Ok(Some(Position { base: seg.header.base_revision, next: to + 1 }))
}

/// The revision of the newest periodic snapshot of `base_key` taken of `cluster_id`.
async fn newest_snapshot(store: &dyn ObjectStore, base_key: &str, cluster_id: &str) -> Result<Option<i64>, PodError> {
    let dir = base_key.rsplit_once('/').map(|(d, _)| object_store::path::Path::from(d));
    let mut best = None;
    let mut list = store.list(dir.as_ref());
    while let Some(item) = list.next().await {
        let key = item.map_err(|e| format!("list snapshots: {}", store::why(&e)))?.location.to_string();
        let Some((_, revision)) = location::parse_periodic(base_key, &key) else { continue };
        if best.is_some_and(|b| b >= revision) {
            continue;
        }
        if one_shot::read_sidecar(store, &key).await?.is_some_and(|m| m.cluster_id == cluster_id) {
            best = Some(revision);
        }
    }
    Ok(best)
}

fn snapshot_args(a: &ArchiveArgs) -> save::SaveArgs {
    save::SaveArgs {
        storage: a.storage.clone(),
        endpoints: a.endpoints.clone(),
        periodic: true,
        max_backups: 0,
        retention_secs: 0,
        timeout_secs: SNAPSHOT_TIMEOUT_SECS,
        owner_uid: a.owner_uid.clone(),
        tls: a.tls.clone(),
        auth: a.auth.clone(),
    }
}

#[cfg(test)]
mod liveness_tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_silent_watch_is_asked_once_and_stalled_only_if_it_then_says_nothing() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut l = Liveness::new(t0);
        assert!(!l.ask(at(9)), "not silent long enough");
        assert!(l.ask(at(10)));
        assert!(!l.ask(at(11)), "asked once until it answers");
        assert_eq!(l.stalled(at(39)), None);
        assert_eq!(l.stalled(at(40)), Some(Duration::from_secs(40)));
        // An answer (a progress response or events) resets it.
        let mut l = Liveness::new(t0);
        assert!(l.ask(at(10)));
        l.heard(at(12));
        assert_eq!(l.stalled(at(45)), None);
        assert!(l.ask(at(22)), "silent again: asked again");
    }
}

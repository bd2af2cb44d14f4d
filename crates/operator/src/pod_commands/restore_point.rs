//! `etcd-operator restore-point`: the verify pod of a point-in-time restore (issue 29). From a
//! snapshot series and its continuous archive it makes the snapshot of one point in history:
//!
//! 1. list the series' snapshots (with their sidecars) and segment headers, work out what is
//!    restorable per etcd cluster (`archive::restorable_ranges`), and resolve the target (a
//!    moment becomes the last revision received at or before it) — a target no range covers is
//!    refused with the ranges that exist;
//! 2. fetch the newest snapshot at or before it (checked against its sidecar's sha256) and every
//!    segment to replay (each checked against its own sha256: one flipped byte refuses the
//!    restore, naming the segment);
//! 3. restore the snapshot into a one-member etcd on the pod's scratch volume (the etcd and
//!    `etcdutl`/`etcdctl` of the version the cluster will run, copied there by an init container
//!    from the etcd image), start it on loopback, and apply the archived changes one transaction
//!    per revision: etcd must answer each with exactly the archived revision, so the replayed
//!    history is the archived one, revision for revision;
//! 4. stream a snapshot of the result to `--output-key` with its sidecar (`backup-save`'s path:
//!    etcd's integrity hash checked, sha256 recorded); the cluster's members restore that.
//!
//! Leases are not replayed: a key the archive shows attached to a lease is written without one
//! (lease grants and expiries are not in the watch history). Users, roles and the auth switch
//! come from the snapshot: a snapshot with authentication on is replayed logged in as root with
//! the mounted login Secret (`--auth-dir`: the restored cluster's root Secret), whose password
//! must be the one the snapshot holds.

use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Client, Txn, TxnOp};
use object_store::{ObjectStore, ObjectStoreExt};

use crate::auth::Credentials;
use crate::backup::archive::point_in_time::{self, Plan, Refusal, Target, TimeLookup};
use crate::backup::archive::restorable_ranges::{self, SegmentRef, SnapshotRef};
use crate::backup::archive::segment::{Event, Op, Segment};
use crate::backup::contract::{AuthArgs, PodError, SNAPSHOT_FILE, StorageArgs};
use crate::backup::location::{self, BackupMeta, Location};
use crate::backup::pod_secrets;
use crate::backup::{fetch, one_shot, save, series, store};
use crate::tls::connector::Dialer;
use crate::version::Version;

#[derive(clap::Args, Debug, Clone)]
pub struct RestorePointArgs {
    /// The snapshot series (`--key` is its base key, the EtcdBackup's path).
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Restore the state right after this revision.
    #[arg(long, conflicts_with = "time_ms", required_unless_present = "time_ms")]
    pub revision: Option<i64>,
    /// Restore the state at this moment (Unix milliseconds).
    #[arg(long)]
    pub time_ms: Option<i64>,
    /// The etcd cluster (hex ID) whose history to restore; default: the only one covering it.
    #[arg(long)]
    pub cluster_id: Option<String>,
    /// Where the replayed snapshot goes (same bucket or volume as the series).
    #[arg(long)]
    pub output_key: String,
    /// UID of the EtcdRestore (recorded in the output's sidecar).
    #[arg(long, default_value = "")]
    pub owner_uid: String,
    /// The etcd version of the tools in `--work-dir` (the replay refuses a snapshot it may not
    /// read: older than the previous minor version).
    #[arg(long)]
    pub etcd_version: String,
    /// Scratch directory holding `etcd` and `etcdutl` (or `etcdctl` before 3.5).
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The root login of a snapshot with authentication on.
    #[command(flatten)]
    pub auth: AuthArgs,
}

/// The loopback ports of the replay's etcd.
const CLIENT_URL: &str = "http://127.0.0.1:22379";
const PEER_URL: &str = "http://127.0.0.1:22380";
const STARTUP: Duration = Duration::from_secs(60);
/// The replay etcd's space quota: well above the 2 GiB default, so history replays that a
/// cluster with a raised quota made are not refused with NOSPACE.
const QUOTA_BYTES: u64 = 8 << 30;
const MAX_TXN_OPS: u64 = 1_000_000;
const MAX_REQUEST_BYTES: u64 = 256 << 20;

/// A snapshot as listed: its reference for the ranges, and its sidecar.
pub(crate) struct Listed {
    pub snapshots: Vec<(SnapshotRef, BackupMeta)>,
    pub segments: Vec<SegmentRef>,
}

pub async fn run(args: RestorePointArgs) -> Result<BackupMeta, PodError> {
    let base = args.storage.location()?;
    let (store, _) = store::open(&base, &args.storage.credentials_dir, &args.storage.s3())?;
    let listed = list(&*store, &base.key).await?;
    let creds = pod_secrets::login(&args.auth)?;
    let target = match (args.revision, args.time_ms) {
        (Some(r), _) => Target::Revision(r),
        (None, Some(ms)) => Target::Time(ms),
        (None, None) => return Err(PodError::Refused("give --revision or --time-ms".into())),
    };
    let mut replayed = replay_point(Replay {
        store: &*store,
        base: &base,
        listed: &listed,
        target,
        cluster_id: args.cluster_id.as_deref(),
        etcd_version: &args.etcd_version,
        work_dir: &args.work_dir,
        snapshot_past_target_ok: false,
        creds: creds.as_ref(),
    })
    .await?;
    // The replayed state, snapshotted the way every backup is.
    let mut out = args.storage.clone();
    out.key = args.output_key.clone();
    let saved = save::run(save::SaveArgs {
        storage: out,
        endpoints: vec![CLIENT_URL.to_string()],
        periodic: false,
        max_backups: 0,
        retention_secs: 0,
        timeout_secs: 1800,
        owner_uid: args.owner_uid.clone(),
        tls: Default::default(),
        auth: args.auth.clone(),
    })
    .await;
    // Nothing changed while the snapshot streamed (the sidecar's revision is read before it):
    // revisions only grow, so the same revision after it proves the snapshot is the target.
    let after = revision_of(&mut replayed.client).await;
    let want = replayed.plan.revision;
    replayed.stop().await;
    let report = saved?;
    let after = after?;
    if report.backup.etcd_revision != want || after != want {
        return Err(format!(
            "the replayed snapshot is at revision {} (etcd {after} after it), the restore asked for {want}",
            report.backup.etcd_revision
        )
        .into());
    }
    Ok(report.backup)
}

/// What to replay, and where.
pub(crate) struct Replay<'a> {
    pub store: &'a dyn ObjectStore,
    /// The series (its base key).
    pub base: &'a Location,
    pub listed: &'a Listed,
    pub target: Target,
    /// The etcd cluster (hex ID) whose history to replay; None: the only one covering the target.
    pub cluster_id: Option<&'a str>,
    /// The version of the etcd tools in `work_dir`.
    pub etcd_version: &'a str,
    /// Scratch directory holding `etcd` and `etcdutl` (or `etcdctl` before 3.5).
    pub work_dir: &'a Path,
    /// A snapshot that already holds the target or more, with nothing to replay after it, is
    /// taken as it is (`Replayed::revision` says where it stands): a drill compares whatever
    /// revision the restore reaches. A restore to a point refuses it (it would overshoot).
    pub snapshot_past_target_ok: bool,
    /// The login into the replay's etcd when the snapshot has authentication on (none: as
    /// nobody, which such a snapshot refuses).
    pub creds: Option<&'a Credentials>,
}

/// A throw-away one-member etcd on loopback holding a restored point; [`Replayed::stop`] ends it.
pub(crate) struct Replayed {
    pub plan: Plan,
    /// The sidecar of the snapshot the replay started from.
    pub snapshot: BackupMeta,
    /// The revision the replay's etcd holds (the plan's, but for `snapshot_past_target_ok`).
    pub revision: i64,
    /// A client of the replay's etcd.
    pub client: Client,
    etcd: tokio::process::Child,
    keeping: tokio::task::JoinHandle<()>,
}

impl Replayed {
    pub(crate) async fn stop(mut self) {
        self.keeping.abort();
        let _ = self.etcd.start_kill();
        let _ = self.etcd.wait().await;
    }
}

/// Steps 1 to 3: the plan, every object fetched and checked, the snapshot restored into a
/// one-member etcd on loopback and the archive replayed into it, revision for revision. Reads
/// the store, never writes it.
pub(crate) async fn replay_point(r: Replay<'_>) -> Result<Replayed, PodError> {
    let (cluster_id, plan) = choose(r.store, r.listed, r.target, r.cluster_id).await?;
    let (snapshot, meta) = r
        .listed
        .snapshots
        .iter()
        .find(|(s, _)| s.key == plan.snapshot.key)
        .ok_or_else(|| format!("snapshot {} vanished from the listing", plan.snapshot.key))?;
    eprintln!(
        "restoring cluster {cluster_id} to revision {}: snapshot {} (revision {}), {} segments",
        plan.revision,
        snapshot.key,
        snapshot.revision,
        plan.segments.len()
    );
    let tools = Version::parse(r.etcd_version).map_err(|e| format!("--etcd-version: {e}"))?;
    if let Ok(taken) = Version::parse(&meta.etcd_version) {
        crate::version::check_change(&taken, &tools).map_err(|e| {
            PodError::Refused(format!(
                "the snapshot {} was taken by etcd {taken}; replaying it with etcd {tools} is refused ({e}): set etcdCluster.spec.version",
                snapshot.key
            ))
        })?;
    }
    let events = read_segments(r.store, &plan, &cluster_id).await?;
    let work = r.work_dir;
    let file = work.join(SNAPSHOT_FILE);
    fetch::download_checked(r.store, &r.base.with_key(snapshot.key.clone()), &meta.sha256, &file).await?;
    let data = work.join("replay");
    restore_snapshot(work, &tools, &file, &data).await?;
    let mut etcd = start_etcd(work, &data, &tools)?;
    let mut client = match connect(r.creds).await {
        Ok(c) => c,
        Err(e) => {
            let _ = etcd.start_kill();
            return Err(e);
        }
    };
    // The snapshot's leases run in the replay's etcd too: kept alive until it is stopped, so
    // that none expires and deletes keys in between.
    let keeping = match keep_leases_alive(&mut client).await {
        Ok(k) => k,
        Err(e) => {
            let _ = etcd.start_kill();
            return Err(e);
        }
    };
    let mut replayed = Replayed { plan, snapshot: meta.clone(), revision: 0, client, etcd, keeping };
    let (from, to) = (snapshot.revision, replayed.plan.revision);
    match replay(&mut replayed.client, &events, from, to, r.snapshot_past_target_ok).await {
        Ok(reached) => {
            replayed.revision = reached;
            Ok(replayed)
        }
        Err(e) => {
            replayed.stop().await;
            Err(e)
        }
    }
}

/// Every snapshot of the series with a sidecar, and every segment header under the series'
/// archive, of any cluster (`series`: one listing, each header read from its first line).
pub(crate) async fn list(store: &dyn ObjectStore, base_key: &str) -> Result<Listed, PodError> {
    let keys = series::list_keys(store, base_key).await?;
    let mut listed = Listed { snapshots: vec![], segments: vec![] };
    for key in &keys {
        if key == base_key || location::parse_periodic(base_key, key).is_some() {
            let Some(meta) = one_shot::read_sidecar(store, key).await? else { continue };
            let taken_ms = meta.time.parse::<k8s_openapi::jiff::Timestamp>().map(|t| t.as_millisecond()).unwrap_or(0);
            let snap = SnapshotRef {
                key: key.clone(),
                cluster_id: meta.cluster_id.clone(),
                revision: meta.etcd_revision,
                taken_ms,
            };
            listed.snapshots.push((snap, meta));
        }
    }
    for s in series::segments_by_key(base_key, &keys) {
        let header = series::read_header(store, &s.key).await.map_err(|e| match e {
            PodError::Refused(why) => PodError::Refused(format!("{why}; nothing restored")),
            other => other,
        })?;
        listed.segments.push(SegmentRef { key: s.key, header });
    }
    Ok(listed)
}

async fn get(store: &dyn ObjectStore, key: &str) -> Result<Vec<u8>, PodError> {
    let path = object_store::path::Path::parse(key).map_err(|e| format!("{key}: {e}"))?;
    let got = store.get(&path).await.map_err(|e| format!("read {key}: {}", store::why(&e)))?;
    Ok(got.bytes().await.map_err(|e| format!("read {key}: {}", store::why(&e)))?.to_vec())
}

/// The cluster whose history covers the target, and the plan to reach it; a refusal names what
/// every cluster of the series can restore.
async fn choose(
    store: &dyn ObjectStore,
    listed: &Listed,
    target: Target,
    only: Option<&str>,
) -> Result<(String, Plan), PodError> {
    let mut clusters: Vec<&str> = listed.snapshots.iter().map(|(s, _)| s.cluster_id.as_str()).collect();
    clusters.sort();
    clusters.dedup();
    clusters.retain(|c| !c.is_empty() && only.is_none_or(|o| o.eq_ignore_ascii_case(c)));
    if clusters.is_empty() {
        return Err(PodError::Refused(match only {
            Some(c) => format!("the series holds no snapshot of etcd cluster {c}: nothing to restore"),
            None => "the series holds no snapshot with a recorded cluster ID: nothing to restore".into(),
        }));
    }
    let snaps: Vec<SnapshotRef> = listed.snapshots.iter().map(|(s, _)| s.clone()).collect();
    let mut found = Vec::new();
    let mut refusals = Vec::new();
    for c in clusters {
        let ranges = restorable_ranges::ranges(c, &snaps, &listed.segments);
        match plan_for(store, &ranges, target).await? {
            Ok(p) => found.push((c.to_string(), p)),
            Err(r) => refusals.push((c, r)),
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 if refusals.len() == 1 => Err(PodError::Refused(refusals[0].1.to_string())),
        0 => Err(PodError::Refused(
            refusals.iter().map(|(c, r)| format!("etcd cluster {c}: {r}")).collect::<Vec<_>>().join("; "),
        )),
        _ => Err(PodError::Refused(format!(
            "the archives of etcd clusters {} all cover it: set pointInTime.clusterId",
            found.iter().map(|(c, _)| c.as_str()).collect::<Vec<_>>().join(" and ")
        ))),
    }
}

/// The plan for `target` within one cluster's ranges (a moment read off a segment when the
/// listing alone cannot tell).
async fn plan_for(
    store: &dyn ObjectStore,
    ranges: &[restorable_ranges::Range],
    target: Target,
) -> Result<Result<Plan, Refusal>, PodError> {
    let revision = match target {
        Target::Revision(r) => r,
        Target::Time(ms) => match point_in_time::lookup_time(ranges, ms) {
            Err(r) => return Ok(Err(r)),
            Ok(TimeLookup::Revision(r)) => r,
            Ok(TimeLookup::ReadSegment { segment, reached }) => {
                let seg = decode(&segment.key, &get(store, &segment.key).await?)?;
                point_in_time::revision_at(&seg.events, reached, ms)
            }
        },
    };
    Ok(point_in_time::plan(ranges, revision))
}

fn decode(key: &str, bytes: &[u8]) -> Result<Segment, PodError> {
    Segment::decode(bytes).map_err(|e| PodError::Refused(format!("segment {key} is damaged: {e}; nothing restored")))
}

/// The events of the plan's segments after the snapshot, each revision once (segments written
/// twice after an archiver restart overlap), every segment checked against its checksum.
async fn read_segments(store: &dyn ObjectStore, plan: &Plan, cluster_id: &str) -> Result<Vec<Event>, PodError> {
    let mut events = Vec::new();
    let mut reached = plan.snapshot.revision;
    for s in &plan.segments {
        let seg = decode(&s.key, &get(store, &s.key).await?)?;
        if seg.header.cluster_id != cluster_id {
            return Err(PodError::Refused(format!(
                "segment {} belongs to etcd cluster {}, not {cluster_id}",
                s.key, seg.header.cluster_id
            )));
        }
        let last = seg.events.iter().map(|e| e.revision).max().unwrap_or(reached);
        events.extend(seg.events.into_iter().filter(|e| e.revision > reached && e.revision <= plan.revision));
        reached = reached.max(last);
    }
    Ok(events)
}

/// `etcdutl snapshot restore` (or `etcdctl` before 3.5) of `file` into `data`: a one-member
/// cluster on loopback.
async fn restore_snapshot(
    work: &std::path::Path,
    tools: &Version,
    file: &std::path::Path,
    data: &std::path::Path,
) -> Result<(), PodError> {
    let _ = std::fs::remove_dir_all(data);
    let (tool, api) = if tools.minor_line() >= (3, 5) { ("etcdutl", None) } else { ("etcdctl", Some("3")) };
    let mut cmd = tokio::process::Command::new(work.join(tool));
    cmd.arg("snapshot")
        .arg("restore")
        .arg(file)
        .arg(format!("--data-dir={}", data.display()))
        .arg("--name=replay")
        .arg(format!("--initial-cluster=replay={PEER_URL}"))
        .arg(format!("--initial-advertise-peer-urls={PEER_URL}"));
    if let Some(v) = api {
        cmd.env("ETCDCTL_API", v);
    }
    let out = cmd.output().await.map_err(|e| format!("run {tool}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{tool} snapshot restore failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(())
}

fn start_etcd(
    work: &std::path::Path,
    data: &std::path::Path,
    tools: &Version,
) -> Result<tokio::process::Child, PodError> {
    let mut etcd = tokio::process::Command::new(work.join("etcd"));
    // A throw-away etcd whose result is snapshotted and checked at the end (and whose pod starts
    // over from the store if it dies): an fsync per replayed revision buys nothing and bounded
    // the replay at the disk's sync rate. etcd 3.5 and later.
    if tools.minor_line() >= (3, 5) {
        etcd.arg("--unsafe-no-fsync");
    }
    etcd.arg("--name=replay")
        .arg(format!("--data-dir={}", data.display()))
        .arg(format!("--listen-client-urls={CLIENT_URL}"))
        .arg(format!("--advertise-client-urls={CLIENT_URL}"))
        .arg(format!("--listen-peer-urls={PEER_URL}"))
        .arg(format!("--initial-advertise-peer-urls={PEER_URL}"))
        .arg(format!("--initial-cluster=replay={PEER_URL}"))
        .arg(format!("--quota-backend-bytes={QUOTA_BYTES}"))
        // One archived revision is one transaction, however many keys it touched (a `del
        // --prefix`, a lease revoked): etcd's defaults (128 operations, 1.5 MiB) must not refuse it.
        .arg(format!("--max-txn-ops={MAX_TXN_OPS}"))
        .arg(format!("--max-request-bytes={MAX_REQUEST_BYTES}"))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start the replay's etcd: {e}").into())
}

/// A client of the replay's etcd once it answers, logged in as `creds` when its snapshot has
/// authentication on. A refused login or a missing one is refused at once, not waited out.
async fn connect(creds: Option<&Credentials>) -> Result<Client, PodError> {
    let started = std::time::Instant::now();
    let timeout = Duration::from_secs(2);
    let dialer = Dialer::new(etcd_client::ConnectOptions::new().with_connect_timeout(timeout), None, timeout, None);
    loop {
        let tried = match crate::auth::connect::connect(&[CLIENT_URL.to_string()], &dialer, creds).await {
            Ok((mut c, _)) => c.status().await.map(|_| c),
            Err(e) => Err(e),
        };
        match tried {
            Ok(c) => return Ok(c),
            Err(e) if crate::auth::connect::is_auth_refusal(&e.to_string()) => {
                return Err(refused_login(creds, format!("the replay's etcd: {e}")));
            }
            Err(e) if started.elapsed() > STARTUP => {
                return Err(format!("the replay's etcd did not answer within {STARTUP:?}: {e}").into());
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// etcd refused the replay for want of a (valid) login: the snapshot has authentication on.
fn refused_login(creds: Option<&Credentials>, why: String) -> PodError {
    PodError::Refused(match creds {
        None => format!(
            "the snapshot has etcd authentication enabled and the restore has no root login: give the restored cluster spec.auth with a rootSecret holding the snapshot's root password ({why}); nothing restored"
        ),
        Some(c) => format!(
            "the snapshot has etcd authentication enabled and refused the login of user {} from the mounted Secret: its password must be the snapshot's root password ({why}); nothing restored",
            c.user
        ),
    })
}

/// Keeps every lease of the replay's etcd alive (a task, until aborted).
async fn keep_leases_alive(client: &mut Client) -> Result<tokio::task::JoinHandle<()>, PodError> {
    let leases = client.leases().await.map_err(|e| refused_if_auth(format!("list the snapshot's leases: {e}")))?;
    let mut keepers = Vec::new();
    for l in leases.leases() {
        let kept = client.lease_keep_alive(l.id()).await.map_err(|e| format!("keep lease {:x} alive: {e}", l.id()))?;
        keepers.push(kept);
    }
    Ok(tokio::spawn(async move {
        loop {
            for (keeper, stream) in &mut keepers {
                if keeper.keep_alive().await.is_ok() {
                    let _ = stream.message().await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }))
}

/// What no retry changes is refused for good: a snapshot with authentication on that refuses
/// the replay's login or its rights (the login must be the snapshot's root), or a revision etcd
/// will not take as one transaction even with the replay's raised limits.
fn refused_if_auth(why: String) -> PodError {
    if crate::auth::connect::is_auth_refusal(&why) {
        PodError::Refused(format!(
            "the snapshot has etcd authentication enabled and refused the replay ({why}): the login must be the snapshot's root user with its password; nothing restored"
        ))
    } else if why.contains("too many operations in txn") || why.contains("request is too large") {
        PodError::Refused(format!("{why}: the archived revision is larger than the replay may apply; nothing restored"))
    } else {
        why.into()
    }
}

/// Apply `events` (after the snapshot's revision, up to `to`) one transaction per revision,
/// checking that etcd lands on each archived revision. The snapshot may be a little past the
/// revision its sidecar records (`backup-save` reads it before streaming): the archive starts
/// after the sidecar's, so it holds what comes after either.
async fn replay(client: &mut Client, events: &[Event], from: i64, to: i64, past_ok: bool) -> Result<i64, PodError> {
    let start = revision_of(client).await?;
    if start >= to && past_ok && start >= from {
        eprintln!("the snapshot holds revision {start} (its sidecar records {from}): nothing to replay up to {to}");
        return Ok(start);
    }
    if start < from {
        return Err(PodError::Refused(format!(
            "the snapshot restores revision {start}, before the {from} its sidecar records: nothing restored"
        )));
    }
    if start > to {
        return Err(PodError::Refused(format!(
            "the snapshot holds revision {start} (its sidecar records {from}), past the target {to}: restore a later point, or one from an earlier snapshot"
        )));
    }
    let batches = point_in_time::transactions(events, start, to);
    let mut reached = start;
    for batch in &batches {
        let want = batch[0].revision;
        if want != reached + 1 {
            return Err(PodError::Refused(format!(
                "the archive has no change at revision {} (the next is {want}): a lost event; nothing restored",
                reached + 1
            )));
        }
        let ops: Vec<TxnOp> = batch
            .iter()
            .map(|e| match e.op {
                Op::Put => TxnOp::put(e.key.clone(), e.value.clone(), None),
                Op::Delete => TxnOp::delete(e.key.clone(), None),
            })
            .collect();
        let resp = client
            .txn(Txn::new().and_then(ops))
            .await
            .map_err(|e| refused_if_auth(format!("replay revision {want}: {e}")))?;
        let got = resp.header().map(|h| h.revision()).unwrap_or_default();
        if got != want {
            return Err(format!(
                "replaying revision {want} made revision {got}: the replay diverged; nothing restored"
            )
            .into());
        }
        reached = want;
    }
    if reached != to {
        return Err(format!("the archive ends at revision {reached}, before {to}: nothing restored").into());
    }
    eprintln!("replayed {} revisions ({}..={to})", batches.len(), start + 1);
    Ok(to)
}

pub(crate) async fn revision_of(client: &mut Client) -> Result<i64, PodError> {
    let s = client.status().await.map_err(|e| refused_if_auth(format!("status of the replay's etcd: {e}")))?;
    Ok(s.header().map(|h| h.revision()).unwrap_or_default())
}

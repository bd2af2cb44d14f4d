//! `etcd-operator backup-save`: what a backup pod runs. Finds the member with the highest
//! revision, streams its snapshot to the destination while hashing it (memory stays at a few
//! multipart chunks whatever the database size), checks etcd's own integrity hash at the end of
//! the stream, writes the checksum sidecar, and only then applies retention. The result goes to
//! the pod's termination message for the operator to read.

use std::time::{Duration, Instant};

use etcd_client::ConnectOptions;
use object_store::{ObjectStoreExt, WriteMultipart};
use sha2::{Digest, Sha256};

use super::contract::{HISTORY_LIMIT, PodError, SaveReport, StorageArgs};
use super::location::{self, BackupMeta};
use super::one_shot;
use super::pod_secrets;
use super::series;
use super::store;
use crate::auth::Credentials;
use crate::auth::connect::connect;
use crate::tls::connector::Dialer;
use crate::tls::material::ClientTls;

#[derive(clap::Args, Debug, Clone)]
pub struct SaveArgs {
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Client URLs of the cluster (comma-separated); the member list comes from them.
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// Periodic: name the object `<key>_v<revision>_<time>` and apply retention.
    #[arg(long)]
    pub periodic: bool,
    /// Periodic backups to keep (0: all).
    #[arg(long, default_value_t = 0)]
    pub max_backups: i32,
    /// Keep every moment of this many seconds restorable (`backupPolicy.retention`; 0: no
    /// window). With `--max-backups` too, a backup goes only when both let it.
    #[arg(long, default_value_t = 0)]
    pub retention_secs: u64,
    /// Give up after this long.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// UID of the EtcdBackup: recorded in the sidecar; retention deletes only backups whose
    /// sidecar names it.
    #[arg(long, default_value = "")]
    pub owner_uid: String,
    #[command(flatten)]
    pub tls: super::contract::ClientTlsArgs,
    #[command(flatten)]
    pub auth: super::contract::AuthArgs,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Size of one multipart part. Larger parts mean fewer requests (S3 allows 10,000 parts, so
/// 16 MiB parts reach 156 GiB, far beyond etcd's 8 GiB database limit).
const PART_SIZE: usize = 16 << 20;
/// Parts in flight: memory is bounded by about this many parts (64 MiB).
const UPLOAD_CONCURRENCY: usize = 4;

/// A backup pod's one run. Every failure is transient (the next attempt may succeed): a backup
/// is never refused.
pub async fn run(args: SaveArgs) -> Result<SaveReport, PodError> {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    match tokio::time::timeout(timeout, save(&args)).await {
        Ok(r) => r,
        Err(_) => {
            Err(format!("backup did not finish within {}s (backupPolicy.timeoutInSecond)", args.timeout_secs).into())
        }
    }
}

/// The member a snapshot is taken from.
struct Picked {
    name: String,
    url: String,
    revision: i64,
    version: String,
    /// The etcd cluster ID its status answered with, hex: the backup's identity.
    cluster_id: String,
}

/// The voting member with the highest revision (a follower when tied with the leader: the
/// snapshot's disk and network load then stays off the leader). With credentials every client
/// logs in (`auth::connect`: none while etcd's authentication is off).
async fn pick_member(
    endpoints: &[String],
    tls: Option<&ClientTls>,
    creds: Option<&Credentials>,
) -> Result<Picked, PodError> {
    let o = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT).with_timeout(CONNECT_TIMEOUT);
    let dialer = Dialer::new(o, tls, CONNECT_TIMEOUT, Some(CONNECT_TIMEOUT));
    let (mut c, _) = connect(endpoints, &dialer, creds).await.map_err(|e| format!("connect to {endpoints:?}: {e}"))?;
    let members = c.member_list().await.map_err(|e| format!("member list: {e}"))?;
    let mut best: Option<(i64, bool, String, String, String, u64)> = None;
    let mut errors = Vec::new();
    for m in members.members().iter().filter(|m| !m.is_learner()) {
        let Some(url) = m.client_urls().first() else { continue };
        let status = async {
            let (mut one, _) = connect(std::slice::from_ref(url), &dialer, creds).await?;
            one.status().await
        };
        match status.await {
            Ok(s) => {
                let rev = s.header().map(|h| h.revision()).unwrap_or_default();
                let cluster_id = s.header().map(|h| h.cluster_id()).unwrap_or_default();
                let follower = s.leader() != m.id();
                let cand = (rev, follower, m.name().to_string(), url.clone(), s.version().to_string(), cluster_id);
                if best.as_ref().is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                    best = Some(cand);
                }
            }
            Err(e) => errors.push(format!("{}: {e}", m.name())),
        }
    }
    let (revision, _, name, url, version, id) =
        best.ok_or_else(|| format!("no voting member answered its status: {}", errors.join("; ")))?;
    let cluster_id = if id == 0 { String::new() } else { crate::naming::hex(id) };
    Ok(Picked { name, url, revision, version, cluster_id })
}

async fn save(args: &SaveArgs) -> Result<SaveReport, PodError> {
    let base = args.storage.location()?;
    // On a volume: may this user write there at all? Said before anything is written.
    let uid = match base.kind {
        location::Kind::Pvc => {
            let who = crate::pod::member_volume::FsIdentity::of_this_process()?;
            super::volume_access::check_write(std::path::Path::new(store::PVC_MOUNT), &base.key, !args.periodic, &who)?;
            Some(who.uid)
        }
        _ => None,
    };
    let (store, _) = store::open(&base, &args.storage.credentials_dir, &args.storage.s3())?;
    let mut warnings = Vec::new();
    // A one-shot backup replaces the one at its key: what is there now (`one_shot`).
    let before = if args.periodic { one_shot::Before::Nothing } else { one_shot::before(&*store, &base.key).await? };
    if before == one_shot::Before::PreviousKept {
        warnings.push(format!(
            "{} was left incomplete by an earlier run; the backup before it, kept at {}, stays until this one is complete",
            base.url(),
            location::previous_key(&base.key)
        ));
    }
    let tls = pod_secrets::client_tls(&args.tls)?;
    let creds = pod_secrets::login(&args.auth)?;
    let Picked { name: member, url, revision, version, cluster_id } =
        pick_member(&args.endpoints, tls.as_ref(), creds.as_ref()).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let key = if args.periodic { location::periodic_key(&base.key, revision, now) } else { base.key.clone() };
    let loc = base.with_key(key.clone());
    let path = object_store::path::Path::parse(&key).map_err(|e| format!("object key {key:?}: {e}"))?;
    eprintln!(
        "snapshot of member {member} ({url}, cluster {cluster_id}, revision {revision}, etcd {version}) to {}",
        loc.url()
    );

    // The complete backup at the key is copied aside while the snapshot streams.
    let keeping = (before == one_shot::Before::Complete).then(|| {
        let (store, key) = (store.clone(), key.clone());
        tokio::spawn(async move { one_shot::keep_previous(&*store, &key).await })
    });
    let opts = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT);
    let dialer = Dialer::new(opts, tls.as_ref(), CONNECT_TIMEOUT, None);
    let (mut client, _) = connect(std::slice::from_ref(&url), &dialer, creds.as_ref())
        .await
        .map_err(|e| format!("connect to {member}: {e}"))?;
    let mut stream = client.snapshot().await.map_err(|e| format!("snapshot from {member}: {e}"))?;
    let upload =
        store.put_multipart(&path).await.map_err(|e| format!("start upload to {}: {}", loc.url(), store::why(&e)))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let mut hashes = StreamHashes::default();
    let started = Instant::now();
    let streamed: Result<(), PodError> = async {
        while let Some(msg) = stream.message().await.map_err(|e| format!("snapshot stream from {member}: {e}"))? {
            writer
                .wait_for_capacity(UPLOAD_CONCURRENCY)
                .await
                .map_err(|e| format!("upload to {}: {}", loc.url(), store::why(&e)))?;
            hashes.update(msg.blob());
            writer.write(msg.blob());
        }
        hashes.check_etcd_integrity()?;
        // The key changes when the upload completes: only once the previous backup is aside.
        if let Some(keeping) = keeping {
            keeping
                .await
                .map_err(|e| format!("keeping the previous backup aside: {e}"))?
                .map_err(|e| format!("keeping the previous backup aside: {e}; {} is left as it was", loc.url()))?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = streamed {
        // Nothing partial is left behind: an aborted multipart upload leaves no object.
        let _ = writer.abort().await;
        return Err(e);
    }
    writer.finish().await.map_err(|e| format!("complete upload to {}: {}", loc.url(), store::why(&e)))?;
    let transfer_seconds = started.elapsed().as_secs_f64();
    one_shot::pause_if_armed().await;

    let meta = BackupMeta {
        path: loc.url(),
        sha256: hashes.whole_sha256(),
        size: hashes.size as i64,
        etcd_version: version,
        etcd_revision: revision,
        member,
        time: super::rfc3339(now),
        owner: args.owner_uid.clone(),
        cluster_id,
        object_etag: one_shot::etag(&*store, &key).await.ok().flatten().unwrap_or_default(),
    };
    // Without its sidecar no restore accepts the object. It is left in place (a person can still
    // recover it by hand); for a one-shot backup the previous one is kept aside, complete.
    one_shot::write_sidecar(&*store, &key, &meta).await.map_err(|e| {
        let kept = if args.periodic {
            String::new()
        } else {
            format!(" (the previous backup is kept at {} with its sidecar)", location::previous_key(&key))
        };
        format!("{e}; the backup object {key} is left in place but no restore will accept it without its sidecar{kept}")
    })?;
    one_shot::pause_if_armed().await;
    if !args.periodic
        && before != one_shot::Before::Nothing
        && let Err(e) = one_shot::drop_previous(&*store, &key).await
    {
        warnings.push(format!("the previous backup kept aside could not be deleted: {e}"));
    }

    let mut report = SaveReport { backup: meta.clone(), transfer_seconds, warnings, uid, ..Default::default() };
    if args.periodic {
        retention(&*store, args, &base, &key, &meta, &mut report).await;
    } else {
        report.kept.push(meta);
    }
    Ok(report)
}

/// Retention and the history of kept backups, after a complete periodic backup and its sidecar
/// exist: `maxBackups` and the window (`archive::retention::plan`: a snapshot goes only when
/// every rule configured lets it, never one a kept segment needs; segments before the oldest
/// kept snapshot go with them). Only backups whose sidecar names this EtcdBackup and the etcd
/// cluster just backed up are deleted; this EtcdBackup's backups of other clusters are reported
/// as kept. Then what the series can restore, for status. Listing or deleting may fail (a
/// write-only credential, a transient error): the backup itself succeeded, so that is a warning
/// in the report, never a failed backup.
async fn retention(
    store: &dyn object_store::ObjectStore,
    args: &SaveArgs,
    loc: &location::Location,
    key: &str,
    meta: &BackupMeta,
    report: &mut SaveReport,
) {
    use super::archive::restorable_ranges::SnapshotRef;
    use super::archive::retention;
    let base = loc.key.as_str();
    let (listed, modified_ms) = match series::list_objects(store, base).await {
        Err(e) => {
            report.warnings.push(format!("retention skipped: {e}"));
            (None, std::collections::BTreeMap::new())
        }
        Ok(objects) => {
            let modified: std::collections::BTreeMap<String, i64> = objects.iter().cloned().collect();
            (Some(objects.into_iter().map(|(k, _)| k).collect::<Vec<String>>()), modified)
        }
    };
    let series: Vec<String> = match &listed {
        Some(keys) => keys.iter().filter(|k| location::parse_periodic(base, k).is_some()).cloned().collect(),
        None => vec![key.to_string()],
    };
    let mut sidecars = std::collections::BTreeMap::new();
    // A sidecar that cannot be read hides its snapshot from the plan, which would then take the
    // oldest kept snapshot to be a later one and delete segments the hidden one still needs:
    // nothing is deleted this time (as for a failed listing).
    let mut unreadable: Vec<String> = Vec::new();
    for k in series.iter().filter(|k| k.as_str() != key) {
        match one_shot::read_sidecar(store, k).await {
            Ok(Some(m)) => {
                sidecars.insert(k.clone(), m);
            }
            Ok(None) => {}
            Err(e) => unreadable.push(e.to_string()),
        }
    }
    let origins: std::collections::BTreeMap<String, location::Origin> =
        sidecars.iter().map(|(k, m)| (k.clone(), location::Origin::of(m))).collect();
    let mine = location::Origin::of(meta);
    let rules = args.max_backups > 0 || args.retention_secs > 0;
    if !mine.known() && rules {
        report.warnings.push("retention skipped: the etcd cluster ID of this backup is not known".into());
    }
    if !unreadable.is_empty() && rules {
        report.warnings.push(format!("retention skipped: {}", unreadable.join("; ")));
    }
    let snapshots: Vec<SnapshotRef> = sidecars
        .iter()
        .chain(std::iter::once((&key.to_string(), meta)))
        .map(|(k, m)| SnapshotRef {
            key: k.clone(),
            cluster_id: m.cluster_id.clone(),
            revision: m.etcd_revision,
            taken_ms: m.time.parse::<k8s_openapi::jiff::Timestamp>().map(|t| t.as_millisecond()).unwrap_or(0),
        })
        .collect();
    let segments = listed.as_deref().map(|keys| series::segments_by_key(base, keys)).unwrap_or_default();
    let mine_keys: std::collections::BTreeSet<String> = origins
        .iter()
        .filter(|(_, o)| **o == mine)
        .map(|(k, _)| k.clone())
        .chain(std::iter::once(key.to_string()))
        .collect();
    let by_count =
        (args.max_backups > 0).then(|| location::to_delete(base, &series, args.max_backups, key, &mine, &origins));
    // The window on the store's clock (`retention::on_store_clock`), not this pod's. Without a
    // window times play no part (`maxBackups` goes by the keys' names): nothing to wait for.
    let on_store_clock = if args.retention_secs > 0 {
        retention::on_store_clock(&snapshots, &modified_ms, key)
    } else {
        Some((snapshots.clone(), 0))
    };
    if on_store_clock.is_none() && listed.is_some() && rules {
        report.warnings.push(format!("retention skipped: the snapshot just written ({key}) is not listed yet"));
    }
    let doomed =
        if let Some((timed, now_ms)) = on_store_clock.filter(|_| mine.known() && rules && unreadable.is_empty()) {
            retention::plan(&retention::Inputs {
                cluster_id: &meta.cluster_id,
                mine: &mine_keys,
                snapshots: &timed,
                segments: &segments,
                by_count: by_count.as_deref(),
                window_ms: (args.retention_secs > 0)
                    .then(|| i64::try_from(args.retention_secs.saturating_mul(1000)).unwrap_or(i64::MAX)),
                now_ms,
            })
        } else {
            retention::Deletions::default()
        };
    let mut deleted: Vec<String> = Vec::new();
    for old in doomed.snapshots.iter().filter(|k| k.as_str() != key) {
        let mut ok = true;
        for k in [old.clone(), location::sidecar_key(old)] {
            if let Ok(p) = object_store::path::Path::parse(&k)
                && let Err(e) = store.delete(&p).await
            {
                ok = false;
                report.warnings.push(format!("retention could not delete {k}: {}", store::why(&e)));
            }
        }
        if ok {
            report.deleted.push(loc.with_key(old.clone()).url());
        }
        deleted.push(old.clone());
    }
    let mut segments_deleted = std::collections::BTreeSet::new();
    for k in &doomed.segments {
        match object_store::path::Path::parse(k) {
            Ok(p) => match store.delete(&p).await {
                Ok(()) => {
                    segments_deleted.insert(k.clone());
                }
                Err(e) => report.warnings.push(format!("archive retention could not delete {k}: {}", store::why(&e))),
            },
            Err(e) => report.warnings.push(format!("archive retention: {k}: {e}")),
        }
    }
    if !segments_deleted.is_empty() {
        let prefix = super::archive::layout::prefix(base, &meta.cluster_id);
        let upto =
            segments.iter().filter(|s| segments_deleted.contains(&s.key)).map(|s| s.header.to).max().unwrap_or(0);
        report.deleted.push(format!(
            "{} ({} archive segments up to revision {upto})",
            loc.with_key(prefix).url(),
            segments_deleted.len()
        ));
    }
    report.other_clusters = location::kept_of_other_clusters(base, &origins, &mine);
    // What the series restores now, when it could be listed.
    if listed.is_some() {
        let kept_snapshots: Vec<SnapshotRef> = snapshots.into_iter().filter(|s| !deleted.contains(&s.key)).collect();
        let kept_segments: Vec<_> = segments.into_iter().filter(|s| !segments_deleted.contains(&s.key)).collect();
        report.restorable = Some(restorable(store, loc, &kept_snapshots, &kept_segments, &mut report.warnings).await);
    }
    // The history: this owner's kept backups of this cluster, the one just written first
    // whatever its name's time says.
    let mut kept: Vec<&String> = series
        .iter()
        .filter(|k| k.as_str() != key && !deleted.contains(k))
        .filter(|k| sidecars.get(k.as_str()).is_some_and(|m| mine.known() && location::Origin::of(m) == mine))
        .collect();
    kept.sort_by_key(|k| std::cmp::Reverse(location::parse_periodic(base, k)));
    report.kept.push(meta.clone());
    for k in kept.into_iter().take(HISTORY_LIMIT - 1) {
        report.kept.push(sidecars[k.as_str()].clone());
    }
}

/// What the kept snapshots and segments restore, per etcd cluster, as status shows it
/// (`restorable::for_status`). Revisions come from the names alone; the last moment of a
/// range that continues into segments from the header of the segment it ends with: one read of
/// a first line per distinct chain end, however many segments there are. A header that cannot
/// be read shortens its range to the snapshot (and is a warning): a moment is never claimed
/// without a segment that shows it.
async fn restorable(
    store: &dyn object_store::ObjectStore,
    loc: &location::Location,
    snapshots: &[super::archive::restorable_ranges::SnapshotRef],
    segments: &[super::archive::restorable_ranges::SegmentRef],
    warnings: &mut Vec<String>,
) -> Vec<etcd_operator_api::backup::RestorableRange> {
    use super::archive::restorable_ranges::{ranges, runs};
    let runs = runs(segments);
    let mut clusters: Vec<&str> = snapshots.iter().map(|s| s.cluster_id.as_str()).filter(|c| !c.is_empty()).collect();
    clusters.sort();
    clusters.dedup();
    let all: Vec<_> = clusters.iter().flat_map(|c| ranges(c, snapshots, &runs)).collect();
    let mut out = super::restorable::for_status(&all, |k| loc.with_key(k.to_string()).url());
    let mut headers: std::collections::BTreeMap<String, Result<i64, String>> = std::collections::BTreeMap::new();
    for r in out.iter_mut().filter(|r| r.to_revision > r.from_revision) {
        let Some(end) = runs.iter().find(|s| s.header.cluster_id == r.cluster_id && s.header.to == r.to_revision)
        else {
            continue;
        };
        if !headers.contains_key(&end.key) {
            let read = series::read_header(store, &end.key).await.map(|h| h.last_ms).map_err(|e| e.to_string());
            headers.insert(end.key.clone(), read);
        }
        match &headers[&end.key] {
            Ok(ms) => r.to_time = super::restorable::whole_seconds(*ms).max(r.from_time.clone()),
            Err(e) => {
                warnings.push(format!(
                    "restorable ranges: {e}; the range from revision {} is shown up to its snapshot",
                    r.from_revision
                ));
                r.to_revision = r.from_revision;
                r.to_time = r.from_time.clone();
                r.cut_short = true;
            }
        }
    }
    out
}

/// sha256 of the whole stream, and of everything but its last 32 bytes: etcd appends the
/// sha256 of the database to a snapshot, so the two must agree for a complete snapshot.
#[derive(Default)]
pub struct StreamHashes {
    /// sha256 of everything but the last 32 bytes seen so far (held back in `tail`).
    db: Sha256,
    tail: Vec<u8>,
    pub size: u64,
}

impl StreamHashes {
    /// One sha256 pass serves both hashes: the database part is hashed as it streams, 32 bytes
    /// behind; the whole snapshot's hash is that state plus the last 32 bytes.
    pub fn update(&mut self, chunk: &[u8]) {
        self.size += chunk.len() as u64;
        if chunk.len() >= 32 {
            let cut = chunk.len() - 32;
            self.db.update(&self.tail);
            self.db.update(&chunk[..cut]);
            self.tail.clear();
            self.tail.extend_from_slice(&chunk[cut..]);
        } else {
            self.tail.extend_from_slice(chunk);
            if self.tail.len() > 32 {
                let cut = self.tail.len() - 32;
                self.db.update(&self.tail[..cut]);
                self.tail.drain(..cut);
            }
        }
    }

    /// Hex sha256 of the whole stream.
    pub fn whole_sha256(&self) -> String {
        let mut h = self.db.clone();
        h.update(&self.tail);
        hex::encode(h.finalize())
    }

    pub fn check_etcd_integrity(&self) -> Result<(), PodError> {
        if self.size < 32 + 512 {
            return Err(format!("snapshot stream ended after {} bytes: not a database", self.size).into());
        }
        let db = self.db.clone().finalize();
        if db.as_slice() != self.tail.as_slice() {
            return Err("snapshot stream does not end with the sha256 of its database: incomplete snapshot".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_integrity_hash_is_checked_across_chunk_boundaries() {
        let db: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let mut snap = db.clone();
        snap.extend_from_slice(&Sha256::digest(&db));
        for chunk in [1, 7, 31, 32, 33, 1000, 10_000] {
            let mut h = StreamHashes::default();
            snap.chunks(chunk).for_each(|c| h.update(c));
            assert!(h.check_etcd_integrity().is_ok(), "chunk {chunk}");
            assert_eq!(h.size, snap.len() as u64);
            assert_eq!(h.whole_sha256(), hex::encode(Sha256::digest(&snap)));
        }
        // Irregular chunks: short ones after long ones and back.
        let mut h = StreamHashes::default();
        let mut rest = &snap[..];
        for n in [40, 3, 3, 100, 1, 31, 64, 5].iter().cycle() {
            let take = (*n).min(rest.len());
            h.update(&rest[..take]);
            rest = &rest[take..];
            if rest.is_empty() {
                break;
            }
        }
        assert!(h.check_etcd_integrity().is_ok());
        assert_eq!(h.whole_sha256(), hex::encode(Sha256::digest(&snap)));

        let mut h = StreamHashes::default();
        h.update(&snap[..snap.len() - 100]);
        assert!(h.check_etcd_integrity().is_err(), "a truncated stream is refused");
    }
}

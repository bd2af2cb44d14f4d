//! `etcd-operator backup-save`: what a backup pod runs. Finds the member with the highest
//! revision, streams its snapshot to the destination while hashing it (memory stays at a few
//! multipart chunks whatever the database size), checks etcd's own integrity hash at the end of
//! the stream, writes the checksum sidecar, and only then applies retention. The result goes to
//! the pod's termination message for the operator to read.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};
use futures::StreamExt;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::location::{self, BackupMeta, Kind, Location};
use super::store::{self, S3Options};

/// Where a storage location comes from on the command line (shared by every pod command).
#[derive(clap::Args, Debug, Clone)]
pub struct StorageArgs {
    /// S3, ABS, GCS or PVC.
    #[arg(long)]
    pub storage_type: String,
    /// Bucket (S3, GCS), container (ABS) or claim (PVC).
    #[arg(long)]
    pub bucket: String,
    /// Object key, or file path inside the volume.
    #[arg(long)]
    pub key: String,
    #[arg(long, default_value = "")]
    pub s3_endpoint: String,
    #[arg(long)]
    pub s3_force_path_style: bool,
    /// Directory of the mounted credentials Secret.
    #[arg(long, default_value = store::CREDENTIALS_MOUNT)]
    pub credentials_dir: PathBuf,
}

impl StorageArgs {
    pub fn location(&self) -> Result<Location, String> {
        Ok(Location { kind: Kind::parse(&self.storage_type)?, bucket: self.bucket.clone(), key: self.key.clone() })
    }

    pub fn s3(&self) -> S3Options {
        S3Options { endpoint: self.s3_endpoint.clone(), force_path_style: self.s3_force_path_style }
    }
}

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
    /// Give up after this long.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
}

/// What a successful backup pod reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SaveReport {
    pub backup: BackupMeta,
    /// Seconds spent streaming the snapshot (for throughput).
    pub transfer_seconds: f64,
    /// Backups deleted by retention.
    pub deleted: Vec<String>,
    /// What went wrong after the backup was complete (retention), for the Event.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// The newest kept backups of the series (at most [`HISTORY_LIMIT`]), newest first.
    pub kept: Vec<BackupMeta>,
}

/// History entries in a report: the termination message holds at most 4 KiB.
pub const HISTORY_LIMIT: usize = 8;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Size of one multipart part. Larger parts mean fewer requests (S3 allows 10,000 parts, so
/// 16 MiB parts reach 156 GiB, far beyond etcd's 8 GiB database limit).
const PART_SIZE: usize = 16 << 20;
/// Parts in flight: memory is bounded by about this many parts (64 MiB).
const UPLOAD_CONCURRENCY: usize = 4;

/// What the kubelet keeps of a termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;

/// The report as JSON that fits in a termination message: history entries are dropped from
/// the oldest, then the lists of deleted paths and warnings are cut to a few entries and a
/// count, then long entries are shortened, so that the result of a good backup is never lost to
/// a cut-off (unreadable) report.
pub fn report_json(mut r: SaveReport) -> String {
    const BUDGET: usize = TERMINATION_MESSAGE_LIMIT - 96;
    let len = |r: &SaveReport| serde_json::to_string(r).map(|j| j.len()).unwrap_or(usize::MAX);
    while len(&r) > BUDGET && r.kept.len() > 1 {
        r.kept.pop();
    }
    if len(&r) > BUDGET {
        for list in [&mut r.deleted, &mut r.warnings] {
            if list.len() > 3 {
                let rest = list.len() - 3;
                list.truncate(3);
                list.push(format!("... and {rest} more"));
            }
        }
    }
    if len(&r) > BUDGET {
        for entry in r.deleted.iter_mut().chain(r.warnings.iter_mut()) {
            if entry.len() > 200 {
                let cut = (0..=200).rev().find(|i| entry.is_char_boundary(*i)).unwrap_or(0);
                entry.truncate(cut);
                entry.push_str("...");
            }
        }
    }
    serde_json::to_string(&r).unwrap_or_default()
}

pub async fn run(args: SaveArgs) -> Result<SaveReport, String> {
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    match tokio::time::timeout(timeout, save(&args)).await {
        Ok(r) => r,
        Err(_) => Err(format!("backup did not finish within {}s (backupPolicy.timeoutInSecond)", args.timeout_secs)),
    }
}

/// The voting member with the highest revision (a follower when tied with the leader: the
/// snapshot's disk and network load then stays off the leader).
async fn pick_member(endpoints: &[String]) -> Result<(String, String, i64, String), String> {
    let opts = || Some(ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT).with_timeout(CONNECT_TIMEOUT));
    let mut c = Client::connect(endpoints, opts()).await.map_err(|e| format!("connect to {endpoints:?}: {e}"))?;
    let members = c.member_list().await.map_err(|e| format!("member list: {e}"))?;
    let mut best: Option<(i64, bool, String, String, String)> = None;
    let mut errors = Vec::new();
    for m in members.members().iter().filter(|m| !m.is_learner()) {
        let Some(url) = m.client_urls().first() else { continue };
        let status = async {
            let mut one = Client::connect([url.as_str()], opts()).await?;
            one.status().await
        };
        match status.await {
            Ok(s) => {
                let rev = s.header().map(|h| h.revision()).unwrap_or_default();
                let follower = s.leader() != m.id();
                let cand = (rev, follower, m.name().to_string(), url.clone(), s.version().to_string());
                if best.as_ref().is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                    best = Some(cand);
                }
            }
            Err(e) => errors.push(format!("{}: {e}", m.name())),
        }
    }
    let (rev, _, name, url, version) =
        best.ok_or_else(|| format!("no voting member answered its status: {}", errors.join("; ")))?;
    Ok((name, url, rev, version))
}

async fn save(args: &SaveArgs) -> Result<SaveReport, String> {
    let base = args.storage.location()?;
    let (store, _) = store::open(&base, &args.storage.credentials_dir, &args.storage.s3())?;
    let (member, url, revision, version) = pick_member(&args.endpoints).await?;
    let now = chrono::Utc::now();
    let key = if args.periodic { location::periodic_key(&base.key, revision, now) } else { base.key.clone() };
    let loc = base.with_key(key.clone());
    let path = object_store::path::Path::parse(&key).map_err(|e| format!("object key {key:?}: {e}"))?;
    eprintln!("snapshot of member {member} ({url}, revision {revision}, etcd {version}) to {}", loc.url());

    let mut client = Client::connect([url.as_str()], Some(ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT)))
        .await
        .map_err(|e| format!("connect to {member}: {e}"))?;
    let mut stream = client.snapshot().await.map_err(|e| format!("snapshot from {member}: {e}"))?;
    let upload =
        store.put_multipart(&path).await.map_err(|e| format!("start upload to {}: {}", loc.url(), store::why(&e)))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
    let mut hashes = StreamHashes::default();
    let started = Instant::now();
    let streamed: Result<(), String> = async {
        while let Some(msg) = stream.message().await.map_err(|e| format!("snapshot stream from {member}: {e}"))? {
            writer
                .wait_for_capacity(UPLOAD_CONCURRENCY)
                .await
                .map_err(|e| format!("upload to {}: {}", loc.url(), store::why(&e)))?;
            hashes.update(msg.blob());
            writer.write(msg.blob());
        }
        hashes.check_etcd_integrity()
    }
    .await;
    if let Err(e) = streamed {
        // Nothing partial is left behind: an aborted multipart upload leaves no object.
        let _ = writer.abort().await;
        return Err(e);
    }
    writer.finish().await.map_err(|e| format!("complete upload to {}: {}", loc.url(), store::why(&e)))?;
    let transfer_seconds = started.elapsed().as_secs_f64();

    let meta = BackupMeta {
        path: loc.url(),
        sha256: hashes.whole_sha256(),
        size: hashes.size as i64,
        etcd_version: version,
        etcd_revision: revision,
        member,
        time: now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let sidecar = object_store::path::Path::parse(location::sidecar_key(&key)).map_err(|e| e.to_string())?;
    let body = serde_json::to_vec_pretty(&meta).map_err(|e| e.to_string())?;
    // A few tries: the object is written, and without its sidecar no restore accepts it. On
    // failure the object is left in place, not deleted: a one-shot backup has just overwritten
    // the previous one, so deleting it would leave nothing (a restore refuses it anyway, as its
    // sha256 does not match the old sidecar; a person can still recover it by hand).
    let mut sidecar_err = None;
    for attempt in 0..3u64 {
        match store.put(&sidecar, PutPayload::from(body.clone())).await {
            Ok(_) => {
                sidecar_err = None;
                break;
            }
            Err(e) => sidecar_err = Some(store::why(&e)),
        }
        tokio::time::sleep(Duration::from_secs(1 << attempt)).await;
    }
    if let Some(e) = sidecar_err {
        return Err(format!(
            "write checksum sidecar {}: {e}; the backup object {} is left in place but no restore will accept it without its sidecar",
            location::sidecar_key(&key),
            loc.url()
        ));
    }

    let mut report = SaveReport { backup: meta.clone(), transfer_seconds, ..Default::default() };
    if args.periodic {
        // Retention runs only now, after a complete backup and its sidecar exist. Listing or
        // deleting may fail (a write-only credential, a transient error): the backup itself
        // succeeded, so that is a warning in the report, never a failed backup.
        match list_series(&*store, &base.key).await {
            Err(e) => report.warnings.push(format!("retention skipped: {e}")),
            Ok(keys) => {
                for old in location::to_delete(&base.key, &keys, args.max_backups, &key) {
                    let mut ok = true;
                    for k in [old.clone(), location::sidecar_key(&old)] {
                        if let Ok(p) = object_store::path::Path::parse(&k) {
                            if let Err(e) = store.delete(&p).await {
                                ok = false;
                                report.warnings.push(format!("retention could not delete {k}: {}", store::why(&e)));
                            }
                        }
                    }
                    if ok {
                        report.deleted.push(base.with_key(old).url());
                    }
                }
            }
        }
        let mut kept: Vec<String> = list_series(&*store, &base.key)
            .await
            .unwrap_or_else(|_| vec![key.clone()])
            .into_iter()
            .filter(|k| location::parse_periodic(&base.key, k).is_some())
            .collect();
        kept.sort_by_key(|k| std::cmp::Reverse(location::parse_periodic(&base.key, k)));
        // The backup just written first, whatever its name's time says.
        kept.retain(|k| *k != key);
        kept.insert(0, key.clone());
        for k in kept.into_iter().take(HISTORY_LIMIT) {
            if k == key {
                report.kept.push(meta.clone());
            } else if let Some(m) = read_sidecar(&*store, &k).await {
                report.kept.push(m);
            }
        }
    } else {
        report.kept.push(meta);
    }
    Ok(report)
}

/// Keys next to `base` (same directory) that start with its file name.
async fn list_series(store: &dyn object_store::ObjectStore, base: &str) -> Result<Vec<String>, String> {
    let dir = base.rsplit_once('/').map(|(d, _)| d);
    let prefix = dir.map(object_store::path::Path::from);
    let mut out = Vec::new();
    let mut list = store.list(prefix.as_ref());
    while let Some(item) = list.next().await {
        let meta = item.map_err(|e| format!("list backups: {}", store::why(&e)))?;
        let k = meta.location.to_string();
        if k.starts_with(base) {
            out.push(k);
        }
    }
    Ok(out)
}

pub async fn read_sidecar(store: &dyn object_store::ObjectStore, key: &str) -> Option<BackupMeta> {
    let p = object_store::path::Path::parse(location::sidecar_key(key)).ok()?;
    let bytes = store.get(&p).await.ok()?.bytes().await.ok()?;
    serde_json::from_slice(&bytes).ok()
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

    pub fn check_etcd_integrity(&self) -> Result<(), String> {
        if self.size < 32 + 512 {
            return Err(format!("snapshot stream ended after {} bytes: not a database", self.size));
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
    fn a_long_report_is_shortened_to_fit_a_termination_message() {
        let meta =
            BackupMeta { path: format!("s3://b/{}", "k".repeat(300)), sha256: "a".repeat(64), ..Default::default() };
        let r = SaveReport {
            backup: meta.clone(),
            transfer_seconds: 1.0,
            deleted: (0..40).map(|i| format!("s3://b/{}-{i}", "old".repeat(80))).collect(),
            warnings: vec!["w".repeat(5000)],
            kept: vec![meta; HISTORY_LIMIT],
        };
        let j = report_json(r.clone());
        assert!(j.len() < TERMINATION_MESSAGE_LIMIT, "{} bytes", j.len());
        let back: SaveReport = serde_json::from_str(&j).unwrap();
        assert_eq!(back.backup, r.backup, "the backup itself is always reported whole");
        assert_eq!(back.kept.len(), 1);
        assert_eq!(back.deleted.len(), 4);
        assert_eq!(back.deleted[3], "... and 37 more");
        // A short report is left alone.
        let small = SaveReport { backup: r.backup.clone(), ..Default::default() };
        assert_eq!(serde_json::from_str::<SaveReport>(&report_json(small.clone())).unwrap(), small);
    }

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

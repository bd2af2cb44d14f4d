//! Pod commands on the restore side:
//! - `backup-verify`: stream a backup, compare its sha256 and size with its sidecar; the
//!   operator creates nothing until this succeeded.
//! - `restore-prepare` and `restore-finish`: the first and last init containers of a restored
//!   member. Between them the member's own etcd image runs `etcdutl snapshot restore` into a
//!   scratch directory, through the static `etcd-restore-step` that `restore-prepare` copies
//!   there (crates/restore-step: it clears what an attempt that died half-way left, and restores
//!   nothing on a member that has data). All three are idempotent: when init containers run
//!   again on a pod whose member already has data (a new pod sandbox on the same volume),
//!   nothing is fetched, nothing is restored, the data is kept.

use std::path::{Path as FsPath, PathBuf};

use futures::StreamExt;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::contract::{PodError, RESTORED_DIR, SNAPSHOT_FILE, STEP_BINARY, StorageArgs};
use super::location::{self, BackupMeta};
use super::one_shot;
use super::pod_secrets;
use super::store;

#[derive(clap::Args, Debug, Clone)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub storage: StorageArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct PrepareArgs {
    #[command(flatten)]
    pub storage: StorageArgs,
    /// The sha256 the backup must have (verified by the operator's verify pod already; checked
    /// again here on the bytes actually restored).
    #[arg(long)]
    pub sha256: String,
    /// etcd's data directory.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Scratch directory on the same volume.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The static restore step to copy into the work directory.
    #[arg(long, default_value = DEFAULT_STEP_BINARY)]
    pub step_binary: PathBuf,
}

/// Where the operator image has the static restore step.
pub const DEFAULT_STEP_BINARY: &str = "/usr/local/bin/etcd-restore-step";

#[derive(clap::Args, Debug, Clone)]
pub struct FinishArgs {
    #[arg(long)]
    pub data_dir: PathBuf,
    #[arg(long)]
    pub work_dir: PathBuf,
}

#[derive(clap::Args, Debug, Clone)]
pub struct SeedArgs {
    /// Client URL of the member whose snapshot seeds the new cluster.
    #[arg(long)]
    pub member_url: String,
    /// The etcd cluster ID (hex) the member must belong to.
    #[arg(long)]
    pub cluster_id: String,
    /// The member ID (hex) that must answer at that URL.
    #[arg(long)]
    pub member_id: String,
    /// The operator's client certificate when the cluster's clients speak TLS.
    #[command(flatten)]
    pub tls: super::contract::ClientTlsArgs,
    /// The root password etcd has, when `spec.auth` is set (a snapshot needs the root role).
    #[command(flatten)]
    pub auth: super::contract::AuthArgs,
    #[arg(long)]
    pub data_dir: PathBuf,
    #[arg(long)]
    pub work_dir: PathBuf,
    #[arg(long, default_value = DEFAULT_STEP_BINARY)]
    pub step_binary: PathBuf,
}

/// Download `key` to `sink` (if any), returning its sha256 and size.
async fn stream_hash(
    store: &dyn object_store::ObjectStore,
    loc: &location::Location,
    mut sink: Option<&mut tokio::fs::File>,
) -> Result<(String, i64), PodError> {
    let path = object_store::path::Path::parse(&loc.key).map_err(|e| e.to_string())?;
    let got = match store.get(&path).await {
        Ok(g) => g,
        Err(object_store::Error::NotFound { .. }) => {
            return Err(PodError::Refused(format!("backup {} not found", loc.url())));
        }
        Err(e) => return Err(format!("read backup {}: {}", loc.url(), store::why(&e)).into()),
    };
    let mut hasher = Sha256::new();
    let mut size = 0i64;
    let mut body = got.into_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("read backup {}: {}", loc.url(), store::why(&e)))?;
        hasher.update(&chunk);
        size += chunk.len() as i64;
        if let Some(f) = sink.as_deref_mut() {
            f.write_all(&chunk).await.map_err(|e| format!("write snapshot file: {e}"))?;
        }
    }
    Ok((hex::encode(hasher.finalize()), size))
}

/// Download the backup at `loc` to `file`, checking it against `sha256`: the file exists only
/// when it matches (a mismatch is [`PodError::Refused`]). Its size.
pub async fn download_checked(
    store: &dyn object_store::ObjectStore,
    loc: &location::Location,
    sha256: &str,
    file: &FsPath,
) -> Result<i64, PodError> {
    let part = file.with_extension("part");
    let mut f = tokio::fs::File::create(&part).await.map_err(|e| format!("create {}: {e}", part.display()))?;
    let (sha, size) = stream_hash(store, loc, Some(&mut f)).await?;
    f.sync_all().await.map_err(|e| format!("sync {}: {e}", part.display()))?;
    drop(f);
    if sha != sha256 {
        let _ = std::fs::remove_file(&part);
        return Err(PodError::Refused(format!(
            "checksum mismatch: backup {} has sha256 {sha} ({size} bytes), the restore expects {sha256}; nothing restored",
            loc.url()
        )));
    }
    std::fs::rename(&part, file).map_err(|e| format!("rename {}: {e}", part.display()))?;
    Ok(size)
}

/// Check a backup against its sidecar. A failure that no retry can change (the backup or its
/// sidecar missing or wrong) is [`PodError::Refused`]; any other (the store unreachable, a read cut
/// off, a new one-shot backup being published over this one) is worth another attempt
/// (`verify_policy`).
pub async fn verify(args: VerifyArgs) -> Result<BackupMeta, PodError> {
    let loc = args.storage.location()?;
    check_readable(&loc)?;
    let (store, _) = store::open(&loc, &args.storage.credentials_dir, &args.storage.s3())?;
    let checked = check_pair(&*store, &loc).await;
    // The key and its sidecar disagree, or one is missing: a one-shot backup may be replacing
    // it right now, in which case the previous one is kept aside, complete (`one_shot`).
    if let Err(PodError::Refused(_)) = &checked
        && check_pair(&*store, &loc.with_key(location::previous_key(&loc.key))).await.is_ok()
    {
        return Err(PodError::Transient(format!(
            "a new backup is being written over {} (the previous one is kept aside, complete); trying again",
            loc.url()
        )));
    }
    checked
}

/// On a volume: may this user read the backup at all? ([`PodError::AccessDenied`], said before
/// anything is read.)
fn check_readable(loc: &location::Location) -> Result<(), PodError> {
    if loc.kind != location::Kind::Pvc {
        return Ok(());
    }
    let who = crate::pod::member_volume::FsIdentity::of_this_process()?;
    super::volume_access::check_read(FsPath::new(store::PVC_MOUNT), &loc.key, &who)
}

/// The backup at `loc` and its sidecar, checked against each other.
async fn check_pair(store: &dyn object_store::ObjectStore, loc: &location::Location) -> Result<BackupMeta, PodError> {
    let sidecar = location::sidecar_key(&loc.key);
    let meta = match one_shot::read_sidecar(store, &loc.key).await? {
        Some(m) => m,
        None => {
            return Err(PodError::Refused(format!(
                "backup {} has no readable checksum sidecar {sidecar}: refusing a backup that cannot be verified",
                loc.url()
            )));
        }
    };
    let (sha, size) = stream_hash(store, loc, None).await?;
    if sha != meta.sha256 {
        return Err(PodError::Refused(format!(
            "checksum mismatch: backup {} has sha256 {sha} ({size} bytes), its sidecar records {} ({} bytes)",
            loc.url(),
            meta.sha256,
            meta.size
        )));
    }
    if size != meta.size {
        return Err(PodError::Refused(format!(
            "size mismatch: backup {} has {size} bytes, its sidecar records {}",
            loc.url(),
            meta.size
        )));
    }
    Ok(meta)
}

fn has_member_data(data_dir: &FsPath) -> bool {
    data_dir.join("member").is_dir()
}

#[derive(clap::Args, Debug, Clone)]
pub struct StageArgs {
    #[arg(long)]
    pub work_dir: PathBuf,
    #[arg(long, default_value = DEFAULT_STEP_BINARY)]
    pub step_binary: PathBuf,
}

/// `stage-restore-step`: the static restore step copied into the work directory, for an etcd
/// image to run next (a point-in-time restore's verify pod: it copies the image's tools).
pub fn stage_step(args: StageArgs) -> Result<String, PodError> {
    copy_step(&args.work_dir, &args.step_binary).map(|step| format!("staged {}", step.display()))
}

/// The static restore step copied into `work` (created if needed), executable.
fn copy_step(work: &FsPath, step_binary: &FsPath) -> Result<PathBuf, PodError> {
    std::fs::create_dir_all(work).map_err(|e| format!("create {}: {e}", work.display()))?;
    let step = work.join(STEP_BINARY);
    std::fs::copy(step_binary, &step)
        .map_err(|e| format!("copy the restore step {} to {}: {e}", step_binary.display(), step.display()))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&step, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("chmod {}: {e}", step.display()))?;
    Ok(step)
}

/// The common start of `restore-prepare` and `seed-from-member`: the restore step copied into
/// the work directory (the etcd image runs it next), and `Some(message)` when the member already
/// has data (restored before; init containers run again on a new pod sandbox): then nothing is
/// fetched, and the restore step restores nothing.
fn begin(work: &FsPath, data_dir: &FsPath, step_binary: &FsPath) -> Result<Option<String>, PodError> {
    copy_step(work, step_binary)?;
    if has_member_data(data_dir) {
        return Ok(Some(format!("{} already holds this member's data; kept, nothing fetched", data_dir.display())));
    }
    Ok(None)
}

pub async fn prepare(args: PrepareArgs) -> Result<String, PodError> {
    let work = &args.work_dir;
    let snapshot = work.join(SNAPSHOT_FILE);
    if let Some(kept) = begin(work, &args.data_dir, &args.step_binary)? {
        return Ok(kept);
    }
    let loc = args.storage.location()?;
    check_readable(&loc)?;
    let (store, _) = store::open(&loc, &args.storage.credentials_dir, &args.storage.s3())?;
    // The backup the restore was verified against: at the key, or (a one-shot backup being
    // written over it right now) kept aside.
    let previous = loc.with_key(location::previous_key(&loc.key));
    let from = match one_shot::read_sidecar(&*store, &previous.key).await {
        Ok(Some(m)) if m.sha256 == args.sha256 => previous,
        _ => loc.clone(),
    };
    let size = download_checked(&*store, &from, &args.sha256, &snapshot).await?;
    Ok(format!("fetched {} ({size} bytes, sha256 {})", from.url(), args.sha256))
}

/// `seed-from-member`: the first init container of a quorum-loss recovery's first member. Streams
/// a snapshot from a surviving member of the broken cluster (a member serves snapshots without a
/// quorum) and checks etcd's own integrity hash at its end; then the etcd image restores it as a
/// new one-member cluster, as from a backup. Idempotent like `restore-prepare`.
pub async fn seed_from_member(args: SeedArgs) -> Result<String, PodError> {
    let work = &args.work_dir;
    let snapshot = work.join(SNAPSHOT_FILE);
    if let Some(kept) = begin(work, &args.data_dir, &args.step_binary)? {
        return Ok(kept);
    }
    let url = args.member_url.as_str();
    let connect_timeout = std::time::Duration::from_secs(5);
    let opts = etcd_client::ConnectOptions::new().with_connect_timeout(connect_timeout);
    let tls = pod_secrets::client_tls(&args.tls)?;
    let dialer = crate::tls::connector::Dialer::new(opts, tls.as_ref(), connect_timeout, None);
    let creds = pod_secrets::login(&args.auth)?;
    let (mut client, _) = crate::auth::connect::connect(&[url.to_string()], &dialer, creds.as_ref())
        .await
        .map_err(|e| format!("connect to {url}: {e}"))?;
    // The pod IP may have been given to another pod since: only the expected member of the
    // expected cluster may seed, checked before and after the stream.
    let check = |client: &mut etcd_client::Client| {
        let mut client = client.clone();
        let (want_cluster, want_member) = (args.cluster_id.clone(), args.member_id.clone());
        async move {
            let st = client.status().await.map_err(|e| format!("status of {url}: {e}"))?;
            let h = st.header().ok_or_else(|| format!("{url} answered without a header"))?;
            let (cluster, member) = (format!("{:x}", h.cluster_id()), format!("{:x}", h.member_id()));
            if cluster != want_cluster || member != want_member {
                return Err(PodError::from(format!(
                    "{url} is member {member} of cluster {cluster}, not the survivor {want_member} of cluster {want_cluster}; nothing restored"
                )));
            }
            Ok(())
        }
    };
    check(&mut client).await?;
    let mut stream = client.snapshot().await.map_err(|e| format!("snapshot from {url}: {e}"))?;
    let part = work.join(format!("{SNAPSHOT_FILE}.part"));
    let mut file = tokio::fs::File::create(&part).await.map_err(|e| format!("create {}: {e}", part.display()))?;
    let mut hashes = super::save::StreamHashes::default();
    while let Some(msg) = stream.message().await.map_err(|e| format!("snapshot stream from {url}: {e}"))? {
        hashes.update(msg.blob());
        file.write_all(msg.blob()).await.map_err(|e| format!("write {}: {e}", part.display()))?;
    }
    hashes.check_etcd_integrity()?;
    check(&mut client).await?;
    file.sync_all().await.map_err(|e| format!("sync {}: {e}", part.display()))?;
    drop(file);
    std::fs::rename(&part, &snapshot).map_err(|e| format!("rename {}: {e}", part.display()))?;
    Ok(format!("snapshot of {url}: {} bytes, sha256 {}", hashes.size, hashes.whole_sha256()))
}

pub fn finish(args: FinishArgs) -> Result<String, PodError> {
    let work = &args.work_dir;
    let restored = work.join(RESTORED_DIR);
    let msg = if has_member_data(&args.data_dir) {
        format!("{} already holds this member's data; discarded the restore output", args.data_dir.display())
    } else {
        if !has_member_data(&restored) {
            return Err(format!("{} holds no restored member data", restored.display()).into());
        }
        if args.data_dir.exists() {
            // A data directory without member data: an interrupted earlier attempt.
            std::fs::remove_dir_all(&args.data_dir).map_err(|e| format!("clear {}: {e}", args.data_dir.display()))?;
        }
        std::fs::rename(&restored, &args.data_dir)
            .map_err(|e| format!("move {} to {}: {e}", restored.display(), args.data_dir.display()))?;
        format!("restored data moved to {}", args.data_dir.display())
    };
    std::fs::remove_dir_all(work).map_err(|e| format!("clear {}: {e}", work.display()))?;
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("eo-fetch-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn finish_moves_restored_data_into_place_once() {
        let root = tmp("finish");
        let (data, work) = (root.join("data"), root.join("restore"));
        std::fs::create_dir_all(work.join("data/member/snap")).unwrap();
        std::fs::write(work.join("data/member/snap/db"), b"restored").unwrap();
        finish(FinishArgs { data_dir: data.clone(), work_dir: work.clone() }).unwrap();
        assert_eq!(std::fs::read(data.join("member/snap/db")).unwrap(), b"restored");
        assert!(!work.exists());

        // Init containers run again: new restore output never replaces the member's data.
        std::fs::create_dir_all(work.join("data/member/snap")).unwrap();
        std::fs::write(work.join("data/member/snap/db"), b"older").unwrap();
        let msg = finish(FinishArgs { data_dir: data.clone(), work_dir: work.clone() }).unwrap();
        assert!(msg.contains("discarded"), "{msg}");
        assert_eq!(std::fs::read(data.join("member/snap/db")).unwrap(), b"restored");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn finish_without_restore_output_fails() {
        let root = tmp("empty");
        let err = finish(FinishArgs { data_dir: root.join("data"), work_dir: root.join("restore") }).unwrap_err();
        assert!(matches!(&err, PodError::Transient(why) if why.contains("no restored member data")), "{err:?}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Init containers that run again on a member with data fetch nothing and copy nothing (they
    /// used to copy the whole database to feed a restore that was thrown away: twice the disk).
    #[tokio::test]
    async fn prepare_on_a_member_with_data_fetches_and_copies_nothing() {
        let root = tmp("prepare");
        let (data, work) = (root.join("data"), root.join("restore"));
        std::fs::create_dir_all(data.join("member/snap")).unwrap();
        std::fs::write(data.join("member/snap/db"), b"mine").unwrap();
        let step = root.join("step-binary");
        std::fs::write(&step, b"#!step").unwrap();
        let storage = StorageArgs {
            storage_type: "S3".into(),
            bucket: "unreachable".into(),
            key: "k".into(),
            s3_endpoint: "http://127.0.0.1:1".into(),
            s3_force_path_style: true,
            credentials_dir: root.join("no-creds"),
        };
        let args =
            PrepareArgs { storage, sha256: "x".into(), data_dir: data, work_dir: work.clone(), step_binary: step };
        let msg = prepare(args).await.unwrap();
        assert!(msg.contains("kept"), "{msg}");
        assert!(!work.join(SNAPSHOT_FILE).exists(), "no copy of the database");
        assert_eq!(std::fs::read(work.join(STEP_BINARY)).unwrap(), b"#!step", "the restore step is in place");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The one-shot protocol, step by step, with a reader after each step: the pair at the key
    /// or the previous pair kept aside is always complete (what the verify pod accepts, or
    /// retries on).
    #[tokio::test]
    async fn a_one_shot_backup_being_replaced_is_readable_at_every_step() {
        use object_store::memory::InMemory;
        use object_store::{ObjectStoreExt, PutPayload};
        let store = InMemory::new();
        let loc = location::Location { kind: location::Kind::S3, bucket: "b".into(), key: "dir/k".into() };
        let put = |key: String, body: Vec<u8>| {
            let store = &store;
            async move { store.put(&object_store::path::Path::parse(key).unwrap(), PutPayload::from(body)).await.unwrap() }
        };
        let meta = |body: &[u8]| BackupMeta {
            sha256: hex::encode(sha2::Sha256::digest(body)),
            size: body.len() as i64,
            ..Default::default()
        };
        let readable = |store: &InMemory| {
            let loc = loc.clone();
            let store = store.clone();
            async move {
                let previous = loc.with_key(location::previous_key(&loc.key));
                check_pair(&store, &loc).await.is_ok() || check_pair(&store, &previous).await.is_ok()
            }
        };
        // The first backup: nothing to keep.
        assert_eq!(one_shot::before(&store, &loc.key).await.unwrap(), one_shot::Before::Nothing);
        put(loc.key.clone(), b"old".to_vec()).await;
        let mut old = meta(b"old");
        old.object_etag = one_shot::etag(&store, &loc.key).await.unwrap().unwrap();
        one_shot::write_sidecar(&store, &loc.key, &old).await.unwrap();
        assert!(check_pair(&store, &loc).await.is_ok());
        // 0, 1: a complete backup at the key is copied aside.
        assert_eq!(one_shot::before(&store, &loc.key).await.unwrap(), one_shot::Before::Complete);
        one_shot::keep_previous(&store, &loc.key).await.unwrap();
        assert!(readable(&store).await, "after keeping the previous one");
        // 2: the upload completes: the key's pair disagrees, the previous pair covers it.
        put(loc.key.clone(), b"new".to_vec()).await;
        assert!(matches!(check_pair(&store, &loc).await, Err(PodError::Refused(_))), "the window");
        assert!(readable(&store).await, "the previous pair covers the window");
        // A run that dies here leaves the previous pair; the next run keeps it as it is.
        assert_eq!(one_shot::before(&store, &loc.key).await.unwrap(), one_shot::Before::PreviousKept);
        // 3: the new sidecar; 4: the previous pair goes.
        one_shot::write_sidecar(&store, &loc.key, &meta(b"new")).await.unwrap();
        assert!(readable(&store).await, "after the new sidecar");
        one_shot::drop_previous(&store, &loc.key).await.unwrap();
        assert_eq!(check_pair(&store, &loc).await.unwrap().sha256, meta(b"new").sha256);
        assert!(one_shot::read_sidecar(&store, &location::previous_key(&loc.key)).await.unwrap().is_none());
    }
}

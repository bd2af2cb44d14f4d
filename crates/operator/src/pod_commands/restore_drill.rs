//! `etcd-operator restore-drill`: the pod of a restore drill (issue 29). It proves that the
//! newest restorable point of a snapshot series gives back the live cluster's data:
//!
//! 1. ask the live cluster its ID, list the series and work out the newest revision R that is
//!    restorable for that cluster (the end of its newest range: the newest snapshot and the
//!    unbroken archive after it);
//! 2. read the live cluster's whole key space at R (a paginated, linearizable range at R) into
//!    a digest (`backup::drill::Digest`) — first, while R is freshest: a cluster that has
//!    compacted past R cannot be compared, and that drill fails (it verified nothing);
//! 3. restore that point into a throw-away one-member etcd on the pod's scratch volume, as a
//!    point-in-time restore does (`restore_point::replay_point`: every object checked against
//!    its sha256 first, so a damaged segment fails the drill naming it);
//! 4. read the restored key space at the revision it reached, digest it the same way, and
//!    compare key counts and digests.
//!
//! Read-only: the live cluster gets ranges only, the store gets lists and reads only. The
//! report (`contract::DrillReport`) is the termination message, passed or failed; a failed
//! drill exits with 1.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use etcd_client::{ConnectOptions, GetOptions, KvClient};

use super::restore_point::{self, Replay};
use crate::backup::archive::point_in_time::Target;
use crate::backup::archive::restorable_ranges;
use crate::backup::contract::{AuthArgs, ClientTlsArgs, DrillReport, KeySpace, PodError, StorageArgs};
use crate::backup::drill::{self, Digest, Entry};
use crate::backup::{pod_secrets, store};
use crate::tls::connector::Dialer;

#[derive(clap::Args, Debug, Clone)]
pub struct RestoreDrillArgs {
    /// The snapshot series (`--key` is its base key, the EtcdBackup's path).
    #[command(flatten)]
    pub storage: StorageArgs,
    /// Client URLs of the live cluster (comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub endpoints: Vec<String>,
    /// UID of the EtcdBackup (every EtcdBackup pod is given it; a drill writes nothing).
    #[arg(long, default_value = "")]
    pub owner_uid: String,
    /// The etcd version of the tools in `--work-dir`.
    #[arg(long)]
    pub etcd_version: String,
    /// Scratch directory holding `etcd` and `etcdutl` (or `etcdctl` before 3.5).
    #[arg(long)]
    pub work_dir: PathBuf,
    /// Give up after this long: a drill that did not finish failed.
    #[arg(long, default_value_t = drill::DEFAULT_TIMEOUT_SECS as u64)]
    pub timeout_secs: u64,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub auth: AuthArgs,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Keys per range request. A response may be large (values up to etcd's request limit each):
/// the client takes up to [`MAX_RESPONSE_BYTES`].
const PAGE: i64 = 1000;
const MAX_RESPONSE_BYTES: usize = 1 << 30;

/// The drill, as a report whatever happens (the pod's termination message).
pub async fn run(args: RestoreDrillArgs) -> DrillReport {
    let started = Instant::now();
    let mut report = DrillReport::default();
    let limit = Duration::from_secs(args.timeout_secs.max(1));
    let outcome = tokio::time::timeout(limit, drill(&args, &mut report)).await;
    match outcome {
        Ok(Ok(verdict)) => {
            report.succeeded = true;
            report.message = verdict;
        }
        Ok(Err(why)) => {
            report.succeeded = false;
            // A drill says what it found; whether a retry could change it is no matter here.
            report.message = match why {
                PodError::Refused(m) | PodError::Transient(m) => m,
                denied => denied.to_string(),
            };
        }
        // The replay's etcd is killed with its future (`kill_on_drop`).
        Err(_) => {
            report.succeeded = false;
            report.message = format!("the drill did not finish within its time limit ({}s)", limit.as_secs());
        }
    }
    report.duration_seconds = started.elapsed().as_secs_f64();
    eprintln!("{}", report.message);
    report
}

/// Steps 1 to 4; fills in `report` as it learns. `Ok`: the verdict of a pass.
async fn drill(args: &RestoreDrillArgs, report: &mut DrillReport) -> Result<String, PodError> {
    let base = args.storage.location()?;
    let (store, _) = store::open(&base, &args.storage.credentials_dir, &args.storage.s3())?;
    let tls = pod_secrets::client_tls(&args.tls)?;
    let creds = pod_secrets::login(&args.auth)?;
    let dialer =
        Dialer::new(ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT), tls.as_ref(), CONNECT_TIMEOUT, None);
    let (live, cluster_id) = crate::backup::archiver::live_cluster(&args.endpoints, &dialer, creds.as_ref()).await?;
    report.cluster_id = cluster_id.clone();

    let listed = restore_point::list(&*store, &base.key).await?;
    let snaps: Vec<_> = listed.snapshots.iter().map(|(s, _)| s.clone()).collect();
    let ranges = restorable_ranges::ranges(&cluster_id, &snaps, &listed.segments);
    let Some(newest) = ranges.iter().max_by_key(|r| (r.to, r.from)) else {
        return Err(PodError::Refused(format!(
            "the series {} holds no snapshot of the live etcd cluster {cluster_id}: nothing to restore",
            base.url()
        )));
    };
    let revision = newest.to;
    report.revision = revision;
    report.snapshot = base.with_key(newest.snapshot.key.clone()).url();
    report.snapshot_revision = newest.snapshot.revision;
    eprintln!("drill of etcd cluster {cluster_id}: the newest restorable point is revision {revision}");

    let live_space = key_space(live.kv_client(), revision).await.map_err(|why| {
        if why.contains("compacted") {
            PodError::Refused(format!(
                "the live cluster has compacted past revision {revision} ({why}): the restore cannot be compared, nothing was verified"
            ))
        } else {
            PodError::from(format!("read the live cluster at revision {revision}: {why}"))
        }
    })?;
    report.live = Some(live_space.clone());
    eprintln!("live cluster at revision {revision}: {} keys, sha256 {}", live_space.keys, live_space.sha256);

    let mut replayed = restore_point::replay_point(Replay {
        store: &*store,
        base: &base,
        listed: &listed,
        target: Target::Revision(revision),
        cluster_id: Some(&cluster_id),
        etcd_version: &args.etcd_version,
        work_dir: &args.work_dir,
        snapshot_past_target_ok: true,
        creds: creds.as_ref(),
    })
    .await?;
    report.snapshot = replayed.snapshot.path.clone();
    report.snapshot_revision = replayed.snapshot.etcd_revision;
    report.segments = replayed.plan.segments.len() as i64;
    let reached = replayed.revision;
    let restored = key_space(replayed.client.kv_client(), reached).await;
    let after = restore_point::revision_of(&mut replayed.client).await;
    replayed.stop().await;
    let restored = restored.map_err(|why| format!("read the restored etcd at revision {reached}: {why}"))?;
    report.restored = Some(restored.clone());
    if after? != reached {
        return Err("the restored etcd moved past the revision it was read at: the comparison is void".into());
    }
    let live_space = if reached == revision {
        live_space
    } else {
        // The snapshot already held more than its sidecar said, with nothing to replay: the
        // live cluster is read again at the revision the restore reached.
        report.revision = reached;
        let again = key_space(live.kv_client(), reached)
            .await
            .map_err(|why| format!("read the live cluster at revision {reached}: {why}"))?;
        report.live = Some(again.clone());
        again
    };
    drill::compare(reached, &restored, &live_space)
        .map(|same| {
            format!(
                "{same}; restored from {} (revision {}) and {} archive segments",
                report.snapshot, report.snapshot_revision, report.segments
            )
        })
        .map_err(PodError::Refused)
}

/// The digest of every key at `revision`, read page by page (ranges only).
async fn key_space(kv: KvClient, revision: i64) -> Result<KeySpace, String> {
    let mut kv = kv.max_decoding_message_size(MAX_RESPONSE_BYTES);
    let mut digest = Digest::default();
    // "\0" with a from-key range end is every key (etcd's own "all keys").
    let mut from = vec![0u8];
    loop {
        let opts = GetOptions::new().with_from_key().with_revision(revision).with_limit(PAGE);
        let resp = kv.get(from.clone(), Some(opts)).await.map_err(|e| e.to_string())?;
        for kv in resp.kvs() {
            digest.add(&Entry {
                key: kv.key(),
                value: kv.value(),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                version: kv.version(),
                lease: kv.lease(),
            })?;
        }
        match resp.kvs().last() {
            Some(last) if resp.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok(digest.finish()),
        }
    }
}

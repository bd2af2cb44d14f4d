//! Everything that passes between the operator and the pods it starts for backups and restores,
//! in one place: pod labels, mount paths and file names, the storage arguments (one type that
//! renders to flags and parses back from them), a restored member's parameters, the report a
//! backup pod writes to its termination message, and how a failure is said there ([`PodError`]:
//! refused, which no retry can change, or transient). Pure: no I/O (what pods read from their
//! mounts is read by the pod side, `pod_secrets` and `store`). The pod commands (`save`, `fetch`)
//! and the pod builders (`pods`, `restore_init`) both use it, so a flag or a path cannot differ
//! between the two sides.

use std::path::PathBuf;

use etcd_operator_api::backup::BackupSource;
use serde::{Deserialize, Serialize};

use super::location::{BackupMeta, Kind, Location};

/// Label on backup pods: the EtcdBackup they belong to.
pub const BACKUP_LABEL: &str = "etcd_backup";
/// Label on verify pods: the EtcdRestore they belong to.
pub const RESTORE_LABEL: &str = "etcd_restore";
/// Backup pod label: the EtcdCluster it backs up (when the EtcdBackup names one), so that
/// maintenance of that cluster can wait for it.
pub const BACKUP_OF_LABEL: &str = "etcd_backup_of";

/// Where backup and restore pods mount the credentials Secret.
pub const CREDENTIALS_MOUNT: &str = "/etc/etcd-operator/backup-credentials";
/// Where backup and restore pods mount a PVC destination.
pub const PVC_MOUNT: &str = "/backup";

/// Scratch directory of a member restore, on the member's data volume.
pub const RESTORE_WORK_DIR: &str = "/var/etcd/restore";
/// File the etcd image restores from, inside the work directory.
pub const SNAPSHOT_FILE: &str = "snapshot.db";
/// Directory the etcd image restores into, inside the work directory.
pub const RESTORED_DIR: &str = "data";
/// The static restore step (crates/restore-step): next to the operator binary in the operator
/// image; copied into the work directory by `restore-fetch`, run from there by the etcd image.
pub const STEP_BINARY: &str = "etcd-restore-step";

/// What a pod command's termination message starts with for a failure no retry can change (the
/// backup is wrong, rather than the store unreachable): [`PodError::Refused`].
pub const REFUSED: &str = "refused: ";

/// What a pod command's termination message starts with when its user may not use the files
/// it must on a PVC ([`PodError::AccessDenied`]), followed by the uid, `: ` and what.
pub const ACCESS_DENIED: &str = "access denied to uid ";

/// How a pod command failed. Its text is the pod's termination message, which the operator reads
/// back with [`PodError::from_message`]: a refusal is said with the [`REFUSED`] prefix, a denied
/// access with [`ACCESS_DENIED`] and the uid, anything else as it is. The exit code is 1 either
/// way.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// The backup is wrong (none or no sidecar where the spec points, a checksum or size
    /// mismatch): no retry can change it.
    #[error("refused: {0}")]
    Refused(String),
    /// The pod's user (`uid`) may not create, replace or read what it must on a PVC (`what`
    /// names the path, its owner and mode): files or directories of another user on a volume
    /// the kubelet does not apply the pod's `fsGroup` to (hostPath), or written as root by an
    /// earlier operator version. Checked before anything is written (`volume_access`). Denied
    /// to the non-root user, the operator marks the volume as root's and runs the next pod as
    /// root; denied to root (who has no capability there), it is an ordinary failure.
    #[error("access denied to uid {uid}: {what}")]
    AccessDenied { uid: u32, what: String },
    /// Anything else (the store or etcd unreachable, a read cut off, a backup being replaced):
    /// another attempt may succeed.
    #[error("{0}")]
    Transient(String),
}

impl PodError {
    /// The error a termination message says (the operator's side of [`PodError`]'s `Display`).
    pub fn from_message(message: &str) -> PodError {
        if let Some(why) = message.strip_prefix(REFUSED) {
            return PodError::Refused(why.to_string());
        }
        let denied = message.strip_prefix(ACCESS_DENIED).and_then(|rest| rest.split_once(": "));
        if let Some((uid, what)) = denied
            && let Ok(uid) = uid.parse::<u32>()
        {
            return PodError::AccessDenied { uid, what: what.to_string() };
        }
        PodError::Transient(message.to_string())
    }
}

/// An error said only as text is transient: only a [`PodError::Refused`] is final.
impl From<String> for PodError {
    fn from(why: String) -> PodError {
        PodError::Transient(why)
    }
}

impl From<&str> for PodError {
    fn from(why: &str) -> PodError {
        PodError::Transient(why.to_string())
    }
}

/// What the kubelet keeps of a termination message.
pub const TERMINATION_MESSAGE_LIMIT: usize = 4096;
/// History entries in a report: the termination message holds at most 4 KiB.
pub const HISTORY_LIMIT: usize = 8;

/// Where a storage location comes from on the command line (shared by every pod command).
#[derive(clap::Args, Debug, Clone, PartialEq)]
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
    #[arg(long, default_value = CREDENTIALS_MOUNT)]
    pub credentials_dir: PathBuf,
}

impl StorageArgs {
    /// The arguments for `loc` as the spec's `source` describes it, with the mounted credentials.
    pub fn of(loc: &Location, source: &BackupSource) -> StorageArgs {
        let s3 = source.s3.as_ref().filter(|_| loc.kind == Kind::S3);
        StorageArgs {
            storage_type: loc.kind.as_str().to_string(),
            bucket: loc.bucket.clone(),
            key: loc.key.clone(),
            s3_endpoint: s3.map(|s| s.endpoint.clone()).unwrap_or_default(),
            s3_force_path_style: s3.is_some_and(|s| s.force_path_style),
            credentials_dir: CREDENTIALS_MOUNT.into(),
        }
    }

    /// The flags that parse back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![
            format!("--storage-type={}", self.storage_type),
            format!("--bucket={}", self.bucket),
            format!("--key={}", self.key),
        ];
        if !self.s3_endpoint.is_empty() {
            a.push(format!("--s3-endpoint={}", self.s3_endpoint));
        }
        if self.s3_force_path_style {
            a.push("--s3-force-path-style".into());
        }
        if self.credentials_dir != std::path::Path::new(CREDENTIALS_MOUNT) {
            a.push(format!("--credentials-dir={}", self.credentials_dir.display()));
        }
        a
    }

    pub fn location(&self) -> Result<Location, String> {
        Ok(Location { kind: Kind::parse(&self.storage_type)?, bucket: self.bucket.clone(), key: self.key.clone() })
    }

    pub fn s3(&self) -> S3Options {
        S3Options { endpoint: self.s3_endpoint.clone(), force_path_style: self.s3_force_path_style }
    }
}

/// S3 options that are spec fields rather than Secret keys.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct S3Options {
    pub endpoint: String,
    pub force_path_style: bool,
}

/// How a pod reaches etcd over TLS: the directory where the client Secret (`clientTLSSecret`,
/// CoreOS keys `etcd-client.crt`, `etcd-client.key`, `etcd-client-ca.crt`) is mounted; none:
/// plaintext. The server certificate is checked against the host of each URL. The files are
/// read by `pod_secrets::client_tls`.
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct ClientTlsArgs {
    #[arg(long, default_value = "")]
    pub client_tls_dir: String,
    /// The name server certificates are checked against, when the URL is a pod IP (empty:
    /// the URL's host).
    #[arg(long, default_value = "")]
    pub client_tls_server_name: String,
}

impl ClientTlsArgs {
    /// The arguments of a pod that mounts a client Secret (`tls::CLIENT_DIR`), or none.
    pub fn of(secret: &str) -> ClientTlsArgs {
        let dir = if secret.is_empty() { "" } else { crate::tls::CLIENT_DIR };
        ClientTlsArgs { client_tls_dir: dir.to_string(), client_tls_server_name: String::new() }
    }

    /// The flags that parse back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        let mut a = vec![];
        if !self.client_tls_dir.is_empty() {
            a.push(format!("--client-tls-dir={}", self.client_tls_dir));
        }
        if !self.client_tls_server_name.is_empty() {
            a.push(format!("--client-tls-server-name={}", self.client_tls_server_name));
        }
        a
    }
}

/// Where pods mount the Secret of the etcd user they log in as (`spec.auth`, EtcdBackup
/// `authSecret`): files `password` and optionally `username`.
pub const AUTH_DIR: &str = "/etc/etcd-operator/etcd-auth";

/// How a pod logs in to etcd: the directory where the login Secret is mounted; none: no login.
/// The password is read from the file (`pod_secrets::login`), never passed on the command line
/// (which the pod spec shows to anyone who may read pods).
#[derive(clap::Args, Debug, Clone, Default, PartialEq)]
pub struct AuthArgs {
    #[arg(long, default_value = "")]
    pub auth_dir: String,
}

impl AuthArgs {
    /// The arguments of a pod that mounts a login Secret at [`AUTH_DIR`], or none.
    pub fn of(secret: Option<&str>) -> AuthArgs {
        AuthArgs { auth_dir: if secret.is_some() { AUTH_DIR.to_string() } else { String::new() } }
    }

    /// The flags that parse back into `self`.
    pub fn to_args(&self) -> Vec<String> {
        if self.auth_dir.is_empty() { vec![] } else { vec![format!("--auth-dir={}", self.auth_dir)] }
    }
}

/// What a restored member's `etcdutl snapshot restore` needs to know about the member: passed as
/// data from the planner's new member, not recovered from etcd's command line.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberRestore {
    pub name: String,
    /// `name=peer URL` of every member of the new cluster.
    pub initial_cluster: Vec<(String, String)>,
    pub token: String,
    pub peer_url: String,
    /// `--bump-revision` (with `--mark-compacted`): see [`bump_revision`].
    pub bump_revision: Option<u64>,
}

impl MemberRestore {
    /// The flags `etcdutl snapshot restore` (and 3.4's `etcdctl`) take for the member.
    pub fn flags(&self) -> Vec<String> {
        let initial: Vec<String> = self.initial_cluster.iter().map(|(n, u)| format!("{n}={u}")).collect();
        let mut flags = vec![
            format!("--name={}", self.name),
            format!("--initial-cluster={}", initial.join(",")),
            format!("--initial-cluster-token={}", self.token),
            format!("--initial-advertise-peer-urls={}", self.peer_url),
        ];
        if let Some(n) = self.bump_revision {
            flags.extend([format!("--bump-revision={n}"), "--mark-compacted".into()]);
        }
        flags
    }
}

/// The revision bump of a restored member when the annotation
/// (`naming::RESTORE_BUMP_REVISION_ANNOTATION`) says `annotation` and the member runs `version`:
/// [`DEFAULT_BUMP_REVISION`] when absent (or unreadable), none for `false`/`0`, else the number;
/// none before etcd 3.5.10, whose `snapshot restore` has no such flag.
pub fn bump_revision(annotation: Option<&str>, version: &crate::version::Version) -> Option<u64> {
    let floor = crate::version::Version::parse("3.5.10").ok()?;
    if *version < floor {
        return None;
    }
    match annotation.map(str::trim) {
        Some(v) if v.eq_ignore_ascii_case("false") => None,
        Some(v) => match v.parse::<u64>() {
            Ok(0) => None,
            Ok(n) => Some(n),
            Err(_) => Some(DEFAULT_BUMP_REVISION),
        },
        None => Some(DEFAULT_BUMP_REVISION),
    }
}

/// How far a restore moves the revision by default: as the kubeadm and OpenShift restore
/// procedures, far beyond any revision written since a backup.
pub const DEFAULT_BUMP_REVISION: u64 = 1_000_000_000;

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
    /// The user the backup was written as, on a PVC (whose files it then owns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// This EtcdBackup's backups of other etcd clusters than the one just backed up (`""`: of
    /// a cluster not recorded, sidecars from before), which retention keeps: cluster ID → count.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub other_clusters: std::collections::BTreeMap<String, usize>,
    /// What the series restores after retention, oldest first (`restorable::for_status`);
    /// `None`: not known (a one-shot backup, or the series could not be listed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restorable: Option<Vec<etcd_operator_api::backup::RestorableRange>>,
}

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
    // The restorable ranges, oldest first, down to the newest one.
    while len(&r) > BUDGET && r.restorable.as_ref().is_some_and(|v| v.len() > 1) {
        if let Some(v) = r.restorable.as_mut() {
            v.remove(0);
        }
    }
    // Other clusters' backups kept: the 3 with most backups, should a series hold many.
    if len(&r) > BUDGET && r.other_clusters.len() > 3 {
        let mut by_count: Vec<(String, usize)> = std::mem::take(&mut r.other_clusters).into_iter().collect();
        by_count.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        r.other_clusters = by_count.into_iter().take(3).collect();
    }
    serde_json::to_string(&r).unwrap_or_default()
}

/// A key space as a restore drill compares it (`drill::digest`): how many keys, and the
/// sha256 over all of them in key order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeySpace {
    pub keys: u64,
    pub sha256: String,
}

/// What a restore drill pod (`restore-drill`) reports: always JSON, passed or failed (a failed
/// drill exits with 1). Whatever it learnt before a failure is filled in.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrillReport {
    /// The restored key space equals the live cluster's at `revision`.
    pub succeeded: bool,
    /// The live etcd cluster (hex ID) whose history was restored.
    #[serde(default)]
    pub cluster_id: String,
    /// The revision restored and compared.
    #[serde(default)]
    pub revision: i64,
    /// Where the snapshot the drill restored is (`s3://bucket/key_v…`).
    #[serde(default)]
    pub snapshot: String,
    #[serde(default)]
    pub snapshot_revision: i64,
    /// Archive segments replayed after the snapshot.
    #[serde(default)]
    pub segments: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<KeySpace>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<KeySpace>,
    #[serde(default)]
    pub duration_seconds: f64,
    /// What was compared, or why the drill failed.
    #[serde(default)]
    pub message: String,
}

/// The drill report as JSON that fits in a termination message (a long message is cut).
pub fn drill_report_json(mut r: DrillReport) -> String {
    const MESSAGE_LIMIT: usize = 2048;
    if r.message.len() > MESSAGE_LIMIT {
        let cut = (0..=MESSAGE_LIMIT).rev().find(|i| r.message.is_char_boundary(*i)).unwrap_or(0);
        r.message.truncate(cut);
        r.message.push_str("...");
    }
    serde_json::to_string(&r).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use etcd_operator_api::backup::{AbsSource, PvcSource, S3Source};

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        storage: StorageArgs,
    }

    #[derive(Parser)]
    struct TlsCmd {
        #[command(flatten)]
        tls: ClientTlsArgs,
    }

    #[derive(Parser)]
    struct AuthCmd {
        #[command(flatten)]
        auth: AuthArgs,
    }

    #[test]
    fn auth_args_render_to_flags_that_parse_back_and_carry_no_password() {
        for a in [AuthArgs::of(None), AuthArgs::of(Some("ex-etcd-root"))] {
            let argv = std::iter::once("cmd".to_string()).chain(a.to_args());
            assert_eq!(AuthCmd::try_parse_from(argv).unwrap().auth, a);
        }
        assert_eq!(AuthArgs::of(Some("s")).to_args(), ["--auth-dir=/etc/etcd-operator/etcd-auth"]);
        assert!(AuthArgs::of(Some("s")).to_args().iter().all(|a| !a.contains("password")));
    }

    #[test]
    fn client_tls_args_render_to_flags_that_parse_back() {
        let named = ClientTlsArgs { client_tls_server_name: "ex-client.ns.svc".into(), ..ClientTlsArgs::of("s") };
        for a in [ClientTlsArgs::of(""), ClientTlsArgs::of("etcd-client-tls"), named] {
            let secret = &a.client_tls_dir;
            let argv = std::iter::once("cmd".to_string()).chain(a.to_args());
            assert_eq!(TlsCmd::try_parse_from(argv).unwrap().tls, a, "{secret:?}");
        }
        assert_eq!(ClientTlsArgs::of("s").to_args(), ["--client-tls-dir=/etc/etcdtls/operator/etcd-tls"]);
    }

    /// The termination message of a failed pod command says whether it was refused; the
    /// operator reads the same error back from it.
    #[test]
    fn a_pod_error_reads_back_from_its_termination_message() {
        let refused = PodError::Refused("checksum mismatch: backup s3://b/k has sha256 aa".into());
        assert_eq!(refused.to_string(), "refused: checksum mismatch: backup s3://b/k has sha256 aa");
        assert!(refused.to_string().starts_with(REFUSED));
        let transient = PodError::from("read backup s3://b/k: connection refused".to_string());
        assert_eq!(transient, PodError::Transient("read backup s3://b/k: connection refused".into()));
        assert_eq!(transient.to_string(), "read backup s3://b/k: connection refused");
        for e in [refused, transient] {
            assert_eq!(PodError::from_message(&e.to_string()), e);
        }
        // What Kubernetes says of a pod killed from outside is no refusal.
        assert!(matches!(PodError::from_message("pod r-verify-1 failed: DeadlineExceeded"), PodError::Transient(_)));
    }

    /// A denied access reads back with the uid it was denied to (the operator marks the volume
    /// only when that was not root) and what was denied; a message that merely looks like one
    /// is not taken for it.
    #[test]
    fn an_access_denied_reads_back_with_its_uid() {
        let denied = PodError::AccessDenied {
            uid: 65532,
            what: "uid 65532 (gid 65532, groups [65532]) cannot write /backup/ex: a directory (owner 0:0, mode 755)"
                .into(),
        };
        assert_eq!(
            denied.to_string(),
            "access denied to uid 65532: uid 65532 (gid 65532, groups [65532]) cannot write /backup/ex: a directory (owner 0:0, mode 755)"
        );
        assert!(denied.to_string().starts_with(ACCESS_DENIED));
        let as_root =
            PodError::AccessDenied { uid: 0, what: "cannot read /backup/k: a file (owner 1000:1000, mode 600)".into() };
        for e in [denied, as_root] {
            assert_eq!(PodError::from_message(&e.to_string()), e);
        }
        for looks_like in ["access denied to uid x: y", "access denied to uid 12", "denied: access denied to uid 0: x"]
        {
            assert_eq!(PodError::from_message(looks_like), PodError::Transient(looks_like.into()), "{looks_like}");
        }
    }

    fn parse_back(a: &StorageArgs) -> StorageArgs {
        let argv = std::iter::once("cmd".to_string()).chain(a.to_args());
        Cmd::try_parse_from(argv).unwrap().storage
    }

    #[test]
    fn storage_args_render_to_flags_that_parse_back_to_the_same_location() {
        let s3 = BackupSource {
            s3: Some(S3Source {
                path: "bucket/dir/k".into(),
                aws_secret: "aws".into(),
                endpoint: "http://10.0.0.1:5000".into(),
                force_path_style: true,
            }),
            ..Default::default()
        };
        let abs =
            BackupSource { abs: Some(AbsSource { path: "c/k".into(), ..Default::default() }), ..Default::default() };
        let pvc = BackupSource {
            pvc: Some(PvcSource { claim_name: "backups".into(), path: "a b/e.db".into() }),
            ..Default::default()
        };
        for (ty, source) in [("S3", &s3), ("ABS", &abs), ("PVC", &pvc)] {
            let loc = Location::of(ty, source).unwrap();
            let args = StorageArgs::of(&loc, source);
            assert_eq!(parse_back(&args), args, "{ty}");
            assert_eq!(parse_back(&args).location().unwrap(), loc, "{ty}");
        }
        let args = StorageArgs::of(&Location::of("S3", &s3).unwrap(), &s3);
        assert!(args.s3_force_path_style && args.s3_endpoint == "http://10.0.0.1:5000");
        let moved = StorageArgs { credentials_dir: "/elsewhere".into(), ..args };
        assert_eq!(parse_back(&moved), moved);
    }

    #[test]
    fn a_member_restore_names_the_member_its_cluster_and_token() {
        let m = MemberRestore {
            name: "ex-a".into(),
            initial_cluster: vec![("ex-a".into(), "http://a:2380".into()), ("ex-b".into(), "http://b:2380".into())],
            token: "uid".into(),
            peer_url: "http://a:2380".into(),
            bump_revision: None,
        };
        assert_eq!(
            m.flags(),
            [
                "--name=ex-a",
                "--initial-cluster=ex-a=http://a:2380,ex-b=http://b:2380",
                "--initial-cluster-token=uid",
                "--initial-advertise-peer-urls=http://a:2380"
            ]
        );
        let bumped = MemberRestore { bump_revision: Some(7), ..m };
        assert_eq!(bumped.flags()[4..], ["--bump-revision=7", "--mark-compacted"]);
    }

    #[test]
    fn a_restore_bumps_the_revision_from_etcd_3_5_10_unless_told_not_to() {
        let v = |s: &str| crate::version::Version::parse(s).unwrap();
        // etcd's snapshot restore has the flags from 3.5.10 (CHANGELOG-3.5, etcd#16165).
        assert_eq!(bump_revision(None, &v("3.5.9")), None);
        assert_eq!(bump_revision(None, &v("3.4.23")), None);
        assert_eq!(bump_revision(None, &v("3.5.10")), Some(1_000_000_000));
        assert_eq!(bump_revision(None, &v("3.7.2")), Some(1_000_000_000));
        assert_eq!(bump_revision(Some("false"), &v("3.6.15")), None);
        assert_eq!(bump_revision(Some("0"), &v("3.6.15")), None);
        assert_eq!(bump_revision(Some(" 5000 "), &v("3.6.15")), Some(5000));
        // Unreadable: the safe default, never no bump.
        assert_eq!(bump_revision(Some("lots"), &v("3.6.15")), Some(1_000_000_000));
    }

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
            uid: Some(65532),
            other_clusters: (0..200).map(|i| (format!("{i:016x}"), i)).collect(),
            restorable: Some(
                (0..20)
                    .map(|i| etcd_operator_api::backup::RestorableRange {
                        cluster_id: "c0ffee".into(),
                        from_revision: i * 100,
                        to_revision: i * 100 + 99,
                        from_time: "2026-01-01T00:00:00Z".into(),
                        to_time: "2026-01-01T00:10:00Z".into(),
                        snapshot: format!("s3://b/{}_v{i}", "k".repeat(100)),
                        cut_short: true,
                    })
                    .collect(),
            ),
        };
        let j = report_json(r.clone());
        assert!(j.len() < TERMINATION_MESSAGE_LIMIT, "{} bytes", j.len());
        let back: SaveReport = serde_json::from_str(&j).unwrap();
        assert_eq!(back.backup, r.backup, "the backup itself is always reported whole");
        assert_eq!(back.kept.len(), 1);
        assert_eq!(back.deleted.len(), 4);
        assert_eq!(back.deleted[3], "... and 37 more");
        let ranges = back.restorable.expect("ranges reported");
        assert!(!ranges.is_empty() && ranges.len() < 20, "{} ranges", ranges.len());
        assert_eq!(ranges.last().map(|r| r.from_revision), Some(1900), "the newest ones are kept");
        // A short report is left alone.
        let small = SaveReport { backup: r.backup.clone(), ..Default::default() };
        assert_eq!(serde_json::from_str::<SaveReport>(&report_json(small.clone())).unwrap(), small);
    }
}

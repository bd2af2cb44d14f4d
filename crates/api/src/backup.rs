//! `EtcdBackup`: take a snapshot of an etcd cluster once or periodically and store it.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;

/// Storage types in CoreOS' spelling, plus the additive `PVC`.
pub const STORAGE_S3: &str = "S3";
pub const STORAGE_ABS: &str = "ABS";
pub const STORAGE_GCS: &str = "GCS";
pub const STORAGE_PVC: &str = "PVC";

/// What to back up and where to.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdBackup",
    plural = "etcdbackups",
    namespaced,
    doc = "A one-shot or periodic backup of an etcd cluster to S3, Azure Blob Storage, GCS or a PVC, each with a sha256 sidecar. API-compatible with the CoreOS etcd-operator's EtcdBackup.",
    status = "EtcdBackupStatus",
    printcolumn = r#"{"name":"Storage","type":"string","jsonPath":".spec.storageType"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"boolean","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessDate"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    /// Client URLs of the cluster's members, e.g. `http://example-client:2379`; the member
    /// with the highest revision is backed up. Set this or `clusterName`. Mirrors CoreOS
    /// `spec.etcdEndpoints`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_endpoints: Vec<String>,
    /// Additive: name of an EtcdCluster in this namespace whose members are backed up,
    /// instead of `etcdEndpoints`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_name: String,
    /// Where the backup goes: `S3`, `ABS`, `GCS` (CoreOS' values) or the additive `PVC`; the
    /// block of the same name (`s3`, `abs`, `gcs`, `pvc`) must be set. Mirrors CoreOS
    /// `spec.storageType`.
    #[serde(default)]
    pub storage_type: String,
    /// When to back up and how many backups to keep. Default: one backup, 60 s time limit.
    /// Mirrors CoreOS `spec.backupPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_policy: Option<BackupPolicy>,
    #[serde(flatten)]
    pub source: BackupSource,
    /// Name of a Secret with `etcd-client.crt`, `etcd-client.key` and `etcd-client-ca.crt`
    /// for members that require TLS: set, the backup pod connects over https with this client
    /// certificate (a cluster with `spec.TLS.auto` makes one: `<name>-tls-client`); unset, over
    /// plain http. Mirrors CoreOS `spec.clientTLSSecret`.
    #[serde(default, rename = "clientTLSSecret", skip_serializing_if = "String::is_empty")]
    pub client_tls_secret: String,
    /// Additive: name of a Secret with the etcd user the backup pod logs in as when the
    /// cluster has authentication on: keys `password` and optionally `username` (default
    /// `root`; the user needs the `root` role to take a snapshot). Unset with `clusterName`:
    /// the named EtcdCluster's `spec.auth.rootSecret`, if it has `spec.auth`. The pod reads the
    /// Secret from a mounted file, never from its command line.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub auth_secret: String,
    /// Additive: the continuous archive. Enabled (with periodic backups), an archiver pod
    /// follows every change of the cluster after the newest snapshot and writes it, at least
    /// every `flushIntervalInSecond`, as checksummed segments under `<path>.archive/` next to the
    /// snapshots. An EtcdRestore with `pointInTime` restores any revision or moment it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuous: Option<ContinuousArchive>,
    /// Additive: restore drills. Set, the newest restorable point (the newest snapshot and the
    /// archive after it) is restored on a schedule into a throw-away one-member etcd, and its
    /// key space at that revision is compared with the live cluster's at the same revision; the
    /// result is in `status.lastDrill`, an Event (a failure is a Warning) and a metric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_drill: Option<RestoreDrill>,
}

/// Restore drills of an EtcdBackup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreDrill {
    /// Seconds between the start of two drills, 0 to 31536000 (a year); 0 means the default,
    /// 86400 (daily). The first drill runs once the first backup succeeded.
    #[schemars(range(min = 0, max = 31536000))]
    #[serde(default)]
    pub interval_in_second: i64,
    /// Time limit of one drill, in seconds, 0 to 86400; 0 means the default, 600.
    #[schemars(range(min = 0, max = 86400))]
    #[serde(default)]
    pub timeout_in_second: i64,
}

/// The continuous archive of an EtcdBackup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContinuousArchive {
    /// Run the archiver. Needs `backupPolicy.backupIntervalInSecond` > 0: the archive
    /// continues the newest periodic snapshot.
    #[serde(default)]
    pub enabled: bool,
    /// Longest time, in seconds (1 to 3600), between a change and the segment holding it
    /// being written: the recovery point objective. 0 means the default, 10.
    #[schemars(range(min = 0, max = 3600))]
    #[serde(default)]
    pub flush_interval_in_second: i64,
}

/// Where a backup lives; one block per storage type, as in CoreOS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSource {
    /// Amazon S3 or an S3-compatible server; used with storage type `S3`. Mirrors CoreOS
    /// `s3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Azure Blob Storage; used with storage type `ABS`. Mirrors CoreOS `abs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,
    /// Google Cloud Storage; used with storage type `GCS`. Mirrors CoreOS `gcs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,
    /// Additive: a PersistentVolumeClaim in this namespace; used with storage type `PVC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcSource>,
}

/// When and how many.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// Time limit of one backup, in seconds, 0 to 86400 (a day); 0 means the default, 60.
    /// Mirrors CoreOS `timeoutInSecond`.
    #[schemars(range(min = 0, max = 86400))]
    #[serde(default)]
    pub timeout_in_second: i64,
    /// Period of backups, in seconds, 0 to 31536000 (a year); 0 (the default) means one
    /// backup. Each periodic backup is a new object `<path>_v<revision>_<YYYY-MM-DD-HHMMSS>`.
    /// Mirrors CoreOS `backupIntervalInSecond`.
    #[schemars(range(min = 0, max = 31536000))]
    #[serde(default)]
    pub backup_interval_in_second: i64,
    /// How many periodic backups to keep, 0 to 10000; the oldest beyond it are deleted after
    /// each successful backup. 0 (the default) keeps all. Mirrors CoreOS `maxBackups`.
    #[schemars(range(min = 0, max = 10000))]
    #[serde(default)]
    pub max_backups: i32,
    /// Additive: keep every moment of this window restorable, a duration such as `168h` or
    /// `90m` (units `h`, `m`, `s`). The newest snapshot taken at or before the window's start
    /// and everything after it are kept. With `maxBackups` as well, a backup is deleted only
    /// when both allow it. Empty (the default): no window.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub retention: String,
}

/// S3 or an S3-compatible store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    /// `<bucket>/<key>` of the backup object, e.g. `my-bucket/etcd/example`; periodic
    /// backups append `_v<revision>_<time>` to the key. Mirrors CoreOS `s3.path`.
    pub path: String,
    /// Name of a Secret in this namespace with the AWS files `credentials` and optionally
    /// `config` (profile `default`; region from `config`, else `us-east-1`). Mirrors CoreOS
    /// `s3.awsSecret`.
    #[serde(default)]
    pub aws_secret: String,
    /// Empty for AWS; otherwise the URL of an S3-compatible server, e.g.
    /// `http://minio.example:9000`. Mirrors CoreOS `s3.endpoint`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    /// Address buckets as `<endpoint>/<bucket>` rather than `<bucket>.<endpoint>`, for
    /// S3-compatible servers without bucket subdomains. Default false. Mirrors CoreOS
    /// `s3.forcePathStyle`.
    #[serde(default)]
    pub force_path_style: bool,
}

/// Azure Blob Storage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbsSource {
    /// `<container>/<blob>` of the backup, e.g. `etcd-backups/example`. Mirrors CoreOS
    /// `abs.path`.
    pub path: String,
    /// Name of a Secret in this namespace with `storage-account`, `storage-key` and
    /// optionally `cloud` (`AzurePublicCloud`, the default, `AzureChinaCloud`,
    /// `AzureUSGovernmentCloud`, `AzureGermanCloud`) and the additive `endpoint` (the account
    /// URL, for an emulator or private endpoint). Mirrors CoreOS `abs.absSecret`.
    #[serde(default)]
    pub abs_secret: String,
}

/// Google Cloud Storage (implemented, not tested here: see `docs/src/backup-restore.md`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsSource {
    /// `<bucket>/<object>` of the backup, e.g. `my-bucket/etcd/example`. Mirrors CoreOS
    /// `gcs.path`.
    pub path: String,
    /// Name of a Secret in this namespace with `credentials-data` or `credentials.json` (a
    /// service-account key JSON) or `access-token`. Mirrors CoreOS `gcs.gcpSecret`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gcp_secret: String,
}

/// Additive: a PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    /// Name of the PersistentVolumeClaim in this namespace; backup and restore pods mount it
    /// at `/backup`. Additive.
    pub claim_name: String,
    /// File path inside the volume, e.g. `backups/etcd.db`; default `etcd.backup`. Additive.
    #[serde(default)]
    pub path: String,
}

/// Additive: the backup a new EtcdCluster's members start from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreFrom {
    /// Where the backup is: `S3`, `ABS`, `GCS` or `PVC`, with the block of the same name.
    pub backup_storage_type: String,
    #[serde(flatten)]
    pub source: BackupSource,
    /// The 64 hex digits of the sha256 the backup must have; every member checks it before
    /// restoring.
    pub sha256: String,
}

/// Result of the last backup, in the CoreOS shape plus additive fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// The last backup succeeded. Mirrors CoreOS `status.succeeded`.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the last backup failed, or what it waits for. Mirrors CoreOS' `status.Reason`.
    #[serde(default)]
    pub reason: String,
    /// etcd version of the member the last backup was taken from. Mirrors CoreOS
    /// `status.etcdVersion`.
    #[serde(default)]
    pub etcd_version: String,
    /// Store revision of the last backup. Mirrors CoreOS `status.etcdRevision`.
    #[serde(default)]
    pub etcd_revision: i64,
    /// RFC 3339 time of the last successful backup. Mirrors CoreOS `status.lastSuccessDate`.
    #[serde(default)]
    pub last_success_date: Option<String>,
    /// Additive: where the last backup was written, e.g. `s3://bucket/key`.
    #[serde(default)]
    pub path: String,
    /// Additive: size of the last backup, in bytes.
    #[serde(default)]
    pub size: i64,
    /// Additive: hex sha256 of the last backup (also in its `<key>.meta.json` sidecar).
    #[serde(default)]
    pub sha256: String,
    /// Additive: the etcd cluster ID (hex, as the EtcdCluster's `status.clusterId`) the last
    /// backup was taken from. Retention deletes only backups of this cluster: backups of an
    /// earlier cluster of the same name (deleted and re-created, or restored) are kept.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_id: String,
    /// Additive: the backups that are kept (at most `maxBackups`), newest first.
    #[serde(default)]
    pub history: Vec<BackupRecord>,
    /// Additive: RFC 3339 time the last backup (successful or not) started.
    #[serde(default)]
    pub last_attempt_date: Option<String>,
    /// Additive: failed attempts since the last success.
    #[serde(default)]
    pub consecutive_failures: i32,
    /// Additive: the generation of the spec the status describes.
    #[serde(default)]
    pub observed_generation: i64,
    /// Additive: conditions of the backup, in the EtcdCluster's shape.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Additive: the newest backup pods whose results are in this status (at most 10), so that
    /// a result is counted once even when the operator restarts before it deletes the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded_pods: Vec<String>,
    /// Additive: the continuous archive (`spec.continuous`), as its archiver pod last
    /// reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ArchiveStatus>,
    /// Additive: the revisions (and moments) a restore can go to, oldest first: each from a
    /// kept snapshot through the unbroken chain of archive segments after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restorable_ranges: Vec<RestorableRange>,
    /// Additive: the last restore drill (`spec.restoreDrill`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_drill: Option<DrillResult>,
}

/// Revisions `fromRevision..=toRevision` can be restored.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestorableRange {
    /// The etcd cluster ID (hex) of this history.
    pub cluster_id: String,
    /// Revision of the full snapshot the range starts from.
    pub from_revision: i64,
    /// Last revision restorable from it (its own revision without archive segments).
    pub to_revision: i64,
    /// RFC 3339 time the snapshot was taken.
    pub from_time: String,
    /// RFC 3339 time the last change of the range was received.
    pub to_time: String,
    /// Where the snapshot is, e.g. `s3://bucket/key_v1234_2026-11-23-020000`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub snapshot: String,
    /// The range ends at its snapshot because the archive segment it continued into could not
    /// be read when it was listed: the archiver's progress does not extend it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut_short: bool,
}

/// The outcome of one restore drill.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrillResult {
    /// RFC 3339 time the drill started.
    pub time: String,
    /// The restored key space equals the live cluster's at `revision`.
    pub succeeded: bool,
    /// The revision restored and compared.
    #[serde(default)]
    pub revision: i64,
    /// The snapshot the drill restored, e.g. `s3://bucket/key_v1234_2026-11-23-020000`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub snapshot: String,
    /// How many archive segments it replayed after the snapshot.
    #[serde(default)]
    pub segments: i64,
    /// How long the drill took, in seconds.
    #[serde(default)]
    pub duration_seconds: f64,
    /// What was compared (keys, digest), or why the drill failed.
    #[serde(default)]
    pub message: String,
}

/// Where the continuous archive stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveStatus {
    /// The etcd cluster ID (hex) being archived.
    #[serde(default)]
    pub cluster_id: String,
    /// Revision of the full snapshot the current chain of segments continues.
    #[serde(default)]
    pub base_revision: i64,
    /// Every change up to this revision is in a segment written to the store.
    #[serde(default)]
    pub durable_revision: i64,
    /// RFC 3339 time (whole seconds, rounded down) the newest durable change was received: a
    /// moment a point-in-time restore accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub durable_time: Option<String>,
    /// Changes received and not yet written.
    #[serde(default)]
    pub pending_events: i64,
    /// Why the last write or watch failed, when it did (empty once one succeeds).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
    /// Revision ranges no segment holds because etcd compacted them before the archiver
    /// received them (a full snapshot was taken right after each).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gaps: Vec<ArchiveGap>,
}

/// Revisions the archive does not hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArchiveGap {
    /// First revision missing.
    pub from_revision: i64,
    /// Last revision missing (the full snapshot taken after the gap is at the next one or later).
    pub to_revision: i64,
    /// RFC 3339 time the gap was found.
    pub time: String,
}

/// One stored backup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    /// Where the backup is, e.g. `s3://bucket/key_v1234_2026-11-23-020000`.
    pub path: String,
    /// Hex sha256 of the backup.
    pub sha256: String,
    /// Size of the backup, in bytes.
    pub size: i64,
    /// Store revision the backup was taken at.
    pub etcd_revision: i64,
    /// RFC 3339 time the backup was taken.
    pub time: String,
    /// The etcd cluster ID (hex) the backup was taken from; empty for backups written before
    /// backups recorded it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coreos_backup_manifest_parses() {
        let yaml = r#"
etcdEndpoints: ["http://example-etcd-cluster-client:2379"]
storageType: S3
backupPolicy: {backupIntervalInSecond: 125, maxBackups: 4}
s3:
  path: mybucket/etcd.backup
  awsSecret: aws
  endpoint: http://127.0.0.1:5000
  forcePathStyle: true
"#;
        let s: EtcdBackupSpec = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(s.storage_type, STORAGE_S3);
        assert_eq!(s.backup_policy.unwrap().max_backups, 4);
        assert_eq!(s.source.s3.unwrap().path, "mybucket/etcd.backup");
    }
}

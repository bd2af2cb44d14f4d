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
    doc = "A one-shot or periodic backup of an etcd cluster.",
    status = "EtcdBackupStatus",
    printcolumn = r#"{"name":"Storage","type":"string","jsonPath":".spec.storageType"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"boolean","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessDate"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    /// Client URLs of the cluster's members; the member with the highest revision is used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_endpoints: Vec<String>,
    /// Additive: name of an EtcdCluster in this namespace, instead of `etcdEndpoints`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_name: String,
    /// `S3`, `ABS`, `GCS` or `PVC`.
    #[serde(default)]
    pub storage_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_policy: Option<BackupPolicy>,
    #[serde(flatten)]
    pub source: BackupSource,
    /// Secret with `etcd-client.crt`, `etcd-client.key`, `etcd-client-ca.crt`.
    #[serde(default, rename = "clientTLSSecret", skip_serializing_if = "String::is_empty")]
    pub client_tls_secret: String,
}

/// Where a backup lives; one block per storage type, as in CoreOS.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abs: Option<AbsSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,
    /// Additive: a PersistentVolumeClaim in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcSource>,
}

/// When and how many.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupPolicy {
    /// Time limit of one backup, in seconds (0 to 86400); 0 means the default (60 s).
    #[schemars(range(min = 0, max = 86400))]
    #[serde(default)]
    pub timeout_in_second: i64,
    /// Period of backups in seconds (0 to 31536000, a year); 0 means one backup.
    #[schemars(range(min = 0, max = 31536000))]
    #[serde(default)]
    pub backup_interval_in_second: i64,
    /// How many backups to keep (0 to 10000); 0 means all of them.
    #[schemars(range(min = 0, max = 10000))]
    #[serde(default)]
    pub max_backups: i32,
}

/// S3 or an S3-compatible store.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    /// `<bucket>/<key>`; periodic backups append a timestamp suffix to the key.
    pub path: String,
    /// Secret with AWS `credentials` and `config` files (profile `default`).
    #[serde(default)]
    pub aws_secret: String,
    /// Empty for AWS; otherwise the URL of an S3-compatible server.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub endpoint: String,
    #[serde(default)]
    pub force_path_style: bool,
}

/// Azure Blob Storage.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AbsSource {
    /// `<container>/<blob>`.
    pub path: String,
    /// Secret with `storage-account`, `storage-key` and optionally `cloud` (additive:
    /// `endpoint` for an emulator or sovereign cloud URL).
    #[serde(default)]
    pub abs_secret: String,
}

/// Google Cloud Storage (implemented, not tested here: see the README).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsSource {
    /// `<bucket>/<object>`.
    pub path: String,
    /// Secret with `credentials.json` (a service account key) or `access-token`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gcp_secret: String,
}

/// Additive: a PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    pub claim_name: String,
    /// File path inside the volume, e.g. `backups/etcd.db`.
    #[serde(default)]
    pub path: String,
}

/// Additive: the backup a new EtcdCluster's members start from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreFrom {
    /// `S3`, `ABS`, `GCS` or `PVC`.
    pub backup_storage_type: String,
    #[serde(flatten)]
    pub source: BackupSource,
    /// Hex sha256 the backup must have; every member checks it before restoring.
    pub sha256: String,
}

/// Result of the last backup, in the CoreOS shape plus additive fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    #[serde(default)]
    pub succeeded: bool,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub etcd_version: String,
    #[serde(default)]
    pub etcd_revision: i64,
    /// RFC 3339 time of the last successful backup.
    #[serde(default)]
    pub last_success_date: Option<String>,
    /// Additive: where the last backup was written.
    #[serde(default)]
    pub path: String,
    /// Additive: bytes of the last backup.
    #[serde(default)]
    pub size: i64,
    /// Additive: hex sha256 of the last backup.
    #[serde(default)]
    pub sha256: String,
    /// Additive: the backups that are kept, newest first.
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
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Additive: the newest backup pods whose results are in this status (at most 10), so that
    /// a result is counted once even when the operator restarts before it deletes the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recorded_pods: Vec<String>,
}

/// One stored backup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupRecord {
    pub path: String,
    pub sha256: String,
    pub size: i64,
    pub etcd_revision: i64,
    /// RFC 3339.
    pub time: String,
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

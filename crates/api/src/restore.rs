//! `EtcdRestore`: create an EtcdCluster whose every member starts from one backup.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::backup::BackupSource;
use crate::condition::Condition;

/// Which backup, and which EtcdCluster to create from it.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdRestore",
    plural = "etcdrestores",
    namespaced,
    doc = "Creates a new EtcdCluster whose every member starts from one backup, after checking the backup against its sha256. API-compatible with the CoreOS etcd-operator's EtcdRestore; unlike CoreOS it never replaces an existing cluster.",
    status = "EtcdRestoreStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.etcdCluster.name"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"boolean","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreSpec {
    /// Where the backup is: `S3`, `ABS`, `GCS` (CoreOS' values) or the additive `PVC`, with
    /// the block of the same name (`s3`, `abs`, `gcs`, `pvc`) naming the backup object. Mirrors
    /// CoreOS `spec.backupStorageType`.
    #[serde(default)]
    pub backup_storage_type: String,
    #[serde(flatten)]
    pub source: BackupSource,
    /// The EtcdCluster to create. It must not exist yet (or be the one this restore made): an
    /// existing cluster is never replaced, the restore waits until you delete it. Mirrors
    /// CoreOS `spec.etcdCluster` (CoreOS deleted and re-created an existing cluster).
    #[serde(default)]
    pub etcd_cluster: EtcdClusterRef,
    /// Additive: restore the state at a revision or a moment from the continuous archive of an
    /// EtcdBackup (`spec.continuous`) instead of one snapshot. The storage block then names the
    /// snapshot series (the EtcdBackup's own `path`, not one snapshot); the restore replays the
    /// archived changes onto the newest snapshot at or before the target, writes the result as
    /// a new snapshot under `<path>.restores/` and creates the cluster from that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTime>,
}

/// Where in the archived history to restore to: exactly one of `revision` and `time`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PointInTime {
    /// The state right after this revision of the archived cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub revision: Option<i64>,
    /// The state at this moment (RFC 3339): every change the archiver had received by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// The etcd cluster ID (hex, as the EtcdCluster's `status.clusterId`) whose history to
    /// restore, when the series holds more than one cluster's (a cluster restored earlier and
    /// archived under the same path). Default: the only one that covers the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_id: Option<String>,
}

/// Reference to an EtcdCluster in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EtcdClusterRef {
    /// Name of the EtcdCluster to create in this namespace. Mirrors CoreOS
    /// `spec.etcdCluster.name`.
    #[serde(default)]
    pub name: String,
    /// Additive: spec of the cluster to create (`restore` is filled in by the operator); its
    /// version must be of the backup's minor version or the next one. Default: 3 members of
    /// the etcd version the backup was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<crate::cluster::EtcdClusterSpec>,
}

/// Outcome of the restore.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreStatus {
    /// The cluster was created from the verified backup. Mirrors CoreOS `status.succeeded`.
    #[serde(default)]
    pub succeeded: bool,
    /// Why the restore failed or waits (a missing backup, a checksum mismatch, an existing
    /// cluster). Mirrors CoreOS `status.reason`.
    #[serde(default)]
    pub reason: String,
    /// Additive: `Verifying`, `Restoring`, `Restored` or `Failed`.
    #[serde(default)]
    pub phase: String,
    /// Additive: hex sha256 of the verified backup.
    #[serde(default)]
    pub sha256: String,
    /// Additive: size of the verified backup, in bytes.
    #[serde(default)]
    pub size: i64,
    /// Additive: etcd version the backup was taken from.
    #[serde(default)]
    pub etcd_version: String,
    /// Additive: store revision of the backup; the restored cluster starts there.
    #[serde(default)]
    pub etcd_revision: i64,
    /// Additive: with `spec.pointInTime`, the snapshot the replay wrote (`s3://…`), which
    /// the cluster's members restore; its revision is `etcdRevision`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub restored_from: String,
    /// Additive: the generation of the spec the status describes.
    #[serde(default)]
    pub observed_generation: i64,
    /// Additive: conditions of the restore, in the EtcdCluster's shape.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

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
    doc = "Creates an EtcdCluster from a backup.",
    status = "EtcdRestoreStatus",
    printcolumn = r#"{"name":"Cluster","type":"string","jsonPath":".spec.etcdCluster.name"}"#,
    printcolumn = r#"{"name":"Succeeded","type":"boolean","jsonPath":".status.succeeded"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreSpec {
    /// `S3`, `ABS`, `GCS` or `PVC`.
    #[serde(default)]
    pub backup_storage_type: String,
    #[serde(flatten)]
    pub source: BackupSource,
    /// The EtcdCluster to create (it must not exist yet, or be the one this restore made).
    #[serde(default)]
    pub etcd_cluster: EtcdClusterRef,
}

/// Reference to an EtcdCluster in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EtcdClusterRef {
    #[serde(default)]
    pub name: String,
    /// Additive: spec of the cluster to create (`restore` is filled in by the operator).
    /// Default: 3 members of the etcd version the backup was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<crate::cluster::EtcdClusterSpec>,
}

/// Outcome of the restore.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdRestoreStatus {
    #[serde(default)]
    pub succeeded: bool,
    #[serde(default)]
    pub reason: String,
    /// Additive: `Verifying`, `Restoring`, `Restored` or `Failed`.
    #[serde(default)]
    pub phase: String,
    /// Additive: the verified backup.
    #[serde(default)]
    pub sha256: String,
    #[serde(default)]
    pub size: i64,
    #[serde(default)]
    pub etcd_version: String,
    #[serde(default)]
    pub etcd_revision: i64,
    /// Additive: the generation of the spec the status describes.
    #[serde(default)]
    pub observed_generation: i64,
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

//! The `etcd.database.coreos.com/v1beta2` API, field for field compatible with the archived
//! CoreOS etcd-operator so that existing manifests apply verbatim. Fields this project adds are
//! marked "additive" in their docs; none of the CoreOS fields changed meaning or shape.
//!
//! This crate holds types only: no I/O, no defaults that need a cluster.

pub mod backup;
pub mod cluster;
pub mod condition;
pub mod restore;

pub use backup::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
pub use cluster::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus};
pub use condition::Condition;
pub use restore::{EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus};

/// API group of every kind in this crate.
pub const GROUP: &str = "etcd.database.coreos.com";
/// The one served and stored version.
pub const VERSION: &str = "v1beta2";
/// Annotation that makes a namespaced operator started with `-cluster-wide` manage the object.
pub const SCOPE_ANNOTATION: &str = "etcd.database.coreos.com/scope";
/// Value of [`SCOPE_ANNOTATION`] for cluster-wide management.
pub const SCOPE_CLUSTERWIDE: &str = "clusterwide";

/// Every CustomResourceDefinition this API defines, in installation order.
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![EtcdCluster::crd(), EtcdBackup::crd(), EtcdRestore::crd()]
}

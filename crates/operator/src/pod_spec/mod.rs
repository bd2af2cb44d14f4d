//! Pure builders for the Kubernetes objects of one etcd cluster: member pods, their
//! PersistentVolumeClaims, and the peer and client Services.
//!
//! Here: labels, owner reference, the member PVC. [`member`]: the member pod (etcd's command
//! line, probes, init containers); [`placement`]: where members are scheduled (spreading,
//! anti-affinity); [`services`]: the peer and client Services.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

use crate::naming::{
    self, APP_LABEL, BOOTSTRAP_ANNOTATION, CLUSTER_LABEL, CLUSTER_UID_LABEL, MEMBER_ANNOTATION, PEER_URL_ANNOTATION,
};
use crate::planner::NewMember;
use crate::validation::Desired;

mod member;
mod placement;
mod services;

pub use member::{HEALTH_PATH, etcd_command, health_exclude_is_broken, member_pod};
pub use services::{client_service, peer_service};

/// Where etcd keeps its data inside the container.
pub const DATA_MOUNT: &str = "/var/etcd";
/// The member pod's data volume (CoreOS' name too): an emptyDir or the member's claim. Other
/// claims a pod may mount (a restore's backup volume) are not its data.
pub const DATA_VOLUME: &str = "etcd-data";
pub const DATA_DIR: &str = "/var/etcd/data";

/// Labels every object of the cluster carries (CoreOS' pair).
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.0.to_string(), APP_LABEL.1.to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

/// Labels of member pods and PVCs, and the Services' selector: CoreOS' pair plus the
/// EtcdCluster's UID, so that pods of an earlier cluster of the same name (left behind by
/// `kubectl delete --cascade=orphan`) never serve behind this one's Services.
pub fn member_labels(c: &EtcdCluster) -> BTreeMap<String, String> {
    let mut l = selector_labels(&cluster_name(c));
    l.insert(CLUSTER_UID_LABEL.to_string(), c.meta().uid.clone().unwrap_or_default());
    l
}

/// [`member_labels`] and the serving label: what member pods carry while they take client
/// traffic, and what the client Service selects on.
pub fn serving_labels(c: &EtcdCluster) -> BTreeMap<String, String> {
    let mut l = member_labels(c);
    l.insert(naming::SERVING_LABEL.to_string(), "true".into());
    l
}

/// Controller owner reference to the EtcdCluster: deleting it deletes everything it made.
pub fn owner_ref(c: &EtcdCluster) -> OwnerReference {
    c.controller_owner_ref(&()).expect("EtcdCluster from the API has a name and uid")
}

fn meta(c: &EtcdCluster, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: c.meta().namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref(c)]),
        ..Default::default()
    }
}

fn cluster_name(c: &EtcdCluster) -> String {
    c.meta().name.clone().unwrap_or_default()
}

/// The PVC of a PVC-backed member, from `spec.pod.persistentVolumeClaimSpec`. Its annotations
/// name the member and its peer URL, so the member can be restarted on it when no member
/// answers and no pod is left.
pub fn member_pvc(c: &EtcdCluster, d: &Desired, m: &NewMember) -> Option<PersistentVolumeClaim> {
    let spec = d.pod.persistent_volume_claim_spec.clone()?;
    let peer = m.initial_cluster.iter().find(|(n, _)| *n == m.name).map(|(_, u)| u.clone()).unwrap_or_default();
    let mut annotations =
        BTreeMap::from([(MEMBER_ANNOTATION.to_string(), m.name.clone()), (PEER_URL_ANNOTATION.to_string(), peer)]);
    if m.bootstrap {
        annotations.insert(BOOTSTRAP_ANNOTATION.into(), "true".into());
    }
    // A member made as root (restored from a backup volume marked as root's) writes root's
    // data: its volume says so from the start, so it restarts as root (`pod_security`).
    if m.root_data {
        annotations.insert(naming::DATA_OWNER_ANNOTATION.into(), naming::ROOT_DATA_OWNER.into());
    }
    Some(PersistentVolumeClaim {
        metadata: ObjectMeta {
            annotations: Some(annotations),
            ..meta(c, &naming::pvc_name(&m.name), member_labels(c))
        },
        spec: Some(spec),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests;

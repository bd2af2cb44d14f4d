//! Pure builders for the Kubernetes objects of one etcd cluster: member pods, their
//! PersistentVolumeClaims, and the peer and client Services.
//!
//! Here: the member PVC (labels and the owner reference are `naming`'s). [`member`]: the member pod (etcd's command
//! line, probes, init containers); [`placement`]: where members are scheduled (spreading,
//! anti-affinity); [`services`]: the peer and client Services.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::naming::cluster_name;
use crate::naming::{self, BOOTSTRAP_ANNOTATION, MEMBER_ANNOTATION, PEER_URL_ANNOTATION};
pub use crate::naming::{member_labels, owner_ref, selector_labels, serving_labels};
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

fn meta(c: &EtcdCluster, name: &str, labels: BTreeMap<String, String>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: c.meta().namespace.clone(),
        labels: Some(labels),
        owner_references: Some(vec![owner_ref(c)]),
        ..Default::default()
    }
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

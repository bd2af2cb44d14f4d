//! A member PVC as the planner sees it ([`PvcState`]): its member, the peer URL it records,
//! whether a bootstrap made it, its size, root's data, whether it was retired.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use crate::naming::{self, BOOTSTRAP_ANNOTATION, MEMBER_ANNOTATION, PEER_URL_ANNOTATION};
use crate::observed::PvcState;

/// Kubernetes' view of a member PVC (one the cluster owns: observation selects them).
pub fn pvc_state(v: &PersistentVolumeClaim) -> Option<PvcState> {
    let name = v.name_any();
    // Owned by the cluster and labelled as its: a member's claim, named `<member>-data` by this
    // operator or `<member>` by the CoreOS operator.
    let member = v.annotations().get(MEMBER_ANNOTATION).cloned().unwrap_or_else(|| naming::member_of_pvc(&name).into());
    Some(PvcState {
        member,
        peer_url: v.annotations().get(PEER_URL_ANNOTATION).cloned(),
        deleting: v.metadata.deletion_timestamp.is_some(),
        bootstrap: v.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        storage: v
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
            .map(|q| q.0.clone()),
        root_data: v.annotations().get(naming::DATA_OWNER_ANNOTATION).is_some_and(|o| o == naming::ROOT_DATA_OWNER),
        retired: v.annotations().get(naming::RETIRED_ANNOTATION).cloned(),
        name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The PVC's data-owner mark reads as root's data only for "0".
    #[test]
    fn the_root_data_mark_is_read() {
        let pvc = |owner: Option<&str>| PersistentVolumeClaim {
            metadata: kube::api::ObjectMeta {
                name: Some("ex-a-data".into()),
                annotations: owner.map(|o| [(naming::DATA_OWNER_ANNOTATION.to_string(), o.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(pvc_state(&pvc(Some("0"))).unwrap().root_data);
        assert!(!pvc_state(&pvc(Some("65532"))).unwrap().root_data);
        assert!(!pvc_state(&pvc(None)).unwrap().root_data);
    }

    /// The claims the CoreOS operator made with `spec.pod.persistentVolumeClaimSpec`
    /// (`k8sutil.NewEtcdPodPVC`): named after the member (`PVCNameFromMember`), CoreOS' two
    /// labels and the owner reference, no annotation. They hold that member's data.
    #[test]
    fn a_claim_the_coreos_operator_made_is_its_members() {
        let coreos: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ex-4kd9qnfq2b", "labels": {"app": "etcd", "etcd_cluster": "ex"},
                         "ownerReferences": [{"apiVersion": "etcd.database.coreos.com/v1beta2",
                             "kind": "EtcdCluster", "name": "ex", "uid": "u1", "controller": true}]},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
        let v = pvc_state(&coreos).expect("a member's claim");
        assert_eq!((v.member.as_str(), v.name.as_str()), ("ex-4kd9qnfq2b", "ex-4kd9qnfq2b"));
        assert!(!v.bootstrap && v.peer_url.is_none() && v.retired.is_none(), "{v:?}");
        assert_eq!(v.storage.as_deref(), Some("1Gi"));
        // This operator's own names and its annotation are read as before.
        let ours = |name: &str, member: Option<&str>| PersistentVolumeClaim {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                annotations: member.map(|m| [(MEMBER_ANNOTATION.to_string(), m.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(pvc_state(&ours("ex-abcde-data", None)).unwrap().member, "ex-abcde");
        assert_eq!(pvc_state(&ours("anything", Some("ex-abcde"))).unwrap().member, "ex-abcde");
    }

    #[test]
    fn a_retired_claim_says_why() {
        let mut v = PersistentVolumeClaim::default();
        v.metadata.name = Some("ex-a-data".into());
        v.metadata.annotations = Some([(naming::RETIRED_ANNOTATION.to_string(), "emptied".to_string())].into());
        assert_eq!(pvc_state(&v).unwrap().retired.as_deref(), Some("emptied"));
    }
}

//! A member PVC as the planner sees it ([`PvcState`]): its member, the peer URL it records,
//! whether a bootstrap made it, its size, root's data.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;

use crate::naming::{self, BOOTSTRAP_ANNOTATION, MEMBER_ANNOTATION, PEER_URL_ANNOTATION};
use crate::observed::PvcState;

/// Kubernetes' view of a member PVC.
pub fn pvc_state(v: &PersistentVolumeClaim) -> Option<PvcState> {
    let name = v.name_any();
    let member =
        v.annotations().get(MEMBER_ANNOTATION).cloned().or_else(|| naming::member_of_pvc(&name).map(str::to_string))?;
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
}

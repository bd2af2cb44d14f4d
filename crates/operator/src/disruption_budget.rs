//! The PodDisruptionBudget of each cluster: voluntary disruptions (a `kubectl drain`, a node
//! upgrade, the cluster autoscaler) take at most one member at a time.
//!
//! Choice: `minAvailable: size − 1` (an integer), i.e. "at most one member down", counting a
//! member that is already down. Not `maxUnavailable: 1`: for pods whose controller is a custom
//! resource the disruption controller needs a scale subresource to turn `maxUnavailable` into a
//! count, and without it allows no eviction at all. Not `minAvailable: quorum`: with 5 members
//! that allows two down at once, leaving a cluster one failure from losing its quorum. A
//! one-member cluster on an emptyDir gets `minAvailable: 1` (an eviction would delete the only
//! copy of its data; drain waits until the user scales up or moves to a PVC); on a PVC it gets
//! 0 (the member restarts on its volume).
//!
//! The API version is found through discovery at start: `policy/v1` (Kubernetes 1.21+), else
//! `policy/v1beta1`, else none (reported once; clusters run without a budget).

use etcd_operator_api::EtcdCluster;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::observed::Observed;
use crate::pod_spec;

/// `minAvailable` for the cluster as observed, `None` when there is nothing to protect yet
/// (the spec is invalid).
pub fn min_available(o: &Observed) -> Option<i32> {
    let d = o.desired.as_ref().ok()?;
    let size = d.size as i32;
    Some(match size {
        1 if d.pod.persistent_volume_claim_spec.is_some() => 0,
        1 => 1,
        n => n - 1,
    })
}

/// The budget object for `cluster` in the given API version (both versions have this shape).
pub fn budget(cluster: &EtcdCluster, ar: &ApiResource, min_available: i32) -> serde_json::Value {
    let name = cluster.name_any();
    let labels = pod_spec::member_labels(cluster);
    serde_json::json!({
        "apiVersion": ar.api_version,
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace(),
            "labels": pod_spec::selector_labels(&name),
            "ownerReferences": [pod_spec::owner_ref(cluster)],
        },
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": labels},
        },
    })
}

/// `minAvailable` of an existing budget object.
pub fn min_available_of(pdb: &DynamicObject) -> Option<i32> {
    pdb.data.get("spec")?.get("minAvailable")?.as_i64().map(|v| v as i32)
}

/// Which PodDisruptionBudget API the server serves.
pub async fn discover(client: &Client) -> Option<ApiResource> {
    for version in ["v1", "v1beta1"] {
        let gv = format!("policy/{version}");
        match client.list_api_group_resources(&gv).await {
            Ok(list) if list.resources.iter().any(|r| r.name == "poddisruptionbudgets") => {
                return Some(ApiResource {
                    group: "policy".into(),
                    version: version.into(),
                    api_version: gv,
                    kind: "PodDisruptionBudget".into(),
                    plural: "poddisruptionbudgets".into(),
                });
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(group_version = %gv, error = %e, "not served"),
        }
    }
    None
}

/// Create or update the cluster's budget (server-side apply).
pub async fn apply(client: &Client, cluster: &EtcdCluster, ar: &ApiResource, min_available: i32) -> kube::Result<()> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
    let obj = budget(cluster, ar, min_available);
    api.patch(&cluster.name_any(), &PatchParams::apply(crate::OPERATOR_NAME).force(), &Patch::Apply(&obj)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::validate;
    use etcd_operator_api::EtcdClusterSpec;

    fn observed(size: i32, pvc: bool) -> Observed {
        let mut spec = EtcdClusterSpec { size, ..Default::default() };
        if pvc {
            spec.pod = Some(etcd_operator_api::cluster::PodPolicy {
                persistent_volume_claim_spec: Some(Default::default()),
                ..Default::default()
            });
        }
        Observed { desired: validate("ex", &spec), ..Default::default() }
    }

    /// Evictions allowed at once = members − minAvailable (when all are up).
    #[test]
    fn at_most_one_member_may_be_evicted_and_never_the_only_copy() {
        for size in 2..=7 {
            let min = min_available(&observed(size, false)).unwrap();
            assert_eq!(size - min, 1, "size {size}: exactly one eviction at a time");
            assert!(min > size / 2 || size == 2, "size {size}: a quorum stays up");
        }
        assert_eq!(min_available(&observed(1, false)), Some(1), "emptyDir: the pod is the only copy");
        assert_eq!(min_available(&observed(1, true)), Some(0), "PVC: the member restarts on its volume");
        assert_eq!(min_available(&Observed::default()), None, "no valid spec: nothing to protect yet");
    }

    #[test]
    fn the_budget_selects_exactly_the_members_of_its_cluster() {
        let mut c = EtcdCluster::new("ex", EtcdClusterSpec { size: 3, ..Default::default() });
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        let ar = ApiResource {
            group: "policy".into(),
            version: "v1beta1".into(),
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        };
        let b = budget(&c, &ar, 2);
        assert_eq!(b["apiVersion"], "policy/v1beta1");
        assert_eq!(b["spec"]["minAvailable"], 2);
        let sel = b["spec"]["selector"]["matchLabels"].as_object().unwrap();
        for (k, v) in pod_spec::member_labels(&c) {
            assert_eq!(sel[&k], v.as_str(), "selects on {k}");
        }
        assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    }
}

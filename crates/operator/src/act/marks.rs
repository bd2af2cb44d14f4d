//! Writing the durable marks (`marks`) onto the EtcdCluster and the serving labels onto
//! member pods that predate them. I/O: Kubernetes API.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::{Error, ignore_404};

/// Write the durable marks (`marks::cluster_annotations`), label member pods that predate the
/// cluster-UID label, and drop the version-changed-at mark of upgraded members that are back
/// (`marks::upgrades_confirmed`); fence and serve again the member pods `fencing` says.
/// Bookkeeping beside the planned step: it changes no pod's spec
/// or member.
pub async fn record_marks(
    client: &Client,
    cluster: &EtcdCluster,
    annotations: &crate::marks::AnnotationChanges,
    unlabelled: &[String],
    confirmed: &[String],
    fencing: &crate::fencing::Fencing,
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    if !annotations.is_empty() {
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        Api::<EtcdCluster>::namespaced(client.clone(), &ns)
            .patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let labels = crate::naming::serving_labels(cluster);
    for p in unlabelled {
        // Served again: a drain's mark goes with it (the next drain writes its own).
        let patch = serde_json::json!({"metadata": {
            "labels": labels,
            "annotations": {crate::naming::DRAINED_AT_ANNOTATION: null},
        }});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    // Fencing: the label the client Service selects on, and the marks that say why (a fenced
    // member counts as drained long ago should it leave later).
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    // Counted again on the pods as the API server has them now: the cache may not show a fence
    // (or a drain) written a moment ago. (At most one fence per reconcile: one list.)
    let live = match fencing.fence.is_empty() {
        true => Vec::new(),
        false => {
            let lp = kube::api::ListParams::default().labels(&format!(
                "{}={}",
                crate::naming::CLUSTER_LABEL,
                crate::naming::cluster_name(cluster)
            ));
            pods.list(&lp).await?.items
        }
    };
    for p in &fencing.fence {
        let serving = live
            .iter()
            .filter(|x| fencing.voters.contains(&x.name_any()) && x.name_any() != *p)
            .filter(|x| x.metadata.deletion_timestamp.is_none() && crate::observe::is_ready(x))
            .filter(|x| x.labels().get(crate::naming::SERVING_LABEL).is_none_or(|v| v == "true"))
            .count();
        if serving < fencing.quorum {
            tracing::warn!(pod = %p, serving, quorum = fencing.quorum, "not fenced: the pods as the API server has them leave too few serving");
            continue;
        }
        let mut labels = labels.clone();
        labels.insert(crate::naming::SERVING_LABEL.to_string(), "false".to_string());
        let patch = serde_json::json!({"metadata": {
            "labels": labels,
            "annotations": {crate::naming::FENCED_AT_ANNOTATION: now, crate::naming::DRAINED_AT_ANNOTATION: now},
        }});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    for p in &fencing.unfence {
        let patch = serde_json::json!({"metadata": {
            "labels": labels,
            "annotations": {crate::naming::FENCED_AT_ANNOTATION: null, crate::naming::DRAINED_AT_ANNOTATION: null},
        }});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    for p in confirmed {
        let patch = serde_json::json!({"metadata": {"annotations": {crate::naming::VERSION_CHANGED_ANNOTATION: null}}});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    Ok(())
}

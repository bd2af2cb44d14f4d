//! Writing the durable marks (`marks`) onto the EtcdCluster and the serving labels onto
//! member pods that predate them. I/O: Kubernetes API.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::{Error, ignore_404};

/// Write the durable marks (`marks::cluster_annotations`), label member pods that predate the
/// cluster-UID label, and drop the version-changed-at mark of upgraded members that are back
/// (`marks::upgrades_confirmed`). Bookkeeping beside the planned step: it changes no pod's spec
/// or member.
pub async fn record_marks(
    client: &Client,
    cluster: &EtcdCluster,
    annotations: &crate::marks::AnnotationChanges,
    unlabelled: &[String],
    confirmed: &[String],
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
        let patch = serde_json::json!({"metadata": {"labels": labels}});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    for p in confirmed {
        let patch = serde_json::json!({"metadata": {"annotations": {crate::naming::VERSION_CHANGED_ANNOTATION: null}}});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    Ok(())
}

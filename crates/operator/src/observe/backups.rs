//! What observation reads of the cluster's backups: the newest backup of an EtcdBackup (a
//! `FromBackup` recovery's source), and whether a backup pod of the cluster runs now.

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::observed::BackupPoint;

/// The newest backup of an EtcdBackup, as a restore source, with what it backs up (the planner
/// checks that it is this cluster).
pub(super) async fn newest_backup(client: &kube::Client, namespace: &str, name: &str) -> Result<BackupPoint, String> {
    let api: kube::Api<etcd_operator_api::EtcdBackup> = kube::Api::namespaced(client.clone(), namespace);
    let b = api.get(name).await.map_err(|e| format!("cannot be read: {e}"))?;
    let st = b.status.unwrap_or_default();
    let (path, sha256, revision) = match st.history.first() {
        Some(h) => (h.path.clone(), h.sha256.clone(), h.etcd_revision),
        None if !st.sha256.is_empty() => (st.path.clone(), st.sha256.clone(), st.etcd_revision),
        None => return Err("has no successful backup yet".into()),
    };
    let base = crate::backup::location::Location::of(&b.spec.storage_type, &b.spec.source)?;
    let (bucket, key) = path
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .ok_or_else(|| format!("backup path {path:?} is not <scheme>://<bucket>/<key>"))?;
    let location = crate::backup::location::Location { bucket: bucket.to_string(), ..base.with_key(key.to_string()) };
    let root_volume = volume_marked_root(client, namespace, &location).await.map_err(|e| format!("its {e}"))?;
    Ok(BackupPoint {
        restore: crate::validation::Restore { location, source: b.spec.source.clone(), sha256, root_volume },
        revision,
        cluster_name: b.spec.cluster_name.clone(),
        endpoints: b.spec.etcd_endpoints.clone(),
    })
}

/// Whether a backup `location` is a PVC marked as root's (`backup::volume_owner`): the member
/// that restores from it runs as root. Not a PVC, or no such claim: false.
pub(super) async fn volume_marked_root(
    client: &kube::Client,
    namespace: &str,
    location: &crate::backup::location::Location,
) -> Result<bool, String> {
    if location.kind != crate::backup::location::Kind::Pvc {
        return Ok(false);
    }
    let api: kube::Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        kube::Api::namespaced(client.clone(), namespace);
    let pvc = api
        .get_metadata_opt(&location.bucket)
        .await
        .map_err(|e| format!("backup volume {} cannot be read: {e}", location.bucket))?;
    Ok(crate::backup::volume_owner::marked_root(pvc.as_ref().and_then(|p| p.metadata.annotations.as_ref())))
}

/// A backup pod of this cluster that runs now (an API read, not the watch caches: backup pods
/// are not watched by this controller). An error counts as one running: maintenance waits. The
/// continuous archiver runs all the time and takes no snapshot: it does not count (maintenance
/// would never run beside an archive).
pub(super) async fn running_backup(client: &kube::Client, namespace: &str, cluster: &str) -> Option<String> {
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    let lp = kube::api::ListParams::default().labels(&format!("{}={cluster}", crate::backup::pods::BACKUP_OF_LABEL));
    match api.list_metadata(&lp).await {
        Ok(l) => l.items.iter().find(|p| holds_maintenance_back(&p.metadata)).map(|p| p.name_any()),
        Err(e) => Some(format!("(unknown: listing backup pods failed: {e})")),
    }
}

/// A pod of an EtcdBackup of the cluster that maintenance waits for: not being deleted, and not
/// the continuous archiver (a snapshot or a restore drill: short, and each streams or ranges
/// the whole key space).
fn holds_maintenance_back(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    let role = m.labels.as_ref().and_then(|l| l.get(crate::backup::archiver_plan::ROLE_LABEL));
    m.deletion_timestamp.is_none() && role.map(String::as_str) != Some(crate::backup::archiver_plan::ROLE_ARCHIVER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn pod(role: Option<&str>) -> ObjectMeta {
        let mut labels =
            std::collections::BTreeMap::from([(crate::backup::pods::BACKUP_OF_LABEL.to_string(), "ex".to_string())]);
        if let Some(r) = role {
            labels.insert(crate::backup::archiver_plan::ROLE_LABEL.to_string(), r.to_string());
        }
        ObjectMeta { name: Some("p".into()), labels: Some(labels), ..Default::default() }
    }

    #[test]
    fn maintenance_waits_for_snapshots_and_drills_not_for_the_archiver() {
        assert!(holds_maintenance_back(&pod(None)), "a backup pod");
        assert!(holds_maintenance_back(&pod(Some(crate::backup::drill::ROLE_DRILL))), "a drill pod");
        assert!(!holds_maintenance_back(&pod(Some(crate::backup::archiver_plan::ROLE_ARCHIVER))), "the archiver");
        let mut going = pod(None);
        going.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        assert!(!holds_maintenance_back(&going), "a pod being deleted");
    }
}

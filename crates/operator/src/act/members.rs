//! Member pods and volumes: create a member (its PVC first), delete one (with or without its
//! volume), and the API-server check that a bootstrap never runs twice. I/O: Kubernetes API.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use super::{Error, Target, ignore_404};
use crate::naming;
use crate::planner::NewMember;
use crate::pod_spec;

/// How long a member leaving gracefully is given to stop before it is removed anyway.
pub(super) const LEAVE_STOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

impl Target<'_> {
    pub(super) async fn create_member(&self, m: &NewMember) -> Result<(), Error> {
        let ns = self.ns();
        // A member restarting on a claim it has (whoever named it) mounts that one; a new
        // member's claim is made with it.
        if m.pvc
            && m.claim.is_none()
            && let Some(pvc) = pod_spec::member_pvc(self.cluster, self.desired(), m)
        {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
            match api.create(&PostParams::default(), &pvc).await {
                Err(kube::Error::Api(s)) if s.code == 409 => {} // restarting on the volume it has
                r => {
                    r?;
                }
            }
        }
        let mut pod = pod_spec::member_pod(self.cluster, self.desired(), m, self.init_image);
        if m.fenced {
            // The marks a fence writes (`act::marks`): fenced now, and drained long ago should
            // it leave later.
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let a = pod.metadata.annotations.get_or_insert_default();
            a.insert(naming::FENCED_AT_ANNOTATION.into(), now.clone());
            a.insert(naming::DRAINED_AT_ANNOTATION.into(), now);
        }
        Api::<Pod>::namespaced(self.client.clone(), &ns).create(&PostParams::default(), &pod).await?;
        Ok(())
    }

    /// Never bootstrap twice: right before a bootstrap, ask the API server itself (the watch
    /// cache may lag, or an expectation may have timed out) whether anything of this cluster
    /// exists or it ever formed.
    pub(super) async fn check_never_bootstrapped(&self) -> Result<(), Error> {
        let ns = self.ns();
        let name = self.cluster.name_any();
        let uid = self.cluster.uid();
        let lp = ListParams::default().labels(&format!("{}={name}", naming::CLUSTER_LABEL));
        let owned = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
            refs.iter().any(|r| Some(&r.uid) == uid.as_ref())
        };
        let pods = Api::<Pod>::namespaced(self.client.clone(), &ns).list_metadata(&lp).await?;
        let pvcs = Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &ns).list_metadata(&lp).await?;
        let left: Vec<String> = pods
            .items
            .iter()
            .map(|o| &o.metadata)
            .chain(pvcs.items.iter().map(|o| &o.metadata))
            .filter(|m| owned(m.owner_references.as_deref().unwrap_or_default()))
            .map(|m| m.name.clone().unwrap_or_default())
            .collect();
        let fresh = Api::<EtcdCluster>::namespaced(self.client.clone(), &ns).get(&name).await?;
        let formed = fresh.annotations().get(naming::CLUSTER_ID_ANNOTATION).cloned().unwrap_or_default();
        let formed =
            if formed.is_empty() { fresh.status.clone().map(|s| s.cluster_id).unwrap_or_default() } else { formed };
        // Formed while the operator never reached etcd: a member pod was seen Ready.
        let formed = match fresh.annotations().get(naming::FORMED_ANNOTATION) {
            Some(evidence) if formed.is_empty() => format!("unknown ({evidence})"),
            _ => formed,
        };
        // A CoreOS-made cluster records no ID; its status shows that it ran.
        let formed = match fresh.status.as_ref() {
            Some(s) if formed.is_empty() && crate::coreos::status_shows_it_ran(s) => {
                "unknown (its status shows it ran)".into()
            }
            _ => formed,
        };
        if !left.is_empty() || !formed.is_empty() {
            return Err(Error::Refused(format!(
                "refusing to bootstrap: the API server shows this cluster's {} {}; the watch cache was stale",
                if formed.is_empty() { "pods/volumes".to_string() } else { format!("cluster ID {formed} and") },
                left.join(", ")
            )));
        }
        Ok(())
    }

    /// Marks the member's volume as holding data only root can use (`pod_security`).
    pub(super) async fn mark_root_data(&self, pod: &str) -> Result<(), Error> {
        let patch = serde_json::json!({"metadata": {"annotations": {
            naming::DATA_OWNER_ANNOTATION: naming::ROOT_DATA_OWNER,
        }}});
        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &self.ns())
            .patch(&self.claim_of(pod), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// The claim of a member: as observed (named by whoever made it: `<member>-data`, the CoreOS
    /// operator's `<member>`), else the name this operator gives one (made a moment ago).
    pub(super) fn claim_of(&self, pod: &str) -> String {
        let o = self.observed;
        o.pvcs.get(pod).or(o.retired_pvcs.get(pod)).map(|v| v.name.clone()).unwrap_or_else(|| naming::pvc_name(pod))
    }

    /// A member that leaves gracefully (`Removal::Leave`): its pod is deleted (its volume kept:
    /// the member is still one), and the member's own endpoint is polled until etcd no longer
    /// answers, at most [`LEAVE_STOP_TIMEOUT`]. Stopped with SIGTERM, etcd finishes the requests
    /// in flight and closes its client connections with a GOAWAY, so a client on it moves to
    /// another member without a failed request. (If it takes longer, the removal that follows
    /// stops it as before.)
    pub(super) async fn stop_gracefully(&self, pod: &str) -> Result<std::time::Duration, Error> {
        let started = std::time::Instant::now();
        self.delete_pod(pod, false).await?;
        let Some(ep) = self.endpoints.get(pod).cloned() else { return Ok(started.elapsed()) };
        while started.elapsed() < LEAVE_STOP_TIMEOUT {
            if crate::etcd::maintenance::db_size(&ep, self.endpoints.access()).await.is_err() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        Ok(started.elapsed())
    }

    /// Deletes a member's pod and, `with_volume`, its claim, unless the API server shows that
    /// claim retired (never deleted by the operator: a person decides).
    pub(super) async fn delete_pod(&self, pod: &str, with_volume: bool) -> Result<(), Error> {
        let ns = self.ns();
        ignore_404(Api::<Pod>::namespaced(self.client.clone(), &ns).delete(pod, &DeleteParams::default()).await)?;
        if with_volume {
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
            let claim = self.claim_of(pod);
            let retired = pvcs.get_metadata_opt(&claim).await?.is_some_and(|c| {
                c.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(naming::RETIRED_ANNOTATION))
            });
            if retired {
                tracing::info!(claim = %claim, "a retired claim is kept");
            } else {
                ignore_404(pvcs.delete(&claim, &DeleteParams::default()).await)?;
            }
        }
        Ok(())
    }
}

/// What a recovery loses, said plainly: the lost members may have acknowledged writes that the
/// data it starts from lacks.
pub(super) fn recovery_note(r: &crate::planner::Recovery, policy: &str) -> String {
    let lost = if r.voters > 0 {
        format!("{} of {} voting members can never come back ({})", r.lost.len(), r.voters, r.lost.join("; "))
    } else {
        r.lost.join("; ")
    };
    format!(
        "quorum lost for good: {lost}. spec.recovery.quorumLoss={policy}: starting a new one-member cluster {} from {} at revision {}; writes the old cluster acknowledged after revision {} are lost. The other members are replaced by new ones as learners",
        r.member.name, r.from, r.revision, r.revision
    )
}

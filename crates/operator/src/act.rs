//! The actor: carries out one planned step against Kubernetes and etcd. Thin on purpose: every
//! decision was made by the planner; this only performs calls and says what it did.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use crate::OPERATOR_NAME;
use crate::etcd::{self, Endpoints};
use crate::naming;
use crate::observed::Observed;
use crate::planner::maintenance::bytes;
use crate::planner::{NewMember, Step};
use crate::pod_spec;
use crate::validation::Desired;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Etcd(#[from] etcd::Error),
    /// A safety check against the API itself (not the watch cache) refused the step.
    #[error("{0}")]
    Refused(String),
}

impl Error {
    /// etcd refused a membership change because a recent one has not settled (it requires its
    /// peers to have been connected for a few seconds): retrying shortly is the remedy.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Etcd(e) if e.to_string().contains("unhealthy cluster"))
    }
}

/// What a step did, for the Event and the log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Done {
    pub reason: &'static str,
    pub note: String,
    /// Pods created or deleted, so the controller can wait for its cache to see them.
    pub created: Vec<String>,
    pub deleted: Vec<String>,
    /// Members defragmented, with the bytes each returned to the disk (for metrics).
    pub defragmented: Vec<(String, u64)>,
    /// A NOSPACE alarm was disarmed.
    pub alarm_recovered: bool,
}

impl Done {
    /// Done, but the cluster still needs a person (reported as a Warning Event).
    pub fn is_warning(&self) -> bool {
        self.reason == "NoSpaceNotRecovered"
    }
}

/// Adapters' inputs that do not come from the planner.
pub struct Target<'a> {
    pub client: &'a Client,
    pub cluster: &'a EtcdCluster,
    pub observed: &'a Observed,
    pub endpoints: &'a Endpoints,
    /// Image for the member pods' DNS-wait init container (this operator's image).
    pub init_image: &'a str,
}

impl Target<'_> {
    fn ns(&self) -> String {
        self.cluster.namespace().unwrap_or_default()
    }

    /// Client endpoints of healthy voters: membership changes go through them.
    fn change_endpoints(&self) -> Vec<String> {
        let Some(e) = &self.observed.etcd else { return vec![] };
        e.voters().filter(|m| m.is_healthy()).filter_map(|m| self.endpoints.get(&m.pod).cloned()).collect()
    }

    fn desired(&self) -> &Desired {
        self.observed.desired.as_ref().expect("the planner only acts on a valid spec")
    }

    async fn create_member(&self, m: &NewMember) -> Result<(), Error> {
        let ns = self.ns();
        if m.pvc {
            if let Some(pvc) = pod_spec::member_pvc(self.cluster, self.desired(), m) {
                let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
                match api.create(&PostParams::default(), &pvc).await {
                    Err(kube::Error::Api(s)) if s.code == 409 => {} // restarting on the volume it has
                    r => {
                        r?;
                    }
                }
            }
        }
        let pod = pod_spec::member_pod(self.cluster, self.desired(), m, self.init_image);
        Api::<Pod>::namespaced(self.client.clone(), &ns).create(&PostParams::default(), &pod).await?;
        Ok(())
    }

    /// Never bootstrap twice: right before a bootstrap, ask the API server itself (the watch
    /// cache may lag, or an expectation may have timed out) whether anything of this cluster
    /// exists or it ever formed.
    async fn check_never_bootstrapped(&self) -> Result<(), Error> {
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

    /// Defragment one member and mark its pod with the time; returns the database file size
    /// before and after.
    async fn defragment(&self, pod: &str) -> Result<(i64, i64, std::time::Duration), Error> {
        let ep = self.endpoints.get(pod).ok_or_else(|| Error::Refused(format!("member {pod} has no address")))?;
        let sizes = etcd::defragment(ep).await?;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = serde_json::json!({"metadata": {"annotations": {naming::DEFRAGMENTED_AT_ANNOTATION: now}}});
        ignore_404(
            Api::<Pod>::namespaced(self.client.clone(), &self.ns())
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await,
        )?;
        Ok(sizes)
    }

    /// NOSPACE: compact (keeping the revision-mode retention), defragment every member that
    /// answers in the planned order, then disarm if every member is far enough below the quota.
    async fn recover_space(&self, r: &crate::planner::SpaceRecovery) -> Result<Done, Error> {
        let endpoints: Vec<String> = r.members.iter().filter_map(|p| self.endpoints.get(p).cloned()).collect();
        let revision = etcd::revision(&endpoints).await?;
        let compact_to = (revision - r.keep_revisions.unwrap_or(0)).max(1);
        etcd::compact(&endpoints, compact_to).await?;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let mark = format!("{revision} {now}");
        let patch = serde_json::json!({"metadata": {"annotations": {naming::NOSPACE_RECOVERY_ANNOTATION: mark}}});
        Api::<EtcdCluster>::namespaced(self.client.clone(), &self.ns())
            .patch(&self.cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        // etcd refuses writes while its database *file* is at the quota: the space compaction
        // freed returns to the disk only by defragmenting. (Every member: what a member reports
        // in use lags its compaction until its next commit.)
        let mut sizes = vec![];
        let mut defragmented = vec![];
        for pod in &r.members {
            match self.defragment(pod).await {
                Ok((before, after, took)) => {
                    sizes.push(format!("{pod} {} → {} in {:.2}s", bytes(before), bytes(after), took.as_secs_f64()));
                    defragmented.push((pod.clone(), (before - after).max(0) as u64));
                }
                Err(e) => sizes.push(format!("{pod} not defragmented ({e})")),
            }
        }
        let mut in_use = 0;
        for ep in &endpoints {
            in_use = in_use.max(etcd::db_size(ep).await?.1);
        }
        let what = format!("compacted to revision {compact_to}; defragmented {}", sizes.join(", "));
        if in_use >= r.disarm_below_bytes {
            return Ok(Done {
                defragmented,
                ..done(
                    "NoSpaceNotRecovered",
                    format!(
                        "NOSPACE: {what}; still {} in use, at or above {} ({}% of the quota): the alarm stays until keys are deleted or the quota is raised",
                        bytes(in_use),
                        bytes(r.disarm_below_bytes),
                        crate::planner::maintenance::DISARM_BELOW_PERCENT
                    ),
                )
            });
        }
        // Every NOSPACE alarm raised by now, not only those planned from: members reach the quota
        // one after another, and one left raised keeps refusing writes.
        let mut raised: Vec<crate::observed::Alarm> = etcd::alarms_of(&endpoints)
            .await?
            .into_iter()
            .filter(|a| a.kind == crate::observed::AlarmKind::NoSpace)
            .collect();
        for a in &r.alarms {
            if !raised.contains(a) {
                raised.push(a.clone());
            }
        }
        for a in &raised {
            etcd::disarm(&endpoints, a).await?;
        }
        // Done: the next NOSPACE episode starts afresh.
        let patch = serde_json::json!({"metadata": {"annotations": {naming::NOSPACE_RECOVERY_ANNOTATION: null}}});
        Api::<EtcdCluster>::namespaced(self.client.clone(), &self.ns())
            .patch(&self.cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let note = format!("NOSPACE alarm disarmed: {what}; {} in use now", bytes(in_use));
        Ok(Done { defragmented, alarm_recovered: true, ..done("NoSpaceRecovered", note) })
    }

    async fn delete_pod(&self, pod: &str, with_volume: bool) -> Result<(), Error> {
        let ns = self.ns();
        ignore_404(Api::<Pod>::namespaced(self.client.clone(), &ns).delete(pod, &DeleteParams::default()).await)?;
        if with_volume {
            let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
            ignore_404(pvcs.delete(&naming::pvc_name(pod), &DeleteParams::default()).await)?;
        }
        Ok(())
    }
}

fn ignore_404<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// What a recovery loses, said plainly: the lost members may have acknowledged writes that the
/// data it starts from lacks.
fn recovery_note(r: &crate::planner::Recovery, policy: &str) -> String {
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

/// Write the durable marks (`marks::cluster_annotations`) and label member pods that predate
/// the cluster-UID label. Bookkeeping beside the planned step: it changes no pod or member.
pub async fn record_marks(
    client: &Client,
    cluster: &EtcdCluster,
    annotations: &crate::marks::AnnotationChanges,
    unlabelled: &[String],
) -> Result<(), Error> {
    let ns = cluster.namespace().unwrap_or_default();
    if !annotations.is_empty() {
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        Api::<EtcdCluster>::namespaced(client.clone(), &ns)
            .patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let labels = pod_spec::serving_labels(cluster);
    for p in unlabelled {
        let patch = serde_json::json!({"metadata": {"labels": labels}});
        ignore_404(pods.patch(p, &PatchParams::default(), &Patch::Merge(&patch)).await)?;
    }
    Ok(())
}

fn done(reason: &'static str, note: String) -> Done {
    Done { reason, note, ..Default::default() }
}

/// Perform `step`. `Wait` does nothing and returns `None`.
pub async fn execute(t: &Target<'_>, step: &Step) -> Result<Option<Done>, Error> {
    let ns = t.ns();
    Ok(Some(match step {
        Step::Wait(_) => return Ok(None),
        Step::CreateServices => {
            let api: Api<Service> = Api::namespaced(t.client.clone(), &ns);
            let pp = PatchParams::apply(OPERATOR_NAME).force();
            for svc in [pod_spec::peer_service(t.cluster), pod_spec::client_service(t.cluster)] {
                api.patch(&svc.name_any(), &pp, &Patch::Apply(&svc)).await?;
            }
            done(
                "ServicesCreated",
                format!(
                    "peer Service {} and client Service {}",
                    t.cluster.name_any(),
                    naming::client_service(&t.cluster.name_any())
                ),
            )
        }
        Step::Bootstrap(members) => {
            t.check_never_bootstrapped().await?;
            // All at once: a static bootstrap forms only when every member runs, so the slowest
            // pod start is what counts. (A partial failure is as after sequential creates: the
            // pods made so far form the cluster or are cleaned out by the next plan.)
            futures::future::try_join_all(members.iter().map(|m| t.create_member(m))).await?;
            let names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
            Done {
                reason: "BootstrapStarted",
                note: format!(
                    "creating a new {}-member cluster at version {}: {}",
                    members.len(),
                    members[0].version,
                    names.join(", ")
                ),
                created: names,
                deleted: vec![],
                ..Default::default()
            }
        }
        Step::AddLearner(m) => {
            let peer = &m.initial_cluster.last().expect("the new member is in its initial cluster").1;
            let id = etcd::add_learner(&t.change_endpoints(), peer).await?;
            t.create_member(m).await?;
            let size = t.observed.etcd.as_ref().map(|e| e.members.len()).unwrap_or_default();
            Done {
                reason: "MemberAdded",
                note: format!(
                    "added learner {} (ID {}) at version {}; members {} → {}",
                    m.name,
                    etcd::hex(id),
                    m.version,
                    size,
                    size + 1
                ),
                created: vec![m.name.clone()],
                deleted: vec![],
                ..Default::default()
            }
        }
        Step::CreatePod(m) => {
            t.create_member(m).await?;
            Done {
                reason: "MemberPodCreated",
                note: format!("created pod for member {} (already registered with etcd)", m.name),
                created: vec![m.name.clone()],
                deleted: vec![],
                ..Default::default()
            }
        }
        Step::Recover(r) => {
            // Never two recoveries: the watch cache of EtcdClusters may not show a record written
            // a moment ago. Ask the API server; a recorded recovery whose member pod exists wins.
            let fresh = Api::<EtcdCluster>::namespaced(t.client.clone(), &ns).get(&t.cluster.name_any()).await?;
            if let Some(rec) = fresh.annotations().get(naming::RECOVERY_ANNOTATION) {
                let member =
                    serde_json::from_str::<crate::planner::recovery::Record>(rec).map(|r| r.member).unwrap_or_default();
                if Api::<Pod>::namespaced(t.client.clone(), &ns).get_opt(&member).await?.is_some() {
                    return Err(Error::Refused(format!(
                        "a recovery is already under way (member {member}); the watch cache was stale"
                    )));
                }
            }
            // Recorded first: should the operator stop right after, the next one knows which pod
            // is the new cluster and asks only it.
            let policy = match &r.member.seed {
                Some(crate::planner::Seed::Member { .. }) => "FromSurvivor",
                _ => "FromBackup",
            };
            let record = serde_json::to_string(&crate::planner::recovery::Record::of(r, policy)).unwrap_or_default();
            let patch = serde_json::json!({"metadata": {"annotations": {naming::RECOVERY_ANNOTATION: record}}});
            Api::<EtcdCluster>::namespaced(t.client.clone(), &ns)
                .patch(&t.cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            t.create_member(&r.member).await?;
            Done {
                reason: "QuorumLossRecoveryStarted",
                note: recovery_note(r, policy),
                created: vec![r.member.name.clone()],
                deleted: vec![],
                ..Default::default()
            }
        }
        Step::Promote { id, pod } => {
            etcd::promote(&t.change_endpoints(), *id).await?;
            done(
                "LearnerPromoted",
                format!("learner {pod} (ID {}) caught up and is now a voting member", etcd::hex(*id)),
            )
        }
        Step::RemoveMember { id, pod, why } => {
            // Never through the member that leaves: it stops as soon as it applies its own
            // removal and answers "server stopped" although the removal went through.
            let others: Vec<String> =
                t.change_endpoints().into_iter().filter(|ep| t.endpoints.get(pod) != Some(ep)).collect();
            etcd::remove(&others, *id).await?;
            t.delete_pod(pod, true).await?;
            Done {
                reason: "MemberRemoved",
                note: format!("removed member {pod} (ID {}): {why}", etcd::hex(*id)),
                created: vec![],
                deleted: vec![pod.clone()],
                ..Default::default()
            }
        }
        Step::UpgradeMember { pod, from, to } => {
            let image = crate::validation::image_for(&t.desired().repository, to);
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            // Only the image changes: the kubelet restarts the etcd container in the same pod,
            // on the same data volume and address.
            let patch = serde_json::json!({
                "metadata": {"annotations": {
                    naming::VERSION_ANNOTATION: to.to_string(),
                    naming::VERSION_CHANGED_ANNOTATION: now,
                }},
                "spec": {"containers": [{"name": "etcd", "image": image}]},
            });
            Api::<Pod>::namespaced(t.client.clone(), &ns)
                .patch(pod, &PatchParams::default(), &Patch::Strategic(&patch))
                .await?;
            done("MemberUpgraded", format!("member {pod}: {from} → {to} (image {image})"))
        }
        Step::MoveLeader { from_pod, to, to_pod, purpose } => {
            let ep = t.endpoints.get(from_pod).cloned().unwrap_or_default();
            etcd::move_leader(&ep, *to).await?;
            done("LeaderMoved", format!("leadership moved from {from_pod} to {to_pod} before {}", purpose.as_str()))
        }
        Step::Defragment { pod, free_bytes } => {
            let (before, after, took) = t.defragment(pod).await?;
            let reclaimed = vec![(pod.clone(), (before - after).max(0) as u64)];
            let note = format!(
                "defragmented member {pod} ({} of its database was unused): {} → {}, {} reclaimed in {:.2}s",
                bytes(*free_bytes),
                bytes(before),
                bytes(after),
                bytes(before - after),
                took.as_secs_f64()
            );
            Done { defragmented: reclaimed, ..done("MemberDefragmented", note) }
        }
        Step::RecoverSpace(r) => t.recover_space(r).await?,
        Step::Drain { pod } => {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = serde_json::json!({"metadata": {
                "labels": {naming::SERVING_LABEL: "false"},
                "annotations": {naming::DRAINED_AT_ANNOTATION: now},
            }});
            Api::<Pod>::namespaced(t.client.clone(), &ns)
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            done("MemberDrained", format!("member {pod} taken out of the client Service before it leaves"))
        }
        Step::DeletePod { pod, why, keep_volume } => {
            t.delete_pod(pod, !keep_volume).await?;
            Done {
                reason: "PodDeleted",
                note: format!("deleted pod {pod}: {why}"),
                created: vec![],
                deleted: vec![pod.clone()],
                ..Default::default()
            }
        }
    }))
}

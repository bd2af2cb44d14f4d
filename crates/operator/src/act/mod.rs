//! The actor: carries out one planned step against Kubernetes and etcd. Thin on purpose: every
//! decision was made by the planner; this only performs calls and says what it did. Here: the
//! dispatch of each `Step`; member pods in `members`, maintenance in `maintenance`, the durable
//! marks in `marks`. I/O: Kubernetes API and etcd.

mod auth;
pub mod auth_secrets;
mod maintenance;
mod marks;
mod members;

pub use marks::record_marks;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::OPERATOR_NAME;
use crate::etcd::{self, Endpoints};
use crate::naming;
use crate::observed::Observed;
use crate::planner::Step;
use crate::planner::maintenance::bytes;
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
    /// Pod annotations written `(pod, key, value)`, so the controller can wait for its cache to
    /// see them (a member defragmented is not defragmented again from a cache that lags).
    pub annotated: Vec<(String, String, String)>,
    /// A NOSPACE alarm was disarmed.
    pub alarm_recovered: bool,
}

impl Done {
    /// Done, but the cluster still needs a person (reported as a Warning Event).
    pub fn is_warning(&self) -> bool {
        // A member running as root where the default is non-root: someone may want to make
        // its data the non-root user's.
        // A retired volume waits for a person to look at it and delete it.
        matches!(self.reason, "NoSpaceNotRecovered" | "MemberRunsAsRoot" | "VolumeRetired")
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

    /// Takes a member pod out of the client Service (the serving label), recording when.
    async fn drain(&self, pod: &str) -> Result<(), Error> {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = serde_json::json!({"metadata": {
            "labels": {naming::SERVING_LABEL: "false"},
            "annotations": {naming::DRAINED_AT_ANNOTATION: now},
        }});
        Api::<Pod>::namespaced(self.client.clone(), &self.ns())
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Client endpoints of healthy voters: membership changes go through them.
    fn change_endpoints(&self) -> Vec<String> {
        let Some(e) = &self.observed.etcd else { return vec![] };
        e.voters().filter(|m| m.is_healthy()).filter_map(|m| self.endpoints.get(&m.pod).cloned()).collect()
    }

    /// [`Self::change_endpoints`], the leader's first: a promotion sent to a follower is
    /// forwarded to the leader without the caller's login, which etcd (3.4 at least) refuses
    /// with authentication on ("request timed out"); a logged-in client talks to the first.
    fn leader_first(&self) -> Vec<String> {
        let mut eps = self.change_endpoints();
        let leader =
            self.observed.etcd.as_ref().and_then(|e| e.leader_member()).and_then(|m| self.endpoints.get(&m.pod));
        if let Some(i) = leader.and_then(|l| eps.iter().position(|e| e == l)) {
            eps.swap(0, i);
        }
        eps
    }

    fn desired(&self) -> &Desired {
        self.observed.desired.as_ref().expect("the planner only acts on a valid spec")
    }
}

fn ignore_404<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
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
                    "creating a new {}-member cluster at version {}: {}{}",
                    members.len(),
                    members[0].version,
                    names.join(", "),
                    restored_as_root(members)
                ),
                created: names,
                deleted: vec![],
                ..Default::default()
            }
        }
        Step::AddLearner(m) => {
            let peer = &m.initial_cluster.last().expect("the new member is in its initial cluster").1;
            let id = etcd::add_learner(&t.change_endpoints(), t.endpoints.access(), peer).await?;
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
                    serde_json::from_str::<crate::observed::RecoveryRecord>(rec).map(|r| r.member).unwrap_or_default();
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
            let record = serde_json::to_string(&crate::observed::RecoveryRecord::of(r, policy)).unwrap_or_default();
            let patch = serde_json::json!({"metadata": {"annotations": {naming::RECOVERY_ANNOTATION: record}}});
            Api::<EtcdCluster>::namespaced(t.client.clone(), &ns)
                .patch(&t.cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            t.create_member(&r.member).await?;
            Done {
                reason: "QuorumLossRecoveryStarted",
                note: format!(
                    "{}{}",
                    members::recovery_note(r, policy),
                    restored_as_root(std::slice::from_ref(&r.member))
                ),
                created: vec![r.member.name.clone()],
                deleted: vec![],
                ..Default::default()
            }
        }
        Step::Promote { id, pod } => {
            etcd::promote(&t.leader_first(), t.endpoints.access(), *id).await?;
            done(
                "LearnerPromoted",
                format!("learner {pod} (ID {}) caught up and is now a voting member", etcd::hex(*id)),
            )
        }
        Step::RemoveMember { id, pod, why, cause } => {
            // Never through the member that leaves: it stops as soon as it applies its own
            // removal and answers "server stopped" although the removal went through.
            let others: Vec<String> =
                t.change_endpoints().into_iter().filter(|ep| t.endpoints.get(pod) != Some(ep)).collect();
            // Leaving gracefully: stopped first, so that its clients move off without a failed
            // request (a member removed first exits at once: "raft: stopped").
            let stopped = match cause {
                crate::planner::Removal::Leave => {
                    let took = t.stop_gracefully(pod).await?;
                    format!(" (stopped first, in {:.1}s)", took.as_secs_f64())
                }
                _ => String::new(),
            };
            etcd::remove(&others, t.endpoints.access(), *id).await?;
            t.delete_pod(pod, true).await?;
            Done {
                reason: "MemberRemoved",
                note: format!("removed member {pod} (ID {}): {why}{stopped}", etcd::hex(*id)),
                created: vec![],
                deleted: vec![pod.clone()],
                ..Default::default()
            }
        }
        Step::UpgradeMember { pod, from, to } => {
            let image = crate::validation::image_for(&t.desired().repository, to);
            // Drained first where another member serves (the planner's `Step::Drain`).
            let drained = t.observed.pods.get(pod).is_some_and(|p| p.serving == Some(false));
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            // Only the image changes: the kubelet restarts the etcd container in the same pod,
            // on the same data volume and address. A drained member stays out of the client
            // Service: its old container answers the readiness probe until the kubelet stops
            // it, so a Service that took it back now would route to a member about to stop.
            // It serves again once back at its new version (`marks::pods_to_label`).
            let patch = upgrade_patch(to, &image, &now);
            Api::<Pod>::namespaced(t.client.clone(), &ns)
                .patch(pod, &PatchParams::default(), &Patch::Strategic(&patch))
                .await?;
            let how = if drained { ", out of the client Service for the restart" } else { "" };
            done("MemberUpgraded", format!("member {pod}: {from} → {to} (image {image}){how}"))
        }
        Step::MoveLeader { from_pod, to, to_pod, purpose } => {
            let ep = t.endpoints.get(from_pod).cloned().unwrap_or_default();
            etcd::move_leader(&ep, t.endpoints.access(), *to).await?;
            let note = match purpose {
                crate::planner::Purpose::Switchover => {
                    format!("leadership moved from {from_pod} to {to_pod}: {}", purpose.as_str())
                }
                _ => format!("leadership moved from {from_pod} to {to_pod} before {}", purpose.as_str()),
            };
            done("LeaderMoved", note)
        }
        Step::Defragment { pod, free_bytes } => {
            let ((before, after, took), at) = match t.defragment(pod).await? {
                maintenance::Defragmented::Done(sizes, at) => (sizes, at),
                maintenance::Defragmented::NotStarted(e) => return Err(e),
            };
            let annotated = vec![(pod.clone(), naming::DEFRAGMENTED_AT_ANNOTATION.to_string(), at)];
            let reclaimed = vec![(pod.clone(), (before - after).max(0) as u64)];
            let note = format!(
                "defragmented member {pod} ({} of its database was unused): {} → {}, {} reclaimed in {:.2}s",
                bytes(*free_bytes),
                bytes(before),
                bytes(after),
                bytes(before - after),
                took.as_secs_f64()
            );
            Done { defragmented: reclaimed, annotated, ..done("MemberDefragmented", note) }
        }
        // Boxed: compaction, defragmentation and alarm calls make a large future.
        Step::RecoverSpace(r) => Box::pin(t.recover_space(r)).await?,
        Step::Auth(a) => Box::pin(t.auth(*a)).await?,
        Step::Drain { pod } => {
            t.drain(pod).await?;
            done("MemberDrained", format!("member {pod} taken out of the client Service before it leaves"))
        }
        Step::UpdatePeerUrls { id, pod, urls } => {
            // The volume's record first: a member restarted while no member answers takes its
            // listener's scheme from it, and must match what the membership says (a record
            // ahead of the membership is moved again by the next reconcile, or set back by
            // `RecordPeerUrl` when no move is due any more; one behind would start a member
            // nobody can dial).
            let patch = serde_json::json!({"metadata": {"annotations": {naming::PEER_URL_ANNOTATION: urls.first()}}});
            Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(t.client.clone(), &ns)
                .patch(&t.claim_of(pod), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            etcd::update_peer_urls(&t.change_endpoints(), t.endpoints.access(), *id, urls).await?;
            done("PeerURLUpdated", format!("member {pod} (ID {}) now has peer URL {}", etcd::hex(*id), urls.join(",")))
        }
        Step::RecordPeerUrl { pod, url } => {
            let patch = serde_json::json!({"metadata": {"annotations": {naming::PEER_URL_ANNOTATION: url}}});
            Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(t.client.clone(), &ns)
                .patch(&t.claim_of(pod), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            done(
                "PeerURLRecorded",
                format!(
                    "volume {} of member {pod} records peer URL {url} again, as the membership has it (a member update had not happened)",
                    t.claim_of(pod)
                ),
            )
        }
        Step::RestartAsRoot { pod, why } => {
            // The mark first: the pod made next reads it (a pod made before the cache shows it
            // runs as the default again, fails the same check and comes back here).
            t.mark_root_data(pod).await?;
            t.delete_pod(pod, false).await?;
            Done {
                reason: "MemberRunsAsRoot",
                note: format!(
                    "member {pod} restarts as root on its volume {} (marked {}={}): {why}",
                    t.claim_of(pod),
                    naming::DATA_OWNER_ANNOTATION,
                    naming::ROOT_DATA_OWNER
                ),
                deleted: vec![pod.clone()],
                ..Default::default()
            }
        }
        Step::RetireVolume { pod, claim, why } => {
            let patch = serde_json::json!({"metadata": {"annotations": {naming::RETIRED_ANNOTATION: why}}});
            Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(t.client.clone(), &ns)
                .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            done(
                "VolumeRetired",
                format!(
                    "volume {claim} of member {pod} is kept but no longer used (annotated {}): {why}. The member is replaced by a new one (or, without a quorum, counts as lost); the operator never deletes the claim: delete it once its data is no longer needed",
                    naming::RETIRED_ANNOTATION
                ),
            )
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

/// What a Bootstrap or recovery note adds for members made as root because they restore from a
/// backup volume marked as root's (`backup::volume_owner`): nothing for any other member.
fn restored_as_root(members: &[crate::planner::NewMember]) -> String {
    let root: Vec<&str> = members
        .iter()
        .filter(|m| m.root_data && (m.seed.is_some() || (m.bootstrap && !m.existing)))
        .map(|m| m.name.as_str())
        .collect();
    if root.is_empty() {
        return String::new();
    }
    format!(
        "; {} {} as root, restoring from a backup volume marked {}={} (files on it only root can use); such a pod is refused where Pod Security restricted is enforced",
        root.join(", "),
        if root.len() == 1 { "runs" } else { "run" },
        naming::DATA_OWNER_ANNOTATION,
        naming::ROOT_DATA_OWNER
    )
}

/// The pod patch that moves a member to version `to` (image `image`) at `now`: the image and
/// the version marks; the serving label and the drain's mark stay as they are.
fn upgrade_patch(to: &crate::version::Version, image: &str, now: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "annotations": {
                naming::VERSION_ANNOTATION: to.to_string(),
                naming::VERSION_CHANGED_ANNOTATION: now,
            },
        },
        "spec": {"containers": [{"name": "etcd", "image": image}]},
    })
}

#[cfg(test)]
mod tests {
    /// The patch that restarts a member on its new image does not put it back in the client
    /// Service: the kubelet stops the old container only after the patch, and it was Ready.
    #[test]
    fn the_upgrade_patch_leaves_a_drained_member_out_of_the_client_service() {
        let to = crate::version::Version::parse("3.7.2").unwrap();
        let patch = super::upgrade_patch(&to, "quay.io/coreos/etcd:v3.7.2", "2026-11-29T03:00:00Z");
        assert!(patch["metadata"]["labels"].is_null(), "{patch}");
        let annotations = patch["metadata"]["annotations"].as_object().unwrap();
        assert!(!annotations.contains_key(crate::naming::DRAINED_AT_ANNOTATION), "{patch}");
        assert_eq!(patch["spec"]["containers"][0]["image"], "quay.io/coreos/etcd:v3.7.2");
    }
}

//! Membership decisions: bootstrap, heal, learners, scale up and down.

use super::{NewMember, Step, WaitReason, initial_cluster_of, peer_of, version_for_new_member, wait};
use crate::naming;
use crate::observed::{EtcdState, MemberState, Observed, PodState};
use crate::validation::Desired;

/// How long a pod that no member claims is left alone before it is deleted. The member list is
/// not linearizable, so a member added a moment ago may be missing from it.
pub const ORPHAN_GRACE_SECS: i64 = 60;

/// A learner is promoted when its raft index is at least this share of the leader's (etcd
/// itself refuses promotion below 90%).
const LEARNER_READY_PERCENT: u64 = 90;

/// No member answered: create a new cluster, wait for one that is forming, or report.
pub(super) fn without_etcd(o: &Observed, d: &Desired) -> Step {
    if o.pods.is_empty() {
        if o.ever_bootstrapped {
            return wait(
                WaitReason::DataLost,
                "every member pod is gone and this cluster held data; the operator does not create an empty cluster in its place. \
                 Restore it with an EtcdRestore, or delete and re-create the EtcdCluster to start empty",
            );
        }
        return bootstrap(o, d);
    }
    if let Some((pod, (reason, msg))) = first_problem(o.pods.values()) {
        if let Some(step) = super::upgrade::failing_member(o, d, pod, reason, msg) {
            return step;
        }
        return wait(WaitReason::MemberFailing, format!("member pod {pod} cannot run: {reason}: {msg}"));
    }
    if !o.ever_bootstrapped {
        // A bootstrap that never formed a cluster holds no data: clear out dead pods so that a
        // fresh bootstrap can run.
        if let Some(p) = o.pods.values().find(|p| p.is_dead() && !p.deleting) {
            return Step::DeletePod {
                pod: p.name.clone(),
                why: format!("bootstrap pod ended ({}) before the cluster formed", p.phase),
                keep_volume: false,
            };
        }
        return wait(
            WaitReason::Bootstrapping,
            format!("waiting for the {} bootstrap members to form a cluster", o.pods.len()),
        );
    }
    let err = o.etcd_error.as_deref().unwrap_or("no member pod has an address");
    wait(WaitReason::NoQuorum, format!("no etcd member answers ({err}); nothing is changed until a quorum is back"))
}

fn bootstrap(o: &Observed, d: &Desired) -> Step {
    let names: Vec<String> = (0..d.size)
        .map(|i| naming::member_name(&o.name, &format!("{}{}", &o.new_member_suffix[..naming::SUFFIX_LEN - 1], i)))
        .collect();
    let initial: Vec<_> = names.iter().map(|n| peer_of(o, d, n)).collect();
    Step::Bootstrap(
        names
            .into_iter()
            .map(|name| NewMember {
                name,
                initial_cluster: initial.clone(),
                existing: false,
                version: d.version.clone(),
                pvc: d.pod.persistent_volume_claim_spec.is_some(),
                bootstrap: true,
            })
            .collect(),
    )
}

fn first_problem<'a>(pods: impl Iterator<Item = &'a PodState>) -> Option<(&'a str, &'a (String, String))> {
    pods.filter(|p| !p.deleting).find_map(|p| p.problem.as_ref().map(|pr| (p.name.as_str(), pr)))
}

/// A voter counts as healthy when etcd says so and its pod is not on its way out.
fn healthy(o: &Observed, m: &MemberState) -> bool {
    m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting && !p.is_dead())
}

/// etcd answered: heal, then reconcile size, one step at a time.
pub(super) fn with_etcd(o: &Observed, d: &Desired, etcd: &EtcdState) -> Step {
    let voters = etcd.voters().count();
    let healthy_voters = etcd.voters().filter(|m| healthy(o, m)).count();
    let quorum = EtcdState::quorum_of(voters);
    if healthy_voters < quorum {
        return wait(
            WaitReason::NoQuorum,
            format!(
                "only {healthy_voters} of {voters} voting members are healthy, a quorum needs {quorum}; nothing is changed until a quorum is back"
            ),
        );
    }

    // A pod that cannot run is surfaced; no other member is touched meanwhile. A learner is the
    // exception: it holds no unique data, so one that cannot start is removed to let a fixed spec
    // try again.
    if let Some((pod, (reason, msg))) = first_problem(o.pods.values()) {
        if let Some(m) = etcd.member_for_pod(pod).filter(|m| m.is_learner) {
            let image_now = crate::validation::image_for(&d.repository, &version_for_new_member(o, d));
            if o.pods.get(pod).is_some_and(|p| p.image != image_now) {
                return Step::RemoveMember {
                    id: m.id,
                    pod: pod.to_string(),
                    why: format!("learner cannot start ({reason}) and the spec changed since it was added"),
                };
            }
        }
        if let Some(step) = super::upgrade::failing_member(o, d, pod, reason, msg) {
            return step;
        }
        return wait(WaitReason::MemberFailing, format!("member pod {pod} cannot run: {reason}: {msg}"));
    }

    if let Some(step) = heal(o, d, etcd) {
        return step;
    }
    if let Some(step) = learner_step(o, d, etcd, healthy_voters, voters) {
        return step;
    }
    if let Some(step) = orphan_pods(o, etcd) {
        return step;
    }
    resize(o, d, etcd, healthy_voters, voters)
}

/// Members whose pod is gone or dead.
fn heal(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    // A member on an emptyDir pod that is being deleted has lost its data already: replace it
    // now rather than after the pod object is gone (which can take long, or never end on a dead
    // node). A PVC-backed member is waited for: it restarts on its volume.
    for m in etcd.voters() {
        if let Some(p) = o.pods.get(&m.pod).filter(|p| p.deleting && !p.uses_pvc) {
            return Some(Step::RemoveMember {
                id: m.id,
                pod: m.pod.clone(),
                why: format!("its pod {} is being deleted and its data with it", p.name),
            });
        }
    }
    if let Some(p) = o.pods.values().find(|p| p.deleting && etcd.member_for_pod(&p.name).is_some()) {
        return Some(wait(WaitReason::PodTerminating, format!("waiting for member pod {} to terminate", p.name)));
    }
    for m in etcd.voters() {
        let pvc = o.pvcs.contains(&naming::pvc_name(&m.pod));
        match o.pods.get(&m.pod) {
            None if pvc && m.started() => {
                // The data survived on the volume: the same member restarts on it.
                return Some(Step::CreatePod(restart_on_volume(o, d, etcd, m)));
            }
            None => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: "its pod is gone and its data with it".into(),
                });
            }
            Some(p) if p.is_dead() && pvc => {
                return Some(Step::DeletePod {
                    pod: p.name.clone(),
                    why: format!("pod {} ended ({}); the member restarts on its volume", p.name, p.phase),
                    keep_volume: true,
                });
            }
            Some(p) if p.is_dead() => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: format!("its pod ended ({}) and its data with it", p.phase),
                });
            }
            Some(_) => {}
        }
    }
    None
}

fn restart_on_volume(o: &Observed, d: &Desired, etcd: &EtcdState, m: &MemberState) -> NewMember {
    NewMember {
        name: m.pod.clone(),
        initial_cluster: initial_cluster_of(etcd),
        existing: true,
        version: version_for_new_member(o, d),
        pvc: true,
        bootstrap: false,
    }
}

/// The (at most one) learner: start it, promote it, or drop it.
fn learner_step(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Option<Step> {
    let l = etcd.learners().next()?;
    if etcd.members.len() > d.size {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!("scaling down to {} members: the learner goes first", d.size),
        });
    }
    let Some(pod) = o.pods.get(&l.pod) else {
        if l.started() {
            return Some(Step::RemoveMember {
                id: l.id,
                pod: l.pod.clone(),
                why: "learner lost its pod after it started".into(),
            });
        }
        return Some(Step::CreatePod(NewMember {
            name: l.pod.clone(),
            initial_cluster: initial_cluster_of(etcd),
            existing: true,
            version: version_for_new_member(o, d),
            pvc: d.pod.persistent_volume_claim_spec.is_some(),
            bootstrap: false,
        }));
    };
    if pod.is_dead() {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!("learner pod ended ({})", pod.phase),
        });
    }
    let leader_index = etcd.leader_member().and_then(|m| m.status.as_ref()).map(|s| s.raft_index);
    let learner_index = l.status.as_ref().filter(|s| s.leader != 0).map(|s| s.raft_index);
    let caught_up = match (leader_index, learner_index) {
        (Some(li), Some(ci)) => ci * 100 >= li * LEARNER_READY_PERCENT,
        _ => false,
    };
    if !caught_up {
        let progress = match (leader_index, learner_index) {
            (Some(li), Some(ci)) => format!("raft index {ci} of the leader's {li}"),
            _ => "not answering yet".into(),
        };
        return Some(wait(WaitReason::LearnerCatchingUp, format!("learner {} is catching up ({progress})", l.pod)));
    }
    // After promotion there is one more voter, and it is healthy.
    if healthy_voters + 1 < EtcdState::quorum_of(voters + 1) {
        return Some(wait(
            WaitReason::WouldLoseQuorum,
            format!("promoting {} would leave too few healthy voters", l.pod),
        ));
    }
    Some(Step::Promote { id: l.id, pod: l.pod.clone() })
}

/// Pods that belong to no member, old enough that the member list cannot simply be lagging.
fn orphan_pods(o: &Observed, etcd: &EtcdState) -> Option<Step> {
    o.pods
        .values()
        .filter(|p| !p.deleting && etcd.member_for_pod(&p.name).is_none())
        .find(|p| p.age_secs >= ORPHAN_GRACE_SECS || p.is_dead())
        .map(|p| Step::DeletePod {
            pod: p.name.clone(),
            why: "it belongs to no etcd member".into(),
            keep_volume: false,
        })
}

fn resize(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Step {
    let members = etcd.members.len();
    if let Some(step) = super::upgrade::in_flight(o, d, etcd) {
        return step;
    }
    // Every voter must be healthy before the next membership change.
    if let Some(m) = etcd.voters().find(|m| !healthy(o, m)) {
        let what = if m.started() { "is not healthy yet" } else { "has not started yet" };
        return wait(WaitReason::MemberStarting, format!("member {} {what}; the next change waits for it", m.pod));
    }
    if members < d.size {
        let name = naming::member_name(&o.name, &o.new_member_suffix);
        let mut initial = initial_cluster_of(etcd);
        initial.push(peer_of(o, d, &name));
        return Step::AddLearner(NewMember {
            name,
            initial_cluster: initial,
            existing: true,
            version: version_for_new_member(o, d),
            pvc: d.pod.persistent_volume_claim_spec.is_some(),
            bootstrap: false,
        });
    }
    if members > d.size {
        return scale_down(etcd, healthy_voters, voters);
    }
    if let Some(step) = super::upgrade::next(o, d, etcd) {
        return step;
    }
    wait(WaitReason::Stable, format!("{members} members healthy"))
}

/// Remove one voter: never the leader while another can go; the newest-named first, so that
/// the order is predictable.
fn scale_down(etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Step {
    let victim = etcd.voters().filter(|m| Some(m.id) != etcd.leader).max_by(|a, b| a.pod.cmp(&b.pod));
    let Some(v) = victim else {
        return wait(WaitReason::WouldLoseQuorum, "the only member left to remove is the leader");
    };
    let after = healthy_voters - usize::from(v.is_healthy());
    if after < EtcdState::quorum_of(voters - 1) {
        return wait(
            WaitReason::WouldLoseQuorum,
            format!("removing {} would leave {after} healthy of {} voters", v.pod, voters - 1),
        );
    }
    Step::RemoveMember { id: v.id, pod: v.pod.clone(), why: format!("scaling down to {} members", voters - 1) }
}

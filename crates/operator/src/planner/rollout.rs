//! Rolling out a change of how member pods are made (`spec.pod`, `spec.repository`,
//! `spec.maintenance`): one member at a time, gated on every voter being healthy, followers
//! first and the leader last (leadership is handed away first).
//!
//! - A member on a PVC restarts on its volume: its pod is deleted (the volume kept) and made
//!   again from the new spec by `volumes::restart`.
//! - A member on an emptyDir holds its data only in its pod, so it is *replaced*: a new member
//!   with the new spec joins as a learner first (one more voter once promoted), then the
//!   outdated member is removed. The cluster never has fewer healthy voters than the spec asks.
//!
//! Pods made before the pod-spec hash existed carry none and are left alone. Pods made before
//! the restricted default (`pod_security`) carry a hash without it: an operator upgrade rolls
//! them like a `spec.pod` change, except members whose volume is marked as root's (they run as
//! before) and specs with a securityContext of the user's.

use super::{NewMember, Purpose, Step, initial_cluster_of, peer_of, version_for_new_member};
use crate::naming;
use crate::observed::{EtcdState, MemberState, Observed};
use crate::validation::Desired;

/// Voters whose pod was made from another spec than the current one, followers first (by
/// name), the leader last.
pub(super) fn outdated<'a>(o: &Observed, d: &Desired, etcd: &'a EtcdState) -> Vec<&'a MemberState> {
    let (hash, root_hash) = (d.pod_hash_for(false), d.pod_hash_for(true));
    let now = |pod: &str| if super::root_data(o, pod) { &root_hash } else { &hash };
    let mut out: Vec<&MemberState> = etcd
        .voters()
        .filter(|m| {
            o.pods.get(&m.pod).is_some_and(|p| !p.deleting && p.spec_hash.as_ref().is_some_and(|h| h != now(&m.pod)))
        })
        .collect();
    out.sort_by(|a, b| (Some(a.id) == etcd.leader).cmp(&(Some(b.id) == etcd.leader)).then(a.pod.cmp(&b.pod)));
    out
}

/// A rollout replaces an emptyDir member: the one extra member (a learner, then a voter) is
/// the replacement, not a surplus to remove.
pub(super) fn replacing(o: &Observed, d: &Desired, etcd: &EtcdState) -> bool {
    etcd.members.len() == d.size + 1
        && outdated(o, d, etcd).iter().any(|m| o.pods.get(&m.pod).is_some_and(|p| !p.uses_pvc))
}

/// Hand leadership away from `leader` before it is restarted or removed.
fn move_leader_from(etcd: &EtcdState, leader: &MemberState) -> Option<Step> {
    let to = etcd.voters().filter(|m| m.id != leader.id && m.is_healthy()).min_by(|a, b| a.pod.cmp(&b.pod))?;
    Some(Step::MoveLeader {
        from_pod: leader.pod.clone(),
        to: to.id,
        to_pod: to.pod.clone(),
        purpose: Purpose::Rollout,
    })
}

/// With one member more than the spec (the replacement is a voter now): the outdated member to
/// remove, the leader last. `None` when nothing is outdated (an ordinary scale-down).
pub(super) fn surplus(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let first = *outdated(o, d, etcd).first()?;
    if Some(first.id) == etcd.leader {
        return move_leader_from(etcd, first);
    }
    if let Some(step) = super::drained_first(o, &first.pod) {
        return Some(step);
    }
    Some(Step::RemoveMember {
        id: first.id,
        pod: first.pod.clone(),
        why: "rolling out a spec.pod change: its replacement with the new spec is a voting member now".into(),
    })
}

/// The next rollout step when membership matches the spec and every voter is healthy.
pub(super) fn next(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let first = *outdated(o, d, etcd).first()?;
    let pod = o.pods.get(&first.pod)?;
    if pod.uses_pvc {
        // Its volume must be there to restart on (a claim the cache does not show, or one going
        // away, is never a reason to delete the pod).
        if o.pvcs.get(&first.pod).is_none_or(|v| v.deleting) {
            return None;
        }
        if Some(first.id) == etcd.leader && etcd.voters().count() > 1 {
            return move_leader_from(etcd, first);
        }
        if let Some(step) = super::drained_first(o, &first.pod) {
            return Some(step);
        }
        return Some(Step::DeletePod {
            pod: first.pod.clone(),
            why: "rolling out a spec.pod change: the member restarts on its volume with the new spec".into(),
            keep_volume: true,
        });
    }
    // emptyDir: a replacement joins first.
    let name = naming::member_name(&o.name, &o.new_member_suffix);
    let mut initial = initial_cluster_of(etcd);
    initial.push(peer_of(o, d, &name));
    Some(Step::AddLearner(NewMember::joining(
        name,
        initial,
        version_for_new_member(o, d),
        d.pod.persistent_volume_claim_spec.is_some(),
    )))
}

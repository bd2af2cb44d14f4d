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

use super::{NewMember, Purpose, Removal, Step, initial_cluster_of, peer_of, version_for_new_member};
use crate::naming;
use crate::observed::{EtcdState, MemberState, Observed};
use crate::validation::Desired;

/// Voters whose pod was made from another spec than the current one (or at another TLS stage,
/// `tls_transition::outdated`), followers first (by name), the leader last. None while the spec
/// is refused with no valid one on record.
pub(super) fn outdated<'a>(o: &Observed, d: &Desired, etcd: &'a EtcdState) -> Vec<&'a MemberState> {
    // A refused spec with no valid one on record is never rolled out (`Observed::no_valid_spec`).
    if o.no_valid_spec {
        return vec![];
    }
    let (hash, root_hash) = (d.pod_hash_for(false), d.pod_hash_for(true));
    let now = |pod: &str| if super::root_data(o, pod) { &root_hash } else { &hash };
    let mut out: Vec<&MemberState> = etcd
        .voters()
        .filter(|m| {
            o.pods.get(&m.pod).is_some_and(|p| {
                !p.deleting
                    && (p.spec_hash.as_ref().is_some_and(|h| h != now(&m.pod))
                        || super::tls_transition::outdated(d, m, p)
                        || super::upgrade::remade_for_three_seven(d, p))
            })
        })
        .collect();
    followers_first(etcd, &mut out);
    out
}

/// Followers first (by name), the leader last.
pub(super) fn followers_first(etcd: &EtcdState, members: &mut [&MemberState]) {
    members.sort_by(|a, b| (Some(a.id) == etcd.leader).cmp(&(Some(b.id) == etcd.leader)).then(a.pod.cmp(&b.pod)));
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
        why: format!("{}: its replacement with the new spec is a voting member now", what(d, first, o)),
        cause: Removal::Rollout,
    })
}

/// What a rollout of `m`'s pod carries out, for Events.
fn what(d: &Desired, m: &MemberState, o: &Observed) -> String {
    let pod = o.pods.get(&m.pod);
    let hash = d.pod_hash_for(super::root_data(o, &m.pod));
    if pod.is_some_and(|p| p.spec_hash.as_ref().is_some_and(|h| *h != hash)) {
        "rolling out a spec.pod change".into()
    } else if let Some(p) = pod.filter(|p| super::upgrade::remade_for_three_seven(d, p)) {
        let (_, notes) = crate::etcd_flags::member_env(&d.pod.etcd_env, &d.version);
        let notes = if notes.is_empty() { "none in spec.pod.etcdEnv".to_string() } else { notes.join(", ") };
        format!(
            "made again before etcd {} (no --experimental-* flags there), without its experimental settings ({}); etcdEnv as members of 3.6+ get it: {notes}",
            d.version,
            p.experimental_flags().join(", ")
        )
    } else {
        "moving to the TLS spec.TLS asks for".into()
    }
}

/// The next rollout step when membership matches the spec and every voter is healthy.
pub(super) fn next(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    roll(o, d, etcd, outdated(o, d, etcd).first()?)
}

/// The next step of making `first`'s pod again under the current spec: restarted on its volume,
/// or replaced (emptyDir).
pub(super) fn roll(o: &Observed, d: &Desired, etcd: &EtcdState, first: &MemberState) -> Option<Step> {
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
            why: format!("{}: the member restarts on its volume with the new spec", what(d, first, o)),
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

//! Members on a node that stopped answering (`spec.recovery.nodeLoss`; what a Node's state
//! proves is in `nodes`).
//!
//! A member counts as lost with its node only when all of these hold: etcd gave no healthy
//! status for it through the operator, its pod is not Ready, and the Node it runs on has not
//! been Ready for the grace period. Then, with a quorum of healthy voters (this is planned
//! after the quorum gate, as a membership change like any other):
//! - a member without a volume is removed; a new one joins as a learner wherever the scheduler
//!   puts it (anti-affinity and zone spreading as for any member), one change at a time. Its
//!   old pod object stays Terminating on the lost node until the node comes back or is deleted;
//!   the member it belonged to is gone, so when its etcd starts again it is refused by the
//!   others.
//! - a member with a volume waits for its node by default (the volume cannot follow it to
//!   another node). With `volumeMembers: Replace`, after `volumeAfterSeconds` its claim is
//!   retired (kept, annotated, named in the `VolumesRetired` condition, never used or deleted
//!   by the operator) and the member removed and replaced like one without a volume.
//!
//! Without a quorum nothing here acts: a node that is not Ready may be one side of a partition
//! whose other side holds the majority, and a minority never replaces anyone. Whether such a
//! member can ever come back is `recovery::lost_why`'s question, answered from the same
//! evidence (`nodes::stopped_evidence`).

use super::{Removal, Step, WaitReason, membership::healthy, wait};
use crate::nodes::NodeState;
use crate::observed::{EtcdState, MemberState, Observed};
use crate::validation::Desired;

/// The node of member `m`'s pod and its state, when the member is out of reach there: etcd
/// gave no healthy status for it, its pod is not Ready, and its Node is not Ready.
fn out_of_reach_on<'a>(o: &'a Observed, m: &MemberState) -> Option<(&'a str, &'a NodeState)> {
    if m.is_healthy() {
        return None;
    }
    let p = o.pods.get(&m.pod).filter(|p| !p.ready)?;
    let node = p.node.as_deref()?;
    let state = o.nodes.get(node).filter(|n| n.exists && !n.ready)?;
    Some((node, state))
}

/// With a quorum of healthy voters: the next step for members lost with their node, if any.
pub(super) fn replace(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize) -> Option<Step> {
    let policy = &d.recovery.node_loss;
    let voters = etcd.voters().count();
    // A member whose claim was retired is removed (it cannot come back on it): after a retire
    // below, or one a restart interrupted.
    for m in &etcd.members {
        let Some(claim) = o.retired_pvcs.get(&m.pod).filter(|_| !o.pvcs.contains_key(&m.pod)) else {
            continue;
        };
        let counted = !m.is_learner && healthy(o, m);
        if counted && healthy_voters - 1 < EtcdState::quorum_of(voters - 1) {
            return Some(wait(
                WaitReason::WouldLoseQuorum,
                format!(
                    "removing member {} (its volume {} was retired) would leave too few healthy voters",
                    m.pod, claim.name
                ),
            ));
        }
        let on_lost_node = out_of_reach_on(o, m).is_some();
        return Some(Step::RemoveMember {
            id: m.id,
            pod: m.pod.clone(),
            why: format!(
                "its volume {} was retired ({}); a new member replaces it",
                claim.name,
                claim.retired.as_deref().unwrap_or("kept for a person to look at")
            ),
            cause: if on_lost_node { Removal::NodeLost } else { Removal::VolumeLost },
        });
    }
    for m in etcd.voters() {
        let Some((node, state)) = out_of_reach_on(o, m) else { continue };
        let secs = state.not_ready_secs.unwrap_or_default();
        // A pod that mounts a claim keeps its data there, whether or not the cache shows that
        // claim (not labelled or owned by the cluster, not seen yet): never the no-volume path.
        let mounts_claim = o.pods.get(&m.pod).is_some_and(|p| p.uses_pvc);
        match o.pvcs.get(&m.pod).filter(|v| !v.deleting) {
            None if mounts_claim => {}
            None if state.not_ready_for(policy.after_secs) => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: format!(
                        "it is out of reach on node {node}, which has not been Ready for {secs}s (spec.recovery.nodeLoss.afterSeconds: {}), and its data (no volume) is there; a new member joins on a live node",
                        policy.after_secs
                    ),
                    cause: Removal::NodeLost,
                });
            }
            Some(v) if policy.volume_after_secs.is_some_and(|after| state.not_ready_for(after)) => {
                return Some(Step::RetireVolume {
                    pod: m.pod.clone(),
                    claim: v.name.clone(),
                    why: format!(
                        "its node {node} has not been Ready for {secs}s and spec.recovery.nodeLoss.volumeMembers is Replace: the member is replaced on a live node"
                    ),
                });
            }
            _ => {}
        }
    }
    None
}

/// Why member `m` is not healthy, when that is its node: the wait that says what happens next.
pub(super) fn waiting_for(o: &Observed, d: &Desired, m: &MemberState) -> Option<Step> {
    let (node, state) = out_of_reach_on(o, m)?;
    let policy = &d.recovery.node_loss;
    let secs = state.not_ready_secs.unwrap_or_default();
    let volume = o.pvcs.get(&m.pod).filter(|v| !v.deleting);
    let mounts_claim = o.pods.get(&m.pod).is_some_and(|p| p.uses_pvc);
    let next = match (volume, policy.volume_after_secs) {
        (None, _) if mounts_claim => {
            "its pod mounts a claim the operator does not see as this cluster's: waiting for the node".to_string()
        }
        (None, _) => format!("it is replaced in {}s unless the node comes back", (policy.after_secs - secs).max(0)),
        (Some(v), Some(after)) => format!(
            "its volume {} is there; spec.recovery.nodeLoss.volumeMembers is Replace: it is replaced in {}s unless the node comes back",
            v.name,
            (after - secs).max(0)
        ),
        (Some(v), None) => format!(
            "its volume {} is there and cannot follow it: waiting for the node (spec.recovery.nodeLoss.volumeMembers: Replace would replace it after volumeAfterSeconds)",
            v.name
        ),
    };
    Some(wait(
        WaitReason::NodeNotReady,
        format!("member {} is out of reach on node {node}, which has not been Ready for {secs}s; {next}", m.pod),
    ))
}

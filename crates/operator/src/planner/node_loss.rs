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
//! A Node object that was deleted while a member with a volume ran there counts like a node
//! not Ready, timed from when the member's pod (made again by the operator) began to wait
//! unscheduled: its volume, bound to that node, cannot be mounted elsewhere, and a node of that
//! name may still register again with the disk.
//!
//! Without a quorum nothing here acts: a node that is not Ready may be one side of a partition
//! whose other side holds the majority, and a minority never replaces anyone. Whether such a
//! member can ever come back is `recovery::lost_why`'s question, answered from the same
//! evidence (`nodes::stopped_evidence`).

use super::{Removal, Step, WaitReason, membership::healthy, wait};
use crate::observed::{EtcdState, MemberState, Observed};
use crate::validation::Desired;

/// Where and for how long member `m` has been out of reach with its node.
struct OutOfReach<'a> {
    node: &'a str,
    /// Seconds the node has not been Ready; for a deleted node, seconds the member's new pod
    /// has waited unscheduled.
    secs: i64,
    /// The Node object was deleted (the member's pod, made again, cannot be scheduled).
    deleted: bool,
}

impl OutOfReach<'_> {
    fn for_at_least(&self, secs: i64) -> bool {
        self.secs >= secs
    }

    /// "node n3, which has not been Ready for 90s" (or was deleted).
    fn describe(&self) -> String {
        if self.deleted {
            format!("node {}, which was deleted (its new pod has not been scheduled for {}s)", self.node, self.secs)
        } else {
            format!("node {}, which has not been Ready for {}s", self.node, self.secs)
        }
    }
}

/// Member `m` out of reach with its node: etcd gave no healthy status for it, its pod is not
/// Ready, and either the Node it runs on is not Ready, or — a member with a volume whose pod
/// was made again and waits unscheduled — the Node it last ran on (the `member-nodes` mark)
/// was deleted, so that its volume, bound to that node, cannot be mounted anywhere.
fn out_of_reach_on<'a>(o: &'a Observed, m: &MemberState) -> Option<OutOfReach<'a>> {
    if m.is_healthy() {
        return None;
    }
    let p = o.pods.get(&m.pod).filter(|p| !p.ready)?;
    if let Some(node) = p.node.as_deref() {
        let state = o.nodes.get(node).filter(|n| n.exists && !n.ready)?;
        return Some(OutOfReach { node, secs: state.not_ready_secs.unwrap_or_default(), deleted: false });
    }
    let node = o.member_nodes.get(&m.pod).filter(|_| p.uses_pvc && !p.deleting)?;
    o.nodes.get(node).filter(|n| !n.exists)?;
    Some(OutOfReach { node, secs: p.unready_secs.unwrap_or(p.age_secs), deleted: true })
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
        let Some(lost) = out_of_reach_on(o, m) else { continue };
        // A pod that mounts a claim keeps its data there, whether or not the cache shows that
        // claim (not labelled or owned by the cluster, not seen yet): never the no-volume path.
        let mounts_claim = o.pods.get(&m.pod).is_some_and(|p| p.uses_pvc);
        match o.pvcs.get(&m.pod).filter(|v| !v.deleting) {
            None if mounts_claim => {}
            None if lost.for_at_least(policy.after_secs) => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: format!(
                        "it is out of reach on {} (spec.recovery.nodeLoss.afterSeconds: {}), and its data (no volume) is there; a new member joins on a live node",
                        lost.describe(),
                        policy.after_secs
                    ),
                    cause: Removal::NodeLost,
                });
            }
            Some(v) if policy.volume_after_secs.is_some_and(|after| lost.for_at_least(after)) => {
                return Some(Step::RetireVolume {
                    pod: m.pod.clone(),
                    claim: v.name.clone(),
                    why: format!(
                        "it is out of reach on {} and spec.recovery.nodeLoss.volumeMembers is Replace: the member is replaced on a live node",
                        lost.describe()
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
    let lost = out_of_reach_on(o, m)?;
    let policy = &d.recovery.node_loss;
    let secs = lost.secs;
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
    Some(wait(WaitReason::NodeNotReady, format!("member {} is out of reach on {}; {next}", m.pod, lost.describe())))
}

//! Node loss and partitions, one row per situation (`node_loss`, `recovery::lost_why`,
//! `nodes::stopped_evidence`). Fixtures of `tests.rs`: `running(n, size)` is `n` healthy voters
//! `ex-m1..` on nodes `n1..`, `ex-m1` leading, every pod Ready.

use super::tests::*;
use super::tests_failures::{lose_pods, retire, with_policy};
use super::*;
use crate::nodes::NodeState;
use crate::validation::{NodeLossSettings, QuorumLossPolicy};

/// `running(n, size)` with each member recorded on its own node `n<i>`, every node Ready.
fn placed(n: u64, size: i32) -> Observed {
    let mut o = running(n, size);
    for i in 1..=n {
        let (pod, node) = (format!("ex-m{i}"), format!("n{i}"));
        o.pods.get_mut(&pod).unwrap().node = Some(node.clone());
        o.member_nodes.insert(pod, node);
    }
    o
}

/// Member `id`'s node stopped answering `secs` ago: the Node is not Ready, the pod not Ready
/// (the node controller marks it so), and etcd gives the operator no status for the member.
fn node_down(o: &mut Observed, id: u64, secs: i64) {
    unhealthy(o, id);
    if let Some(p) = o.pods.get_mut(&format!("ex-m{id}")) {
        p.ready = false;
    }
    o.nodes.insert(
        format!("n{id}"),
        NodeState { exists: true, ready: false, not_ready_secs: Some(secs), out_of_service: false },
    );
}

fn node_loss(o: &mut Observed, after: i64, volume_after: Option<i64>) {
    o.desired.as_mut().unwrap().recovery.node_loss =
        NodeLossSettings { after_secs: after, volume_after_secs: volume_after };
}

fn removed(s: &Step) -> (&str, Removal) {
    match s {
        Step::RemoveMember { pod, cause, .. } => (pod.as_str(), *cause),
        other => panic!("expected RemoveMember, got {other:?}"),
    }
}

#[test]
fn a_member_without_a_volume_is_replaced_once_its_node_has_been_not_ready_for_the_grace() {
    // (seconds its node has not been Ready) → the step.
    for (secs, replaced) in [(0, false), (59, false), (60, true), (3600, true)] {
        let mut o = placed(3, 3);
        node_down(&mut o, 3, secs);
        let s = plan(&o);
        if replaced {
            assert_eq!(removed(&s), ("ex-m3", Removal::NodeLost), "{secs}s: {s:?}");
            let why = match &s {
                Step::RemoveMember { why, .. } => why.clone(),
                _ => unreachable!(),
            };
            assert!(why.contains("node n3") && why.contains(&format!("{secs}s")), "{why}");
        } else {
            assert_eq!(wait_reason(&s), WaitReason::NodeNotReady, "{secs}s: {s:?}");
            assert!(wait_message(&s).contains(&format!("replaced in {}s", 60 - secs)), "{s:?}");
        }
    }
}

#[test]
fn after_the_removal_a_learner_joins_and_the_old_pod_goes_as_an_orphan() {
    // The member is gone from etcd; its pod object remains (Terminating forever on the lost
    // node): the next change adds a learner under a new name, whatever the old pod does.
    let mut o = placed(3, 3);
    node_down(&mut o, 3, 120);
    etcd(&mut o).members.retain(|m| m.id != 3);
    let s = plan(&o);
    assert!(
        matches!(&s, Step::AddLearner(m) if m.name != "ex-m3")
            || matches!(&s, Step::DeletePod { pod, .. } if pod == "ex-m3"),
        "{s:?}"
    );
}

/// The old pod stays Terminating on the lost node for as long as the node is away; it belongs to
/// no member any more and holds nothing up: the learner that replaces it is promoted.
#[test]
fn the_old_pod_stuck_terminating_on_the_lost_node_does_not_hold_the_replacement() {
    let mut o = placed(3, 3);
    node_down(&mut o, 3, 900);
    etcd(&mut o).members.retain(|m| m.id != 3);
    let old = o.pods.get_mut("ex-m3").unwrap();
    (old.deleting, old.deleting_secs) = (true, Some(600));
    add_learner(&mut o, 4, "ex-m4", 1000);
    assert!(matches!(plan(&o), Step::Promote { id: 4, .. }), "{:?}", plan(&o));
    // A member's own pod stuck terminating is still reported.
    let mut o = placed(3, 3);
    let p = o.pods.get_mut("ex-m3").unwrap();
    (p.deleting, p.deleting_secs) = (true, Some(600));
    add_pvc(&mut o, "ex-m3");
    assert_eq!(wait_reason(&plan(&o)), WaitReason::PodStuckTerminating);
}

#[test]
fn a_member_etcd_still_answers_for_or_whose_pod_is_ready_is_not_lost_with_its_node() {
    // The kubelet stopped (the Node is not Ready) but etcd runs and answers: nothing to do.
    let mut o = placed(3, 3);
    node_down(&mut o, 3, 600);
    m(&mut o, 3).status = tests::member(3, "ex-m3", 1, 1000).status;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    // The pod still shows Ready (the node controller has not marked it yet): no removal.
    let mut o = placed(3, 3);
    node_down(&mut o, 3, 600);
    o.pods.get_mut("ex-m3").unwrap().ready = true;
    assert!(!matches!(plan(&o), Step::RemoveMember { .. }), "{:?}", plan(&o));
    // A node that is Ready: whatever ails the member, it is not its node.
    let mut o = placed(3, 3);
    node_down(&mut o, 3, 600);
    o.nodes.get_mut("n3").unwrap().ready = true;
    assert!(!matches!(plan(&o), Step::RemoveMember { cause: Removal::NodeLost, .. }), "{:?}", plan(&o));
}

#[test]
fn two_nodes_of_three_lost_is_no_quorum_and_nobody_is_replaced() {
    let mut o = placed(3, 3);
    node_down(&mut o, 2, 900);
    node_down(&mut o, 3, 900);
    etcd(&mut o).leader = None;
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum, "{s:?}");
}

#[test]
fn of_five_two_lost_nodes_are_replaced_one_change_at_a_time() {
    let mut o = placed(5, 5);
    node_down(&mut o, 4, 900);
    node_down(&mut o, 5, 900);
    let s = plan(&o);
    assert_eq!(removed(&s), ("ex-m4", Removal::NodeLost));
    // Removed; a learner joins before the next removal? No: ex-m5 stays unhealthy, and a new
    // member needs every voter healthy, so the next lost one goes first, with 3 of 4 healthy.
    etcd(&mut o).members.retain(|m| m.id != 4);
    o.pods.remove("ex-m4");
    let s = plan(&o);
    assert_eq!(removed(&s), ("ex-m5", Removal::NodeLost));
    // With a learner on the way nothing else changes membership.
    let mut o = placed(5, 5);
    node_down(&mut o, 5, 900);
    add_learner(&mut o, 6, "ex-m6", 10);
    let s = plan(&o);
    assert!(!matches!(s, Step::AddLearner(_)), "{s:?}");
}

/// A claim the pod mounts that the cache does not show (no owner reference or label of the
/// cluster, or not seen yet) still holds the member's data: never the no-volume removal.
#[test]
fn a_member_whose_pod_mounts_a_claim_the_cache_does_not_show_waits_too() {
    let mut o = placed(3, 3);
    o.pods.get_mut("ex-m3").unwrap().uses_pvc = true;
    node_down(&mut o, 3, 3600);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NodeNotReady, "{s:?}");
    assert!(wait_message(&s).contains("mounts a claim"), "{s:?}");
}

#[test]
fn a_member_with_a_volume_waits_for_its_node_by_default() {
    let mut o = placed(3, 3);
    add_pvc(&mut o, "ex-m3");
    node_down(&mut o, 3, 86_400);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NodeNotReady, "{s:?}");
    let msg = wait_message(&s);
    assert!(msg.contains("ex-m3-data") && msg.contains("waiting for the node") && msg.contains("Replace"), "{msg}");
    assert!(WaitReason::NodeNotReady.needs_attention(), "Degraded: a person may want to act");
}

#[test]
fn with_replace_a_volume_members_claim_is_retired_after_its_time_then_the_member_removed() {
    let mut o = placed(3, 3);
    add_pvc(&mut o, "ex-m3");
    node_loss(&mut o, 60, Some(600));
    node_down(&mut o, 3, 599);
    let s = plan(&o);
    assert!(wait_message(&s).contains("replaced in 1s"), "{s:?}");
    node_down(&mut o, 3, 600);
    let s = plan(&o);
    assert!(matches!(&s, Step::RetireVolume { pod, claim, .. } if pod == "ex-m3" && claim == "ex-m3-data"), "{s:?}");
    // The claim is retired (the cache shows the mark): the member is removed, the claim kept.
    retire(&mut o, "ex-m3");
    let s = plan(&o);
    assert_eq!(removed(&s), ("ex-m3", Removal::NodeLost));
    // The node came back in between: the member still goes (it cannot use a retired claim),
    // but only while the others keep a quorum without it.
    let mut o = placed(3, 3);
    add_pvc(&mut o, "ex-m3");
    retire(&mut o, "ex-m3");
    assert_eq!(removed(&plan(&o)), ("ex-m3", Removal::VolumeLost));
    unhealthy(&mut o, 2);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::WouldLoseQuorum);
}

/// The Node object of a volume member's node was deleted (a cloud's node controller does that
/// for a machine that is gone): the pod GC deleted the pod, the operator made it again, and the
/// new pod cannot be scheduled (its local volume is bound to the gone node). The member is out
/// of reach as on a node that is not Ready, timed from its new pod's wait: by default it waits
/// for the node, and with Replace its claim is retired after volumeAfterSeconds.
#[test]
fn a_volume_member_whose_node_was_deleted_and_whose_pod_stays_unscheduled_counts_as_on_a_lost_node() {
    let deleted = |secs: i64, volume_after: Option<i64>| {
        let mut o = placed(3, 3);
        add_pvc(&mut o, "ex-m3");
        node_loss(&mut o, 60, volume_after);
        unhealthy(&mut o, 3);
        let p = o.pods.get_mut("ex-m3").unwrap();
        (p.ready, p.node, p.phase, p.unready_secs, p.age_secs) = (false, None, "Pending".into(), Some(secs), secs);
        o.nodes.insert("n3".into(), NodeState::gone());
        o
    };
    // (seconds unscheduled, volumeAfterSeconds) → retired?
    for (secs, after, retired) in [(86_400, None, false), (599, Some(600), false), (600, Some(600), true)] {
        let s = plan(&deleted(secs, after));
        if retired {
            assert!(
                matches!(&s, Step::RetireVolume { pod, claim, why } if pod == "ex-m3" && claim == "ex-m3-data" && why.contains("deleted")),
                "{secs}s: {s:?}"
            );
            continue;
        }
        assert_eq!(wait_reason(&s), WaitReason::NodeNotReady, "{secs}s: {s:?}");
        let msg = wait_message(&s);
        assert!(msg.contains("ex-m3") && msg.contains("node n3") && msg.contains("deleted"), "{msg}");
        let next = if after.is_some() { "replaced in 1s" } else { "waiting for the node" };
        assert!(msg.contains(next), "{msg}");
    }
    // Unscheduled beside a Node that exists (no room yet, a node being replaced), or one that
    // could not be read: no loss.
    for node in [Some(NodeState { exists: true, ready: true, not_ready_secs: None, out_of_service: false }), None] {
        let mut o = deleted(3600, Some(600));
        match node {
            Some(n) => o.nodes.insert("n3".into(), n),
            None => o.nodes.remove("n3"),
        };
        let s = plan(&o);
        assert!(!matches!(s, Step::RetireVolume { .. } | Step::RemoveMember { .. }), "{s:?}");
    }
    // A member without a volume on a deleted node is not this rule's (its pod schedules anywhere).
    let mut o = deleted(3600, Some(600));
    o.pvcs.clear();
    o.pods.get_mut("ex-m3").unwrap().uses_pvc = false;
    assert!(!matches!(plan(&o), Step::RetireVolume { .. }));
}

// ---- partitions: no recovery of a minority --------------------------------------------------

/// Three voters; ex-m2 and ex-m3's nodes are cut off from the API server and from ex-m1
/// (which the operator still reaches), and their pods were force-deleted: the objects are
/// gone, the processes may run on, a quorum between them.
fn cut_off_and_force_deleted() -> Observed {
    let mut o = placed(3, 3);
    node_down(&mut o, 2, 900);
    node_down(&mut o, 3, 900);
    lose_pods(&mut o, &[2, 3]);
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(3600));
    o
}

#[test]
fn force_deleted_pods_on_nodes_that_are_not_ready_are_no_evidence_of_loss() {
    let o = cut_off_and_force_deleted();
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum, "{s:?}");
    let msg = wait_message(&s);
    assert!(
        msg.contains("may still run on nodes that are not Ready")
            && msg.contains("ex-m2")
            && msg.contains("out-of-service"),
        "{msg}"
    );
    assert!(!recovery::quorum_unrecoverable(&o), "the recovery clock does not start");
}

#[test]
fn the_node_gives_the_evidence_a_deleted_object_does_not() {
    // (what is known of the minority's nodes) → a FromSurvivor recovery may start.
    type Change = fn(&mut NodeState);
    let cases: &[(&str, Change, bool)] = &[
        ("not Ready", |_| {}, false),
        ("out of service", |n| n.out_of_service = true, true),
        ("deleted", |n| *n = NodeState::gone(), true),
        ("Ready again (its kubelet stops the containers)", |n| (n.ready, n.not_ready_secs) = (true, None), true),
    ];
    for (what, change, recovers) in cases {
        let mut o = cut_off_and_force_deleted();
        for n in ["n2", "n3"] {
            change(o.nodes.get_mut(n).unwrap());
        }
        assert_eq!(recovery::quorum_unrecoverable(&o), *recovers, "{what}");
        let s = plan(&o);
        assert_eq!(
            matches!(s, Step::Recover(_)) || wait_message(&s).contains("comparing what the surviving members hold"),
            *recovers,
            "{what}: {s:?}"
        );
    }
    // One node declared, the other not: still a member that may run. No recovery.
    let mut o = cut_off_and_force_deleted();
    o.nodes.get_mut("n2").unwrap().out_of_service = true;
    assert!(!recovery::quorum_unrecoverable(&o));
    // Nodes that could not be read prove nothing either.
    let mut o = cut_off_and_force_deleted();
    for n in ["n2", "n3"] {
        o.nodes.get_mut(n).unwrap().out_of_service = true;
    }
    o.nodes_error = Some("nodes \"n2\" is forbidden".into());
    assert!(!recovery::quorum_unrecoverable(&o));
    assert!(wait_message(&plan(&o)).contains("could not be read"));
}

#[test]
fn a_pod_never_seen_on_a_node_counts_as_lost_as_before() {
    // No node recorded (gone before this operator recorded nodes, or never scheduled).
    let mut o = cut_off_and_force_deleted();
    o.member_nodes.clear();
    assert!(recovery::quorum_unrecoverable(&o));
}

#[test]
fn every_pod_gone_is_no_restore_from_a_backup_while_members_may_run_elsewhere() {
    let mut o = placed(3, 3);
    for id in 1..=3 {
        node_down(&mut o, id, 900);
    }
    o.pods.clear();
    o.etcd = None;
    with_policy(&mut o, QuorumLossPolicy::FromBackup { backup: "b".into() }, Some(3600));
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::DataLost, "{s:?}");
    assert!(wait_message(&s).contains("may still run on nodes that are not Ready"), "{s:?}");
}

/// A Node stays Ready for up to kube-controller-manager's node-monitor grace (50 s) after its
/// kubelet stopped talking: right after a partition, "Ready" is no evidence yet. A recovery that
/// rests on it waits until the quorum has been lost that long, whatever `afterSeconds` says.
#[test]
fn a_ready_node_is_evidence_only_once_the_node_controller_had_time_to_say_otherwise() {
    let stale_ready = |lost_for: i64| {
        let mut o = cut_off_and_force_deleted();
        for n in ["n2", "n3"] {
            let s = o.nodes.get_mut(n).unwrap();
            (s.ready, s.not_ready_secs) = (true, None);
        }
        with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(lost_for));
        o.desired.as_mut().unwrap().recovery.after_secs = 0;
        o
    };
    let o = stale_ready(10);
    // The loss counts (so its clock runs), but nothing is recovered yet.
    assert!(recovery::quorum_unrecoverable(&o));
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum, "{s:?}");
    let msg = wait_message(&s);
    assert!(msg.contains("Ready") && msg.contains("starts in 50s"), "{msg}");
    // Past the window a node still Ready is one whose kubelet talks to the API server.
    let s = plan(&stale_ready(crate::nodes::NODE_READY_TRUSTED_AFTER_SECS));
    assert!(
        matches!(s, Step::Recover(_)) || wait_message(&s).contains("comparing what the surviving members hold"),
        "{s:?}"
    );
    // Evidence that does not go stale needs no window: a deleted Node or the out-of-service taint.
    let mut o = stale_ready(10);
    for n in ["n2", "n3"] {
        o.nodes.get_mut(n).unwrap().out_of_service = true;
    }
    let s = plan(&o);
    assert!(
        matches!(s, Step::Recover(_)) || wait_message(&s).contains("comparing what the surviving members hold"),
        "{s:?}"
    );
    // Every pod gone, restore from a backup: the same window.
    let mut o = placed(3, 3);
    for i in 1..=3 {
        o.nodes.insert(format!("n{i}"), NodeState { exists: true, ready: true, ..Default::default() });
    }
    o.pods.clear();
    o.etcd = None;
    with_policy(&mut o, QuorumLossPolicy::FromBackup { backup: "b".into() }, Some(10));
    o.desired.as_mut().unwrap().recovery.after_secs = 0;
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::DataLost, "{s:?}");
    assert!(wait_message(&s).contains("starts in 50s"), "{s:?}");
}

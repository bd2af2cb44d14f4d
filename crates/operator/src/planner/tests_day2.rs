//! Day-2 table tests: alarms (NOSPACE, CORRUPT), the defragmentation policy, and rolling out
//! a changed pod spec. Same fixtures as `tests.rs`: `running(n, size)` is `n` healthy voters
//! `ex-m1..`, `ex-m1` leading.

use super::tests::{
    add_learner, add_pvc, desired, drained, etcd, m, plan_drained, running, unhealthy, wait_message, wait_reason,
};
use super::*;
use crate::observed::{Alarm, AlarmKind};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::cluster::{DefragmentationPolicy, MaintenancePolicy};

const MIB: i64 = 1 << 20;

fn with_maintenance(o: &mut Observed, size: i32, mp: MaintenancePolicy) {
    o.desired =
        validate("ex", &EtcdClusterSpec { size, version: "3.5.1".into(), maintenance: Some(mp), ..Default::default() });
    assert!(o.desired.is_ok(), "{:?}", o.desired);
}

fn alarm(o: &mut Observed, member_id: u64, kind: AlarmKind) {
    etcd(o).alarms.push(Alarm { member_id, kind });
}

/// Member `id`'s database file is `size` bytes of which `in_use` are used.
fn db(o: &mut Observed, id: u64, size: i64, in_use: i64) {
    let st = m(o, id).status.as_mut().unwrap();
    st.db_size = size;
    st.db_size_in_use = in_use;
}

fn db_all(o: &mut Observed, size: i64, in_use: i64) {
    let ids: Vec<u64> = etcd(o).members.iter().map(|m| m.id).collect();
    for id in ids {
        db(o, id, size, in_use);
    }
}

/// Every pod made from the current spec (they carry its hash).
fn current_hash(o: &mut Observed) {
    let h = o.desired.as_ref().unwrap().pod_hash();
    for p in o.pods.values_mut() {
        p.spec_hash = Some(h.clone());
    }
}

fn outdated_hash(o: &mut Observed, pod: &str) {
    o.pods.get_mut(pod).unwrap().spec_hash = Some("made-under-an-older-spec".into());
}

// ---- alarms --------------------------------------------------------------------------------

#[test]
fn nospace_is_recovered_followers_first_and_the_leader_last() {
    let mut o = running(3, 3);
    alarm(&mut o, 2, AlarmKind::NoSpace);
    let Step::RecoverSpace(r) = plan(&o) else { panic!("expected RecoverSpace, got {:?}", plan(&o)) };
    assert_eq!(r.members, ["ex-m2", "ex-m3", "ex-m1"], "ex-m1 leads: it goes last");
    assert_eq!(r.alarms, [Alarm { member_id: 2, kind: AlarmKind::NoSpace }]);
    // The default quota is etcd's 2 GiB; disarm only well below it.
    assert!(r.disarm_below_bytes < 2 << 30 && r.disarm_below_bytes > (2 << 30) / 2);
    assert_eq!(r.keep_revisions, None, "periodic compaction (the default) keeps no revision count");
}

#[test]
fn an_alarm_does_not_make_members_unhealthy_for_the_quorum() {
    // Members under NOSPACE still answer and have a leader: 2 of 3 answering is a quorum, so
    // the recovery runs rather than a NoQuorum freeze.
    let mut o = running(3, 3);
    unhealthy(&mut o, 3);
    alarm(&mut o, 1, AlarmKind::NoSpace);
    let Step::RecoverSpace(r) = plan(&o) else { panic!("expected RecoverSpace, got {:?}", plan(&o)) };
    assert_eq!(r.members, ["ex-m2", "ex-m1"], "only members that answer are defragmented");
}

#[test]
fn nospace_recovery_keeps_the_revision_retention() {
    let mut o = running(3, 3);
    let mp = MaintenancePolicy {
        auto_compaction_mode: "revision".into(),
        auto_compaction_retention: "5000".into(),
        ..Default::default()
    };
    with_maintenance(&mut o, 3, mp);
    alarm(&mut o, 1, AlarmKind::NoSpace);
    let Step::RecoverSpace(r) = plan(&o) else { panic!("expected RecoverSpace") };
    assert_eq!(r.keep_revisions, Some(5000));
}

#[test]
fn nospace_that_could_not_be_disarmed_waits_for_a_delete_then_retries() {
    let mut o = running(3, 3);
    with_maintenance(&mut o, 3, MaintenancePolicy { quota_backend_bytes: Some(16 * MIB), ..Default::default() });
    alarm(&mut o, 1, AlarmKind::NoSpace);
    db_all(&mut o, 16 * MIB, 15 * MIB);
    for mem in &mut etcd(&mut o).members {
        mem.status.as_mut().unwrap().revision = 500;
    }
    // The last attempt compacted to revision 500 a minute ago and could not disarm.
    o.nospace_recovery = Some((500, 60));
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoSpace);
    let msg = wait_message(&s);
    assert!(msg.contains("15.0 MiB") && msg.contains("16.0 MiB") && msg.contains("Delete keys"), "{msg}");
    // A delete moves the revision: another attempt.
    m(&mut o, 2).status.as_mut().unwrap().revision = 501;
    assert!(matches!(plan(&o), Step::RecoverSpace(_)));
    // Without a delete, a backstop retry after a while.
    m(&mut o, 2).status.as_mut().unwrap().revision = 500;
    o.nospace_recovery = Some((500, maintenance::NOSPACE_BACKSTOP_SECS));
    assert!(matches!(plan(&o), Step::RecoverSpace(_)));
}

/// Found by chaos (seed 98): a learner added after the quota was filled replays the history,
/// its database file passes the quota and it raises NOSPACE. A learner answers neither alarm
/// nor defragment calls ("rpc not supported for learner"), so it is promoted first (a
/// membership change, not a write of keys) and defragmented as a voter afterwards.
#[test]
fn nospace_raised_by_a_caught_up_learner_promotes_it_before_recovering() {
    let mut o = running(3, 3);
    etcd(&mut o).members.retain(|m| m.id != 3);
    o.pods.remove("ex-m3");
    add_learner(&mut o, 4, "ex-m4", 1000); // the leader's raft index: caught up
    alarm(&mut o, 4, AlarmKind::NoSpace);
    assert!(matches!(plan(&o), Step::Promote { id: 4, .. }), "got {:?}", plan(&o));
}

#[test]
fn nospace_recovery_never_addresses_a_learner() {
    let mut o = running(3, 3);
    etcd(&mut o).members.retain(|m| m.id != 3);
    o.pods.remove("ex-m3");
    // Still catching up: recovery goes on among the voters meanwhile.
    add_learner(&mut o, 4, "ex-m4", 10); // of the leader's 1000
    alarm(&mut o, 1, AlarmKind::NoSpace);
    let Step::RecoverSpace(r) = plan(&o) else { panic!("expected RecoverSpace, got {:?}", plan(&o)) };
    assert_eq!(r.members, ["ex-m2", "ex-m1"], "voters only, the leader last");
}

#[test]
fn corrupt_freezes_every_change_and_names_the_member() {
    let mut o = running(3, 3);
    alarm(&mut o, 3, AlarmKind::Corrupt);
    alarm(&mut o, 1, AlarmKind::NoSpace);
    o.pods.remove("ex-m2"); // would be healed otherwise
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::Corrupt);
    assert!(wait_message(&s).contains("ex-m3"), "{}", wait_message(&s));
    assert!(WaitReason::Corrupt.needs_attention());
}

// ---- defragmentation policy ------------------------------------------------------------------

#[test]
fn a_fragmented_follower_is_defragmented_before_the_leader() {
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    assert_eq!(plan(&o), Step::Defragment { pod: "ex-m2".into(), free_bytes: 300 * MIB });
    // ex-m2 and ex-m3 done (inside the cool-down): the leader hands leadership away first.
    o.pods.get_mut("ex-m2").unwrap().defragmented_secs = Some(5);
    db(&mut o, 3, 100 * MIB, 100 * MIB);
    assert_eq!(
        plan(&o),
        Step::MoveLeader { from_pod: "ex-m1".into(), to: 2, to_pod: "ex-m2".into(), purpose: Purpose::Defragment }
    );
    // Leadership moved to ex-m2: ex-m1 is a follower now and is defragmented.
    etcd(&mut o).leader = Some(2);
    for mem in &mut etcd(&mut o).members {
        mem.status.as_mut().unwrap().leader = 2;
    }
    assert!(matches!(plan(&o), Step::Defragment { pod, .. } if pod == "ex-m1"));
}

#[test]
fn a_follower_whose_in_use_figure_lags_its_compaction_is_still_due() {
    // Only the leader wrote since the compaction: the followers still count the compacted pages.
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 400 * MIB);
    db(&mut o, 1, 400 * MIB, 100 * MIB);
    assert_eq!(plan(&o), Step::Defragment { pod: "ex-m2".into(), free_bytes: 300 * MIB });
}

#[test]
fn a_single_member_is_defragmented_in_place() {
    let mut o = running(1, 1);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    assert!(matches!(plan(&o), Step::Defragment { pod, .. } if pod == "ex-m1"));
}

#[test]
fn too_little_free_space_is_left_alone() {
    // 40% free is below the default 50%.
    let mut o = running(3, 3);
    db_all(&mut o, 500 * MIB, 300 * MIB);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    // 60% free but only 30 MiB: below the default 64 MiB.
    db_all(&mut o, 50 * MIB, 20 * MIB);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    // The user's thresholds count.
    let mp = MaintenancePolicy {
        defragmentation: Some(DefragmentationPolicy {
            min_free_percent: Some(30),
            min_free_bytes: Some(MIB),
            ..Default::default()
        }),
        ..Default::default()
    };
    with_maintenance(&mut o, 3, mp);
    assert!(matches!(plan(&o), Step::Defragment { .. }));
}

#[test]
fn a_member_defragmented_recently_is_not_defragmented_again() {
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    for p in o.pods.values_mut() {
        p.defragmented_secs = Some(maintenance::DEFRAG_COOLDOWN_SECS - 1);
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

#[test]
fn defragmentation_waits_for_a_backup_of_the_cluster() {
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    assert!(may_defragment(&o), "observation asks about backups only when a member is due");
    o.backup_running = Some("nightly-backup-x".into());
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::MaintenanceDeferred);
    assert!(wait_message(&s).contains("nightly-backup-x"));
}

#[test]
fn defragmentation_off_never_defragments() {
    let mut o = running(3, 3);
    let mp = MaintenancePolicy {
        defragmentation: Some(DefragmentationPolicy { mode: "Off".into(), ..Default::default() }),
        ..Default::default()
    };
    with_maintenance(&mut o, 3, mp);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    assert!(!may_defragment(&o));
}

#[test]
fn defragmentation_never_runs_beside_another_change() {
    // An unhealthy member: the cluster waits for it, no defragmentation meanwhile.
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    unhealthy(&mut o, 3);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
    // A learner catching up (scale-up).
    let mut o = running(3, 4);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    add_learner(&mut o, 4, "ex-m4", 10); // of the leader's 1000
    assert_eq!(wait_reason(&plan(&o)), WaitReason::LearnerCatchingUp);
    // A pending upgrade goes first.
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    o.desired = validate("ex", &EtcdClusterSpec { size: 3, version: "3.5.34".into(), ..Default::default() });
    assert!(matches!(plan(&o), Step::Drain { .. }), "the upgrade's first member leaves the client Service");
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }));
    // A pending rollout goes first.
    let mut o = running(3, 3);
    db_all(&mut o, 400 * MIB, 100 * MIB);
    current_hash(&mut o);
    add_pvc(&mut o, "ex-m2");
    outdated_hash(&mut o, "ex-m2");
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() });
}

// ---- a one-shot defragmentation asked for (kubectl etcd defrag) ------------------------------

#[test]
fn asked_for_every_member_without_a_policy_each_is_defragmented_once_leader_last() {
    // No policy, a database with nothing to reclaim: the request alone makes them due.
    let mut o = running(3, 3);
    db_all(&mut o, 100 * MIB, 100 * MIB);
    o.defrag_asked = Some(None);
    // Not on record yet: nothing is done until it is (the decision writes it).
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    let all = vec!["ex-m1".to_string(), "ex-m2".into(), "ex-m3".into()];
    assert_eq!(maintenance::judge_request(&o), maintenance::DefragRequest::Pending(all));
    // A record in the future (a clock ahead) counts as none.
    o.defrag_asked_secs = Some(-50);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    o.defrag_asked_secs = Some(0);
    assert!(matches!(plan(&o), Step::Defragment { pod, .. } if pod == "ex-m2"));
    // Seen 30 s ago; ex-m2 defragmented 20 s ago (after it), ex-m3 40 s ago (before it).
    o.defrag_asked_secs = Some(30);
    o.pods.get_mut("ex-m2").unwrap().defragmented_secs = Some(20);
    o.pods.get_mut("ex-m3").unwrap().defragmented_secs = Some(40);
    assert!(matches!(plan(&o), Step::Defragment { pod, .. } if pod == "ex-m3"));
    o.pods.get_mut("ex-m3").unwrap().defragmented_secs = Some(10);
    assert!(matches!(plan(&o), Step::MoveLeader { purpose: Purpose::Defragment, .. }));
    // In the request's own second counts as after it (never again and again).
    o.pods.get_mut("ex-m1").unwrap().defragmented_secs = Some(30);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    assert!(matches!(maintenance::judge_request(&o), maintenance::DefragRequest::Done(all) if all.len() == 3));
}

#[test]
fn asked_for_one_member_only_that_one_even_inside_the_cool_down() {
    let mut o = running(3, 3);
    db_all(&mut o, 100 * MIB, 100 * MIB);
    o.pods.get_mut("ex-m3").unwrap().defragmented_secs = Some(60);
    o.defrag_asked = Some(Some("ex-m3".into()));
    o.defrag_asked_secs = Some(5);
    assert!(matches!(plan(&o), Step::Defragment { pod, .. } if pod == "ex-m3"));
    o.defrag_asked = Some(Some("ex-m9".into()));
    assert!(matches!(maintenance::judge_request(&o), maintenance::DefragRequest::Refused(w) if w.contains("ex-m9")));
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

#[test]
fn an_asked_defragmentation_never_runs_beside_a_change_or_a_backup() {
    let mut o = running(3, 3);
    o.defrag_asked = Some(None);
    o.defrag_asked_secs = Some(0);
    unhealthy(&mut o, 3);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
    let mut o = running(3, 4);
    o.defrag_asked = Some(None);
    o.defrag_asked_secs = Some(0);
    add_learner(&mut o, 4, "ex-m4", 10);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::LearnerCatchingUp);
    let mut o = running(3, 3);
    o.defrag_asked = Some(None);
    o.defrag_asked_secs = Some(0);
    o.backup_running = Some("ex-backup-1".into());
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MaintenanceDeferred);
    assert!(may_defragment(&o));
}

// ---- rolling out a changed pod spec -----------------------------------------------------------

#[test]
fn members_made_from_the_current_spec_or_before_hashes_existed_are_left_alone() {
    let mut o = running(3, 3);
    current_hash(&mut o);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    o.pods.get_mut("ex-m2").unwrap().spec_hash = None; // made by an older operator
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

#[test]
fn a_pvc_member_restarts_on_its_volume_with_the_new_spec_leader_last() {
    let mut o = running(3, 3);
    current_hash(&mut o);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, p);
        outdated_hash(&mut o, p);
    }
    // Out of the client Service first, then the pod goes (its volume stays).
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() });
    drained(&mut o, "ex-m2");
    assert!(matches!(plan(&o), Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m2"));
    // Followers done: leadership moves before the leader's pod goes.
    let h = o.desired.as_ref().unwrap().pod_hash();
    for p in ["ex-m2", "ex-m3"] {
        o.pods.get_mut(p).unwrap().spec_hash = Some(h.clone());
    }
    assert_eq!(
        plan(&o),
        Step::MoveLeader { from_pod: "ex-m1".into(), to: 2, to_pod: "ex-m2".into(), purpose: Purpose::Rollout }
    );
}

#[test]
fn a_rollout_waits_while_any_voter_is_unhealthy() {
    let mut o = running(3, 3);
    current_hash(&mut o);
    add_pvc(&mut o, "ex-m2");
    outdated_hash(&mut o, "ex-m2");
    unhealthy(&mut o, 3);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
}

#[test]
fn an_emptydir_member_is_replaced_by_a_new_member_before_it_is_removed() {
    let mut o = running(3, 3);
    current_hash(&mut o);
    outdated_hash(&mut o, "ex-m3");
    // 1. A replacement joins as a learner (made from the new spec).
    let Step::AddLearner(nm) = plan(&o) else { panic!("expected AddLearner, got {:?}", plan(&o)) };
    assert_eq!(nm.initial_cluster.len(), 4);
    // 2. It catches up and is promoted, not removed as a surplus member.
    let name = nm.name.clone();
    add_learner(&mut o, 4, &name, 1000);
    let h = o.desired.as_ref().unwrap().pod_hash();
    o.pods.get_mut(&name).unwrap().spec_hash = Some(h);
    assert_eq!(plan(&o), Step::Promote { id: 4, pod: name.clone() });
    // 3. Four voters: the outdated one goes (not the newest-named, as a scale-down would pick).
    m(&mut o, 4).is_learner = false;
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m3".into() });
    drained(&mut o, "ex-m3");
    assert!(matches!(plan(&o), Step::RemoveMember { pod, .. } if pod == "ex-m3"));
}

#[test]
fn an_outdated_leader_is_replaced_last_after_handing_leadership_away() {
    let mut o = running(4, 3);
    current_hash(&mut o);
    outdated_hash(&mut o, "ex-m1");
    assert!(matches!(plan(&o), Step::MoveLeader { from_pod, purpose: Purpose::Rollout, .. } if from_pod == "ex-m1"));
}

#[test]
fn a_scale_down_during_a_replacement_still_drops_the_learner() {
    // The spec shrank to 2 while a replacement learner was joining a 3-member cluster: the
    // learner is a surplus, not a replacement.
    let mut o = running(3, 3);
    current_hash(&mut o);
    outdated_hash(&mut o, "ex-m3");
    add_learner(&mut o, 4, "ex-new", 10);
    o.desired = desired(2);
    current_hash(&mut o);
    outdated_hash(&mut o, "ex-m3");
    assert!(matches!(plan(&o), Step::RemoveMember { pod, .. } if pod == "ex-new"));
}

#[test]
fn a_pvc_member_whose_claim_is_not_seen_is_not_rolled() {
    // Found by the property test: the pod mounts a PVC the cache does not show (or one being
    // deleted): deleting the pod could leave the member nothing to restart on.
    let mut o = running(3, 3);
    current_hash(&mut o);
    add_pvc(&mut o, "ex-m2");
    outdated_hash(&mut o, "ex-m2");
    drained(&mut o, "ex-m2");
    o.pvcs.remove("ex-m2");
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    add_pvc(&mut o, "ex-m2");
    o.pvcs.get_mut("ex-m2").unwrap().deleting = true;
    assert!(!matches!(plan(&o), Step::DeletePod { .. }), "{:?}", plan(&o));
}

//! Members whose pod cannot run (`failing`), one table row per situation: when a crash-looping
//! voter is replaced and when it is kept, what a failing member holds up and what it does not,
//! and pods made from a broken spec made again once the spec is fixed.

use super::failing::{CRASH_LOOP_RESTARTS, CRASH_LOOP_SECS};
use super::tests::*;
use super::*;
use crate::observed::PodState;

/// Every pod carries the current spec's hash.
fn current(mut o: Observed) -> Observed {
    let hash = o.desired.as_ref().unwrap().pod_hash();
    for p in o.pods.values_mut() {
        p.spec_hash = Some(hash.clone());
    }
    o
}

/// The member's pod cannot run: its container waits in CrashLoopBackOff after `restarts`
/// restarts, not ready for `unready` seconds; etcd gets no answer from it.
fn crashing(o: &mut Observed, id: u64, restarts: i32, unready: i64) {
    unhealthy(o, id);
    let p = o.pods.get_mut(&format!("ex-m{id}")).unwrap();
    p.problem = Some(("CrashLoopBackOff".into(), "container etcd: back-off 40s".into()));
    p.ready = false;
    p.restarts = restarts;
    p.unready_secs = Some(unready);
}

fn crash_looping(o: &mut Observed, id: u64) {
    crashing(o, id, CRASH_LOOP_RESTARTS, CRASH_LOOP_SECS);
}

fn pvc_cluster(n: u64, size: i32) -> Observed {
    let mut o = running(n, size);
    for i in 1..=n {
        add_pvc(&mut o, &format!("ex-m{i}"));
    }
    o
}

fn removed(s: &Step) -> u64 {
    match s {
        Step::RemoveMember { id, .. } => *id,
        other => panic!("expected RemoveMember, got {other:?}"),
    }
}

/// `plan` of the cluster after member `id` left etcd's membership with its pod.
fn without(o: &mut Observed, id: u64) {
    etcd(o).members.retain(|m| m.id != id);
    o.pods.remove(&format!("ex-m{id}"));
    o.pvcs.remove(&format!("ex-m{id}"));
}

// ---- the bound: crash-looping, not crashed once -----------------------------------------------

#[test]
fn a_member_that_crashed_a_few_times_or_briefly_is_not_replaced() {
    for (restarts, unready) in [(1, 600), (CRASH_LOOP_RESTARTS - 1, 600), (20, CRASH_LOOP_SECS - 1)] {
        let mut o = current(running(3, 3));
        crashing(&mut o, 3, restarts, unready);
        let s = plan(&o);
        assert_eq!(wait_reason(&s), WaitReason::MemberFailing, "{restarts} restarts, {unready}s: {s:?}");
        assert!(wait_message(&s).contains("ex-m3") && wait_message(&s).contains("CrashLoopBackOff"), "{s:?}");
    }
}

// ---- emptyDir: replaced, one change at a time, with a quorum ------------------------------------

#[test]
fn a_crash_looping_emptydir_voter_is_removed_then_a_learner_replaces_it() {
    let mut o = current(running(3, 3));
    crash_looping(&mut o, 3);
    let s = plan(&o);
    assert_eq!(removed(&s), 3);
    let Step::RemoveMember { why, .. } = &s else { unreachable!() };
    assert!(why.contains("crash-looping") && why.contains("new member replaces it"), "{why}");
    without(&mut o, 3);
    assert!(matches!(plan(&o), Step::AddLearner(_)), "{:?}", plan(&o));
}

#[test]
fn a_crash_looping_voter_still_named_leader_is_not_removed() {
    let mut o = current(running(3, 3));
    crash_looping(&mut o, 1);
    assert!(!matches!(plan(&o), Step::RemoveMember { .. }), "{:?}", plan(&o));
    etcd(&mut o).leader = Some(2);
    assert_eq!(removed(&plan(&o)), 1);
}

#[test]
fn a_crash_looping_voter_is_never_removed_without_a_quorum() {
    let mut o = current(running(3, 3));
    crash_looping(&mut o, 2);
    crash_looping(&mut o, 3);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

#[test]
fn a_crash_looping_voter_waits_while_another_change_is_under_way() {
    let mut o = current(running(5, 6));
    crash_looping(&mut o, 5);
    add_learner(&mut o, 9, "ex-l", 100);
    assert!(!matches!(plan(&o), Step::RemoveMember { id: 5, .. }), "{:?}", plan(&o));
    // A voter still starting (just promoted) is a change not finished either.
    etcd(&mut o).members.retain(|m| m.id != 9);
    o.pods.remove("ex-l");
    unhealthy(&mut o, 2);
    assert!(!matches!(plan(&o), Step::RemoveMember { id: 5, .. }), "{:?}", plan(&o));
}

#[test]
fn two_crash_looping_voters_of_five_are_replaced_one_at_a_time() {
    let mut o = current(running(5, 5));
    crash_looping(&mut o, 4);
    crash_looping(&mut o, 5);
    assert_eq!(removed(&plan(&o)), 4);
    without(&mut o, 4);
    // 4 voters, 3 healthy (tolerating no failure): the second goes too, leaving 3 of 3.
    assert_eq!(removed(&plan(&o)), 5);
    without(&mut o, 5);
    assert!(matches!(plan(&o), Step::AddLearner(_)), "{:?}", plan(&o));
}

// ---- PVC: kept, reported, replaced only when the user deletes its volume ------------------------

#[test]
fn a_crash_looping_pvc_voter_keeps_its_volume_and_says_what_the_user_can_do() {
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 3, 50, 3600);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::MemberFailing, "{s:?}");
    let msg = wait_message(&s);
    assert!(
        msg.contains("ex-m3") && msg.contains("ex-m3-data is kept") && msg.contains("deleting PVC ex-m3-data"),
        "{msg}"
    );
}

/// A pod that mounts a claim the cache does not show (a claim without the cluster's labels or
/// owner, or not seen yet) keeps its data as far as the operator knows: never replaced (the
/// removal would delete `<pod>-data`).
#[test]
fn a_crash_looping_pvc_voter_whose_claim_is_not_seen_is_not_replaced() {
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 3, 50, 3600);
    o.pvcs.remove("ex-m3");
    let s = plan(&o);
    assert!(!matches!(s, Step::RemoveMember { .. }), "{s:?}");
}

#[test]
fn a_failing_pvc_voter_whose_volume_the_user_deletes_is_replaced() {
    // Failing briefly or crash-looping for long: the user's word is the reason given.
    for (restarts, unready) in [(1, 10), (50, 3600)] {
        let mut o = current(pvc_cluster(3, 3));
        crashing(&mut o, 3, restarts, unready);
        o.pvcs.get_mut("ex-m3").unwrap().deleting = true;
        let s = plan(&o);
        assert_eq!(removed(&s), 3);
        let Step::RemoveMember { why, .. } = &s else { unreachable!() };
        assert!(why.contains("volume is being deleted"), "{why}");
    }
}

// ---- what a failing member holds up, and what it does not ---------------------------------------

#[test]
fn a_failing_member_does_not_hold_up_healing_another() {
    let mut o = current(running(5, 5));
    crashing(&mut o, 5, 1, 30);
    o.pods.remove("ex-m2");
    unhealthy(&mut o, 2);
    assert_eq!(removed(&plan(&o)), 2);
    without(&mut o, 2);
    // 4 voters, 3 healthy: a learner, promoted only while a quorum holds with it.
    assert!(matches!(plan(&o), Step::AddLearner(_)), "{:?}", plan(&o));
    add_learner(&mut o, 9, "ex-l", 1000);
    assert!(matches!(plan(&o), Step::Promote { id: 9, .. }), "{:?}", plan(&o));
    // A PVC member restarts on its volume beside a failing one, too.
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 3, 50, 3600);
    o.pods.remove("ex-m2");
    unhealthy(&mut o, 2);
    assert!(matches!(plan(&o), Step::CreatePod(m) if m.name == "ex-m2" && m.restart), "{:?}", plan(&o));
}

#[test]
fn a_failing_member_holds_up_changes_that_need_every_member() {
    // A rollout of the healthy members waits (an upgrade moves the failing member first:
    // `upgrade::failing_member`).
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 3, 50, 3600);
    o.pods.get_mut("ex-m1").unwrap().spec_hash = Some("0123456789abcdef".into());
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
    // So does defragmentation.
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 3, 50, 3600);
    o.desired.as_mut().unwrap().maintenance.defrag =
        Some(crate::validation::DefragRule { min_free_percent: 1, min_free_bytes: 1 });
    for id in [1, 2] {
        m(&mut o, id).status.as_mut().unwrap().db_size = 400 << 20;
        m(&mut o, id).status.as_mut().unwrap().db_size_in_use = 100 << 20;
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
    // Scaling down: the failing member goes first (the others hold the data with the leader).
    let mut o = current(pvc_cluster(5, 3));
    crashing(&mut o, 2, 50, 3600);
    assert_eq!(removed(&plan(&o)), 2);
}

// ---- a fixed spec makes the pods of the broken one again ---------------------------------------

#[test]
fn a_fixed_spec_restarts_a_failing_pvc_member_on_its_volume() {
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 2, 1, 20);
    // Made from the current spec: reported (the fix has not come yet).
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
    // Made from an earlier spec: its pod goes, its volume stays, and it is made again.
    o.pods.get_mut("ex-m2").unwrap().spec_hash = Some("0123456789abcdef".into());
    let s = plan(&o);
    assert!(matches!(&s, Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m2"), "{s:?}");
    o.pods.remove("ex-m2");
    let Step::CreatePod(n) = plan(&o) else { panic!("expected CreatePod") };
    assert!(n.name == "ex-m2" && n.restart && n.pvc);
}

#[test]
fn a_fixed_spec_remakes_failing_pvc_members_one_at_a_time_even_without_a_quorum() {
    let mut o = current(pvc_cluster(3, 3));
    for id in [2, 3] {
        crashing(&mut o, id, 1, 20);
        o.pods.get_mut(&format!("ex-m{id}")).unwrap().spec_hash = Some("0123456789abcdef".into());
    }
    assert!(matches!(plan(&o), Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m2"));
    // ex-m2 made again from the fixed spec, still starting: ex-m3 next.
    let hash = o.pods["ex-m1"].spec_hash.clone();
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.problem, p.spec_hash) = (None, hash.clone());
    assert!(matches!(plan(&o), Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m3"));
    // The fix did not help (ex-m2 fails under it too): ex-m3 is left as it is.
    o.pods.get_mut("ex-m2").unwrap().problem = Some(("CrashLoopBackOff".into(), "still".into()));
    assert!(!matches!(plan(&o), Step::DeletePod { .. }), "{:?}", plan(&o));
    // Nor while another member pod is going.
    let mut o2 = o.clone();
    o2.pods.get_mut("ex-m2").unwrap().problem = None;
    o2.pods.get_mut("ex-m1").unwrap().deleting = true;
    assert!(!matches!(plan(&o2), Step::DeletePod { pod, .. } if pod == "ex-m3"), "{:?}", plan(&o2));
}

#[test]
fn a_fixed_spec_is_not_applied_to_failing_members_under_a_corrupt_alarm() {
    let mut o = current(pvc_cluster(3, 3));
    crashing(&mut o, 2, 1, 20);
    o.pods.get_mut("ex-m2").unwrap().spec_hash = Some("0123456789abcdef".into());
    etcd(&mut o).alarms = vec![crate::observed::Alarm { member_id: 1, kind: crate::observed::AlarmKind::Corrupt }];
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Corrupt);
}

#[test]
fn a_fixed_spec_replaces_a_failing_emptydir_member() {
    let mut o = current(running(3, 3));
    crashing(&mut o, 2, 1, 20);
    o.pods.get_mut("ex-m2").unwrap().spec_hash = Some("0123456789abcdef".into());
    let s = plan(&o);
    assert_eq!(removed(&s), 2);
    let Step::RemoveMember { why, .. } = &s else { unreachable!() };
    assert!(why.contains("earlier spec"), "{why}");
}

#[test]
fn a_bootstrap_that_crash_loops_starts_over_once_the_pod_spec_is_fixed() {
    let mut o = fresh(3);
    let hash = o.desired.as_ref().unwrap().pod_hash();
    for n in ["ex-abcd0", "ex-abcd1", "ex-abcd2"] {
        let p = PodState {
            bootstrap: true,
            initial_cluster: vec!["ex-abcd0".into(), "ex-abcd1".into(), "ex-abcd2".into()],
            problem: Some(("CrashLoopBackOff".into(), "invalid value for ETCD_SNAPSHOT_COUNT".into())),
            spec_hash: Some(hash.clone()),
            ready: false,
            ..pod(n)
        };
        o.pods.insert(n.into(), p);
    }
    // Same image, same pod spec: reported.
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
    // etcdEnv fixed (same image, another pod-spec hash): started over.
    for p in o.pods.values_mut() {
        p.spec_hash = Some("0123456789abcdef".into());
    }
    assert!(matches!(plan(&o), Step::DeletePod { keep_volume: false, .. }), "{:?}", plan(&o));
}

// ---- a refused spec with no valid one on record ------------------------------------------------

/// A formed cluster whose spec today's rules refuse, with no valid spec on record (adopted, or
/// the mark lost): `observe` plans from it without the refused settings and says so
/// (`no_valid_spec`). Members are still replaced; no running member is changed.
#[test]
fn a_refused_spec_with_no_valid_one_on_record_changes_no_running_member() {
    let refused = |mut o: Observed| {
        o.spec_refused = Some(vec!["spec.pod.etcdEnv: ETCD_FORCE_NEW_CLUSTER is owned by the operator".into()]);
        o.no_valid_spec = true;
        o
    };
    // Pods made from another pod spec (the refused edit's, or an earlier one's): not rolled.
    let mut o = refused(current(pvc_cluster(3, 3)));
    for p in o.pods.values_mut() {
        p.spec_hash = Some("0123456789abcdef".into());
    }
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::InvalidSpec, "{s:?}");
    assert!(wait_message(&s).contains("no running member is changed"), "{s:?}");
    let mut emptydir = refused(current(running(3, 3)));
    emptydir.pods.get_mut("ex-m1").unwrap().spec_hash = Some("0123456789abcdef".into());
    assert_eq!(wait_reason(&plan(&emptydir)), WaitReason::InvalidSpec, "{:?}", plan(&emptydir));
    // Nor upgraded.
    let mut o2 = refused(current(running(3, 3)));
    o2.desired.as_mut().unwrap().version = crate::version::Version::parse("3.5.2").unwrap();
    assert_eq!(wait_reason(&plan(&o2)), WaitReason::InvalidSpec);
    // Healing goes on: a lost member is replaced.
    o2.pods.remove("ex-m2");
    assert_eq!(removed(&plan(&o2)), 2);
    without(&mut o2, 2);
    assert!(matches!(plan(&o2), Step::AddLearner(_)), "{:?}", plan(&o2));
    // As does the restart of a member on its volume.
    o.pods.remove("ex-m3");
    assert!(matches!(plan(&o), Step::CreatePod(m) if m.name == "ex-m3" && m.restart), "{:?}", plan(&o));
}

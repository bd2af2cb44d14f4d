//! The failure paths, one table row per situation: members that still have their data come
//! back (with or without a quorum), volumes that do not hold their member's data, quorum loss
//! and the recovery the user may opt into, bootstraps that never formed, stuck pods.

use super::tests::*;
use super::*;
use crate::observed::{BackupPoint, PodState};
use crate::validation::{QuorumLossPolicy, RecoverySettings as Policy};

/// A formed cluster of `n` PVC members whose etcd answers nothing (no pod, or none answering).
pub(super) fn pvc_cluster(n: u64) -> Observed {
    let mut o = running(n, n as i32);
    for i in 1..=n {
        add_pvc(&mut o, &format!("ex-m{i}"));
    }
    o
}

/// Members `ids` lose their pods; the others answer their status without a leader.
pub(super) fn lose_pods(o: &mut Observed, ids: &[u64]) {
    for &id in ids {
        o.pods.remove(&format!("ex-m{id}"));
        unhealthy(o, id);
    }
    for mm in &mut etcd(o).members {
        if let Some(s) = mm.status.as_mut() {
            s.leader = 0;
        }
    }
    etcd(o).leader = None;
}

pub(super) fn with_policy(o: &mut Observed, quorum_loss: QuorumLossPolicy, lost_for: Option<i64>) {
    o.desired.as_mut().unwrap().recovery = Policy { quorum_loss, after_secs: 60, ..Default::default() };
    o.quorum_lost_secs = lost_for;
}

/// The member's claim was retired (the cache shows the mark): observation sets it apart.
pub(super) fn retire(o: &mut Observed, member: &str) {
    let mut v = o.pvcs.remove(member).unwrap();
    v.retired = Some("refused".into());
    o.retired_pvcs.insert(member.into(), v);
}

pub(super) fn created(s: Step) -> NewMember {
    match s {
        Step::CreatePod(m) => m,
        other => panic!("expected CreatePod, got {other:?}"),
    }
}

// ---- members with volumes come back, quorum or not ------------------------------------------

#[test]
fn a_one_member_pvc_cluster_whose_pod_was_deleted_restarts_on_its_volume() {
    let mut o = pvc_cluster(1);
    o.pods.clear();
    o.etcd = None;
    let m = created(plan(&o));
    assert_eq!(m.name, "ex-m1");
    assert!(m.restart && m.existing && m.pvc && m.seed.is_none(), "{m:?}");
    assert_eq!(m.initial_cluster, [("ex-m1".to_string(), "http://ex-m1.ex.ns.svc:2380".to_string())]);
}

#[test]
fn two_of_three_pvc_pods_deleted_restart_on_their_volumes_without_a_quorum() {
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[2, 3]);
    assert_eq!(created(plan(&o)).name, "ex-m2");
    o.pods.insert("ex-m2".into(), PodState { uses_pvc: true, ready: false, ..pod("ex-m2") });
    let m = created(plan(&o));
    assert_eq!(m.name, "ex-m3");
    assert_eq!(m.initial_cluster.len(), 3, "the membership etcd reports");
    o.pods.insert("ex-m3".into(), PodState { uses_pvc: true, ready: false, ..pod("ex-m3") });
    // Both starting: a quorum can come back, so nothing else happens meanwhile.
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
    assert!(wait_message(&s).contains("can come back"), "{s:?}");
}

#[test]
fn every_pvc_pod_deleted_and_no_member_answering_restarts_each_from_its_volume() {
    let mut o = pvc_cluster(3);
    o.pods.clear();
    o.etcd = None;
    let m = created(plan(&o));
    assert_eq!(m.name, "ex-m1");
    let names: Vec<_> = m.initial_cluster.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["ex-m1", "ex-m2", "ex-m3"], "peers from the volumes' annotations");
}

#[test]
fn a_dead_pvc_pod_is_deleted_keeping_its_volume_even_without_a_quorum() {
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[2]);
    unhealthy(&mut o, 3);
    o.pods.get_mut("ex-m1").unwrap().phase = "Failed".into();
    let s = plan(&o);
    assert!(matches!(&s, Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m1"), "{s:?}");
}

#[test]
fn a_restarted_member_runs_the_version_the_cluster_runs() {
    let mut o = pvc_cluster(1);
    o.pods.clear();
    o.etcd = None;
    o.recorded_version = Some("3.5.0".into());
    assert_eq!(created(plan(&o)).version.to_string(), "3.5.0", "not the spec's 3.5.1");
}

#[test]
fn the_volume_of_a_removed_member_is_not_restarted() {
    let mut o = running(3, 3);
    add_pvc(&mut o, "ex-old");
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

#[test]
fn a_volume_being_deleted_does_not_bring_its_member_back() {
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[3]);
    etcd(&mut o).leader = Some(1);
    for id in [1, 2] {
        m(&mut o, id).status.as_mut().unwrap().leader = 1;
    }
    o.pvcs.get_mut("ex-m3").unwrap().deleting = true;
    assert!(matches!(plan(&o), Step::RemoveMember { id: 3, .. }));
}

// ---- volumes that do not hold their member's data --------------------------------------------

#[test]
fn a_member_whose_volume_was_refused_is_replaced_not_restarted() {
    let mut o = pvc_cluster(3);
    unhealthy(&mut o, 2);
    o.pods.get_mut("ex-m2").unwrap().volume_refused = Some("the volume was emptied".into());
    o.pods.get_mut("ex-m2").unwrap().problem = Some(("CrashLoopBackOff".into(), "check-data".into()));
    // Its volume is kept first (`tests_volumes`), then the member goes.
    assert!(matches!(plan(&o), Step::RetireVolume { .. }));
    retire(&mut o, "ex-m2");
    let s = plan(&o);
    let Step::RemoveMember { id, why, .. } = &s else { panic!("expected RemoveMember, got {s:?}") };
    assert_eq!(*id, 2);
    assert!(why.contains("volume does not hold its data") && why.contains("emptied"), "{why}");
    // Then it is replaced like any lost member: by a learner.
    etcd(&mut o).members.retain(|m| m.id != 2);
    o.pods.remove("ex-m2");
    assert!(matches!(plan(&o), Step::AddLearner(_)));
}

#[test]
fn a_retired_member_whose_check_runs_again_is_removed_for_the_same_reason() {
    // The kubelet restarts the refused check: while it runs, the pod shows no refusal, only the
    // retired claim does. The member still goes, and the note still says what the check found.
    let mut o = pvc_cluster(3);
    unhealthy(&mut o, 2);
    let found = "the volume holds no data (no marker, no etcd data directory)";
    o.pods.get_mut("ex-m2").unwrap().volume_refused = Some(found.into());
    let Step::RetireVolume { why: mark, .. } = plan(&o) else { panic!("the claim is retired first") };
    retire(&mut o, "ex-m2");
    o.retired_pvcs.get_mut("ex-m2").unwrap().retired = Some(mark);
    let refused = plan(&o);
    o.pods.get_mut("ex-m2").unwrap().volume_refused = None;
    let rerunning = plan(&o);
    for s in [refused, rerunning] {
        let Step::RemoveMember { id, why, cause, .. } = &s else { panic!("expected RemoveMember, got {s:?}") };
        assert_eq!((*id, *cause), (2, Removal::VolumeLost));
        assert!(why.contains(found) && why.contains("a new member replaces it"), "{why}");
    }
}

#[test]
fn refused_volumes_count_as_lost_when_judging_quorum_loss() {
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[3]);
    o.pvcs.remove("ex-m3");
    unhealthy(&mut o, 2);
    o.pods.get_mut("ex-m2").unwrap().volume_refused = Some("emptied".into());
    assert!(matches!(plan(&o), Step::RetireVolume { .. }));
    retire(&mut o, "ex-m2");
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
    let msg = wait_message(&s);
    assert!(msg.contains("quorum lost for good") && msg.contains("2 of 3"), "{msg}");
    assert!(msg.contains("spec.recovery.quorumLoss"), "says what the user can do: {msg}");
    assert!(recovery::quorum_unrecoverable(&o));
}

// ---- quorum loss and recovery -----------------------------------------------------------------

#[test]
fn losing_two_of_three_emptydir_members_waits_by_default_and_says_what_to_do() {
    let mut o = running(3, 3);
    lose_pods(&mut o, &[2, 3]);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
    let msg = wait_message(&s);
    assert!(msg.contains("ex-m2: its pod is gone and it had no volume"), "{msg}");
    assert!(msg.contains("FromSurvivor") && !msg.to_lowercase().contains("delete"), "{msg}");
}

#[test]
fn recovery_never_acts_while_a_quorum_can_still_come_back() {
    // Two of three pods gone, but their volumes are there: they restart, no recovery.
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[2, 3]);
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(3600));
    assert!(matches!(plan(&o), Step::CreatePod(_)));
    assert!(!recovery::quorum_unrecoverable(&o));
    // One of three emptyDir members lost while another only restarts: a quorum can return.
    let mut o = running(3, 3);
    lose_pods(&mut o, &[3]);
    unhealthy(&mut o, 2);
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(3600));
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

pub(super) fn backup_point() -> BackupPoint {
    let loc = crate::backup::location::Location {
        kind: crate::backup::location::Kind::S3,
        bucket: "b".into(),
        key: "k_v7".into(),
    };
    BackupPoint {
        restore: crate::validation::Restore {
            location: loc,
            source: Default::default(),
            sha256: "ab".repeat(32),
            root_volume: false,
        },
        revision: 7,
        cluster_name: NAME.into(),
        endpoints: vec![],
    }
}

#[test]
fn from_backup_brings_back_a_cluster_with_nothing_left() {
    let mut o = running(3, 3);
    o.pods.clear();
    o.etcd = None;
    with_policy(&mut o, QuorumLossPolicy::FromBackup { backup: "nightly".into() }, Some(120));
    o.recovery_backup = Some(Ok(backup_point()));
    let Step::Recover(r) = plan(&o) else { panic!("expected Recover") };
    assert_eq!(r.revision, 7);
    assert!(r.from.contains("nightly") && r.from.contains("s3://b/k_v7"), "{}", r.from);
    assert!(matches!(&r.member.seed, Some(Seed::Backup(b)) if b.sha256 == "ab".repeat(32)));

    assert!(!r.member.root_data, "an object store's backup: as the spec says");
    // A backup on a claim marked as root's is read as root (`backup::volume_owner`).
    let mut on_root_volume = backup_point();
    on_root_volume.restore.root_volume = true;
    o.recovery_backup = Some(Ok(on_root_volume));
    let Step::Recover(r) = plan(&o) else { panic!("expected Recover") };
    assert!(r.member.root_data);

    o.recovery_backup = Some(Err("has no successful backup yet".into()));
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::DataLost);
    assert!(wait_message(&s).contains("no successful backup yet"), "{s:?}");
}

#[test]
fn nothing_left_without_a_backup_policy_is_data_loss_and_never_a_new_cluster() {
    let mut o = running(3, 3);
    o.pods.clear();
    o.etcd = None;
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::DataLost);
    let msg = wait_message(&s);
    assert!(!msg.contains("delete and re-create"), "never advise deleting: {msg}");
    // Volumes that are still there are not data loss: they restart.
    add_pvc(&mut o, "ex-m1");
    assert!(matches!(plan(&o), Step::CreatePod(_)));
}

#[test]
fn a_recovery_under_way_is_waited_for_and_given_up_if_its_member_cannot_start() {
    let mut o = running(3, 3);
    lose_pods(&mut o, &[1, 2, 3]);
    o.etcd = None;
    o.pods.insert("ex-new".into(), PodState { ready: false, ..pod("ex-new") });
    o.recovery_record = Some(crate::observed::RecoveryRecord {
        member: "ex-new".into(),
        policy: "FromSurvivor".into(),
        ..Default::default()
    });
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Recovering);
    o.pods.get_mut("ex-new").unwrap().problem = Some(("CrashLoopBackOff".into(), "restore-fetch: connect".into()));
    assert!(matches!(plan(&o), Step::DeletePod { pod, .. } if pod == "ex-new"));
}

#[test]
fn after_a_recovery_the_old_pods_stay_until_the_data_has_a_second_copy() {
    let mut o = running(1, 3);
    etcd(&mut o).members[0].pod = "ex-new".into();
    let p = o.pods.remove("ex-m1").unwrap();
    o.pods.insert("ex-new".into(), PodState { name: "ex-new".into(), ..p });
    // The old survivor, a member of the old cluster, failing or not.
    o.pods.insert("ex-m1".into(), PodState { problem: Some(("CrashLoopBackOff".into(), "x".into())), ..pod("ex-m1") });
    o.recovery_record = Some(crate::observed::RecoveryRecord { member: "ex-new".into(), ..Default::default() });
    // One copy only: a learner first, not a reason to stop either.
    assert!(matches!(plan(&o), Step::AddLearner(_)), "{:?}", plan(&o));
    etcd(&mut o).members.push(member(2, "ex-l2", 1, 1000));
    o.pods.insert("ex-l2".into(), pod("ex-l2"));
    // Two healthy voters: now the old cluster's pod goes, once it is old enough to be no
    // member in flight ...
    o.pods.get_mut("ex-m1").unwrap().age_secs = 10;
    assert!(!matches!(plan(&o), Step::DeletePod { .. }), "{:?}", plan(&o));
    o.pods.get_mut("ex-m1").unwrap().age_secs = 600;
    assert!(matches!(plan(&o), Step::DeletePod { pod, keep_volume: false, .. } if pod == "ex-m1"));
    // ... or at once when its etcd answered as a member of another cluster (the old one).
    o.pods.get_mut("ex-m1").unwrap().age_secs = 10;
    etcd(&mut o).foreign = vec!["ex-m1".into()];
    assert!(matches!(plan(&o), Step::DeletePod { pod, keep_volume: false, .. } if pod == "ex-m1"));
}

// ---- bootstraps that never formed -------------------------------------------------------------

fn bootstrap_pod(name: &str) -> PodState {
    PodState {
        bootstrap: true,
        initial_cluster: vec!["ex-abcd0".into(), "ex-abcd1".into(), "ex-abcd2".into()],
        age_secs: 5,
        ..pod(name)
    }
}

#[test]
fn a_partial_bootstrap_creates_the_member_that_is_missing() {
    let mut o = fresh(3);
    for n in ["ex-abcd0", "ex-abcd1"] {
        o.pods.insert(n.into(), bootstrap_pod(n));
    }
    let m = created(plan(&o));
    assert_eq!(m.name, "ex-abcd2");
    assert!(m.bootstrap && !m.existing && !m.restart);
    assert_eq!(m.initial_cluster.len(), 3);
}

#[test]
fn a_bootstrap_that_cannot_run_starts_over_after_the_spec_is_fixed() {
    let mut o = fresh(3);
    for n in ["ex-abcd0", "ex-abcd1", "ex-abcd2"] {
        let p = PodState {
            image: "quay.io/coreos/etcd:v3.5.99".into(),
            problem: Some(("ErrImagePull".into(), "not found".into())),
            ..bootstrap_pod(n)
        };
        o.pods.insert(n.into(), p);
    }
    assert!(matches!(plan(&o), Step::DeletePod { keep_volume: false, .. }));
    // Under the spec that made them (same image) they are reported, not deleted.
    for p in o.pods.values_mut() {
        p.image = "quay.io/coreos/etcd:v3.5.1".into();
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
}

#[test]
fn a_bootstrap_member_volume_without_its_pod_restarts_as_a_bootstrap_member() {
    let mut o = fresh(3);
    for n in ["ex-abcd0", "ex-abcd1", "ex-abcd2"] {
        add_pvc(&mut o, n);
        o.pvcs.get_mut(n).unwrap().bootstrap = true;
    }
    let m = created(plan(&o));
    assert!(m.bootstrap && !m.existing && !m.restart && m.pvc, "{m:?}");
    assert_eq!(m.initial_cluster.len(), 3);
}

#[test]
fn a_cluster_that_formed_is_never_bootstrapped_again() {
    for volumes in [false, true] {
        let mut o = fresh(3);
        o.ever_bootstrapped = true;
        if volumes {
            add_pvc(&mut o, "ex-abcd0");
        }
        assert!(!matches!(plan(&o), Step::Bootstrap(_)), "volumes={volumes}");
    }
    // Volumes alone (no mark) are never bootstrapped over either.
    let mut o = fresh(3);
    add_pvc(&mut o, "ex-x");
    assert!(!matches!(plan(&o), Step::Bootstrap(_)));
}

// ---- stuck members ---------------------------------------------------------------------------

#[test]
fn a_learner_crash_looping_on_settings_since_fixed_is_dropped_to_be_added_again() {
    let mut o = running(3, 4);
    add_learner(&mut o, 9, "ex-l", 0);
    let l = m(&mut o, 9);
    l.name.clear();
    l.status = None;
    let hash_now = o.desired.as_ref().unwrap().pod_hash();
    let p = o.pods.get_mut("ex-l").unwrap();
    p.problem = Some(("CrashLoopBackOff".into(), "unknown flag".into()));
    p.spec_hash = Some(hash_now.clone());
    // Made under the current spec: reported, nothing dropped.
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
    // The user fixed etcdEnv since (same image, another pod spec): dropped, then added again.
    o.pods.get_mut("ex-l").unwrap().spec_hash = Some("0123456789abcdef".into());
    assert!(matches!(plan(&o), Step::RemoveMember { id: 9, .. }));
}

#[test]
fn a_learner_started_with_a_stale_initial_cluster_is_dropped_to_be_added_again() {
    let mut o = running(3, 4);
    add_learner(&mut o, 9, "ex-l", 0);
    let l = m(&mut o, 9);
    l.name.clear();
    l.status = None;
    let p = o.pods.get_mut("ex-l").unwrap();
    p.problem = Some(("CrashLoopBackOff".into(), "member count is unequal".into()));
    p.initial_cluster = vec!["ex-m1".into(), "ex-gone".into(), "ex-m3".into(), "ex-l".into()];
    assert!(matches!(plan(&o), Step::RemoveMember { id: 9, why, .. } if why.contains("initial-cluster")));
    // With the right initial cluster the same crash is only reported.
    o.pods.get_mut("ex-l").unwrap().initial_cluster =
        vec!["ex-m1".into(), "ex-m2".into(), "ex-m3".into(), "ex-l".into()];
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
}

#[test]
fn a_pvc_member_stuck_terminating_is_reported_with_what_to_do() {
    let mut o = pvc_cluster(3);
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.deleting = true;
    p.deleting_secs = Some(30);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::PodTerminating);
    o.pods.get_mut("ex-m2").unwrap().deleting_secs = Some(600);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::PodStuckTerminating);
    assert!(wait_message(&s).contains("ex-m2") && wait_message(&s).contains("out-of-service"), "{s:?}");
    assert!(WaitReason::PodStuckTerminating.needs_attention());
}

#[test]
fn an_invalid_edit_keeps_healing_under_the_last_valid_spec() {
    // observe hands the planner the last valid spec and the refusal; the planner heals as usual.
    let mut o = running(3, 3);
    o.spec_refused = Some(vec!["spec.size 0 is out of range".into()]);
    o.pods.remove("ex-m2");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 2, .. }));
}

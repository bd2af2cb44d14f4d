//! Quorum loss, one table row per situation: the survivor is chosen over several looks, not one;
//! a backup never replaces newer data a survivor holds, nor comes from another cluster; a
//! cluster that formed without the operator ever reaching etcd is never bootstrapped again.

use super::survivors::{Looks, SURVIVOR_LOOKS, Seen};
use super::tests::*;
use super::tests_failures::{backup_point, lose_pods, with_policy};
use super::*;
use crate::observed::{BackupPoint, MemberStatus, PodState};
use crate::validation::QuorumLossPolicy;

/// `looks` looks taken, in which each `(pod, id, applied, revision)` was seen holding that much.
fn looked(o: &mut Observed, looks: u32, seen: &[(&str, u64, u64, i64)]) {
    o.survivor_looks = Looks {
        looks,
        at: 0,
        members: seen
            .iter()
            .map(|&(pod, id, applied, revision)| (pod.to_string(), Seen { id, applied, revision }))
            .collect(),
    };
}

fn applied(o: &mut Observed, id: u64, index: u64, revision: i64) {
    let s = m(o, id).status.as_mut().unwrap();
    (s.raft_index, s.raft_applied_index, s.revision) = (index, index, revision);
}

fn seed_pod(s: &Step) -> String {
    match s {
        Step::Recover(r) => match &r.member.seed {
            Some(Seed::Member { pod, .. }) => pod.clone(),
            other => panic!("expected a survivor seed, got {other:?}"),
        },
        other => panic!("expected Recover, got {other:?}"),
    }
}

/// Five voters, three gone with their data: ex-m2 and ex-m3 survive without a leader.
fn two_survivors() -> Observed {
    let mut o = running(5, 5);
    lose_pods(&mut o, &[1, 4, 5]);
    applied(&mut o, 2, 950, 900);
    applied(&mut o, 3, 990, 940);
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(600));
    o
}

// ---- FromSurvivor: several looks ---------------------------------------------------------------

#[test]
fn from_survivor_waits_for_after_seconds_then_starts_from_the_survivor() {
    let mut o = running(3, 3);
    lose_pods(&mut o, &[2, 3]);
    m(&mut o, 1).status.as_mut().unwrap().revision = 81;
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(10));
    let s = plan(&o);
    assert!(wait_message(&s).contains("starts in 50s"), "{s:?}");
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(60));
    // ... and for what the survivors hold to have been compared over several looks.
    o.survivor_looks.looks = survivors::SURVIVOR_LOOKS;
    let Step::Recover(r) = plan(&o) else { panic!("expected Recover") };
    assert_eq!(r.revision, 81);
    assert_eq!((r.lost.len(), r.voters), (2, 3));
    assert!(r.from.contains("ex-m1"), "{}", r.from);
    let n = &r.member;
    assert!(n.name.starts_with("ex-") && !["ex-m1", "ex-m2", "ex-m3"].contains(&n.name.as_str()));
    assert!(n.bootstrap && !n.existing, "a new cluster of one");
    assert_eq!(n.initial_cluster.len(), 1);
    assert_eq!(
        n.seed,
        Some(Seed::Member {
            pod: "ex-m1".into(),
            client_url: "http://10.244.0.9:2379".into(),
            cluster_id: 42,
            member_id: 1
        })
    );
}

#[test]
fn the_survivor_that_applied_the_most_is_chosen() {
    let mut o = running(5, 5);
    lose_pods(&mut o, &[1, 4, 5]);
    // ex-m3 has the longer log, but part of it was never committed: ex-m2 applied more.
    let s2 = m(&mut o, 2).status.as_mut().unwrap();
    (s2.raft_index, s2.raft_applied_index) = (950, 950);
    let s3 = m(&mut o, 3).status.as_mut().unwrap();
    (s3.raft_index, s3.raft_applied_index) = (990, 900);
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(600));
    o.survivor_looks.looks = survivors::SURVIVOR_LOOKS;
    let Step::Recover(r) = plan(&o) else { panic!("expected Recover") };
    assert!(matches!(&r.member.seed, Some(Seed::Member { pod, .. }) if pod == "ex-m2"), "{:?}", r.member.seed);
}

#[test]
fn from_survivor_waits_for_several_looks_before_choosing() {
    let mut o = two_survivors();
    for looks in 0..SURVIVOR_LOOKS {
        looked(&mut o, looks, &[("ex-m2", 2, 950, 900), ("ex-m3", 3, 990, 940)]);
        let s = plan(&o);
        assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
        assert!(wait_message(&s).contains(&format!("({looks} taken)")), "{s:?}");
    }
    looked(&mut o, SURVIVOR_LOOKS, &[("ex-m2", 2, 950, 900), ("ex-m3", 3, 990, 940)]);
    assert_eq!(seed_pod(&plan(&o)), "ex-m3");
}

/// ex-m3 held the most in an earlier look and timed out in this one: the recovery waits for it
/// rather than start from ex-m2, which holds less.
#[test]
fn a_survivor_with_more_data_that_does_not_answer_this_time_is_waited_for() {
    let mut o = two_survivors();
    looked(&mut o, SURVIVOR_LOOKS, &[("ex-m2", 2, 950, 900), ("ex-m3", 3, 990, 940)]);
    unhealthy(&mut o, 3);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
    let msg = wait_message(&s);
    assert!(msg.contains("ex-m3") && msg.contains("990") && msg.contains("does not answer"), "{msg}");
    // It answers again: it is the one.
    m(&mut o, 3).status = Some(MemberStatus { raft_applied_index: 990, revision: 940, ..Default::default() });
    assert_eq!(seed_pod(&plan(&o)), "ex-m3");
}

/// What a look recorded counts beside what is answered now: ex-m2 answers 950 now, ex-m3 was
/// seen at 990 and answers 980 now (a reading taken while it replayed its log).
#[test]
fn the_most_seen_over_the_looks_decides() {
    let mut o = two_survivors();
    applied(&mut o, 3, 980, 930);
    m(&mut o, 3).status.as_mut().unwrap().leader = 0;
    applied(&mut o, 2, 985, 935);
    m(&mut o, 2).status.as_mut().unwrap().leader = 0;
    looked(&mut o, SURVIVOR_LOOKS, &[("ex-m2", 2, 950, 900), ("ex-m3", 3, 990, 940)]);
    assert_eq!(seed_pod(&plan(&o)), "ex-m3");
    // A record of another member under the same name does not count.
    looked(&mut o, SURVIVOR_LOOKS, &[("ex-m2", 2, 950, 900), ("ex-m3", 77, 990, 940)]);
    assert_eq!(seed_pod(&plan(&o)), "ex-m2");
}

#[test]
fn a_survivor_never_seen_answering_holds_the_recovery_up_and_says_how_to_give_it_up() {
    let mut o = two_survivors();
    unhealthy(&mut o, 3);
    looked(&mut o, SURVIVOR_LOOKS + 5, &[("ex-m2", 2, 950, 900)]);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
    let msg = wait_message(&s);
    assert!(msg.contains("ex-m3 never answered") && msg.contains("delete its pod and its claim"), "{msg}");
    // Once its pod ends without a volume it is lost for good, and no longer waited for.
    o.pods.get_mut("ex-m3").unwrap().phase = "Failed".into();
    assert_eq!(seed_pod(&plan(&o)), "ex-m2");
}

/// The record of looks: one more at most every few seconds while a formed cluster has no
/// quorum and a member answers; the most each member was seen with; cleared with a quorum.
#[test]
fn looks_are_recorded_while_the_quorum_is_lost_and_cleared_with_it() {
    use super::survivors::{LOOK_SECS, recorded};
    let mut o = two_survivors();
    let r1 = recorded(&o, None, 1000).expect("a first look");
    assert_eq!(r1.looks, 1);
    assert_eq!(r1.members["ex-m3"], Seen { id: 3, applied: 990, revision: 940 });
    assert!(!r1.members.contains_key("ex-m1"), "no answer, nothing seen");
    assert_eq!(recorded(&o, Some(&r1), 1000 + LOOK_SECS - 1), Some(r1.clone()), "too soon for another look");
    unhealthy(&mut o, 3);
    applied(&mut o, 2, 960, 910);
    m(&mut o, 2).status.as_mut().unwrap().leader = 0;
    let r2 = recorded(&o, Some(&r1), 1000 + LOOK_SECS).unwrap();
    assert_eq!(r2.looks, 2);
    assert_eq!(r2.members["ex-m3"].applied, 990, "kept while it does not answer");
    assert_eq!(r2.members["ex-m2"].applied, 960);
    // No member answers: no look, the record stays.
    let mut silent = o.clone();
    silent.etcd = None;
    assert_eq!(recorded(&silent, Some(&r2), 5000), Some(r2.clone()));
    // A quorum again: no record.
    assert_eq!(recorded(&running(3, 3), Some(&r2), 5000), None);
    // A cluster that never formed has no survivors to compare.
    let mut fresh_one = o.clone();
    fresh_one.ever_bootstrapped = false;
    assert_eq!(recorded(&fresh_one, None, 5000), None);
}

// ---- FromBackup: never over newer data, never another cluster's --------------------------------

fn from_backup(o: &mut Observed, point: BackupPoint) {
    with_policy(o, QuorumLossPolicy::FromBackup { backup: "nightly".into() }, Some(600));
    o.recovery_backup = Some(Ok(point));
}

/// Three emptyDir voters, two gone: ex-m1 survives. The backup is at revision 7.
fn one_survivor_at(revision: i64) -> Observed {
    let mut o = running(3, 3);
    lose_pods(&mut o, &[2, 3]);
    applied(&mut o, 1, 100, revision);
    looked(&mut o, SURVIVOR_LOOKS, &[("ex-m1", 1, 100, revision)]);
    from_backup(&mut o, backup_point());
    o
}

#[test]
fn from_backup_waits_while_a_survivor_holds_newer_data_and_says_what_to_do() {
    let o = one_survivor_at(81);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::NoQuorum);
    let msg = wait_message(&s);
    assert!(msg.contains("ex-m1") && msg.contains("81") && msg.contains("newer than the backup"), "{msg}");
    assert!(msg.contains("FromSurvivor"), "{msg}");
    // Seen newer in an earlier look only: still newer.
    let mut o = one_survivor_at(5);
    looked(&mut o, SURVIVOR_LOOKS, &[("ex-m1", 1, 100, 81)]);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
    // The survivor holds no more than the backup: the backup it is.
    let o = one_survivor_at(7);
    assert!(matches!(plan(&o), Step::Recover(r) if matches!(r.member.seed, Some(Seed::Backup(_)))));
}

#[test]
fn from_backup_compares_over_several_looks_too() {
    let mut o = one_survivor_at(5);
    looked(&mut o, SURVIVOR_LOOKS - 1, &[("ex-m1", 1, 100, 5)]);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
    // A survivor that never answered could hold newer data: waited for.
    let mut o = one_survivor_at(5);
    unhealthy(&mut o, 1);
    looked(&mut o, SURVIVOR_LOOKS, &[]);
    assert!(wait_message(&plan(&o)).contains("never answered"));
    // Nothing left at all: no survivor to compare, the backup is used (after afterSeconds).
    let mut o = one_survivor_at(5);
    o.pods.clear();
    o.etcd = None;
    assert!(matches!(plan(&o), Step::Recover(_)));
}

#[test]
fn a_backup_of_another_cluster_is_refused() {
    let cases: &[(&str, &[&str], bool)] = &[
        ("ex", &[], true),
        ("other", &[], false),
        ("", &["http://ex-client:2379"], true),
        ("", &["https://ex-client.ns.svc:2379", "http://ex-client.ns.svc.cluster.local:2379"], true),
        ("", &["http://ex-m1.ex.ns.svc:2379"], true),
        ("", &["http://other-client:2379"], false),
        ("", &["http://ex-client.elsewhere.svc:2379"], false),
        ("", &["http://ex-client:2379", "http://10.0.0.1:2379"], false),
        ("", &[], false),
    ];
    for &(cluster_name, endpoints, ours) in cases {
        let mut o = running(3, 3);
        o.pods.clear();
        o.etcd = None;
        let point = BackupPoint {
            cluster_name: cluster_name.into(),
            endpoints: endpoints.iter().map(|e| e.to_string()).collect(),
            ..backup_point()
        };
        from_backup(&mut o, point);
        let s = plan(&o);
        assert_eq!(matches!(s, Step::Recover(_)), ours, "{cluster_name:?} {endpoints:?}: {s:?}");
        if !ours {
            assert!(wait_message(&s).contains("not of this cluster"), "{s:?}");
        }
    }
}

// ---- formation needs a quorum; a cluster that formed unseen is never bootstrapped again ---------

#[test]
fn a_cluster_seen_formed_without_its_id_reports_data_loss_instead_of_bootstrapping() {
    let mut o = fresh(3);
    o.ever_bootstrapped = true;
    o.formed_unrecorded = Some("ex-abcd1 was Ready at 2026-01-01T00:00:00Z".into());
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::DataLost);
    let msg = wait_message(&s);
    assert!(msg.contains("never reached etcd") && msg.contains("ex-abcd1 was Ready"), "{msg}");
    // A bootstrap pod left of it is not re-created as a bootstrap member either.
    o.pods.insert("ex-abcd0".into(), PodState { bootstrap: true, ready: false, ..pod("ex-abcd0") });
    o.pods.get_mut("ex-abcd0").unwrap().initial_cluster = vec!["ex-abcd0".into(), "ex-abcd1".into()];
    let s = plan(&o);
    assert!(!matches!(s, Step::CreatePod(_) | Step::Bootstrap(_)), "{s:?}");
}

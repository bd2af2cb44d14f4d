//! Table tests of what a member replays when it restarts into a new minor (`replay`): etcd 3.6
//! panics on the v2 `QGET` entries 3.4's `/health` writes, etcd 3.7 on entries of 3.5 members.
//! A member restarts into 3.6 (3.7) only once its own applied index proves a raft snapshot past
//! the last entry of 3.4 (3.5) members; an unknown history counts as written up to now.
//! Fixtures as in `tests.rs`: `running(n, size)` is `n` healthy voters `ex-m1..`, `ex-m1`
//! leading, every member at raft index 1000.

use super::tests::{etcd, m, plan_drained, running, unhealthy, wait_message, wait_reason};
use super::*;
use crate::observed::{MinorSince, Since};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

/// Pods annotated, members reporting `version`, every member at `index` (applied as well).
fn at(o: &mut Observed, version: &str, index: u64) {
    for p in o.pods.values_mut() {
        p.version = version.into();
        p.image = format!("quay.io/coreos/etcd:v{version}");
    }
    for mem in &mut etcd(o).members {
        let st = mem.status.as_mut().unwrap();
        st.version = version.into();
        st.raft_index = index;
        st.raft_applied_index = index;
    }
}

fn want(o: &mut Observed, version: &str, env: &[(&str, &str)]) {
    let spec: EtcdClusterSpec = serde_json::from_value(serde_json::json!({
        "size": 3, "version": version,
        "pod": {"etcdEnv": env.iter().map(|(n, v)| serde_json::json!({"name": n, "value": v})).collect::<Vec<_>>()},
    }))
    .unwrap();
    o.desired = validate("ex", &spec);
    assert!(o.desired.is_ok(), "{:?}", o.desired);
}

fn since(o: &mut Observed, minor: &str, since: Since) {
    o.minor_since = Some(MinorSince { minor: minor.into(), since });
}

fn applied(o: &mut Observed, id: u64, index: u64) {
    m(o, id).status.as_mut().unwrap().raft_applied_index = index;
}

fn snapshot_count(o: &mut Observed, count: &str) {
    for p in o.pods.values_mut() {
        p.etcd_flags = vec![("snapshot-count".into(), Some(count.into()))];
    }
}

// ---- 3.5 → 3.6: the QGET entries of 3.4 ------------------------------------------------------

/// The crash loop: 3.4 → 3.5 → 3.6 in quick succession. The cluster reached 3.5 at
/// index 5000 (the 3.4 members' last /health QGET is at most there); etcd 3.5 snapshots every
/// 100000 applied entries by default: a member may restart into 3.6 once its own applied index
/// is at 5000 + 100000 with nothing left to apply (its last snapshot check ran after that), or
/// 1000 further while it is still applying a batch.
#[test]
fn three_six_waits_until_each_member_has_a_snapshot_past_the_last_three_four_entry() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 20_000);
    want(&mut o, "3.6.15", &[]);
    since(&mut o, "3.5", Since::Index(5_000));
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeDeferred);
    let msg = wait_message(&s);
    assert!(msg.contains("ex-m2") && msg.contains("past index 5000") && msg.contains("105000"), "{msg}");
    assert!(msg.contains("QGET") && msg.contains("100000"), "names the hazard and etcd's count: {msg}");
    // Every member there, all applied: the upgrade starts with a follower.
    at(&mut o, "3.5.34", 105_000);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"));
    // Just below it: still waiting.
    at(&mut o, "3.5.34", 104_999);
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::UpgradeDeferred);
    // Still applying (committed ahead of applied): the batch in progress may not have been
    // checked yet, so 1000 entries more.
    at(&mut o, "3.5.34", 110_000);
    for id in 1..=3 {
        applied(&mut o, id, 105_500);
    }
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::UpgradeDeferred);
    for id in 1..=3 {
        applied(&mut o, id, 106_000);
    }
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"));
}

/// Each member by its own applied index, not the leader's: a follower that lags (or restarted
/// from an old snapshot and is still applying) waits, the others go first.
#[test]
fn each_member_is_judged_by_its_own_applied_index() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 200_000);
    want(&mut o, "3.6.15", &[]);
    since(&mut o, "3.5", Since::Index(5_000));
    applied(&mut o, 2, 50_000);
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeDeferred, "the leader's index is no proof for ex-m2");
    assert!(wait_message(&s).contains("ex-m2 has applied 50000"), "{}", wait_message(&s));
    // ex-m2 caught up; ex-m3 has been upgraded already; the leader (ex-m1) lags: it is not moved
    // away from and not upgraded before its own snapshot.
    applied(&mut o, 2, 200_000);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"));
    for id in [2, 3] {
        let p = o.pods.get_mut(&format!("ex-m{id}")).unwrap();
        p.version = "3.6.15".into();
        m(&mut o, id).status.as_mut().unwrap().version = "3.6.15".into();
    }
    applied(&mut o, 1, 90_000);
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeDeferred, "{s:?}");
    assert!(wait_message(&s).contains("member ex-m1"), "{}", wait_message(&s));
    applied(&mut o, 1, 200_000);
    assert!(matches!(plan_drained(&o), Step::MoveLeader { from_pod, .. } if from_pod == "ex-m1"));
}

/// The fail-open cases of the issue: the operator did not see the earlier step (an adopted
/// cluster, an older operator, a lost annotation) — the log counts as written by 3.4 members up
/// to the leader's index now.
#[test]
fn an_unknown_history_counts_as_written_up_to_now() {
    // No mark at all, or an earlier operator version's "3.5 0" (`marks::parse_minor_since`).
    for mark in [None, Some(Since::Unknown)] {
        let mut o = running(3, 3);
        at(&mut o, "3.5.34", 20_000);
        want(&mut o, "3.6.15", &[]);
        o.minor_since = mark.map(|s| MinorSince { minor: "3.5".into(), since: s });
        let s = plan_drained(&o);
        assert_eq!(wait_reason(&s), WaitReason::UpgradeDeferred, "{mark:?}");
        assert!(wait_message(&s).contains("past index 20000"), "{mark:?}: {}", wait_message(&s));
    }
    // A mark of another minor (the cluster reached 3.5 in this very observation): also now.
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 20_000);
    want(&mut o, "3.6.15", &[]);
    since(&mut o, "3.4", Since::Index(300));
    assert!(wait_message(&plan_drained(&o)).contains("past index 20000"));
    // While a 3.5 member served v2 (its /health writes QGET as well), also now.
    since(&mut o, "3.5+v2", Since::Index(300));
    assert!(wait_message(&plan_drained(&o)).contains("past index 20000"));
}

/// A log this operator began at 3.5 (its bootstrap, a restore, a recovery) holds no 3.4 entry.
#[test]
fn a_log_that_began_at_three_five_upgrades_at_once() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 200);
    want(&mut o, "3.6.15", &[]);
    since(&mut o, "3.5", Since::LogStart);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"));
}

/// The count is the member's own: `--snapshot-count`/`ETCD_SNAPSHOT_COUNT` in its pod, else
/// its version's default (100000 before 3.6, 10000 from 3.6); unreadable → no proof.
#[test]
fn the_snapshot_count_is_the_one_the_member_runs_with() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 7_001);
    want(&mut o, "3.6.15", &[]);
    since(&mut o, "3.5", Since::Index(5_000));
    snapshot_count(&mut o, "1000");
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }), "5000 + 1000 <= 7001");
    at(&mut o, "3.5.34", 5_999);
    assert!(wait_message(&plan_drained(&o)).contains("every 1000 applied entries (its --snapshot-count)"));
    // The spec asking for another count does not count until the pod runs with it.
    want(&mut o, "3.6.15", &[("ETCD_SNAPSHOT_COUNT", "10")]);
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::UpgradeDeferred);
    o.pods.get_mut("ex-m2").unwrap().etcd_flags = vec![("snapshot-count".into(), None)];
    assert!(wait_message(&plan_drained(&o)).contains("cannot be read"), "{}", wait_message(&plan_drained(&o)));
}

/// A member that does not answer shows no applied index: a down 3.5 member is never moved to
/// 3.6 to get it running (it would replay what it cannot).
#[test]
fn a_failing_member_is_not_moved_into_three_six_without_proof() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 20_000);
    want(&mut o, "3.6.15", &[]);
    unhealthy(&mut o, 2);
    o.pods.get_mut("ex-m2").unwrap().problem = Some(("CrashLoopBackOff".into(), "back-off".into()));
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberFailing, "{:?}", plan_drained(&o));
    // Within a minor (3.5.33 → 3.5.34) a failing member is still moved forward.
    let mut o = running(3, 3);
    at(&mut o, "3.5.33", 20_000);
    unhealthy(&mut o, 2);
    o.pods.get_mut("ex-m2").unwrap().problem = Some(("CrashLoopBackOff".into(), "back-off".into()));
    want(&mut o, "3.5.34", &[]);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"));
}

/// While the upgrade waits before its first member, a rollout goes through: a lower
/// `ETCD_SNAPSHOT_COUNT` is how a user hurries the snapshot, and the members get it that way.
#[test]
fn a_deferred_upgrade_lets_a_lower_snapshot_count_roll_out() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 20_000);
    want(&mut o, "3.6.15", &[("ETCD_SNAPSHOT_COUNT", "1000")]);
    since(&mut o, "3.5", Since::Index(5_000));
    for p in o.pods.values_mut() {
        p.spec_hash = Some("made-under-an-older-spec".into());
    }
    super::tests::add_pvc(&mut o, "ex-m2");
    super::tests::drained(&mut o, "ex-m2");
    assert!(
        matches!(plan_drained(&o), Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m2"),
        "{:?}",
        plan_drained(&o)
    );
}

/// Refused: 3.6 has no v2 API, and a member serving it writes QGET entries as 3.4 does.
#[test]
fn three_six_is_refused_while_a_member_serves_v2() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.34", 20_000);
    want(&mut o, "3.6.15", &[]);
    since(&mut o, "3.5", Since::LogStart);
    o.pods.get_mut("ex-m3").unwrap().etcd_flags = vec![("enable-v2".into(), Some("true".into()))];
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeRefused);
    assert!(wait_message(&s).contains("ex-m3") && wait_message(&s).contains("ETCD_ENABLE_V2"), "{s:?}");
}

// ---- 3.6 → 3.7: the entries of 3.5 -------------------------------------------------------------

#[test]
fn three_seven_waits_for_a_snapshot_past_the_upgrade_from_three_five() {
    let mut o = running(3, 3);
    at(&mut o, "3.6.15", 12_000);
    want(&mut o, "3.7.2", &[]);
    // The last member reached 3.6 at index 5000; 3.6 snapshots every 10000 entries.
    since(&mut o, "3.6", Since::Index(5_000));
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeDeferred);
    assert!(wait_message(&s).contains("16000") && wait_message(&s).contains("3.5"), "{}", wait_message(&s));
    at(&mut o, "3.6.15", 16_000);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }));
    // The mark still says 3.5: every member reached 3.6 in this very observation.
    since(&mut o, "3.5", Since::Index(300));
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::UpgradeDeferred);
    // A cluster whose history is unknown is no longer taken to have started at 3.6.
    o.minor_since = None;
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::UpgradeDeferred);
    // One that began at 3.6 under this operator upgrades at once.
    since(&mut o, "3.6", Since::LogStart);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }));
    // A patch upgrade within 3.6 is never held.
    since(&mut o, "3.6", Since::Index(15_000));
    want(&mut o, "3.6.16", &[]);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }));
}

/// Nothing is held within a minor, nor for 3.4 → 3.5 (3.5 replays everything).
#[test]
fn patch_upgrades_and_three_four_to_three_five_are_never_held() {
    let mut o = running(3, 3);
    at(&mut o, "3.4.23", 200);
    want(&mut o, "3.5.34", &[]);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }));
    at(&mut o, "3.5.33", 200);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }));
}

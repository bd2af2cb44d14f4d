//! One table row per situation an etcd operator meets. Each builds an `Observed` with the
//! fixture helpers below and names the one step the planner must choose.

use super::*;
use crate::observed::{MemberState, MemberStatus, PodState};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

pub(super) const NS: &str = "ns";
pub(super) const NAME: &str = "ex";

pub(super) fn desired(size: i32) -> Result<Desired, Vec<String>> {
    validate(NAME, &EtcdClusterSpec { size, version: "3.5.1".into(), ..Default::default() })
}

pub(super) fn pod(name: &str) -> PodState {
    PodState {
        name: name.into(),
        ip: Some("10.244.0.9".into()),
        phase: "Running".into(),
        ready: true,
        version: "3.5.1".into(),
        image: "quay.io/coreos/etcd:v3.5.1".into(),
        age_secs: 600,
        serving: Some(true),
        ..Default::default()
    }
}

/// The member was taken out of the client Service long enough ago to leave.
pub(super) fn drained(o: &mut Observed, pod: &str) {
    let p = o.pods.get_mut(pod).unwrap();
    p.serving = Some(false);
    p.drained_secs = Some(DRAIN_SECS);
}

pub(super) fn member(id: u64, name: &str, leader: u64, raft_index: u64) -> MemberState {
    MemberState {
        id,
        name: name.into(),
        pod: name.into(),
        peer_urls: vec![format!("http://{name}.{NAME}.{NS}.svc:2380")],
        is_learner: false,
        status: Some(MemberStatus { version: "3.5.1".into(), leader, raft_index, ..Default::default() }),
    }
}

/// A cluster of `n` healthy voters `ex-m1..`, `ex-m1` (id 1) leading, spec size `size`.
pub(super) fn running(n: u64, size: i32) -> Observed {
    let mut o = Observed {
        name: NAME.into(),
        namespace: NS.into(),
        desired: desired(size),
        services_ready: true,
        ever_bootstrapped: true,
        new_member_suffix: "zzzzz".into(),
        ..Default::default()
    };
    let mut etcd = EtcdState { cluster_id: 42, leader: Some(1), members: vec![], ..Default::default() };
    for i in 1..=n {
        let name = format!("ex-m{i}");
        o.pods.insert(name.clone(), pod(&name));
        etcd.members.push(member(i, &name, 1, 1000));
    }
    o.etcd = Some(etcd);
    o
}

pub(super) fn etcd(o: &mut Observed) -> &mut EtcdState {
    o.etcd.as_mut().unwrap()
}

pub(super) fn m(o: &mut Observed, id: u64) -> &mut MemberState {
    etcd(o).members.iter_mut().find(|m| m.id == id).unwrap()
}

pub(super) fn unhealthy(o: &mut Observed, id: u64) {
    m(o, id).status = None;
}

pub(super) fn add_learner(o: &mut Observed, id: u64, name: &str, raft_index: u64) {
    let mut l = member(id, name, 1, raft_index);
    l.is_learner = true;
    etcd(o).members.push(l);
    o.pods.insert(name.into(), pod(name));
}

pub(super) fn add_pvc(o: &mut Observed, member: &str) {
    o.pvcs.insert(
        member.into(),
        crate::observed::PvcState {
            name: format!("{member}-data"),
            member: member.into(),
            peer_url: Some(format!("http://{member}.{NAME}.{NS}.svc:2380")),
            ..Default::default()
        },
    );
    if let Some(p) = o.pods.get_mut(member) {
        p.uses_pvc = true;
    }
}

pub(super) fn wait_message(s: &Step) -> String {
    match s {
        Step::Wait(w) => w.message.clone(),
        other => panic!("expected a Wait, got {other:?}"),
    }
}

pub(super) fn wait_reason(s: &Step) -> WaitReason {
    match s {
        Step::Wait(w) => w.reason,
        other => panic!("expected a Wait, got {other:?}"),
    }
}

// ---- spec, pause, services -------------------------------------------------------------

#[test]
fn invalid_spec_changes_nothing_and_says_why() {
    let mut o = running(3, 3);
    o.desired = validate(NAME, &EtcdClusterSpec { size: 3, version: "3.2.13".into(), ..Default::default() });
    o.pods.clear(); // even a dead cluster is left alone while the spec is invalid
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::InvalidSpec);
    let Step::Wait(w) = s else { unreachable!() };
    assert!(w.message.contains("3.2.13") && w.message.contains("3.4.x"), "{}", w.message);
}

#[test]
fn paused_cluster_is_not_healed() {
    let mut o = running(3, 3);
    o.pods.remove("ex-m2");
    o.paused = true;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Paused);
}

#[test]
fn missing_services_are_created_first() {
    let mut o = running(3, 3);
    o.services_ready = false;
    assert_eq!(plan(&o), Step::CreateServices);
}

// ---- bootstrap ---------------------------------------------------------------------------

pub(super) fn fresh(size: i32) -> Observed {
    Observed {
        name: NAME.into(),
        namespace: NS.into(),
        desired: desired(size),
        services_ready: true,
        new_member_suffix: "abcde".into(),
        ..Default::default()
    }
}

#[test]
fn new_cluster_bootstraps_all_members_with_one_static_initial_cluster() {
    let Step::Bootstrap(ms) = plan(&fresh(3)) else { panic!("expected Bootstrap") };
    let names: Vec<_> = ms.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["ex-abcd0", "ex-abcd1", "ex-abcd2"]);
    for m in &ms {
        assert!(!m.existing && m.bootstrap && !m.pvc);
        assert_eq!(m.initial_cluster.len(), 3);
        assert_eq!(m.initial_cluster[0], ("ex-abcd0".to_string(), "http://ex-abcd0.ex.ns.svc:2380".to_string()));
        assert_eq!(m.version.to_string(), "3.5.1");
    }
}

#[test]
fn bootstrap_pods_starting_are_waited_for() {
    let mut o = fresh(3);
    for n in ["ex-abcd0", "ex-abcd1", "ex-abcd2"] {
        o.pods.insert(n.into(), PodState { bootstrap: true, age_secs: 2, ..pod(n) });
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Bootstrapping);
}

#[test]
fn a_dead_bootstrap_pod_of_a_cluster_that_never_formed_is_cleared() {
    let mut o = fresh(1);
    o.pods.insert("ex-abcd0".into(), PodState { bootstrap: true, phase: "Failed".into(), ..pod("ex-abcd0") });
    assert!(matches!(plan(&o), Step::DeletePod { pod, .. } if pod == "ex-abcd0"));
}

#[test]
fn all_pods_gone_after_the_cluster_ran_is_data_loss_not_a_new_cluster() {
    let mut o = running(3, 3);
    o.pods.clear();
    o.etcd = None;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::DataLost);
}

#[test]
fn unreachable_etcd_with_pods_is_reported_without_action() {
    let mut o = running(3, 3);
    o.etcd = None;
    o.etcd_error = Some("connection refused".into());
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

// ---- steady state and quorum ---------------------------------------------------------------

#[test]
fn healthy_cluster_of_the_right_size_is_stable() {
    assert_eq!(wait_reason(&plan(&running(3, 3))), WaitReason::Stable);
}

#[test]
fn no_quorum_means_no_action_even_with_dead_members() {
    let mut o = running(3, 3);
    unhealthy(&mut o, 2);
    unhealthy(&mut o, 3);
    o.pods.remove("ex-m3");
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

#[test]
fn a_voter_on_a_terminating_pod_does_not_count_as_healthy() {
    let mut o = running(3, 3);
    o.pods.get_mut("ex-m2").unwrap().deleting = true;
    o.pods.get_mut("ex-m3").unwrap().deleting = true;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
}

// ---- scale up with learners -------------------------------------------------------------------

#[test]
fn scale_up_adds_one_learner_that_joins_the_existing_cluster() {
    let Step::AddLearner(n) = plan(&running(3, 5)) else { panic!("expected AddLearner") };
    assert_eq!(n.name, "ex-zzzzz");
    assert!(n.existing && !n.bootstrap);
    assert_eq!(n.initial_cluster.len(), 4);
    assert_eq!(n.initial_cluster[3].1, "http://ex-zzzzz.ex.ns.svc:2380");
}

#[test]
fn new_members_run_the_version_the_pods_run_not_the_spec() {
    let mut o = running(3, 4);
    o.desired = validate(NAME, &EtcdClusterSpec { size: 4, version: "3.5.1".into(), ..Default::default() });
    o.pods.get_mut("ex-m1").unwrap().version = "3.5.0".into();
    let Step::AddLearner(n) = plan(&o) else { panic!() };
    assert_eq!(n.version.to_string(), "3.5.0");
}

#[test]
fn a_lagging_learner_is_waited_for() {
    let mut o = running(3, 4);
    add_learner(&mut o, 9, "ex-l", 10);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::LearnerCatchingUp);
}

#[test]
fn a_caught_up_learner_is_promoted() {
    let mut o = running(3, 4);
    add_learner(&mut o, 9, "ex-l", 995);
    assert_eq!(plan(&o), Step::Promote { id: 9, pod: "ex-l".into() });
}

#[test]
fn only_one_learner_at_a_time() {
    let mut o = running(3, 5);
    add_learner(&mut o, 9, "ex-l", 10);
    assert!(!matches!(plan(&o), Step::AddLearner(_)));
}

#[test]
fn a_learner_registered_before_a_crash_gets_its_pod() {
    let mut o = running(3, 4);
    add_learner(&mut o, 9, "ex-l", 0);
    o.pods.remove("ex-l");
    m(&mut o, 9).name.clear(); // never started
    m(&mut o, 9).status = None;
    let Step::CreatePod(n) = plan(&o) else { panic!("expected CreatePod") };
    assert_eq!(n.name, "ex-l");
    assert!(n.existing);
}

#[test]
fn scale_down_removes_a_pending_learner_first() {
    let mut o = running(3, 3);
    add_learner(&mut o, 9, "ex-l", 10);
    assert!(matches!(plan(&o), Step::RemoveMember { id: 9, .. }));
}

#[test]
fn a_learner_that_cannot_pull_its_image_is_dropped_once_the_spec_changed() {
    let mut o = running(3, 4);
    add_learner(&mut o, 9, "ex-l", 0);
    let p = o.pods.get_mut("ex-l").unwrap();
    p.image = "quay.io/coreos/etcd:v3.5.99".into();
    p.problem = Some(("ImagePullBackOff".into(), "not found".into()));
    assert!(matches!(plan(&o), Step::RemoveMember { id: 9, .. }));
}

#[test]
fn the_next_member_waits_for_the_previous_one_to_be_healthy() {
    let mut o = running(4, 5);
    unhealthy(&mut o, 4);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
}

// ---- scale down -----------------------------------------------------------------------------------

#[test]
fn scale_down_removes_one_non_leader_after_draining_it_from_the_client_service() {
    let mut o = running(5, 3);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m5".into() });
    // Drained a moment ago: every node's proxy must follow before it stops answering.
    drained(&mut o, "ex-m5");
    o.pods.get_mut("ex-m5").unwrap().drained_secs = Some(DRAIN_SECS - 1);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    drained(&mut o, "ex-m5");
    assert_eq!(plan(&o), Step::RemoveMember { id: 5, pod: "ex-m5".into(), why: "scaling down to 4 members".into() });
}

#[test]
fn scale_down_never_picks_the_leader() {
    let mut o = running(5, 3);
    etcd(&mut o).leader = Some(5);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m4".into() });
    drained(&mut o, "ex-m4");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 4, .. }));
}

#[test]
fn scale_down_to_one() {
    let mut o = running(2, 1);
    drained(&mut o, "ex-m2");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 2, .. }));
}

// ---- healing ----------------------------------------------------------------------------------------

#[test]
fn a_member_whose_pod_is_gone_is_removed_then_replaced() {
    let mut o = running(3, 3);
    o.pods.remove("ex-m2");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 2, .. }));
    etcd(&mut o).members.retain(|m| m.id != 2);
    assert!(matches!(plan(&o), Step::AddLearner(_)));
}

#[test]
fn a_failed_pod_is_replaced_like_a_missing_one() {
    let mut o = running(3, 3);
    o.pods.get_mut("ex-m3").unwrap().phase = "Failed".into();
    assert!(matches!(plan(&o), Step::RemoveMember { id: 3, .. }));
}

#[test]
fn a_pvc_member_restarts_on_its_volume_keeping_its_identity() {
    let mut o = running(3, 3);
    o.pods.remove("ex-m2");
    add_pvc(&mut o, "ex-m2");
    let Step::CreatePod(n) = plan(&o) else { panic!("expected CreatePod") };
    assert_eq!(n.name, "ex-m2");
    assert!(n.existing && n.pvc && n.restart, "{n:?}");
}

#[test]
fn an_emptydir_member_whose_pod_is_terminating_is_replaced_at_once() {
    let mut o = running(3, 3);
    o.pods.get_mut("ex-m2").unwrap().deleting = true;
    assert!(matches!(plan(&o), Step::RemoveMember { id: 2, .. }));
}

#[test]
fn a_pvc_member_whose_pod_is_terminating_is_waited_for() {
    let mut o = running(3, 3);
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.deleting = true;
    p.uses_pvc = true;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::PodTerminating);
}

#[test]
fn a_crash_looping_member_is_surfaced_and_nothing_else_is_touched() {
    let mut o = running(3, 5);
    o.pods.get_mut("ex-m3").unwrap().problem = Some(("CrashLoopBackOff".into(), "back-off 40s".into()));
    o.pods.remove("ex-m2");
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::MemberFailing);
    let Step::Wait(w) = s else { unreachable!() };
    assert!(w.message.contains("ex-m3") && w.message.contains("CrashLoopBackOff"));
}

#[test]
fn an_old_pod_of_no_member_is_deleted_a_young_one_is_not() {
    let mut o = running(3, 3);
    o.pods.insert("ex-stray".into(), PodState { age_secs: 5, ..pod("ex-stray") });
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    o.pods.get_mut("ex-stray").unwrap().age_secs = 120;
    assert!(matches!(plan(&o), Step::DeletePod { pod, .. } if pod == "ex-stray"));
}

// ---- upgrades ------------------------------------------------------------------------------------------

fn want(o: &mut Observed, size: i32, version: &str) {
    o.desired = validate(NAME, &EtcdClusterSpec { size, version: version.into(), ..Default::default() });
}

/// Pods annotated and members reporting `version`.
fn at(o: &mut Observed, version: &str) {
    for p in o.pods.values_mut() {
        p.version = version.into();
        p.image = format!("quay.io/coreos/etcd:v{version}");
    }
    for m in etcd(o).members.iter_mut() {
        if let Some(s) = m.status.as_mut() {
            s.version = version.into();
        }
    }
}

/// Member `id` (pod ex-m<id>) was moved to `version` `age` seconds ago and reports `reports`.
fn upgraded(o: &mut Observed, id: u64, version: &str, age: i64, reports: &str) {
    let p = o.pods.get_mut(&format!("ex-m{id}")).unwrap();
    p.version = version.into();
    p.version_age_secs = Some(age);
    m(o, id).status.as_mut().unwrap().version = reports.into();
}

#[test]
fn upgrade_starts_with_a_follower() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, to, .. } if pod == "ex-m2" && to.to_string() == "3.5.1"));
}

#[test]
fn the_next_member_waits_until_the_upgraded_one_reports_the_new_version() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 5, "3.5.0");
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberUpgrading);
    unhealthy(&mut o, 2);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberUpgrading);
}

#[test]
fn the_next_member_waits_until_the_upgraded_one_has_caught_up() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 5, "3.5.1");
    m(&mut o, 1).status.as_mut().unwrap().raft_index = 50_000;
    m(&mut o, 2).status.as_mut().unwrap().raft_applied_index = 10;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberUpgrading);
    m(&mut o, 2).status.as_mut().unwrap().raft_applied_index = 49_900;
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"));
}

#[test]
fn leadership_moves_to_an_upgraded_member_before_the_leader_is_upgraded() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 30, "3.5.1");
    upgraded(&mut o, 3, "3.5.1", 10, "3.5.1");
    assert_eq!(
        plan(&o),
        Step::MoveLeader { from_pod: "ex-m1".into(), to: 2, to_pod: "ex-m2".into(), purpose: Purpose::Upgrade }
    );
    etcd(&mut o).leader = Some(2);
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"));
}

#[test]
fn a_finished_upgrade_is_stable() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.1");
    for id in 1..=3 {
        upgraded(&mut o, id, "3.5.1", 30, "3.5.1");
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

#[test]
fn an_upgraded_member_that_does_not_come_back_in_time_stops_the_upgrade() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 500, "3.5.0");
    unhealthy(&mut o, 2);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeFailed);
}

#[test]
fn a_crash_looping_upgraded_member_fails_the_upgrade_naming_member_and_reason() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 20, "");
    unhealthy(&mut o, 2);
    o.pods.get_mut("ex-m2").unwrap().problem = Some(("CrashLoopBackOff".into(), "back-off 10s".into()));
    let Step::Wait(w) = plan(&o) else { panic!() };
    assert_eq!(w.reason, WaitReason::UpgradeFailed);
    assert!(
        w.message.contains("ex-m2") && w.message.contains("CrashLoopBackOff") && w.message.contains("3.5.0"),
        "{}",
        w.message
    );
}

#[test]
fn setting_the_version_back_rolls_the_failed_member_back() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    upgraded(&mut o, 2, "3.5.99", 20, "");
    unhealthy(&mut o, 2);
    o.pods.get_mut("ex-m2").unwrap().problem = Some(("ImagePullBackOff".into(), "not found".into()));
    want(&mut o, 3, "3.5.0");
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, to, .. } if pod == "ex-m2" && to.to_string() == "3.5.0"));
}

#[test]
fn a_one_member_cluster_rolls_back_even_while_etcd_is_down() {
    let mut o = running(1, 1);
    at(&mut o, "3.5.0");
    o.recorded_version = Some("3.5.0".into());
    o.etcd = None;
    let p = o.pods.get_mut("ex-m1").unwrap();
    p.version = "3.5.99".into();
    p.problem = Some(("ErrImagePull".into(), "not found".into()));
    want(&mut o, 1, "3.5.0");
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"));
}

#[test]
fn downgrades_and_minor_skips_are_refused_without_change() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.1");
    want(&mut o, 3, "3.4.23");
    let Step::Wait(w) = plan(&o) else { panic!() };
    assert_eq!(w.reason, WaitReason::UpgradeRefused);
    assert!(w.message.contains("downgrade"), "{}", w.message);
    at(&mut o, "3.4.23");
    want(&mut o, 3, "3.6.0");
    let Step::Wait(w) = plan(&o) else { panic!() };
    assert_eq!(w.reason, WaitReason::UpgradeRefused);
    assert!(w.message.contains("skips a minor"), "{}", w.message);
}

/// Upstream's stepping stones: 3.5 → 3.6 only from 3.5.26, 3.6 → 3.7 only from 3.6.11; the
/// refusal names the patch to reach first, and a patch upgrade to it is allowed.
#[test]
fn a_minor_upgrade_from_below_its_stepping_stone_is_refused_naming_it() {
    for (from, to, stone) in
        [("3.5.1", "3.6.6", "3.5.26"), ("3.5.25", "3.6.15", "3.5.26"), ("3.6.6", "3.7.2", "3.6.11")]
    {
        let mut o = running(3, 3);
        at(&mut o, from);
        want(&mut o, 3, to);
        let Step::Wait(w) = plan(&o) else { panic!("{from} → {to} was not refused") };
        assert_eq!(w.reason, WaitReason::UpgradeRefused, "{from} → {to}");
        assert!(w.message.contains(&format!("upgrade to {stone}+ first")), "{from} → {to}: {}", w.message);
        // The stepping stone itself is a patch upgrade, allowed.
        want(&mut o, 3, &format!("{stone}"));
        assert!(matches!(plan(&o), Step::UpgradeMember { .. }), "{from} → {stone}");
    }
    for (from, to) in
        [("3.5.26", "3.6.6"), ("3.5.34", "3.6.15"), ("3.6.11", "3.7.2"), ("3.6.15", "3.7.2"), ("3.4.1", "3.5.0")]
    {
        let mut o = running(3, 3);
        at(&mut o, from);
        want(&mut o, 3, to);
        assert!(matches!(plan(&o), Step::UpgradeMember { .. }), "{from} → {to} should upgrade");
    }
}

/// An empty `spec.version` is the default of the operator that created the cluster: a newer
/// default never upgrades a running cluster; a new cluster starts at the default.
#[test]
fn an_empty_version_keeps_what_the_cluster_runs() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.1");
    o.desired = validate(NAME, &EtcdClusterSpec { size: 3, ..Default::default() });
    assert_eq!(o.desired.as_ref().unwrap().version.to_string(), etcd_operator_api::cluster::DEFAULT_VERSION);
    crate::planner::upgrade::keep_running_version(&mut o);
    assert_eq!(o.desired.as_ref().unwrap().version.to_string(), "3.5.1");
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);

    let mut fresh = fresh(3);
    fresh.desired = validate(NAME, &EtcdClusterSpec { size: 3, ..Default::default() });
    crate::planner::upgrade::keep_running_version(&mut fresh);
    assert_eq!(fresh.desired.as_ref().unwrap().version.to_string(), etcd_operator_api::cluster::DEFAULT_VERSION);

    // A bootstrap that never answered is not pinned to its pods' image.
    fresh.pods.insert("ex-b0".into(), PodState { version: "3.5.17".into(), ..pod("ex-b0") });
    fresh.etcd = None;
    fresh.recorded_version = None;
    crate::planner::upgrade::keep_running_version(&mut fresh);
    assert_eq!(fresh.desired.as_ref().unwrap().version.to_string(), etcd_operator_api::cluster::DEFAULT_VERSION);
}

#[test]
fn a_refused_version_change_does_not_stop_healing() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.1");
    want(&mut o, 3, "3.4.23");
    o.pods.remove("ex-m3");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 3, .. }));
}

#[test]
fn a_one_member_cluster_is_upgraded_in_place() {
    let mut o = running(1, 1);
    at(&mut o, "3.4.23");
    want(&mut o, 1, "3.5.0");
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"));
}

#[test]
fn pausing_mid_upgrade_stops_before_the_next_member() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 30, "3.5.1");
    o.paused = true;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Paused);
}

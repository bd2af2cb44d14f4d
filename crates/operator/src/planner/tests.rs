//! One table row per situation an etcd operator meets. Each builds an `Observed` with the
//! fixture helpers below and names the one step the planner must choose. Here: the fixtures
//! (shared by every `tests_*.rs`), spec, pause, services, bootstrap and the steady state;
//! `tests_membership`, `tests_upgrade`, `tests_day2` and `tests_failures` hold the others.

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
    p.drained_ms = Some(DRAIN_SECS * 1000);
}

/// The plan once the member it drains has been out of the client Service for [`DRAIN_SECS`]
/// (the step a restart or removal takes after its drain); any other step as planned.
pub(super) fn plan_drained(o: &Observed) -> Step {
    match plan(o) {
        Step::Drain { pod } => {
            let mut o = o.clone();
            drained(&mut o, &pod);
            plan(&o)
        }
        step => step,
    }
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

/// Right after a bootstrap, the first members to answer may see the others still starting:
/// that is a cluster forming, not a lost quorum (no Warning, no Degraded for a new user).
#[test]
fn a_new_cluster_whose_bootstrap_members_are_still_starting_is_bootstrapping_not_without_quorum() {
    let mut o = running(3, 3);
    for n in ["ex-m1", "ex-m2", "ex-m3"] {
        let p = o.pods.get_mut(n).unwrap();
        p.bootstrap = true;
        p.age_secs = 8;
    }
    unhealthy(&mut o, 2);
    unhealthy(&mut o, 3);
    for n in ["ex-m2", "ex-m3"] {
        o.pods.get_mut(n).unwrap().ready = false;
    }
    let step = plan(&o);
    assert_eq!(wait_reason(&step), WaitReason::Bootstrapping, "{step:?}");
    assert!(wait_message(&step).contains("1 of 3"), "{step:?}");

    // The same members long after the bootstrap, or one with a problem: a lost quorum.
    let mut late = o.clone();
    for n in ["ex-m1", "ex-m2", "ex-m3"] {
        late.pods.get_mut(n).unwrap().age_secs = membership::BOOTSTRAP_RETRY_SECS;
    }
    assert_eq!(wait_reason(&plan(&late)), WaitReason::NoQuorum);
    let mut failing = o.clone();
    failing.pods.get_mut("ex-m3").unwrap().problem = Some(("CrashLoopBackOff".into(), "back-off".into()));
    assert_ne!(wait_reason(&plan(&failing)), WaitReason::Bootstrapping);
    // A bootstrap pod that was deleted (or whose member is gone) is not starting.
    let mut deleting = o.clone();
    deleting.pods.get_mut("ex-m3").unwrap().deleting = true;
    assert_ne!(wait_reason(&plan(&deleting)), WaitReason::Bootstrapping);
}

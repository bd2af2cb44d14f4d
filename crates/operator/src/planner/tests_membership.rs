//! Membership table tests: scaling up through learners, scaling down, healing lost, failed and
//! stuck members. Same fixtures as `tests.rs`: `running(n, size)` is `n` healthy voters
//! `ex-m1..`, `ex-m1` leading.

use super::tests::*;
use super::*;
use crate::observed::PodState;
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

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
    let mut o = running(5, 4);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m5".into() });
    // Drained a moment ago: every node's proxy must follow before it stops answering.
    drained(&mut o, "ex-m5");
    o.pods.get_mut("ex-m5").unwrap().drained_ms = Some((DRAIN_SECS - 1) * 1000);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    drained(&mut o, "ex-m5");
    assert_eq!(
        plan(&o),
        Step::RemoveMember {
            id: 5,
            pod: "ex-m5".into(),
            why: "scaling down to 4 members".into(),
            cause: crate::planner::Removal::Leave
        }
    );
}

/// Where the client Service's EndpointSlices are watched, a drain ends when they have not listed
/// the member for long enough for every node's proxy to follow: sooner than the fixed time when
/// they are quick, later when they are slow, never on a drop seen before the drain began.
#[test]
fn a_drain_ends_when_the_client_service_no_longer_lists_the_member() {
    use crate::observed::ClientEndpoints;
    /// Not watched (`None`), listing the member (`Some(None)`), not listing it for ms.
    type Endpoints = Option<Option<u64>>;
    const NOT_WATCHED: Endpoints = None;
    const LISTED: Endpoints = Some(None);
    let gone = |ms: u64| Some(Some(ms));
    // (ms since the drain, endpoints: not watched / listing it / not listing it for ms, pod has
    // an address, fenced) → does the member leave now?
    let rows: Vec<(i64, Endpoints, bool, bool, bool)> = vec![
        // Not watched (no discovery.k8s.io/v1, the watch not listed yet): the fixed time.
        (2_999, NOT_WATCHED, true, false, false),
        (3_000, NOT_WATCHED, true, false, true),
        // Still listed: waits, past the fixed time, up to the bound.
        (1_000, LISTED, true, false, false),
        (5_000, LISTED, true, false, false),
        (9_999, LISTED, true, false, false),
        (10_000, LISTED, true, false, true),
        // Dropped 0.6 s ago: the proxies may not have followed yet.
        (1_000, gone(600), true, false, false),
        // Dropped PROXY_SYNC_MS ago, after the drain: gone, before the fixed time.
        (PROXY_SYNC_MS as i64 + 400, gone(PROXY_SYNC_MS - 1), true, false, false),
        (PROXY_SYNC_MS as i64 + 400, gone(PROXY_SYNC_MS), true, false, true),
        // Dropped right at the drain still counts; a moment before it does not (a cache that
        // never saw the member served again): then up to the bound.
        (PROXY_SYNC_MS as i64, gone(PROXY_SYNC_MS), true, false, true),
        (PROXY_SYNC_MS as i64, gone(PROXY_SYNC_MS + 1), true, false, false),
        (9_999, gone(60_000), true, false, false),
        (10_000, gone(60_000), true, false, true),
        // A pod without an address was never an endpoint; one that is listed still waits.
        (0, gone(60_000), false, false, true),
        (0, LISTED, false, false, false),
        // A fenced member is out since its fence: done once not listed long enough, however
        // old (or stale) its mark; listed, it waits like any other.
        ((DRAIN_STALE_SECS + 5) * 1000, gone(60_000), true, true, true),
        (5_000, gone(PROXY_SYNC_MS - 1), true, true, false),
        (5_000, LISTED, true, true, false),
    ];
    for (drained_ms, endpoints, has_ip, fenced, leaves) in rows {
        let mut o = running(5, 4);
        drained(&mut o, "ex-m5");
        let p = o.pods.get_mut("ex-m5").unwrap();
        (p.drained_ms, p.fenced) = (Some(drained_ms), fenced);
        if !has_ip {
            p.ip = None;
        }
        o.client_endpoints = endpoints.map(|unlisted| ClientEndpoints {
            listed: ["ex-m1", "ex-m2", "ex-m3", "ex-m4"]
                .into_iter()
                .chain(unlisted.is_none().then_some("ex-m5"))
                .map(String::from)
                .collect(),
            unlisted_ms: unlisted.map(|ms| [("ex-m5".to_string(), ms)].into()).unwrap_or_default(),
            watch_ms: 600_000,
        });
        let s = plan(&o);
        let row = format!("drained {drained_ms} ms ago, endpoints {endpoints:?}, ip {has_ip}, fenced {fenced}: {s:?}");
        if leaves {
            assert!(matches!(s, Step::RemoveMember { id: 5, .. }), "{row}");
        } else {
            assert!(
                matches!(&s, Step::Wait(w) if w.reason == WaitReason::MemberDraining)
                    || matches!(s, Step::Drain { .. }),
                "{row}"
            );
        }
    }
}

/// A pod the watch never saw listed since its last full list counts as unlisted since that
/// list: after an operator restart a drain ends once that list is old enough, not at once.
#[test]
fn after_an_operator_restart_a_drain_counts_from_the_watch_list() {
    use crate::observed::ClientEndpoints;
    let mut o = running(5, 4);
    drained(&mut o, "ex-m5");
    let p = o.pods.get_mut("ex-m5").unwrap();
    p.drained_ms = Some(5_000);
    let listed = ["ex-m1", "ex-m2", "ex-m3", "ex-m4"].map(String::from).into();
    o.client_endpoints = Some(ClientEndpoints { listed, unlisted_ms: Default::default(), watch_ms: 300 });
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    o.client_endpoints.as_mut().unwrap().watch_ms = PROXY_SYNC_MS;
    assert!(matches!(plan(&o), Step::RemoveMember { id: 5, .. }));
}

/// A healthy voter leaves gracefully (stopped first, then removed: its clients move off
/// without a failed request) only while the others hold a quorum of the voters as they are;
/// otherwise it is removed first, as etcd's own `member remove` does.
#[test]
fn a_leaving_member_is_stopped_first_only_while_the_others_hold_a_quorum() {
    use crate::planner::Removal;
    // (voters, spec size, members not answering besides the leaving one) → the removal's cause.
    // (A scale-down starts with every voter healthy: one that is not holds every change.)
    let rows: &[(u64, i32, &[u64], Option<Removal>)] = &[
        (5, 4, &[], Some(Removal::Leave)), // 4 of 5 stay healthy while it is stopped
        (5, 3, &[], Some(Removal::Leave)),
        (4, 3, &[], Some(Removal::Leave)),     // 3 of 4
        (3, 2, &[], Some(Removal::Leave)),     // 2 of 3
        (2, 1, &[], Some(Removal::ScaleDown)), // 1 of 2 is no quorum: removed first
        (5, 3, &[2], None),                    // a voter not answering holds the change
    ];
    for (n, size, down, want) in rows {
        let mut o = running(*n, *size);
        let leaving = format!("ex-m{n}");
        for id in *down {
            unhealthy(&mut o, *id);
        }
        for i in (*size as u64 + 1)..=*n {
            drained(&mut o, &format!("ex-m{i}"));
        }
        let s = plan(&o);
        match want {
            Some(cause) => assert!(
                matches!(&s, Step::RemoveMember { pod, cause: c, .. } if *pod == leaving && c == cause),
                "{n} → {size}, down {down:?}: {s:?}"
            ),
            None => assert!(!matches!(s, Step::RemoveMember { .. }), "{n} → {size}, down {down:?}: {s:?}"),
        }
    }
}

/// Draining is no membership change: every member that leaves is taken out of the client
/// Service at once, so that the second waits out its drain while the first leaves. Removals
/// stay one at a time.
#[test]
fn scale_down_drains_every_leaving_member_before_the_first_leaves() {
    let mut o = running(5, 3);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m5".into() });
    drained(&mut o, "ex-m5");
    o.pods.get_mut("ex-m5").unwrap().drained_ms = Some(0);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m4".into() });
    drained(&mut o, "ex-m4");
    o.pods.get_mut("ex-m4").unwrap().drained_ms = Some(0);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    // The first drained long enough: it leaves, the other one only after it.
    drained(&mut o, "ex-m5");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 5, .. }));
    etcd(&mut o).members.retain(|m| m.id != 5);
    o.pods.remove("ex-m5");
    drained(&mut o, "ex-m4");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 4, .. }));
}

/// Only as many members as leave are drained, never the leader: the members that stay keep
/// serving clients.
#[test]
fn scale_down_drains_only_the_members_that_leave() {
    let mut o = running(4, 3);
    drained(&mut o, "ex-m4");
    o.pods.get_mut("ex-m4").unwrap().drained_ms = Some(0);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    let mut o = running(5, 3);
    etcd(&mut o).leader = Some(5);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m4".into() });
    drained(&mut o, "ex-m4");
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m3".into() });
}

#[test]
fn scale_down_never_picks_the_leader() {
    let mut o = running(5, 4);
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

/// Surfaced by name and reason; what it holds up and what not, and when it is replaced:
/// `tests_healing`.
#[test]
fn a_crash_looping_member_is_surfaced() {
    let mut o = running(3, 3);
    o.pods.get_mut("ex-m3").unwrap().problem = Some(("CrashLoopBackOff".into(), "back-off 40s".into()));
    unhealthy(&mut o, 3);
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

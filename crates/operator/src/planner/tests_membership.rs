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
    o.pods.get_mut("ex-m5").unwrap().drained_secs = Some(DRAIN_SECS - 1);
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

/// Where the client Service's EndpointSlices are watched, a drain ends when they no longer list
/// the member and every node's proxy had time to follow: sooner than the fixed time when they
/// are quick, later when they are slow, never on a change older than the drain itself.
#[test]
fn a_drain_ends_when_the_client_service_no_longer_lists_the_member() {
    use crate::observed::ClientEndpoints;
    // (seconds since the drain, slices seen? listing it?, ms since their last change, pod has
    // an address) → does the member leave now?
    let rows: &[(i64, Option<bool>, u64, bool, bool)] = &[
        // Not watched (no discovery.k8s.io/v1): the fixed time.
        (DRAIN_SECS - 1, None, 0, true, false),
        (DRAIN_SECS, None, 0, true, true),
        // Still listed: waits, past the fixed time, up to the bound.
        (1, Some(true), 500, true, false),
        (DRAIN_SECS + 2, Some(true), 500, true, false),
        (DRAIN_MAX_SECS - 1, Some(true), 500, true, false),
        (DRAIN_MAX_SECS, Some(true), 500, true, true),
        // Dropped 0.6 s ago: the proxies may not have followed yet.
        (1, Some(false), 600, true, false),
        // Dropped 1.5 s ago, 2 s after the drain: gone, before the fixed time.
        (2, Some(false), PROXY_SYNC_MS, true, true),
        // Not listed, but the last change the cache saw is older than the drain (a cache that
        // never saw the member served again): that is no evidence; up to the bound.
        (1, Some(false), 5_000, true, false),
        (DRAIN_MAX_SECS - 1, Some(false), 60_000, true, false),
        (DRAIN_MAX_SECS, Some(false), 60_000, true, true),
        // A pod without an address was never an endpoint.
        (0, Some(false), 60_000, false, true),
    ];
    for &(secs, listed, since_change_ms, has_ip, leaves) in rows {
        let mut o = running(5, 4);
        drained(&mut o, "ex-m5");
        let p = o.pods.get_mut("ex-m5").unwrap();
        p.drained_secs = Some(secs);
        if !has_ip {
            p.ip = None;
        }
        o.client_endpoints = listed.map(|l| ClientEndpoints {
            listed: ["ex-m1", "ex-m2", "ex-m3", "ex-m4"]
                .into_iter()
                .chain(l.then_some("ex-m5"))
                .map(String::from)
                .collect(),
            since_change_ms,
        });
        let s = plan(&o);
        let row = format!("drained {secs} s, listed {listed:?}, changed {since_change_ms} ms ago, ip {has_ip}: {s:?}");
        if leaves {
            assert!(matches!(s, Step::RemoveMember { id: 5, .. }), "{row}");
        } else {
            assert_eq!(wait_reason(&s), WaitReason::MemberDraining, "{row}");
        }
    }
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
    o.pods.get_mut("ex-m5").unwrap().drained_secs = Some(0);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m4".into() });
    drained(&mut o, "ex-m4");
    o.pods.get_mut("ex-m4").unwrap().drained_secs = Some(0);
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
    o.pods.get_mut("ex-m4").unwrap().drained_secs = Some(0);
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

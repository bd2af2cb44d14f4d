//! Upgrade table tests: one member at a time, followers first, leader last, failures, rollbacks,
//! refused version changes and the upstream stepping stones. Same fixtures as `tests.rs`.

use super::tests::*;
use super::*;
use crate::observed::PodState;
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

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
    // Reporting the new version: the container started since the move runs and is ready.
    p.etcd_ready_run_secs = (reports == version).then_some((age - 1).max(0));
    m(o, id).status.as_mut().unwrap().version = reports.into();
}

/// etcd answers from a restarted member before the kubelet reports its new container Ready:
/// the watch cache still shows the Ready container from before the move. The next member waits
/// (else two restart at once, and the client Service can be left with no endpoint).
#[test]
fn the_next_member_waits_until_kubernetes_reports_the_restarted_container_ready() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 2, "3.5.1");
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.ready, p.etcd_ready_run_secs) = (true, Some(900));
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::MemberUpgrading, "{s:?}");
    assert!(crate::marks::upgrades_confirmed(&o).is_empty(), "confirmed on a stale Ready");
    // Its new container reported ready: the upgrade goes on with the next follower.
    o.pods.get_mut("ex-m2").unwrap().etcd_ready_run_secs = Some(1);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"), "{:?}", plan_drained(&o));
    // A node clock behind the operator's makes the new container look older than the move:
    // the image the kubelet reports for the ready container tells it apart too.
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.etcd_ready_run_secs = Some(30);
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading);
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.etcd_ready_image = Some(p.image.clone());
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"), "{:?}", plan_drained(&o));
}

#[test]
fn upgrade_starts_with_a_follower() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    assert!(
        matches!(plan_drained(&o), Step::UpgradeMember { pod, to, .. } if pod == "ex-m2" && to.to_string() == "3.5.1")
    );
}

#[test]
fn the_next_member_waits_until_the_upgraded_one_reports_the_new_version() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 5, "3.5.0");
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading);
    unhealthy(&mut o, 2);
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading);
}

#[test]
fn the_next_member_waits_until_the_upgraded_one_has_caught_up() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 5, "3.5.1");
    m(&mut o, 1).status.as_mut().unwrap().raft_index = 50_000;
    m(&mut o, 2).status.as_mut().unwrap().raft_applied_index = 10;
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading);
    m(&mut o, 2).status.as_mut().unwrap().raft_applied_index = 49_900;
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"));
}

/// Healthy and caught up in etcd, but its pod not Ready yet (its readiness probe has not passed
/// since the restart): not back in the client Service, so the next member waits for it.
#[test]
fn the_next_member_waits_until_the_upgraded_ones_pod_is_ready_again() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 5, "3.5.1");
    o.pods.get_mut("ex-m2").unwrap().ready = false;
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading);
    o.pods.get_mut("ex-m2").unwrap().ready = true;
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"));
}

#[test]
fn leadership_moves_to_an_upgraded_member_before_the_leader_is_upgraded() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 30, "3.5.1");
    upgraded(&mut o, 3, "3.5.1", 10, "3.5.1");
    assert_eq!(
        plan_drained(&o),
        Step::MoveLeader { from_pod: "ex-m1".into(), to: 2, to_pod: "ex-m2".into(), purpose: Purpose::Upgrade }
    );
    etcd(&mut o).leader = Some(2);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"));
}

#[test]
fn a_finished_upgrade_is_stable() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.1");
    for id in 1..=3 {
        upgraded(&mut o, id, "3.5.1", 30, "3.5.1");
    }
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::Stable);
}

#[test]
fn an_upgraded_member_that_does_not_come_back_in_time_stops_the_upgrade() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 500, "3.5.0");
    unhealthy(&mut o, 2);
    let s = plan_drained(&o);
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
    let Step::Wait(w) = plan_drained(&o) else { panic!() };
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
    assert!(
        matches!(plan_drained(&o), Step::UpgradeMember { pod, to, .. } if pod == "ex-m2" && to.to_string() == "3.5.0")
    );
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
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"));
}

#[test]
fn downgrades_and_minor_skips_are_refused_without_change() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.1");
    want(&mut o, 3, "3.4.23");
    let Step::Wait(w) = plan_drained(&o) else { panic!() };
    assert_eq!(w.reason, WaitReason::UpgradeRefused);
    assert!(w.message.contains("downgrade"), "{}", w.message);
    at(&mut o, "3.4.23");
    want(&mut o, 3, "3.6.0");
    let Step::Wait(w) = plan_drained(&o) else { panic!() };
    assert_eq!(w.reason, WaitReason::UpgradeRefused);
    assert!(w.message.contains("skips a minor"), "{}", w.message);
}

/// Upstream's stepping stones: 3.5 → 3.6 only from 3.5.32 (the 3.6 upgrade guide since the July
/// 2026 releases; 3.5.26 was the floor before), 3.6 → 3.7 only from 3.6.11; the refusal names the
/// patch to reach first, and a patch upgrade to it is allowed.
#[test]
fn a_minor_upgrade_from_below_its_stepping_stone_is_refused_naming_it() {
    for (from, to, stone) in [
        ("3.5.1", "3.6.6", "3.5.32"),
        ("3.5.25", "3.6.15", "3.5.32"),
        ("3.5.26", "3.6.15", "3.5.32"),
        ("3.5.31", "3.6.15", "3.5.32"),
        ("3.6.6", "3.7.2", "3.6.11"),
    ] {
        let mut o = running(3, 3);
        at(&mut o, from);
        want(&mut o, 3, to);
        let Step::Wait(w) = plan_drained(&o) else { panic!("{from} → {to} was not refused") };
        assert_eq!(w.reason, WaitReason::UpgradeRefused, "{from} → {to}");
        assert!(w.message.contains(&format!("upgrade to {stone}+ first")), "{from} → {to}: {}", w.message);
        // The stepping stone itself is a patch upgrade, allowed.
        want(&mut o, 3, stone);
        assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }), "{from} → {stone}");
    }
    for (from, to) in
        [("3.5.32", "3.6.6"), ("3.5.34", "3.6.15"), ("3.6.11", "3.7.2"), ("3.6.15", "3.7.2"), ("3.4.1", "3.5.0")]
    {
        let mut o = running(3, 3);
        at(&mut o, from);
        want(&mut o, 3, to);
        // A log that began at `from`'s minor: no snapshot to wait for (`tests_upgrade_replay`).
        let minor = from.rsplit_once('.').unwrap().0.to_string();
        o.minor_since = Some(crate::observed::MinorSince { minor, since: crate::observed::Since::LogStart });
        assert!(matches!(plan_drained(&o), Step::UpgradeMember { .. }), "{from} → {to} should upgrade");
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
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::Stable);

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
    assert!(matches!(plan_drained(&o), Step::RemoveMember { id: 3, .. }));
}

#[test]
fn a_one_member_cluster_is_upgraded_in_place() {
    let mut o = running(1, 1);
    at(&mut o, "3.4.23");
    want(&mut o, 1, "3.5.0");
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"));
}

#[test]
fn pausing_mid_upgrade_stops_before_the_next_member() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    upgraded(&mut o, 2, "3.5.1", 30, "3.5.1");
    o.paused = true;
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::Paused);
}

/// The false `UpgradeFailed`: long after an upgrade finished, a member that restarts
/// (or lags behind for a while) is an ordinary member to wait for, not a failed upgrade. The
/// upgrade is played through with the marks the reconcile writes beside each step (a member
/// back at its new version loses its version-changed-at mark: `marks::upgrades_confirmed`).
#[test]
fn a_member_that_restarts_long_after_a_finished_upgrade_is_no_failed_upgrade() {
    let mut o = running(3, 3);
    at(&mut o, "3.5.0");
    want(&mut o, 3, "3.5.1");
    let mut steps = vec![];
    labelled_serving(&mut o);
    loop {
        // The marks written beside each step: back in the client Service, then confirmed.
        for pod in crate::marks::pods_to_label(&o) {
            o.pods.get_mut(&pod).unwrap().serving = Some(true);
        }
        for pod in crate::marks::upgrades_confirmed(&o) {
            o.pods.get_mut(&pod).unwrap().version_age_secs = None;
        }
        let step = plan(&o);
        steps.push(step.clone());
        assert!(steps.len() < 20, "{steps:?}");
        match step {
            Step::Drain { pod } => drained(&mut o, &pod),
            // The member comes back at once at its new version.
            Step::UpgradeMember { pod, to, .. } => {
                let id = pod.trim_start_matches("ex-m").parse().unwrap();
                upgraded(&mut o, id, &to.to_string(), 0, &to.to_string());
            }
            Step::MoveLeader { to, .. } => {
                etcd(&mut o).leader = Some(to);
                for mem in &mut etcd(&mut o).members {
                    mem.status.as_mut().unwrap().leader = to;
                }
            }
            Step::Wait(w) if w.reason == WaitReason::Stable => break,
            other => panic!("unexpected {other:?} after {steps:?}"),
        }
    }
    assert_eq!(steps.iter().filter(|s| matches!(s, Step::UpgradeMember { .. })).count(), 3, "{steps:?}");
    // Each restart after its own drain.
    for (i, s) in steps.iter().enumerate() {
        if let Step::UpgradeMember { pod, .. } = s {
            assert!(matches!(&steps[i - 1], Step::Drain { pod: d } if d == pod), "{steps:?}");
        }
    }
    // Ten minutes later member 2 restarts: it is waited for as any member.
    for p in o.pods.values_mut() {
        p.version_age_secs = p.version_age_secs.map(|a| a + 600);
    }
    unhealthy(&mut o, 2);
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::MemberStarting, "{s:?}");
}

/// A member drained for its restart returns to the client Service only once it is back at its
/// new version (Ready with the new container): the image patch leaves the old container
/// running and Ready for a moment, and a Service that routed to it then had connections
/// refused (seen: a client of the Service failing one put three times during 3.6 → 3.7). The
/// next member restarts only once the last one serves again.
#[test]
fn an_upgraded_member_serves_again_only_once_back_and_the_next_one_waits_for_that() {
    let mut o = serving_at_3_5_0_wanting_3_5_1(3);
    upgraded(&mut o, 2, "3.5.1", 1, "3.5.0");
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.serving, p.drained_ms) = (Some(false), Some(4_000));
    assert!(!crate::marks::pods_to_label(&o).contains(&"ex-m2".to_string()), "served again before its restart");
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading);
    // Back at 3.5.1: it is labelled serving again, and the next member waits for that.
    upgraded(&mut o, 2, "3.5.1", 6, "3.5.1");
    assert_eq!(crate::marks::upgrades_confirmed(&o), vec!["ex-m2".to_string()]);
    assert!(crate::marks::pods_to_label(&o).contains(&"ex-m2".to_string()), "{:?}", crate::marks::pods_to_label(&o));
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::MemberUpgrading, "{:?}", plan_drained(&o));
    // Both marks written: the next follower goes.
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.serving, p.version_age_secs) = (Some(true), None);
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"), "{:?}", plan_drained(&o));
}

/// A fenced member upgraded stays fenced: being back at its version serves only members that
/// were drained for the restart.
#[test]
fn a_fenced_member_stays_out_of_the_client_service_through_its_upgrade() {
    let mut o = serving_at_3_5_0_wanting_3_5_1(3);
    upgraded(&mut o, 2, "3.5.1", 6, "3.5.1");
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.serving, p.drained_ms, p.fenced) = (Some(false), Some(4_000), true);
    assert!(!crate::marks::pods_to_label(&o).contains(&"ex-m2".to_string()));
    // Not waited for either: a fenced member is out of the Service on purpose.
    o.pods.get_mut("ex-m2").unwrap().version_age_secs = None;
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m3"), "{:?}", plan_drained(&o));
}

/// Every pod carries the labels the Services select on, in the client Service.
fn labelled_serving(o: &mut Observed) {
    for p in o.pods.values_mut() {
        (p.labelled, p.serving) = (true, Some(true));
    }
}

/// `n` healthy voters at 3.5.0, each in the client Service, with 3.5.1 asked for.
fn serving_at_3_5_0_wanting_3_5_1(n: u64) -> Observed {
    let mut o = running(n, n as i32);
    labelled_serving(&mut o);
    at(&mut o, "3.5.0");
    want(&mut o, n as i32, "3.5.1");
    o
}

/// An in-place restart leaves the client Service first, as a step of its own (an operator
/// restarted during the drain finds it in the pod's marks): drained, waited for
/// [`DRAIN_SECS`], then restarted on its new image. One member has nobody to hand clients to.
#[test]
fn a_member_is_drained_before_its_in_place_restart() {
    let mut o = serving_at_3_5_0_wanting_3_5_1(3);
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() });
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.serving, p.drained_ms) = (Some(false), Some((DRAIN_SECS - 1) * 1000));
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    o.pods.get_mut("ex-m2").unwrap().drained_ms = Some(DRAIN_SECS * 1000);
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"), "{:?}", plan(&o));
    // Nobody else serves (the others not Ready): no drain, the restart goes as before.
    let mut o = serving_at_3_5_0_wanting_3_5_1(3);
    for p in ["ex-m1", "ex-m3"] {
        o.pods.get_mut(p).unwrap().ready = false;
    }
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"), "{:?}", plan(&o));
    let o = serving_at_3_5_0_wanting_3_5_1(1);
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m1"), "{:?}", plan(&o));
}

/// Where the client Service's endpoints are watched, the restart waits for them to drop the
/// member (not for a fixed time): listed, it waits past [`DRAIN_SECS`]; dropped long enough
/// since the drain, it restarts before.
#[test]
fn an_upgrade_restart_waits_for_the_endpoints_to_drop_the_member() {
    use crate::observed::ClientEndpoints;
    let mut o = serving_at_3_5_0_wanting_3_5_1(3);
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.serving, p.drained_ms) = (Some(false), Some((DRAIN_SECS + 1) * 1000));
    let all = ["ex-m1", "ex-m2", "ex-m3"].map(String::from).into();
    o.client_endpoints = Some(ClientEndpoints { listed: all, unlisted_ms: Default::default(), watch_ms: 600_000 });
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberDraining);
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.drained_ms = Some(2_400);
    let ep = o.client_endpoints.as_mut().unwrap();
    ep.listed.remove("ex-m2");
    ep.unlisted_ms.insert("ex-m2".into(), PROXY_SYNC_MS);
    assert!(matches!(plan(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"), "{:?}", plan(&o));
}

/// A member whose upgrade restart takes long (an image pull, a large database) is not served
/// again by the stale-drain rule while it may still come back: only once back, or once its
/// upgrade failed.
#[test]
fn a_slow_upgrade_restart_stays_out_of_the_client_service_until_back() {
    let mut o = serving_at_3_5_0_wanting_3_5_1(3);
    upgraded(&mut o, 2, "3.5.1", DRAIN_STALE_SECS + 10, "3.5.0");
    let p = o.pods.get_mut("ex-m2").unwrap();
    (p.serving, p.drained_ms) = (Some(false), Some((DRAIN_STALE_SECS + 13) * 1000));
    assert!(!crate::marks::pods_to_label(&o).contains(&"ex-m2".to_string()));
    // Past the upgrade's deadline (failed): served again like any stale drain.
    o.pods.get_mut("ex-m2").unwrap().version_age_secs = Some(upgrade::UPGRADE_DEADLINE_SECS + 1);
    assert!(crate::marks::pods_to_label(&o).contains(&"ex-m2".to_string()));
}

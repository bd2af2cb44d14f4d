//! Tests of the status computation: fields, phase and conditions from planned observations.

use super::*;
use crate::observed::{MemberState, MemberStatus, PodState};
use crate::planner::{Wait, plan};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::condition;

fn obs(size: i32, healthy: &[bool]) -> Observed {
    let mut o = Observed {
        name: "ex".into(),
        namespace: "ns".into(),
        desired: validate("ex", &EtcdClusterSpec { size, version: "3.5.1".into(), ..Default::default() }),
        services_ready: true,
        ever_bootstrapped: true,
        new_member_suffix: "zzzzz".into(),
        ..Default::default()
    };
    let mut e = EtcdState { cluster_id: 0xabc, leader: Some(1), members: vec![], ..Default::default() };
    for (i, h) in healthy.iter().enumerate() {
        let name = format!("ex-m{i}");
        o.pods.insert(
            name.clone(),
            PodState {
                name: name.clone(),
                ready: *h,
                version: "3.5.1".into(),
                phase: "Running".into(),
                ..Default::default()
            },
        );
        e.members.push(MemberState {
            id: i as u64 + 1,
            name: name.clone(),
            pod: name,
            status: h.then(|| MemberStatus { leader: 1, version: "3.5.1".into(), ..Default::default() }),
            ..Default::default()
        });
    }
    o.etcd = Some(e);
    o
}

#[test]
fn healthy_cluster_reports_running_with_all_members_ready() {
    let o = obs(3, &[true, true, true]);
    let s = compute(&o, &plan(&o), &Default::default(), Some(2), "t");
    assert_eq!(s.phase, PHASE_RUNNING);
    assert_eq!(s.members.ready, ["ex-m0", "ex-m1", "ex-m2"]);
    assert_eq!(s.ready_members, 3);
    assert_eq!(s.current_version, "3.5.1");
    assert_eq!(s.target_version, "");
    assert_eq!(s.leader, "ex-m0");
    assert_eq!(s.cluster_id, "abc");
    assert_eq!(s.service_name, "ex-client");
    assert_eq!(s.client_port, 2379);
    assert_eq!(s.observed_generation, Some(2));
    assert_eq!(condition::find(&s.conditions, AVAILABLE).unwrap().status, "True");
    assert!(condition::find(&s.conditions, SCALING).is_none());
}

#[test]
fn current_version_is_what_every_member_reports_not_what_pods_are_annotated_with() {
    let mut o = obs(3, &[true, true, true]);
    let prev = EtcdClusterStatus { current_version: "3.5.0".into(), ..Default::default() };
    o.etcd.as_mut().unwrap().members[2].status.as_mut().unwrap().version = "3.5.0".into();
    let s = compute(&o, &plan(&o), &prev, None, "t");
    assert_eq!(s.current_version, "3.5.0");
    o.etcd.as_mut().unwrap().members[2].status = None; // restarting on the new version
    let s = compute(&o, &plan(&o), &prev, None, "t");
    assert_eq!(s.current_version, "3.5.0");
    o.etcd.as_mut().unwrap().members[2].status =
        Some(MemberStatus { leader: 1, version: "3.5.1".into(), ..Default::default() });
    let s = compute(&o, &plan(&o), &prev, None, "t");
    assert_eq!(s.current_version, "3.5.1");
}

#[test]
fn lost_quorum_is_degraded_and_unavailable() {
    let o = obs(3, &[true, false, false]);
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    assert_eq!(condition::find(&s.conditions, AVAILABLE).unwrap().status, "False");
    let d = condition::find(&s.conditions, DEGRADED).unwrap();
    assert_eq!(d.reason, "NoQuorum");
    assert_eq!(s.members.unready, ["ex-m1", "ex-m2"]);
    assert!(!s.reason.is_empty());
}

#[test]
fn invalid_spec_sets_spec_valid_false_and_keeps_a_running_phase() {
    let mut o = obs(3, &[true, true, true]);
    let prev = compute(&o, &plan(&o), &Default::default(), None, "t");
    o.desired = validate("ex", &EtcdClusterSpec { size: 0, version: "3.5.1".into(), ..Default::default() });
    let s = compute(&o, &plan(&o), &prev, None, "t2");
    let c = condition::find(&s.conditions, SPEC_VALID).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InvalidSpec"));
    assert!(c.message.contains("spec.size 0"));
    assert_eq!(s.phase, PHASE_RUNNING);
    assert_eq!(changed(&prev.conditions, &s.conditions).len(), 1);
}

#[test]
fn scaling_condition_uses_the_coreos_message() {
    let o = obs(5, &[true, true, true]);
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let c = condition::find(&s.conditions, SCALING).unwrap();
    assert_eq!(c.message, "Current cluster size: 3, desired cluster size: 5");
}

#[test]
fn every_status_field_is_serialized_so_a_merge_patch_clears_it() {
    let v = serde_json::to_value(EtcdClusterStatus::default()).unwrap();
    assert_eq!(v["members"]["learners"], serde_json::json!([]));
    assert_eq!(v["leader"], serde_json::json!(""));
    assert_eq!(v["targetVersion"], serde_json::json!(""));
}

#[test]
fn a_bootstrapping_cluster_is_unavailable_without_a_warning() {
    let mut o = obs(3, &[]);
    o.etcd = None;
    o.ever_bootstrapped = false;
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let a = condition::find(&s.conditions, AVAILABLE).unwrap();
    assert_eq!(a.reason, "Bootstrapping");
    assert!(!is_warning(a));
}

/// A cluster that just formed, its other bootstrap members still starting: no Warning for a
/// new user (the planner says Bootstrapping, and the condition follows it).
#[test]
fn a_cluster_forming_with_members_still_starting_is_no_lost_quorum() {
    let mut o = obs(3, &[true, false, false]);
    for p in o.pods.values_mut() {
        p.bootstrap = true;
        p.age_secs = 5;
    }
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let a = condition::find(&s.conditions, AVAILABLE).unwrap();
    assert_eq!((a.status.as_str(), a.reason.as_str()), ("False", "Bootstrapping"), "{a:?}");
    assert!(!is_warning(a));
    assert!(condition::find(&s.conditions, DEGRADED).is_none_or(|d| d.status != "True"), "{:?}", s.conditions);
    // The same long after the bootstrap: a lost quorum, said as a warning.
    for p in o.pods.values_mut() {
        p.age_secs = 3600;
    }
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let a = condition::find(&s.conditions, AVAILABLE).unwrap();
    assert_eq!(a.reason, "NoQuorum");
    assert!(is_warning(a));
}

/// The cluster ID is the proof that the cluster formed (observation reads it back): only a
/// member answering with a leader gives it, not a lone bootstrap member that computed it.
#[test]
fn no_cluster_id_is_reported_before_a_leader_exists() {
    let mut o = obs(3, &[true, false, false]);
    o.ever_bootstrapped = false;
    let e = o.etcd.as_mut().unwrap();
    e.leader = None;
    e.members[0].status.as_mut().unwrap().leader = 0;
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    assert_eq!(s.cluster_id, "", "{s:?}");
}

#[test]
fn data_loss_fails_the_phase() {
    // A cluster that formed, with no pod and no volume left: planned, not hand-made.
    let mut o = obs(3, &[]);
    o.etcd = None;
    let step = plan(&o);
    assert!(matches!(&step, Step::Wait(Wait { reason: WaitReason::DataLost, .. })), "{step:?}");
    let s = compute(&o, &step, &Default::default(), None, "t");
    assert_eq!(s.phase, PHASE_FAILED);
    let d = condition::find(&s.conditions, DEGRADED).unwrap();
    assert_eq!(d.reason, "DataLost");
    assert!(!d.message.contains("delete and re-create"), "never advise deleting: {}", d.message);
}

/// The condition comes from the recorded last recovery every time, so a status computed
/// from a stale cached object (without the condition) cannot drop it.
#[test]
fn a_finished_recovery_is_reported_from_its_record_whatever_the_previous_status() {
    let mut o = obs(3, &[true, true, true]);
    o.last_recovery = Some(crate::observed::RecoveryRecord {
        member: "ex-m0".into(),
        policy: "FromSurvivor".into(),
        from: "surviving member ex-old".into(),
        revision: 81,
        lost: 2,
        voters: 3,
    });
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let c = condition::find(&s.conditions, RECOVERED_FROM_QUORUM_LOSS).unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "FromSurvivor"));
    assert!(c.message.contains("2 of 3") && c.message.contains("revision 81") && c.message.contains("were lost"));
}

#[test]
fn a_refused_edit_says_the_cluster_runs_under_the_last_valid_spec() {
    let mut o = obs(3, &[true, true, true]);
    o.spec_refused = Some(vec!["spec.size 0 is out of range".into()]);
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let c = condition::find(&s.conditions, SPEC_VALID).unwrap();
    assert_eq!(c.status, "False");
    assert!(c.message.contains("spec.size 0") && c.message.contains("last valid spec"), "{}", c.message);
    assert_eq!(s.phase, PHASE_RUNNING);
}

/// etcd lists alarms in no stable order; the condition's message must not follow it, or every
/// reconcile changes the condition and publishes a new Event (found by `hack/chaos.sh`: 13
/// `AlarmRaised` Events in 10 s during one NOSPACE).
#[test]
fn an_alarm_condition_does_not_change_with_the_order_etcd_lists_alarms_in() {
    use crate::observed::{Alarm, AlarmKind};
    let with_alarms = |ids: &[u64]| {
        let mut o = obs(3, &[true, true, true]);
        o.etcd.as_mut().unwrap().alarms =
            ids.iter().map(|&member_id| Alarm { member_id, kind: AlarmKind::NoSpace }).collect();
        compute(&o, &plan(&o), &Default::default(), None, "t")
    };
    let a = with_alarms(&[1, 2, 3]);
    let b = with_alarms(&[3, 1, 2]);
    let msg = |s: &etcd_operator_api::EtcdClusterStatus| {
        s.conditions.iter().find(|c| c.type_ == NO_SPACE).map(|c| c.message.clone()).unwrap_or_default()
    };
    assert!(msg(&a).contains("ex-m0, ex-m1, ex-m2"), "{}", msg(&a));
    assert_eq!(msg(&a), msg(&b));
    assert!(changed(&a.conditions, &b.conditions).is_empty());
}

#[test]
fn members_on_etcd_3_5_0_to_3_5_2_get_a_warning_naming_them_and_the_fix() {
    let mut o = obs(3, &[true, true, true]);
    let s = compute(&o, &plan(&o), &Default::default(), None, "t");
    let c = condition::find(&s.conditions, ETCD_ADVISORY).expect("3.5.1 is affected");
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "DataInconsistencyRisk"));
    assert!(c.message.starts_with("ex-m0 (3.5.1), ex-m1 (3.5.1), ex-m2 (3.5.1) run"), "{}", c.message);
    assert!(c.message.contains("etcd#13766") && c.message.contains("3.5.3"), "{}", c.message);
    assert!(is_warning(c));
    // Half-way through an upgrade only the members still on 3.5.1 are named.
    o.pods.get_mut("ex-m0").unwrap().version = "3.5.3".into();
    o.pods.get_mut("ex-m1").unwrap().version = "3.6.6".into();
    let s = compute(&o, &plan(&o), &s, None, "t");
    let c = condition::find(&s.conditions, ETCD_ADVISORY).unwrap();
    assert!(c.message.starts_with("ex-m2 (3.5.1) run"), "{}", c.message);
    // Every member past it (3.4 and 3.5.3+ are not affected): the condition goes.
    o.pods.get_mut("ex-m2").unwrap().version = "3.4.23".into();
    let s = compute(&o, &plan(&o), &s, None, "t");
    assert!(condition::find(&s.conditions, ETCD_ADVISORY).is_none());
}

fn tls_refused(mut o: Observed) -> Observed {
    o.tls_material.refused = vec!["Secret op does not exist".into()];
    o.tls_material.refused_secrets = ["op".to_string()].into();
    o
}

/// Issue 25: refused TLS material the cluster runs with is `Degraded`, with the same message
/// whether the planner restarts a member on its volume or has nothing left to do.
#[test]
fn refused_tls_material_is_degraded_with_one_message_while_members_heal() {
    let mut healing = tls_refused(obs(3, &[true, true, false]));
    healing.pods.remove("ex-m2");
    healing.pvcs.insert(
        "ex-m2".into(),
        crate::observed::PvcState { name: "ex-m2-data".into(), member: "ex-m2".into(), ..Default::default() },
    );
    let step = plan(&healing);
    assert!(matches!(step, Step::CreatePod(_)), "{step:?}");
    let s = compute(&healing, &step, &Default::default(), None, "t");
    let d = condition::find(&s.conditions, DEGRADED).expect("Degraded");
    assert_eq!((d.status.as_str(), d.reason.as_str()), ("True", "TLSMaterialRefused"));
    assert!(d.message.contains("Secret op does not exist"), "{}", d.message);
    let settled = tls_refused(obs(3, &[true, true, true]));
    let s2 = compute(&settled, &plan(&settled), &s, None, "t");
    assert_eq!(condition::find(&s2.conditions, DEGRADED), Some(d), "no new Event for the same refusal");
    assert!(is_warning(d));
    // Fixed: Degraded goes.
    let fixed = obs(3, &[true, true, true]);
    let s3 = compute(&fixed, &plan(&fixed), &s2, None, "t");
    assert!(condition::find(&s3.conditions, DEGRADED).is_none());
}

/// Issue 25: a warning at 30 and at 7 days before a static certificate expires, from the
/// certificates observed and the time of the status (fixed here).
#[test]
fn certificates_expiring_warn_at_30_and_7_days() {
    let day = 24 * 3600;
    let now: k8s_openapi::jiff::Timestamp = "2030-01-01T00:00:00Z".parse().unwrap();
    let mut o = obs(3, &[true, true, true]);
    o.tls_material.expiries = vec![crate::tls::material::Expiry {
        secret: "etcd-server-tls".into(),
        key: "server.crt".into(),
        subject: "CN=etcd server".into(),
        not_after: now.as_second() + 20 * day,
    }];
    let at = |days: i64| {
        let t = k8s_openapi::jiff::Timestamp::from_second(now.as_second() + days * day).unwrap().to_string();
        let s = compute(&o, &plan(&o), &Default::default(), None, &t);
        condition::find(&s.conditions, crate::status::tls_expiry::CERTIFICATES_EXPIRING).cloned().unwrap()
    };
    let far = at(-30);
    assert_eq!((far.status.as_str(), far.reason.as_str()), ("False", "Valid"));
    assert!(!is_warning(&far));
    let soon = at(0);
    assert_eq!((soon.status.as_str(), soon.reason.as_str()), ("True", "ExpiresWithin30Days"));
    assert!(is_warning(&soon) && soon.message.contains("Secret etcd-server-tls key server.crt"), "{}", soon.message);
    assert_eq!(at(14).reason, "ExpiresWithin7Days");
    assert_eq!(at(21).reason, "Expired");
    let plain = obs(3, &[true, true, true]);
    let s = compute(&plain, &plan(&plain), &Default::default(), None, &now.to_string());
    assert!(condition::find(&s.conditions, crate::status::tls_expiry::CERTIFICATES_EXPIRING).is_none(), "no TLS: none");
}

/// Certificates renewed for the cluster (`spec.TLS.auto`, `spec.TLS.certManager`): no 30/7-day
/// warning (a default certificate is renewed with 30 days left), but `RenewalOverdue` once one
/// is still in use a grace after its renewal was due, naming who should have renewed it.
#[test]
fn a_managed_certificate_not_renewed_in_time_is_a_warning_naming_who_renews_it() {
    use crate::tls::auto::read::observation;
    let now: i64 = 1_900_000_000;
    for cert_manager in [false, true] {
        let tls = if cert_manager {
            r#"{"certManager":{"issuerRef":{"name":"ca"},"duration":"2h","renewBefore":"20m"}}"#
        } else {
            r#"{"auto":{"validity":"2h","renewBefore":"20m"}}"#
        };
        let spec = EtcdClusterSpec {
            size: 3,
            version: "3.5.1".into(),
            tls: Some(serde_json::from_str(tls).unwrap()),
            ..Default::default()
        };
        let mut o = obs(3, &[true, true, true]);
        o.desired = validate("ex", &spec);
        let d = o.desired.as_ref().unwrap();
        let settings = d.tls_auto.unwrap();
        let c = etcd_operator_api::EtcdCluster::new("ex", spec.clone());
        let none: std::collections::BTreeMap<String, crate::tls::auto::read::Fetched> =
            std::iter::once(crate::tls::auto::ca_secret("ex"))
                .chain(crate::tls::auto::Leaf::ALL.iter().map(|l| l.secret("ex")))
                .map(|n| (n, Ok(None)))
                .collect();
        let mut certs = observation(&c, settings, "cluster.local", now, &none);
        // The peer certificate (2h) expires in 10 minutes: due 10 minutes ago (renewBefore 20m),
        // past the 5-minute grace.
        use crate::tls::auto::state::{CertId, CertInfo, Found, LeafState};
        let cert = CertInfo {
            id: CertId("peer".into()),
            der: vec![],
            serial: String::new(),
            subject: "CN=etcd-peer".into(),
            not_before: now - 110 * 60,
            not_after: now + 10 * 60,
        };
        let leaf = LeafState {
            cert: Some(cert),
            key: None,
            trust: vec![],
            issuer: None,
            problems: vec![],
            resource_version: None,
        };
        certs.leaves.insert(crate::tls::auto::Leaf::Peer, Found::Present(leaf));
        o.certificates = Some(certs.clone());
        let at = |t: i64| {
            let t = k8s_openapi::jiff::Timestamp::from_second(t).unwrap().to_string();
            let s = compute(&o, &plan(&o), &Default::default(), None, &t);
            condition::find(&s.conditions, crate::status::tls_expiry::CERTIFICATES_EXPIRING).cloned()
        };
        assert!(at(now - 30 * 60).is_none(), "in time: nothing (cert-manager: {cert_manager})");
        let late = at(now).expect("overdue");
        assert_eq!((late.status.as_str(), late.reason.as_str()), ("True", "RenewalOverdue"));
        assert!(is_warning(&late));
        assert!(late.message.contains("Secret ex-tls-peer (CN=etcd-peer)"), "{}", late.message);
        let who =
            if cert_manager { "kubectl describe certificate ex-cm-peer" } else { "the operator has not renewed it" };
        assert!(late.message.contains(who), "{}", late.message);
        assert_eq!(crate::status::tls_expiry::renewal_overdue(&o, now), Some(true));
        assert_eq!(crate::status::tls_expiry::renewal_overdue(&o, now - 30 * 60), Some(false));
        assert_eq!(crate::status::tls_expiry::earliest(&o), None, "no 30/7-day metric for managed certificates");
        // Being turned off (spec.TLS without auto/certManager, pods still on its Secrets): the
        // operator still renews them, and still says so when it does not.
        let mut leaving = o.clone();
        leaving.desired = validate("ex", &EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() });
        let mut left = certs.clone();
        left.leaving = true;
        leaving.certificates = Some(left);
        assert_eq!(crate::status::tls_expiry::renewal_overdue(&leaving, now), Some(true), "while leaving");
        // Mid CA rotation renewed certificates are held back on purpose: not overdue.
        let mut rotating = o.clone();
        let mut r = certs.clone();
        if let Found::Present(ca) = &mut r.ca {
            ca.phase = crate::tls::auto::state::Phase::Introducing;
        } else {
            let ca_cert = CertInfo {
                id: CertId("ca".into()),
                der: vec![],
                serial: String::new(),
                subject: "CN=ca".into(),
                not_before: now - 3600,
                not_after: now + 3600 * 24 * 365,
            };
            r.ca = Found::Present(crate::tls::auto::state::CaState {
                signing: Some(crate::tls::auto::state::Authority { cert: ca_cert, key: None }),
                next: None,
                previous: vec![],
                phase: crate::tls::auto::state::Phase::Introducing,
                rotated_for: None,
                resource_version: None,
            });
        }
        rotating.certificates = Some(r);
        assert_eq!(crate::status::tls_expiry::renewal_overdue(&rotating, now), Some(false), "mid rotation");
    }
}

/// The operator's own calls get no answer (its client timed out right after `auth enable`, a
/// refused TLS handshake) while the member pods stay Ready: `Available` is Unknown, saying so,
/// nothing is `Degraded`, and no condition change is a warning: a healthy cluster is never
/// reported as having lost its quorum for the operator's own trouble.
#[test]
fn members_out_of_the_operators_sight_make_available_unknown_without_any_warning() {
    const ERR: &str = "etcd at http://10.244.0.9:2379: grpc request error: Timeout expired";
    let healthy = obs(3, &[true, true, true]);
    let prev = compute(&healthy, &plan(&healthy), &Default::default(), None, "t");
    // Two of three members unanswered; then none at all.
    let mut some = healthy.clone();
    for m in &mut some.etcd.as_mut().unwrap().members[1..] {
        m.status = None;
        some.unreached.insert(m.pod.clone(), ERR.into());
    }
    let mut none = healthy.clone();
    none.etcd = None;
    none.etcd_error = Some(ERR.into());
    none.unreached = none.pods.keys().map(|p| (p.clone(), ERR.to_string())).collect();
    for o in [some, none] {
        let step = plan(&o);
        let s = compute(&o, &step, &prev, None, "t2");
        let a = condition::find(&s.conditions, AVAILABLE).unwrap();
        assert_eq!((a.status.as_str(), a.reason.as_str()), ("Unknown", "MembersUnreachable"), "{step:?}");
        assert!(a.message.starts_with("operator cannot reach members") && a.message.contains("Timeout"), "{a:?}");
        assert!(condition::find(&s.conditions, DEGRADED).is_none(), "{:?}", s.conditions);
        let warned: Vec<_> = changed(&prev.conditions, &s.conditions).into_iter().filter(|c| is_warning(c)).collect();
        assert!(warned.is_empty(), "warning Events: {warned:?}");
        assert!(s.reason.is_empty(), "{}", s.reason);
    }
}

/// Status reads why a member is removed from the step's typed cause, never from the words of
/// its reason: a member whose pod is being deleted is replaced without a `Recovering`
/// condition, whatever its pod is called ("gone", "ended" and "volume" once made it one).
#[test]
fn a_member_removed_for_its_deleted_pod_is_no_recovery_whatever_its_name() {
    let mut o = obs(3, &[true, true, true]);
    let mut p = o.pods.remove("ex-m2").unwrap();
    p.name = "ex-gone".into();
    p.deleting = true;
    o.pods.insert("ex-gone".into(), p);
    let e = o.etcd.as_mut().unwrap();
    e.members[2].pod = "ex-gone".into();
    e.members[2].name = "ex-gone".into();
    let step = plan(&o);
    assert!(matches!(&step, Step::RemoveMember { pod, .. } if pod == "ex-gone"), "{step:?}");
    let s = compute(&o, &step, &Default::default(), None, "t");
    assert!(condition::find(&s.conditions, RECOVERING).is_none(), "{:?}", s.conditions);

    // A member whose pod is gone, data with it, is replaced after a loss: `Recovering`.
    let mut o = obs(3, &[true, true, false]);
    o.pods.remove("ex-m2");
    let step = plan(&o);
    assert!(matches!(&step, Step::RemoveMember { pod, .. } if pod == "ex-m2"), "{step:?}");
    let s = compute(&o, &step, &Default::default(), None, "t");
    assert_eq!(condition::find(&s.conditions, RECOVERING).unwrap().reason, "ReplacingMember");
}

//! Whole plans for a few observations: what one reconcile does, decided from them alone. Each
//! row writes out the entire `Plan` it expects.

use std::collections::BTreeMap;

use etcd_operator_api::cluster::{MembersStatus, NetworkAccessPolicy};
use etcd_operator_api::{Condition, EtcdCluster, EtcdClusterSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::*;
use crate::network_policy::Action;
use crate::observed::{EtcdState, MemberState, MemberStatus, PodState};
use crate::planner::{NewMember, Removal, Wait};
use crate::validation::validate;

const NOW: &str = "2026-11-27T18:00:00Z";
const EARLIER: &str = "2026-11-27T17:00:00Z";

/// `ex` in `ns`, `size` members of etcd 3.5.21, with the marks a formed cluster carries.
fn cluster(size: i32) -> EtcdCluster {
    let mut c = EtcdCluster::new("ex", EtcdClusterSpec { size, version: "3.5.21".into(), ..Default::default() });
    c.metadata.namespace = Some("ns".into());
    c.metadata.generation = Some(4);
    c.metadata.uid = Some("uid-1".into());
    c.metadata.annotations = Some(
        [
            (crate::naming::CLUSTER_ID_ANNOTATION, "abc"),
            (crate::naming::LAST_VALID_SPEC_ANNOTATION, "{}"),
            (crate::naming::MINOR_SINCE_ANNOTATION, "3.5 0"),
            (crate::network_policy::DEFAULT_ANNOTATION, "any"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect(),
    );
    c
}

fn url(member: &str) -> String {
    format!("http://{member}.ex.ns.svc:2380")
}

/// A formed cluster whose members `ex-m0`.. (`members` of them) are healthy, `ex-m0` leads;
/// `pods` of them still have their pod.
fn observed(c: &EtcdCluster, members: usize) -> Observed {
    let mut o = Observed {
        name: "ex".into(),
        namespace: "ns".into(),
        desired: validate("ex", &c.spec),
        services_ready: true,
        ever_bootstrapped: true,
        new_member_suffix: "zzzzz".into(),
        network_policy: Some(policy_open_to_clients()),
        ..Default::default()
    };
    let mut e = EtcdState { cluster_id: 0xabc, leader: Some(1), ..Default::default() };
    for i in 0..members {
        let name = format!("ex-m{i}");
        let pod = PodState {
            name: name.clone(),
            ready: true,
            labelled: true,
            serving: Some(true),
            version: "3.5.21".into(),
            phase: "Running".into(),
            ..Default::default()
        };
        o.pods.insert(name.clone(), pod);
        e.members.push(MemberState {
            id: i as u64 + 1,
            name: name.clone(),
            peer_urls: vec![url(&name)],
            pod: name,
            status: Some(MemberStatus { leader: 1, version: "3.5.21".into(), ..Default::default() }),
            ..Default::default()
        });
    }
    o.etcd = Some(e);
    o
}

/// The NetworkPolicy of `ex` while `spec.networkPolicy.clients` is unset on a cluster that
/// existed before the policy (the `any` mark), the operator running outside a pod: members
/// reach each other's peer port; the client port is open to every source.
fn policy_open_to_clients() -> NetworkPolicy {
    let members = serde_json::json!({"podSelector": {"matchLabels": {"app": "etcd", "etcd_cluster": "ex"}}});
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "ex",
            "namespace": "ns",
            "labels": {"app": "etcd", "etcd_cluster": "ex"},
            "ownerReferences": [{
                "apiVersion": "etcd.database.coreos.com/v1beta2",
                "kind": "EtcdCluster",
                "name": "ex",
                "uid": "uid-1",
                "controller": true,
            }],
        },
        "spec": {
            "podSelector": {"matchLabels": {"app": "etcd", "etcd_cluster": "ex"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [members], "ports": [{"port": 2380, "protocol": "TCP"}]},
                {"ports": [{"port": 2379, "protocol": "TCP"}]},
            ],
        },
    }))
    .unwrap()
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, since: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        last_update_time: since.into(),
        last_transition_time: since.into(),
        reason: reason.into(),
        message: message.into(),
    }
}

/// What `kubectl get etcd ex -o yaml` shows for three healthy members since `EARLIER`.
fn running() -> EtcdClusterStatus {
    EtcdClusterStatus {
        phase: "Running".into(),
        conditions: vec![
            condition("SpecValid", "True", "Valid", "", EARLIER),
            condition("Available", "True", "QuorumHealthy", "3 of 3 voting members healthy", EARLIER),
        ],
        size: 3,
        service_name: "ex-client".into(),
        client_port: 2379,
        members: MembersStatus { ready: vec!["ex-m0".into(), "ex-m1".into(), "ex-m2".into()], ..Default::default() },
        current_version: "3.5.21".into(),
        ready_members: 3,
        leader: "ex-m0".into(),
        cluster_id: "abc".into(),
        observed_generation: Some(4),
        ..Default::default()
    }
}

/// The plan of a settled three-member cluster: it waits, marks nothing, keeps a budget that
/// lets a drain take one member, keeps its NetworkPolicy as it is, writes the status it had and
/// looks again in 15 s.
fn settled() -> Plan {
    Plan {
        step: Step::Wait(Wait { reason: WaitReason::Stable, message: "3 members healthy".into() }),
        marks: BTreeMap::new(),
        unlabelled: vec![],
        fencing: Default::default(),
        confirmed: vec![],
        min_available: Some(2),
        volumes: vec![],
        auth: None,
        network_policy: Action::Nothing,
        certificates: Decision::Off,
        status: running(),
        requeue: Duration::from_secs(15),
    }
}

fn decided(c: &EtcdCluster, o: &Observed) -> Plan {
    let mut c = c.clone();
    c.status = Some(running());
    decide(o, &c, "{}", NOW)
}

#[test]
fn a_healthy_three_member_cluster_waits_and_changes_nothing() {
    let c = cluster(3);
    assert_eq!(decided(&c, &observed(&c, 3)), settled());
}

#[test]
fn a_missing_member_is_added_back_as_a_learner_and_its_policy_restored() {
    let c = cluster(3);
    let mut o = observed(&c, 2);
    o.network_policy = None; // someone deleted it
    let new = "ex-zzzzz";
    let want = Plan {
        step: Step::AddLearner(NewMember {
            name: new.into(),
            initial_cluster: vec![
                ("ex-m0".into(), url("ex-m0")),
                ("ex-m1".into(), url("ex-m1")),
                (new.into(), url(new)),
            ],
            existing: true,
            version: crate::version::Version::parse("3.5.21").unwrap(),
            pvc: false,
            bootstrap: false,
            restart: false,
            seed: None,
            root_data: false,
            claim: None,
            acknowledged_index: 0,
            fenced: false,
        }),
        // Counts the learner's pod before it exists: 2 of the 3 pods a drain must leave.
        min_available: Some(2),
        network_policy: Action::Apply(Box::new(policy_open_to_clients())),
        status: EtcdClusterStatus {
            conditions: vec![
                condition("SpecValid", "True", "Valid", "", EARLIER),
                Condition {
                    last_update_time: NOW.into(),
                    ..condition("Available", "True", "QuorumHealthy", "2 of 2 voting members healthy", EARLIER)
                },
                condition("Scaling", "True", "ScalingUp", "Current cluster size: 2, desired cluster size: 3", NOW),
            ],
            size: 2,
            members: MembersStatus { ready: vec!["ex-m0".into(), "ex-m1".into()], ..Default::default() },
            ready_members: 2,
            ..running()
        },
        requeue: Duration::from_millis(500),
        ..settled()
    };
    assert_eq!(decided(&c, &o), want);
}

#[test]
fn a_lost_quorum_without_disaster_recovery_changes_no_member_and_says_why() {
    let c = cluster(3);
    let mut o = observed(&c, 3);
    // Two members' pods and data are gone; etcd still lists them.
    for m in ["ex-m1", "ex-m2"] {
        o.pods.remove(m);
    }
    for m in &mut o.etcd.as_mut().unwrap().members[1..] {
        m.status = None;
    }
    let why = "quorum lost for good: 2 of 3 voting members can never come back (ex-m1: its pod is gone and it had no volume; ex-m2: its pod is gone and it had no volume); the surviving members' data is kept; to recover, set spec.recovery.quorumLoss to FromSurvivor (a new cluster from the surviving member with the most data; writes it lacks are lost) or FromBackup with spec.recovery.backup naming an EtcdBackup";
    // What the survivor holds, seen once (a later recovery chooses from such looks).
    let looks = r#"{"looks":1,"at":1795802400,"members":{"ex-m0":{"id":1,"applied":0,"revision":0}}}"#;
    let want = Plan {
        step: Step::Wait(Wait { reason: WaitReason::NoQuorum, message: why.into() }),
        // The clock a recovery counts from, and the survivor's data.
        marks: BTreeMap::from([
            (crate::naming::QUORUM_LOST_AT_ANNOTATION.to_string(), Some(NOW.to_string())),
            (crate::naming::SURVIVOR_LOOKS_ANNOTATION.to_string(), Some(looks.to_string())),
        ]),
        min_available: Some(2),
        status: EtcdClusterStatus {
            reason: why.into(),
            conditions: vec![
                condition("SpecValid", "True", "Valid", "", EARLIER),
                condition("Available", "False", "NoQuorum", "1 of 3 voting members healthy", NOW),
                condition("Degraded", "True", "NoQuorum", why, NOW),
            ],
            members: MembersStatus {
                ready: vec!["ex-m0".into()],
                unready: vec!["ex-m1".into(), "ex-m2".into()],
                ..Default::default()
            },
            ready_members: 1,
            ..running()
        },
        requeue: Duration::from_secs(5),
        ..settled()
    };
    assert_eq!(decided(&c, &o), want);
}

#[test]
fn a_network_policy_turned_off_is_deleted_and_nothing_else_changes() {
    let mut c = cluster(3);
    c.spec.network_policy = Some(NetworkAccessPolicy { enabled: Some(false), clients: None });
    let o = observed(&c, 3);
    let want = Plan { network_policy: Action::Delete, ..settled() };
    assert_eq!(decided(&c, &o), want);
}

#[test]
fn status_reports_the_certificate_decision_the_plan_acts_on_planned_once() {
    use crate::tls::auto::read::observation;
    let mut c = cluster(3);
    c.spec.tls = Some(etcd_operator_api::cluster::TlsPolicy {
        auto: Some(etcd_operator_api::cluster::AutoTls::default()),
        ..Default::default()
    });
    let mut o = observed(&c, 0);
    (o.etcd, o.ever_bootstrapped, o.network_policy) = (None, false, None);
    let d = o.desired.as_ref().unwrap();
    let Some(crate::tls::auto::InUse::Spec(settings)) = crate::validation::tls_auto_in_use(d, "ex") else {
        panic!("{:?}", d.tls_auto)
    };
    // No Secret exists yet.
    let none: BTreeMap<String, crate::tls::auto::read::Fetched> = std::iter::once(crate::tls::auto::ca_secret("ex"))
        .chain(crate::tls::auto::Leaf::ALL.iter().map(|l| l.secret("ex")))
        .map(|n| (n, Ok(None)))
        .collect();
    o.certificates = Some(observation(&c, settings, "cluster.local", 1_900_000_000, &none));
    let before = crate::planner::certificates::PLANS.with(|n| n.get());
    let plan = decide(&o, &c, "{}", NOW);
    let planned = crate::planner::certificates::PLANS.with(|n| n.get()) - before;
    assert_eq!(planned, 1, "one reconcile asks the certificate planner once");
    assert_eq!(plan.certificates, Decision::CreateCa, "a new cluster's CA first");
    let reported: Vec<_> =
        plan.status.conditions.iter().filter(|c| c.type_ == crate::status::tls_auto::CERTIFICATES_READY).collect();
    assert_eq!(reported, vec![&condition("CertificatesReady", "False", "Issuing", "creating the cluster's CA", NOW)]);
}

#[test]
fn a_scale_down_drains_first_then_plans_a_typed_removal_and_no_recovery() {
    let c = cluster(2);
    let mut o = observed(&c, 3);
    let plan = decide(&o, &c, "{}", NOW);
    assert!(matches!(&plan.step, Step::Drain { pod } if pod == "ex-m2"), "{:?}", plan.step);
    assert_eq!(plan.min_available, Some(2), "{plan:?}");
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.serving = Some(false);
    p.drained_ms = Some((crate::planner::DRAIN_STALE_SECS - 1) * 1000);
    let plan = decide(&o, &c, "{}", NOW);
    assert!(matches!(&plan.step, Step::RemoveMember { cause: Removal::Leave, .. }), "{:?}", plan.step);
    assert!(
        !plan.status.conditions.iter().any(|c| c.type_ == crate::status::RECOVERING),
        "{:?}",
        plan.status.conditions
    );
}

/// A drain ends on the second; the member leaves within a fifth of a second of it, not up to
/// a whole progress period (plus a reconcile) later.
#[test]
fn a_draining_member_is_looked_at_again_soon_after_its_drain_ends() {
    let c = cluster(2);
    let mut o = observed(&c, 3);
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.serving = Some(false);
    p.drained_ms = Some((crate::planner::DRAIN_SECS - 1) * 1000);
    let plan = decide(&o, &c, "{}", "2026-11-27T18:00:00Z");
    assert!(matches!(&plan.step, Step::Wait(w) if w.reason == WaitReason::MemberDraining), "{:?}", plan.step);
    assert!(plan.requeue <= Duration::from_millis(200), "{:?}", plan.requeue);
}

#[test]
fn the_marks_are_planned_with_the_spec_and_the_time_given() {
    let c = cluster(3);
    let o = observed(&c, 3);
    let plan = decide(&o, &c, "{\"size\":3}", NOW);
    let want: BTreeMap<String, Option<String>> =
        BTreeMap::from([(crate::naming::LAST_VALID_SPEC_ANNOTATION.to_string(), Some("{\"size\":3}".to_string()))]);
    assert_eq!(plan.marks, want, "only the spec changed since the marks were written");
}

/// A request is answered in status before it is taken off the EtcdCluster: a reconcile can end
/// before its status patch, and whoever asked must find the answer.
#[test]
fn a_done_switchover_is_reported_first_and_taken_off_only_once_status_holds_it() {
    let mut c = cluster(3);
    c.metadata.annotations.as_mut().unwrap().insert(crate::naming::SWITCHOVER_ANNOTATION.into(), "ex-m0".into());
    let mut o = observed(&c, 3);
    o.switchover = Some("ex-m0".into());
    let first = decided(&c, &o);
    let cond = first.status.conditions.iter().find(|x| x.type_ == "Switchover").expect("a Switchover condition");
    assert_eq!((cond.status.as_str(), cond.reason.as_str()), ("True", "LeaderMoved"));
    assert!(!first.marks.contains_key(crate::naming::SWITCHOVER_ANNOTATION), "taken off before it was reported");
    // The status patch happened: now the request goes.
    c.status = Some(first.status.clone());
    let second = decide(&o, &c, "{}", NOW);
    assert_eq!(second.marks.get(crate::naming::SWITCHOVER_ANNOTATION), Some(&None));
}

/// A drain gone stale (a minute between the drain and the step after it: an operator restart)
/// is made again before its member leaves or restarts. The re-label of a stale drain is written
/// before the step: in one reconcile it would put the member back in the client Service just
/// before removing or restarting it.
#[test]
fn a_stale_drain_is_renewed_and_never_relabelled_beside_a_step_on_its_member() {
    let stale = |o: &mut Observed, pod: &str| {
        let p = o.pods.get_mut(pod).unwrap();
        (p.serving, p.drained_ms) = (Some(false), Some(crate::planner::DRAIN_STALE_SECS * 1000));
    };
    // Scale-down.
    let c = cluster(2);
    let mut o = observed(&c, 3);
    stale(&mut o, "ex-m2");
    let plan = decide(&o, &c, "{}", NOW);
    assert_eq!(plan.step, Step::Drain { pod: "ex-m2".into() });
    assert!(!plan.unlabelled.contains(&"ex-m2".to_string()), "{:?}", plan.unlabelled);
    // An in-place upgrade's restart.
    let mut c = cluster(3);
    c.spec.version = "3.5.22".into();
    let mut o = observed(&c, 3);
    stale(&mut o, "ex-m1");
    let plan = decide(&o, &c, "{}", NOW);
    assert_eq!(plan.step, Step::Drain { pod: "ex-m1".into() });
    assert!(!plan.unlabelled.contains(&"ex-m1".to_string()), "{:?}", plan.unlabelled);
}

/// An upgraded member back at its version while drained for its restart is confirmed (its
/// version-changed mark dropped) only beside its return to the client Service: confirmed
/// without it (a fence decided for it that reconcile), nothing would ever serve it again.
#[test]
fn a_drained_member_back_from_its_upgrade_is_confirmed_only_with_its_return_to_the_service() {
    let mut c = cluster(3);
    c.spec.version = "3.5.22".into();
    let mut o = observed(&c, 3);
    let p = o.pods.get_mut("ex-m1").unwrap();
    (p.serving, p.drained_ms, p.version) = (Some(false), Some(8_000), "3.5.22".into());
    (p.version_age_secs, p.etcd_ready_run_secs) = (Some(6), Some(4));
    o.etcd.as_mut().unwrap().members[1].status.as_mut().unwrap().version = "3.5.22".into();
    let plan = decide(&o, &c, "{}", NOW);
    assert!(
        plan.confirmed.contains(&"ex-m1".to_string()) && plan.unlabelled.contains(&"ex-m1".to_string()),
        "{plan:?}"
    );
    // A fence asked for it: it stays out, and stays unconfirmed until it serves or is fenced.
    o.fence_request = Ok(vec!["ex-m1".into()]);
    let plan = decide(&o, &c, "{}", NOW);
    assert!(plan.fencing.fence.contains(&"ex-m1".to_string()), "{:?}", plan.fencing);
    assert!(!plan.unlabelled.contains(&"ex-m1".to_string()), "{:?}", plan.unlabelled);
    assert!(!plan.confirmed.contains(&"ex-m1".to_string()), "{:?}", plan.confirmed);
}

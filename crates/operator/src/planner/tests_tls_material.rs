//! Table tests of refused TLS material the cluster runs with (`tls_material`): members whose
//! pods are gone come back on their volumes, nothing that starts a running or a new member is
//! done, and the refusal is the wait (so `Degraded` says it) once nothing else is to do.

use super::tests::*;
use super::*;

const EXPIRED: &str = "Secret etcd-peer-tls key peer.crt: expired at 2030-01-01 0:00:00.0 +00:00:00";

fn refused(mut o: Observed) -> Observed {
    o.tls_material.refused = vec![EXPIRED.to_string()];
    o.tls_material.refused_secrets = ["etcd-peer-tls".to_string()].into();
    o
}

/// A three-member cluster on volumes.
fn on_volumes() -> Observed {
    let mut o = running(3, 3);
    for m in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, m);
    }
    o
}

fn assert_held(s: &Step) {
    assert_eq!(wait_reason(s), WaitReason::TlsMaterialRefused, "{s:?}");
    assert!(wait_message(s).contains(EXPIRED), "{s:?}");
}

#[test]
fn a_member_whose_pod_is_gone_restarts_on_its_volume() {
    let mut o = on_volumes();
    o.pods.remove("ex-m2");
    unhealthy(&mut o, 2);
    let s = plan(&refused(o));
    let Step::CreatePod(m) = &s else { panic!("expected the restart on its volume, got {s:?}") };
    assert!(m.name == "ex-m2" && m.pvc && m.existing, "{m:?}");
}

#[test]
fn an_ended_pod_on_a_volume_is_deleted_so_that_its_member_restarts() {
    let mut o = on_volumes();
    o.pods.get_mut("ex-m3").unwrap().phase = "Failed".into();
    unhealthy(&mut o, 3);
    assert!(matches!(plan(&refused(o)), Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m3"));
}

#[test]
fn every_member_comes_back_on_its_volume_without_etcd_answering() {
    // The operator's own Secret is gone: no member can be asked; pods lost with a node.
    let mut o = on_volumes();
    o.etcd = None;
    o.pods.clear();
    let s = plan(&refused(o));
    assert!(matches!(&s, Step::CreatePod(m) if m.pvc && m.name == "ex-m1"), "{s:?}");
}

/// (situation, the cluster, the step planned without a refusal, which must then be held)
type Row = (&'static str, Observed, fn(&Step) -> bool);

#[test]
fn nothing_that_starts_a_running_or_a_new_member_is_done() {
    let rows: Vec<Row> = vec![
        ("scaling up (a learner)", running(3, 5), |s| matches!(s, Step::AddLearner(_))),
        ("scaling down (a drain first)", running(3, 1), |s| matches!(s, Step::Drain { .. } | Step::MoveLeader { .. })),
        ("a new cluster", fresh(3), |s| matches!(s, Step::Bootstrap(_))),
        (
            "a rollout",
            {
                let mut o = on_volumes();
                o.pods.values_mut().for_each(|p| p.spec_hash = Some("earlier".into()));
                o
            },
            |s| matches!(s, Step::Drain { .. } | Step::DeletePod { .. }),
        ),
        (
            "an upgrade",
            {
                let mut o = running(3, 3);
                o.desired = validate_version("3.5.3");
                o
            },
            |s| matches!(s, Step::UpgradeMember { .. } | Step::Drain { .. }),
        ),
    ];
    for (what, o, unrefused) in rows {
        let s = plan(&o);
        assert!(unrefused(&s), "{what}: without a refusal {s:?}");
        let s = plan(&refused(o));
        assert_held(&s);
        assert!(wait_message(&s).contains("waiting: "), "{what}: names what waits: {s:?}");
    }
}

fn validate_version(v: &str) -> Result<Desired, Vec<String>> {
    crate::validation::validate(
        NAME,
        &etcd_operator_api::EtcdClusterSpec { size: 3, version: v.into(), ..Default::default() },
    )
}

#[test]
fn a_gone_emptydir_member_is_removed_but_no_replacement_is_made() {
    let mut o = running(3, 3);
    o.pods.remove("ex-m3");
    unhealthy(&mut o, 3);
    let s = plan(&refused(o.clone()));
    assert!(matches!(&s, Step::RemoveMember { pod, .. } if pod == "ex-m3"), "{s:?}");
    // Removed: the replacement (a new member) waits.
    etcd(&mut o).members.retain(|m| m.id != 3);
    assert!(matches!(plan(&o), Step::AddLearner(_)));
    assert_held(&plan(&refused(o)));
}

#[test]
fn a_settled_cluster_waits_on_the_refusal_instead_of_reporting_stable() {
    let o = running(3, 3);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    let s = plan(&refused(o));
    assert_held(&s);
    assert!(!wait_message(&s).contains("waiting: "), "nothing held: {s:?}");
    assert!(WaitReason::TlsMaterialRefused.needs_attention());
}

#[test]
fn a_refused_spec_is_reported_as_such() {
    // Refused material of a change with nothing to fall back to: the spec itself is refused.
    let mut o = refused(running(3, 3));
    o.desired = Err(vec![EXPIRED.into()]);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::InvalidSpec);
}

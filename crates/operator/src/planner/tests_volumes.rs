//! Member volumes, one table row per situation: claims whoever named them (the CoreOS
//! operator named a member's claim after the member) bring their member back; a volume whose
//! data check refused it is kept, never deleted nor used again; a restart carries what the
//! member acknowledged, so that a rolled-back volume is refused.

use super::tests::*;
use super::tests_failures::{created, lose_pods, pvc_cluster, retire, with_policy};
use super::*;
use crate::observed::{PodState, PvcState};
use crate::validation::QuorumLossPolicy;

/// A cluster as the CoreOS operator made it with `persistentVolumeClaimSpec`: one claim per
/// member named after the member, no annotation of this operator's.
fn coreos_pvc_cluster(n: u64) -> Observed {
    let mut o = running(n, n as i32);
    for i in 1..=n {
        let member = format!("ex-m{i}");
        o.pvcs.insert(member.clone(), PvcState { name: member.clone(), member: member.clone(), ..Default::default() });
        o.pods.get_mut(&member).unwrap().uses_pvc = true;
    }
    o
}

#[test]
fn coreos_claims_bring_their_members_back_after_a_quorum_loss() {
    let mut o = coreos_pvc_cluster(3);
    lose_pods(&mut o, &[2, 3]);
    // Even with a recovery policy that would act at once: the members can come back.
    with_policy(&mut o, QuorumLossPolicy::FromSurvivor, Some(3600));
    assert!(!recovery::quorum_unrecoverable(&o));
    let m = created(plan(&o));
    assert_eq!((m.name.as_str(), m.claim.as_deref()), ("ex-m2", Some("ex-m2")), "on the claim named after it");
    assert!(m.restart && m.existing && m.pvc, "{m:?}");
    o.pods.insert("ex-m2".into(), PodState { uses_pvc: true, ready: false, ..pod("ex-m2") });
    assert_eq!(created(plan(&o)).claim.as_deref(), Some("ex-m3"));
    // Every pod gone and no member answering: each comes back on its claim.
    let mut o = coreos_pvc_cluster(3);
    o.pods.clear();
    o.etcd = None;
    let m = created(plan(&o));
    assert_eq!((m.name.as_str(), m.claim.as_deref()), ("ex-m1", Some("ex-m1")));
}

#[test]
fn this_operators_claims_are_named_on_a_restart_too_and_a_new_member_has_none_yet() {
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[3]);
    assert_eq!(created(plan(&o)).claim.as_deref(), Some("ex-m3-data"));
    let mut o = running(3, 4);
    o.desired.as_mut().unwrap().pod.persistent_volume_claim_spec = Some(Default::default());
    let Step::AddLearner(m) = plan(&o) else { panic!("expected AddLearner") };
    assert_eq!(m.claim, None);
}

// ---- a refused volume is kept ---------------------------------------------------------------------

/// `ex-m2`'s data check refused its volume.
fn refused(mut o: Observed) -> Observed {
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.volume_refused = Some("the volume was emptied".into());
    p.problem = Some(("CrashLoopBackOff".into(), "check-data".into()));
    unhealthy(&mut o, 2);
    o
}

#[test]
fn a_refused_volume_is_retired_and_kept_before_its_member_is_replaced() {
    let mut o = refused(pvc_cluster(3));
    let s = plan(&o);
    let Step::RetireVolume { pod, claim, why } = &s else { panic!("expected RetireVolume, got {s:?}") };
    assert_eq!((pod.as_str(), claim.as_str()), ("ex-m2", "ex-m2-data"));
    assert!(why.contains("emptied"), "{why}");
    // Retired (the cache shows the mark): the member is replaced, its claim stays where it is.
    retire(&mut o, "ex-m2");
    assert!(matches!(plan(&o), Step::RemoveMember { id: 2, .. }), "{:?}", plan(&o));
    // ... and is never restarted on, with or without etcd answering.
    etcd(&mut o).members.retain(|m| m.id != 2);
    o.pods.remove("ex-m2");
    assert!(matches!(plan(&o), Step::AddLearner(m) if m.name != "ex-m2"));
    o.etcd = None;
    let s = plan(&o);
    assert!(!matches!(&s, Step::CreatePod(m) if m.name == "ex-m2"), "{s:?}");
}

#[test]
fn a_refused_volume_is_kept_without_a_quorum_too() {
    let mut o = refused(pvc_cluster(3));
    lose_pods(&mut o, &[3]);
    o.pvcs.remove("ex-m3");
    assert!(matches!(plan(&o), Step::RetireVolume { pod, .. } if pod == "ex-m2"));
    retire(&mut o, "ex-m2");
    // Its member counts as lost (it cannot come back on that volume).
    let s = plan(&o);
    assert!(wait_message(&s).contains("2 of 3"), "{s:?}");
}

#[test]
fn with_only_retired_volumes_left_the_data_is_reported_lost_and_they_are_named() {
    let mut o = pvc_cluster(3);
    o.pods.clear();
    o.etcd = None;
    for m in ["ex-m1", "ex-m2", "ex-m3"] {
        retire(&mut o, m);
    }
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::DataLost);
    assert!(wait_message(&s).contains("ex-m2-data"), "{s:?}");
}

// ---- a restart carries what its member acknowledged ---------------------------------------------

#[test]
fn a_restart_carries_the_index_its_member_acknowledged() {
    let mut o = pvc_cluster(3);
    lose_pods(&mut o, &[2]);
    o.acknowledged.insert("ex-m2".into(), 4711);
    o.acknowledged.insert("ex-m1".into(), 99);
    let m = created(plan(&o));
    assert_eq!((m.name.as_str(), m.acknowledged_index), ("ex-m2", 4711));
    // Nothing recorded: nothing demanded.
    o.acknowledged.clear();
    assert_eq!(created(plan(&o)).acknowledged_index, 0);
}

//! Table tests of the restricted default (`pod_security`) meeting members made before it: an
//! operator upgrade rolls them one at a time under the ordinary rollout (followers first, every
//! voter healthy before the next); a member whose volume holds data the non-root user cannot use
//! is marked as root's and restarts as root, never replaced or left failing.

use super::tests::{add_learner, add_pvc, drained, etcd, m, running, unhealthy, wait_reason};
use super::*;
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

/// Every pod carries the hash of operator versions before the restricted default (a spec
/// without securityContext, pods as root).
fn made_before_the_default(o: &mut Observed) {
    let h = o.desired.as_ref().unwrap().pod_hash_for(true);
    for p in o.pods.values_mut() {
        p.spec_hash = Some(h.clone());
    }
}

/// The member's pod is gone (deleted by the rollout): etcd cannot reach it.
fn pod_gone(o: &mut Observed, id: u64, pod: &str) {
    o.pods.remove(pod);
    unhealthy(o, id);
}

/// The pod the operator made for `nm` is there, with the hash it was made with.
fn pod_made(o: &mut Observed, nm: &NewMember) {
    let mut p = super::tests::pod(&nm.name);
    p.uses_pvc = nm.pvc;
    p.spec_hash = Some(o.desired.as_ref().unwrap().pod_hash_for(nm.root_data));
    p.ready = false;
    o.pods.insert(nm.name.clone(), p);
}

fn created(s: Step) -> NewMember {
    match s {
        Step::CreatePod(m) => m,
        other => panic!("expected CreatePod, got {other:?}"),
    }
}

#[test]
fn an_upgrade_rolls_pvc_members_made_as_root_one_at_a_time_and_keeps_roots_data_as_root() {
    let mut o = running(3, 3);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, p);
    }
    made_before_the_default(&mut o);
    // A follower first, out of the client Service, then its pod (the volume stays).
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m2".into() });
    drained(&mut o, "ex-m2");
    assert!(matches!(plan(&o), Step::DeletePod { pod, keep_volume: true, .. } if pod == "ex-m2"));
    // It restarts on its volume with the default profile.
    pod_gone(&mut o, 2, "ex-m2");
    let nm = created(plan(&o));
    assert_eq!((nm.name.as_str(), nm.restart, nm.root_data), ("ex-m2", true, false));
    pod_made(&mut o, &nm);
    // Nothing else moves while it starts.
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
    // Its data check as uid 65532 cannot use the data root wrote (hostPath: no fsGroup).
    let p = o.pods.get_mut("ex-m2").unwrap();
    p.data_inaccessible = Some("uid 65532 cannot read and write /var/etcd/data (owner 0:0, mode 700)".into());
    p.problem = Some(("CrashLoopBackOff".into(), "container check-data: back-off".into()));
    let s = plan(&o);
    assert!(
        matches!(&s, Step::RestartAsRoot { pod, why } if pod == "ex-m2" && why.contains("/var/etcd/data")),
        "{s:?}"
    );
    // The volume is marked, the pod deleted: it comes back as root, on its data.
    o.pvcs.get_mut("ex-m2").unwrap().root_data = true;
    pod_gone(&mut o, 2, "ex-m2");
    let nm = created(plan(&o));
    assert_eq!((nm.name.as_str(), nm.restart, nm.root_data), ("ex-m2", true, true));
    pod_made(&mut o, &nm);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberStarting);
    // Healthy again as root: it is current (not rolled again); the next follower goes.
    m(&mut o, 2).status = super::tests::member(2, "ex-m2", 1, 1000).status;
    o.pods.get_mut("ex-m2").unwrap().ready = true;
    assert_eq!(plan(&o), Step::Drain { pod: "ex-m3".into() });
    // Its data check passes (the kubelet applied fsGroup): it runs as non-root from now on,
    // current as well; the leader goes last, after handing leadership away.
    drained(&mut o, "ex-m3");
    assert!(matches!(plan(&o), Step::DeletePod { pod, .. } if pod == "ex-m3"));
    pod_gone(&mut o, 3, "ex-m3");
    let nm = created(plan(&o));
    assert!(!nm.root_data);
    pod_made(&mut o, &nm);
    m(&mut o, 3).status = super::tests::member(3, "ex-m3", 1, 1000).status;
    o.pods.get_mut("ex-m3").unwrap().ready = true;
    assert!(matches!(plan(&o), Step::MoveLeader { from_pod, purpose: Purpose::Rollout, .. } if from_pod == "ex-m1"));
}

#[test]
fn an_upgrade_replaces_emptydir_members_made_as_root_by_new_members() {
    let mut o = running(3, 3);
    made_before_the_default(&mut o);
    let Step::AddLearner(nm) = plan(&o) else { panic!("expected AddLearner, got {:?}", plan(&o)) };
    assert!(!nm.root_data && !nm.pvc);
}

#[test]
fn members_kept_as_root_for_their_data_and_users_contexts_are_not_rolled() {
    let mut o = running(3, 3);
    for p in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, p);
        o.pvcs.get_mut(p).unwrap().root_data = true;
    }
    made_before_the_default(&mut o);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    // A securityContext of the user's: pods made before hash the same; the mark changes nothing.
    let spec: EtcdClusterSpec =
        serde_yaml::from_str("size: 3\nversion: 3.5.1\npod: {securityContext: {runAsUser: 1000}}").unwrap();
    o.desired = validate("ex", &spec);
    made_before_the_default(&mut o);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    o.pvcs.get_mut("ex-m2").unwrap().root_data = false;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

/// Restarting as root is the answer only for a pod made with the default profile: under the
/// user's securityContext, or for a pod already made as root, the failure is reported and
/// nothing else changes (never a loop of restarts, never a replacement).
#[test]
fn inaccessible_data_outside_the_default_profile_is_reported_not_acted_on() {
    let inaccessible = |o: &mut Observed| {
        let p = o.pods.get_mut("ex-m2").unwrap();
        p.data_inaccessible = Some("uid 0 cannot read and write /var/etcd/data".into());
        p.problem = Some(("CrashLoopBackOff".into(), "container check-data: back-off".into()));
        unhealthy(o, 2);
    };
    let mut o = running(3, 3);
    add_pvc(&mut o, "ex-m2");
    o.pvcs.get_mut("ex-m2").unwrap().root_data = true;
    made_before_the_default(&mut o);
    inaccessible(&mut o);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);

    let spec: EtcdClusterSpec =
        serde_yaml::from_str("size: 3\nversion: 3.5.1\npod: {securityContext: {runAsUser: 1000}}").unwrap();
    o.desired = validate("ex", &spec);
    o.pvcs.get_mut("ex-m2").unwrap().root_data = false;
    made_before_the_default(&mut o);
    inaccessible(&mut o);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::MemberFailing);
}

/// A new member whose fresh volume the non-root user cannot write (a root-owned 0755 hostPath
/// directory): a learner, restarted as root on its volume.
#[test]
fn a_learner_on_a_volume_the_nonroot_user_cannot_write_starts_as_root() {
    let mut o = running(3, 4);
    o.desired = validate(
        "ex",
        &serde_yaml::from_str::<EtcdClusterSpec>(
            "size: 4\nversion: 3.5.1\npod: {persistentVolumeClaimSpec: {accessModes: [ReadWriteOnce]}}",
        )
        .unwrap(),
    );
    assert!(o.desired.is_ok(), "{:?}", o.desired);
    let h = o.desired.as_ref().unwrap().pod_hash();
    add_learner(&mut o, 4, "ex-new", 0);
    m(&mut o, 4).name = String::new(); // never started
    add_pvc(&mut o, "ex-new");
    for p in o.pods.values_mut() {
        p.spec_hash = Some(h.clone());
    }
    let p = o.pods.get_mut("ex-new").unwrap();
    p.data_inaccessible = Some("uid 65532 cannot read and write /var/etcd (owner 0:0, mode 755)".into());
    p.problem = Some(("CrashLoopBackOff".into(), "container check-data: back-off".into()));
    assert!(matches!(plan(&o), Step::RestartAsRoot { pod, .. } if pod == "ex-new"));
    o.pvcs.get_mut("ex-new").unwrap().root_data = true;
    o.pods.remove("ex-new");
    let nm = created(plan(&o));
    assert_eq!((nm.name.as_str(), nm.root_data), ("ex-new", true));
    assert_eq!(etcd(&mut o).members.len(), 4, "no membership change for it");
}

//! Table tests of the experimental settings before etcd 3.7 (`upgrade::before_three_seven`):
//! 3.7 removed every `--experimental-*` flag. Pods that still carry one (made before 3.6, or
//! upgraded in place from 3.5, keep their environment) are made again, one at a time, before the
//! first 3.7 member starts; a setting with no 3.7 equivalent refuses the upgrade.
//! Fixtures as in `tests.rs`.

use super::tests::{add_learner, add_pvc, drained, etcd, m, plan_drained, running, wait_message, wait_reason};
use super::*;
use crate::observed::{MinorSince, Since};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;

const CORRUPT_CHECK: &str = "ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK";

/// A 3.6.15 cluster (its log began at 3.6: no snapshot to wait for) whose pods were made at 3.5
/// with `etcdEnv` `ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true` and upgraded in place, asked
/// for `version`.
fn three_six_with_experimental_pods(version: &str) -> Observed {
    let mut o = running(3, 3);
    for p in o.pods.values_mut() {
        p.version = "3.6.15".into();
        p.etcd_flags = vec![("experimental-initial-corrupt-check".into(), Some("true".into()))];
    }
    for mem in &mut etcd(&mut o).members {
        mem.status.as_mut().unwrap().version = "3.6.15".into();
    }
    o.minor_since = Some(MinorSince { minor: "3.6".into(), since: Since::LogStart });
    let spec: EtcdClusterSpec = serde_json::from_value(serde_json::json!({
        "size": 3, "version": version,
        "pod": {"etcdEnv": [{"name": CORRUPT_CHECK, "value": "true"}]},
    }))
    .unwrap();
    o.desired = validate("ex", &spec);
    assert!(o.desired.is_ok(), "{:?}", o.desired);
    let hash = o.desired.as_ref().unwrap().pod_hash();
    for p in o.pods.values_mut() {
        p.spec_hash = Some(hash.clone());
    }
    o
}

/// The pod was made again from the current spec at 3.6: the translated settings only.
fn remade(o: &mut Observed, pod: &str) {
    o.pods.get_mut(pod).unwrap().etcd_flags = vec![("feature-gates".into(), Some("InitialCorruptCheck=true".into()))];
}

#[test]
fn pods_with_experimental_settings_are_made_again_before_the_first_three_seven_member() {
    let mut o = three_six_with_experimental_pods("3.7.2");
    for pod in ["ex-m1", "ex-m2", "ex-m3"] {
        add_pvc(&mut o, pod);
    }
    // A follower first: drained, then restarted on its volume, the Event naming the translation.
    assert!(matches!(plan(&o), Step::Drain { pod } if pod == "ex-m2"), "{:?}", plan(&o));
    drained(&mut o, "ex-m2");
    let Step::DeletePod { pod, why, keep_volume: true } = plan(&o) else { panic!("{:?}", plan(&o)) };
    assert_eq!(pod, "ex-m2");
    assert!(
        why.contains("etcd 3.7.2")
            && why.contains("experimental-initial-corrupt-check")
            && why
                .contains("ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true → ETCD_FEATURE_GATES=InitialCorruptCheck=true"),
        "{why}"
    );
    remade(&mut o, "ex-m2");
    o.pods.get_mut("ex-m2").unwrap().serving = Some(true);
    assert!(matches!(plan(&o), Step::Drain { pod } if pod == "ex-m3"), "{:?}", plan(&o));
    remade(&mut o, "ex-m3");
    // The leader last, after handing leadership away.
    assert!(
        matches!(plan(&o), Step::MoveLeader { from_pod, purpose: Purpose::Rollout, .. } if from_pod == "ex-m1"),
        "{:?}",
        plan(&o)
    );
    remade(&mut o, "ex-m1");
    // Nothing experimental left: the upgrade itself.
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"), "{:?}", plan_drained(&o));
}

/// An emptyDir member is replaced: a learner made from the current spec joins, then the old
/// member leaves, the Event saying why.
#[test]
fn an_empty_dir_member_is_replaced_and_the_removal_names_the_translation() {
    let mut o = three_six_with_experimental_pods("3.7.2");
    let Step::AddLearner(n) = plan_drained(&o) else { panic!("{:?}", plan_drained(&o)) };
    assert_eq!(n.version.to_string(), "3.6.15", "made at the version the cluster runs");
    add_learner(&mut o, 4, "ex-new", 1000);
    {
        let p = o.pods.get_mut("ex-new").unwrap();
        p.version = "3.6.15".into();
        p.spec_hash = o.desired.as_ref().ok().map(|d| d.pod_hash());
    }
    m(&mut o, 4).status.as_mut().unwrap().version = "3.6.15".into();
    m(&mut o, 4).is_learner = false;
    drained(&mut o, "ex-m2");
    let Step::RemoveMember { pod, why, .. } = plan_drained(&o) else { panic!("{:?}", plan_drained(&o)) };
    assert_eq!(pod, "ex-m2");
    assert!(why.contains("InitialCorruptCheck") && why.contains("etcd 3.7.2"), "{why}");
}

/// 3.6 still reads experimental flags: nothing is made again for a 3.6 patch upgrade.
#[test]
fn a_three_six_patch_upgrade_leaves_experimental_settings_alone() {
    let mut o = three_six_with_experimental_pods("3.6.16");
    assert!(matches!(plan_drained(&o), Step::UpgradeMember { pod, .. } if pod == "ex-m2"), "{:?}", plan_drained(&o));
    o.desired.as_mut().unwrap().version = crate::version::Version::parse("3.6.15").unwrap();
    assert_eq!(wait_reason(&plan_drained(&o)), WaitReason::Stable);
}

/// A setting with no 3.7 equivalent (here in a spec validation let through as the last valid
/// one: a strict edit is refused by validation itself) refuses the upgrade, naming it; nothing
/// is made again or upgraded.
#[test]
fn a_setting_without_a_three_seven_equivalent_refuses_the_upgrade() {
    let mut o = three_six_with_experimental_pods("3.6.15");
    let d = o.desired.as_mut().unwrap();
    d.version = crate::version::Version::parse("3.7.2").unwrap();
    d.pod.etcd_env.push(k8s_openapi::api::core::v1::EnvVar {
        name: "ETCD_EXPERIMENTAL_NO_SUCH_THING".into(),
        value: Some("1".into()),
        ..Default::default()
    });
    let s = plan_drained(&o);
    assert_eq!(wait_reason(&s), WaitReason::UpgradeRefused, "{s:?}");
    let msg = wait_message(&s);
    assert!(msg.contains("ETCD_EXPERIMENTAL_NO_SUCH_THING") && msg.contains("nothing was changed"), "{msg}");
}

/// An experimental flag on an adopted pod's command line: made again too (the operator's own
/// command line has none).
#[test]
fn an_experimental_flag_on_the_command_line_is_made_again_too() {
    let mut o = three_six_with_experimental_pods("3.7.2");
    for pod in ["ex-m1", "ex-m2", "ex-m3"] {
        remade(&mut o, pod);
        add_pvc(&mut o, pod);
        drained(&mut o, pod);
    }
    o.pods.get_mut("ex-m3").unwrap().etcd_flags =
        vec![("experimental-compaction-batch-limit".into(), Some("100".into()))];
    assert!(matches!(plan_drained(&o), Step::DeletePod { pod, .. } if pod == "ex-m3"), "{:?}", plan_drained(&o));
}

//! Table tests of etcd authentication (`spec.auth`): turning it on one idempotent step at a
//! time and only with every voter healthy, resuming after an operator restart, turning it off,
//! changing the root password, and a refused Secret or login. Fixtures of `tests.rs`:
//! `running(n, size)` is `n` healthy voters `ex-m1..`, `ex-m1` leading.

use super::auth::AuthStep;
use super::tests::{add_learner, etcd, running, unhealthy, wait_reason};
use super::*;
use crate::auth::{AuthObserved, EtcdAuth, RootUser, SecretState};
use crate::validation::validate;
use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::cluster::AuthPolicy;

/// etcd 3.5.2 (3.5.0 and 3.5.1 refuse auth): `n` healthy voters, spec size `size`, `spec.auth`
/// with `enabled`, a valid root Secret, etcd's authentication `state`.
fn cluster(n: u64, size: i32, enabled: bool, state: EtcdAuth) -> Observed {
    let mut o = running(n, size);
    let spec = EtcdClusterSpec {
        size,
        version: "3.5.2".into(),
        auth: Some(AuthPolicy { enabled, root_secret: "ex-root".into() }),
        ..Default::default()
    };
    o.desired = validate("ex", &spec);
    assert!(o.desired.is_ok(), "{:?}", o.desired);
    for p in o.pods.values_mut() {
        p.version = "3.5.2".into();
        p.image = "quay.io/coreos/etcd:v3.5.2".into();
    }
    for m in &mut etcd(&mut o).members {
        m.status.as_mut().unwrap().version = "3.5.2".into();
    }
    etcd(&mut o).auth = state;
    o.auth = AuthObserved { secret: SecretState::Valid, applied_matches: Some(true), ..Default::default() };
    o
}

fn off(root: RootUser) -> EtcdAuth {
    EtcdAuth::Off { root }
}

const ON: EtcdAuth = EtcdAuth::On { secret_password: true };

#[test]
fn authentication_is_turned_on_one_step_at_a_time() {
    // As etcdctl does it: root user, root role, auth enable; then nothing more to do.
    let rows = [
        (off(RootUser::Missing), Some(AuthStep::AddRootUser)),
        (off(RootUser::WithoutRootRole), Some(AuthStep::GrantRootRole)),
        (off(RootUser::WithRootRole), Some(AuthStep::Enable)),
        (ON, None),
        // Nothing known of the root user (its answer was lost): nothing is done.
        (off(RootUser::Unknown), None),
    ];
    for (state, want) in rows {
        let s = plan(&cluster(3, 3, true, state.clone()));
        match want {
            Some(a) => assert_eq!(s, Step::Auth(a), "{state:?}"),
            None => assert_eq!(wait_reason(&s), WaitReason::Stable, "{state:?}: {s:?}"),
        }
    }
}

/// An operator restarted half-way finds etcd as the last step left it and goes on from there:
/// a root user made earlier (by it or by a person) is not added twice; its password may be
/// anything, so `Enable` sets the Secret's right before `auth enable`.
#[test]
fn an_operator_restarted_mid_sequence_resumes_from_what_etcd_says() {
    let o = cluster(3, 3, true, off(RootUser::WithRootRole));
    assert_eq!(plan(&o), Step::Auth(AuthStep::Enable), "user and role exist, auth not on yet");
    let o = cluster(3, 3, true, off(RootUser::WithoutRootRole));
    assert_eq!(plan(&o), Step::Auth(AuthStep::GrantRootRole), "the user exists: not added again");
}

#[test]
fn no_authentication_step_without_every_voter_healthy() {
    // One member down of three: a quorum, but a member to heal first.
    let mut o = cluster(3, 3, true, off(RootUser::Missing));
    unhealthy(&mut o, 3);
    let s = plan(&o);
    assert!(!matches!(s, Step::Auth(_)), "{s:?}");
    assert_eq!(wait_reason(&s), WaitReason::MemberStarting);
    // Two of three: no quorum at all.
    unhealthy(&mut o, 2);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
    // A learner catching up: it is promoted first.
    let mut o = cluster(3, 4, true, off(RootUser::Missing));
    add_learner(&mut o, 4, "ex-m4", 10);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::LearnerCatchingUp);
    // Turning it off or changing the password waits just the same.
    let mut o = cluster(3, 3, false, ON);
    unhealthy(&mut o, 3);
    assert!(!matches!(plan(&o), Step::Auth(_)));
}

#[test]
fn a_new_cluster_is_secured_before_it_grows() {
    let o = cluster(3, 5, true, off(RootUser::Missing));
    assert_eq!(plan(&o), Step::Auth(AuthStep::AddRootUser));
    // Once on, scaling goes on as ever (members need nothing: auth is cluster state).
    let o = cluster(3, 5, true, ON);
    assert!(matches!(plan(&o), Step::AddLearner(_)), "{:?}", plan(&o));
}

#[test]
fn authentication_is_turned_off_as_root() {
    assert_eq!(plan(&cluster(3, 3, false, ON)), Step::Auth(AuthStep::Disable));
    // With whichever password etcd accepts, even while the Secret is refused.
    let mut o = cluster(3, 3, false, EtcdAuth::On { secret_password: false });
    o.auth.secret = SecretState::Invalid(vec!["Secret ex-root lacks key password".into()]);
    assert_eq!(plan(&o), Step::Auth(AuthStep::Disable));
    assert_eq!(wait_reason(&plan(&cluster(3, 3, false, off(RootUser::WithRootRole)))), WaitReason::Stable);
    assert_eq!(wait_reason(&plan(&cluster(3, 3, false, off(RootUser::Missing)))), WaitReason::Stable);
}

#[test]
fn a_changed_root_secret_changes_the_root_password() {
    // The operator got in only with the password it recorded: the Secret has a new one.
    let o = cluster(3, 3, true, EtcdAuth::On { secret_password: false });
    assert_eq!(plan(&o), Step::Auth(AuthStep::ChangeRootPassword));
}

/// A refused root Secret changes nothing in etcd, and holds nothing else up: the condition
/// names the Secret and the key (`auth::tests`).
#[test]
fn a_refused_secret_changes_no_authentication_and_stops_nothing_else() {
    let refused = SecretState::Invalid(vec!["Secret ex-root key username is \"admin\"".into()]);
    for state in [off(RootUser::Missing), off(RootUser::WithRootRole), EtcdAuth::On { secret_password: false }] {
        let mut o = cluster(3, 3, true, state.clone());
        o.auth.secret = refused.clone();
        assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable, "{state:?}");
        let mut o = cluster(3, 5, true, state.clone());
        o.auth.secret = refused.clone();
        assert!(matches!(plan(&o), Step::AddLearner(_)), "{state:?}: scaling goes on");
    }
    for secret in [SecretState::Missing, SecretState::Unreadable("forbidden".into())] {
        let mut o = cluster(3, 3, true, off(RootUser::Missing));
        o.auth.secret = secret;
        assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    }
}

#[test]
fn without_spec_auth_authentication_is_left_as_it_is() {
    let mut o = running(3, 3);
    etcd(&mut o).auth = ON;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
    etcd(&mut o).auth = off(RootUser::Missing);
    assert_eq!(wait_reason(&plan(&o)), WaitReason::Stable);
}

/// Members whose pods probe readiness by reading a key (made at 3.5.0 or 3.5.1, or before
/// 3.4.16, with `spec.version` left empty) keep authentication off: their probe would fail.
#[test]
fn not_on_members_whose_readiness_probe_reads_a_key() {
    let mut o = cluster(3, 3, true, off(RootUser::WithRootRole));
    o.pods.get_mut("ex-m2").unwrap().readiness_reads_key = true;
    assert!(!matches!(plan(&o), Step::Auth(_)), "{:?}", plan(&o));
}

/// etcd refused the login, so no member's answer is known: that is reported as what it is and
/// nothing is done, even with a recovery policy and a quorum "lost" for long.
#[test]
fn a_refused_login_is_no_quorum_loss() {
    let mut o = cluster(3, 3, true, ON);
    o.etcd = None;
    o.etcd_error = Some("etcd at http://10.244.0.9:2379: authentication failed".into());
    o.auth.refused = Some("etcd refuses the operator's login as root".into());
    o.quorum_lost_secs = Some(3600);
    let spec: EtcdClusterSpec = serde_json::from_value(serde_json::json!({
        "size": 3, "version": "3.5.2", "auth": {"enabled": true, "rootSecret": "ex-root"},
        "recovery": {"quorumLoss": "FromSurvivor", "afterSeconds": 0}
    }))
    .unwrap();
    o.desired = validate("ex", &spec);
    let s = plan(&o);
    assert_eq!(wait_reason(&s), WaitReason::AuthRefused, "{s:?}");
    assert!(WaitReason::AuthRefused.needs_attention());
    // Without the refusal the same observation is a cluster no member of which answers.
    o.auth.refused = None;
    assert_eq!(wait_reason(&plan(&o)), WaitReason::NoQuorum);
    // A restored cluster whose snapshot has another root password: etcd never answered, so no
    // cluster ID was recorded; its members are not a bootstrap to repair.
    o.auth.refused = Some("etcd refuses the operator's login as root".into());
    o.ever_bootstrapped = false;
    for p in o.pods.values_mut() {
        p.bootstrap = true;
        p.age_secs = 3600;
        p.image = "quay.io/coreos/etcd:v3.5.1".into();
    }
    assert_eq!(wait_reason(&plan(&o)), WaitReason::AuthRefused);
}

//! The root Secret's rules, the policy of `spec.auth`, the condition and the upkeep decisions.

use std::collections::BTreeMap;

use super::*;
use crate::observed::{EtcdState, Observed};
use crate::planner::auth::upkeep;

fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_vec())).collect()
}

#[test]
fn a_root_secret_gives_its_password() {
    assert_eq!(root_password("s", &data(&[("password", b"hunter2")])).unwrap(), "hunter2");
    assert_eq!(root_password("s", &data(&[("username", b"root"), ("password", b"p"), ("other", b"x")])).unwrap(), "p");
    let longest = "x".repeat(MAX_PASSWORD_BYTES);
    assert_eq!(root_password("s", &data(&[("password", longest.as_bytes())])).unwrap(), longest);
}

#[test]
fn bad_root_secrets_are_refused_naming_the_secret_and_the_key() {
    let refused = |pairs: &[(&str, &[u8])]| root_password("etcd-root", &data(pairs)).unwrap_err();
    assert_eq!(refused(&[]), ["Secret etcd-root lacks key password"]);
    assert_eq!(refused(&[("password", b"")]), ["Secret etcd-root key password is empty"]);
    let e = refused(&[("password", b"hunter2\n")]);
    assert!(e[0].starts_with("Secret etcd-root key password holds a line break") && e[0].contains("echo -n"), "{e:?}");
    let e = refused(&[("password", "x".repeat(73).as_bytes())]);
    assert!(e[0].contains("key password is 73 bytes long") && e[0].contains("bcrypt"), "{e:?}");
    assert_eq!(refused(&[("password", &[0xff, 0xfe])]), ["Secret etcd-root key password is not UTF-8 text"]);
    // Every reason at once: the user fixes both in one go.
    let e = refused(&[("username", b"admin")]);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("Secret etcd-root key username is \"admin\"") && e[0].contains("root user only"), "{e:?}");
    assert_eq!(e[1], "Secret etcd-root lacks key password");
}

#[test]
fn a_backup_login_defaults_to_root_and_may_name_another_user() {
    let c = login("b", &data(&[("password", b"p")])).unwrap();
    assert_eq!((c.user.as_str(), c.secret_password()), ("root", Some("p")));
    let c = login("b", &data(&[("username", b"backup"), ("password", b"p")])).unwrap();
    assert_eq!(c.user, "backup");
    assert_eq!(login("b", &data(&[("username", b"backup")])).unwrap_err(), "Secret b lacks key password");
}

#[test]
fn credentials_never_print_a_password_and_try_the_secrets_first() {
    let c = Credentials::new(ROOT, Some("new-secret"), Some("old-secret")).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("secret") && shown.contains("<2 redacted>"), "{shown}");
    assert_eq!(c.passwords().collect::<Vec<_>>(), ["new-secret", "old-secret"]);
    assert!(!c.is_fallback(0) && c.is_fallback(1));
    // The same password twice is tried once; a refused Secret leaves the recorded one.
    let same = Credentials::new(ROOT, Some("p"), Some("p")).unwrap();
    assert_eq!(same.passwords().count(), 1);
    let only_recorded = Credentials::new(ROOT, None, Some("old")).unwrap();
    assert_eq!((only_recorded.secret_password(), only_recorded.is_fallback(0)), (None, true));
    assert!(Credentials::new(ROOT, None, None).is_none());
    assert_ne!(c.fingerprint(), same.fingerprint());
    assert!(!c.fingerprint().contains("secret"));
}

fn spec(enabled: bool, secret: &str) -> AuthPolicy {
    AuthPolicy { enabled, root_secret: secret.into() }
}

#[test]
fn the_policy_defaults_the_secret_and_refuses_what_cannot_work() {
    let v = |s: &str| Version::parse(s).unwrap();
    assert_eq!(Policy::of("ex", None, Some(&v("3.6.15"))), Ok(Policy::Unmanaged));
    assert_eq!(
        Policy::of("ex", Some(&spec(true, "")), Some(&v("3.6.15"))),
        Ok(Policy::Managed { enabled: true, root_secret: "ex-etcd-root".into() })
    );
    let e = Policy::of("ex", Some(&spec(true, "Not_A_Name")), Some(&v("3.6.15"))).unwrap_err();
    assert!(e[0].contains("\"Not_A_Name\" is not a valid Secret name"), "{e:?}");
    let e = Policy::of("ex", Some(&spec(true, "ex-etcd-root-applied")), Some(&v("3.6.15"))).unwrap_err();
    assert!(e[0].contains("operator's own record"), "{e:?}");
    // 3.5.0 and 3.5.1: their readiness probe reads a key.
    let e = Policy::of("ex", Some(&spec(true, "s")), Some(&v("3.5.1"))).unwrap_err();
    assert!(e[0].contains("not supported on etcd 3.5.1") && e[0].contains("3.5.2 or later"), "{e:?}");
    assert!(Policy::of("ex", Some(&spec(false, "s")), Some(&v("3.5.1"))).is_ok(), "turning it off works there");
    assert!(Policy::of("ex", Some(&spec(true, "s")), Some(&v("3.5.2"))).is_ok());
    assert!(Policy::of("ex", Some(&spec(true, "s")), Some(&v("3.4.0"))).is_ok());
}

#[test]
fn spec_auth_is_not_dropped_while_authentication_is_on() {
    let on = Policy::Managed { enabled: true, root_secret: "s".into() };
    let off = Policy::Managed { enabled: false, root_secret: "s".into() };
    let e = check_change(&on, &Policy::Unmanaged).unwrap_err();
    assert!(e.contains("set spec.auth.enabled to false first"), "{e}");
    assert!(check_change(&off, &Policy::Unmanaged).is_ok());
    assert!(check_change(&on, &off).is_ok());
    assert!(check_change(&Policy::Unmanaged, &on).is_ok());
}

fn observed(secret: SecretState) -> AuthObserved {
    AuthObserved { secret, ..Default::default() }
}

#[test]
fn the_condition_says_where_authentication_stands() {
    let on = Policy::Managed { enabled: true, root_secret: "s".into() };
    let c = |p: &Policy, o: AuthObserved, e: Option<EtcdAuth>| condition(p, &o, e.as_ref()).unwrap();
    let valid = || observed(SecretState::Valid);
    let x = c(&on, valid(), Some(EtcdAuth::On { secret_password: true }));
    assert_eq!((x.status.as_str(), x.reason.as_str()), ("True", "Enabled"));
    assert!(x.message.contains("Secret s"));
    assert_eq!(c(&on, valid(), Some(EtcdAuth::On { secret_password: false })).reason, "ChangingPassword");
    assert_eq!(c(&on, valid(), Some(EtcdAuth::Off { root: RootUser::Missing })).reason, "Enabling");
    assert_eq!(c(&on, observed(SecretState::Missing), None).reason, "CreatingSecret");
    let bad = observed(SecretState::Invalid(vec!["Secret s lacks key password".into()]));
    let x = c(&on, bad, Some(EtcdAuth::Off { root: RootUser::Missing }));
    assert_eq!((x.status.as_str(), x.reason.as_str()), ("False", "SecretInvalid"));
    assert!(x.message.starts_with("Secret s lacks key password;"), "{}", x.message);
    assert!(is_warning(&x));
    let refused = AuthObserved { refused: Some("etcd refuses".into()), ..valid() };
    assert_eq!(c(&on, refused.clone(), None).reason, "LoginRefused");
    assert_eq!(c(&Policy::Unmanaged, refused, None).reason, "LoginRefused", "also without spec.auth");
    let off = Policy::Managed { enabled: false, root_secret: "s".into() };
    assert_eq!(c(&off, valid(), Some(EtcdAuth::On { secret_password: true })).reason, "Disabling");
    assert_eq!(c(&off, valid(), Some(EtcdAuth::Off { root: RootUser::WithRootRole })).reason, "Disabled");
    assert!(condition(&Policy::Unmanaged, &AuthObserved::default(), Some(&EtcdAuth::Unknown)).is_none());
    assert!(!is_warning(&c(&on, valid(), Some(EtcdAuth::Off { root: RootUser::Missing }))));
}

#[test]
fn without_etcd_the_condition_stays_unless_there_is_a_problem_to_report() {
    let on = Policy::Managed { enabled: true, root_secret: "s".into() };
    let mut cs = vec![];
    update_condition(&mut cs, &on, &observed(SecretState::Valid), Some(&EtcdAuth::On { secret_password: true }), "t");
    update_condition(&mut cs, &on, &observed(SecretState::Valid), None, "t");
    assert_eq!(cs[0].reason, "Enabled", "a member not answering says nothing about authentication");
    update_condition(&mut cs, &on, &observed(SecretState::Invalid(vec!["x".into()])), None, "t");
    assert_eq!(cs[0].reason, "SecretInvalid");
    update_condition(&mut cs, &Policy::Unmanaged, &AuthObserved::default(), None, "t");
    assert!(cs.is_empty(), "spec.auth removed: the condition goes");
}

fn cluster_with(enabled: bool, secret: SecretState, applied_matches: Option<bool>, etcd: Option<EtcdAuth>) -> Observed {
    let d = crate::validation::validate(
        "ex",
        &etcd_operator_api::EtcdClusterSpec { size: 3, auth: Some(spec(enabled, "s")), ..Default::default() },
    );
    Observed {
        name: "ex".into(),
        desired: d,
        etcd: etcd.map(|auth| EtcdState { auth, ..Default::default() }),
        auth: AuthObserved { secret, applied_matches, ..Default::default() },
        ..Default::default()
    }
}

#[test]
fn a_missing_root_secret_is_created_with_the_password_etcd_has_if_known() {
    let off = Some(EtcdAuth::Off { root: RootUser::Missing });
    let o = cluster_with(true, SecretState::Missing, None, off.clone());
    assert_eq!(upkeep(&o), Some(Upkeep::CreateRootSecret { name: "s".into(), use_recorded: false }));
    // Deleted after authentication was turned on: back with the recorded password.
    let o = cluster_with(true, SecretState::Missing, Some(false), None);
    assert_eq!(upkeep(&o), Some(Upkeep::CreateRootSecret { name: "s".into(), use_recorded: true }));
    let o = cluster_with(false, SecretState::Missing, None, Some(EtcdAuth::On { secret_password: false }));
    assert!(matches!(upkeep(&o), Some(Upkeep::CreateRootSecret { .. })), "needed to turn it off");
    assert_eq!(upkeep(&cluster_with(false, SecretState::Missing, None, off)), None, "off and wanted off");
    let mut o = cluster_with(true, SecretState::Missing, None, None);
    o.paused = true;
    assert_eq!(upkeep(&o), None, "a paused cluster is not touched");
    // A refused Secret is never overwritten.
    let o = cluster_with(true, SecretState::Invalid(vec![]), None, None);
    assert_eq!(upkeep(&o), None);
}

/// The record of the password etcd has could not be read (an API error, not its absence): a
/// root Secret made now would get a random password, which `ChangeRootPassword` would then set
/// in etcd, locking out the one it has. Nothing is created; the condition says why.
#[test]
fn an_unreadable_record_is_not_taken_for_no_record() {
    let on = Some(EtcdAuth::On { secret_password: false });
    for etcd in [on, None, Some(EtcdAuth::Off { root: RootUser::Missing })] {
        let mut o = cluster_with(true, SecretState::Missing, None, etcd.clone());
        o.auth.record_unreadable =
            Some("Secret ex-etcd-root-applied (the operator's record) could not be read: 503".into());
        assert_eq!(upkeep(&o), None, "{etcd:?}");
        let p = o.desired.as_ref().unwrap().auth.clone();
        let c = condition(&p, &o.auth, o.etcd.as_ref().map(|e| &e.auth)).unwrap();
        assert_eq!((c.reason.as_str(), is_warning(&c)), ("SecretUnreadable", true));
        assert!(c.message.contains("ex-etcd-root-applied") && c.message.contains("created only once"), "{}", c.message);
    }
}

#[test]
fn a_password_being_set_is_tried_after_the_secret_and_the_record() {
    // Stopped between `user passwd` and its record: etcd has the old or the new password; the
    // Secret may have changed again meanwhile. Each is tried once, the Secret's first.
    let c = Credentials::with_pending(ROOT, Some("third"), Some("old"), Some("new")).unwrap();
    assert_eq!(c.passwords().collect::<Vec<_>>(), ["third", "old", "new"]);
    assert_eq!(c.recorded_password(), Some("old"));
    assert!(format!("{c:?}").contains("<3 redacted>"));
    let c = Credentials::with_pending(ROOT, None, None, Some("new")).unwrap();
    assert_eq!(c.passwords().collect::<Vec<_>>(), ["new"]);
    assert!(c.is_fallback(0));
    let c = Credentials::with_pending(ROOT, Some("new"), Some("old"), Some("new")).unwrap();
    assert_eq!(c.passwords().count(), 2);
    assert_ne!(c.fingerprint(), Credentials::new(ROOT, Some("new"), Some("old")).unwrap().fingerprint(), "{c:?}");
}

#[test]
fn the_password_etcd_accepted_is_recorded_once() {
    let on = Some(EtcdAuth::On { secret_password: true });
    assert_eq!(upkeep(&cluster_with(true, SecretState::Valid, None, on.clone())), Some(Upkeep::RecordApplied));
    assert_eq!(upkeep(&cluster_with(true, SecretState::Valid, Some(false), on.clone())), Some(Upkeep::RecordApplied));
    assert_eq!(upkeep(&cluster_with(true, SecretState::Valid, Some(true), on)), None);
    // Logged in with the old password only: the planner changes it first.
    let old = Some(EtcdAuth::On { secret_password: false });
    assert_eq!(upkeep(&cluster_with(true, SecretState::Valid, Some(false), old)), None);
}

#[test]
fn a_refused_login_is_explained_with_what_to_do() {
    let on = Policy::Managed { enabled: true, root_secret: "s".into() };
    let m = refusal(&on, "etcdserver: authentication failed, invalid user ID or password");
    assert!(m.contains("Secret s") && m.contains("restored from a backup"), "{m}");
    let m = refusal(&Policy::Unmanaged, "etcdserver: user name is empty");
    assert!(m.contains("spec.auth is not set") && m.contains("user name is empty"), "{m}");
}

/// The applied record, as read: an earlier cluster's (same name, another UID) holds another
/// cluster's password and counts as none; ours gives the password etcd has and one being set.
#[test]
fn a_record_of_another_cluster_counts_as_none() {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let record = |owner: &str| Secret {
        metadata: kube::api::ObjectMeta {
            owner_references: Some(vec![OwnerReference { uid: owner.into(), ..Default::default() }]),
            ..Default::default()
        },
        data: Some(
            [("password", "etcd-has"), ("pending-password", "being-set")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), k8s_openapi::ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    assert!(secrets::record_of(record("uid-0"), "ex", "uid-1").is_none(), "an earlier cluster's record");
    let ours = secrets::record_of(record("uid-1"), "ex", "uid-1").expect("ours");
    assert_eq!((ours.password.as_deref(), ours.pending.as_deref()), (Some("etcd-has"), Some("being-set")));
}

/// What the two reads mean: a record the API server did not return is said (never taken for
/// "none"), and the Secret's password is still tried.
#[test]
fn an_unreadable_record_is_reported_and_the_secrets_password_still_used() {
    let secret = Ok(Some(data(&[("password", b"from-secret")])));
    let (seen, creds) = secrets::observed("ex-root", secret, Err("timed out".into()), "ex");
    assert_eq!(seen.secret, SecretState::Valid);
    assert_eq!(seen.applied_matches, None, "nothing known of the record");
    assert_eq!(
        seen.record_unreadable.as_deref(),
        Some(
            "Secret ex-etcd-root-applied (the operator's record of the root password etcd has) could not be read: timed out"
        )
    );
    assert!(creds.is_some(), "the Secret's password logs in");
    let (seen, creds) = secrets::observed("ex-root", Err("forbidden".into()), Ok(None), "ex");
    assert_eq!((seen.secret, creds.is_none()), (SecretState::Unreadable("forbidden".into()), true));
}

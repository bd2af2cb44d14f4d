//! The certificate planner with `spec.TLS.certManager`, on the simulated world of
//! `certificates_world` with a simulated cert-manager (a CA issuer that signs into
//! `<cluster>-cm-<leaf>` Secrets when a Certificate is written or a renewal asked for). Real
//! certificates; the members' trust is checked after every write, restart and file update.

use super::certificates_world::*;
use crate::tls::auto::Leaf;
use crate::tls::auto::decision::{Decision, LeafWrite};
use crate::tls::auto::state::{CertInfo, Phase};

fn cert_id(w: &World, secret: &str, key: &str) -> crate::tls::auto::state::CertId {
    CertInfo::all_from_pem(&data(&w.secrets[secret], key)).unwrap().remove(0).id
}

/// What the members mount is what cert-manager issued, byte for byte.
fn copied(w: &World, leaf: Leaf) -> bool {
    cert_id(w, &leaf.secret("ex"), leaf.keys().cert)
        == cert_id(w, &crate::tls::cert_manager::name("ex", leaf), "tls.crt")
}

#[test]
fn a_new_cluster_asks_cert_manager_then_takes_its_ca_and_copies_its_certificates() {
    let mut w = World::with_cert_manager();
    assert_eq!(w.plan(), Decision::ApplyCertificates(Leaf::ALL.to_vec()), "the Certificates first");
    w.apply(&Decision::ApplyCertificates(Leaf::ALL.to_vec()));
    assert_eq!(
        w.plan(),
        Decision::OwnIssuedSecrets(Leaf::ALL.to_vec()),
        "cert-manager's Secrets made the cluster's (cert-manager leaves them behind)"
    );
    w.apply(&Decision::OwnIssuedSecrets(Leaf::ALL.to_vec()));
    assert_eq!(w.plan(), Decision::CreateCa, "cert-manager issued: its CA is taken");
    w.apply(&Decision::CreateCa);
    let ca = w.observed().certificates.unwrap().ca.present().unwrap().clone();
    let signing = ca.signing.unwrap();
    assert_eq!(signing.cert.id, w.cm.as_ref().unwrap().ca.cert.id, "the issuer's CA");
    assert!(signing.key.is_none(), "the CA Secret never holds the issuer's key");
    let d = w.plan();
    assert_eq!(issued(&d), Leaf::ALL, "{d:?}");
    w.apply(&d);
    for l in Leaf::ALL {
        assert!(copied(&w, l), "{l:?} is cert-manager's certificate");
    }
    assert_eq!(
        w.events,
        ["CertificatesRequested", "CertificateSecretsOwned", "CertificateAuthorityCreated", "CertificatesIssued"]
    );
    assert!(!w.plan().writes(), "{:?}", w.plan());
}

#[test]
fn nothing_is_issued_before_cert_manager_has_a_certificate_of_one_ca() {
    let mut w = World::with_cert_manager();
    w.apply(&Decision::ApplyCertificates(Leaf::ALL.to_vec()));
    w.apply(&Decision::OwnIssuedSecrets(Leaf::ALL.to_vec()));
    // cert-manager has not issued the server certificate yet.
    w.secrets.remove(&crate::tls::cert_manager::name("ex", Leaf::Server));
    let d = w.plan();
    assert!(waiting(&d, "Issuing", "server: no certificate in its Secret yet"), "{d:?}");
}

#[test]
fn without_cert_manager_on_the_api_server_nothing_changes_and_the_reason_is_given() {
    let mut w = World::with_cert_manager();
    w.cm.as_mut().unwrap().absent = true;
    let d = w.plan();
    assert!(
        matches!(&d, Decision::Blocked(m) if m.contains("serves no cert-manager.io/v1 Certificate") && m.contains("nothing was changed")),
        "{d:?}"
    );
    assert!(!d.writes());
    let c = crate::status::tls_auto::condition(&d).unwrap();
    assert!(crate::status::tls_auto::is_warning(&c), "a warning: {c:?}");
}

#[test]
fn a_certificate_someone_else_owns_is_never_overwritten() {
    let mut w = World::running_with_cert_manager();
    w.cm.as_mut().unwrap().certificates.get_mut(&Leaf::Peer).unwrap()["metadata"]["ownerReferences"] =
        serde_json::json!([{"uid": "someone-else"}]);
    let d = w.plan();
    assert!(
        matches!(&d, Decision::Blocked(m) if m.contains("Certificate ex-cm-peer exists and is not owned")),
        "{d:?}"
    );
}

#[test]
fn a_certificate_changed_by_hand_is_put_back_and_defaults_cert_manager_adds_are_no_change() {
    let mut w = World::running_with_cert_manager();
    let cm = w.cm.as_mut().unwrap();
    cm.certificates.get_mut(&Leaf::Server).unwrap()["spec"]["revisionHistoryLimit"] = serde_json::json!(1);
    assert!(!w.plan().writes(), "a field cert-manager defaults is not a difference: {:?}", w.plan());
    let cm = w.cm.as_mut().unwrap();
    cm.certificates.get_mut(&Leaf::Server).unwrap()["spec"]["dnsNames"] = serde_json::json!(["evil.example"]);
    assert_eq!(w.plan(), Decision::ApplyCertificates(vec![Leaf::Server]));
}

/// A renewal by cert-manager (same CA) is copied; nothing restarts.
#[test]
fn a_renewal_is_copied_without_restarting_members() {
    let mut w = World::running_with_cert_manager();
    let hash = w.current_hash();
    w.now += 45 * 60;
    w.cm_issue(Leaf::Peer);
    let d = w.plan();
    assert_eq!(issued(&d), [Leaf::Peer], "{d:?}");
    assert!(
        matches!(&d, Decision::WriteLeaves(ws) if matches!(&ws[0], LeafWrite::Issue { why, .. } if why.starts_with("cert-manager issued a new certificate"))),
        "{d:?}"
    );
    w.apply(&d);
    assert!(copied(&w, Leaf::Peer));
    assert_eq!(w.current_hash(), hash, "the same CA bundle: no member restarts");
    assert!(waiting(&w.plan(), "Renewing", "members still serving other certificates"), "{:?}", w.plan());
    w.kubelet_sync();
    assert!(matches!(w.plan(), Decision::Settled { .. }), "{:?}", w.plan());
}

/// The issuer's CA is replaced and cert-manager renews one certificate from it: the whole CA
/// rotation runs with `auto`'s steps, the operator asking cert-manager to renew the others.
/// No member ever distrusts another (checked after every write, restart and file update);
/// every member restarts exactly twice; at the end every member trusts only the new CA and
/// serves cert-manager's certificates.
#[test]
fn a_ca_rotated_at_the_issuer_is_brought_in_without_a_member_ever_distrusting_another() {
    for (eager, first) in [(false, Leaf::Server), (true, Leaf::Server), (false, Leaf::Peer), (true, Leaf::Peer)] {
        let mut w = World::running_with_cert_manager();
        w.events.clear();
        let old = w.signing_ca();
        let new = w.new_issuer_ca(T0 + HOUR / 2);
        w.cm.as_mut().unwrap().ca = new.clone();
        w.now += HOUR / 2;
        assert!(!w.plan().writes(), "a new issuer CA alone changes nothing: {:?}", w.plan());
        w.cm_issue(first);
        let d = w.plan();
        let secret = crate::tls::cert_manager::name("ex", first);
        assert!(
            matches!(&d, Decision::StartCaRotation { why } if why.contains(&format!("{secret} from a CA the members do not trust yet"))),
            "{d:?}"
        );
        let mut restarts = 0;
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 100, "the rotation does not finish; last decision {:?}", w.plan());
            let d = w.plan();
            if d.writes() {
                w.apply(&d);
                w.check_trust();
                if eager {
                    w.kubelet_sync();
                }
            } else if w.roll_one() {
                restarts += 1;
            } else {
                if matches!(d, Decision::Settled { .. }) && w.ca_phase() == Phase::Steady && w.signing_ca() != old {
                    break;
                }
                w.kubelet_sync();
            }
        }
        assert_eq!(w.signing_ca(), new.cert.id);
        assert_eq!(restarts, 6, "every member restarts twice (eager kubelet: {eager})");
        let mut renewals = w.cm.as_ref().unwrap().renewals.clone();
        renewals.sort();
        let others: Vec<Leaf> = Leaf::ALL.into_iter().filter(|l| *l != first).collect();
        assert_eq!(renewals, others, "the ones still of the old CA");
        for l in Leaf::ALL {
            assert!(copied(&w, l), "{l:?}");
        }
        for m in &w.members {
            assert_eq!(m.trusts_peer, [new.cert.id.clone()].into(), "{} trusts only the new CA", m.pod);
            assert_eq!(w.issuer(&m.peer_der), Some(new.cert.id.clone()));
        }
        assert!(w.events.contains(&"CertificateRenewalRequested") || w.events.contains(&"CertificatesWritten"));
    }
}

/// cert-manager's certificate of the new CA is never given to members before all of them
/// trust that CA.
#[test]
fn a_certificate_of_the_new_ca_waits_until_every_member_trusts_it() {
    let mut w = World::running_with_cert_manager();
    let new = w.new_issuer_ca(T0 + 60);
    w.cm.as_mut().unwrap().ca = new.clone();
    w.cm_issue(Leaf::Peer);
    let d = w.plan();
    w.apply(&d);
    assert_eq!(w.ca_phase(), Phase::Introducing);
    let d = w.plan();
    assert_eq!(retrusted(&d), Leaf::ALL, "bundles only: {d:?}");
    w.apply(&d);
    assert!(!copied(&w, Leaf::Peer), "members keep the old CA's certificate");
    assert!(w.roll_one() && w.roll_one());
    assert!(!w.plan().writes(), "one member still trusts only the old CA: {:?}", w.plan());
    assert!(!copied(&w, Leaf::Peer));
    assert!(w.roll_one());
    assert_eq!(w.plan(), Decision::PromoteNextCa);
}

/// An operator CA left from `spec.TLS.auto` (a cluster moved to cert-manager) is replaced by
/// the issuer's through a rotation; the reverse (back to `auto`) introduces a CA of the
/// operator's own, since the issuer's key is not the operator's.
#[test]
fn moving_between_auto_and_cert_manager_rotates_the_ca() {
    let mut w = World::running();
    let own = w.signing_ca();
    w.cluster.spec = cm_spec();
    w.cm = Some(CertManager {
        ca: w.new_issuer_ca(T0),
        certificates: Default::default(),
        absent: false,
        renewals: vec![],
        stalled: Default::default(),
    });
    assert_eq!(w.plan(), Decision::ApplyCertificates(Leaf::ALL.to_vec()));
    w.converge_writes_until(|d| matches!(d, Decision::StartCaRotation { .. }));
    let mut w2 = World::running_with_cert_manager();
    w2.cluster.spec = spec();
    w2.cm = None;
    let d = w2.plan();
    assert!(matches!(&d, Decision::StartCaRotation { why } if why.contains("has no key")), "{d:?}");
    assert_ne!(w2.signing_ca(), own);
}

/// Brings a running cluster with cert-manager to `reissuing` after the issuer's CA changed
/// (the server certificate renewed from the new CA).
fn reissuing_after_issuer_rotation(w: &mut World) -> crate::tls::auto::state::Authority {
    let new = w.new_issuer_ca(T0 + 60);
    w.cm.as_mut().unwrap().ca = new.clone();
    w.cm_issue(Leaf::Server);
    w.converge_writes();
    while w.roll_one() {}
    w.converge_writes_until(|d| matches!(d, Decision::PromoteNextCa));
    let d = w.plan();
    w.apply(&d);
    assert_eq!(w.ca_phase(), Phase::Reissuing);
    new
}

/// A renewal cert-manager does not deliver (slow, or failing) keeps the old CA in the bundles:
/// the operator's and the applications' certificates are checked by members against them, not
/// only what members serve.
#[test]
fn the_old_ca_stays_while_any_certificate_of_it_is_still_in_use() {
    let mut w = World::running_with_cert_manager();
    w.cm.as_mut().unwrap().stalled.insert(Leaf::Operator);
    reissuing_after_issuer_rotation(&mut w);
    for _ in 0..6 {
        let d = w.plan();
        assert_ne!(d, Decision::DropPreviousCa, "the operator's certificate is still of the old CA");
        if d.writes() {
            w.apply(&d);
        }
        w.kubelet_sync();
    }
    let d = w.plan();
    assert!(waiting(&d, "CARotation", "ex-tls-operator still hold(s) a certificate of the old CA"), "{d:?}");
    assert_eq!(w.cm.as_ref().unwrap().renewals.iter().filter(|l| **l == Leaf::Operator).count(), 1, "asked once");
    // cert-manager delivers: the rotation goes on.
    w.cm_issue(Leaf::Operator);
    w.converge_writes_until(|d| matches!(d, Decision::DropPreviousCa));
}

/// A Certificate whose last issue failed is not asked again (cert-manager's backoff rules).
#[test]
fn a_failed_issue_is_not_asked_again() {
    let mut w = World::running_with_cert_manager();
    w.cm.as_mut().unwrap().stalled.extend([Leaf::Peer, Leaf::Operator, Leaf::Client]);
    reissuing_after_issuer_rotation(&mut w);
    let cm = w.cm.as_mut().unwrap();
    cm.renewals.clear();
    for l in [Leaf::Peer, Leaf::Operator, Leaf::Client] {
        cm.certificates.get_mut(&l).unwrap()["status"] = serde_json::json!({"conditions": [{"type": "Ready", "status": "False", "message": "issuer down"},
                {"type": "Issuing", "status": "False"}], "failedIssuanceAttempts": 2});
    }
    for _ in 0..4 {
        let d = w.plan();
        assert_ne!(d, Decision::DropPreviousCa);
        if d.writes() {
            w.apply(&d);
        }
        w.kubelet_sync();
    }
    assert!(w.cm.as_ref().unwrap().renewals.is_empty(), "{:?}", w.cm.as_ref().unwrap().renewals);
    assert!(waiting(&w.plan(), "CARotation", "issuer down"), "cert-manager's reason is given: {:?}", w.plan());
}

/// The issuer's CA changes again while a rotation is under way: a renewal would only bring a
/// certificate of yet another CA, so none is asked for.
#[test]
fn an_issuer_that_moves_again_mid_rotation_gets_no_renewal_loop() {
    let mut w = World::running_with_cert_manager();
    w.cm.as_mut().unwrap().stalled.extend([Leaf::Peer, Leaf::Operator, Leaf::Client]);
    reissuing_after_issuer_rotation(&mut w);
    let third = w.new_issuer_ca(T0 + 120);
    w.cm.as_mut().unwrap().ca = third;
    w.cm.as_mut().unwrap().stalled.clear();
    for l in [Leaf::Peer, Leaf::Operator, Leaf::Client] {
        w.cm.as_mut().unwrap().certificates.get_mut(&l).unwrap()["status"] =
            serde_json::json!({"conditions": [{"type": "Ready", "status": "True"}]});
        w.cm_issue(l);
    }
    w.cm.as_mut().unwrap().renewals.clear();
    for _ in 0..3 {
        let d = w.plan();
        assert!(
            !matches!(&d, Decision::WriteLeaves(ws) if ws.iter().any(|x| matches!(x, LeafWrite::Renew { .. }))),
            "{d:?}"
        );
        assert_ne!(d, Decision::DropPreviousCa);
        if d.writes() {
            w.apply(&d);
        }
    }
}

/// Under `auto`, a CA rotation whose CA has no key (left from cert-manager) cannot go on: the
/// operator says so instead of waiting forever.
#[test]
fn auto_mid_rotation_with_a_keyless_ca_is_blocked_with_the_reason() {
    let mut w = World::running_with_cert_manager();
    reissuing_after_issuer_rotation(&mut w);
    w.cluster.spec = spec();
    w.cm = None;
    let d = w.plan();
    assert!(matches!(&d, Decision::Blocked(m) if m.contains("a CA whose key it does not hold")), "{d:?}");
}

/// The owner reference on cert-manager's Secrets is not a controller reference (cert-manager
/// may hold that one; the API server allows one).
#[test]
fn cert_managers_secrets_get_a_plain_owner_reference() {
    let w = World::with_cert_manager();
    let r = crate::tls::cert_manager::issued_secret_owner(&w.cluster);
    assert_eq!((r.controller, r.uid.as_str(), r.kind.as_str()), (None, "uid-1", "EtcdCluster"));
}

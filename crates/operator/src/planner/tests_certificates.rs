//! Table tests of the certificate planner, on a small simulated world (`rotation_world`): the
//! API's Secrets (the only state the planner has: every plan is made from a fresh read, as after
//! an operator restart), and three etcd members that load their trusted CAs when they start and
//! serve whatever certificate files the kubelet last gave them. Real certificates throughout.

use super::certificates::plan;
use super::certificates_world::*;
use crate::tls::auto::Leaf;
use crate::tls::auto::decision::{Decision, LeafWrite};
use crate::tls::auto::state::Phase;

#[test]
fn a_new_cluster_gets_a_ca_then_its_four_certificates() {
    let mut w = World::new();
    assert_eq!(w.plan(), Decision::CreateCa, "no member pod: nothing trusts any CA yet");
    let d = Decision::CreateCa;
    w.apply(&d);
    let d = w.plan();
    assert_eq!(issued(&d), Leaf::ALL, "{d:?}");
    w.apply(&d);
    assert_eq!(w.events, ["CertificateAuthorityCreated", "CertificatesIssued"]);
    assert!(!w.plan().writes(), "{:?}", w.plan());
    // The client Secret has the static client layout, with the CA bundle.
    let s = w.secret(Leaf::Client);
    assert!(!data(s, "etcd-client.key").is_empty() && !data(s, "etcd-client-ca.crt").is_empty());
}

#[test]
fn steady_and_served_is_settled() {
    let w = World::running();
    let d = w.plan();
    assert!(
        matches!(&d, Decision::Settled { message } if message.contains("every member serves the current certificates")),
        "{d:?}"
    );
}

#[test]
fn certificates_are_renewed_at_two_thirds_of_their_life_without_restarts() {
    let mut w = World::running();
    // Valid 1h from T0, renewed 20m before the end: at T0 + 40m.
    w.now = T0 + 40 * 60 - 1;
    assert!(!w.plan().writes(), "not due yet: {:?}", w.plan());
    w.now = T0 + 40 * 60;
    let d = w.plan();
    assert_eq!(issued(&d), Leaf::ALL, "{d:?}");
    assert!(
        matches!(&d, Decision::WriteLeaves(ws) if matches!(&ws[0], LeafWrite::Issue { why, .. } if why.starts_with("renewal")))
    );
    let hash = w.current_hash();
    w.apply(&d);
    assert_eq!(w.current_hash(), hash, "the same CA bundle: no member restarts");
    // Until the kubelet brings the new files, members serve the old certificates.
    let d = w.plan();
    assert!(waiting(&d, "Renewing", "members still serving other certificates"), "{d:?}");
    w.kubelet_sync();
    assert!(matches!(w.plan(), Decision::Settled { .. }), "{:?}", w.plan());
}

#[test]
fn a_shorter_validity_renews_at_once_and_a_broken_secret_is_issued_again() {
    let mut w = World::running();
    if let Some(a) = w.cluster.spec.tls.as_mut().and_then(|t| t.auto.as_mut()) {
        a.validity = "30m".into();
        a.renew_before = "10m".into();
    }
    let d = w.plan();
    assert_eq!(issued(&d), Leaf::ALL, "valid 1h, but 30m is all the spec allows now: {d:?}");

    let mut w = World::running();
    let name = Leaf::Server.secret("ex");
    w.secrets.get_mut(&name).unwrap().data.as_mut().unwrap().remove("server.key");
    let d = w.plan();
    assert_eq!(issued(&d), [Leaf::Server], "{d:?}");
    assert!(
        matches!(&d, Decision::WriteLeaves(ws) if matches!(&ws[0], LeafWrite::Issue { why, .. } if why.contains("lacks key server.key")))
    );
    w.secrets.remove(&name);
    assert_eq!(issued(&w.plan()), [Leaf::Server], "a deleted Secret is issued again");
}

#[test]
fn a_ca_rotation_starts_when_due_or_asked_and_only_on_a_settled_cluster() {
    // CA valid 10h, renewed with a third left: at T0 + 6h40m.
    let mut w = World::running();
    w.now = T0 + 6 * HOUR + 39 * 60;
    w.converge_writes(); // certificates renewed meanwhile
    w.kubelet_sync();
    assert!(!matches!(w.plan(), Decision::StartCaRotation { .. }), "{:?}", w.plan());
    w.now = T0 + 6 * HOUR + 40 * 60;
    assert!(matches!(w.plan(), Decision::StartCaRotation { why } if why.contains("the CA expires at")));

    let mut w = World::running();
    w.cluster.metadata.annotations =
        Some([(crate::tls::auto::ROTATE_CA_ANNOTATION.to_string(), "now".to_string())].into());
    assert!(matches!(w.plan(), Decision::StartCaRotation { why } if why.contains("rotate-ca=now")));
    w.paused = true;
    assert!(waiting(&w.plan(), "CARotationDue", "spec.paused"), "{:?}", w.plan());
    w.paused = false;
    w.members[1].healthy = false;
    assert!(waiting(&w.plan(), "CARotationDue", "member ex-m2 is not healthy"), "{:?}", w.plan());
    w.members[1].healthy = true;
    let d = w.plan();
    w.apply(&d);
    assert_eq!(w.ca_phase(), Phase::Introducing);
    // The value is handled once: after the rotation the same annotation starts nothing.
    let done = w.observed().certificates.unwrap().ca.present().unwrap().rotated_for.clone();
    assert_eq!(done.as_deref(), Some("now"));
}

/// Phase 1: the new CA joins every bundle first (no certificate of it is served yet), then
/// members restart one at a time; the planner moves on only when all have, and all are
/// healthy.
#[test]
fn ca_rotation_phase_1_bundles_first_and_waits_for_every_member_to_restart() {
    let mut w = World::running();
    let old_ca = w.signing_ca();
    w.apply(&Decision::StartCaRotation { why: "test".into() });
    let d = w.plan();
    assert_eq!(retrusted(&d), Leaf::ALL, "bundles first, certificates kept: {d:?}");
    w.apply(&d);
    assert_eq!(w.signing_ca(), old_ca, "the old CA still signs");
    let d = w.plan();
    assert!(waiting(&d, "CARotation", "0 of 3 members restarted; still to go: ex-m1, ex-m2, ex-m3"), "{d:?}");
    assert!(w.roll_one() && w.roll_one());
    assert!(waiting(&w.plan(), "CARotation", "2 of 3 members restarted; still to go: ex-m3"), "{:?}", w.plan());
    // The member that restarted last is not healthy yet: nothing moves on.
    assert!(w.roll_one());
    w.members[2].healthy = false;
    assert!(waiting(&w.plan(), "CARotation", "member ex-m3 is not healthy"), "{:?}", w.plan());
    w.members[2].healthy = true;
    assert_eq!(w.plan(), Decision::PromoteNextCa);
}

/// Phase 2: the new CA signs; every certificate is issued again from it (no restart); the old
/// CA stays in the bundles until every member serves the new certificates on both ports.
#[test]
fn ca_rotation_phase_2_reissues_and_waits_until_every_member_serves_the_new_ca() {
    let mut w = World::running();
    w.apply(&Decision::StartCaRotation { why: "test".into() });
    w.converge_writes();
    while w.roll_one() {}
    let hash = w.current_hash();
    w.apply(&Decision::PromoteNextCa);
    assert_eq!(w.ca_phase(), Phase::Reissuing);
    let d = w.plan();
    assert_eq!(issued(&d), Leaf::ALL, "{d:?}");
    assert!(
        matches!(&d, Decision::WriteLeaves(ws) if matches!(&ws[0], LeafWrite::Issue { why, .. } if why == "issued again by the new CA"))
    );
    w.apply(&d);
    assert_eq!(w.current_hash(), hash, "the bundle did not change: no restart");
    assert!(waiting(&w.plan(), "CARotation", "ex-m1 (client port: a certificate of the old CA)"), "{:?}", w.plan());
    // The kubelet brings the new files to every member.
    w.kubelet_sync();
    assert_eq!(w.plan(), Decision::DropPreviousCa);
}

/// The peer port is checked as well as the client port.
#[test]
fn a_member_still_serving_the_old_ca_to_peers_holds_the_drop() {
    let mut w = World::running();
    let old_peer = w.members[0].peer_der.clone();
    w.apply(&Decision::StartCaRotation { why: "test".into() });
    w.converge_writes();
    while w.roll_one() {}
    w.apply(&Decision::PromoteNextCa);
    w.converge_writes();
    w.kubelet_sync();
    w.members[2].peer_der = old_peer;
    assert!(waiting(&w.plan(), "CARotation", "ex-m3 (peer port: a certificate of the old CA)"), "{:?}", w.plan());
}

/// Phase 3: the old CA leaves the bundles, members restart one at a time, then it is over.
#[test]
fn ca_rotation_phase_3_drops_the_old_ca_then_finishes_after_the_restarts() {
    let mut w = World::running();
    w.apply(&Decision::StartCaRotation { why: "test".into() });
    w.converge_writes();
    while w.roll_one() {}
    w.apply(&Decision::PromoteNextCa);
    w.converge_writes();
    w.kubelet_sync();
    w.apply(&Decision::DropPreviousCa);
    assert_eq!(w.ca_phase(), Phase::Dropping);
    let d = w.plan();
    assert_eq!(retrusted(&d), Leaf::ALL, "{d:?}");
    w.apply(&d);
    assert!(waiting(&w.plan(), "CARotation", "3/3"), "{:?}", w.plan());
    assert!(w.roll_one());
    assert!(waiting(&w.plan(), "CARotation", "1 of 3 members restarted"), "{:?}", w.plan());
    while w.roll_one() {}
    assert_eq!(w.plan(), Decision::FinishCaRotation);
    w.apply(&Decision::FinishCaRotation);
    assert_eq!(w.ca_phase(), Phase::Steady);
    assert!(matches!(w.plan(), Decision::Settled { .. }), "{:?}", w.plan());
    for m in &w.members {
        assert_eq!(m.trusts_peer, [w.signing_ca()].into(), "{} trusts only the new CA", m.pod);
    }
}

/// The whole rotation, the planner against the simulated members, with the kubelet either
/// slow (files updated only when nothing else happens) or eager (right after every write):
/// no member ever distrusts another (checked after every write, restart and file update), and
/// it ends with every member on the new CA only.
#[test]
fn a_whole_ca_rotation_never_leaves_a_member_distrusting_another() {
    for eager in [false, true] {
        let mut w = World::running();
        w.events.clear();
        let old = w.signing_ca();
        w.cluster.metadata.annotations =
            Some([(crate::tls::auto::ROTATE_CA_ANNOTATION.to_string(), "1".to_string())].into());
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
            } else if !w.roll_one() {
                if matches!(d, Decision::Settled { .. }) && w.ca_phase() == Phase::Steady && w.signing_ca() != old {
                    break;
                }
                w.kubelet_sync();
            }
        }
        assert_eq!(
            w.events,
            [
                "CARotationStarted",
                "CertificatesWritten",
                "CARotationReissuing",
                "CertificatesWritten",
                "CARotationDroppingOldCA",
                "CertificatesWritten",
                "CARotationFinished"
            ],
            "eager kubelet: {eager}"
        );
        for m in &w.members {
            assert_eq!(m.trusts_peer, [w.signing_ca()].into());
            assert_eq!(w.issuer(&m.peer_der), Some(w.signing_ca()));
        }
    }
}

/// The planner keeps no memory: an operator restarted in the middle of a rotation (a new
/// process reading the Secrets as the API returns them) makes the same decisions and finishes.
#[test]
fn an_operator_restarted_mid_rotation_resumes_from_the_secrets() {
    let mut w = World::running();
    w.apply(&Decision::StartCaRotation { why: "test".into() });
    w.converge_writes();
    w.roll_one();
    let before = w.plan();
    // A new operator: the Secrets through JSON, as a GET returns them; nothing else is kept.
    w.secrets = w
        .secrets
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::from_value(serde_json::to_value(v).unwrap()).unwrap()))
        .collect();
    assert_eq!(w.plan(), before);
    while w.roll_one() {}
    assert_eq!(w.plan(), Decision::PromoteNextCa, "the rotation carries on where it was");
}

#[test]
fn a_lost_ca_secret_is_replaced_beside_the_old_trust_and_never_breaks_members() {
    let mut w = World::running();
    let old = w.signing_ca();
    w.secrets.remove(&crate::tls::auto::ca_secret("ex"));
    let d = w.plan();
    assert!(matches!(&d, Decision::ReplaceLostCa { trusted } if trusted.len() == 1 && trusted[0].id == old), "{d:?}");
    w.apply(&d);
    assert_eq!(w.ca_phase(), Phase::Introducing);
    // From here it is an ordinary rotation, run to the end.
    for _ in 0..60 {
        let d = w.plan();
        if d.writes() {
            w.apply(&d);
        } else if !w.roll_one() {
            w.kubelet_sync();
        }
    }
    assert_eq!(w.ca_phase(), Phase::Steady);
    assert_ne!(w.signing_ca(), old);
    assert!(matches!(w.plan(), Decision::Settled { .. }), "{:?}", w.plan());
}

#[test]
fn a_lost_ca_is_never_made_anew_from_a_pod_cache_that_shows_no_member() {
    // The CA Secret is gone and the pod cache shows no pod (stale, or every pod lost) of a
    // cluster that formed: the members may trust the old CA. Never a fresh CA, which would
    // reissue every certificate from a CA they do not trust: a rotation beside the old one.
    let mut w = World::running();
    let old = w.signing_ca();
    w.secrets.remove(&crate::tls::auto::ca_secret("ex"));
    let mut o = w.observed();
    o.pods.clear();
    let d = plan(&o);
    assert!(matches!(&d, Decision::ReplaceLostCa { trusted } if trusted[0].id == old), "{d:?}");
    // Volumes of members and no cluster ID yet (a bootstrap that never formed): the same.
    o.ever_bootstrapped = false;
    o.pvcs.insert("ex-m1".into(), Default::default());
    assert!(matches!(plan(&o), Decision::ReplaceLostCa { .. }), "{:?}", plan(&o));
    // Nothing kept at all, no pod in sight: a new CA, once the API server's own pod list shows
    // no member mounting a certificate (the controller asks it right before).
    w.secrets.clear();
    let mut o = w.observed();
    o.pods.clear();
    assert_eq!(plan(&o), Decision::CreateCa);
    let mounted = crate::tls::transition::Stage::steady(&crate::tls::auto::policy("ex")).pod(true);
    assert!(!super::certificates::nothing_trusts_a_ca([&mounted, &Default::default()]));
    assert!(super::certificates::nothing_trusts_a_ca([&Default::default()]));
    // A new cluster: no pod, no volume, never formed.
    assert_eq!(World::new().plan(), Decision::CreateCa);
}

#[test]
fn secrets_that_are_not_ours_or_unusable_block_with_the_reason() {
    let mut w = World::running();
    w.secrets.get_mut(&Leaf::Client.secret("ex")).unwrap().metadata.owner_references = None;
    let d = w.plan();
    assert!(
        matches!(&d, Decision::Blocked(m) if m.contains("Secret ex-tls-client exists and is not owned by EtcdCluster ex")),
        "{d:?}"
    );
    let mut w = World::running();
    let ca = w.secrets.get_mut(&crate::tls::auto::ca_secret("ex")).unwrap();
    ca.data.as_mut().unwrap().insert("ca.crt".into(), k8s_openapi::ByteString(b"junk".to_vec()));
    assert!(matches!(w.plan(), Decision::Blocked(m) if m.contains("Secret ex-tls-ca key ca.crt")), "{:?}", w.plan());
    // Everything gone while members run: nobody can say what they trust.
    let mut w = World::running();
    w.secrets.clear();
    assert!(
        matches!(w.plan(), Decision::Blocked(m) if m.contains("cannot know which CA they trust")),
        "{:?}",
        w.plan()
    );
    // Members that mount no certificate (a plaintext cluster turning auto TLS on) trust none:
    // a CA is made, then the certificates, and `tls::transition` moves the members onto them.
    w.plaintext_members = true;
    assert_eq!(w.plan(), Decision::CreateCa);
}

#[test]
fn turned_off_while_members_still_use_them_certificates_are_renewed_and_no_ca_is_touched() {
    let mut w = World::running();
    w.cluster.spec.tls.as_mut().unwrap().auto.as_mut().unwrap().renew_before = "10m".into();
    let o = w.observed_turning_off();
    // The spec's settings are gone: the certificates' own lifetime (1h), renewed with a third left.
    let c = o.certificates.as_ref().unwrap();
    assert_eq!((c.settings.validity, c.settings.renew_before), (HOUR, 20 * 60));
    assert!(waiting(&plan(&o), "TurningOff", "members are moving off TLS"), "{:?}", plan(&o));
    // A turn-off that takes long (a member that does not come back): renewed when due, as before.
    w.now = T0 + 40 * 60;
    let o = w.observed_turning_off();
    let d = plan(&o);
    assert_eq!(issued(&d), Leaf::ALL, "{d:?}");
    let hash = w.current_hash();
    w.apply(&d);
    assert_eq!(w.current_hash(), hash, "the same CA bundle: no member restarts");
    assert!(!plan(&w.observed_turning_off()).writes());
    // Never a CA rotation, even when one is due or asked for.
    w.now = T0 + 7 * HOUR;
    w.cluster.metadata.annotations =
        Some([(crate::tls::auto::ROTATE_CA_ANNOTATION.to_string(), "now".to_string())].into());
    let d = plan(&w.observed_turning_off());
    assert!(matches!(&d, Decision::WriteLeaves(_)), "only renewals: {d:?}");
    w.apply(&d);
    assert!(matches!(plan(&w.observed_turning_off()), Decision::Wait { reason: "TurningOff", .. }));
    // Nor a new CA for a lost one: members trust the old one; a person is told once it matters.
    w.secrets.remove(&crate::tls::auto::ca_secret("ex"));
    assert!(waiting(&plan(&w.observed_turning_off()), "TurningOff", "holds no CA that can sign"));
    w.now += HOUR;
    let d = plan(&w.observed_turning_off());
    assert!(matches!(&d, Decision::Blocked(m) if m.contains("expires at")), "{d:?}");
}

#[test]
fn the_condition_follows_the_decision() {
    use crate::status::tls_auto::{CERTIFICATES_READY, condition, is_warning};
    let w = World::running();
    let c = condition(&w.plan()).unwrap();
    assert_eq!((c.type_.as_str(), c.status.as_str(), c.reason.as_str()), (CERTIFICATES_READY, "True", "Current"));
    let c = condition(&Decision::Blocked("x".into())).unwrap();
    assert!(is_warning(&c));
    assert!(condition(&Decision::Off).is_none());
}

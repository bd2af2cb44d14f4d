//! Table tests of the certificate planner, on a small simulated world: the API's Secrets (the
//! only state the planner has: every plan is made from a fresh read, as after an operator
//! restart), and three etcd members that load their trusted CAs when they start and serve
//! whatever certificate files the kubelet last gave them. Real certificates throughout.

use std::collections::{BTreeMap, BTreeSet};

use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::cluster::{AutoTls, TlsPolicy};
use k8s_openapi::api::core::v1::Secret;

use super::Leaf;
use super::read::observation;
use super::rotation::{Decision, LeafWrite, plan};
use super::secrets::for_decision;
use super::state::{CertId, CertInfo, Phase, Served, issuer_among};
use crate::observed::{EtcdState, MemberState, MemberStatus, Observed, PodState};
use crate::validation::validate;

/// Issue time of the first material.
const T0: i64 = 1_900_000_000;
const HOUR: i64 = 3600;

/// One etcd member as it runs.
#[derive(Clone, Debug)]
struct Member {
    pod: String,
    /// The pod-spec hash its pod was made with.
    hash: String,
    healthy: bool,
    /// CAs etcd loaded when it started: `--peer-trusted-ca-file`, `--trusted-ca-file`.
    trusts_peer: BTreeSet<CertId>,
    trusts_clients: BTreeSet<CertId>,
    /// The certificate files the kubelet last brought (etcd serves them at every handshake).
    peer_der: Vec<u8>,
    server_der: Vec<u8>,
}

struct World {
    cluster: etcd_operator_api::EtcdCluster,
    /// The API: Secrets by name.
    secrets: BTreeMap<String, Secret>,
    next_rv: u64,
    now: i64,
    members: Vec<Member>,
    paused: bool,
    /// Every CA certificate ever made (to name who issued what).
    cas: Vec<CertInfo>,
    /// Events, in order.
    events: Vec<&'static str>,
    /// The members run without TLS (a plaintext cluster whose spec just turned auto TLS on).
    plaintext_members: bool,
}

fn spec() -> EtcdClusterSpec {
    EtcdClusterSpec {
        size: 3,
        tls: Some(TlsPolicy {
            auto: Some(AutoTls { validity: "1h".into(), renew_before: "20m".into(), ca_validity: "10h".into() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn data(s: &Secret, key: &str) -> Vec<u8> {
    s.data.as_ref().and_then(|d| d.get(key)).map(|v| v.0.clone()).unwrap_or_default()
}

fn der_of(pem: &[u8]) -> Vec<u8> {
    CertInfo::all_from_pem(pem).map(|mut v| v.remove(0).der).unwrap_or_default()
}

impl World {
    fn new() -> World {
        let mut cluster = etcd_operator_api::EtcdCluster::new("ex", spec());
        cluster.metadata.namespace = Some("ns".into());
        cluster.metadata.uid = Some("uid-1".into());
        World {
            cluster,
            secrets: BTreeMap::new(),
            next_rv: 1,
            now: T0,
            members: vec![],
            paused: false,
            cas: vec![],
            events: vec![],
            plaintext_members: false,
        }
    }

    /// A running cluster: CA and certificates issued at `T0`, three members started with them.
    fn running() -> World {
        let mut w = World::new();
        w.converge_writes();
        for i in 1..=3 {
            w.members.push(Member {
                pod: format!("ex-m{i}"),
                hash: String::new(),
                healthy: true,
                trusts_peer: BTreeSet::new(),
                trusts_clients: BTreeSet::new(),
                peer_der: vec![],
                server_der: vec![],
            });
            w.restart(i - 1);
        }
        w
    }

    fn secret(&self, leaf: Leaf) -> &Secret {
        &self.secrets[&leaf.secret("ex")]
    }

    fn observed(&self) -> Observed {
        let mut d = validate("ex", &self.cluster.spec).unwrap();
        let fetched = self.secrets.iter().map(|(k, v)| (k.clone(), Ok(Some(v.clone())))).collect();
        let mut c = observation(&self.cluster, d.tls_auto.unwrap(), "", self.now, &fetched);
        for m in &self.members {
            let served = Served { client: c.served_cert(&m.server_der), peer: c.served_cert(&m.peer_der) };
            c.served.insert(m.pod.clone(), served);
        }
        d.tls_trust = c.trust_fingerprint();
        let mut o = Observed {
            name: "ex".into(),
            namespace: "ns".into(),
            desired: Ok(d),
            paused: self.paused,
            services_ready: true,
            ever_bootstrapped: !self.members.is_empty(),
            certificates: Some(c),
            ..Default::default()
        };
        let mut etcd = EtcdState { cluster_id: 42, leader: Some(1), ..Default::default() };
        // Members mount the certificate Secrets (unless the test made them plaintext).
        let mounts = crate::tls::transition::Stage::steady(&o.desired.as_ref().unwrap().tls).pod(true);
        for (i, m) in self.members.iter().enumerate() {
            let pod = PodState {
                name: m.pod.clone(),
                ip: Some(format!("10.0.0.{i}")),
                phase: "Running".into(),
                ready: m.healthy,
                spec_hash: Some(m.hash.clone()),
                tls: if self.plaintext_members { Default::default() } else { mounts.clone() },
                ..Default::default()
            };
            o.pods.insert(m.pod.clone(), pod);
            etcd.members.push(MemberState {
                id: i as u64 + 1,
                name: m.pod.clone(),
                pod: m.pod.clone(),
                status: m.healthy.then(|| MemberStatus { leader: 1, ..Default::default() }),
                ..Default::default()
            });
        }
        if !self.members.is_empty() {
            o.etcd = Some(etcd);
        }
        o
    }

    fn plan(&self) -> Decision {
        plan(&self.observed())
    }

    /// As `observed`, after `spec.TLS.auto` was turned off while the members still mount its
    /// Secrets (`InUse::Leaving`: the observation `observe` then makes).
    fn observed_turning_off(&self) -> Observed {
        let mut o = self.observed();
        let fetched = self.secrets.iter().map(|(k, v)| (k.clone(), Ok(Some(v.clone())))).collect();
        let mut off = self.cluster.clone();
        off.spec.tls = None;
        let d = o.desired.as_mut().unwrap();
        let stage = crate::tls::transition::Stage { client_http_too: true, ..d.tls_stage.clone() };
        *d = validate("ex", &off.spec).unwrap();
        d.tls_stage = stage;
        assert_eq!(super::in_use(d, "ex"), Some(super::InUse::Leaving));
        o.certificates = Some(observation(&off, super::Settings::default(), "", self.now, &fetched).leaving());
        o
    }

    fn current_hash(&self) -> String {
        self.observed().desired.unwrap().pod_hash()
    }

    /// Carries out a writing decision as the controller does: the same Secrets, created or
    /// replaced at the version read.
    fn apply(&mut self, d: &Decision) {
        let o = self.observed();
        let w = for_decision(&self.cluster, o.certificates.as_ref().unwrap(), d).unwrap();
        self.events.push(w.reason);
        for mut s in w.secrets {
            let name = s.metadata.name.clone().unwrap();
            let have = self.secrets.get(&name).and_then(|s| s.metadata.resource_version.clone());
            assert_eq!(s.metadata.resource_version, have, "{name} is written at the version read");
            s.metadata.resource_version = Some(self.next_rv.to_string());
            self.next_rv += 1;
            if let Some(pem) = s.data.as_ref().and_then(|d| d.get(super::CA_CERT).or(d.get(super::NEXT_CA_CERT))) {
                for c in CertInfo::all_from_pem(&pem.0).unwrap() {
                    if !self.cas.iter().any(|x| x.id == c.id) {
                        self.cas.push(c);
                    }
                }
            }
            self.secrets.insert(name, s);
        }
    }

    /// Plans and writes until the planner asks for nothing more (no restart, no time passes).
    fn converge_writes(&mut self) -> Decision {
        for _ in 0..10 {
            let d = self.plan();
            if !d.writes() {
                return d;
            }
            self.apply(&d);
            self.check_trust();
        }
        panic!("the planner keeps writing");
    }

    /// The kubelet brings every member the Secrets as they are now.
    fn kubelet_sync(&mut self) {
        for i in 0..self.members.len() {
            self.members[i].peer_der = der_of(&data(self.secret(Leaf::Peer), "peer.crt"));
            self.members[i].server_der = der_of(&data(self.secret(Leaf::Server), "server.crt"));
        }
        self.check_trust();
    }

    /// Member `i`'s pod is made again from the current spec: etcd loads the bundles of now.
    fn restart(&mut self, i: usize) {
        let ids = |pem: Vec<u8>| -> BTreeSet<CertId> {
            CertInfo::all_from_pem(&pem).unwrap().into_iter().map(|c| c.id).collect()
        };
        let hash = self.current_hash();
        let (peer, server) = (self.secret(Leaf::Peer).clone(), self.secret(Leaf::Server).clone());
        let m = &mut self.members[i];
        m.hash = hash;
        m.trusts_peer = ids(data(&peer, "peer-ca.crt"));
        m.trusts_clients = ids(data(&server, "server-ca.crt"));
        m.peer_der = der_of(&data(&peer, "peer.crt"));
        m.server_der = der_of(&data(&server, "server.crt"));
        self.check_trust();
    }

    /// The rollout planner's part: one outdated member restarts, only while all are healthy.
    fn roll_one(&mut self) -> bool {
        if self.paused || self.members.iter().any(|m| !m.healthy) {
            return false;
        }
        let hash = self.current_hash();
        match self.members.iter().position(|m| m.hash != hash) {
            Some(i) => {
                self.restart(i);
                true
            }
            None => false,
        }
    }

    fn issuer(&self, der: &[u8]) -> Option<CertId> {
        issuer_among(der, &self.cas.iter().collect::<Vec<_>>())
    }

    /// No member ever distrusts another, and the operator can always talk to every member:
    /// each member's peer certificate is issued by a CA every member loaded for peers; the
    /// operator's certificate by a CA every member loaded for clients; each member's server
    /// certificate by a CA in the operator's bundle (which it reads afresh every time).
    fn check_trust(&self) {
        let Some(op) = self.secrets.get(&Leaf::Operator.secret("ex")) else { return };
        let op_cert = self.issuer(&der_of(&data(op, "etcd-client.crt")));
        let op_trust: BTreeSet<CertId> = CertInfo::all_from_pem(&data(op, "etcd-client-ca.crt"))
            .map(|v| v.into_iter().map(|c| c.id).collect())
            .unwrap_or_default();
        for a in &self.members {
            for b in &self.members {
                let by = self.issuer(&b.peer_der);
                assert!(
                    by.as_ref().is_some_and(|i| a.trusts_peer.contains(i)),
                    "{} distrusts {}'s peer certificate",
                    a.pod,
                    b.pod
                );
            }
            assert!(op_cert.as_ref().is_some_and(|i| a.trusts_clients.contains(i)), "{} refuses the operator", a.pod);
            let by = self.issuer(&a.server_der);
            assert!(by.as_ref().is_some_and(|i| op_trust.contains(i)), "the operator distrusts {}", a.pod);
        }
    }

    fn ca_phase(&self) -> Phase {
        let o = self.observed();
        o.certificates.unwrap().ca.present().unwrap().phase
    }

    fn signing_ca(&self) -> CertId {
        let o = self.observed();
        o.certificates.unwrap().ca.present().unwrap().signing.clone().unwrap().cert.id
    }
}

fn issued(d: &Decision) -> Vec<Leaf> {
    match d {
        Decision::WriteLeaves(ws) => ws
            .iter()
            .filter_map(|w| match w {
                LeafWrite::Issue { leaf, .. } => Some(*leaf),
                LeafWrite::Retrust { .. } => None,
            })
            .collect(),
        _ => vec![],
    }
}

fn retrusted(d: &Decision) -> Vec<Leaf> {
    match d {
        Decision::WriteLeaves(ws) => {
            ws.iter().filter(|w| matches!(w, LeafWrite::Retrust { .. })).map(|w| w.leaf()).collect()
        }
        _ => vec![],
    }
}

fn waiting(d: &Decision, reason: &str, text: &str) -> bool {
    matches!(d, Decision::Wait { reason: r, message } if *r == reason && message.contains(text))
}

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
    w.cluster.metadata.annotations = Some([(super::ROTATE_CA_ANNOTATION.to_string(), "now".to_string())].into());
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
        w.cluster.metadata.annotations = Some([(super::ROTATE_CA_ANNOTATION.to_string(), "1".to_string())].into());
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
    w.secrets.remove(&super::ca_secret("ex"));
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
    w.secrets.remove(&super::ca_secret("ex"));
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
    let mounted = crate::tls::transition::Stage::steady(&super::policy("ex")).pod(true);
    assert!(!super::rotation::nothing_trusts_a_ca([&mounted, &Default::default()]));
    assert!(super::rotation::nothing_trusts_a_ca([&Default::default()]));
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
    let ca = w.secrets.get_mut(&super::ca_secret("ex")).unwrap();
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
    w.cluster.metadata.annotations = Some([(super::ROTATE_CA_ANNOTATION.to_string(), "now".to_string())].into());
    let d = plan(&w.observed_turning_off());
    assert!(matches!(&d, Decision::WriteLeaves(_)), "only renewals: {d:?}");
    w.apply(&d);
    assert!(matches!(plan(&w.observed_turning_off()), Decision::Wait { reason: "TurningOff", .. }));
    // Nor a new CA for a lost one: members trust the old one; a person is told once it matters.
    w.secrets.remove(&super::ca_secret("ex"));
    assert!(waiting(&plan(&w.observed_turning_off()), "TurningOff", "holds no CA that can sign"));
    w.now += HOUR;
    let d = plan(&w.observed_turning_off());
    assert!(matches!(&d, Decision::Blocked(m) if m.contains("expires at")), "{d:?}");
}

#[test]
fn the_condition_follows_the_decision() {
    use super::status::{CERTIFICATES_READY, condition, is_warning};
    let w = World::running();
    let c = condition(&w.plan()).unwrap();
    assert_eq!((c.type_.as_str(), c.status.as_str(), c.reason.as_str()), (CERTIFICATES_READY, "True", "Current"));
    let c = condition(&Decision::Blocked("x".into())).unwrap();
    assert!(is_warning(&c));
    assert!(condition(&Decision::Off).is_none());
}

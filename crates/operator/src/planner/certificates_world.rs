//! A small simulated world for the certificate planner's tests (`rotation_tests`): the API's
//! Secrets (the only state the planner has: every plan is made from a fresh read, as after an
//! operator restart), and three etcd members that load their trusted CAs when they start and
//! serve whatever certificate files the kubelet last gave them. Real certificates throughout.

use std::collections::{BTreeMap, BTreeSet};

use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::cluster::{AutoTls, TlsPolicy};
use k8s_openapi::api::core::v1::Secret;

use super::certificates::plan;
use crate::observed::{EtcdState, MemberState, MemberStatus, Observed, PodState};
use crate::tls::auto::Leaf;
use crate::tls::auto::decision::{Decision, LeafWrite};
use crate::tls::auto::read::observation;
use crate::tls::auto::secrets::for_decision;
use crate::tls::auto::state::{CertId, CertInfo, Phase, Served, issuer_among};
use crate::validation::validate;

/// Issue time of the first material.
pub(super) const T0: i64 = 1_900_000_000;
pub(super) const HOUR: i64 = 3600;

/// One etcd member as it runs.
#[derive(Clone, Debug)]
pub(super) struct Member {
    pub(super) pod: String,
    /// The pod-spec hash its pod was made with.
    pub(super) hash: String,
    pub(super) healthy: bool,
    /// CAs etcd loaded when it started: `--peer-trusted-ca-file`, `--trusted-ca-file`.
    pub(super) trusts_peer: BTreeSet<CertId>,
    pub(super) trusts_clients: BTreeSet<CertId>,
    /// The certificate files the kubelet last brought (etcd serves them at every handshake).
    pub(super) peer_der: Vec<u8>,
    pub(super) server_der: Vec<u8>,
}

pub(super) struct World {
    pub(super) cluster: etcd_operator_api::EtcdCluster,
    /// The API: Secrets by name.
    pub(super) secrets: BTreeMap<String, Secret>,
    pub(super) next_rv: u64,
    pub(super) now: i64,
    pub(super) members: Vec<Member>,
    pub(super) paused: bool,
    /// Every CA certificate ever made (to name who issued what).
    pub(super) cas: Vec<CertInfo>,
    /// Events, in order.
    pub(super) events: Vec<&'static str>,
    /// The members run without TLS (a plaintext cluster whose spec just turned auto TLS on).
    pub(super) plaintext_members: bool,
    /// `spec.TLS.certManager`: a simulated cert-manager.
    pub(super) cm: Option<CertManager>,
}

/// cert-manager as the planner meets it: the Certificates the operator wrote (their JSON),
/// and an issuer CA that signs into `<cluster>-cm-<leaf>` Secrets.
pub(super) struct CertManager {
    pub(super) ca: crate::tls::auto::state::Authority,
    pub(super) certificates: BTreeMap<Leaf, serde_json::Value>,
    /// The API server serves no cert-manager Certificates.
    pub(super) absent: bool,
    /// Renewals the operator asked for (by leaf), in order.
    pub(super) renewals: Vec<Leaf>,
    /// Certificates whose renewal, once asked, does not come (cert-manager slow or failing):
    /// they stay `Issuing`.
    pub(super) stalled: BTreeSet<Leaf>,
}

pub(super) fn cm_spec() -> EtcdClusterSpec {
    let cm = etcd_operator_api::cluster::CertManagerTls {
        issuer_ref: etcd_operator_api::cluster::IssuerRef { name: "ca".into(), ..Default::default() },
        duration: "1h".into(),
        renew_before: "20m".into(),
    };
    EtcdClusterSpec {
        size: 3,
        tls: Some(TlsPolicy { cert_manager: Some(cm), ..Default::default() }),
        ..Default::default()
    }
}

pub(super) fn spec() -> EtcdClusterSpec {
    EtcdClusterSpec {
        size: 3,
        tls: Some(TlsPolicy {
            auto: Some(AutoTls { validity: "1h".into(), renew_before: "20m".into(), ca_validity: "10h".into() }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn data(s: &Secret, key: &str) -> Vec<u8> {
    s.data.as_ref().and_then(|d| d.get(key)).map(|v| v.0.clone()).unwrap_or_default()
}

pub(super) fn der_of(pem: &[u8]) -> Vec<u8> {
    CertInfo::all_from_pem(pem).map(|mut v| v.remove(0).der).unwrap_or_default()
}

impl World {
    pub(super) fn new() -> World {
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
            cm: None,
        }
    }

    /// A new cluster with `spec.TLS.certManager` and cert-manager running with a CA issuer.
    pub(super) fn with_cert_manager() -> World {
        let mut w = World::new();
        w.cluster.spec = cm_spec();
        w.cm = Some(CertManager {
            ca: w.new_issuer_ca(T0),
            certificates: BTreeMap::new(),
            absent: false,
            renewals: vec![],
            stalled: Default::default(),
        });
        w
    }

    /// As `running`, with cert-manager issuing.
    pub(super) fn running_with_cert_manager() -> World {
        let mut w = World::with_cert_manager();
        w.converge_writes();
        w.start_members();
        w
    }

    /// A CA of the issuer (cert-manager's CA Issuer's Secret), made at `at`.
    pub(super) fn new_issuer_ca(&mut self, at: i64) -> crate::tls::auto::state::Authority {
        let names = crate::tls::auto::state::Names { cluster: "issuer", namespace: "ns", domain: "" };
        let i = crate::tls::auto::issuer::new_ca(names, at, 100 * HOUR).unwrap();
        let a = crate::tls::auto::secrets::authority(&i).unwrap();
        self.cas.push(a.cert.clone());
        a
    }

    /// cert-manager issues the Certificate of `leaf` (now, from its issuer's CA of now), as at
    /// a renewal or when asked.
    pub(super) fn cm_issue(&mut self, leaf: Leaf) {
        let cm = self.cm.as_ref().unwrap();
        assert!(cm.certificates.contains_key(&leaf), "no Certificate for {leaf:?}");
        let names = crate::tls::auto::state::Names { cluster: "ex", namespace: "ns", domain: "" };
        let i = crate::tls::auto::issuer::issue(leaf, names, &cm.ca, self.now, HOUR).unwrap();
        let name = crate::tls::cert_manager::name("ex", leaf);
        let data = BTreeMap::from([
            ("tls.crt".to_string(), k8s_openapi::ByteString(i.cert_pem.into_bytes())),
            ("tls.key".to_string(), k8s_openapi::ByteString(i.key.0.into_bytes())),
            ("ca.crt".to_string(), k8s_openapi::ByteString(cm.ca.cert.pem().into_bytes())),
        ]);
        // cert-manager updates the data and keeps the Secret's metadata (owner references).
        let mut s = self.secrets.get(&name).cloned().unwrap_or_default();
        s.data = Some(data);
        s.metadata.name = Some(name.clone());
        self.secrets.insert(name, s);
    }

    /// Three members started with the Secrets of now.
    pub(super) fn start_members(&mut self) {
        for i in 1..=3 {
            self.members.push(Member {
                pod: format!("ex-m{i}"),
                hash: String::new(),
                healthy: true,
                trusts_peer: BTreeSet::new(),
                trusts_clients: BTreeSet::new(),
                peer_der: vec![],
                server_der: vec![],
            });
            self.restart(i - 1);
        }
    }

    /// A running cluster: CA and certificates issued at `T0`, three members started with them.
    pub(super) fn running() -> World {
        let mut w = World::new();
        w.converge_writes();
        w.start_members();
        w
    }

    pub(super) fn secret(&self, leaf: Leaf) -> &Secret {
        &self.secrets[&leaf.secret("ex")]
    }

    pub(super) fn observed(&self) -> Observed {
        let mut d = validate("ex", &self.cluster.spec).unwrap();
        let fetched = self.secrets.iter().map(|(k, v)| (k.clone(), Ok(Some(v.clone())))).collect();
        let mut c = observation(&self.cluster, d.tls_auto.unwrap(), "", self.now, &fetched);
        if let (Some(cm), Some(r)) = (&self.cm, &d.tls_cert_manager) {
            let names = crate::tls::auto::state::Names { cluster: "ex", namespace: "ns", domain: "" };
            let certs = Leaf::ALL.into_iter().map(|l| (l, cm.certificates.get(&l).cloned())).collect();
            let secrets = Leaf::ALL
                .into_iter()
                .map(|l| {
                    let s = self.secrets.get(&crate::tls::cert_manager::name("ex", l));
                    (l, s.map(|s| s.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()))
                })
                .collect();
            let api =
                if cm.absent { Err("the API server serves no cert-manager.io/v1 Certificate".into()) } else { Ok(()) };
            let unowned = Leaf::ALL
                .into_iter()
                .filter(|l| {
                    let s = self.secrets.get(&crate::tls::cert_manager::name("ex", *l));
                    s.is_some_and(|s| s.metadata.owner_references.is_none())
                })
                .collect();
            c.cert_manager =
                Some(crate::tls::cert_manager::observed(r, api, &certs, &secrets, unowned, names, self.now, "uid-1"));
        }
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

    pub(super) fn plan(&self) -> Decision {
        plan(&self.observed())
    }

    /// As `observed`, after `spec.TLS.auto` was turned off while the members still mount its
    /// Secrets (`InUse::Leaving`: the observation `observe` then makes).
    pub(super) fn observed_turning_off(&self) -> Observed {
        let mut o = self.observed();
        let fetched = self.secrets.iter().map(|(k, v)| (k.clone(), Ok(Some(v.clone())))).collect();
        let mut off = self.cluster.clone();
        off.spec.tls = None;
        let d = o.desired.as_mut().unwrap();
        let stage = crate::tls::transition::Stage { client_http_too: true, ..d.tls_stage.clone() };
        *d = validate("ex", &off.spec).unwrap();
        d.tls_stage = stage;
        assert_eq!(crate::validation::tls_auto_in_use(d, "ex"), Some(crate::tls::auto::InUse::Leaving));
        o.certificates =
            Some(observation(&off, crate::tls::auto::Settings::default(), "", self.now, &fetched).leaving());
        o
    }

    pub(super) fn current_hash(&self) -> String {
        self.observed().desired.unwrap().pod_hash()
    }

    /// Carries out a writing decision as the controller does: the same Secrets, created or
    /// replaced at the version read.
    pub(super) fn apply(&mut self, d: &Decision) {
        if let Decision::ApplyCertificates(leaves) = d {
            let r = self.observed().desired.unwrap().tls_cert_manager.unwrap();
            let names = crate::tls::auto::state::Names { cluster: "ex", namespace: "ns", domain: "" };
            for l in leaves {
                let spec = crate::tls::cert_manager::certificate_spec(*l, &r, names);
                let obj = serde_json::json!({"metadata": {"ownerReferences": [{"uid": "uid-1"}]}, "spec": spec,
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
                self.cm.as_mut().unwrap().certificates.insert(*l, obj);
                // cert-manager issues a new Certificate at once.
                self.cm_issue(*l);
            }
            self.events.push("CertificatesRequested");
            return;
        }
        if let Decision::OwnIssuedSecrets(leaves) = d {
            for l in leaves {
                let s = self.secrets.get_mut(&crate::tls::cert_manager::name("ex", *l)).unwrap();
                s.metadata.owner_references = Some(vec![crate::tls::cert_manager::issued_secret_owner(&self.cluster)]);
            }
            self.events.push("CertificateSecretsOwned");
            return;
        }
        if let Decision::WriteLeaves(ws) = d {
            for w in ws {
                if let LeafWrite::Renew { leaf } = w {
                    let cm = self.cm.as_mut().unwrap();
                    cm.renewals.push(*leaf);
                    if cm.stalled.contains(leaf) {
                        cm.certificates.get_mut(leaf).unwrap()["status"]["conditions"] = serde_json::json!([{"type": "Ready", "status": "True"}, {"type": "Issuing", "status": "True"}]);
                    } else {
                        self.cm_issue(*leaf);
                    }
                }
            }
            if ws.iter().all(|w| matches!(w, LeafWrite::Renew { .. })) {
                self.events.push("CertificateRenewalRequested");
                return;
            }
        }
        let o = self.observed();
        let w = for_decision(&self.cluster, o.certificates.as_ref().unwrap(), d).unwrap();
        self.events.push(w.reason);
        for mut s in w.secrets {
            let name = s.metadata.name.clone().unwrap();
            let have = self.secrets.get(&name).and_then(|s| s.metadata.resource_version.clone());
            assert_eq!(s.metadata.resource_version, have, "{name} is written at the version read");
            s.metadata.resource_version = Some(self.next_rv.to_string());
            self.next_rv += 1;
            if let Some(pem) =
                s.data.as_ref().and_then(|d| d.get(crate::tls::auto::CA_CERT).or(d.get(crate::tls::auto::NEXT_CA_CERT)))
            {
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
    pub(super) fn converge_writes(&mut self) -> Decision {
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

    /// Plans and writes until `stop` holds for the next decision (which is not carried out).
    pub(super) fn converge_writes_until(&mut self, stop: impl Fn(&Decision) -> bool) {
        for _ in 0..10 {
            let d = self.plan();
            if stop(&d) {
                return;
            }
            assert!(d.writes(), "stopped at {d:?}");
            self.apply(&d);
            self.check_trust();
        }
        panic!("the planner keeps writing");
    }

    /// The kubelet brings every member the Secrets as they are now.
    pub(super) fn kubelet_sync(&mut self) {
        for i in 0..self.members.len() {
            self.members[i].peer_der = der_of(&data(self.secret(Leaf::Peer), "peer.crt"));
            self.members[i].server_der = der_of(&data(self.secret(Leaf::Server), "server.crt"));
        }
        self.check_trust();
    }

    /// Member `i`'s pod is made again from the current spec: etcd loads the bundles of now.
    pub(super) fn restart(&mut self, i: usize) {
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
    pub(super) fn roll_one(&mut self) -> bool {
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

    pub(super) fn issuer(&self, der: &[u8]) -> Option<CertId> {
        issuer_among(der, &self.cas.iter().collect::<Vec<_>>())
    }

    /// No member ever distrusts another, and the operator can always talk to every member:
    /// each member's peer certificate is issued by a CA every member loaded for peers; the
    /// operator's certificate by a CA every member loaded for clients; each member's server
    /// certificate by a CA in the operator's bundle (which it reads afresh every time).
    pub(super) fn check_trust(&self) {
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

    pub(super) fn ca_phase(&self) -> Phase {
        let o = self.observed();
        o.certificates.unwrap().ca.present().unwrap().phase
    }

    pub(super) fn signing_ca(&self) -> CertId {
        let o = self.observed();
        o.certificates.unwrap().ca.present().unwrap().signing.clone().unwrap().cert.id
    }
}

pub(super) fn issued(d: &Decision) -> Vec<Leaf> {
    match d {
        Decision::WriteLeaves(ws) => ws
            .iter()
            .filter_map(|w| match w {
                LeafWrite::Issue { leaf, .. } => Some(*leaf),
                LeafWrite::Retrust { .. } | LeafWrite::Renew { .. } => None,
            })
            .collect(),
        _ => vec![],
    }
}

pub(super) fn retrusted(d: &Decision) -> Vec<Leaf> {
    match d {
        Decision::WriteLeaves(ws) => {
            ws.iter().filter(|w| matches!(w, LeafWrite::Retrust { .. })).map(|w| w.leaf()).collect()
        }
        _ => vec![],
    }
}

pub(super) fn waiting(d: &Decision, reason: &str, text: &str) -> bool {
    matches!(d, Decision::Wait { reason: r, message } if *r == reason && message.contains(text))
}

//! (tests) Certificates as users make them, with rcgen: a CA and certificates it issues, and
//! the two layouts of CoreOS' static TLS: its TLS guide's (`example/tls/certs`: one CA, the
//! server certificate without the cluster domain) and its e2e tests' (every certificate its
//! own self-signed CA, each side trusting the other's certificate).

use std::collections::BTreeMap;

use rcgen::{CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair};

use super::material::SecretData;
use super::{CLIENT_KEYS, ClientSecrets, Keys, PEER_KEYS, Policy, SERVER_KEYS};

pub struct Ca {
    pub issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

pub fn ca(name: &str) -> Ca {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    let pem = p.self_signed(&key).unwrap().pem();
    Ca { pem, issuer: Issuer::new(p, key) }
}

/// A certificate and key `by` issues for `sans` with `eku`.
pub fn leaf(by: &Ca, sans: &[String], eku: &[Eku]) -> (String, String) {
    let mut p = CertificateParams::new(sans.to_vec()).unwrap();
    p.extended_key_usages = eku.to_vec();
    let key = KeyPair::generate().unwrap();
    (p.signed_by(&key, &by.issuer).unwrap().pem(), key.serialize_pem())
}

/// As CoreOS' e2e `prepareKeyAndCert`: a self-signed CA certificate for `hosts`, server and
/// client auth.
pub fn self_signed(hosts: &[String]) -> (String, String) {
    let mut p = CertificateParams::new(hosts.to_vec()).unwrap();
    p.distinguished_name.push(rcgen::DnType::OrganizationName, "Etcd Operator Example");
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
    let key = KeyPair::generate().unwrap();
    (p.self_signed(&key).unwrap().pem(), key.serialize_pem())
}

pub fn data(keys: Keys, (cert, key): &(String, String), ca: &str) -> SecretData {
    Some(BTreeMap::from([
        (keys.cert.to_string(), cert.clone().into_bytes()),
        (keys.key.to_string(), key.clone().into_bytes()),
        (keys.ca.to_string(), ca.as_bytes().to_vec()),
    ]))
}

/// The three Secrets `peer`, `server`, `op` of a static policy.
pub fn policy() -> Policy {
    Policy {
        peer_secret: Some("peer".into()),
        client: Some(ClientSecrets { server_secret: "server".into(), operator_secret: "op".into() }),
    }
}

/// CoreOS' TLS guide for cluster `ex` in namespace `ns`: one CA; peer names with and without
/// the cluster domain, server names without it; the client certificate names nothing.
pub fn coreos_guide() -> (Ca, BTreeMap<String, SecretData>) {
    let a = ca("etcd-ca");
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let peer = leaf(&a, &s(&["*.ex.ns.svc", "*.ex.ns.svc.cluster.local"]), &[Eku::ServerAuth, Eku::ClientAuth]);
    let server = leaf(&a, &s(&["*.ex.ns.svc", "ex-client.ns.svc", "localhost"]), &[Eku::ServerAuth, Eku::ClientAuth]);
    let client = leaf(&a, &[], &[Eku::ClientAuth]);
    let f = BTreeMap::from([
        ("peer".to_string(), data(PEER_KEYS, &peer, &a.pem)),
        ("server".to_string(), data(SERVER_KEYS, &server, &a.pem)),
        ("op".to_string(), data(CLIENT_KEYS, &client, &a.pem)),
    ]);
    (a, f)
}

/// CoreOS' e2e TLS (`test/e2e/e2eutil/tls.go`) for cluster `ex` in namespace `ns`: each
/// certificate is its own CA; the member Secret's `server-ca.crt` is the operator's
/// certificate, the operator Secret's `etcd-client-ca.crt` the members' server certificate.
pub fn coreos_e2e() -> BTreeMap<String, SecretData> {
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let peer = self_signed(&s(&["*.ex.ns.svc", "*.ex.ns.svc.cluster.local"]));
    let server = self_signed(&s(&["*.ex.ns.svc", "ex-client.ns.svc", "localhost"]));
    let operator = self_signed(&[]);
    BTreeMap::from([
        ("peer".to_string(), data(PEER_KEYS, &peer, &peer.0)),
        ("server".to_string(), data(SERVER_KEYS, &server, &operator.0)),
        ("op".to_string(), data(CLIENT_KEYS, &operator, &server.0)),
    ])
}

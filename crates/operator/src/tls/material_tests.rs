use super::*;
use crate::tls::test_certs::{self, Ca, ca, coreos_e2e, coreos_guide, data, leaf, policy};
use crate::tls::{CLIENT_KEYS, PEER_KEYS, SERVER_KEYS};
use rcgen::ExtendedKeyUsagePurpose as Eku;

const NOW: i64 = 1_900_000_000;
/// In cluster: the domain learned from the operator's pod, and the short form to fall back to.
const IN_CLUSTER: &[&str] = &["cluster.local", ""];
/// Out of cluster (no domain known).
const OUT_OF_CLUSTER: &[&str] = &[""];

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The three Secrets from one CA `a`, the operator's certificate issued by `client_by`.
fn fetched(a: &Ca, client_by: &Ca) -> BTreeMap<String, SecretData> {
    let both = [Eku::ServerAuth, Eku::ClientAuth];
    let peer = leaf(a, &names(&["*.ex.ns.svc", "*.ex.ns.svc.cluster.local"]), &both);
    let server = leaf(a, &names(&["*.ex.ns.svc", "*.ex.ns.svc.cluster.local", "ex-client.ns.svc"]), &both);
    BTreeMap::from([
        ("peer".into(), data(PEER_KEYS, &peer, &a.pem)),
        ("server".into(), data(SERVER_KEYS, &server, &a.pem)),
        ("op".into(), data(CLIENT_KEYS, &leaf(client_by, &[], &[Eku::ClientAuth]), &a.pem)),
    ])
}

#[test]
fn consistent_material_gives_the_operator_its_identity() {
    let a = ca("a");
    let v = checked(&policy(), &fetched(&a, &a), "ex", "ns", OUT_OF_CLUSTER, NOW);
    assert!(v.refused.is_empty(), "{:?}", v.refused);
    let c = v.client.unwrap();
    assert_eq!(c.server_name, "ex-client.ns.svc");
    assert_eq!(c.ca, a.pem.as_bytes());
    assert!(!format!("{c:?}").contains("BEGIN"), "Debug never prints the material");
    assert!(!c.needs_pinning(), "a CA that names no host: etcd-client's own TLS");
}

#[test]
fn an_operator_certificate_from_another_ca_is_refused_naming_both_secrets() {
    let (a, b) = (ca("a"), ca("b"));
    let mut f = fetched(&a, &b);
    f.insert("peer".into(), None);
    let v = checked(&policy(), &f, "ex", "ns", OUT_OF_CLUSTER, NOW);
    assert_eq!(v.refused[0], "Secret peer does not exist");
    assert_eq!(
        v.refused[1],
        "Secret op: etcd-client.crt is not issued by server-ca.crt of Secret server (the members would refuse the operator)"
    );
    assert_eq!(v.refused_secrets, BTreeSet::from(["peer".to_string(), "server".into(), "op".into()]));
    assert!(v.client.is_some(), "the operator's Secret itself is readable: it keeps observing with it");
    assert!(checked(&Policy::default(), &BTreeMap::new(), "ex", "ns", &[""], 0).refused.is_empty());
}

/// Issue 25: certificates made as CoreOS' TLS guide makes them (`example/tls/certs`: the
/// server certificate names `*.<cluster>.<ns>.svc` only) were refused by an operator in a pod
/// (it knew the cluster domain and required `*.<cluster>.<ns>.svc.cluster.local`). Members are
/// then addressed as CoreOS addressed them: without the domain.
#[test]
fn coreos_guide_certificates_address_members_without_the_cluster_domain() {
    let (_, f) = coreos_guide();
    for domains in [IN_CLUSTER, OUT_OF_CLUSTER] {
        let v = checked(&policy(), &f, "ex", "ns", domains, NOW);
        assert!(v.refused.is_empty(), "{domains:?}: {:?}", v.refused);
        assert_eq!(v.member_domain, "", "{domains:?}");
    }
    // Certificates that cover the domain's names keep it.
    let a = ca("a");
    let v = checked(&policy(), &fetched(&a, &a), "ex", "ns", IN_CLUSTER, NOW);
    assert!(v.refused.is_empty(), "{:?}", v.refused);
    assert_eq!(v.member_domain, "cluster.local");
    // The operator's spelling of a domain is kept as given.
    let v = checked(&policy(), &fetched(&a, &a), "ex", "ns", &[".cluster.local", ""], NOW);
    assert_eq!(v.member_domain, ".cluster.local");
}

#[test]
fn certificates_that_cover_neither_form_are_refused_naming_both() {
    let a = ca("a");
    let mut f = fetched(&a, &a);
    let other = leaf(&a, &names(&["*.other.ns.svc", "ex-client.ns.svc"]), &[Eku::ServerAuth]);
    f.insert("server".into(), data(SERVER_KEYS, &other, &a.pem));
    let v = checked(&policy(), &f, "ex", "ns", IN_CLUSTER, NOW);
    let all = v.refused.join("\n");
    assert!(all.contains("Secret server key server.crt: does not cover DNS name *.ex.ns.svc.cluster.local"), "{all}");
    assert!(all.contains("Secret server key server.crt: does not cover DNS name *.ex.ns.svc ("), "{all}");
    assert!(all.contains("members are addressed as <member>.ex.ns.svc.cluster.local or"), "{all}");
    assert_eq!(v.refused_secrets, BTreeSet::from(["server".to_string()]));
    // A peer certificate with only the domain's names and a server certificate with only the
    // short ones: no one form for every member URL.
    let mut f = fetched(&a, &a);
    let long = leaf(&a, &names(&["*.ex.ns.svc.cluster.local"]), &[Eku::ServerAuth, Eku::ClientAuth]);
    f.insert("peer".into(), data(PEER_KEYS, &long, &a.pem));
    let short = leaf(&a, &names(&["*.ex.ns.svc", "ex-client.ns.svc"]), &[Eku::ServerAuth]);
    f.insert("server".into(), data(SERVER_KEYS, &short, &a.pem));
    let v = checked(&policy(), &f, "ex", "ns", IN_CLUSTER, NOW);
    assert_eq!(v.refused_secrets, BTreeSet::from(["peer".to_string(), "server".into()]), "{:?}", v.refused);
    // Out of cluster only the short form exists: said as before, without the domain.
    let v = checked(&policy(), &fetched(&a, &a), "ex", "ns", OUT_OF_CLUSTER, NOW);
    assert!(v.refused.is_empty());
    let mut f = fetched(&a, &a);
    f.insert("server".into(), data(SERVER_KEYS, &other, &a.pem));
    let v = checked(&policy(), &f, "ex", "ns", OUT_OF_CLUSTER, NOW);
    assert_eq!(v.refused.len(), 1, "{:?}", v.refused);
    assert!(v.refused[0].starts_with("Secret server key server.crt: does not cover DNS name *.ex.ns.svc ("));
}

/// Issue 25: CoreOS' own e2e layout, two CAs crossing over (each certificate its own CA): the
/// checks pass, and the operator trusts the members' certificate itself, which rustls'
/// verifier refuses as a server's: its client checks it itself (`tls::connector`).
#[test]
fn coreos_e2e_material_passes_and_the_operator_pins_the_members_certificate() {
    let f = coreos_e2e();
    let v = checked(&policy(), &f, "ex", "ns", IN_CLUSTER, NOW);
    assert!(v.refused.is_empty(), "{:?}", v.refused);
    assert_eq!(v.member_domain, "");
    let c = v.client.unwrap();
    let server_cert = f["server"].as_ref().unwrap()["server.crt"].clone();
    assert_eq!(c.ca, server_cert, "the operator trusts the members' certificate, not its own");
    assert!(c.needs_pinning());
}

#[test]
fn expiries_name_every_certificate_and_the_ca_that_issued_it() {
    let (a, f) = coreos_guide();
    let v = checked(&policy(), &f, "ex", "ns", IN_CLUSTER, NOW);
    let what: Vec<(&str, &str)> = v.expiries.iter().map(|e| (e.secret.as_str(), e.key.as_str())).collect();
    assert_eq!(
        what,
        [("peer", "peer.crt"), ("peer", "peer-ca.crt"), ("server", "server.crt"), ("op", "etcd-client.crt")]
    );
    assert!(v.expiries[1].subject.contains("etcd-ca"), "{:?}", v.expiries[1]);
    let _ = a;
}

/// Members load CA bundles only at start: the digest follows the member bundles (not the
/// certificates, which etcd re-reads at each handshake, nor the operator's bundle).
#[test]
fn the_trust_digest_follows_the_member_ca_bundles_only() {
    let a = ca("a");
    let f = fetched(&a, &a);
    let base = checked(&policy(), &f, "ex", "ns", IN_CLUSTER, NOW).trust.unwrap();
    let with = |secret: &str, key: &str, value: &str| {
        let mut f = f.clone();
        f.get_mut(secret).unwrap().as_mut().unwrap().insert(key.into(), value.as_bytes().to_vec());
        checked(&policy(), &f, "ex", "ns", IN_CLUSTER, NOW).trust.unwrap()
    };
    let bundle = format!("{}{}", a.pem, test_certs::ca("b").pem);
    assert_ne!(with("peer", "peer-ca.crt", &bundle), base);
    assert_ne!(with("server", "server-ca.crt", &bundle), base);
    assert_eq!(with("op", "etcd-client-ca.crt", &bundle), base);
    let renewed = leaf(&a, &names(&["*.ex.ns.svc"]), &[Eku::ServerAuth, Eku::ClientAuth]).0;
    assert_eq!(with("peer", "peer.crt", &renewed), base);
    assert!(checked(&Policy::default(), &BTreeMap::new(), "ex", "ns", &[""], NOW).trust.is_none());
}

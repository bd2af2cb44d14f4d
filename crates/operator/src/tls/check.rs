//! Checking the TLS material of one Secret before anything uses it: every key present, the
//! certificate and CA parse, the certificate is valid now, covers the names the cluster needs,
//! has the key usages its side needs, and is issued by the CA the other side trusts. Pure
//! (the Secret's data and the time come in); every problem is named (Secret, key, missing name).

use std::collections::BTreeMap;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::pem::Pem;

use super::{Keys, Use};

/// The PEM files of one Secret that passed the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pems {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub ca: Vec<u8>,
}

/// Checks one Secret's data (`None`: the Secret does not exist). `names` are the DNS names the
/// certificate must cover (a `*.` name needs that wildcard itself: member names are random).
/// `now` is in seconds since the epoch.
pub fn secret(
    secret: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    keys: Keys,
    usage: Use,
    names: &[String],
    now: i64,
) -> Result<Pems, Vec<String>> {
    let Some(data) = data else { return Err(vec![format!("Secret {secret} does not exist")]) };
    let mut errs = vec![];
    let mut get = |k: &str| match data.get(k).filter(|v| !v.is_empty()) {
        Some(v) => Some(v.clone()),
        None => {
            errs.push(format!("Secret {secret} lacks key {k}"));
            None
        }
    };
    let (cert, key, ca) = (get(keys.cert), get(keys.key), get(keys.ca));
    let (Some(cert), Some(key), Some(ca)) = (cert, key, ca) else { return Err(errs) };
    let at = |k: &str| format!("Secret {secret} key {k}");
    let cert_pems = pems(&cert);
    let ca_pems = pems(&ca);
    match cert_pems.first().map(|p| p.parse_x509()) {
        Some(Ok(c)) => {
            errs.extend(leaf(&c, usage, names, now).into_iter().map(|e| format!("{}: {e}", at(keys.cert))));
        }
        Some(Err(e)) => errs.push(format!("{}: not an X.509 certificate ({e})", at(keys.cert))),
        None => errs.push(format!("{}: no PEM certificate in it", at(keys.cert))),
    }
    if ca_pems.iter().filter(|p| p.label == "CERTIFICATE").all(|p| p.parse_x509().is_err()) {
        errs.push(format!("{}: no PEM CA certificate in it", at(keys.ca)));
    }
    let key_text = String::from_utf8_lossy(&key);
    if !(key_text.contains("-----BEGIN") && key_text.contains("PRIVATE KEY-----")) {
        errs.push(format!("{}: no PEM private key in it", at(keys.key)));
    }
    if errs.is_empty() { Ok(Pems { cert, key, ca }) } else { Err(errs) }
}

fn pems(data: &[u8]) -> Vec<Pem> {
    Pem::iter_from_buffer(data).map_while(Result::ok).collect()
}

/// The DNS names of a certificate's subjectAltName, lowercase.
pub(super) fn sans_of(c: &X509Certificate) -> Result<Vec<String>, String> {
    match c.subject_alternative_name() {
        Ok(Some(san)) => Ok(san
            .value
            .general_names
            .iter()
            .filter_map(|n| match n {
                GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                _ => None,
            })
            .collect()),
        Ok(None) => Ok(vec![]),
        Err(e) => Err(format!("unreadable subjectAltName ({e})")),
    }
}

/// The DNS names the first certificate of `cert_pem` carries (empty when it cannot be read:
/// [`secret`] says why).
pub fn dns_names(cert_pem: &[u8]) -> Vec<String> {
    pems(cert_pem).first().and_then(|p| p.parse_x509().ok()).and_then(|c| sans_of(&c).ok()).unwrap_or_default()
}

/// What is wrong with a leaf certificate for `usage`.
fn leaf(c: &X509Certificate, usage: Use, names: &[String], now: i64) -> Vec<String> {
    let mut errs = vec![];
    let v = c.validity();
    if now < v.not_before.timestamp() {
        errs.push(format!("not valid before {}", v.not_before));
    }
    if now > v.not_after.timestamp() {
        errs.push(format!("expired at {}", v.not_after));
    }
    let sans = sans_of(c).unwrap_or_else(|e| {
        errs.push(e);
        vec![]
    });
    for n in names {
        if !covers(&sans, n) {
            errs.push(format!("does not cover DNS name {n} (subjectAltName DNS names: [{}])", sans.join(", ")));
        }
    }
    if let Ok(Some(eku)) = c.extended_key_usage() {
        let e = eku.value;
        let (server, client) = (e.any || e.server_auth, e.any || e.client_auth);
        let need: &[(&str, bool)] = match usage {
            Use::Peer => &[("serverAuth", server), ("clientAuth", client)],
            Use::Server => &[("serverAuth", server)],
            Use::Client => &[("clientAuth", client)],
        };
        for (what, ok) in need {
            if !ok {
                errs.push(format!("extended key usage lacks {what}"));
            }
        }
    }
    errs
}

/// Whether DNS names `sans` cover `name` as a TLS client checks it: exactly, or by a wildcard
/// for the first label. A wildcard `name` (`*.x.y`) is covered only by that wildcard.
pub fn covers(sans: &[String], name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    sans.iter().any(|s| {
        *s == name
            || (!name.starts_with("*.")
                && s.strip_prefix("*.").is_some_and(|rest| name.split_once('.').is_some_and(|(_, r)| r == rest)))
    })
}

/// Whether the first certificate of `cert_pem` is signed by one of the certificates in
/// `ca_pem` (a bundle). Used across Secrets: the members' server certificate must be issued
/// by the CA the operator trusts, the operator's certificate by the CA the members trust.
pub fn issued_by(cert_pem: &[u8], ca_pem: &[u8]) -> bool {
    let certs = pems(cert_pem);
    let Some(Ok(cert)) = certs.first().map(|p| p.parse_x509()) else { return false };
    let cas = pems(ca_pem);
    cas.iter().filter_map(|p| p.parse_x509().ok()).any(|ca| cert.verify_signature(Some(ca.public_key())).is_ok())
}

/// Whether the certificate `der` is signed by one of the certificates in bundle `ca_pem`.
pub fn der_issued_by(der: &[u8], ca_pem: &[u8]) -> bool {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { return false };
    pems(ca_pem)
        .iter()
        .filter_map(|p| p.parse_x509().ok())
        .any(|ca| cert.verify_signature(Some(ca.public_key())).is_ok())
}

/// The issuer of the certificate `der`, as text.
pub fn issuer_of_der(der: &[u8]) -> String {
    x509_parser::parse_x509_certificate(der).map(|(_, c)| c.issuer().to_string()).unwrap_or_else(|_| "?".into())
}

/// What `names` the first certificate of `cert_pem` (key `key` of Secret `secret`) does not
/// cover, said as [`secret`] says it.
pub fn uncovered(secret: &str, key: &str, cert_pem: &[u8], names: &[String]) -> Vec<String> {
    let sans = dns_names(cert_pem);
    names
        .iter()
        .filter(|n| !covers(&sans, n))
        .map(|n| {
            format!(
                "Secret {secret} key {key}: does not cover DNS name {n} (subjectAltName DNS names: [{}])",
                sans.join(", ")
            )
        })
        .collect()
}

/// The end of the validity of the first certificate in `pem`, seconds since the epoch, and
/// its subject.
pub fn not_after(pem: &[u8]) -> Option<(i64, String)> {
    let c = pems(pem).into_iter().next()?;
    let c = c.parse_x509().ok()?;
    Some((c.validity().not_after.timestamp(), c.subject().to_string()))
}

/// The certificate of bundle `ca_pem` that signed the first certificate of `cert_pem`: the end
/// of its validity and its subject.
pub fn issuer_in(cert_pem: &[u8], ca_pem: &[u8]) -> Option<(i64, String)> {
    let certs = pems(cert_pem);
    let cert = certs.first()?.parse_x509().ok()?;
    let cas = pems(ca_pem);
    cas.iter()
        .filter_map(|p| p.parse_x509().ok())
        .find(|ca| cert.verify_signature(Some(ca.public_key())).is_ok())
        .map(|ca| (ca.validity().not_after.timestamp(), ca.subject().to_string()))
}

/// Whether bundle `ca_pem` holds a CA certificate that names DNS hosts: a server's own
/// self-signed certificate trusted as its CA (CoreOS' e2e certificates are made so). Go's
/// clients accept such a certificate when a server presents it; rustls' (webpki) refuses a CA
/// certificate as a server's, so the operator's client then checks it itself
/// (`tls::connector`).
pub fn has_self_signed_server_certificate(ca_pem: &[u8]) -> bool {
    pems(ca_pem)
        .iter()
        .filter_map(|p| p.parse_x509().ok())
        .any(|c| c.is_ca() && c.subject() == c.issuer() && sans_of(&c).is_ok_and(|s| s.iter().any(|n| !n.is_empty())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{CLIENT_KEYS, PEER_KEYS, SERVER_KEYS, required_names};
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        Ca { pem: cert.pem(), issuer: Issuer::new(p, key) }
    }

    fn leaf(ca: &Ca, sans: &[&str], eku: &[ExtendedKeyUsagePurpose]) -> (String, String) {
        let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.extended_key_usages = eku.to_vec();
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &ca.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn data(keys: Keys, cert: &str, key: &str, ca: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([
            (keys.cert.to_string(), cert.as_bytes().to_vec()),
            (keys.key.to_string(), key.as_bytes().to_vec()),
            (keys.ca.to_string(), ca.as_bytes().to_vec()),
        ])
    }

    const NOW: i64 = 1_900_000_000;

    fn now() -> i64 {
        // rcgen's default validity is 1975..4096: any present time is inside it.
        NOW
    }

    #[test]
    fn good_material_passes_for_every_use() {
        use ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let ca = ca("ca");
        let (c, k) = leaf(&ca, &["*.ex.ns.svc", "*.ex.ns.svc.cluster.local"], &[ServerAuth, ClientAuth]);
        let names = required_names(Use::Peer, "ex", "ns", "");
        assert!(secret("peer", Some(&data(PEER_KEYS, &c, &k, &ca.pem)), PEER_KEYS, Use::Peer, &names, now()).is_ok());
        let (c, k) = leaf(&ca, &["*.ex.ns.svc", "ex-client.ns.svc", "localhost"], &[ServerAuth]);
        let names = required_names(Use::Server, "ex", "ns", "");
        let ok = secret("srv", Some(&data(SERVER_KEYS, &c, &k, &ca.pem)), SERVER_KEYS, Use::Server, &names, now());
        assert!(ok.is_ok(), "{ok:?}");
        assert!(issued_by(c.as_bytes(), ca.pem.as_bytes()));
        let (c, k) = leaf(&ca, &[], &[ClientAuth]);
        assert!(secret("cl", Some(&data(CLIENT_KEYS, &c, &k, &ca.pem)), CLIENT_KEYS, Use::Client, &[], now()).is_ok());
    }

    #[test]
    fn missing_secret_and_missing_keys_are_named() {
        let e = secret("s", None, PEER_KEYS, Use::Peer, &[], now()).unwrap_err();
        assert_eq!(e, ["Secret s does not exist"]);
        let ca = ca("ca");
        let (c, k) = leaf(&ca, &["*.ex.ns.svc"], &[]);
        let mut d = data(PEER_KEYS, &c, &k, &ca.pem);
        d.remove("peer.key");
        d.insert("peer-ca.crt".into(), vec![]);
        let e = secret("s", Some(&d), PEER_KEYS, Use::Peer, &[], now()).unwrap_err();
        assert_eq!(e, ["Secret s lacks key peer.key", "Secret s lacks key peer-ca.crt"]);
    }

    #[test]
    fn a_certificate_without_the_member_names_is_refused_naming_the_name() {
        let ca = ca("ca");
        let (c, k) = leaf(&ca, &["*.other.ns.svc", "ex-client.ns.svc"], &[]);
        let names = required_names(Use::Server, "ex", "ns", "");
        let e = secret("srv", Some(&data(SERVER_KEYS, &c, &k, &ca.pem)), SERVER_KEYS, Use::Server, &names, now())
            .unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].starts_with("Secret srv key server.crt: does not cover DNS name *.ex.ns.svc"), "{e:?}");
        // The client Service is needed as well.
        let (c, k) = leaf(&ca, &["*.ex.ns.svc"], &[]);
        let e = secret("srv", Some(&data(SERVER_KEYS, &c, &k, &ca.pem)), SERVER_KEYS, Use::Server, &names, now())
            .unwrap_err();
        assert!(e[0].contains("does not cover DNS name ex-client.ns.svc"), "{e:?}");
    }

    #[test]
    fn wrong_key_usage_garbage_and_expiry_are_refused() {
        use ExtendedKeyUsagePurpose::ServerAuth;
        let ca = ca("ca");
        let (c, k) = leaf(&ca, &["*.ex.ns.svc"], &[ServerAuth]);
        let e = secret("p", Some(&data(PEER_KEYS, &c, &k, &ca.pem)), PEER_KEYS, Use::Peer, &[], now()).unwrap_err();
        assert_eq!(e, ["Secret p key peer.crt: extended key usage lacks clientAuth"]);
        let e =
            secret("p", Some(&data(PEER_KEYS, "junk", "junk", "junk")), PEER_KEYS, Use::Peer, &[], now()).unwrap_err();
        assert_eq!(e.len(), 3, "{e:?}");
        let (c, k) = leaf(&ca, &["*.ex.ns.svc"], &[]);
        let late = 420_000_000_000;
        let e = secret("p", Some(&data(PEER_KEYS, &c, &k, &ca.pem)), PEER_KEYS, Use::Peer, &[], late).unwrap_err();
        assert!(e[0].contains("expired at"), "{e:?}");
    }

    #[test]
    fn issuer_and_wildcards() {
        let (a, b) = (ca("a"), ca("b"));
        let (c, _) = leaf(&a, &["x"], &[]);
        assert!(issued_by(c.as_bytes(), a.pem.as_bytes()));
        assert!(!issued_by(c.as_bytes(), b.pem.as_bytes()));
        let bundle = format!("{}{}", b.pem, a.pem);
        assert!(issued_by(c.as_bytes(), bundle.as_bytes()), "a bundle: any CA in it");
        let sans = vec!["*.ex.ns.svc".to_string()];
        assert!(covers(&sans, "m1.ex.ns.svc"));
        assert!(covers(&sans, "*.ex.ns.svc"));
        assert!(!covers(&sans, "a.m1.ex.ns.svc"));
        assert!(!covers(&sans, "ex.ns.svc"));
        assert!(!covers(&["m1.ex.ns.svc".to_string()], "*.ex.ns.svc"), "one member's name is not all of them");
    }
}

//! Issuing a cluster's CA and certificates (rcgen, ECDSA P-256): which names each certificate
//! covers, which key usages it has, how long it lives. Deterministic but for the keys and
//! serial numbers (random); the time comes in.
//!
//! Names, as etcd checks them: peers check each other's certificate against the member DNS
//! names (a wildcard under the peer Service, member names are random), and a certificate
//! presented *by a client* against the client's address (reverse DNS of a member's IP is its
//! member name), so client certificates carry no names at all. Servers are reached by member
//! name, by the client Service, and from inside the pod as `localhost`.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, SerialNumber,
};

use super::state::{Authority, KeyPem, Names};
use super::{BACKDATE_SECS, Leaf};
use crate::tls::Use;

/// A certificate and its key, in PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key: KeyPem,
}

/// Valid from `from` to `to` (seconds since the epoch).
fn set_validity(p: &mut CertificateParams, from: i64, to: i64) {
    let epoch = rcgen::date_time_ymd(1970, 1, 1);
    p.not_before = epoch + std::time::Duration::from_secs(from.max(0) as u64);
    p.not_after = epoch + std::time::Duration::from_secs(to.max(0) as u64);
}

fn serial() -> SerialNumber {
    use rand::RngCore;
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    // Positive and without a leading zero byte: 16 significant bytes.
    b[0] = (b[0] & 0x7f) | 0x40;
    SerialNumber::from(b.to_vec())
}

fn err(what: &str) -> impl Fn(rcgen::Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// The DNS domain of certificates for a cluster whose domain is not known (no
/// `spec.pod.ClusterDomain`, no `--cluster-domain`): Kubernetes' default.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// The DNS names of a certificate (none for client certificates). Each name comes with and
/// without the cluster's DNS domain: members are addressed without it when none is configured,
/// but a peer's certificate is checked against the reverse DNS name of its address, which
/// always ends in the domain (Kubernetes' default when none is configured).
pub fn dns_names(leaf: Leaf, n: Names) -> Vec<String> {
    let domain = match n.domain.trim_matches('.') {
        "" => DEFAULT_CLUSTER_DOMAIN,
        d => d,
    };
    let with_domain = |base: String| vec![base.clone(), format!("{base}.{domain}")];
    let members = with_domain(format!("*.{}.{}.svc", n.cluster, n.namespace));
    match leaf.usage() {
        Use::Peer => members,
        Use::Server => {
            let svc = crate::naming::client_service(n.cluster);
            let mut v = members;
            v.push(svc.clone());
            v.push(format!("{svc}.{}", n.namespace));
            v.extend(with_domain(format!("{svc}.{}.svc", n.namespace)));
            v.push("localhost".into());
            v
        }
        Use::Client => vec![],
    }
}

/// A new CA for the cluster, valid from a little before `now` for `validity` seconds. Its name
/// carries the time of issue, so two CAs of one cluster never share a subject.
pub fn new_ca(n: Names, now: i64, validity: i64) -> Result<Issued, String> {
    let mut p = CertificateParams::new(Vec::<String>::new()).map_err(err("CA parameters"))?;
    let stamp = k8s_openapi::jiff::Timestamp::from_second(now)
        .map(|t| t.strftime("%Y%m%dT%H%M%SZ").to_string())
        .unwrap_or_else(|_| now.to_string());
    p.distinguished_name.push(DnType::CommonName, format!("etcd CA {}.{} {stamp}", n.cluster, n.namespace));
    p.distinguished_name.push(DnType::OrganizationName, crate::OPERATOR_NAME);
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    set_validity(&mut p, now - BACKDATE_SECS, now + validity);
    p.serial_number = Some(serial());
    let key = KeyPair::generate().map_err(err("CA key"))?;
    let cert = p.self_signed(&key).map_err(err("CA certificate"))?;
    Ok(Issued { cert_pem: cert.pem(), key: KeyPem(key.serialize_pem()) })
}

/// A certificate for `leaf` issued by `ca`, valid from a little before `now` for `validity`
/// seconds.
pub fn issue(leaf: Leaf, n: Names, ca: &Authority, now: i64, validity: i64) -> Result<Issued, String> {
    let ca_key = ca.key.as_ref().ok_or_else(|| format!("CA {} has no key here", ca.cert.subject))?;
    let ca_key = KeyPair::from_pem(&ca_key.0).map_err(err("CA key"))?;
    let ca_der = rustls::pki_types::CertificateDer::from(ca.cert.der.clone());
    let issuer = Issuer::from_ca_cert_der(&ca_der, ca_key).map_err(err("CA certificate"))?;
    let mut p = CertificateParams::new(dns_names(leaf, n)).map_err(err("certificate parameters"))?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, leaf.common_name());
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    // Server certificates may also be presented as client certificates (etcd's gRPC gateway
    // connects to its own member with them).
    p.extended_key_usages = match leaf.usage() {
        Use::Peer | Use::Server => vec![Eku::ServerAuth, Eku::ClientAuth],
        Use::Client => vec![Eku::ClientAuth],
    };
    p.use_authority_key_identifier_extension = true;
    set_validity(&mut p, now - BACKDATE_SECS, now + validity);
    p.serial_number = Some(serial());
    let key = KeyPair::generate().map_err(err("key"))?;
    let cert = p.signed_by(&key, &issuer).map_err(err("certificate"))?;
    Ok(Issued { cert_pem: cert.pem(), key: KeyPem(key.serialize_pem()) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::auto::state::{CertInfo, issuer_among, parse_ca};
    use crate::tls::{check, required_names};
    use std::collections::BTreeMap;

    const NOW: i64 = 1_900_000_000;
    const NAMES: Names = Names { cluster: "ex", namespace: "ns", domain: "cluster.local" };

    fn authority(i: &Issued) -> Authority {
        let cert = CertInfo::all_from_pem(i.cert_pem.as_bytes()).unwrap().remove(0);
        Authority { cert, key: Some(i.key.clone()) }
    }

    /// What the operator issues passes every check static material must pass (keys, names,
    /// key usages, validity, issuer), for every Secret: the static pipeline accepts it.
    #[test]
    fn issued_material_passes_the_static_checks() {
        let ca = new_ca(NAMES, NOW, 3600 * 24).unwrap();
        let a = authority(&ca);
        for leaf in Leaf::ALL {
            let l = issue(leaf, NAMES, &a, NOW, 600).unwrap();
            let keys = leaf.keys();
            let data = BTreeMap::from([
                (keys.cert.to_string(), l.cert_pem.clone().into_bytes()),
                (keys.key.to_string(), l.key.0.clone().into_bytes()),
                (keys.ca.to_string(), ca.cert_pem.clone().into_bytes()),
            ]);
            let names = required_names(leaf.usage(), "ex", "ns", "cluster.local");
            let r = check::secret("s", Some(&data), keys, leaf.usage(), &names, NOW);
            assert!(r.is_ok(), "{leaf:?}: {r:?}");
            assert!(check::issued_by(l.cert_pem.as_bytes(), ca.cert_pem.as_bytes()), "{leaf:?}");
            let info = CertInfo::all_from_pem(l.cert_pem.as_bytes()).unwrap().remove(0);
            assert_eq!((info.not_before, info.not_after), (NOW - BACKDATE_SECS, NOW + 600));
            assert_eq!(issuer_among(&info.der, &[&a.cert]), Some(a.cert.id.clone()));
        }
    }

    #[test]
    fn names_cover_members_and_the_client_service_and_clients_have_none() {
        assert_eq!(dns_names(Leaf::Peer, NAMES), ["*.ex.ns.svc", "*.ex.ns.svc.cluster.local"]);
        let server = dns_names(Leaf::Server, NAMES);
        for n in ["*.ex.ns.svc", "ex-client", "ex-client.ns", "ex-client.ns.svc", "ex-client.ns.svc.cluster.local"] {
            assert!(server.contains(&n.to_string()), "{n} in {server:?}");
        }
        assert!(dns_names(Leaf::Client, NAMES).is_empty());
        assert!(dns_names(Leaf::Operator, NAMES).is_empty());
        let no_domain = Names { domain: "", ..NAMES };
        assert_eq!(
            dns_names(Leaf::Peer, no_domain),
            ["*.ex.ns.svc", "*.ex.ns.svc.cluster.local"],
            "etcd checks a peer against its reverse DNS name, which has the domain"
        );
        let other = Names { domain: ".example.org", ..NAMES };
        assert_eq!(dns_names(Leaf::Peer, other), ["*.ex.ns.svc", "*.ex.ns.svc.example.org"]);
    }

    #[test]
    fn two_cas_never_share_a_subject_and_a_ca_secret_round_trips() {
        let (a, b) = (new_ca(NAMES, NOW, 7200).unwrap(), new_ca(NAMES, NOW + 1, 7200).unwrap());
        let (a, b) = (authority(&a), authority(&b));
        assert_ne!(a.cert.subject, b.cert.subject);
        let data = BTreeMap::from([
            ("ca.crt".to_string(), a.cert.pem().into_bytes()),
            ("ca.key".to_string(), a.key.clone().unwrap().0.into_bytes()),
        ]);
        let ca = parse_ca(&data, &BTreeMap::new(), None, "s").unwrap();
        assert_eq!(ca.signing.unwrap().cert, a.cert, "PEM written and read back is the same certificate");
        // A key that is not the certificate's is refused by name.
        let wrong = BTreeMap::from([
            ("ca.crt".to_string(), a.cert.pem().into_bytes()),
            ("ca.key".to_string(), b.key.unwrap().0.into_bytes()),
        ]);
        let e = parse_ca(&wrong, &BTreeMap::new(), None, "s").unwrap_err();
        assert_eq!(e, ["Secret s key ca.key does not belong to ca.crt"]);
    }

    #[test]
    fn a_ca_without_a_key_cannot_issue() {
        let a = authority(&new_ca(NAMES, NOW, 7200).unwrap());
        let keyless = Authority { key: None, ..a };
        assert!(issue(Leaf::Peer, NAMES, &keyless, NOW, 600).unwrap_err().contains("has no key"));
    }
}

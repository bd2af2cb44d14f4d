//! The TLS material of one cluster, read from its Secrets and checked before anything uses it
//! (I/O: Secret GETs; the decision in [`checked`] is pure). The operator's own etcd client
//! comes out of it as [`ClientTls`].

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;

use super::check::{self, Pems};
use super::{Policy, Use, required_names, server_name};

/// A client identity for etcd: the CA that checks the members' server certificates, the
/// client certificate and key, and the name the server certificates are checked against
/// (connections go to pod IPs).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub server_name: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// The etcd client's TLS settings; an empty `server_name` checks each URL's own host.
    pub fn options(&self) -> etcd_client::TlsOptions {
        let o = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&self.ca))
            .identity(etcd_client::Identity::from_pem(&self.cert, &self.key));
        if self.server_name.is_empty() { o } else { o.domain_name(self.server_name.clone()) }
    }

    /// A short digest of the material: cached connections made with other material are not
    /// reused.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for part in [&self.ca, &self.cert, &self.key, &self.server_name.as_bytes().to_vec()] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        hex::encode(&h.finalize()[..8])
    }

    /// From the PEM files a pod has mounted (`dir`, CoreOS client key names).
    pub fn from_dir(dir: &str, server_name: &str) -> std::io::Result<ClientTls> {
        let read = |k: &str| std::fs::read(format!("{dir}/{k}"));
        Ok(ClientTls {
            ca: read(super::CLIENT_KEYS.ca)?,
            cert: read(super::CLIENT_KEYS.cert)?,
            key: read(super::CLIENT_KEYS.key)?,
            server_name: server_name.to_string(),
        })
    }
}

/// A Secret's data as the checks take it; `None`: no such Secret.
pub type SecretData = Option<BTreeMap<String, Vec<u8>>>;

/// Reads the Secrets `p` names in `namespace`, checks them ([`checked`]) and returns the
/// operator's client identity when clients speak TLS. `Err`: every reason, naming the Secret,
/// the key or the missing name.
pub async fn load(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    cluster_domain: &str,
    p: &Policy,
) -> Result<Option<Arc<ClientTls>>, Vec<String>> {
    if p.is_off() {
        return Ok(None);
    }
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), namespace);
    let mut fetched = BTreeMap::new();
    for (name, _, _) in p.secrets() {
        let data = match api.get_opt(name).await {
            Ok(s) => s.map(|s| s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()),
            Err(e) => return Err(vec![format!("Secret {name} could not be read: {e}")]),
        };
        fetched.insert(name.to_string(), data);
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    checked(p, &fetched, cluster, namespace, cluster_domain, now).map(|c| c.map(Arc::new))
}

/// The decision of [`load`]: each Secret on its own ([`check::secret`]), then across them:
/// peers trust `peer-ca.crt` for `peer.crt`; the operator's CA must have issued the server
/// certificate and the server's CA the operator's certificate.
pub fn checked(
    p: &Policy,
    fetched: &BTreeMap<String, SecretData>,
    cluster: &str,
    namespace: &str,
    cluster_domain: &str,
    now: i64,
) -> Result<Option<ClientTls>, Vec<String>> {
    let mut errs = vec![];
    let mut ok: BTreeMap<&str, Pems> = BTreeMap::new();
    for (name, keys, usage) in p.secrets() {
        let names = required_names(usage, cluster, namespace, cluster_domain);
        match check::secret(name, fetched.get(name).and_then(|d| d.as_ref()), keys, usage, &names, now) {
            Ok(pems) => {
                ok.insert(
                    match usage {
                        Use::Peer => "peer",
                        Use::Server => "server",
                        Use::Client => "client",
                    },
                    pems,
                );
            }
            Err(e) => errs.extend(e),
        }
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    if let (Some(peer), Some(name)) = (ok.get("peer"), &p.peer_secret)
        && !check::issued_by(&peer.cert, &peer.ca)
    {
        errs.push(format!(
            "Secret {name}: {} is not issued by {} (peers check each other with it)",
            super::PEER_KEYS.cert,
            super::PEER_KEYS.ca
        ));
    }
    let mut client = None;
    if let (Some(server), Some(op), Some(c)) = (ok.get("server"), ok.get("client"), &p.client) {
        if !check::issued_by(&server.cert, &op.ca) {
            errs.push(format!(
                "Secret {}: {} is not issued by {} of Secret {} (the operator could not trust the members)",
                c.server_secret,
                super::SERVER_KEYS.cert,
                super::CLIENT_KEYS.ca,
                c.operator_secret
            ));
        }
        if !check::issued_by(&op.cert, &server.ca) {
            errs.push(format!(
                "Secret {}: {} is not issued by {} of Secret {} (the members would refuse the operator)",
                c.operator_secret,
                super::CLIENT_KEYS.cert,
                super::SERVER_KEYS.ca,
                c.server_secret
            ));
        }
        client = Some(ClientTls {
            ca: op.ca.clone(),
            cert: op.cert.clone(),
            key: op.key.clone(),
            server_name: server_name(cluster, namespace),
        });
    }
    if errs.is_empty() { Ok(client) } else { Err(errs) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::{CLIENT_KEYS, ClientSecrets, Keys, PEER_KEYS, SERVER_KEYS};
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair};

    struct Ca {
        issuer: Issuer<'static, KeyPair>,
        pem: String,
    }

    fn ca(name: &str) -> Ca {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = p.self_signed(&key).unwrap().pem();
        Ca { pem, issuer: Issuer::new(p, key) }
    }

    fn secret(keys: Keys, by: &Ca, trust: &Ca, sans: &[&str], eku: Eku) -> SecretData {
        let mut p = CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        p.extended_key_usages = vec![eku];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &by.issuer).unwrap();
        Some(BTreeMap::from([
            (keys.cert.to_string(), cert.pem().into_bytes()),
            (keys.key.to_string(), key.serialize_pem().into_bytes()),
            (keys.ca.to_string(), trust.pem.clone().into_bytes()),
        ]))
    }

    fn policy() -> Policy {
        Policy {
            peer_secret: Some("peer".into()),
            client: Some(ClientSecrets { server_secret: "server".into(), operator_secret: "op".into() }),
        }
    }

    /// The three Secrets; the operator's certificate issued by `client_by`.
    fn fetched(a: &Ca, client_by: &Ca) -> BTreeMap<String, SecretData> {
        BTreeMap::from([
            ("peer".into(), secret(PEER_KEYS, a, a, &["*.ex.ns.svc"], Eku::ServerAuth)),
            ("server".into(), secret(SERVER_KEYS, a, a, &["*.ex.ns.svc", "ex-client.ns.svc"], Eku::ServerAuth)),
            ("op".into(), secret(CLIENT_KEYS, client_by, a, &[], Eku::ClientAuth)),
        ])
    }

    #[test]
    fn consistent_material_gives_the_operator_its_identity() {
        let a = ca("a");
        let mut f = fetched(&a, &a);
        // The peer certificate needs clientAuth as well.
        f.insert("peer".into(), {
            let mut p = CertificateParams::new(vec!["*.ex.ns.svc".to_string()]).unwrap();
            p.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
            let key = KeyPair::generate().unwrap();
            let cert = p.signed_by(&key, &a.issuer).unwrap();
            Some(BTreeMap::from([
                ("peer.crt".to_string(), cert.pem().into_bytes()),
                ("peer.key".to_string(), key.serialize_pem().into_bytes()),
                ("peer-ca.crt".to_string(), a.pem.clone().into_bytes()),
            ]))
        });
        let c = checked(&policy(), &f, "ex", "ns", "", 1_900_000_000).unwrap().unwrap();
        assert_eq!(c.server_name, "ex-client.ns.svc");
        assert_eq!(c.ca, a.pem.as_bytes());
        assert!(format!("{c:?}").find("BEGIN").is_none(), "Debug never prints the material");
    }

    #[test]
    fn an_operator_certificate_from_another_ca_is_refused_naming_both_secrets() {
        let (a, b) = (ca("a"), ca("b"));
        let e = checked(&policy(), &fetched(&a, &b), "ex", "ns", "", 1_900_000_000).unwrap_err();
        assert!(e.iter().any(|m| m.contains("peer.crt: extended key usage lacks clientAuth")), "{e:?}");
        let mut f = fetched(&a, &b);
        f.insert("peer".into(), None);
        let e = checked(&policy(), &f, "ex", "ns", "", 1_900_000_000).unwrap_err();
        assert_eq!(e, ["Secret peer does not exist"], "single-Secret problems first");
        let p = Policy { peer_secret: None, ..policy() };
        let e = checked(&p, &fetched(&a, &b), "ex", "ns", "", 1_900_000_000).unwrap_err();
        assert_eq!(
            e,
            [
                "Secret op: etcd-client.crt is not issued by server-ca.crt of Secret server (the members would refuse the operator)"
            ]
        );
        assert!(checked(&Policy::default(), &BTreeMap::new(), "ex", "ns", "", 0).unwrap().is_none());
    }
}

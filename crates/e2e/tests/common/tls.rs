//! TLS material for e2e tests: a real CA and certificates made with rcgen, the three Secrets of
//! CoreOS' static TLS example, and a client that puts and reads through the client Service
//! over TLS (`tls`, `tls_switch`).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::TestNamespace;
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair};
use serde_json::Value;

pub struct Ca {
    pub issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

pub fn ca(name: &str) -> Result<Ca> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    Ok(Ca { pem: cert.pem(), issuer: Issuer::new(p, key) })
}

/// A certificate and key issued by `ca` for `sans` (DNS names) and key usages `eku`.
pub fn issue(ca: &Ca, cn: &str, sans: &[String], eku: &[Eku]) -> Result<(String, String)> {
    let mut p = CertificateParams::new(sans.to_vec())?;
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.extended_key_usages = eku.to_vec();
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &ca.issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

pub fn secret(ns: &str, name: &str, data: &[(&str, &str)]) -> String {
    let data: serde_json::Map<String, Value> = data.iter().map(|(k, v)| (k.to_string(), Value::from(*v))).collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "stringData": data,
    })
    .to_string()
}

/// The CoreOS example's three Secrets for cluster `cluster`, one CA for everything (as the
/// CoreOS example does). `server_sans` replaces the server certificate's names when given.
pub struct Material {
    pub ca: Ca,
    pub client: (String, String),
}

pub fn coreos_secrets(ns: &TestNamespace, cluster: &str, server_sans: Option<Vec<String>>) -> Result<Material> {
    let n = &ns.name;
    let ca = ca("etcd-ca")?;
    let peer_sans = vec![format!("*.{cluster}.{n}.svc"), format!("*.{cluster}.{n}.svc.{}", e2e::CLUSTER_DOMAIN)];
    let (peer, peer_key) = issue(&ca, "etcd peer", &peer_sans, &[Eku::ServerAuth, Eku::ClientAuth])?;
    let server_sans = server_sans.unwrap_or_else(|| {
        vec![
            format!("*.{cluster}.{n}.svc"),
            format!("*.{cluster}.{n}.svc.{}", e2e::CLUSTER_DOMAIN),
            format!("{cluster}-client.{n}.svc"),
            "localhost".into(),
        ]
    });
    let (server, server_key) = issue(&ca, "etcd server", &server_sans, &[Eku::ServerAuth])?;
    // No names: etcd checks a client certificate's DNS names against the client's address.
    let (client, client_key) = issue(&ca, "etcd client", &[], &[Eku::ClientAuth])?;
    ns.apply(&secret(n, "etcd-peer-tls", &[("peer.crt", &peer), ("peer.key", &peer_key), ("peer-ca.crt", &ca.pem)]))?;
    ns.apply(&secret(
        n,
        "etcd-server-tls",
        &[("server.crt", &server), ("server.key", &server_key), ("server-ca.crt", &ca.pem)],
    ))?;
    ns.apply(&secret(
        n,
        "etcd-client-tls",
        &[("etcd-client.crt", &client), ("etcd-client.key", &client_key), ("etcd-client-ca.crt", &ca.pem)],
    ))?;
    Ok(Material { ca, client: (client, client_key) })
}

pub const COREOS_TLS: &str = "  TLS:\n    static:\n      member:\n        peerSecret: etcd-peer-tls\n        serverSecret: etcd-server-tls\n      operatorSecret: etcd-client-tls\n";

/// The client Service's ClusterIP (reached from the host through kube-proxy).
pub fn client_ip(ns: &TestNamespace, cluster: &str) -> Result<String> {
    let svc = ns.json(&["get", "service", &format!("{cluster}-client")])?;
    Ok(svc["spec"]["clusterIP"].as_str().context("no clusterIP")?.to_string())
}

/// Puts `puts`, then reads every key under `prefix`, through the client Service over TLS;
/// `identity`: the client certificate and key to present, or none. The server certificate is
/// checked against the client Service's DNS name.
pub fn tls_kv(
    ns: &TestNamespace,
    cluster: &str,
    ca: &str,
    identity: Option<&(String, String)>,
    puts: &[(String, String)],
    prefix: &str,
) -> Result<Vec<(String, String)>> {
    use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
    let url = format!("https://{}:2379", client_ip(ns, cluster)?);
    let mut tls = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(format!("{cluster}-client.{}.svc", ns.name));
    if let Some((c, k)) = identity {
        tls = tls.identity(Identity::from_pem(c, k));
    }
    let opts = ConnectOptions::new()
        .with_tls(tls)
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(Duration::from_secs(5));
    super::put_then_list(&url, opts, puts, prefix)
}

/// A put and its read back over TLS.
pub fn put_get(
    ns: &TestNamespace,
    cluster: &str,
    ca: &str,
    identity: Option<&(String, String)>,
    key: &str,
) -> Result<()> {
    let got = tls_kv(ns, cluster, ca, identity, &[(key.to_string(), "v".to_string())], key)?;
    ensure!(got == [(key.to_string(), "v".to_string())], "read back {got:?}");
    Ok(())
}

pub fn keys(n: usize) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("keys/{i:03}"), format!("value-{i}"))).collect()
}

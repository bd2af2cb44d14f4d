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

/// The Secrets of cluster `cluster` in the CoreOS layouts below: `<cluster>-peer-tls`,
/// `<cluster>-server-tls`, `<cluster>-client-tls`, and its `spec.TLS` naming them.
pub fn layout_secrets(cluster: &str) -> [String; 3] {
    [format!("{cluster}-peer-tls"), format!("{cluster}-server-tls"), format!("{cluster}-client-tls")]
}

pub fn layout_tls_spec(cluster: &str) -> String {
    let [peer, server, client] = layout_secrets(cluster);
    format!(
        "  TLS:\n    static:\n      member:\n        peerSecret: {peer}\n        serverSecret: {server}\n      operatorSecret: {client}\n"
    )
}

/// What a client of a CoreOS layout needs: the CA bundle that checks the members (the operator
/// Secret's `etcd-client-ca.crt`) and a client certificate the members accept.
pub struct ClientMaterial {
    pub trust: String,
    pub client: (String, String),
}

/// A leaf as cfssl's profiles of CoreOS' `example/tls/certs/ca-config.json` make it: CA:FALSE,
/// digital signature and key encipherment, the profile's extended key usages. (Keys are
/// ECDSA P-256, rcgen's default, where cfssl made RSA 2048: nothing checked here depends on it.)
fn cfssl_leaf(ca: &Ca, cn: &str, hosts: &[String], eku: &[Eku]) -> Result<(String, String)> {
    let mut p = CertificateParams::new(hosts.to_vec())?;
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature, rcgen::KeyUsagePurpose::KeyEncipherment];
    p.extended_key_usages = eku.to_vec();
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &ca.issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// CoreOS' TLS guide (`example/tls/certs/gen-cert.sh` with its `*.json`) for `cluster`: one CA
/// ("My own CA"); `peer.json` hosts `*.<cluster>.<ns>.svc` and `*.<cluster>.<ns>.svc.cluster.local`
/// (profile peer: server and client auth); `server.json` hosts `*.<cluster>.<ns>.svc`,
/// `<cluster>-client.<ns>.svc`, `localhost` (profile server: server and client auth), no
/// cluster domain; `etcd-client.json` hosts `[""]` (profile client: client auth); the CA copied
/// to `peer-ca.crt`, `server-ca.crt` and `etcd-client-ca.crt`.
pub fn coreos_guide_secrets(ns: &TestNamespace, cluster: &str) -> Result<ClientMaterial> {
    let n = &ns.name;
    let ca = ca("My own CA")?;
    let both = [Eku::ServerAuth, Eku::ClientAuth];
    let peer_hosts = [format!("*.{cluster}.{n}.svc"), format!("*.{cluster}.{n}.svc.cluster.local")];
    let peer = cfssl_leaf(&ca, "etcd peer", &peer_hosts, &both)?;
    let server_hosts = [format!("*.{cluster}.{n}.svc"), format!("{cluster}-client.{n}.svc"), "localhost".into()];
    let server = cfssl_leaf(&ca, "etcd server", &server_hosts, &both)?;
    let client = cfssl_leaf(&ca, "etcd client", &[String::new()], &[Eku::ClientAuth])?;
    apply_layout(ns, cluster, (&peer, &ca.pem), (&server, &ca.pem), (&client, &ca.pem))?;
    Ok(ClientMaterial { trust: ca.pem, client })
}

/// As CoreOS' e2e `prepareKeyAndCert`: a self-signed CA certificate for `hosts` (key usages
/// certificate signing and digital signature; server and client auth).
fn coreos_e2e_cert(hosts: &[String]) -> Result<(String, String)> {
    let mut p = CertificateParams::new(hosts.to_vec())?;
    p.distinguished_name.push(rcgen::DnType::OrganizationName, "Etcd Operator Example");
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![Eku::ServerAuth, Eku::ClientAuth];
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// CoreOS' e2e TLS (`test/e2e/e2eutil/tls.go`, `PrepareTLS`) for `cluster`: the peer
/// certificate (`*.<cluster>.<ns>.svc`, `*.<cluster>.<ns>.svc.cluster.local`) is its own
/// `peer-ca.crt`; the members' server certificate (`*.<cluster>.<ns>.svc`,
/// `<cluster>-client.<ns>.svc`, `localhost`) is the operator Secret's `etcd-client-ca.crt`; the
/// operator's certificate (hosts `[""]`) is the member Secret's `server-ca.crt`: two CAs,
/// crossing over.
pub fn coreos_e2e_secrets(ns: &TestNamespace, cluster: &str) -> Result<ClientMaterial> {
    let n = &ns.name;
    let peer = coreos_e2e_cert(&[format!("*.{cluster}.{n}.svc"), format!("*.{cluster}.{n}.svc.cluster.local")])?;
    let server =
        coreos_e2e_cert(&[format!("*.{cluster}.{n}.svc"), format!("{cluster}-client.{n}.svc"), "localhost".into()])?;
    let operator = coreos_e2e_cert(&[String::new()])?;
    apply_layout(ns, cluster, (&peer, &peer.0), (&server, &operator.0), (&operator, &server.0))?;
    Ok(ClientMaterial { trust: server.0.clone(), client: operator })
}

type Files<'a> = (&'a (String, String), &'a str);

fn apply_layout(ns: &TestNamespace, cluster: &str, peer: Files, server: Files, client: Files) -> Result<()> {
    let n = &ns.name;
    let [peer_secret, server_secret, client_secret] = layout_secrets(cluster);
    let ((pc, pk), pca) = peer;
    ns.apply(&secret(n, &peer_secret, &[("peer.crt", pc), ("peer.key", pk), ("peer-ca.crt", pca)]))?;
    let ((sc, sk), sca) = server;
    ns.apply(&secret(n, &server_secret, &[("server.crt", sc), ("server.key", sk), ("server-ca.crt", sca)]))?;
    let ((cc, ck), cca) = client;
    ns.apply(&secret(
        n,
        &client_secret,
        &[("etcd-client.crt", cc), ("etcd-client.key", ck), ("etcd-client-ca.crt", cca)],
    ))?;
    Ok(())
}

/// `etcdctl put` then `get` through the client Service with the host's etcdctl (Go's TLS, as
/// CoreOS' users ran it), presenting `m`'s client certificate: the members accept it. The
/// server's certificate is not checked here: the host reaches the Service by IP, which Go
/// checks against IP names, and CoreOS' certificates have none (the operator checks the
/// members' certificate at every call: the cluster reaching health is that check).
pub fn etcdctl_put_get(ns: &TestNamespace, cluster: &str, m: &ClientMaterial, key: &str) -> Result<()> {
    let dir = std::env::temp_dir().join(e2e::unique_name("e2e-tls"));
    std::fs::create_dir_all(&dir)?;
    let file = |name: &str, text: &str| -> Result<String> {
        let p = dir.join(name);
        std::fs::write(&p, text)?;
        Ok(p.display().to_string())
    };
    let (ca, cert, key_file) =
        (file("ca.crt", &m.trust)?, file("client.crt", &m.client.0)?, file("client.key", &m.client.1)?);
    let endpoint = format!("https://{}:2379", client_ip(ns, cluster)?);
    let tls = [
        format!("--cacert={ca}"),
        format!("--cert={cert}"),
        format!("--key={key_file}"),
        "--insecure-skip-tls-verify".to_string(),
    ];
    let args =
        |extra: &[&str]| -> Vec<String> { tls.iter().cloned().chain(extra.iter().map(|s| s.to_string())).collect() };
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        e2e::host_etcdctl(&endpoint, &a)
    };
    let result = (|| {
        run(args(&["put", key, "v"]))?;
        let got = run(args(&["get", key, "--print-value-only"]))?;
        ensure!(got.trim() == "v", "read back {got:?}");
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

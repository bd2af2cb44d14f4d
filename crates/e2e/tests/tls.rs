//! CoreOS `spec.TLS.static` on the real local cluster: a real CA (rcgen) and the three Secrets
//! of the CoreOS example; members speak TLS to each other and to clients, which need a
//! certificate from the cluster's CA; the operator resizes over TLS; an EtcdBackup with
//! `clientTLSSecret` backs the cluster up to S3 (moto). Bad material is refused with the reason
//! and nothing starts.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, wait_until};
use rcgen::{CertificateParams, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair};
use serde_json::Value;

/// The example leaves `version` empty: the default.
const VERSION: &str = "3.6.15";
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tls/example-tls-cluster.yaml");

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(name: &str) -> Result<Ca> {
    let mut p = CertificateParams::new(Vec::<String>::new())?;
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    Ok(Ca { pem: cert.pem(), issuer: Issuer::new(p, key) })
}

/// A certificate and key issued by `ca` for `sans` (DNS names) and key usages `eku`.
fn issue(ca: &Ca, cn: &str, sans: &[String], eku: &[Eku]) -> Result<(String, String)> {
    let mut p = CertificateParams::new(sans.to_vec())?;
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.extended_key_usages = eku.to_vec();
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &ca.issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn secret(ns: &str, name: &str, data: &[(&str, &str)]) -> String {
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
struct Material {
    ca: Ca,
    client: (String, String),
}

fn coreos_secrets(ns: &TestNamespace, cluster: &str, server_sans: Option<Vec<String>>) -> Result<Material> {
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

const COREOS_TLS: &str = "  TLS:\n    static:\n      member:\n        peerSecret: etcd-peer-tls\n        serverSecret: etcd-server-tls\n      operatorSecret: etcd-client-tls\n";

/// The client Service's ClusterIP (reached from the host through kube-proxy).
fn client_ip(ns: &TestNamespace, cluster: &str) -> Result<String> {
    let svc = ns.json(&["get", "service", &format!("{cluster}-client")])?;
    Ok(svc["spec"]["clusterIP"].as_str().context("no clusterIP")?.to_string())
}

/// Puts `puts`, then reads every key under `prefix`, through the client Service over TLS;
/// `identity`: the client certificate and key to present, or none. The server certificate is
/// checked against the client Service's DNS name.
fn tls_kv(
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
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let opts = ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(5));
        let mut c = Client::connect([url.as_str()], Some(opts)).await?;
        for (k, v) in puts {
            c.put(k.as_str(), v.as_str(), None).await?;
        }
        let r = c.get(prefix, Some(GetOptions::new().with_prefix())).await?;
        Ok(r.kvs()
            .iter()
            .map(|kv| (kv.key_str().unwrap_or("").to_string(), kv.value_str().unwrap_or("").to_string()))
            .collect())
    })
}

/// A put and its read back over TLS.
fn put_get(ns: &TestNamespace, cluster: &str, ca: &str, identity: Option<&(String, String)>, key: &str) -> Result<()> {
    let got = tls_kv(ns, cluster, ca, identity, &[(key.to_string(), "v".to_string())], key)?;
    ensure!(got == [(key.to_string(), "v".to_string())], "read back {got:?}");
    Ok(())
}

fn keys(n: usize) -> Vec<(String, String)> {
    (0..n).map(|i| (format!("keys/{i:03}"), format!("value-{i}"))).collect()
}

#[test]
fn static_tls_cluster_needs_client_certificates_resizes_and_backs_up() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-tls", |ns, _op| {
        let m = coreos_secrets(ns, "example", None)?;
        ns.run(&["apply", "-f", EXAMPLE])?;
        let c = wait_healthy(ns, "example", 3, CREATE)?;
        ensure!(c["status"]["currentVersion"] == VERSION, "{}", c["status"]["currentVersion"]);

        // Peers and clients speak TLS: the URLs etcd itself reports are https.
        let pods = member_pods(ns, "example")?;
        let cmd = pods[0]["spec"]["containers"][0]["command"].to_string();
        ensure!(cmd.contains("--peer-client-cert-auth=true") && cmd.contains("--client-cert-auth=true"), "{cmd}");
        ensure!(
            cmd.contains("--listen-peer-urls=https://") && cmd.contains("--advertise-client-urls=https://"),
            "{cmd}"
        );

        // A client with the certificate writes and reads; one without is refused.
        wait_until(Duration::from_secs(30), "a put over TLS with the client certificate", || {
            Ok(put_get(ns, "example", &m.ca.pem, Some(&m.client), "tls/with-cert").ok())
        })?;
        let refused = put_get(ns, "example", &m.ca.pem, None, "tls/without-cert");
        ensure!(refused.is_err(), "a client without a certificate was served");
        let other = ca("another-ca")?;
        let stranger = issue(&other, "stranger", &[], &[Eku::ClientAuth])?;
        ensure!(
            put_get(ns, "example", &m.ca.pem, Some(&stranger), "tls/stranger").is_err(),
            "a client certificate from another CA was accepted"
        );

        // The operator resizes over TLS (learner, promote, move leader, remove: every call
        // with its certificate).
        patch_spec(ns, "example", r#"{"size":5}"#)?;
        wait_healthy(ns, "example", 5, Duration::from_secs(240))?;
        patch_spec(ns, "example", r#"{"size":3}"#)?;
        wait_healthy(ns, "example", 3, Duration::from_secs(240))?;
        tls_kv(ns, "example", &m.ca.pem, Some(&m.client), &keys(KEYS), "keys/")?;

        // An S3 backup with clientTLSSecret (the backup pod connects with it).
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        let storage = storage_block(&moto, "example/etcd.backup", "creds");
        let manifest = backup_manifest(&ns.name, "tls-backup", "example", "S3", &storage, "")
            + "  clientTLSSecret: etcd-client-tls\n";
        ns.apply(&manifest)?;
        let b = wait_backup_succeeded(ns, "tls-backup")?;
        ensure!(b["status"]["etcdRevision"].as_i64().unwrap_or(0) >= 3, "{}", b["status"]);
        let data = moto.get_object(BUCKET, "example/etcd.backup")?;
        ensure!(sha256_hex(&data)? == b["status"]["sha256"].as_str().unwrap_or_default(), "stored sha256 differs");

        // Restored as a TLS cluster (restored members start with https peer URLs): every key.
        delete_cluster(ns, "example")?;
        let tls_spec: String = COREOS_TLS.lines().map(|l| format!("    {l}\n")).collect();
        ns.apply(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: back, namespace: {}}}\nspec:\n  backupStorageType: S3\n  {storage}\n  etcdCluster:\n    name: example\n    spec:\n      size: 3\n      version: \"{VERSION}\"\n{tls_spec}",
            ns.name
        ))?;
        wait_until(RESTORE, "EtcdRestore to succeed", || {
            let r = get(ns, "etcdrestore", "back")?;
            ensure!(r["status"]["phase"] != "Failed", "restore failed: {}", r["status"]);
            Ok((r["status"]["succeeded"] == true).then_some(()))
        })?;
        wait_healthy(ns, "example", 3, CREATE)?;
        let got = wait_until(Duration::from_secs(30), "the restored keys over TLS", || {
            Ok(tls_kv(ns, "example", &m.ca.pem, Some(&m.client), &[], "keys/").ok())
        })?;
        ensure!(got == keys(KEYS), "restored {} of {KEYS} keys", got.len());
        let pods = member_pods(ns, "example")?;
        let initial = pods[0]["spec"]["containers"][0]["command"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|a| a.starts_with("--initial-cluster="))
            .context("no --initial-cluster")?
            .to_string();
        ensure!(initial.matches("=https://").count() == 3 && !initial.contains("http://"), "{initial}");
        Ok(())
    })
}

#[test]
fn bad_tls_material_is_refused_with_the_reason_and_nothing_starts() -> Result<()> {
    with_operator("e2e-tls-bad", |ns, _op| {
        let n = ns.name.clone();
        // The server certificate lacks the client Service's name.
        coreos_secrets(ns, "example", Some(vec![format!("*.example.{n}.svc")]))?;
        // And the peer Secret lacks its key.
        ns.run(&[
            "patch",
            "secret",
            "etcd-peer-tls",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/peer.key"}]"#,
        ])?;
        ns.apply(&cluster_manifest(&n, "example", 3, VERSION, COREOS_TLS))?;
        let c = wait_until(Duration::from_secs(60), "SpecValid=False", || {
            let c = cluster(ns, "example")?;
            Ok(condition(&c, "SpecValid").filter(|x| x["status"] == "False").cloned())
        })?;
        let msg = c["message"].as_str().unwrap_or_default().to_string();
        ensure!(msg.contains("Secret etcd-peer-tls lacks key peer.key"), "{msg}");
        ensure!(
            msg.contains(&format!(
                "Secret etcd-server-tls key server.crt: does not cover DNS name example-client.{n}.svc"
            )),
            "{msg}"
        );
        let evs = e2e_events(ns, "EtcdCluster", "example")?;
        ensure!(evs.iter().any(|(r, note)| r == "InvalidSpec" && note.contains("lacks key peer.key")), "{evs:?}");
        // Nothing started: no pod, no Service (checked after a few more reconciles).
        std::thread::sleep(Duration::from_secs(3));
        ensure!(member_pods(ns, "example")?.is_empty(), "member pods were created");
        let svcs = ns.run(&["get", "services", "-o", "name"])?;
        ensure!(svcs.trim().is_empty(), "Services were created: {svcs}");
        Ok(())
    })
}

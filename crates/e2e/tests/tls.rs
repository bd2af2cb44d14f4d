//! CoreOS `spec.TLS.static` on the real local cluster: a real CA (rcgen) and the three Secrets
//! of the CoreOS example; members speak TLS to each other and to clients, which need a
//! certificate from the cluster's CA; the operator resizes over TLS; an EtcdBackup with
//! `clientTLSSecret` backs the cluster up to S3 (moto). Bad material is refused with the reason
//! and nothing starts.

mod common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::backups::*;
use common::tls::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::wait_until;
use rcgen::ExtendedKeyUsagePurpose as Eku;
use serde_json::Value;

/// The example leaves `version` empty: the default.
const VERSION: &str = "3.6.15";
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tls/example-tls-cluster.yaml");

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

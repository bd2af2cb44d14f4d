//! `spec.TLS.certManager` on the real local cluster, with cert-manager's own controllers
//! running in it (`CERT_MANAGER=1 hack/cluster.sh up`): a CA Issuer signs; the operator makes
//! the four Certificates, takes the issuer's CA and copies what cert-manager issued into the
//! Secrets members mount. A renewal forced as `cmctl renew` does is served by every member with
//! no restart; the issuer's CA replaced by another is brought in by a CA rotation that restarts
//! every member twice, the operator asking cert-manager to renew what is still of the old CA.
//! A TLS writer through the client Service runs through both, with no failed write.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::backups::CREATE;
use common::tls_clients::*;
use common::*;
use e2e::{TestNamespace, wait_until};

const VERSION: &str = "3.6.15";

/// cert-manager must run in the cluster: its API served, its controller available.
fn require_cert_manager(ns: &TestNamespace) -> Result<()> {
    let groups = ns.run(&["api-resources", "--api-group=cert-manager.io", "-o", "name"]).unwrap_or_default();
    ensure!(
        groups.lines().any(|l| l.starts_with("certificates.")),
        "cert-manager is not installed in this cluster (no cert-manager.io Certificates served): bring the local cluster up with CERT_MANAGER=1 hack/cluster.sh up (hack/test.sh does)"
    );
    Ok(())
}

/// A self-signed Issuer, a CA Certificate from it (Secret `secret`), and the CA Issuer `ca`
/// signing with that Secret: the way cert-manager's documentation sets up a private CA.
fn ca_issuers(ns: &str, ca_cert: &str) -> String {
    format!(
        r#"apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {{name: selfsigned, namespace: {ns}}}
spec: {{selfSigned: {{}}}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {{name: {ca_cert}, namespace: {ns}}}
spec:
  isCA: true
  commonName: {ca_cert}
  secretName: {ca_cert}
  privateKey: {{algorithm: ECDSA, size: 256}}
  issuerRef: {{name: selfsigned, kind: Issuer, group: cert-manager.io}}
"#
    )
}

fn ca_issuer(ns: &str, secret: &str) -> String {
    format!(
        "apiVersion: cert-manager.io/v1\nkind: Issuer\nmetadata: {{name: ca, namespace: {ns}}}\nspec:\n  ca: {{secretName: {secret}}}\n"
    )
}

fn wait_ready(ns: &TestNamespace, kind: &str, name: &str) -> Result<()> {
    wait_until(Duration::from_secs(120), &format!("{kind} {name} Ready"), || {
        let o = ns.json(&["get", kind, name])?;
        Ok((cond_str(&o, "Ready", "status") == "True").then_some(()))
    })
}

/// Asks cert-manager to issue a Certificate again, as `cmctl renew` does.
fn renew(ns: &TestNamespace, certificate: &str) -> Result<()> {
    let patch = serde_json::json!({"status": {"conditions": [{"type": "Issuing", "status": "True",
        "reason": "ManuallyTriggered", "message": "renewal forced by the e2e test"}]}});
    ns.run(&["patch", "certificate", certificate, "--subresource=status", "--type=merge", "-p", &patch.to_string()])?;
    Ok(())
}

fn secret_cert(ns: &TestNamespace, secret: &str, key: &str) -> Result<String> {
    secret_data(ns, secret)?.remove(key).with_context(|| format!("Secret {secret} lacks {key}"))
}

#[test]
fn cert_manager_certificates_are_served_renewed_and_their_new_ca_rolled_in_under_writes() -> Result<()> {
    with_operator("e2e-tls-cm", |ns, _op| {
        require_cert_manager(ns)?;
        ns.apply(&ca_issuers(&ns.name, "ca-a"))?;
        wait_ready(ns, "certificate", "ca-a")?;
        ns.apply(&ca_issuer(&ns.name, "ca-a"))?;
        wait_ready(ns, "issuer", "ca")?;
        let ca_a = secret_cert(ns, "ca-a", "tls.crt")?;

        let tls = "  TLS:\n    certManager:\n      issuerRef: {name: ca}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, tls))?;
        let c = wait_healthy(ns, "ex", 3, CREATE)?;
        eprintln!("CertificatesReady: {}", cond_str(&c, "CertificatesReady", "message"));
        // Issuance is waited for, not reported as a refused spec (the Secrets members mount do
        // not exist until cert-manager issued and the operator copied).
        let refused: Vec<String> =
            events_v1(ns, "ex")?.into_iter().filter(|e| e.reason == "InvalidSpec").map(|e| e.note).collect();
        ensure!(refused.is_empty(), "the spec was refused while cert-manager issued: {refused:?}");
        for leaf in ["peer", "server", "operator", "client"] {
            let cert = ns.json(&["get", "certificate", &format!("ex-cm-{leaf}")])?;
            ensure!(cert["metadata"]["ownerReferences"][0]["name"] == "ex", "ex-cm-{leaf} is not the cluster's");
            ensure!(cert["spec"]["issuerRef"]["name"] == "ca", "ex-cm-{leaf}: {}", cert["spec"]);
            // cert-manager leaves its Secrets behind; the operator makes them the cluster's.
            let secret = ns.json(&["get", "secret", &format!("ex-cm-{leaf}")])?;
            let owners = secret["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
            ensure!(owners.iter().any(|o| o["name"] == "ex"), "Secret ex-cm-{leaf} is not the cluster's: {owners:?}");
        }
        // The CA Secret holds the issuer's CA and no key; members mount what cert-manager issued.
        let ca = secret_data(ns, "ex-tls-ca")?;
        ensure!(ca["ca.crt"].trim() == ca_a.trim(), "the CA Secret does not hold the issuer's CA");
        ensure!(!ca.contains_key("ca.key"), "the CA Secret holds a key");
        ensure!(
            secret_cert(ns, "ex-tls-server", "server.crt")? == secret_cert(ns, "ex-cm-server", "tls.crt")?,
            "the server Secret is not cert-manager's certificate"
        );
        let user = client_files(ns, "ex")?;
        wait_until(Duration::from_secs(60), "a put with the client Secret's certificate", || {
            Ok(put_get(ns, "ex", tls_options(ns, "ex", &user, true), "cm/with-cert").ok())
        })?;
        ensure!(
            put_get(ns, "ex", tls_options(ns, "ex", &user, false), "cm/without-cert").is_err(),
            "a client without a certificate was served"
        );
        let before = served_by_members(ns, "ex", &user)?;
        for (pod, (client, peer)) in &before {
            ensure!(probe::issued_by(client, &ca_a) && probe::issued_by(peer, &ca_a), "{pod} serves a stranger");
        }

        // A renewal forced as `cmctl renew` does: copied, served by every member, no restart.
        let uids = pod_uids(ns, "ex")?;
        let writer = TlsWriter::start(ns, "ex")?;
        let t0 = Instant::now();
        renew(ns, "ex-cm-server")?;
        renew(ns, "ex-cm-peer")?;
        wait_until(Duration::from_secs(300), "every member serving the renewed certificates", || {
            writer.refresh(ns, "ex");
            let now = served_by_members(ns, "ex", &user)?;
            Ok(now.iter().all(|(pod, (c, p))| before.get(pod).is_some_and(|(c0, p0)| c != c0 && p != p0)).then_some(()))
        })?;
        eprintln!("renewal served by every member after {:.0}s", t0.elapsed().as_secs_f64());
        ensure!(pod_uids(ns, "ex")? == uids, "a renewal restarted or replaced a member");

        // The issuer's CA replaced: a new CA Certificate, the Issuer pointed at it, one
        // certificate renewed from it. The operator rotates: members trust both, take the new
        // certificates (asking cert-manager for the rest), then drop the old CA.
        ns.apply(&ca_issuers(&ns.name, "ca-b"))?;
        wait_ready(ns, "certificate", "ca-b")?;
        let ca_b = secret_cert(ns, "ca-b", "tls.crt")?;
        ns.apply(&ca_issuer(&ns.name, "ca-b"))?;
        renew(ns, "ex-cm-server")?;
        let t1 = Instant::now();
        wait_until(Duration::from_secs(1200), "the CA rotation to finish", || {
            writer.refresh(ns, "ex");
            Ok(events_v1(ns, "ex")?.iter().any(|e| e.reason == "CARotationFinished").then_some(()))
        })?;
        eprintln!("CA rotation took {:.0}s", t1.elapsed().as_secs_f64());
        let steps = ["CARotationStarted", "CARotationReissuing", "CARotationDroppingOldCA", "CARotationFinished"];
        let evs: Vec<EventRecord> =
            events_v1(ns, "ex")?.into_iter().filter(|e| steps.contains(&e.reason.as_str())).collect();
        for e in &evs {
            eprintln!("{} {}: {}", e.last, e.reason, e.note);
        }
        let reasons: Vec<&str> = evs.iter().map(|e| e.reason.as_str()).collect();
        ensure!(reasons == steps, "{reasons:?}");
        ensure!(secret_data(ns, "ex-tls-ca")?["ca.crt"].trim() == ca_b.trim(), "the CA Secret is not the new CA");
        let new = client_files(ns, "ex")?;
        ensure!(new.ca.trim() == ca_b.trim(), "the client Secret's bundle is not the new CA alone");
        let all = wait_until(Duration::from_secs(180), "every member serving certificates of the new CA", || {
            let now = served_by_members(ns, "ex", &new)?;
            Ok(now.values().all(|(c, p)| probe::issued_by(c, &ca_b) && probe::issued_by(p, &ca_b)).then_some(now))
        })?;
        for (pod, (client, peer)) in &all {
            eprintln!("{pod}: client {}, peer {}", probe::describe(client), probe::describe(peer));
        }
        // Every member restarted (emptyDir members come back as new pods) and 3 serve.
        let now = pod_uids(ns, "ex")?;
        ensure!(
            now.len() == 3 && now.keys().all(|p| !uids.contains_key(p) || uids[p].0 != now[p].0),
            "{uids:?} -> {now:?}"
        );
        put_get(ns, "ex", tls_options(ns, "ex", &new, true), "cm/after")?;
        writer.finish(ns, "ex")?;
        Ok(())
    })
}

/// Without cert-manager's API the cluster is refused with the reason, and nothing is made.
/// (Run where cert-manager is installed, this checks the refusal of an issuer that does not
/// exist instead: the Certificates wait, the reason is cert-manager's, and no member starts.)
#[test]
fn a_missing_issuer_leaves_the_cluster_waiting_with_cert_managers_reason() -> Result<()> {
    with_operator("e2e-tls-cm-bad", |ns, _op| {
        require_cert_manager(ns)?;
        let tls = "  TLS:\n    certManager:\n      issuerRef: {name: nowhere}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, tls))?;
        let c = wait_until(Duration::from_secs(120), "CertificatesReady saying what cert-manager waits for", || {
            let c = ns.json(&["get", "etcdcluster", "ex"])?;
            let m = cond_str(&c, "CertificatesReady", "message");
            Ok(m.contains("waiting for cert-manager").then_some(c))
        })?;
        eprintln!("CertificatesReady: {}", cond_str(&c, "CertificatesReady", "message"));
        ensure!(member_pods(ns, "ex")?.is_empty(), "members started without certificates");
        Ok(())
    })
}

//! `spec.TLS.auto` on the real local cluster: the operator makes the CA and every certificate;
//! a client without a certificate is refused, one with the cluster's client Secret served.
//! Certificates are renewed under a continuous writer with no failed write and no member
//! restarted (etcd reads certificate files at each handshake); a CA rotation (forced with the
//! `rotate-ca` annotation) restarts members one at a time, twice, with no failed write either.
//! What each member serves is read by a TLS handshake on its client and peer port.

mod common;

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use common::backups::CREATE;
use common::tls_clients::*;
use common::*;
use e2e::{TestNamespace, wait_until};

const VERSION: &str = "3.6.15";

/// The cluster is planned under `TLS.auto`: its spec has it, or (when the API server dropped
/// it: the CRDs are cluster-wide, and an operator of another version that installs its own
/// without the field makes the API server prune it) the last valid spec the operator recorded
/// does, and the operator keeps planning under that one.
fn check_spec_kept(ns: &TestNamespace, cluster: &str) -> Result<()> {
    let c = ns.json(&["get", "etcdcluster", cluster])?;
    if c["spec"]["TLS"].get("auto").is_some() {
        return Ok(());
    }
    let last = c["metadata"]["annotations"]["etcd.database.coreos.com/last-valid-spec"].as_str().unwrap_or("");
    let last: serde_json::Value = serde_json::from_str(last).unwrap_or_default();
    ensure!(
        last["TLS"].get("auto").is_some(),
        "spec.TLS.auto is gone from EtcdCluster {cluster} ({}) and from its last valid spec ({last}): the installed CRD lacks it; did an operator of another version install its CRDs meanwhile?",
        c["spec"]
    );
    eprintln!(
        "note: the API server dropped spec.TLS.auto (another CRD version was installed); the operator plans under its last valid spec {last}"
    );
    Ok(())
}

/// Every Secret the operator made is owned by the cluster (deleted with it).
fn check_owned_secrets(ns: &TestNamespace, cluster: &str) -> Result<()> {
    for s in ["ca", "peer", "server", "operator", "client"] {
        let name = format!("{cluster}-tls-{s}");
        let obj = ns.json(&["get", "secret", &name])?;
        let owner = &obj["metadata"]["ownerReferences"][0];
        ensure!(owner["kind"] == "EtcdCluster" && owner["name"] == cluster, "{name} owner: {owner}");
    }
    Ok(())
}

#[test]
fn auto_tls_refuses_clients_without_its_certificate_and_renews_every_member_without_restarts() -> Result<()> {
    with_operator("e2e-tls-auto", |ns, _op| {
        // Certificates live 10 minutes and are renewed with 8 left: every 2 minutes.
        let tls = "  TLS:\n    auto:\n      validity: 10m\n      renewBefore: 8m\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, tls))?;
        check_spec_kept(ns, "ex")?;
        let c = wait_healthy(ns, "ex", 3, CREATE)?;
        check_spec_kept(ns, "ex")?;
        ensure!(
            cond_str(&c, "CertificatesReady", "type") == "CertificatesReady",
            "no CertificatesReady: {}",
            c["status"]
        );
        check_owned_secrets(ns, "ex")?;
        let pods = member_pods(ns, "ex")?;
        let cmd = pods[0]["spec"]["containers"][0]["command"].to_string();
        ensure!(cmd.contains("--client-cert-auth=true") && cmd.contains("--peer-client-cert-auth=true"), "{cmd}");
        ensure!(cmd.contains("--advertise-client-urls=https://"), "{cmd}");

        // A client with the client Secret is served; one without a certificate is refused.
        let user = client_files(ns, "ex")?;
        wait_until(Duration::from_secs(60), "a put with the client Secret's certificate", || {
            Ok(put_get(ns, "ex", tls_options(ns, "ex", &user, true), "tls/with-cert").ok())
        })?;
        ensure!(
            put_get(ns, "ex", tls_options(ns, "ex", &user, false), "tls/without-cert").is_err(),
            "a client without a certificate was served"
        );

        let before = served_by_members(ns, "ex", &user)?;
        for (pod, (client, peer)) in &before {
            ensure!(probe::issued_by(client, &user.ca) && probe::issued_by(peer, &user.ca), "{pod} serves a stranger");
            eprintln!("{pod}: client {}, peer {}", probe::describe(client), probe::describe(peer));
        }
        let uids = pod_uids(ns, "ex")?;
        let writer = TlsWriter::start(ns, "ex")?;
        let t0 = Instant::now();
        let after =
            wait_until(Duration::from_secs(420), "every member serving renewed certificates on both ports", || {
                writer.refresh(ns, "ex");
                let now = served_by_members(ns, "ex", &user)?;
                let renewed =
                    now.iter().all(|(pod, (c, p))| before.get(pod).is_some_and(|(c0, p0)| c != c0 && p != p0));
                Ok(renewed.then_some(now))
            })?;
        eprintln!("renewed on every member {:.0}s after the writer started", t0.elapsed().as_secs_f64());
        for (pod, (client, peer)) in &after {
            let (c0, p0) = &before[pod];
            eprintln!(
                "{pod}: client {} (was {}), peer {}",
                probe::describe(client),
                probe::describe(c0),
                probe::describe(peer)
            );
            ensure!(probe::not_after(client) > probe::not_after(c0) && probe::not_after(peer) > probe::not_after(p0));
            ensure!(
                probe::issued_by(client, &user.ca) && probe::issued_by(peer, &user.ca),
                "{pod}: not the cluster's CA"
            );
        }
        check_spec_kept(ns, "ex")?;
        ensure!(pod_uids(ns, "ex")? == uids, "a renewal restarted or replaced a member");
        let events = events_v1(ns, "ex")?;
        ensure!(events.iter().any(|e| e.reason == "CertificatesWritten"), "no CertificatesWritten Event");
        writer.finish(ns, "ex")?;
        Ok(())
    })
}

#[test]
fn auto_tls_rotates_the_ca_one_member_at_a_time_under_writes() -> Result<()> {
    with_operator("e2e-tls-ca", |ns, _op| {
        let spec = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 1Gi}}\n  TLS:\n    auto: {}\n";
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, spec))?;
        check_spec_kept(ns, "ex")?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let old = client_files(ns, "ex")?;
        let old_ca = secret_data(ns, "ex-tls-ca")?["ca.crt"].clone();
        wait_until(Duration::from_secs(60), "a put with the client Secret's certificate", || {
            Ok(put_get(ns, "ex", tls_options(ns, "ex", &old, true), "tls/before").ok())
        })?;
        let uids = pod_uids(ns, "ex")?;
        let writer = TlsWriter::start(ns, "ex")?;
        let t0 = Instant::now();
        ns.run(&["annotate", "etcdcluster", "ex", "etcd.database.coreos.com/rotate-ca=e2e-1"])?;
        wait_until(Duration::from_secs(1200), "the CA rotation to finish", || {
            writer.refresh(ns, "ex");
            Ok(events_v1(ns, "ex")?.iter().any(|e| e.reason == "CARotationFinished").then_some(()))
        })?;
        eprintln!("CA rotation took {:.0}s", t0.elapsed().as_secs_f64());
        check_spec_kept(ns, "ex")?;
        // The phases, from the Event each write of the CA Secret's phase publishes: introducing,
        // reissuing, dropping, done; the Secret is back to one CA and no phase.
        let steps = ["CARotationStarted", "CARotationReissuing", "CARotationDroppingOldCA", "CARotationFinished"];
        let evs: Vec<EventRecord> =
            events_v1(ns, "ex")?.into_iter().filter(|e| steps.contains(&e.reason.as_str())).collect();
        for e in &evs {
            eprintln!("{} {}: {}", e.last, e.reason, e.note);
        }
        let reasons: Vec<&str> = evs.iter().map(|e| e.reason.as_str()).collect();
        ensure!(reasons == steps, "{reasons:?}");
        let ca = ns.json(&["get", "secret", "ex-tls-ca"])?;
        let phase = &ca["metadata"]["annotations"]["etcd.database.coreos.com/ca-rotation"];
        ensure!(phase.as_str().is_none_or(str::is_empty), "the CA Secret is still in phase {phase}");

        // Every member serves certificates of the new CA only, and trusts only it.
        let new_ca = secret_data(ns, "ex-tls-ca")?["ca.crt"].clone();
        ensure!(new_ca != old_ca, "the CA did not change");
        let new = client_files(ns, "ex")?;
        ensure!(new.ca.trim() == new_ca.trim(), "the client Secret's bundle is not the new CA alone");
        for (pod, (client, peer)) in served_by_members(ns, "ex", &new)? {
            eprintln!("{pod}: client {}, peer {}", probe::describe(&client), probe::describe(&peer));
            ensure!(probe::issued_by(&client, &new_ca) && probe::issued_by(&peer, &new_ca), "{pod}: not the new CA");
            ensure!(!probe::issued_by(&client, &old_ca) && !probe::issued_by(&peer, &old_ca), "{pod}: the old CA");
        }
        ensure!(
            put_get(
                ns,
                "ex",
                tls_options(ns, "ex", &ClientFiles { ca: new.ca.clone(), ..old.clone() }, true),
                "tls/old"
            )
            .is_err(),
            "a client certificate of the old CA is still accepted"
        );
        put_get(ns, "ex", tls_options(ns, "ex", &new, true), "tls/new")?;
        // Members restarted on their volumes (PVC members keep their names).
        let now = pod_uids(ns, "ex")?;
        ensure!(now.keys().eq(uids.keys()), "members changed: {uids:?} -> {now:?}");
        ensure!(now.iter().all(|(p, (uid, _))| uids[p].0 != *uid), "a member was never restarted: {uids:?} -> {now:?}");
        writer.finish(ns, "ex")?;
        Ok(())
    })
}

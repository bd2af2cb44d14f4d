//! `spec.TLS.static` with certificates made as CoreOS' users made them (issue 25), on the real
//! local cluster: CoreOS' TLS guide (one CA, server names without the cluster domain) and
//! CoreOS' e2e layout (every certificate its own CA, the two sides trusting each other's
//! certificate) reach three healthy members under an operator that knows the cluster domain
//! (in a pod with `E2E_OPERATOR=in-cluster`, or told with `--cluster-domain`, or set in
//! `spec.pod.ClusterDomain`); a static CA is rotated bundle first under a writer through the
//! client Service with no failed write and no quorum loss.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use common::backups::CREATE;
use common::tls::*;
use common::writer::*;
use common::*;
use e2e::{TestNamespace, wait_until};
use etcd_client::{Certificate, Identity, TlsOptions};
use rcgen::ExtendedKeyUsagePurpose as Eku;
use serde_json::Value;

const VERSION: &str = "3.6.15";

/// The hosts of the members' peer URLs, as their pods' etcd command lines advertise them.
fn advertised_hosts(ns: &TestNamespace, cluster: &str) -> Result<Vec<String>> {
    member_pods(ns, cluster)?
        .iter()
        .map(|p| {
            let cmd = p["spec"]["containers"][0]["command"].as_array().cloned().unwrap_or_default();
            let url = cmd
                .iter()
                .filter_map(Value::as_str)
                .find_map(|a| a.strip_prefix("--initial-advertise-peer-urls="))
                .context("no --initial-advertise-peer-urls")?;
            Ok(url.trim_start_matches("https://").trim_end_matches(":2380").to_string())
        })
        .collect()
}

/// Members are addressed as `<member>.<cluster>.<ns>.svc`: the names CoreOS' certificates cover.
fn check_short_names(ns: &TestNamespace, cluster: &str) -> Result<()> {
    let hosts = advertised_hosts(ns, cluster)?;
    let suffix = format!(".{cluster}.{}.svc", ns.name);
    ensure!(hosts.len() == 3 && hosts.iter().all(|h| h.ends_with(&suffix)), "{hosts:?}");
    Ok(())
}

fn guide_cluster(ns: &TestNamespace, cluster: &str, extra: &str) -> Result<()> {
    let m = coreos_guide_secrets(ns, cluster)?;
    ns.apply(&cluster_manifest(&ns.name, cluster, 3, VERSION, &format!("{extra}{}", layout_tls_spec(cluster))))?;
    wait_healthy(ns, cluster, 3, CREATE)?;
    check_short_names(ns, cluster)?;
    // A client with the guide's client certificate, checking the members' certificate against
    // the client Service's name.
    wait_until(Duration::from_secs(30), "a put with the guide's client certificate", || {
        Ok(put_get(ns, cluster, &m.trust, Some(&m.client), "guide/key").ok())
    })
}

fn two_ca_cluster(ns: &TestNamespace, cluster: &str, extra: &str) -> Result<()> {
    let m = coreos_e2e_secrets(ns, cluster)?;
    ns.apply(&cluster_manifest(&ns.name, cluster, 3, VERSION, &format!("{extra}{}", layout_tls_spec(cluster))))?;
    wait_healthy(ns, cluster, 3, CREATE)?;
    check_short_names(ns, cluster)?;
    wait_until(Duration::from_secs(30), "a put with the operator's certificate (etcdctl)", || {
        Ok(etcdctl_put_get(ns, cluster, &m, "two-ca/key").ok())
    })
}

#[test]
fn coreos_guide_certificates_serve_three_members() -> Result<()> {
    with_operator("e2e-tls-guide", |ns, _op| guide_cluster(ns, "example", ""))
}

#[test]
fn coreos_e2e_certificates_with_two_cas_serve_three_members() -> Result<()> {
    with_operator("e2e-tls-twoca", |ns, _op| two_ca_cluster(ns, "tls-test", ""))
}

/// The cluster domain given explicitly: the operator told it (`--cluster-domain`), and one
/// cluster also naming it in `spec.pod.ClusterDomain`. CoreOS' certificates still do not
/// cover it: members keep the short names.
#[test]
fn coreos_layouts_serve_three_members_with_the_cluster_domain_given() -> Result<()> {
    let ns = TestNamespace::create("e2e-tls-domain")?;
    let domain = [("ETCD_OPERATOR_CLUSTER_DOMAIN", e2e::CLUSTER_DOMAIN)];
    let op = Operator::start_process_with_env(&ns, &domain)?;
    let body = || -> Result<()> {
        guide_cluster(&ns, "guide", "")?;
        two_ca_cluster(&ns, "twoca", &format!("  pod:\n    ClusterDomain: {}\n", e2e::CLUSTER_DOMAIN))
    };
    body().map_err(|e| e.context(diagnostics(&ns, Some(&op))))
}

fn bundle(cas: &[&Ca]) -> String {
    cas.iter().map(|c| c.pem.as_str()).collect()
}

/// One CA issues the three certificates (member names with and without the cluster domain);
/// every bundle is `trust`. Returns the client certificate.
fn issue_all(ns: &TestNamespace, cluster: &str, ca: &Ca, trust: &str) -> Result<(String, String)> {
    let n = &ns.name;
    let both = [Eku::ServerAuth, Eku::ClientAuth];
    let members = [format!("*.{cluster}.{n}.svc"), format!("*.{cluster}.{n}.svc.{}", e2e::CLUSTER_DOMAIN)];
    let (pc, pk) = issue(ca, "etcd peer", &members, &both)?;
    let mut server_names = members.to_vec();
    server_names.push(format!("{cluster}-client.{n}.svc"));
    let (sc, sk) = issue(ca, "etcd server", &server_names, &both)?;
    let client = issue(ca, "etcd client", &[], &[Eku::ClientAuth])?;
    let [peer, server, op] = layout_secrets(cluster);
    ns.apply(&secret(n, &peer, &[("peer.crt", &pc), ("peer.key", &pk), ("peer-ca.crt", trust)]))?;
    ns.apply(&secret(n, &server, &[("server.crt", &sc), ("server.key", &sk), ("server-ca.crt", trust)]))?;
    let (cc, ck) = (&client.0, &client.1);
    ns.apply(&secret(n, &op, &[("etcd-client.crt", cc), ("etcd-client.key", ck), ("etcd-client-ca.crt", trust)]))?;
    Ok(client)
}

/// The bundles members load at start (`peer-ca.crt`, `server-ca.crt`) and the operator's
/// (`etcd-client-ca.crt`).
const MEMBER_BUNDLES: [usize; 2] = [0, 1];
const ALL_BUNDLES: [usize; 3] = [0, 1, 2];

/// Steps 1 and 3 of the rotation: only bundles change, those of the Secrets `which` picks.
fn set_bundles(ns: &TestNamespace, cluster: &str, trust: &str, which: &[usize]) -> Result<()> {
    let keys = ["peer-ca.crt", "server-ca.crt", "etcd-client-ca.crt"];
    let secrets = layout_secrets(cluster);
    for i in which {
        let patch = serde_json::json!({"stringData": {keys[*i]: trust}}).to_string();
        ns.run(&["patch", "secret", &secrets[*i], "--type=merge", "-p", &patch])?;
    }
    Ok(())
}

fn pod_uids(ns: &TestNamespace, cluster: &str) -> Result<Vec<String>> {
    Ok(pod_versions(ns, cluster)?.into_iter().map(|p| p.uid).collect())
}

/// Every member pod is another than in `before`, and `CABundlesLoaded` says they all run with
/// the bundles the Secrets hold.
fn wait_bundles_loaded(ns: &TestNamespace, cluster: &str, before: &[String], t0: Instant) -> Result<Vec<String>> {
    let uids = wait_until(Duration::from_secs(600), "every member restarted with the new bundles", || {
        let c = cluster_of(ns, cluster)?;
        let uids = pod_uids(ns, cluster)?;
        let loaded = cond_str(&c, "CABundlesLoaded", "status") == "True";
        let fresh = uids.len() == 3 && uids.iter().all(|u| !before.contains(u));
        Ok((loaded && fresh).then_some(uids))
    })?;
    wait_healthy(ns, cluster, 3, Duration::from_secs(120))?;
    eprintln!("{:>5.0}s every member runs with the new bundles", t0.elapsed().as_secs_f64());
    Ok(uids)
}

fn cluster_of(ns: &TestNamespace, name: &str) -> Result<Value> {
    common::cluster(ns, name)
}

fn writer_tls(ns: &TestNamespace, cluster: &str, trust: &str, client: &(String, String)) -> TlsOptions {
    TlsOptions::new()
        .ca_certificate(Certificate::from_pem(trust))
        .identity(Identity::from_pem(&client.0, &client.1))
        .domain_name(format!("{cluster}-client.{}.svc", ns.name))
}

/// The documented rotation (README, "Rotating a static CA"), under a writer through the client
/// Service that trusts both CAs and switches to its new certificate when it is issued. Step 3
/// follows step 2 at once: the operator holds every restart until each member serves the new
/// CA's certificate (the kubelet brings it within about a minute).
#[test]
fn a_static_ca_is_rotated_bundle_first_under_a_writer() -> Result<()> {
    with_operator("e2e-tls-rotate", |ns, _op| {
        let cluster = "ex";
        let (old, new) = (ca("old CA")?, ca("new CA")?);
        let old_client = issue_all(ns, cluster, &old, &old.pem)?;
        let pvc = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 1Gi}}\n";
        ns.apply(&cluster_manifest(&ns.name, cluster, 3, VERSION, &format!("{pvc}{}", layout_tls_spec(cluster))))?;
        wait_healthy(ns, cluster, 3, CREATE)?;
        let c = cluster_of(ns, cluster)?;
        ensure!(cond_str(&c, "CABundlesLoaded", "status") == "True", "{}", c["status"]);
        let both = bundle(&[&old, &new]);
        let tls: SharedTls = Arc::new(Mutex::new(writer_tls(ns, cluster, &both, &old_client)));
        let endpoint = format!("https://{}:2379", client_ip(ns, cluster)?);
        let writer = Writer::through_service_tls(&endpoint, "writer", tls.clone())?;
        wait_until(Duration::from_secs(60), "the writer's first acknowledged puts", || {
            let s = writer.stats();
            if !s.failed.is_empty() {
                bail!("writes fail from the start: {:?}", s.errors);
            }
            Ok((s.acked.len() >= 10).then_some(()))
        })?;
        let marks = event_marks(ns, cluster)?;
        let t0 = Instant::now();

        // 1. The new CA joins every bundle; members restart one at a time to load it.
        let first = pod_uids(ns, cluster)?;
        set_bundles(ns, cluster, &both, &ALL_BUNDLES)?;
        let second = wait_bundles_loaded(ns, cluster, &first, t0)?;
        // 2. Certificates of the new CA (no restart); the writer takes its new one.
        let new_client = issue_all(ns, cluster, &new, &both)?;
        *tls.lock().unwrap_or_else(PoisonError::into_inner) = writer_tls(ns, cluster, &both, &new_client);
        // 3. At once, the old CA leaves the members' bundles (the operator holds each restart
        //    until every member serves the new CA's certificates), then the operator's.
        set_bundles(ns, cluster, &new.pem, &MEMBER_BUNDLES)?;
        wait_bundles_loaded(ns, cluster, &second, t0)?;
        set_bundles(ns, cluster, &new.pem, &[2])?;
        wait_until(Duration::from_secs(120), "the operator connecting with the new CA alone", || {
            let c = cluster_of(ns, cluster)?;
            let (reason, degraded) = (cond_str(&c, "Available", "reason"), cond_str(&c, "Degraded", "status"));
            Ok((reason == "QuorumHealthy" && degraded != "True").then_some(()))
        })?;
        eprintln!("CA rotation took {:.0}s", t0.elapsed().as_secs_f64());

        let stats = writer.finish()?;
        eprintln!(
            "writer: {} acknowledged, {} retried, {} re-sent during an election, {} failed; first errors: {:#?}",
            stats.acked.len(),
            stats.retried,
            stats.leader_waits,
            stats.failed.len(),
            stats.errors
        );
        ensure!(stats.failed.is_empty(), "{} writes failed: {:#?}", stats.failed.len(), stats.errors);
        let opts = || connect_options().with_tls(writer_tls(ns, cluster, &new.pem, &new_client));
        check_acked_with(std::slice::from_ref(&endpoint), "writer", &stats, opts)?;
        // No quorum loss: Available never turned False (an Event would say NoQuorum, or
        // Unreachable if the operator had lost sight of the members).
        let events = events_since(ns, cluster, &marks)?;
        let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
        eprintln!("events: {reasons:?}");
        ensure!(!reasons.iter().any(|r| ["NoQuorum", "Unreachable"].contains(r)), "{reasons:?}");
        // Only the new CA is trusted now.
        ensure!(
            put_get(ns, cluster, &both, Some(&old_client), "rotated/old").is_err(),
            "a client certificate of the old CA is still accepted"
        );
        put_get(ns, cluster, &new.pem, Some(&new_client), "rotated/new")
    })
}

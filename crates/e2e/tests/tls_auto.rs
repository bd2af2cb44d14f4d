//! `spec.TLS.auto` on the real local cluster: the operator makes the CA and every certificate;
//! a client without a certificate is refused, one with the cluster's client Secret served.
//! Certificates are renewed under a continuous writer with no failed write and no member
//! restarted (etcd reads certificate files at each handshake); a CA rotation (forced with the
//! `rotate-ca` annotation) restarts members one at a time, twice, with no failed write either.
//! What each member serves is read by a TLS handshake on its client and peer port.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use common::backups::CREATE;
use common::writer::*;
use common::*;
use e2e::{TestNamespace, wait_until};
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

const VERSION: &str = "3.6.15";

/// The PEM files of a Secret with the CoreOS client keys.
#[derive(Clone, Debug)]
struct ClientFiles {
    ca: String,
    cert: String,
    key: String,
}

/// The client Secret users connect with: `<cluster>-tls-client`.
fn client_files(ns: &TestNamespace, cluster: &str) -> Result<ClientFiles> {
    let d = secret_data(ns, &format!("{cluster}-tls-client"))?;
    let get = |k: &str| d.get(k).cloned().with_context(|| format!("{cluster}-tls-client lacks {k}"));
    Ok(ClientFiles { ca: get("etcd-client-ca.crt")?, cert: get("etcd-client.crt")?, key: get("etcd-client.key")? })
}

fn tls_options(ns: &TestNamespace, cluster: &str, f: &ClientFiles, with_cert: bool) -> TlsOptions {
    let o = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(&f.ca))
        .domain_name(format!("{cluster}-client.{}.svc", ns.name));
    if with_cert { o.identity(Identity::from_pem(&f.cert, &f.key)) } else { o }
}

/// `https://<client Service ClusterIP>:2379`.
fn https_endpoint(ns: &TestNamespace, cluster: &str) -> Result<String> {
    Ok(client_endpoint(ns, cluster)?.replace("http://", "https://"))
}

/// A put and its read back through the client Service.
fn put_get(ns: &TestNamespace, cluster: &str, tls: TlsOptions, key: &str) -> Result<()> {
    let url = https_endpoint(ns, cluster)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let opts = ConnectOptions::new()
            .with_tls(tls)
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(5));
        let mut c = Client::connect([url.as_str()], Some(opts)).await?;
        c.put(key, "v", None).await?;
        let r = c.get(key, Some(GetOptions::new())).await?;
        ensure!(r.kvs().len() == 1 && r.kvs()[0].value_str()? == "v", "read back {:?}", r.kvs());
        Ok(())
    })
}

mod probe {
    //! The certificate a server presents, read with rustls (the handshake records it; nothing
    //! is sent), and what it says: serial, expiry, issuer.

    use std::net::{SocketAddr, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use anyhow::{Context, Result, anyhow};
    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    struct Recorder(Mutex<Option<Vec<u8>>>, Arc<CryptoProvider>);

    impl ServerCertVerifier for Recorder {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(end_entity.to_vec());
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(m, c, d, &self.1.signature_verification_algorithms)
        }
        fn verify_tls13_signature(
            &self,
            m: &[u8],
            c: &CertificateDer<'_>,
            d: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(m, c, d, &self.1.signature_verification_algorithms)
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.1.signature_verification_algorithms.supported_schemes()
        }
    }

    /// The DER of the certificate the server at `addr` presents; `identity` (certificate and
    /// key PEM) is presented as the client's.
    pub fn served(addr: SocketAddr, identity: (&str, &str)) -> Result<Vec<u8>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let rec = Arc::new(Recorder(Mutex::new(None), provider.clone()));
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(identity.0.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow!("{e:?}"))?;
        let key = PrivateKeyDer::from_pem_slice(identity.1.as_bytes()).map_err(|e| anyhow!("{e:?}"))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .dangerous()
            .with_custom_certificate_verifier(rec.clone())
            .with_client_auth_cert(chain, key)?;
        let mut conn = rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("etcd")?.to_owned())?;
        let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        while conn.is_handshaking() {
            if conn.complete_io(&mut sock).is_err() {
                break;
            }
        }
        rec.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .with_context(|| format!("{addr} presented no certificate"))
    }

    /// Serial number (hex) and notAfter of a certificate.
    pub fn describe(der: &[u8]) -> String {
        match x509_parser::parse_x509_certificate(der) {
            Ok((_, c)) => format!("serial {} notAfter {}", c.raw_serial_as_string(), c.validity().not_after),
            Err(e) => format!("unparseable ({e})"),
        }
    }

    pub fn not_after(der: &[u8]) -> i64 {
        x509_parser::parse_x509_certificate(der).map(|(_, c)| c.validity().not_after.timestamp()).unwrap_or(0)
    }

    /// Whether the CA certificate `ca_pem` signed `der`.
    pub fn issued_by(der: &[u8], ca_pem: &str) -> bool {
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { return false };
        x509_parser::pem::Pem::iter_from_buffer(ca_pem.as_bytes())
            .flatten()
            .any(|p| p.parse_x509().is_ok_and(|ca| cert.verify_signature(Some(ca.public_key())).is_ok()))
    }
}

/// What one member serves: (client port, peer port) certificate DER.
type ServedPair = (Vec<u8>, Vec<u8>);

/// What every member pod serves now, by pod name.
fn served_by_members(ns: &TestNamespace, cluster: &str, f: &ClientFiles) -> Result<BTreeMap<String, ServedPair>> {
    let mut out = BTreeMap::new();
    for p in member_pods(ns, cluster)? {
        let pod = p["metadata"]["name"].as_str().unwrap_or("").to_string();
        let ip: std::net::IpAddr = p["status"]["podIP"].as_str().context("no pod IP")?.parse()?;
        let client = probe::served((ip, 2379).into(), (&f.cert, &f.key)).with_context(|| format!("{pod}:2379"))?;
        let peer = probe::served((ip, 2380).into(), (&f.cert, &f.key)).with_context(|| format!("{pod}:2380"))?;
        out.insert(pod, (client, peer));
    }
    Ok(out)
}

fn pod_uids(ns: &TestNamespace, cluster: &str) -> Result<BTreeMap<String, (String, i64)>> {
    Ok(pod_versions(ns, cluster)?.into_iter().map(|p| (p.pod, (p.uid, p.restarts))).collect())
}

/// Writes through the client Service over TLS, its client certificate reloaded from the client
/// Secret every time `refresh` is called (as an application that reloads its mounted Secret).
struct TlsWriter {
    writer: Writer,
    tls: SharedTls,
}

impl TlsWriter {
    fn start(ns: &TestNamespace, cluster: &str) -> Result<TlsWriter> {
        let f = client_files(ns, cluster)?;
        let tls: SharedTls = Arc::new(Mutex::new(tls_options(ns, cluster, &f, true)));
        let writer = Writer::through_service_tls(&https_endpoint(ns, cluster)?, "writer", tls.clone())?;
        wait_until(Duration::from_secs(60), "the writer's first acknowledged puts", || {
            let s = writer.stats();
            if !s.failed.is_empty() {
                bail!("writes fail from the start: {:?}", s.errors);
            }
            Ok((s.acked.len() >= 10).then_some(()))
        })?;
        Ok(TlsWriter { writer, tls })
    }

    fn refresh(&self, ns: &TestNamespace, cluster: &str) {
        if let Ok(f) = client_files(ns, cluster) {
            *self.tls.lock().unwrap_or_else(PoisonError::into_inner) = tls_options(ns, cluster, &f, true);
        }
    }

    /// Stops it: no failed write, every acknowledged one read back.
    fn finish(self, ns: &TestNamespace, cluster: &str) -> Result<()> {
        let stats = self.writer.finish()?;
        eprintln!(
            "writer: {} acknowledged, {} retried, {} re-sent during an election, {} failed; first errors: {:#?}",
            stats.acked.len(),
            stats.retried,
            stats.leader_waits,
            stats.failed.len(),
            stats.errors
        );
        ensure!(
            stats.failed.is_empty(),
            "{} writes failed: {:?}; errors {:#?}",
            stats.failed.len(),
            stats.failed,
            stats.errors
        );
        let f = client_files(ns, cluster)?;
        let endpoint = https_endpoint(ns, cluster)?;
        check_acked_with(&[endpoint], "writer", &stats, || {
            connect_options().with_tls(tls_options(ns, cluster, &f, true))
        })
    }
}

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

//! Clients of a cluster whose client URLs are TLS with client certificates, from the CoreOS
//! client Secret layout (`<cluster>-tls-client`, which `spec.TLS.auto` and
//! `spec.TLS.certManager` fill): a put and read back, a continuous writer through the client
//! Service, and what each member serves on its client and peer port (`tls_auto`,
//! `tls_cert_manager`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::{TestNamespace, wait_until};
use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};

use super::writer::*;
use super::*;

/// The PEM files of a Secret with the CoreOS client keys.
#[derive(Clone, Debug)]
pub struct ClientFiles {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

/// The client Secret users connect with: `<cluster>-tls-client`.
pub fn client_files(ns: &TestNamespace, cluster: &str) -> Result<ClientFiles> {
    let d = secret_data(ns, &format!("{cluster}-tls-client"))?;
    let get = |k: &str| d.get(k).cloned().with_context(|| format!("{cluster}-tls-client lacks {k}"));
    Ok(ClientFiles { ca: get("etcd-client-ca.crt")?, cert: get("etcd-client.crt")?, key: get("etcd-client.key")? })
}

pub fn tls_options(ns: &TestNamespace, cluster: &str, f: &ClientFiles, with_cert: bool) -> TlsOptions {
    let o = TlsOptions::new()
        .ca_certificate(Certificate::from_pem(&f.ca))
        .domain_name(format!("{cluster}-client.{}.svc", ns.name));
    if with_cert { o.identity(Identity::from_pem(&f.cert, &f.key)) } else { o }
}

/// `https://<client Service ClusterIP>:2379`.
pub fn https_endpoint(ns: &TestNamespace, cluster: &str) -> Result<String> {
    Ok(client_endpoint(ns, cluster)?.replace("http://", "https://"))
}

/// A put and its read back through the client Service.
pub fn put_get(ns: &TestNamespace, cluster: &str, tls: TlsOptions, key: &str) -> Result<()> {
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

pub mod probe {
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
pub type ServedPair = (Vec<u8>, Vec<u8>);

/// What every member pod serves now, by pod name.
pub fn served_by_members(ns: &TestNamespace, cluster: &str, f: &ClientFiles) -> Result<BTreeMap<String, ServedPair>> {
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

pub fn pod_uids(ns: &TestNamespace, cluster: &str) -> Result<BTreeMap<String, (String, i64)>> {
    Ok(pod_versions(ns, cluster)?.into_iter().map(|p| (p.pod, (p.uid, p.restarts))).collect())
}

/// Writes through the client Service over TLS, its client certificate reloaded from the client
/// Secret every time `refresh` is called (as an application that reloads its mounted Secret).
pub struct TlsWriter {
    writer: Writer,
    tls: SharedTls,
}

impl TlsWriter {
    pub fn start(ns: &TestNamespace, cluster: &str) -> Result<TlsWriter> {
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

    pub fn refresh(&self, ns: &TestNamespace, cluster: &str) {
        if let Ok(f) = client_files(ns, cluster) {
            *self.tls.lock().unwrap_or_else(PoisonError::into_inner) = tls_options(ns, cluster, &f, true);
        }
    }

    /// Stops it: no failed write, every acknowledged one read back.
    pub fn finish(self, ns: &TestNamespace, cluster: &str) -> Result<()> {
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

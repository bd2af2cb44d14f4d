//! Which certificate each member serves, on its client port and on its peer port: a TLS
//! handshake with the operator's client certificate that records the member's certificate and
//! sends nothing else. This is how a CA rotation knows every member serves certificates of the
//! new CA before the old one is dropped (etcd reads its certificate files at each handshake, so
//! what a handshake shows is what every new connection gets). I/O (TCP + rustls).

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::naming::{CLIENT_PORT, PEER_PORT};
use crate::observed::PodState;
use crate::tls::auto::Leaf;
use crate::tls::auto::state::{Observation, Served};

/// Connect and handshake, each.
const TIMEOUT: Duration = Duration::from_secs(2);

/// Records the certificate a server presents; accepts it, as nothing is sent over the
/// connection (the checks that matter are the planner's: which CA issued it).
#[derive(Debug)]
struct Recorder {
    seen: Mutex<Option<Vec<u8>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(end_entity.to_vec());
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The client identity presented: certificate chain and key PEM.
type Identity = (Vec<u8>, Vec<u8>);

/// The DER of the certificate the server at `addr` presents.
pub fn served_der(addr: SocketAddr, server_name: &str, identity: Option<&Identity>) -> Result<Vec<u8>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let recorder = Arc::new(Recorder { seen: Mutex::new(None), provider: provider.clone() });
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone());
    let config = match identity {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> =
                CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>().map_err(|e| format!("{e:?}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("{e:?}"))?;
            builder.with_client_auth_cert(chain, key).map_err(|e| e.to_string())?
        }
        None => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut sock = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| format!("connecting: {e}"))?;
    sock.set_read_timeout(Some(TIMEOUT)).ok();
    sock.set_write_timeout(Some(TIMEOUT)).ok();
    let mut failure = None;
    while conn.is_handshaking() {
        if let Err(e) = conn.complete_io(&mut sock) {
            failure = Some(match e.kind() {
                ErrorKind::WouldBlock | ErrorKind::TimedOut => "no TLS answer in time".to_string(),
                _ => e.to_string(),
            });
            break;
        }
    }
    if failure.is_none() {
        conn.send_close_notify();
        let _ = conn.complete_io(&mut sock);
    }
    let seen = recorder.seen.lock().unwrap_or_else(|e| e.into_inner()).take();
    seen.ok_or_else(|| failure.unwrap_or_else(|| "no certificate presented".into()))
}

/// What every running member with an address serves, by pod.
pub async fn served(pods: &BTreeMap<String, PodState>, c: &Observation) -> BTreeMap<String, Served> {
    let identity: Option<Identity> = c
        .leaf(Leaf::Operator)
        .and_then(|l| Some((l.cert.as_ref()?.pem().into_bytes(), l.key.as_ref()?.0.clone().into_bytes())));
    let client_name = crate::tls::server_name(&c.cluster, &c.namespace);
    let mut tasks = vec![];
    for p in pods.values().filter(|p| p.phase == "Running" && !p.deleting) {
        let Some(ip) = p.ip.as_ref().and_then(|ip| ip.parse::<std::net::IpAddr>().ok()) else { continue };
        let member_name = crate::naming::member_host(&p.name, &c.cluster, &c.namespace, &c.cluster_domain);
        let (identity, client_name, pod) = (identity.clone(), client_name.clone(), p.name.clone());
        tasks.push(tokio::task::spawn_blocking(move || {
            let client = served_der(SocketAddr::new(ip, CLIENT_PORT as u16), &client_name, identity.as_ref());
            let peer = served_der(SocketAddr::new(ip, PEER_PORT as u16), &member_name, identity.as_ref());
            (pod, client, peer)
        }));
    }
    let mut out = BTreeMap::new();
    for t in futures::future::join_all(tasks).await.into_iter().flatten() {
        let (pod, client, peer) = t;
        let served = Served {
            client: client.and_then(|der| c.served_cert(&der)),
            peer: peer.and_then(|der| c.served_cert(&der)),
        };
        out.insert(pod, served);
    }
    out
}

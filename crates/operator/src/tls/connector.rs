//! Opening etcd clients (the operator's and its pods'): etcd-client's own TLS, or, when the
//! CA bundle holds a server's own self-signed certificate, this module's.
//!
//! CoreOS' e2e certificates are made so: every certificate is a self-signed CA certificate that
//! names its hosts, and the other side trusts that very certificate (the member Secret's
//! `server-ca.crt` is the operator's certificate, the operator Secret's `etcd-client-ca.crt` the
//! members'). Go's clients accept a server certificate that is in their trust bundle; rustls'
//! verifier (webpki) refuses a CA certificate used as a server's (the members then log the
//! operator's `tls: unknown certificate` alert). [`Pinned`] verifies as webpki does and accepts,
//! besides, exactly a certificate of the bundle, valid now and naming the server. Only clients
//! whose bundle holds such a certificate use it ([`Dialer::new`]). I/O (TCP and rustls).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use hyper_util::rt::TokioIo;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tonic::codegen::http::Uri;

use super::material::ClientTls;

/// How clients are opened: with `options` (which carry etcd-client's TLS settings when it does
/// TLS), or over this module's TLS.
#[derive(Clone)]
pub struct Dialer {
    options: ConnectOptions,
    own_tls: Option<OwnTls>,
}

#[derive(Clone)]
struct OwnTls {
    config: Arc<rustls::ClientConfig>,
    server_name: String,
    connect_timeout: Duration,
    timeout: Option<Duration>,
}

impl Dialer {
    /// `options` (with their timeouts), over TLS with `tls` when given.
    pub fn new(
        options: ConnectOptions,
        tls: Option<&ClientTls>,
        connect_timeout: Duration,
        timeout: Option<Duration>,
    ) -> Dialer {
        let Some(tls) = tls else { return Dialer { options, own_tls: None } };
        if !tls.needs_pinning() {
            return Dialer { options: options.with_tls(client_options(tls)), own_tls: None };
        }
        match pinned_config(tls) {
            Ok(config) => Dialer {
                options,
                own_tls: Some(OwnTls {
                    config: Arc::new(config),
                    server_name: tls.server_name.clone(),
                    connect_timeout,
                    timeout,
                }),
            },
            // Material the checks let through always makes a configuration; etcd-client's TLS
            // then says what is wrong at the first call.
            Err(_) => Dialer { options: options.with_tls(client_options(tls)), own_tls: None },
        }
    }

    /// The same, with the options changed (a login).
    pub fn map(&self, f: impl FnOnce(ConnectOptions) -> ConnectOptions) -> Dialer {
        Dialer { options: f(self.options.clone()), own_tls: self.own_tls.clone() }
    }

    /// A client of `endpoints`: etcd-client balances over them; over this module's TLS, the
    /// first that answers.
    pub async fn connect(&self, endpoints: &[String]) -> Result<Client, etcd_client::Error> {
        let Some(own) = &self.own_tls else {
            return Box::pin(Client::connect(endpoints, Some(self.options.clone()))).await;
        };
        let mut last = etcd_client::Error::InvalidArgs("no endpoint to connect to".into());
        for url in endpoints {
            match Box::pin(own.channel(url)).await {
                Ok(ch) => {
                    let c = Client::from_channel(etcd_client::Channel::Tonic(ch), Some(self.options.clone()));
                    return Box::pin(c).await;
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

impl OwnTls {
    async fn channel(&self, url: &str) -> Result<tonic::transport::Channel, etcd_client::Error> {
        let plain = url.replacen("https://", "http://", 1);
        let mut e = tonic::transport::Endpoint::from_shared(plain)
            .map_err(|e| etcd_client::Error::InvalidArgs(format!("{url}: {e}")))?
            .connect_timeout(self.connect_timeout);
        if let Some(t) = self.timeout {
            e = e.timeout(t);
        }
        let connect = Connect { config: self.config.clone(), server_name: self.server_name.clone() };
        e.connect_with_connector(connect).await.map_err(etcd_client::Error::TransportError)
    }
}

/// TCP, then TLS with the pinned verifier (ALPN h2: gRPC).
#[derive(Clone)]
struct Connect {
    config: Arc<rustls::ClientConfig>,
    server_name: String,
}

type Stream = TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;

impl tonic::codegen::Service<Uri> for Connect {
    type Response = Stream;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let (config, name) = (self.config.clone(), self.server_name.clone());
        Box::pin(async move {
            let invalid = |e: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
            let host = uri.host().ok_or_else(|| invalid(format!("{uri}: no host")))?;
            let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let port = uri.port_u16().unwrap_or(crate::naming::CLIENT_PORT as u16);
            let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = if name.is_empty() { host } else { name };
            let server = ServerName::try_from(name).map_err(|e| invalid(e.to_string()))?;
            let tls = tokio_rustls::TlsConnector::from(config).connect(server, tcp).await?;
            Ok(TokioIo::new(tls))
        })
    }
}

/// The client configuration: the bundle as roots for webpki, the pinned exception, the client
/// certificate, ALPN h2.
fn pinned_config(tls: &ClientTls) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let trusted: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&tls.ca).filter_map(Result::ok).collect();
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(trusted.iter().cloned());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let verifier = Arc::new(Pinned { inner, trusted, provider: provider.clone() });
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(&tls.cert).collect::<Result<_, _>>().map_err(|e| format!("{e:?}"))?;
    let key = PrivateKeyDer::from_pem_slice(&tls.key).map_err(|e| format!("{e:?}"))?;
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(chain, key)
        .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// webpki's verdict, and besides: a server certificate that is exactly one of the trusted
/// ones, valid now, naming the server.
#[derive(Debug)]
pub struct Pinned {
    inner: Arc<WebPkiServerVerifier>,
    trusted: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl Pinned {
    /// Whether `der` is a trusted certificate that names `name` and is valid at `now`.
    fn accepts(&self, der: &[u8], name: &str, now: UnixTime) -> bool {
        if !self.trusted.iter().any(|t| t.as_ref() == der) {
            return false;
        }
        let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else { return false };
        let (v, now) = (cert.validity(), now.as_secs() as i64);
        let sans = super::check::sans_of(&cert).unwrap_or_default();
        v.not_before.timestamp() <= now && now <= v.not_after.timestamp() && super::check::covers(&sans, name)
    }
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Ok(v) => Ok(v),
            Err(e) => match server_name {
                ServerName::DnsName(n) if self.accepts(end_entity.as_ref(), n.as_ref(), now) => {
                    Ok(ServerCertVerified::assertion())
                }
                _ => Err(e),
            },
        }
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
        self.inner.supported_verify_schemes()
    }
}

/// The etcd client's TLS settings for `tls`; an empty `server_name` checks each URL's own host.
pub fn client_options(tls: &ClientTls) -> etcd_client::TlsOptions {
    let o = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(&tls.ca))
        .identity(etcd_client::Identity::from_pem(&tls.cert, &tls.key));
    if tls.server_name.is_empty() { o } else { o.domain_name(tls.server_name.clone()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_certs::{ca, coreos_e2e, leaf};

    fn der(pem: &[u8]) -> CertificateDer<'static> {
        CertificateDer::pem_slice_iter(pem).next().unwrap().unwrap()
    }

    fn verifier(bundle: &[u8]) -> Arc<Pinned> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let trusted: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(bundle).map(Result::unwrap).collect();
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(trusted.iter().cloned());
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
        Arc::new(Pinned { inner, trusted, provider })
    }

    fn verify(v: &Pinned, cert: &CertificateDer<'_>, name: &str) -> Result<ServerCertVerified, rustls::Error> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        v.verify_server_cert(cert, &[], &name, &[], UnixTime::now())
    }

    /// Issue 25: with CoreOS' e2e certificates the members' certificate is a CA certificate
    /// the operator trusts as such; webpki refuses it as a server's (the members logged the
    /// operator's `unknown certificate` alert), the pinned verifier accepts exactly it.
    #[test]
    fn the_members_own_certificate_in_the_bundle_is_accepted_for_its_names_only() {
        let f = coreos_e2e();
        let op = f["op"].as_ref().unwrap();
        let bundle = &op["etcd-client-ca.crt"];
        let server = der(&f["server"].as_ref().unwrap()["server.crt"]);
        let v = verifier(bundle);
        let webpki = v.inner.verify_server_cert(
            &server,
            &[],
            &ServerName::try_from("ex-client.ns.svc").unwrap(),
            &[],
            UnixTime::now(),
        );
        assert!(webpki.is_err(), "webpki refuses a CA certificate as a server's");
        assert!(verify(&v, &server, "ex-client.ns.svc").is_ok());
        assert!(verify(&v, &server, "ex-abcde.ex.ns.svc").is_ok(), "the member wildcard");
        assert!(verify(&v, &server, "ex-client.other.svc").is_err(), "a name it does not cover");
        let peer = der(&f["peer"].as_ref().unwrap()["peer.crt"]);
        assert!(verify(&v, &peer, "ex-abcde.ex.ns.svc").is_err(), "a certificate not in the bundle");
    }

    #[test]
    fn certificates_a_ca_issued_are_checked_as_webpki_checks_them() {
        let a = ca("a");
        let (cert, _) = leaf(&a, &["ex-client.ns.svc".to_string()], &[rcgen::ExtendedKeyUsagePurpose::ServerAuth]);
        let v = verifier(a.pem.as_bytes());
        assert!(verify(&v, &der(cert.as_bytes()), "ex-client.ns.svc").is_ok());
        assert!(verify(&v, &der(cert.as_bytes()), "elsewhere.ns.svc").is_err());
        let stranger = leaf(&ca("b"), &["ex-client.ns.svc".to_string()], &[]).0;
        assert!(verify(&v, &der(stranger.as_bytes()), "ex-client.ns.svc").is_err());
    }
}

//! Certificate expiry of a cluster's TLS Secrets (parsing only; nothing of a Secret is printed
//! but the certificates' subjects and dates).

use etcd_operator_api::cluster::EtcdCluster;
use kube::ResourceExt;

use crate::status::model::Certificate;

/// The TLS Secrets of a cluster: the static ones it names, or those `spec.TLS.auto` makes.
pub fn tls_secrets(c: &EtcdCluster) -> Vec<String> {
    let Some(tls) = c.spec.tls.as_ref() else { return vec![] };
    let name = c.name_any();
    if tls.auto.is_some() {
        return ["ca", "peer", "server", "operator", "client"].iter().map(|s| format!("{name}-tls-{s}")).collect();
    }
    let Some(s) = tls.r#static.as_ref() else { return vec![] };
    let mut out = vec![];
    if let Some(m) = &s.member {
        out.extend([m.peer_secret.clone(), m.server_secret.clone()]);
    }
    out.push(s.operator_secret.clone());
    out.retain(|n| !n.is_empty());
    out.dedup();
    out
}

/// The certificate of each `*.crt` key of a Secret's data that expires first, with `now` (unix
/// seconds).
pub fn expiries(secret: &str, data: &[(String, Vec<u8>)], now: i64) -> Vec<Certificate> {
    let mut out = vec![];
    for (key, bytes) in data.iter().filter(|(k, _)| k.ends_with(".crt")) {
        let mut first: Option<(i64, String)> = None;
        for pem in x509_parser::pem::Pem::iter_from_buffer(bytes).flatten() {
            let Ok(cert) = pem.parse_x509() else { continue };
            let t = cert.validity().not_after.timestamp();
            if first.as_ref().is_none_or(|(f, _)| t < *f) {
                first = Some((t, cert.subject().to_string()));
            }
        }
        if let Some((t, subject)) = first {
            let not_after = jiff::Timestamp::from_second(t).map(|t| t.to_string()).unwrap_or_default();
            out.push(Certificate {
                secret: secret.into(),
                key: key.clone(),
                subject,
                not_after,
                expires_in_seconds: t - now,
            });
        }
    }
    out
}

//! The TLS material of one cluster, checked before anything uses it (`observe::tls` reads the
//! Secrets; [`checked`] decides, pure). The operator's own etcd client comes out of it as
//! [`ClientTls`].

use std::collections::{BTreeMap, BTreeSet};

use super::check::{self, Pems};
use super::{Policy, Use, required_names, server_name};

/// A client identity for etcd: the CA that checks the members' server certificates, the
/// client certificate and key, and the name the server certificates are checked against
/// (connections go to pod IPs).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientTls {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub server_name: String,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("ClientTls").field("server_name", &self.server_name).finish_non_exhaustive()
    }
}

impl ClientTls {
    /// The CA bundle holds a server's own self-signed certificate (CoreOS' e2e certificates):
    /// rustls' verifier refuses it as a server's, `tls::connector` checks it.
    pub fn needs_pinning(&self) -> bool {
        check::has_self_signed_server_certificate(&self.ca)
    }

    /// A short digest of the material: cached connections made with other material are not
    /// reused.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for part in [&self.ca, &self.cert, &self.key, &self.server_name.as_bytes().to_vec()] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
        hex::encode(&h.finalize()[..8])
    }

    /// From the PEM files a pod has mounted (`dir`, CoreOS client key names).
    pub fn from_dir(dir: &str, server_name: &str) -> std::io::Result<ClientTls> {
        let read = |k: &str| std::fs::read(format!("{dir}/{k}"));
        Ok(ClientTls {
            ca: read(super::CLIENT_KEYS.ca)?,
            cert: read(super::CLIENT_KEYS.cert)?,
            key: read(super::CLIENT_KEYS.key)?,
            server_name: server_name.to_string(),
        })
    }
}

/// A Secret's data as the checks take it; `None`: no such Secret.
pub type SecretData = Option<BTreeMap<String, Vec<u8>>>;

/// What the checks found in a cluster's TLS material ([`checked`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Every problem, each naming its Secret (and key, or the missing name); empty: the
    /// material passed.
    pub refused: Vec<String>,
    /// The Secrets those problems are in.
    pub refused_secrets: BTreeSet<String>,
    /// The operator's client identity when clients speak TLS and its Secret could be read,
    /// whatever else was refused: the cluster is still observed (and healed) with it.
    pub client: Option<ClientTls>,
    /// The cluster domain member names are made with: the one given, or empty when the
    /// certificates cover only the short names `<member>.<cluster>.<ns>.svc` (CoreOS made
    /// members so, and its TLS guide's certificates cover only those).
    pub member_domain: String,
    /// The certificates in use and the CAs that issued them, with the end of their validity.
    pub expiries: Vec<Expiry>,
    /// A digest of the CA bundles members load at start (`peer-ca.crt`, `server-ca.crt`): part
    /// of the pod-spec hash, so a changed bundle restarts members one at a time.
    pub trust: Option<String>,
    /// The peer Secret's `peer-ca.crt` (certificates only; empty without peer TLS).
    pub peer_bundle: Vec<u8>,
    /// A Secret could not be read (the API server failed): nothing is known of the material.
    pub unreadable: bool,
}

/// One certificate in use and when it stops being valid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expiry {
    pub secret: String,
    /// The key it is in (a CA: the bundle it was found in).
    pub key: String,
    pub subject: String,
    /// Seconds since the epoch.
    pub not_after: i64,
}

/// The decision over the Secrets as read (`observe::tls`): each Secret on its own ([`check::secret`]), then across them:
/// peers trust `peer-ca.crt` for `peer.crt`; the operator's CA must have issued the server
/// certificate and the server's CA the operator's certificate. Member names: the first of
/// `domains` whose names (`*.<cluster>.<ns>.svc[.<domain>]`) every member certificate covers;
/// when none is, the names of every form are said missing.
pub fn checked(
    p: &Policy,
    fetched: &BTreeMap<String, SecretData>,
    cluster: &str,
    namespace: &str,
    domains: &[&str],
    now: i64,
) -> Verdict {
    let first = domains.first().copied().unwrap_or_default();
    let mut v = Verdict { member_domain: first.to_string(), ..Default::default() };
    let refuse = |v: &mut Verdict, secrets: &[&str], errs: Vec<String>| {
        if !errs.is_empty() {
            v.refused_secrets.extend(secrets.iter().map(|s| s.to_string()));
            v.refused.extend(errs);
        }
    };
    let mut ok: BTreeMap<&str, (&str, Pems)> = BTreeMap::new();
    for (name, keys, usage) in p.secrets() {
        match check::secret(name, fetched.get(name).and_then(|d| d.as_ref()), keys, usage, &[], now) {
            Ok(pems) => {
                ok.insert(use_key(usage), (name, pems));
            }
            Err(e) => refuse(&mut v, &[name], e),
        }
    }
    // Member names: the first form every member certificate covers.
    let uncovered = |domain: &str| -> Vec<(&str, String)> {
        let mut missing = vec![];
        for (usage, keys) in [(Use::Peer, super::PEER_KEYS), (Use::Server, super::SERVER_KEYS)] {
            if let Some((name, pems)) = ok.get(use_key(usage)) {
                let names = required_names(usage, cluster, namespace, domain);
                missing.extend(check::uncovered(name, keys.cert, &pems.cert, &names).into_iter().map(|e| (*name, e)));
            }
        }
        missing
    };
    let mut forms: Vec<&str> = vec![];
    for d in domains {
        if !forms.iter().any(|f| f.trim_matches('.') == d.trim_matches('.')) {
            forms.push(d);
        }
    }
    let tried: Vec<(&str, Vec<(&str, String)>)> = forms.iter().map(|d| (*d, uncovered(d))).collect();
    match tried.iter().find(|(_, missing)| missing.is_empty()) {
        Some((d, _)) => v.member_domain = d.to_string(),
        None => {
            let mut seen = BTreeSet::new();
            for (secret, e) in tried.iter().flat_map(|(_, m)| m) {
                if seen.insert(e.clone()) {
                    refuse(&mut v, &[secret], vec![e.clone()]);
                }
            }
            let member_names = tried.iter().flat_map(|(_, m)| m).any(|(_, e)| e.contains("DNS name *."));
            if let [(long, _), (short, _), ..] = tried.as_slice()
                && member_names
            {
                let host = |d: &str| crate::naming::member_host("<member>", cluster, namespace, d);
                v.refused.push(format!(
                    "members are addressed as {} or, when the member certificates cover only that form, as {}: every member certificate must cover one of them",
                    host(long),
                    host(short)
                ));
            }
        }
    }
    if let Some((name, peer)) = ok.get("peer")
        && !check::issued_by(&peer.cert, &peer.ca)
    {
        let e = format!(
            "Secret {name}: {} is not issued by {} (peers check each other with it)",
            super::PEER_KEYS.cert,
            super::PEER_KEYS.ca
        );
        refuse(&mut v, &[name], vec![e]);
    }
    if let (Some((_, server)), Some((_, op)), Some(c)) = (ok.get("server"), ok.get("client"), &p.client) {
        let both = [c.server_secret.as_str(), c.operator_secret.as_str()];
        if !check::issued_by(&server.cert, &op.ca) {
            let e = format!(
                "Secret {}: {} is not issued by {} of Secret {} (the operator could not trust the members)",
                c.server_secret,
                super::SERVER_KEYS.cert,
                super::CLIENT_KEYS.ca,
                c.operator_secret
            );
            refuse(&mut v, &both, vec![e]);
        }
        if !check::issued_by(&op.cert, &server.ca) {
            let e = format!(
                "Secret {}: {} is not issued by {} of Secret {} (the members would refuse the operator)",
                c.operator_secret,
                super::CLIENT_KEYS.cert,
                super::SERVER_KEYS.ca,
                c.server_secret
            );
            refuse(&mut v, &both, vec![e]);
        }
    }
    if let (Some((_, op)), Some(_)) = (ok.get("client"), &p.client) {
        v.client = Some(ClientTls {
            ca: op.ca.clone(),
            cert: op.cert.clone(),
            key: op.key.clone(),
            server_name: server_name(cluster, namespace),
        });
    }
    if let Some(peer) = &p.peer_secret {
        let bundle = fetched.get(peer).and_then(|d| d.as_ref()).and_then(|d| d.get(super::PEER_KEYS.ca));
        v.peer_bundle = bundle.cloned().unwrap_or_default();
    }
    v.expiries = expiries(p, fetched);
    v.trust = trust(p, fetched);
    v
}

/// What `Degraded` says while material the cluster runs with is refused.
pub fn refused_message(refused: &[String]) -> String {
    format!(
        "TLS material refused: {}; members whose pods are gone restart on their volumes with what their pods mount, nothing else that starts a member is done until it passes",
        refused.join("; ")
    )
}

fn use_key(u: Use) -> &'static str {
    match u {
        Use::Peer => "peer",
        Use::Server => "server",
        Use::Client => "client",
    }
}

/// The certificates of `p`'s Secrets and the CAs (in any of their bundles) that issued them,
/// with the end of their validity.
fn expiries(p: &Policy, fetched: &BTreeMap<String, SecretData>) -> Vec<Expiry> {
    let file = |secret: &str, key: &str| fetched.get(secret)?.as_ref()?.get(key).cloned();
    let bundles: Vec<(String, &str, Vec<u8>)> =
        p.secrets().iter().filter_map(|(s, k, _)| Some((s.to_string(), k.ca, file(s, k.ca)?))).collect();
    let mut out: Vec<Expiry> = vec![];
    for (secret, keys, _) in p.secrets() {
        let Some(cert) = file(secret, keys.cert) else { continue };
        if let Some((not_after, subject)) = check::not_after(&cert) {
            out.push(Expiry { secret: secret.to_string(), key: keys.cert.to_string(), subject, not_after });
        }
        for (bundle_secret, key, bundle) in &bundles {
            if let Some((not_after, subject)) = check::issuer_in(&cert, bundle)
                && !out.iter().any(|o| o.subject == subject && o.not_after == not_after)
            {
                out.push(Expiry { secret: bundle_secret.clone(), key: key.to_string(), subject, not_after });
            }
        }
    }
    out
}

/// A digest of the CA bundles member pods load at start; `None` without TLS.
fn trust(p: &Policy, fetched: &BTreeMap<String, SecretData>) -> Option<String> {
    use sha2::Digest;
    let bundles: Vec<(&str, &str)> =
        p.secrets().iter().filter(|(_, _, u)| *u != Use::Client).map(|(s, k, _)| (*s, k.ca)).collect();
    if bundles.is_empty() {
        return None;
    }
    let mut h = sha2::Sha256::new();
    for (secret, key) in bundles {
        let data = fetched.get(secret).and_then(|d| d.as_ref()).and_then(|d| d.get(key)).cloned().unwrap_or_default();
        for part in [secret.as_bytes(), key.as_bytes(), &data] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part);
        }
    }
    Some(hex::encode(&h.finalize()[..8]))
}

#[cfg(test)]
#[path = "material_tests.rs"]
mod tests;

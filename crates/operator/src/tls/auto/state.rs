//! What the operator's TLS Secrets hold, parsed: the CA Secret ([`CaState`]: the signing CA,
//! the one being introduced, the ones being retired, the rotation phase), each certificate
//! Secret ([`LeafState`]: certificate, trust bundle, issuer, what the checks refuse), and what
//! members serve ([`Served`]). Pure: Secret data and the time come in. Key material never
//! appears in `Debug` output ([`KeyPem`]).

use std::collections::{BTreeMap, BTreeSet};

use x509_parser::pem::Pem;

use super::{CA_CERT, CA_KEY, CA_ROTATION_ANNOTATION, Leaf, NEXT_CA_CERT, NEXT_CA_KEY, PREVIOUS_CA_CERT, Settings};
use crate::tls::{check, required_names};

/// A private key in PEM; `Debug` shows nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyPem(pub String);

impl std::fmt::Debug for KeyPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPem(..)")
    }
}

/// A certificate's identity: the first 8 bytes of the SHA-256 of its DER, in hex.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CertId(pub String);

/// One certificate, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    pub id: CertId,
    pub der: Vec<u8>,
    /// Serial number, hex bytes separated by `:`.
    pub serial: String,
    pub subject: String,
    /// Seconds since the epoch.
    pub not_before: i64,
    pub not_after: i64,
}

impl CertInfo {
    pub fn from_der(der: &[u8]) -> Result<CertInfo, String> {
        use sha2::Digest;
        let (_, c) = x509_parser::parse_x509_certificate(der).map_err(|e| format!("not an X.509 certificate ({e})"))?;
        Ok(CertInfo {
            id: CertId(hex::encode(&sha2::Sha256::digest(der)[..8])),
            der: der.to_vec(),
            serial: c.raw_serial_as_string(),
            subject: c.subject().to_string(),
            not_before: c.validity().not_before.timestamp(),
            not_after: c.validity().not_after.timestamp(),
        })
    }

    /// Every certificate of a PEM file (a bundle); `Err` if one does not parse or there is none.
    pub fn all_from_pem(pem: &[u8]) -> Result<Vec<CertInfo>, String> {
        let certs: Vec<CertInfo> = Pem::iter_from_buffer(pem)
            .map(|p| p.map_err(|e| format!("not PEM ({e})")))
            .filter(|p| p.as_ref().map_or(true, |p| p.label == "CERTIFICATE"))
            .map(|p| p.and_then(|p| CertInfo::from_der(&p.contents)))
            .collect::<Result<_, _>>()?;
        if certs.is_empty() { Err("no PEM certificate in it".into()) } else { Ok(certs) }
    }

    pub fn pem(&self) -> String {
        let p = Pem { label: "CERTIFICATE".into(), contents: self.der.clone() };
        pem_text(&p)
    }

    /// `notAfter` as RFC 3339, for messages.
    pub fn expires(&self) -> String {
        at(self.not_after)
    }
}

/// Seconds since the epoch as RFC 3339 (for messages).
pub fn at(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(secs).map(|t| t.to_string()).unwrap_or_else(|_| secs.to_string())
}

/// Standard base64 with padding (PEM's body).
fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn pem_text(p: &Pem) -> String {
    let b64 = base64(&p.contents);
    let mut out = format!("-----BEGIN {}-----\n", p.label);
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out + &format!("-----END {}-----\n", p.label)
}

/// Several certificates as one PEM file (a trust bundle), in the order given.
pub fn bundle_pem<'a>(certs: impl IntoIterator<Item = &'a CertInfo>) -> String {
    certs.into_iter().map(CertInfo::pem).collect()
}

/// The id of the certificate among `cas` whose key signed `der`, if any.
pub fn issuer_among(der: &[u8], cas: &[&CertInfo]) -> Option<CertId> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cas.iter()
        .find(|ca| {
            x509_parser::parse_x509_certificate(&ca.der)
                .is_ok_and(|(_, ca)| cert.verify_signature(Some(ca.public_key())).is_ok())
        })
        .map(|ca| ca.id.clone())
}

/// A CA the operator holds: its certificate and, when it can sign, its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authority {
    pub cert: CertInfo,
    pub key: Option<KeyPem>,
}

/// Where a CA rotation stands (the CA Secret's `ca-rotation` annotation, checked against its
/// keys).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// One CA; members trust only it.
    Steady,
    /// A new CA is in the bundles (`next-ca.crt`); members restart to load it.
    Introducing,
    /// The new CA signs; the old one (`previous-ca.crt`) is still trusted while every
    /// certificate is issued again.
    Reissuing,
    /// The old CA left the bundles; members restart to forget it.
    Dropping,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Steady => "",
            Phase::Introducing => "introducing",
            Phase::Reissuing => "reissuing",
            Phase::Dropping => "dropping",
        }
    }
}

/// The CA Secret, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaState {
    /// `ca.crt` + `ca.key`: issues certificates. `None` only while a lost CA is replaced (the
    /// old certificates are then in `previous`, with no key).
    pub signing: Option<Authority>,
    /// `next-ca.crt` + `next-ca.key`: the CA being introduced.
    pub next: Option<Authority>,
    /// `previous-ca.crt`: CAs still trusted that sign nothing any more.
    pub previous: Vec<CertInfo>,
    pub phase: Phase,
    /// The `rotate-ca` value handled last.
    pub rotated_for: Option<String>,
    pub resource_version: Option<String>,
}

impl CaState {
    /// Every CA members must trust now: signing, previous, next.
    pub fn trusted(&self) -> Vec<&CertInfo> {
        let mut out: Vec<&CertInfo> = vec![];
        let all = self.signing.iter().map(|a| &a.cert).chain(&self.previous).chain(self.next.iter().map(|a| &a.cert));
        for c in all {
            if !out.iter().any(|o| o.id == c.id) {
                out.push(c);
            }
        }
        out
    }

    pub fn trust_ids(&self) -> BTreeSet<CertId> {
        self.trusted().into_iter().map(|c| c.id.clone()).collect()
    }
}

/// A Secret as the operator found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found<T> {
    Missing,
    /// It exists but the EtcdCluster does not own it: never overwritten. Says whose it is.
    NotOurs(String),
    /// Ours, but its content cannot be used (the CA Secret only; certificate Secrets are
    /// issued again instead).
    Invalid(Vec<String>),
    Present(T),
}

impl<T> Found<T> {
    pub fn present(&self) -> Option<&T> {
        match self {
            Found::Present(t) => Some(t),
            _ => None,
        }
    }
}

/// A certificate Secret, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafState {
    pub cert: Option<CertInfo>,
    pub key: Option<KeyPem>,
    /// The `*-ca.crt` bundle.
    pub trust: Vec<CertInfo>,
    /// Which known CA signed `cert`.
    pub issuer: Option<CertId>,
    /// What the checks of static material refuse (keys, names, key usage, validity).
    pub problems: Vec<String>,
    pub resource_version: Option<String>,
}

impl LeafState {
    pub fn trust_ids(&self) -> BTreeSet<CertId> {
        self.trust.iter().map(|c| c.id.clone()).collect()
    }
}

/// A certificate a member served, and which known CA issued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedCert {
    pub cert: CertInfo,
    pub issuer: Option<CertId>,
}

/// What one member serves on its client and peer port (`Err`: why it could not be read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    pub client: Result<ServedCert, String>,
    pub peer: Result<ServedCert, String>,
}

/// Everything about a cluster's operator-made certificates at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub settings: Settings,
    pub cluster: String,
    pub namespace: String,
    pub cluster_domain: String,
    /// Seconds since the epoch when the Secrets were read.
    pub now: i64,
    pub ca: Found<CaState>,
    pub leaves: BTreeMap<Leaf, Found<LeafState>>,
    /// The EtcdCluster's `rotate-ca` annotation.
    pub rotate_ca: Option<String>,
    /// By member pod.
    pub served: BTreeMap<String, Served>,
    /// A Secret could not be read at all: nothing is decided.
    pub read_error: Option<String>,
    /// `spec.TLS.auto` was turned off while members still use its certificates
    /// (`super::InUse::Leaving`): `settings` are the certificates' own ([`Observation::leaving`]).
    pub leaving: bool,
    /// `spec.TLS.certManager`: cert-manager issues, the operator copies (`tls::cert_manager`).
    pub cert_manager: Option<crate::tls::cert_manager::Observed>,
}

impl Observation {
    /// How the Secrets are used: `spec.TLS.auto`'s settings, or only renewed while left.
    pub fn in_use(&self) -> super::InUse {
        if self.leaving { super::InUse::Leaving } else { super::InUse::Spec(self.settings) }
    }

    /// The observation of a cluster that turned `spec.TLS.auto` off while members still use
    /// its certificates: the spec's settings are gone, so certificates are renewed as they were
    /// issued (the longest lifetime a certificate Secret holds, renewed with a third of it
    /// left, within the bounds `spec.TLS.auto` allows).
    pub fn leaving(mut self) -> Observation {
        use super::{
            BACKDATE_SECS, MAX_VALIDITY_SECS, MIN_RENEW_BEFORE_SECS, MIN_RENEW_INTERVAL_SECS, MIN_VALIDITY_SECS,
        };
        let lifetime = self
            .leaves
            .values()
            .filter_map(|l| l.present()?.cert.as_ref())
            .map(|c| c.not_after - c.not_before - BACKDATE_SECS)
            .max();
        if let Some(l) = lifetime {
            let validity = l.clamp(MIN_VALIDITY_SECS, MAX_VALIDITY_SECS);
            let renew_before = (validity / 3).max(MIN_RENEW_BEFORE_SECS).min(validity - MIN_RENEW_INTERVAL_SECS);
            self.settings = Settings { validity, renew_before, ca_validity: self.settings.ca_validity.max(validity) };
        }
        self.leaving = true;
        self
    }

    pub fn leaf(&self, l: Leaf) -> Option<&LeafState> {
        self.leaves.get(&l).and_then(Found::present)
    }

    /// What the member Secrets' bundles hold (`peer-ca.crt`, `server-ca.crt`), as one short
    /// hash: part of the pod-spec hash, so that members restart when it changes (etcd reads
    /// trusted CAs only at start). `None` while either Secret is missing.
    pub fn trust_fingerprint(&self) -> Option<String> {
        use sha2::Digest;
        let (peer, server) = (self.leaf(Leaf::Peer)?, self.leaf(Leaf::Server)?);
        let ids = |l: &LeafState| l.trust_ids().into_iter().map(|c| c.0).collect::<Vec<_>>().join(",");
        let text = format!("peer:{}|server:{}", ids(peer), ids(server));
        Some(hex::encode(&sha2::Sha256::digest(text.as_bytes())[..8]))
    }

    /// Every CA certificate the operator knows of (CA Secret and bundles), to tell who issued
    /// what a member serves.
    pub fn known_cas(&self) -> Vec<CertInfo> {
        let mut out: Vec<CertInfo> = vec![];
        let from_ca: Vec<CertInfo> =
            self.ca.present().map(|c| c.trusted().into_iter().cloned().collect()).unwrap_or_default();
        let from_leaves = self.leaves.values().filter_map(Found::present).flat_map(|l| l.trust.clone());
        for c in from_ca.into_iter().chain(from_leaves) {
            if !out.iter().any(|o: &CertInfo| o.id == c.id) {
                out.push(c);
            }
        }
        out
    }

    /// A certificate a member served, with its issuer among the known CAs.
    pub fn served_cert(&self, der: &[u8]) -> Result<ServedCert, String> {
        let cert = CertInfo::from_der(der)?;
        let known = self.known_cas();
        let issuer = issuer_among(der, &known.iter().collect::<Vec<_>>());
        Ok(ServedCert { cert, issuer })
    }
}

/// A Secret's data by key.
pub type Data = BTreeMap<String, Vec<u8>>;

/// The CA Secret's content checked: the certificates parse, each key belongs to its
/// certificate, the phase agrees with the keys present.
pub fn parse_ca(
    data: &Data,
    annotations: &BTreeMap<String, String>,
    resource_version: Option<String>,
    secret: &str,
) -> Result<CaState, Vec<String>> {
    let mut errs = vec![];
    let mut authority = |cert_key: &str, key_key: &str| -> Option<Authority> {
        let cert = data.get(cert_key).filter(|v| !v.is_empty())?;
        let cert = match CertInfo::all_from_pem(cert) {
            Ok(mut v) if v.len() == 1 => v.remove(0),
            Ok(_) => {
                errs.push(format!("Secret {secret} key {cert_key}: more than one certificate"));
                return None;
            }
            Err(e) => {
                errs.push(format!("Secret {secret} key {cert_key}: {e}"));
                return None;
            }
        };
        // No key: a CA that signs nothing here (cert-manager's issuer's CA, `tls::cert_manager`).
        let Some(key) = data.get(key_key).filter(|v| !v.is_empty()) else {
            return Some(Authority { cert, key: None });
        };
        let key = String::from_utf8_lossy(key).to_string();
        match rcgen::KeyPair::from_pem(&key) {
            Ok(k)
                if spki_of(&cert.der).as_deref()
                    == Some(rcgen::PublicKeyData::subject_public_key_info(&k).as_slice()) => {}
            Ok(_) => errs.push(format!("Secret {secret} key {key_key} does not belong to {cert_key}")),
            Err(e) => errs.push(format!("Secret {secret} key {key_key}: not a PEM private key ({e})")),
        }
        Some(Authority { cert, key: Some(KeyPem(key)) })
    };
    let signing = authority(CA_CERT, CA_KEY);
    let next = authority(NEXT_CA_CERT, NEXT_CA_KEY);
    let previous = match data.get(PREVIOUS_CA_CERT).filter(|v| !v.is_empty()) {
        None => vec![],
        Some(p) => CertInfo::all_from_pem(p).unwrap_or_else(|e| {
            errs.push(format!("Secret {secret} key {PREVIOUS_CA_CERT}: {e}"));
            vec![]
        }),
    };
    if errs.is_empty() && signing.is_none() && next.is_none() {
        errs.push(format!("Secret {secret} holds no CA ({CA_CERT}, with {CA_KEY} when the operator signs)"));
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    // The keys present decide; the annotation only tells a finished retirement (no key left
    // to show it) from a steady state.
    let phase = if next.is_some() {
        Phase::Introducing
    } else if !previous.is_empty() {
        Phase::Reissuing
    } else if annotations.get(CA_ROTATION_ANNOTATION).map(String::as_str) == Some(Phase::Dropping.as_str()) {
        Phase::Dropping
    } else {
        Phase::Steady
    };
    Ok(CaState {
        signing,
        next,
        previous,
        phase,
        rotated_for: annotations.get(super::ROTATE_CA_ANNOTATION).cloned(),
        resource_version,
    })
}

fn spki_of(der: &[u8]) -> Option<Vec<u8>> {
    let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(c.public_key().raw.to_vec())
}

/// Where a cluster's certificates must reach: its name, namespace and DNS domain.
#[derive(Clone, Copy, Debug)]
pub struct Names<'a> {
    pub cluster: &'a str,
    pub namespace: &'a str,
    pub domain: &'a str,
}

/// A certificate Secret's content: what the static checks say of it, its bundle, and which of
/// `cas` (or of its own bundle) issued it.
pub fn parse_leaf(
    leaf: Leaf,
    data: &Data,
    names: Names,
    now: i64,
    cas: &[&CertInfo],
    resource_version: Option<String>,
) -> LeafState {
    let keys = leaf.keys();
    let secret = leaf.secret(names.cluster);
    let required = required_names(leaf.usage(), names.cluster, names.namespace, names.domain);
    let problems = check::secret(&secret, Some(data), keys, leaf.usage(), &required, now).err().unwrap_or_default();
    let cert = data.get(keys.cert).and_then(|p| CertInfo::all_from_pem(p).ok()).and_then(|v| v.into_iter().next());
    let trust = data.get(keys.ca).and_then(|p| CertInfo::all_from_pem(p).ok()).unwrap_or_default();
    let issuer = cert.as_ref().and_then(|c| {
        let mut all: Vec<&CertInfo> = cas.to_vec();
        all.extend(trust.iter());
        issuer_among(&c.der, &all)
    });
    let key = data.get(keys.key).map(|k| KeyPem(String::from_utf8_lossy(k).to_string()));
    LeafState { cert, key, trust, issuer, problems, resource_version }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_pems() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn key_material_never_shows_in_debug() {
        let k = KeyPem("-----BEGIN PRIVATE KEY-----\nsecret".into());
        assert_eq!(format!("{k:?}"), "KeyPem(..)");
    }
}

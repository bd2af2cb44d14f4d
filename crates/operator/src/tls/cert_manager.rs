//! `spec.TLS.certManager`: certificates issued by cert-manager. The operator keeps one
//! cert-manager `Certificate` per certificate Secret of `spec.TLS.auto` ([`certificate`]:
//! `<cluster>-cm-<peer|server|operator|client>`, issued into a Secret of the same name), and
//! copies what cert-manager issued ([`Issued`]) into `auto`'s Secrets, whose trust bundles it
//! keeps itself. Everything after the copy is `auto`'s: the mounts, the CA Secret (the
//! issuer's CA without its key), the CA rotation steps and their gates
//! (`planner::certificates`). Why copy instead of mounting cert-manager's Secrets: cert-manager
//! writes a certificate of a new CA as soon as it has one, before any member trusts that CA;
//! the copy lets a new CA wait until every member trusts it (etcd reads trusted CAs only at
//! start).
//!
//! Pure: the Certificate objects as JSON, cert-manager's Secrets and Certificates as read.

use std::collections::BTreeMap;

use etcd_operator_api::cluster::CertManagerTls;

use super::auto::state::{CertId, CertInfo, Data, KeyPem, Names, issuer_among};
use super::auto::{Leaf, Settings};
use super::{Keys, check, required_names};

/// cert-manager's API group and version of `Certificate`.
pub const GROUP: &str = "cert-manager.io";
pub const VERSION: &str = "v1";
pub const KIND: &str = "Certificate";
pub const PLURAL: &str = "certificates";
/// Key names of the Secrets cert-manager issues into.
pub const ISSUED_KEYS: Keys = Keys { cert: "tls.crt", key: "tls.key", ca: "ca.crt" };
/// cert-manager's shortest certificate lifetime (its webhook refuses shorter).
pub const MIN_DURATION_SECS: i64 = 3600;
/// cert-manager's default certificate lifetime (the `duration` of a Certificate that sets none).
pub const DEFAULT_DURATION_SECS: i64 = 90 * 24 * 3600;

/// The issuer, with its defaults filled in.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Issuer {
    pub name: String,
    pub kind: String,
    pub group: String,
}

/// `spec.TLS.certManager` checked: the issuer and the lifetimes asked of cert-manager (as
/// `auto`'s settings: `validity` is the Certificates' `duration`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Request {
    pub issuer: Issuer,
    pub settings: Settings,
}

impl Request {
    /// `Err` lists every problem, by field.
    pub fn of(c: &CertManagerTls) -> Result<Request, Vec<String>> {
        let mut errs = vec![];
        let r = &c.issuer_ref;
        if r.name.trim().is_empty() {
            errs.push("spec.TLS.certManager.issuerRef.name is empty: name the cert-manager Issuer or ClusterIssuer that signs the certificates".into());
        }
        // The CA is the issuer's: its lifetime is not this operator's to check.
        let auto = etcd_operator_api::cluster::AutoTls {
            validity: c.duration.clone(),
            renew_before: c.renew_before.clone(),
            ca_validity: super::auto::show(super::auto::MAX_CA_VALIDITY_SECS),
        };
        let settings = match Settings::of(&auto) {
            Ok(s) => s,
            Err(e) => {
                let rename = |m: String| {
                    m.replace("spec.TLS.auto.validity", "spec.TLS.certManager.duration")
                        .replace("spec.TLS.auto.renewBefore", "spec.TLS.certManager.renewBefore")
                        .replace("than validity", "than duration")
                };
                errs.extend(e.into_iter().map(rename));
                Settings::default()
            }
        };
        if errs.is_empty() && settings.validity < MIN_DURATION_SECS {
            errs.push(format!(
                "spec.TLS.certManager.duration {:?} is shorter than cert-manager's minimum of 1h",
                c.duration
            ));
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let or = |v: &str, d: &str| if v.is_empty() { d.to_string() } else { v.to_string() };
        Ok(Request {
            issuer: Issuer { name: r.name.clone(), kind: or(&r.kind, "Issuer"), group: or(&r.group, GROUP) },
            settings,
        })
    }
}

/// The Certificate, and the Secret cert-manager issues it into: `<cluster>-cm-<leaf>`.
pub fn name(cluster: &str, leaf: Leaf) -> String {
    format!("{cluster}-cm-{}", leaf.as_str())
}

/// The `spec` of the Certificate for `leaf`: the DNS names `auto` puts in it, its key usages,
/// a new ECDSA P-256 key at each issue, the lifetimes asked.
pub fn certificate_spec(leaf: Leaf, r: &Request, n: Names) -> serde_json::Value {
    let usages: &[&str] = match leaf.usage() {
        super::Use::Peer | super::Use::Server => {
            &["digital signature", "key encipherment", "server auth", "client auth"]
        }
        super::Use::Client => &["digital signature", "key encipherment", "client auth"],
    };
    let mut spec = serde_json::json!({
        "secretName": name(n.cluster, leaf),
        "commonName": leaf.common_name(),
        "issuerRef": {"name": r.issuer.name, "kind": r.issuer.kind, "group": r.issuer.group},
        "usages": usages,
        "duration": super::auto::show(r.settings.validity),
        "renewBefore": super::auto::show(r.settings.renew_before),
        "privateKey": {"algorithm": "ECDSA", "size": 256, "encoding": "PKCS8", "rotationPolicy": "Always"},
        "secretTemplate": {"labels": {
            crate::naming::APP_LABEL.0: crate::naming::APP_LABEL.1,
            crate::naming::CLUSTER_LABEL: n.cluster,
        }},
    });
    let dns = super::auto::issuer::dns_names(leaf, n);
    if !dns.is_empty() {
        spec["dnsNames"] = serde_json::json!(dns);
    }
    spec
}

/// A Certificate as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateState {
    /// Its `spec` as the operator would write it now.
    pub spec_current: bool,
    /// The EtcdCluster owns it (else it is never overwritten).
    pub ours: bool,
    /// cert-manager is issuing it now (condition `Issuing` is `True`): a renewal asked for is
    /// under way.
    pub issuing: bool,
    /// Condition `Ready`'s message when it is not `True` (what cert-manager says is wrong).
    pub not_ready: Option<String>,
    /// cert-manager's last issue failed (`status.failedIssuanceAttempts`, `lastFailureTime`):
    /// it retries on its own backoff; the operator does not ask again meanwhile.
    pub failed: bool,
    pub resource_version: Option<String>,
}

/// A Certificate object's state from its JSON (`spec_wanted`: what [`certificate_spec`] gives).
pub fn certificate_state(
    obj: &serde_json::Value,
    spec_wanted: &serde_json::Value,
    owner_uid: &str,
) -> CertificateState {
    let cond = |t: &str| {
        obj.pointer("/status/conditions")
            .and_then(|c| c.as_array())
            .and_then(|cs| cs.iter().find(|c| c.get("type").and_then(|v| v.as_str()) == Some(t)))
    };
    let status_of = |t: &str| cond(t).and_then(|c| c.get("status")).and_then(|s| s.as_str()).map(str::to_string);
    let ready = status_of("Ready");
    let not_ready = match ready.as_deref() {
        Some("True") => None,
        _ => Some(
            cond("Ready")
                .and_then(|c| c.get("message"))
                .and_then(|m| m.as_str())
                .unwrap_or("not issued yet")
                .to_string(),
        ),
    };
    let owners = obj.pointer("/metadata/ownerReferences").and_then(|o| o.as_array()).cloned().unwrap_or_default();
    CertificateState {
        spec_current: contains(obj.get("spec").unwrap_or(&serde_json::Value::Null), spec_wanted),
        ours: owners.iter().any(|o| o.get("uid").and_then(|u| u.as_str()) == Some(owner_uid)),
        issuing: status_of("Issuing").as_deref() == Some("True"),
        not_ready,
        failed: obj.pointer("/status/failedIssuanceAttempts").and_then(|v| v.as_i64()).is_some_and(|n| n > 0)
            || obj.pointer("/status/lastFailureTime").is_some_and(|v| !v.is_null()),
        resource_version: obj.pointer("/metadata/resourceVersion").and_then(|v| v.as_str()).map(str::to_string),
    }
}

/// Whether `have` holds every field of `want` with the same value (cert-manager's defaulting
/// may add fields; those are not a difference).
fn contains(have: &serde_json::Value, want: &serde_json::Value) -> bool {
    match (have, want) {
        (serde_json::Value::Object(h), serde_json::Value::Object(w)) => {
            w.iter().all(|(k, wv)| h.get(k).is_some_and(|hv| contains(hv, wv)))
        }
        _ => have == want,
    }
}

/// What cert-manager issued into one Secret: the certificate (its PEM as written: copied as
/// it is, intermediates included), its key, the CA that signed it (from `ca.crt`), and what
/// the checks of static material refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub cert: CertInfo,
    pub key: KeyPem,
    /// The certificate of `ca.crt` that signed `cert`.
    pub ca: Option<CertInfo>,
    pub problems: Vec<String>,
}

impl Issued {
    pub fn issuer(&self) -> Option<&CertId> {
        self.ca.as_ref().map(|c| &c.id)
    }

    /// Fit to be copied: no problem and a known signing CA.
    pub fn usable(&self) -> bool {
        self.problems.is_empty() && self.ca.is_some()
    }
}

/// cert-manager's Secret for `leaf`, parsed; `None` when it holds no certificate yet.
pub fn parse_issued(leaf: Leaf, data: &Data, n: Names, now: i64) -> Option<Issued> {
    let secret = name(n.cluster, leaf);
    let cert_pem = String::from_utf8_lossy(data.get(ISSUED_KEYS.cert).filter(|v| !v.is_empty())?).to_string();
    let cert = CertInfo::all_from_pem(cert_pem.as_bytes()).ok()?.into_iter().next()?;
    let required = required_names(leaf.usage(), n.cluster, n.namespace, n.domain);
    let mut problems =
        check::secret(&secret, Some(data), ISSUED_KEYS, leaf.usage(), &required, now).err().unwrap_or_default();
    let cas = data.get(ISSUED_KEYS.ca).and_then(|p| CertInfo::all_from_pem(p).ok()).unwrap_or_default();
    let ca =
        issuer_among(&cert.der, &cas.iter().collect::<Vec<_>>()).and_then(|id| cas.into_iter().find(|c| c.id == id));
    if ca.is_none() && problems.is_empty() {
        problems.push(format!(
            "Secret {secret}: {} is not signed by a certificate of {} (the issuer must put the CA that signs in ca.crt; intermediate CAs are not supported)",
            ISSUED_KEYS.cert, ISSUED_KEYS.ca
        ));
    }
    let key =
        KeyPem(String::from_utf8_lossy(data.get(ISSUED_KEYS.key).map(Vec::as_slice).unwrap_or_default()).to_string());
    Some(Issued { cert_pem, cert, key, ca, problems })
}

/// The owner reference the operator adds to cert-manager's Secrets: not a controller
/// reference, since cert-manager may hold that one (`--enable-certificate-owner-ref`) and the
/// API server allows one controller only.
pub fn issued_secret_owner(
    cluster: &etcd_operator_api::EtcdCluster,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..crate::naming::owner_ref(cluster)
    }
}

/// Everything about cert-manager's side of a cluster at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub request: Request,
    /// Whether the API server serves cert-manager's Certificates (discovery); `Err` says what
    /// is missing.
    pub api: Result<(), String>,
    /// The Certificates, by leaf (`None`: it does not exist).
    pub certificates: BTreeMap<Leaf, Option<CertificateState>>,
    /// What cert-manager issued, by leaf (`None`: no Secret, or no certificate in it yet).
    pub issued: BTreeMap<Leaf, Option<Issued>>,
    /// cert-manager's Secrets the EtcdCluster does not own yet: cert-manager leaves its
    /// Secrets behind when a Certificate is deleted (unless run with
    /// `--enable-certificate-owner-ref`), so the operator adds its owner reference.
    pub unowned_secrets: Vec<Leaf>,
}

impl Observed {
    pub fn issued(&self, l: Leaf) -> Option<&Issued> {
        self.issued.get(&l).and_then(Option::as_ref)
    }

    /// The CA cert-manager issues from now: the one that signed every usable peer and server
    /// certificate, when they agree.
    pub fn issuing_ca(&self) -> Option<&CertInfo> {
        let peer = self.issued(Leaf::Peer).filter(|i| i.usable())?.ca.as_ref()?;
        let server = self.issued(Leaf::Server).filter(|i| i.usable())?.ca.as_ref()?;
        (peer.id == server.id).then_some(peer)
    }

    /// A certificate cert-manager issued from a CA not among `trusted` (the issuer's CA
    /// changed): the first such, by leaf, with that CA.
    pub fn untrusted_ca(&self, trusted: &std::collections::BTreeSet<CertId>) -> Option<(Leaf, &CertInfo)> {
        Leaf::ALL.into_iter().find_map(|l| {
            let new = self.issued(l).filter(|i| i.usable())?.ca.as_ref().filter(|a| !trusted.contains(&a.id))?;
            Some((l, new))
        })
    }

    /// Why nothing is issued yet, from the Certificates' `Ready` conditions.
    pub fn waiting_for(&self) -> String {
        let mut out = vec![];
        for l in Leaf::ALL {
            let n = l.as_str();
            match (self.certificates.get(&l).and_then(Option::as_ref), self.issued(l)) {
                (None, _) => out.push(format!("{n}: no Certificate yet")),
                (Some(c), None) => {
                    out.push(format!("{n}: {}", c.not_ready.as_deref().unwrap_or("no certificate in its Secret yet")))
                }
                (Some(_), Some(i)) if !i.problems.is_empty() => out.push(format!("{n}: {}", i.problems.join("; "))),
                (Some(c), Some(_)) if c.not_ready.is_some() || c.failed => {
                    out.push(format!("{n}: {}", c.not_ready.as_deref().unwrap_or("its last issue failed")))
                }
                _ => {}
            }
        }
        out.join("; ")
    }

    /// Why the peer and server certificates name no one CA, when both are issued.
    pub fn different_cas(&self) -> Option<String> {
        let ca = |l: Leaf| self.issued(l).filter(|i| i.usable()).and_then(|i| i.ca.clone());
        let (p, s) = (ca(Leaf::Peer)?, ca(Leaf::Server)?);
        (p.id != s.id).then(|| {
            format!(
                "the peer and server certificates are signed by different CAs ({} and {}; a SelfSigned issuer signs each with itself: use a CA issuer)",
                p.subject, s.subject
            )
        })
    }
}

/// The observation from what was read: `api` (discovery), each Certificate's JSON and each
/// issued Secret's data by leaf (`None`: it does not exist). `owner_uid`: the EtcdCluster's.
#[allow(clippy::too_many_arguments)]
pub fn observed(
    request: &Request,
    api: Result<(), String>,
    certificates: &BTreeMap<Leaf, Option<serde_json::Value>>,
    secrets: &BTreeMap<Leaf, Option<Data>>,
    unowned_secrets: Vec<Leaf>,
    n: Names,
    now: i64,
    owner_uid: &str,
) -> Observed {
    let certificates = Leaf::ALL
        .into_iter()
        .map(|l| {
            let spec = certificate_spec(l, request, n);
            (l, certificates.get(&l).and_then(Option::as_ref).map(|c| certificate_state(c, &spec, owner_uid)))
        })
        .collect();
    let issued = Leaf::ALL
        .into_iter()
        .map(|l| (l, secrets.get(&l).and_then(Option::as_ref).and_then(|d| parse_issued(l, d, n, now))))
        .collect();
    Observed { request: request.clone(), api, certificates, issued, unowned_secrets }
}

#[cfg(test)]
mod tests;

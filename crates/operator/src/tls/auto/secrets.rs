//! What the operator's TLS Secrets hold after each decision, as Kubernetes objects: the CA
//! Secret for each step of a CA rotation ([`CaContent`]), a certificate Secret in the static
//! key layout ([`leaf_secret`]), and for one decision of the planner every Secret to write
//! with the Event that says so ([`for_decision`]). Pure but for new keys and serial numbers;
//! every Secret is owned by the EtcdCluster.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::decision::{Decision, LeafWrite};
use super::issuer::{self, Issued};
use super::state::{Authority, CaState, CertInfo, Found, KeyPem, Names, Observation, Phase, bundle_pem};
use super::{
    CA_CERT, CA_KEY, CA_ROTATION_ANNOTATION, Leaf, NEXT_CA_CERT, NEXT_CA_KEY, PREVIOUS_CA_CERT, ROTATE_CA_ANNOTATION,
    ca_secret,
};
use crate::naming::{APP_LABEL, CLUSTER_LABEL};

/// What the CA Secret holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaContent {
    pub signing: Option<Authority>,
    pub next: Option<Authority>,
    pub previous: Vec<CertInfo>,
    pub phase: Phase,
    pub rotated_for: Option<String>,
}

/// A CA just issued, as the CA Secret holds it.
pub fn authority(i: &Issued) -> Result<Authority, String> {
    let cert = CertInfo::all_from_pem(i.cert_pem.as_bytes())?.remove(0);
    Ok(Authority { cert, key: Some(i.key.clone()) })
}

impl CaContent {
    /// The first CA of a cluster (`token`: the `rotate-ca` value at that time, handled by it).
    pub fn created(new: Authority, token: Option<String>) -> CaContent {
        CaContent { signing: Some(new), next: None, previous: vec![], phase: Phase::Steady, rotated_for: token }
    }

    /// A lost CA replaced: the new one is introduced beside what members trust now.
    pub fn replacing_lost(new: Authority, trusted: Vec<CertInfo>, token: Option<String>) -> CaContent {
        CaContent { signing: None, next: Some(new), previous: trusted, phase: Phase::Introducing, rotated_for: token }
    }

    /// Phase 1: the new CA beside the current one.
    pub fn started(ca: &CaState, new: Authority, token: Option<String>) -> CaContent {
        CaContent {
            signing: ca.signing.clone(),
            next: Some(new),
            previous: ca.previous.clone(),
            phase: Phase::Introducing,
            rotated_for: token.or_else(|| ca.rotated_for.clone()),
        }
    }

    /// Phase 2: the new CA signs, the old ones are only trusted.
    pub fn promoted(ca: &CaState) -> CaContent {
        let mut previous = ca.previous.clone();
        if let Some(s) = &ca.signing
            && !previous.iter().any(|p| p.id == s.cert.id)
        {
            previous.push(s.cert.clone());
        }
        CaContent {
            signing: ca.next.clone(),
            next: None,
            previous,
            phase: Phase::Reissuing,
            rotated_for: ca.rotated_for.clone(),
        }
    }

    /// Phase 3: the old CAs leave the bundles.
    pub fn dropped(ca: &CaState) -> CaContent {
        CaContent {
            signing: ca.signing.clone(),
            next: None,
            previous: vec![],
            phase: Phase::Dropping,
            rotated_for: ca.rotated_for.clone(),
        }
    }

    /// The rotation is over.
    pub fn finished(ca: &CaState) -> CaContent {
        CaContent { phase: Phase::Steady, ..CaContent::dropped(ca) }
    }

    fn data(&self) -> BTreeMap<String, ByteString> {
        let mut d = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            d.insert(k.to_string(), ByteString(v.into_bytes()));
        };
        for (a, cert, key) in [(&self.signing, CA_CERT, CA_KEY), (&self.next, NEXT_CA_CERT, NEXT_CA_KEY)] {
            if let Some(a) = a {
                put(cert, a.cert.pem());
                if let Some(k) = &a.key {
                    put(key, k.0.clone());
                }
            }
        }
        if !self.previous.is_empty() {
            put(PREVIOUS_CA_CERT, bundle_pem(&self.previous));
        }
        d
    }
}

fn meta(c: &EtcdCluster, name: String, annotations: BTreeMap<String, String>, rv: Option<String>) -> ObjectMeta {
    let labels =
        BTreeMap::from([(APP_LABEL.0.to_string(), APP_LABEL.1.to_string()), (CLUSTER_LABEL.to_string(), c.name_any())]);
    ObjectMeta {
        name: Some(name),
        namespace: c.namespace(),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        owner_references: Some(vec![crate::naming::owner_ref(c)]),
        resource_version: rv,
        ..Default::default()
    }
}

/// The CA Secret with `content`; `rv`: the version it replaces (`None`: a new Secret).
pub fn ca_secret_object(c: &EtcdCluster, content: &CaContent, rv: Option<String>) -> Secret {
    let mut annotations = BTreeMap::new();
    if content.phase != Phase::Steady {
        annotations.insert(CA_ROTATION_ANNOTATION.to_string(), content.phase.as_str().to_string());
    }
    if let Some(t) = &content.rotated_for {
        annotations.insert(ROTATE_CA_ANNOTATION.to_string(), t.clone());
    }
    Secret {
        metadata: meta(c, ca_secret(&c.name_any()), annotations, rv),
        type_: Some("Opaque".into()),
        data: Some(content.data()),
        ..Default::default()
    }
}

/// A certificate Secret in the static key layout: certificate, key, and the bundle of CAs the
/// other side's certificates are checked against.
pub fn leaf_secret(
    c: &EtcdCluster,
    leaf: Leaf,
    cert_pem: &str,
    key: &KeyPem,
    trust: &[&CertInfo],
    rv: Option<String>,
) -> Secret {
    let keys = leaf.keys();
    let data = BTreeMap::from([
        (keys.cert.to_string(), ByteString(cert_pem.as_bytes().to_vec())),
        (keys.key.to_string(), ByteString(key.0.as_bytes().to_vec())),
        (keys.ca.to_string(), ByteString(bundle_pem(trust.iter().copied()).into_bytes())),
    ]);
    Secret {
        metadata: meta(c, leaf.secret(&c.name_any()), BTreeMap::new(), rv),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// The Secrets one decision writes, in order, and the Event that reports it.
#[derive(Clone, Debug)]
pub struct Writes {
    /// Each with the resource version it replaces (`None`: created).
    pub secrets: Vec<Secret>,
    pub reason: &'static str,
    pub note: String,
}

/// What carrying out `d` writes, issuing what it needs (new CA, new certificates) at `c.now`.
pub fn for_decision(cluster: &EtcdCluster, c: &Observation, d: &Decision) -> Result<Writes, String> {
    let names = Names { cluster: &c.cluster, namespace: &c.namespace, domain: &c.cluster_domain };
    let ca_name = ca_secret(&c.cluster);
    let ca = c.ca.present();
    // The operator's own new CA; with cert-manager, the issuer's (no key): the one it issues
    // from for a first or lost CA, the one members do not trust yet for a rotation.
    let new_ca = || match &c.cert_manager {
        None => issuer::new_ca(names, c.now, c.settings.ca_validity).and_then(|i| authority(&i)),
        Some(cm) => {
            let found = match (d, ca) {
                (Decision::StartCaRotation { .. }, Some(ca)) => cm.untrusted_ca(&ca.trust_ids()).map(|(_, x)| x),
                _ => cm.issuing_ca(),
            };
            let cert = found.ok_or("cert-manager has issued no certificate from a CA the step can take")?;
            Ok(Authority { cert: cert.clone(), key: None })
        }
    };
    let ca_rv = ca.and_then(|ca| ca.resource_version.clone());
    let one = |content: CaContent, rv: Option<String>, reason: &'static str, note: String| Writes {
        secrets: vec![ca_secret_object(cluster, &content, rv)],
        reason,
        note,
    };
    let current = || ca.ok_or_else(|| format!("Secret {ca_name} holds no CA"));
    Ok(match d {
        Decision::CreateCa => {
            let a = new_ca()?;
            let note = format!("created the cluster's CA in Secret {ca_name}, valid until {}", a.cert.expires());
            one(CaContent::created(a, c.rotate_ca.clone()), None, "CertificateAuthorityCreated", note)
        }
        Decision::ReplaceLostCa { trusted } => one(
            CaContent::replacing_lost(new_ca()?, trusted.clone(), c.rotate_ca.clone()),
            None,
            "CertificateAuthorityReplaced",
            format!(
                "Secret {ca_name} was gone: a new CA is introduced beside the {} CA(s) the members trust; members restart twice",
                trusted.len()
            ),
        ),
        Decision::StartCaRotation { why } => one(
            CaContent::started(current()?, new_ca()?, c.rotate_ca.clone()),
            ca_rv,
            "CARotationStarted",
            format!("{why}: a new CA joins every CA bundle; members restart one at a time to trust it (1/3)"),
        ),
        Decision::PromoteNextCa => one(
            CaContent::promoted(current()?),
            ca_rv,
            "CARotationReissuing",
            "every member trusts the new CA: it signs from now on and every certificate is issued again (2/3)".into(),
        ),
        Decision::DropPreviousCa => one(
            CaContent::dropped(current()?),
            ca_rv,
            "CARotationDroppingOldCA",
            "every member serves certificates of the new CA: the old CA leaves the bundles; members restart one at a time (3/3)"
                .into(),
        ),
        Decision::FinishCaRotation => one(
            CaContent::finished(current()?),
            ca_rv,
            "CARotationFinished",
            "CA rotation finished: every member trusts only the new CA".into(),
        ),
        Decision::WriteLeaves(ws) => {
            let ca = current()?;
            let trust = ca.trusted();
            let (mut secrets, mut done, mut all_new) = (vec![], vec![], true);
            for w in ws {
                let leaf = w.leaf();
                let found = c.leaves.get(&leaf).unwrap_or(&Found::Missing);
                all_new &= matches!(found, Found::Missing);
                let existing = found.present();
                let rv = existing.and_then(|l| l.resource_version.clone());
                let secret = leaf.secret(&c.cluster);
                secrets.push(match w {
                    LeafWrite::Issue { why, .. } if c.cert_manager.is_some() => {
                        let issued = c
                            .cert_manager
                            .as_ref()
                            .and_then(|cm| cm.issued(leaf))
                            .ok_or_else(|| format!("cert-manager's Secret for {secret} holds no certificate"))?;
                        done.push(format!(
                            "Secret {secret}: cert-manager's certificate, serial {} ({why})",
                            issued.cert.serial
                        ));
                        leaf_secret(cluster, leaf, &issued.cert_pem, &issued.key, &trust, rv)
                    }
                    // Asked of cert-manager by the controller; no Secret.
                    LeafWrite::Renew { .. } => continue,
                    LeafWrite::Issue { why, .. } => {
                        let signer = ca.signing.as_ref().ok_or_else(|| format!("Secret {ca_name}: no CA signs"))?;
                        let i = issuer::issue(leaf, names, signer, c.now, c.settings.validity)?;
                        done.push(format!("Secret {secret}: new certificate ({why})"));
                        leaf_secret(cluster, leaf, &i.cert_pem, &i.key, &trust, rv)
                    }
                    LeafWrite::Retrust { .. } => {
                        let (cert, key) = existing
                            .and_then(|l| Some((l.cert.as_ref()?, l.key.as_ref()?)))
                            .ok_or_else(|| format!("Secret {secret}: no certificate to keep"))?;
                        done.push(format!("Secret {secret}: CA bundle of {} CA(s)", trust.len()));
                        leaf_secret(cluster, leaf, &cert.pem(), key, &trust, rv)
                    }
                });
            }
            let reason = if all_new { "CertificatesIssued" } else { "CertificatesWritten" };
            Writes { secrets, reason, note: done.join("; ") }
        }
        Decision::ApplyCertificates(_)
        | Decision::OwnIssuedSecrets(_)
        | Decision::Off
        | Decision::Wait { .. }
        | Decision::Settled { .. }
        | Decision::Blocked(_) => {
            return Err("no Secret to write".into());
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::auto::issuer::new_ca;
    use crate::tls::auto::state::{Data, Names, parse_ca};

    const NAMES: Names = Names { cluster: "ex", namespace: "ns", domain: "" };

    fn cluster() -> EtcdCluster {
        let mut c = EtcdCluster::new("ex", Default::default());
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn read_back(s: &Secret) -> CaState {
        let data: Data = s.data.clone().unwrap().into_iter().map(|(k, v)| (k, v.0)).collect();
        parse_ca(&data, &s.metadata.annotations.clone().unwrap_or_default(), None, "ex-tls-ca").unwrap()
    }

    /// Each step of a CA rotation, written and read back: the phase and what is trusted.
    #[test]
    fn a_ca_rotation_written_and_read_back_step_by_step() {
        let a = authority(&new_ca(NAMES, 1000, 7200).unwrap()).unwrap();
        let b = authority(&new_ca(NAMES, 2000, 7200).unwrap()).unwrap();
        let c = cluster();
        let s = ca_secret_object(&c, &CaContent::created(a.clone(), None), None);
        assert_eq!(s.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        assert_eq!(s.metadata.name.as_deref(), Some("ex-tls-ca"));
        let steady = read_back(&s);
        assert_eq!((steady.phase, steady.trust_ids().len()), (Phase::Steady, 1));

        let started =
            read_back(&ca_secret_object(&c, &CaContent::started(&steady, b.clone(), Some("t1".into())), None));
        assert_eq!(started.phase, Phase::Introducing);
        assert_eq!(started.trust_ids(), [a.cert.id.clone(), b.cert.id.clone()].into());
        assert_eq!(started.signing.as_ref().unwrap().cert.id, a.cert.id, "the old CA still signs");
        assert_eq!(started.rotated_for.as_deref(), Some("t1"));

        let promoted = read_back(&ca_secret_object(&c, &CaContent::promoted(&started), None));
        assert_eq!(promoted.phase, Phase::Reissuing);
        assert_eq!(promoted.signing.as_ref().unwrap().cert.id, b.cert.id, "the new CA signs");
        assert_eq!(promoted.trust_ids(), started.trust_ids(), "the same bundle: no restart");

        let dropped = read_back(&ca_secret_object(&c, &CaContent::dropped(&promoted), None));
        assert_eq!((dropped.phase, dropped.trust_ids()), (Phase::Dropping, [b.cert.id.clone()].into()));
        let done = read_back(&ca_secret_object(&c, &CaContent::finished(&dropped), None));
        assert_eq!(done.phase, Phase::Steady);
        assert_eq!(done.rotated_for.as_deref(), Some("t1"), "the handled value stays recorded");
    }

    #[test]
    fn a_lost_ca_is_replaced_beside_what_members_trust() {
        let a = authority(&new_ca(NAMES, 1000, 7200).unwrap()).unwrap();
        let b = authority(&new_ca(NAMES, 2000, 7200).unwrap()).unwrap();
        let s = ca_secret_object(&cluster(), &CaContent::replacing_lost(b.clone(), vec![a.cert.clone()], None), None);
        let st = read_back(&s);
        assert_eq!(st.phase, Phase::Introducing);
        assert!(st.signing.is_none(), "the lost CA's key is gone: nothing signs until the new CA is trusted");
        assert_eq!(st.trust_ids(), [a.cert.id.clone(), b.cert.id.clone()].into());
        let promoted = CaContent::promoted(&st);
        assert_eq!(promoted.signing.unwrap().cert.id, b.cert.id);
        assert_eq!(promoted.previous, vec![a.cert]);
    }
}

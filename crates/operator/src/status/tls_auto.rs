//! The `CertificatesReady` condition of a cluster with `spec.TLS.auto`: `True` when every
//! member serves the certificates its Secrets hold and no CA rotation is under way; `False`
//! with what is under way (`Issuing`, `Renewing`, `CARotation`, `CARotationDue`, `Checking`)
//! or `Blocked` (a person must act: a warning). Pure: from the certificate planner's decision.

use etcd_operator_api::condition::{self, Condition};

use crate::tls::auto::decision::{Decision, LeafWrite};

pub const CERTIFICATES_READY: &str = "CertificatesReady";

fn cond(ok: bool, reason: &str, message: String) -> Condition {
    Condition {
        type_: CERTIFICATES_READY.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        ..Default::default()
    }
}

/// The condition for a decision; `None`: the cluster does not use `spec.TLS.auto`.
pub fn condition(d: &Decision) -> Option<Condition> {
    Some(match d {
        Decision::Off => return None,
        Decision::Settled { message } => cond(true, "Current", message.clone()),
        Decision::Wait { reason, message } => cond(false, reason, message.clone()),
        Decision::Blocked(m) => cond(false, "Blocked", m.clone()),
        Decision::ApplyCertificates(ls) => {
            let names: Vec<&str> = ls.iter().map(|l| l.as_str()).collect();
            cond(false, "Issuing", format!("writing cert-manager Certificates: {}", names.join(", ")))
        }
        Decision::OwnIssuedSecrets(_) => cond(false, "Issuing", "taking ownership of cert-manager's Secrets".into()),
        Decision::CreateCa => cond(false, "Issuing", "creating the cluster's CA".into()),
        Decision::ReplaceLostCa { .. } => cond(
            false,
            "CARotation",
            "the CA Secret is gone: a new CA is introduced beside the one members trust".into(),
        ),
        Decision::WriteLeaves(ws) => {
            let secrets: Vec<String> = ws
                .iter()
                .map(|w| match w {
                    LeafWrite::Issue { leaf, why } => format!("{} ({why})", leaf.as_str()),
                    LeafWrite::Retrust { leaf } => format!("{} (CA bundle)", leaf.as_str()),
                    LeafWrite::Renew { leaf } => format!("{} (asking cert-manager to issue it again)", leaf.as_str()),
                })
                .collect();
            cond(false, "Issuing", format!("writing certificates: {}", secrets.join("; ")))
        }
        Decision::StartCaRotation { why } => cond(false, "CARotation", format!("starting a CA rotation: {why}")),
        Decision::PromoteNextCa => cond(false, "CARotation", "CA rotation: the new CA starts signing".into()),
        Decision::DropPreviousCa => cond(false, "CARotation", "CA rotation: the old CA leaves the bundles".into()),
        Decision::FinishCaRotation => cond(false, "CARotation", "CA rotation: finishing".into()),
    })
}

/// Sets (or removes) the condition in `cs` for the certificate planner's decision.
pub fn update(cs: &mut Vec<Condition>, d: &Decision, now: &str) {
    match condition(d) {
        Some(c) => condition::upsert(cs, c, now),
        None => condition::remove(cs, CERTIFICATES_READY),
    }
}

/// A person must act.
pub fn is_warning(c: &Condition) -> bool {
    c.type_ == CERTIFICATES_READY && c.status == "False" && c.reason == "Blocked"
}

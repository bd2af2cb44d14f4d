//! What the certificate planner (`planner::certificates`) decides: the one next write to the
//! Secrets of `spec.TLS.auto`, or why there is none. Executed by `controller::certificates`.

use super::Leaf;
use super::state::CertInfo;

/// What to write to one certificate Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeafWrite {
    /// A new certificate and key from the signing CA (and the current bundle).
    Issue { leaf: Leaf, why: String },
    /// Only the bundle (`*-ca.crt`) changes; certificate and key are kept.
    Retrust { leaf: Leaf },
    /// `spec.TLS.certManager`: ask cert-manager to issue this certificate again (it holds one
    /// of a CA the certificate may no longer come from); no Secret is written.
    Renew { leaf: Leaf },
}

impl LeafWrite {
    pub fn leaf(&self) -> Leaf {
        match self {
            LeafWrite::Issue { leaf, .. } | LeafWrite::Retrust { leaf } | LeafWrite::Renew { leaf } => *leaf,
        }
    }
}

/// The next thing to do about a cluster's certificates.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// The cluster does not use `spec.TLS.auto`.
    Off,
    /// `spec.TLS.certManager`: create these Certificates, or put them back to what the spec
    /// asks.
    ApplyCertificates(Vec<Leaf>),
    /// `spec.TLS.certManager`: add the EtcdCluster's owner reference to these Secrets
    /// cert-manager issued into (deleted with the cluster).
    OwnIssuedSecrets(Vec<Leaf>),
    /// Create the cluster's first CA (with cert-manager: take the issuer's CA, without key).
    CreateCa,
    /// The CA Secret is gone while members run: a new CA, introduced beside the CAs they
    /// trust now (`trusted`, from the certificate Secrets' bundles).
    ReplaceLostCa { trusted: Vec<CertInfo> },
    /// Write these certificate Secrets.
    WriteLeaves(Vec<LeafWrite>),
    /// Add a new CA beside the current one (phase `introducing`).
    StartCaRotation { why: String },
    /// Every member trusts both CAs: the new one signs from now on (phase `reissuing`).
    PromoteNextCa,
    /// Every member serves certificates of the new CA: the old one leaves the bundles (phase
    /// `dropping`).
    DropPreviousCa,
    /// Every member restarted without the old CA: the rotation is finished.
    FinishCaRotation,
    /// Nothing to write now; `reason` and `message` say what is under way.
    Wait { reason: &'static str, message: String },
    /// Every member serves the current certificates; nothing is under way.
    Settled { message: String },
    /// A person must act; nothing is written.
    Blocked(String),
}

impl Decision {
    /// Whether it writes a Secret.
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Decision::ApplyCertificates(_)
                | Decision::OwnIssuedSecrets(_)
                | Decision::CreateCa
                | Decision::ReplaceLostCa { .. }
                | Decision::WriteLeaves(_)
                | Decision::StartCaRotation { .. }
                | Decision::PromoteNextCa
                | Decision::DropPreviousCa
                | Decision::FinishCaRotation
        )
    }
}

//! `spec.TLS`: `static` (the user's Secrets, checked when observed: `tls::material`) or
//! `auto` (the operator's: `tls::auto`), never both.

use etcd_operator_api::cluster::TlsPolicy;

use crate::tls::Policy;
use crate::tls::auto::{InUse, Settings, policy};

/// The TLS policy of the cluster named `name`, and the auto settings when it uses them.
pub(super) fn tls_policy(name: &str, tls: Option<&TlsPolicy>, errs: &mut Vec<String>) -> (Policy, Option<Settings>) {
    let Some(t) = tls else { return (Policy::default(), None) };
    match (&t.r#static, &t.auto) {
        (Some(_), Some(_)) => {
            errs.push("spec.TLS: set either static (your certificates) or auto (the operator's), not both".into());
            (Policy::default(), None)
        }
        (None, Some(a)) => match Settings::of(a) {
            Ok(s) => (policy(name), Some(s)),
            Err(e) => {
                errs.extend(e);
                (Policy::default(), None)
            }
        },
        (_, None) => (Policy::of(Some(t)).map_err(|e| errs.push(e)).unwrap_or_default(), None),
    }
}

/// Whether (and how) the cluster `cluster` planned under `d` uses the operator's certificates:
/// `spec.TLS.auto`, or a stage that still makes pods with its Secrets after it was turned off.
pub fn tls_auto_in_use(d: &super::Desired, cluster: &str) -> Option<InUse> {
    if let Some(s) = d.tls_auto {
        return Some(InUse::Spec(s));
    }
    let ours = policy(cluster);
    let stage = &d.tls_stage.secrets;
    let peer = stage.peer_secret.is_some() && stage.peer_secret == ours.peer_secret;
    let client = stage
        .client
        .as_ref()
        .zip(ours.client.as_ref())
        .is_some_and(|(s, o)| s.server_secret == o.server_secret || s.operator_secret == o.operator_secret);
    (peer || client).then_some(InUse::Leaving)
}

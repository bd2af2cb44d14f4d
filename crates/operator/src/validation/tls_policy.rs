//! `spec.TLS`: `static` (the user's Secrets, checked when observed: `tls::material`) or
//! `auto` (the operator's: `tls::auto`) or `certManager` (cert-manager's, copied into `auto`'s
//! Secrets: `tls::cert_manager`), one of the three.

use etcd_operator_api::cluster::TlsPolicy;

use crate::tls::Policy;
use crate::tls::auto::{InUse, Settings, policy};
use crate::tls::cert_manager::Request;

/// The TLS policy of the cluster named `name`, the auto settings when it uses the operator's
/// Secrets (`auto`, or `certManager` whose certificates are copied into them), and the
/// cert-manager request.
pub(super) fn tls_policy(
    name: &str,
    tls: Option<&TlsPolicy>,
    errs: &mut Vec<String>,
) -> (Policy, Option<Settings>, Option<Request>) {
    let none = || (Policy::default(), None, None);
    let Some(t) = tls else { return none() };
    let set: Vec<&str> =
        [("static", t.r#static.is_some()), ("auto", t.auto.is_some()), ("certManager", t.cert_manager.is_some())]
            .into_iter()
            .filter_map(|(n, on)| on.then_some(n))
            .collect();
    if set.len() > 1 {
        errs.push(format!(
            "spec.TLS: set one of static (your certificates), auto (the operator's) or certManager (cert-manager's), not {}",
            set.join(" and ")
        ));
        return none();
    }
    if let Some(cm) = &t.cert_manager {
        return match Request::of(cm) {
            Ok(r) => (policy(name), Some(r.settings), Some(r)),
            Err(e) => {
                errs.extend(e);
                none()
            }
        };
    }
    match &t.auto {
        Some(a) => match Settings::of(a) {
            Ok(s) => (policy(name), Some(s), None),
            Err(e) => {
                errs.extend(e);
                none()
            }
        },
        None => (Policy::of(Some(t)).map_err(|e| errs.push(e)).unwrap_or_default(), None, None),
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

//! `spec.TLS`: `static` (the user's Secrets, checked when observed: `tls::material`) or
//! `auto` (the operator's: `tls::auto`), never both.

use etcd_operator_api::cluster::TlsPolicy;

use crate::tls::Policy;
use crate::tls::auto::{Settings, policy};

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

//! The `Authentication` condition and the reason etcd is out of sight after a refused login.
//! Pure.

use etcd_operator_api::condition;

use super::*;

/// Why etcd is out of the operator's sight when a login was refused (or one is required and the
/// operator has no credentials): `error` is etcd's answer.
pub fn refusal(policy: &Policy, error: &str) -> String {
    match policy.root_secret() {
        Some(s) => format!(
            "etcd refuses the operator's login as root ({error}): the password of Secret {s} (and the one the operator last set) is not etcd's root password; a cluster restored from a backup keeps its snapshot's root password: put that one in Secret {s}; nothing is changed meanwhile"
        ),
        None => format!(
            "etcd requires a login ({error}): authentication is on and spec.auth is not set; set spec.auth.rootSecret to a Secret with etcd's root password; nothing is changed meanwhile"
        ),
    }
}

/// The `Authentication` condition for this observation (None: remove it), from the policy, the
/// Secrets and etcd's state. Pure.
pub fn condition(policy: &Policy, o: &AuthObserved, etcd: Option<&EtcdAuth>) -> Option<Condition> {
    let cond = |ok: bool, reason: &str, message: String| Condition {
        type_: CONDITION.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        ..Default::default()
    };
    if let Some(why) = &o.refused {
        return Some(cond(false, "LoginRefused", why.clone()));
    }
    let Policy::Managed { enabled, root_secret } = policy else {
        return None;
    };
    if let (Some(e), SecretState::Missing) = (&o.record_unreadable, &o.secret) {
        return Some(cond(
            false,
            "SecretUnreadable",
            format!("{e}; the missing Secret {root_secret} is created only once it can be read"),
        ));
    }
    match &o.secret {
        SecretState::Invalid(errs) => {
            return Some(cond(
                false,
                "SecretInvalid",
                format!("{}; authentication is left as it is until the Secret is fixed", errs.join("; ")),
            ));
        }
        SecretState::Unreadable(e) => {
            return Some(cond(false, "SecretUnreadable", format!("Secret {root_secret} could not be read: {e}")));
        }
        _ => {}
    }
    let state = etcd.cloned().unwrap_or_default();
    Some(match (enabled, state, &o.secret) {
        (true, EtcdAuth::On { secret_password: true }, _) => cond(
            true,
            "Enabled",
            format!(
                "etcd authentication is on; the operator logs in as root with the password of Secret {root_secret}"
            ),
        ),
        (true, EtcdAuth::On { secret_password: false }, _) => cond(
            false,
            "ChangingPassword",
            format!("the root password of Secret {root_secret} changed; the operator sets it in etcd"),
        ),
        (true, _, SecretState::Missing) => cond(
            false,
            "CreatingSecret",
            format!("the operator creates Secret {root_secret} with a random root password"),
        ),
        (true, _, _) => cond(
            false,
            "Enabling",
            format!(
                "turning etcd authentication on (root user, root role, auth enable) once every voting member is healthy; root password from Secret {root_secret}"
            ),
        ),
        (false, EtcdAuth::On { .. }, _) => cond(false, "Disabling", "turning etcd authentication off".into()),
        (false, _, _) => cond(false, "Disabled", "etcd authentication is off (spec.auth.enabled is false)".into()),
    })
}

/// Whether a condition of this type is worth a Warning Event.
pub fn is_warning(c: &Condition) -> bool {
    c.type_ == CONDITION && matches!(c.reason.as_str(), "LoginRefused" | "SecretInvalid" | "SecretUnreadable")
}

/// Sets or removes the condition in `cs`. Without etcd's answer (and no refused login or
/// Secret to report) the condition stays as it was: a member not answering for a moment says
/// nothing about authentication.
pub fn update_condition(
    cs: &mut Vec<Condition>,
    policy: &Policy,
    o: &AuthObserved,
    etcd: Option<&EtcdAuth>,
    now: &str,
) {
    let to_report = o.refused.is_some()
        || matches!(o.secret, SecretState::Invalid(_) | SecretState::Unreadable(_))
        || o.record_unreadable.is_some();
    if etcd.is_none() && !to_report && *policy != Policy::Unmanaged {
        return;
    }
    match condition(policy, o, etcd) {
        Some(c) => condition::upsert(cs, c, now),
        None => condition::remove(cs, CONDITION),
    }
}

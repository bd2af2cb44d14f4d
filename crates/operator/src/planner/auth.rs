//! etcd authentication steps (`spec.auth`): turning it on (root user, root role, `auth
//! enable`), off (`auth disable` as root), and changing the root password when the root Secret
//! changed. Planned from `membership::resize`, so only while every voting member is healthy and
//! no learner, upgrade or other membership change is under way; one step per reconcile, each
//! idempotent, so an operator restarted half-way resumes from what etcd reports.
//!
//! The root password set in etcd is the root Secret's; etcd cannot say whether an existing root
//! user has it while authentication is off, so `Enable` sets it again right before `auth
//! enable`.

use super::{Step, WaitReason, wait};
use crate::auth::{EtcdAuth, Policy, RootUser, SecretState, Upkeep};
use crate::observed::{EtcdState, Observed};
use crate::validation::Desired;

/// One authentication change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthStep {
    /// `user add root` with the root Secret's password.
    AddRootUser,
    /// `role add root` (unless it exists), `user grant-role root root`.
    GrantRootRole,
    /// `user passwd root` with the root Secret's password, then `auth enable`.
    Enable,
    /// `user passwd root` with the root Secret's new password, logged in with the old one.
    ChangeRootPassword,
    /// `auth disable`, logged in as root.
    Disable,
}

impl AuthStep {
    pub fn name(self) -> &'static str {
        match self {
            AuthStep::AddRootUser => "AddRootUser",
            AuthStep::GrantRootRole => "GrantRootRole",
            AuthStep::Enable => "EnableAuth",
            AuthStep::ChangeRootPassword => "ChangeRootPassword",
            AuthStep::Disable => "DisableAuth",
        }
    }
}

/// The next authentication step, if `spec.auth` asks for a change. Called with every voter
/// healthy.
pub(super) fn next(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let Policy::Managed { enabled, .. } = &d.auth else { return None };
    // A refused root Secret changes nothing in etcd (the condition names the problem).
    let secret = o.auth.secret == SecretState::Valid;
    let step = match (&etcd.auth, enabled) {
        (EtcdAuth::Off { root }, true) if secret => match root {
            RootUser::Missing => AuthStep::AddRootUser,
            RootUser::WithoutRootRole => AuthStep::GrantRootRole,
            RootUser::WithRootRole if !broken_probe(o) => AuthStep::Enable,
            _ => return None,
        },
        (EtcdAuth::On { secret_password: false }, true) if secret => AuthStep::ChangeRootPassword,
        // Off again: as root, with whichever password etcd accepts.
        (EtcdAuth::On { .. }, false) => AuthStep::Disable,
        _ => return None,
    };
    Some(Step::Auth(step))
}

/// A member pod's readiness probe reads a key (made at etcd 3.5.0 or 3.5.1, or before 3.4.16
/// without authentication: `pod_spec::health_exclude_is_broken`), which authentication would
/// refuse (validation refuses 3.5.0 and 3.5.1 when named).
fn broken_probe(o: &Observed) -> bool {
    o.pods.values().any(|p| p.readiness_reads_key)
}

/// No member answered because etcd refused the login: that is the reason to report (not a
/// lost quorum), and nothing is changed.
pub(super) fn refused(o: &Observed) -> Option<Step> {
    o.auth.refused.as_ref().map(|why| wait(WaitReason::AuthRefused, why.clone()))
}

/// The upkeep of `spec.auth`'s Secrets this observation calls for (`controller/upkeep.rs`
/// executes it beside the step). Pure.
pub fn upkeep(o: &Observed) -> Option<Upkeep> {
    let Ok(d) = &o.desired else { return None };
    let Policy::Managed { enabled, root_secret } = &d.auth else { return None };
    if o.paused {
        return None;
    }
    let etcd = o.etcd.as_ref().map(|e| &e.auth);
    match &o.auth.secret {
        // A record that could not be read may hold etcd's password: a root Secret made now
        // would get a random one, which the next step would set in etcd.
        SecretState::Missing if o.auth.record_unreadable.is_some() => None,
        SecretState::Missing if *enabled || matches!(etcd, Some(EtcdAuth::On { .. })) => {
            Some(Upkeep::CreateRootSecret { name: root_secret.clone(), use_recorded: o.auth.applied_matches.is_some() })
        }
        SecretState::Valid
            if matches!(etcd, Some(EtcdAuth::On { secret_password: true })) && o.auth.applied_matches != Some(true) =>
        {
            Some(Upkeep::RecordApplied)
        }
        _ => None,
    }
}

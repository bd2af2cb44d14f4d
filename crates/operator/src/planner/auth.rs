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
use crate::auth::{EtcdAuth, Policy, RootUser, SecretState};
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

/// A member runs etcd 3.5.0 or 3.5.1 (spec.version left empty): its readiness probe reads a
/// key, which authentication would refuse (validation refuses the version when it is named).
fn broken_probe(o: &Observed) -> bool {
    o.pods.values().any(|p| {
        crate::version::Version::parse(&p.version).is_ok_and(|v| crate::pod_spec::health_exclude_is_broken(&v))
    })
}

/// No member answered because etcd refused the login: that is the reason to report (not a
/// lost quorum), and nothing is changed.
pub(super) fn refused(o: &Observed) -> Option<Step> {
    o.auth.refused.as_ref().map(|why| wait(WaitReason::AuthRefused, why.clone()))
}

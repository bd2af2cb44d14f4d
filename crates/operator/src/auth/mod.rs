//! etcd authentication (`spec.auth`), as data: the policy a spec asks for and what etcd's
//! authentication looks like in one observation (here), the root user's credentials and how a
//! Secret holds them (`credentials`), and the condition that reports it (`condition`). Pure;
//! the I/O is in [`connect`] (logging in to etcd), [`calls`] (the auth RPCs) and [`secrets`]
//! (the Secrets); the steps are planned in `planner::auth`.
//!
//! Two Secrets per cluster:
//! - the *root Secret* (`spec.auth.rootSecret`, default `<name>-etcd-root`): the user's. Key
//!   `password`, optional key `username` (`root` or absent). Missing: the operator creates it
//!   (random password, owned by the EtcdCluster). The operator never writes an existing one.
//! - the *applied record* (`<name>-etcd-root-applied`): the operator's, owned by the EtcdCluster:
//!   the root password it last set in etcd (key `password`). Changing a password in etcd needs
//!   the old one (the operator must log in first), and the user has replaced it in the root
//!   Secret by then. Right before it sets a password in etcd the operator adds it as key
//!   `pending-password` (the old one kept): whether or not it gets to record the outcome, a
//!   restarted operator logs in with either.
//!
//! Passwords never reach a log, an Event, a status, a command line or a `Debug` print: the
//! types holding them print `<redacted>`.

mod condition;
pub mod connect;
mod credentials;
pub mod secrets;

pub use condition::{condition, is_warning, refusal, update_condition};
pub use credentials::{Credentials, check_password, login, root_password};

use etcd_operator_api::cluster::AuthPolicy;
use etcd_operator_api::condition::Condition;

use crate::version::Version;

/// etcd's superuser: the only user the operator manages, and the one it logs in as.
pub const ROOT: &str = "root";
/// Key of the password in the root Secret (and in an EtcdBackup's `authSecret`).
pub const PASSWORD_KEY: &str = "password";
/// Key of the applied record: a password being set in etcd now (the outcome not recorded yet).
pub const PENDING_PASSWORD_KEY: &str = "pending-password";
/// Key of the user name (optional; `root` in the root Secret).
pub const USERNAME_KEY: &str = "username";
/// etcd hashes passwords with bcrypt, which takes at most 72 bytes (etcd refuses longer ones).
pub const MAX_PASSWORD_BYTES: usize = 72;
/// Length of the passwords the operator makes (alphanumeric: about 190 bits).
pub const GENERATED_PASSWORD_LEN: usize = 32;
/// The condition reporting authentication.
pub const CONDITION: &str = "Authentication";

/// The default root Secret of cluster `cluster`.
pub fn default_root_secret(cluster: &str) -> String {
    format!("{cluster}-etcd-root")
}

/// The operator's record of the root password it last set in etcd.
pub fn applied_secret(cluster: &str) -> String {
    format!("{cluster}-etcd-root-applied")
}

/// What `spec.auth` asks for, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub enum Policy {
    /// `spec.auth` absent: the operator neither turns authentication on nor off.
    #[default]
    Unmanaged,
    /// `spec.auth` present: authentication wanted on (`enabled`) or off, and the root Secret.
    Managed { enabled: bool, root_secret: String },
}

impl Policy {
    /// The policy of `spec.auth` for cluster `name` at `version` (None: the version was refused);
    /// `Err`: why it is refused.
    pub fn of(name: &str, spec: Option<&AuthPolicy>, version: Option<&Version>) -> Result<Policy, Vec<String>> {
        let Some(a) = spec else { return Ok(Policy::Unmanaged) };
        let mut errs = vec![];
        let root_secret = if a.root_secret.is_empty() { default_root_secret(name) } else { a.root_secret.clone() };
        if !is_dns1123_subdomain(&root_secret) {
            errs.push(format!(
                "spec.auth.rootSecret {root_secret:?} is not a valid Secret name (lowercase letters, digits, '-' and '.', at most 253 characters)"
            ));
        }
        if root_secret == applied_secret(name) {
            errs.push(format!(
                "spec.auth.rootSecret {root_secret:?} is the operator's own record of the root password"
            ));
        }
        if a.enabled && version.is_some_and(|v| v.minor_line() == (3, 5) && v.patch < 2) {
            errs.push(format!(
                "spec.auth.enabled is not supported on etcd {}: the readiness probe of 3.5.0 and 3.5.1 reads a key, which authentication refuses; use 3.5.2 or later",
                version.map(|v| v.to_string()).unwrap_or_default()
            ));
        }
        if errs.is_empty() { Ok(Policy::Managed { enabled: a.enabled, root_secret }) } else { Err(errs) }
    }

    /// `spec.auth.enabled`.
    pub fn enabled(&self) -> bool {
        matches!(self, Policy::Managed { enabled: true, .. })
    }

    pub fn root_secret(&self) -> Option<&str> {
        match self {
            Policy::Unmanaged => None,
            Policy::Managed { root_secret, .. } => Some(root_secret),
        }
    }

    /// Authentication is wanted on.
    pub fn wants_on(&self) -> bool {
        matches!(self, Policy::Managed { enabled: true, .. })
    }
}

/// `spec.auth` with authentication on cannot simply be dropped: the operator would lose the
/// credentials it needs to turn it off. `formed_under` is the last valid spec's policy.
pub fn check_change(formed_under: &Policy, now: &Policy) -> Result<(), String> {
    match (formed_under, now) {
        (Policy::Managed { enabled: true, .. }, Policy::Unmanaged) => Err(
            "spec.auth cannot be removed while authentication is on: set spec.auth.enabled to false first (the operator turns it off as root), then remove spec.auth"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// `[a-z0-9]([-a-z0-9.]*[a-z0-9])?`, at most 253 characters: a Secret name.
fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The root Secret as observed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SecretState {
    /// No `spec.auth` (or an invalid spec): not read.
    #[default]
    NotRead,
    /// It does not exist (the operator creates it).
    Missing,
    /// It could not be read (the API server's answer).
    Unreadable(String),
    /// It is refused: every reason, naming the Secret and the key.
    Invalid(Vec<String>),
    /// It holds a usable root password.
    Valid,
}

/// What the operator knows of authentication besides etcd's answers: its Secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthObserved {
    pub secret: SecretState,
    /// The applied record exists; `Some(true)` when it holds the root Secret's password (and
    /// no pending one).
    pub applied_matches: Option<bool>,
    /// The applied record could not be read: why (naming it). It may hold the only password
    /// etcd accepts, so nothing is decided as if it were missing.
    pub record_unreadable: Option<String>,
    /// etcd refused the operator's login (or required one it had none for): why. The operator
    /// then has no view of etcd.
    pub refused: Option<String>,
}

/// etcd's authentication as the operator's connections found it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum EtcdAuth {
    /// Not known: the operator had no credentials to try.
    #[default]
    Unknown,
    /// Off; what etcd has of the root user.
    Off { root: RootUser },
    /// On, and the operator logged in as root: with the root Secret's password, or only with
    /// the one it recorded as applied (the user changed the Secret since).
    On { secret_password: bool },
}

/// etcd's root user while authentication is off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RootUser {
    /// Not asked (or the answer was lost).
    #[default]
    Unknown,
    Missing,
    /// Exists without the root role (`auth enable` requires it).
    WithoutRootRole,
    WithRootRole,
}

/// What is kept up beside the planned step (Kubernetes only; etcd is changed by planned steps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upkeep {
    /// Create the missing root Secret `name`: with the password recorded as applied when there
    /// is a record (the one etcd has: a deleted Secret comes back as it was), else a random one.
    CreateRootSecret { name: String, use_recorded: bool },
    /// Record the root Secret's password as the one etcd has: etcd accepted it and the record
    /// is missing or differs (an operator restart between a password change and its record).
    RecordApplied,
}

#[cfg(test)]
mod tests;

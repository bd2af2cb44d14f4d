//! etcd authentication (`spec.auth`), as data: the policy a spec asks for, the root user's
//! credentials and how a Secret holds them, what etcd's authentication looks like in one
//! observation, and the condition that reports it. Pure; the I/O is in [`connect`] (logging in
//! to etcd), [`calls`] (the auth RPCs) and [`secrets`] (the Secrets); the steps are planned in
//! `planner::auth`.
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

pub mod calls;
pub mod connect;
pub mod secrets;

use std::collections::BTreeMap;

use etcd_operator_api::cluster::AuthPolicy;
use etcd_operator_api::condition::{self, Condition};

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
        if a.enabled && version.is_some_and(crate::pod_spec::health_exclude_is_broken) {
            errs.push(format!(
                "spec.auth.enabled is not supported on etcd {}: the readiness probe of 3.5.0 and 3.5.1 reads a key, which authentication refuses; use 3.5.2 or later",
                version.map(|v| v.to_string()).unwrap_or_default()
            ));
        }
        if errs.is_empty() { Ok(Policy::Managed { enabled: a.enabled, root_secret }) } else { Err(errs) }
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

/// An etcd user and the passwords to try, in order: the root Secret's, then the one the
/// operator recorded as applied, then one it was setting when it last stopped (each once).
/// Printing it never shows a password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    /// The password of the Secret (None: the Secret is missing or refused).
    secret: Option<String>,
    /// The recorded one.
    recorded: Option<String>,
    /// One being set in etcd when the record was written last (its outcome unknown).
    pending: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("passwords", &format_args!("<{} redacted>", self.passwords().count()))
            .finish()
    }
}

impl Credentials {
    /// `user` with the Secret's `password`, then the recorded one `fallback` if it differs
    /// (empty ones are dropped); None without any password.
    pub fn new(user: &str, password: Option<&str>, fallback: Option<&str>) -> Option<Credentials> {
        Credentials::with_pending(user, password, fallback, None)
    }

    /// As [`Credentials::new`], then `pending` (a password being set when the operator last
    /// wrote its record) if it differs from both.
    pub fn with_pending(
        user: &str,
        password: Option<&str>,
        recorded: Option<&str>,
        pending: Option<&str>,
    ) -> Option<Credentials> {
        let some = |p: Option<&str>| p.filter(|p| !p.is_empty()).map(str::to_string);
        let c = Credentials {
            user: user.to_string(),
            secret: some(password),
            recorded: some(recorded),
            pending: some(pending),
        };
        (c.passwords().count() > 0).then_some(c)
    }

    /// The passwords to try, in order, each once.
    pub fn passwords(&self) -> impl Iterator<Item = &String> {
        let recorded = self.recorded.iter().filter(|r| Some(*r) != self.secret.as_ref());
        let pending =
            self.pending.iter().filter(|p| Some(*p) != self.secret.as_ref() && Some(*p) != self.recorded.as_ref());
        self.secret.iter().chain(recorded).chain(pending)
    }

    /// The password the record holds as applied (kept beside a pending one while it is set).
    pub fn recorded_password(&self) -> Option<&str> {
        self.recorded.as_deref()
    }

    /// The password of the Secret: what the operator sets in etcd.
    pub fn secret_password(&self) -> Option<&str> {
        self.secret.as_deref()
    }

    /// Whether the `i`-th password tried is the fallback.
    pub fn is_fallback(&self, i: usize) -> bool {
        i > 0 || self.secret.is_none()
    }

    /// A short digest: cached connections made with other credentials are not reused. Kept in
    /// memory only, never printed.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.user.as_bytes());
        for p in [&self.secret, &self.recorded, &self.pending] {
            let p = p.as_deref().unwrap_or_default();
            h.update((p.len() as u64).to_be_bytes());
            h.update(p.as_bytes());
        }
        hex::encode(&h.finalize()[..8])
    }
}

/// A password as a Secret holds it: refused when etcd could not take it or it is most likely a
/// mistake (a trailing newline from `echo`). `what` names the Secret and key in the reasons.
pub fn check_password(what: &str, raw: &[u8]) -> Result<String, String> {
    let p = std::str::from_utf8(raw).map_err(|_| format!("{what} is not UTF-8 text"))?;
    if p.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if p.chars().any(char::is_control) {
        return Err(format!(
            "{what} holds a line break or another control character (a file written by `echo` ends with one: use `echo -n` or `kubectl create secret generic --from-literal`)"
        ));
    }
    if p.len() > MAX_PASSWORD_BYTES {
        return Err(format!(
            "{what} is {} bytes long; etcd hashes passwords with bcrypt, which takes at most {MAX_PASSWORD_BYTES}",
            p.len()
        ));
    }
    Ok(p.to_string())
}

/// The root password in the root Secret `name` (`data`: its keys), or every reason it is
/// refused, naming the Secret and the key.
pub fn root_password(name: &str, data: &BTreeMap<String, Vec<u8>>) -> Result<String, Vec<String>> {
    let mut errs = vec![];
    if let Some(u) = data.get(USERNAME_KEY) {
        let u = String::from_utf8_lossy(u);
        if u != ROOT {
            errs.push(format!(
                "Secret {name} key {USERNAME_KEY} is {u:?}: the operator manages etcd's root user only; set it to root or remove the key"
            ));
        }
    }
    let password = match data.get(PASSWORD_KEY) {
        None => {
            errs.push(format!("Secret {name} lacks key {PASSWORD_KEY}"));
            None
        }
        Some(raw) => check_password(&format!("Secret {name} key {PASSWORD_KEY}"), raw).map_err(|e| errs.push(e)).ok(),
    };
    match password {
        Some(p) if errs.is_empty() => Ok(p),
        _ => Err(errs),
    }
}

/// The user and password of a backup's `authSecret` (`username` defaults to root).
pub fn login(name: &str, data: &BTreeMap<String, Vec<u8>>) -> Result<Credentials, String> {
    let user = match data.get(USERNAME_KEY) {
        None => ROOT.to_string(),
        Some(u) => {
            let u =
                std::str::from_utf8(u).map_err(|_| format!("Secret {name} key {USERNAME_KEY} is not UTF-8 text"))?;
            if u.is_empty() || u.chars().any(char::is_control) {
                return Err(format!("Secret {name} key {USERNAME_KEY} is empty or holds a control character"));
            }
            u.to_string()
        }
    };
    let raw = data.get(PASSWORD_KEY).ok_or_else(|| format!("Secret {name} lacks key {PASSWORD_KEY}"))?;
    let password = check_password(&format!("Secret {name} key {PASSWORD_KEY}"), raw)?;
    Credentials::new(&user, Some(&password), None).ok_or_else(|| format!("Secret {name}: no password"))
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

/// The upkeep this observation calls for. Pure.
pub fn upkeep(o: &crate::observed::Observed) -> Option<Upkeep> {
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

#[cfg(test)]
mod tests;

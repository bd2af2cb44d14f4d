//! The root user's credentials: which passwords to try, and a password as a Secret holds it.
//! Printing them never shows a password.

use std::collections::BTreeMap;

use super::*;

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

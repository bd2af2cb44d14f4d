//! The etcd adapter: what the planner needs from etcd's API, and the membership and
//! maintenance calls the actor makes. etcd-client balances a client's calls across its
//! endpoints, so every call that is about one member (its status) uses a client connected to that
//! member alone. Those per-member clients are kept in a [`MemberClients`] cache between
//! reconciles (one HTTP/2 connection per member instead of a new one every observation). With
//! `spec.auth` every client logs in as root (`auth::connect`); which way each login went says
//! what etcd's authentication is ([`EtcdState::auth`](crate::observed::EtcdState)).
//!
//! Here: errors, endpoints, connecting, the client cache. [`status`]: every member's status and
//! the membership (`observe`); [`membership`]: add learner, promote, remove, update peer URLs,
//! move leader; [`maintenance`]: revision, compaction, defragmentation, alarms.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions};

use crate::auth::Credentials;
use crate::auth::connect::Login;
use crate::tls::connector::Dialer;
use crate::tls::material::ClientTls;

pub mod auth_calls;
#[cfg(test)]
mod fake_member;
pub mod maintenance;
pub mod membership;
pub mod status;

pub use maintenance::{alarms_of, compact, db_size, defragment, disarm, revision};
pub use membership::{add_learner, move_leader, promote, remove, update_peer_urls};
pub use status::observe;

/// Time to open a connection to one member.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for one read-only call (status, member list).
pub(super) const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// Time for a membership change; etcd commits it through raft.
pub(super) const CHANGE_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("etcd at {endpoint}: {source}")]
    Call { endpoint: String, source: etcd_client::Error },
    #[error("etcd at {0}: no answer within the time limit")]
    Timeout(String),
    #[error("no etcd endpoint to talk to")]
    NoEndpoint,
    #[error("etcd at {endpoint} belongs to another cluster (ID {found:x})")]
    OtherCluster { endpoint: String, found: u64 },
}

/// Members' client endpoints by pod name, e.g. `ex-abcde` → `http://10.244.0.7:2379`
/// (dereferences to that map), the client identity they need when clients speak TLS, and the
/// root user's credentials when `spec.auth` gives them.
#[derive(Clone, Debug, Default)]
pub struct Endpoints {
    pub urls: BTreeMap<String, String>,
    pub tls: Option<Arc<ClientTls>>,
    pub root: Option<Arc<Credentials>>,
}

/// How to reach members: TLS identity and root credentials, each if needed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Access<'a> {
    pub tls: Option<&'a ClientTls>,
    pub root: Option<&'a Credentials>,
}

impl std::ops::Deref for Endpoints {
    type Target = BTreeMap<String, String>;
    fn deref(&self) -> &Self::Target {
        &self.urls
    }
}

impl Endpoints {
    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_deref()
    }

    pub fn access(&self) -> Access<'_> {
        Access { tls: self.tls.as_deref(), root: self.root.as_deref() }
    }
}

impl Error {
    /// etcd refused the call for want of a (valid) login: its authentication is on.
    pub fn is_auth_refusal(&self) -> bool {
        matches!(self, Error::Call { .. }) && crate::auth::connect::is_auth_refusal(&self.to_string())
    }

    /// The member's host refused the connection: nothing listens on its client port (etcd is
    /// down or restarting). The member's state, unlike a timeout or a failed handshake, which
    /// may be the operator's own trouble.
    pub fn is_connection_refused(&self) -> bool {
        let Error::Call { source, .. } = self else { return false };
        let mut e: Option<&(dyn std::error::Error + 'static)> = Some(source);
        while let Some(x) = e {
            let io = x.downcast_ref::<std::io::Error>();
            if io.is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
                || x.to_string().contains("Connection refused")
            {
                return true;
            }
            e = x.source();
        }
        false
    }
}

/// A client's options for calls of up to `timeout`. The client's own per-request limit is
/// also the one of the requests etcd-client makes by itself: the login at connect and again when
/// a token lapsed. A login never gets less than [`LOGIN_TIMEOUT`]; each call of the operator's
/// keeps its own, shorter deadline ([`with_deadline`]).
fn options(access: Access<'_>, timeout: Duration) -> Dialer {
    let per_request = if access.root.is_some() { timeout.max(LOGIN_TIMEOUT) } else { timeout };
    let opts = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT).with_timeout(per_request);
    Dialer::new(opts, access.tls, CONNECT_TIMEOUT, Some(per_request))
}

/// Time for etcd to log a client in: it hashes the password with bcrypt (each password tried),
/// then commits the login through raft. A read's 3 s is far too short on a busy node: on the
/// 2-core test machine etcd 3.6 took 3 to 11 s to answer a login (its own `request stats`),
/// and the operator, cutting every login at 3 s, saw no member answer for minutes after `auth
/// enable` (each abandoned login still cost its member the hash, so the load only grew).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(15);

async fn connected(
    label: String,
    f: impl std::future::Future<Output = Result<(Client, Login), etcd_client::Error>>,
) -> Result<(Client, Login), Error> {
    match tokio::time::timeout(CONNECT_TIMEOUT + LOGIN_TIMEOUT, Box::pin(f)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(source)) => Err(Error::Call { endpoint: label, source }),
        Err(_) => Err(Error::Timeout(label)),
    }
}

pub async fn connect(endpoints: &[String], access: Access<'_>, timeout: Duration) -> Result<Client, Error> {
    let dialer = options(access, timeout);
    let f = crate::auth::connect::connect(endpoints, &dialer, access.root);
    connected(endpoints.join(","), f).await.map(|(c, _)| c)
}

pub(crate) async fn with_deadline<T>(
    endpoint: &str,
    d: Duration,
    f: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(d, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(Error::Call { endpoint: endpoint.to_string(), source }),
        Err(_) => Err(Error::Timeout(endpoint.to_string())),
    }
}

pub(crate) async fn change_client(endpoints: &[String], access: Access<'_>) -> Result<Client, Error> {
    if endpoints.is_empty() {
        return Err(Error::NoEndpoint);
    }
    connect(endpoints, access, CHANGE_TIMEOUT).await
}

/// How long a cached member client may sit unused before it is dropped (its pod is gone, or
/// its cluster deleted).
const CLIENT_IDLE_LIMIT: Duration = Duration::from_secs(120);

/// Clients connected to one member each, by client URL, reused across reconciles. A client whose
/// call failed is dropped, so the next observation connects afresh; a URL reused by another pod
/// later is harmless: every answer names its member and cluster, and `observe` ignores answers
/// from another cluster.
#[derive(Default)]
pub struct MemberClients {
    clients: Mutex<HashMap<String, (Client, Instant, Login)>>,
}

impl MemberClients {
    /// The client of the member at `url` and how it logged in; `others`: the other members'
    /// URLs (a learner's login goes through one of them).
    pub(super) async fn get(&self, url: &str, others: &[String], access: Access<'_>) -> Result<(Client, Login), Error> {
        let now = Instant::now();
        let key = cache_key(url, access);
        {
            let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
            m.retain(|_, (_, used, _)| now.duration_since(*used) < CLIENT_IDLE_LIMIT);
            if let Some((c, used, login)) = m.get_mut(&key) {
                *used = now;
                return Ok((c.clone(), *login));
            }
        }
        let dialer = options(access, READ_TIMEOUT);
        let f = crate::auth::connect::connect_member(url, others, &dialer, access.root);
        let (c, login) = connected(url.to_string(), f).await?;
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).insert(key, (c.clone(), now, login));
        Ok((c, login))
    }

    pub(super) fn forget(&self, url: &str, access: Access<'_>) {
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).remove(&cache_key(url, access));
    }

    /// Drops every cached client of these members (after a change of etcd's authentication:
    /// their logins are stale).
    pub fn forget_all(&self, endpoints: &Endpoints) {
        let mut m = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|k, _| !endpoints.values().any(|u| url_of(k) == u));
    }
}

/// A cached client is reused only with the same TLS material and credentials
/// (`<url> <fingerprint> <fingerprint>`).
fn cache_key(url: &str, access: Access<'_>) -> String {
    let tls = access.tls.map(|t| t.fingerprint()).unwrap_or_default();
    let root = access.root.map(|r| r.fingerprint()).unwrap_or_default();
    format!("{url} {tls} {root}")
}

fn url_of(key: &str) -> &str {
    key.split(' ').next().unwrap_or(key)
}

/// Re-exported: the pure modules take it from `naming`, which does no I/O.
pub use crate::naming::hex;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_etcdctl_does() {
        assert_eq!(hex(0x8e9e05c52164694d), "8e9e05c52164694d");
    }
}

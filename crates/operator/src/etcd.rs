//! The etcd adapter: what the planner needs from etcd's API, and the membership calls the
//! actor makes. etcd-client balances a client's calls across its endpoints, so every call that
//! is about one member (its status) uses a client connected to that member alone. Those
//! per-member clients are kept in a [`MemberClients`] cache between reconciles (one HTTP/2
//! connection per member instead of a new one every observation). With `spec.auth` every client
//! logs in as root (`auth::connect`); which way each login went says what etcd's authentication
//! is ([`EtcdState::auth`](crate::observed::EtcdState)).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, MemberAddOptions};
use futures::future::join_all;

use crate::auth::connect::Login;
use crate::auth::{Credentials, EtcdAuth, RootUser};
use crate::naming;
use crate::observed::{Alarm, AlarmKind, EtcdState, MemberState, MemberStatus};
use crate::tls::material::ClientTls;

/// Time to open a connection to one member.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Time for one read-only call (status, member list).
const READ_TIMEOUT: Duration = Duration::from_secs(3);
/// Time for a membership change; etcd commits it through raft.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(15);

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
}

fn options(access: Access<'_>, timeout: Duration) -> ConnectOptions {
    let opts = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT).with_timeout(timeout);
    match access.tls {
        Some(t) => opts.with_tls(t.options()),
        None => opts,
    }
}

/// Time to connect and log in (a login is a raft entry and a bcrypt hash per password tried).
const LOGIN_TIMEOUT: Duration = Duration::from_secs(5);

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
    let f = crate::auth::connect::connect(endpoints, options(access, timeout), access.root);
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
    async fn get(&self, url: &str, others: &[String], access: Access<'_>) -> Result<(Client, Login), Error> {
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
        let f = crate::auth::connect::connect_member(url, others, options(access, READ_TIMEOUT), access.root);
        let (c, login) = connected(url.to_string(), f).await?;
        self.clients.lock().unwrap_or_else(|e| e.into_inner()).insert(key, (c.clone(), now, login));
        Ok((c, login))
    }

    fn forget(&self, url: &str, access: Access<'_>) {
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

/// One member's answer to Status, through a client of its own.
async fn member_status(
    clients: &MemberClients,
    url: &str,
    others: &[String],
    access: Access<'_>,
) -> Result<(u64, u64, MemberStatus, bool, Client, Login), Error> {
    let (mut c, login) = clients.get(url, others, access).await?;
    let s = match with_deadline(url, READ_TIMEOUT, c.status()).await {
        Ok(s) => s,
        Err(e) => {
            clients.forget(url, access);
            return Err(e);
        }
    };
    let h = s.header().map(|h| (h.member_id(), h.cluster_id())).unwrap_or_default();
    let revision = s.header().map(|h| h.revision()).unwrap_or_default();
    let status = MemberStatus {
        version: s.version().to_string(),
        raft_index: s.raft_index(),
        raft_applied_index: s.raft_applied_index(),
        raft_term: s.raft_term(),
        revision,
        leader: s.leader(),
        db_size: s.db_size(),
        db_size_in_use: s.raft_used_db_size(),
        errors: s.errors().iter().filter(|e| !is_alarm_error(e)).cloned().collect(),
    };
    let alarmed = s.errors().iter().any(|e| is_alarm_error(e));
    Ok((h.0, h.1, status, alarmed, c, login))
}

/// etcd's Status lists every active alarm among a member's errors, as the alarm's text form:
/// `memberID:123 alarm:NOSPACE `.
fn is_alarm_error(e: &str) -> bool {
    e.starts_with("memberID:") && e.contains("alarm:")
}

/// The active alarms (etcd's `alarm list`).
async fn alarms(client: &mut Client) -> Result<Vec<Alarm>, Error> {
    use etcd_client::{AlarmAction, AlarmType};
    let r = with_deadline("alarm list", READ_TIMEOUT, client.alarm(AlarmAction::Get, AlarmType::None, None)).await?;
    Ok(r.alarms()
        .iter()
        .filter_map(|a| {
            let kind = match a.alarm() {
                AlarmType::Nospace => AlarmKind::NoSpace,
                AlarmType::Corrupt => AlarmKind::Corrupt,
                AlarmType::None => return None,
            };
            Some(Alarm { member_id: a.member_id(), kind })
        })
        .collect())
}

/// Ask every member for its status (in parallel, one client each) and the membership from the
/// leader (or, without a leader, from any member that answers: the list is then only used to
/// report, since nothing is changed without a quorum).
/// `cluster_id` is the cluster's ID as status last recorded it (None before the first answer):
/// an answer from another cluster (a pod IP now held by a member of another cluster) is
/// ignored, and without a recorded ID the ID most members report is taken.
pub async fn observe(
    clients: &MemberClients,
    endpoints: &Endpoints,
    cluster_id: Option<u64>,
) -> Result<EtcdState, Error> {
    if endpoints.is_empty() {
        return Err(Error::NoEndpoint);
    }
    let access = endpoints.access();
    let all: Vec<String> = endpoints.values().cloned().collect();
    let all = &all;
    let answers =
        join_all(endpoints.values().map(|u| async move { (u, member_status(clients, u, all, access).await) })).await;
    let mut last_err = None;
    let mut ok = vec![];
    for (url, a) in answers {
        match a {
            Ok(v) => ok.push((url, v)),
            Err(e) => last_err = Some(e),
        }
    }
    let want = cluster_id.or_else(|| majority(ok.iter().map(|(_, (_, cid, _, _, _, _))| *cid)));
    let mut statuses = BTreeMap::new();
    let mut answered = vec![];
    let mut foreign = vec![];
    let mut alarmed = false;
    let mut logins = vec![];
    for (url, (id, cid, st, member_alarmed, client, login)) in ok {
        if Some(cid) != want {
            foreign.extend(endpoints.iter().filter(|(_, u)| *u == url).map(|(pod, _)| pod.clone()));
            clients.forget(url, access);
            last_err = Some(Error::OtherCluster { endpoint: url.clone(), found: cid });
            continue;
        }
        alarmed |= member_alarmed;
        logins.push(login);
        answered.push((id, st.leader, url, client));
        statuses.insert(id, st);
    }
    let cluster_id = want.unwrap_or_default();
    if answered.is_empty() {
        return Err(last_err.unwrap_or(Error::NoEndpoint));
    }
    // The leader's own view of membership is the most current one available.
    answered.sort_by_key(|(id, leader, _, _)| (id != leader, *id));
    let leader = answered.iter().find(|(id, leader, _, _)| id == leader).map(|(id, _, _, _)| *id);
    let (_, _, url, client) = &mut answered[0];
    let list = match with_deadline("member list", READ_TIMEOUT, client.member_list()).await {
        Ok(l) => l,
        Err(e) => {
            clients.forget(url, access);
            return Err(e);
        }
    };
    let alarms = if alarmed {
        match alarms(client).await {
            Ok(a) => a,
            Err(e) => {
                clients.forget(url, access);
                return Err(e);
            }
        }
    } else {
        vec![]
    };
    let auth = match auth_of(&logins) {
        EtcdAuth::Off { .. } => match crate::auth::calls::root_user(client).await {
            Ok(root) => EtcdAuth::Off { root },
            // Turned on since these clients connected: they are stale.
            Err(e) if e.is_auth_refusal() => {
                clients.forget_all(endpoints);
                EtcdAuth::Unknown
            }
            Err(_) => EtcdAuth::Off { root: RootUser::Unknown },
        },
        a => a,
    };
    let members = list
        .members()
        .iter()
        .map(|m| MemberState {
            id: m.id(),
            name: m.name().to_string(),
            pod: m
                .peer_urls()
                .first()
                .and_then(|u| naming::member_of_peer_url(u))
                .unwrap_or_else(|| m.name().to_string()),
            peer_urls: m.peer_urls().to_vec(),
            is_learner: m.is_learner(),
            status: statuses.get(&m.id()).cloned(),
        })
        .collect();
    Ok(EtcdState { cluster_id, leader, members, foreign, alarms, auth })
}

/// etcd's authentication from how the members' clients logged in: on if any logged in as root
/// (it is cluster state, committed through raft: a member saying otherwise lags).
fn auth_of(logins: &[Login]) -> EtcdAuth {
    if logins.contains(&Login::Root { fallback: false }) {
        EtcdAuth::On { secret_password: true }
    } else if logins.contains(&Login::Root { fallback: true }) {
        EtcdAuth::On { secret_password: false }
    } else if logins.contains(&Login::NotEnabled) {
        EtcdAuth::Off { root: RootUser::Unknown }
    } else {
        EtcdAuth::Unknown
    }
}

pub(crate) async fn change_client(endpoints: &[String], access: Access<'_>) -> Result<Client, Error> {
    if endpoints.is_empty() {
        return Err(Error::NoEndpoint);
    }
    connect(endpoints, access, CHANGE_TIMEOUT).await
}

/// Register a learner with the given peer URL; returns its member ID.
pub async fn add_learner(endpoints: &[String], access: Access<'_>, peer_url: &str) -> Result<u64, Error> {
    let mut c = change_client(endpoints, access).await?;
    let r = with_deadline(
        "member add",
        CHANGE_TIMEOUT,
        c.member_add([peer_url], Some(MemberAddOptions::new().with_is_learner())),
    )
    .await?;
    Ok(r.member().map(|m| m.id()).unwrap_or_default())
}

pub async fn promote(endpoints: &[String], access: Access<'_>, id: u64) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("member promote", CHANGE_TIMEOUT, c.member_promote(id)).await.map(|_| ())
}

pub async fn remove(endpoints: &[String], access: Access<'_>, id: u64) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("member remove", CHANGE_TIMEOUT, c.member_remove(id)).await.map(|_| ())
}

/// Change a member's peer URLs (etcd's member update); through the cluster's quorum like any
/// membership change.
pub async fn update_peer_urls(endpoints: &[String], access: Access<'_>, id: u64, urls: &[String]) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    with_deadline("member update", CHANGE_TIMEOUT, c.member_update(id, urls.to_vec())).await.map(|_| ())
}

/// Hand leadership to `to`; must be sent to the current leader.
pub async fn move_leader(leader_endpoint: &str, access: Access<'_>, to: u64) -> Result<(), Error> {
    let mut c = change_client(&[leader_endpoint.to_string()], access).await?;
    with_deadline(leader_endpoint, CHANGE_TIMEOUT, c.move_leader(to)).await.map(|_| ())
}

/// Time to defragment one member: it rewrites its whole database file (about a second per
/// 100 MiB on ordinary disks).
const DEFRAG_TIMEOUT: Duration = Duration::from_secs(300);

/// The store's current revision: the header of a linearizable read (a Status answer may come
/// from a member that has not applied the latest writes yet; a compaction below them would free
/// nothing they deleted). The read counts one key and fetches nothing.
pub async fn revision(endpoints: &[String], access: Access<'_>) -> Result<i64, Error> {
    let mut c = change_client(endpoints, access).await?;
    let opts = etcd_client::GetOptions::new().with_count_only();
    let r = with_deadline("revision read", READ_TIMEOUT, c.get("\0", Some(opts))).await?;
    Ok(r.header().map(|h| h.revision()).unwrap_or_default())
}

/// Compact the history up to `revision` and wait until every member has applied it
/// (physical). A revision compacted already is not an error.
pub async fn compact(endpoints: &[String], access: Access<'_>, revision: i64) -> Result<(), Error> {
    let mut c = change_client(endpoints, access).await?;
    let opts = etcd_client::CompactionOptions::new().with_physical();
    match with_deadline("compact", DEFRAG_TIMEOUT, c.compact(revision, Some(opts))).await {
        Err(Error::Call { source, .. }) if source.to_string().contains("compacted") => Ok(()),
        r => r.map(|_| ()),
    }
}

/// Size of a member's database file and how much of it is in use, asked of that member.
pub async fn db_size(endpoint: &str, access: Access<'_>) -> Result<(i64, i64), Error> {
    let mut c = connect(&[endpoint.to_string()], access, READ_TIMEOUT).await?;
    let s = with_deadline(endpoint, READ_TIMEOUT, c.status()).await?;
    Ok((s.db_size(), s.raft_used_db_size()))
}

/// Defragment one member (only the member behind `endpoint`); returns its database file size
/// before and after, and how long the defragmentation call took.
pub async fn defragment(endpoint: &str, access: Access<'_>) -> Result<(i64, i64, Duration), Error> {
    let before = db_size(endpoint, access).await?.0;
    let mut c = connect(&[endpoint.to_string()], access, DEFRAG_TIMEOUT).await?;
    let started = Instant::now();
    with_deadline(endpoint, DEFRAG_TIMEOUT, c.defragment()).await?;
    let took = started.elapsed();
    let after = db_size(endpoint, access).await?.0;
    Ok((before, after, took))
}

/// The alarms raised now (through any of `endpoints`).
pub async fn alarms_of(endpoints: &[String], access: Access<'_>) -> Result<Vec<Alarm>, Error> {
    let mut c = change_client(endpoints, access).await?;
    alarms(&mut c).await
}

/// Deactivate one alarm.
pub async fn disarm(endpoints: &[String], access: Access<'_>, alarm: &Alarm) -> Result<(), Error> {
    use etcd_client::{AlarmAction, AlarmOptions, AlarmType};
    let mut c = change_client(endpoints, access).await?;
    let kind = match alarm.kind {
        AlarmKind::NoSpace => AlarmType::Nospace,
        AlarmKind::Corrupt => AlarmType::Corrupt,
    };
    let mut opts = AlarmOptions::new();
    opts.with_member(alarm.member_id);
    with_deadline("alarm disarm", CHANGE_TIMEOUT, c.alarm(AlarmAction::Deactivate, kind, Some(opts))).await.map(|_| ())
}

/// The value most items have (the smallest among equals), None for none.
fn majority(items: impl Iterator<Item = u64>) -> Option<u64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_default() += 1;
    }
    counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))).map(|(v, _)| v)
}

/// Re-exported: the pure modules take it from `naming`, which does no I/O.
pub use crate::naming::hex;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_most_members_report_wins() {
        assert_eq!(majority([7, 9, 7].into_iter()), Some(7));
        assert_eq!(majority([9, 7].into_iter()), Some(7), "a tie takes the smaller, deterministically");
        assert_eq!(majority(std::iter::empty()), None);
    }

    #[test]
    fn alarms_in_a_status_answer_are_told_from_other_errors() {
        // As etcd 3.4.23 answers under NOSPACE (seen with `etcdctl endpoint status -w json`).
        assert!(is_alarm_error("memberID:10276657743932975437 alarm:NOSPACE "));
        assert!(is_alarm_error("memberID:1 alarm:CORRUPT "));
        assert!(!is_alarm_error("etcdserver: no leader"));
    }

    #[test]
    fn ids_print_as_etcdctl_does() {
        assert_eq!(hex(0x8e9e05c52164694d), "8e9e05c52164694d");
    }
}

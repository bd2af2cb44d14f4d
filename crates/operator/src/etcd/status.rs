//! Every member's own status (through a client connected to it alone) and the membership from
//! the leader, into [`EtcdState`]: `observe`.

use std::collections::BTreeMap;

use etcd_client::Client;
use futures::future::join_all;

use super::{Access, Endpoints, Error, MemberClients, READ_TIMEOUT, with_deadline};
use crate::auth::connect::Login;
use crate::auth::{EtcdAuth, RootUser};
use crate::naming;
use crate::observed::{Alarm, AlarmKind, EtcdState, MemberState, MemberStatus};

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
pub(super) async fn alarms(client: &mut Client) -> Result<Vec<Alarm>, Error> {
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
///
/// `unreached`: the pods whose member gave no answer for what may be the operator's own
/// trouble (every error but a refused connection), with the error; filled in either way.
pub async fn observe(
    clients: &MemberClients,
    endpoints: &Endpoints,
    cluster_id: Option<u64>,
    unreached: &mut BTreeMap<String, String>,
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
            Err(e) => {
                if !e.is_connection_refused() {
                    let pods = endpoints.iter().filter(|(_, u)| *u == url);
                    unreached.extend(pods.map(|(pod, _)| (pod.clone(), e.to_string())));
                }
                last_err = Some(e);
            }
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
    // Members that answered their status seeing a leader: a call after that failing is the
    // operator's trouble (a member without a leader said what is wrong), and their state is out
    // of its sight.
    let answered_pods: Vec<String> = answered
        .iter()
        .filter(|(_, leader, _, _)| *leader != 0)
        .flat_map(|(_, _, url, _)| endpoints.iter().filter(move |(_, u)| u == url).map(|(pod, _)| pod.clone()))
        .collect();
    let (_, _, url, client) = &mut answered[0];
    let mut failed = |e: Error| {
        clients.forget(url, access);
        unreached.extend(answered_pods.iter().map(|pod| (pod.clone(), e.to_string())));
        e
    };
    let list = match with_deadline("member list", READ_TIMEOUT, client.member_list()).await {
        Ok(l) => l,
        Err(e) => return Err(failed(e)),
    };
    let alarms = if alarmed {
        match alarms(client).await {
            Ok(a) => a,
            Err(e) => return Err(failed(e)),
        }
    } else {
        vec![]
    };
    let auth = match auth_of(&logins) {
        EtcdAuth::Off { .. } => match crate::etcd::auth_calls::root_user(client).await {
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

/// The value most items have (the smallest among equals), None for none.
fn majority(items: impl Iterator<Item = u64>) -> Option<u64> {
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_default() += 1;
    }
    counts.into_iter().max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0))).map(|(v, _)| v)
}

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

    /// A login is a bcrypt hash and a raft entry: on a busy node (the first observation after
    /// `auth enable`, every member logging in at once) it takes longer than a read may. A
    /// member that logs the operator in after more than a read's time is observed all the same,
    /// not reported down (then `NoQuorum` on a healthy cluster).
    #[tokio::test]
    async fn a_member_slower_to_log_in_than_a_read_is_still_observed() {
        use super::super::fake_member::{CLUSTER_ID, FakeMember};
        use std::sync::Arc;
        let slow = READ_TIMEOUT + std::time::Duration::from_secs(1);
        let fake = FakeMember::start(7, slow).await;
        let endpoints = Endpoints {
            urls: BTreeMap::from([("ex-a".to_string(), fake.url.clone())]),
            tls: None,
            root: crate::auth::Credentials::new("root", Some("pw"), None).map(Arc::new),
        };
        let clients = MemberClients::default();
        let started = std::time::Instant::now();
        let st = observe(&clients, &endpoints, None, &mut BTreeMap::new()).await.expect("the member observed");
        assert!(started.elapsed() >= slow, "the fake member did make the login wait");
        assert_eq!(st.cluster_id, CLUSTER_ID);
        assert!(st.members.iter().all(|m| m.is_healthy()), "{:?}", st.members);
        assert_eq!(st.auth, EtcdAuth::On { secret_password: true });
        // The logged-in client is kept: the next observation does not log in again.
        observe(&clients, &endpoints, None, &mut BTreeMap::new()).await.expect("observed again");
        assert_eq!(fake.logins.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A member whose host refuses the connection is down: that is its own answer. One that
    /// takes the connection and hangs up gave no answer for all the operator knows (its own
    /// trouble, maybe): only that one is `unreached`, for the planner to weigh against its pod.
    #[tokio::test]
    async fn only_failures_that_may_be_the_operators_own_leave_a_member_unreached() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let closed_url = format!("http://{}", closed.local_addr().unwrap());
        drop(closed);
        let rude = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let rude_url = format!("http://{}", rude.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((socket, _)) = rude.accept().await {
                drop(socket);
            }
        });
        let endpoints = Endpoints {
            urls: BTreeMap::from([("ex-a".to_string(), closed_url), ("ex-b".to_string(), rude_url)]),
            ..Default::default()
        };
        let mut unreached = BTreeMap::new();
        let r = observe(&MemberClients::default(), &endpoints, None, &mut unreached).await;
        assert!(r.is_err(), "{r:?}");
        assert_eq!(unreached.keys().collect::<Vec<_>>(), ["ex-b"], "{unreached:?}");
    }
}

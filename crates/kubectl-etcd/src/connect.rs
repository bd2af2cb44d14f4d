//! Reaching etcd from outside the cluster: a local TCP listener per member whose connections are
//! carried to the member pod's client port by the API server's port-forward (what
//! `kubectl port-forward` does), and an etcd client of that listener with the operator's client
//! certificate (TLS) — the same material and server name the operator uses. The root login is
//! only used for calls that need it (status and member list do not: they work without quorum).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_client::{AlarmAction, AlarmType, Client, ConnectOptions, Identity, TlsOptions};
use etcd_operator_api::cluster::EtcdCluster;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::Api;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The etcd client port of members.
pub const CLIENT_PORT: u16 = 2379;

/// How this cluster's members are reached: TLS material and root login, when on.
#[derive(Clone, Default)]
pub struct Access {
    pub tls: Option<ClientTls>,
    pub login: Option<(String, String)>,
    /// Why TLS or the login could not be prepared (then the members are tried without).
    pub problems: Vec<String>,
}

#[derive(Clone)]
pub struct ClientTls {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    /// The name members' server certificates are checked against (the operator's:
    /// `<cluster>-client.<namespace>.svc`).
    pub server_name: String,
}

/// The Secret with the operator's client certificate: `spec.TLS.static.operatorSecret`, or the
/// one `spec.TLS.auto` makes, `<name>-tls-operator`. None: clients speak plain http.
pub fn operator_tls_secret(c: &EtcdCluster) -> Option<String> {
    let tls = c.spec.tls.as_ref()?;
    if tls.auto.is_some() {
        return Some(format!("{}-tls-operator", c.name_any()));
    }
    let s = tls.r#static.as_ref()?;
    let serves_tls = s.member.as_ref().is_some_and(|m| !m.server_secret.is_empty());
    (serves_tls && !s.operator_secret.is_empty()).then(|| s.operator_secret.clone())
}

/// The root Secret of `spec.auth` when authentication is on (default `<name>-etcd-root`).
pub fn root_secret(c: &EtcdCluster) -> Option<String> {
    let a = c.spec.auth.as_ref().filter(|a| a.enabled)?;
    Some(if a.root_secret.is_empty() { format!("{}-etcd-root", c.name_any()) } else { a.root_secret.clone() })
}

fn secret_bytes(s: &Secret, key: &str) -> Option<Vec<u8>> {
    s.data.as_ref()?.get(key).map(|b| b.0.clone())
}

/// Reads the TLS and root Secrets (into memory only).
pub async fn access(client: &kube::Client, ns: &str, c: &EtcdCluster) -> Access {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut a = Access::default();
    if let Some(name) = operator_tls_secret(c) {
        match secrets.get(&name).await {
            Ok(s) => match (
                secret_bytes(&s, "etcd-client-ca.crt"),
                secret_bytes(&s, "etcd-client.crt"),
                secret_bytes(&s, "etcd-client.key"),
            ) {
                (Some(ca), Some(cert), Some(key)) => {
                    a.tls = Some(ClientTls { ca, cert, key, server_name: format!("{}-client.{ns}.svc", c.name_any()) })
                }
                _ => a
                    .problems
                    .push(format!("Secret {name} lacks etcd-client.crt, etcd-client.key or etcd-client-ca.crt")),
            },
            Err(e) => a.problems.push(format!("Secret {name} (the operator's client certificate): {e}")),
        }
    }
    if let Some(name) = root_secret(c) {
        match secrets.get(&name).await {
            Ok(s) => {
                let user = secret_bytes(&s, "username").and_then(|u| String::from_utf8(u).ok());
                match secret_bytes(&s, "password").and_then(|p| String::from_utf8(p).ok()) {
                    Some(p) => a.login = Some((user.filter(|u| !u.is_empty()).unwrap_or_else(|| "root".into()), p)),
                    None => a.problems.push(format!("Secret {name} has no password")),
                }
            }
            Err(e) => a.problems.push(format!("Secret {name} (the root login): {e}")),
        }
    }
    a
}

/// A local listener forwarding to `pod`'s `port`; stopped when dropped.
pub struct Forward {
    pub port: u16,
    /// The last port-forward error (the API server's answer), to explain a failed call.
    pub last_error: Arc<Mutex<Option<String>>>,
    task: JoinHandle<()>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn forward(pods: Api<Pod>, pod: &str, port: u16) -> Result<Forward> {
    let listener = TcpListener::bind("127.0.0.1:0").await.context("a local port")?;
    let local = listener.local_addr()?.port();
    let last_error = Arc::new(Mutex::new(None));
    let errors = last_error.clone();
    let pod = pod.to_string();
    let task = tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (pods, pod, errors) = (pods.clone(), pod.clone(), errors.clone());
            tokio::spawn(async move {
                let mut pf = match pods.portforward(&pod, &[port]).await {
                    Ok(pf) => pf,
                    Err(e) => {
                        *errors.lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(format!("port-forward to {pod}:{port}: {e}"));
                        return;
                    }
                };
                let Some(mut up) = pf.take_stream(port) else { return };
                let _ = tokio::io::copy_bidirectional(&mut sock, &mut up).await;
                drop(up);
                let _ = pf.join().await;
            });
        }
    });
    Ok(Forward { port: local, last_error, task })
}

/// What one member says about itself and the cluster.
#[derive(Clone, Debug)]
pub struct Answer {
    pub member_id: u64,
    pub leader: u64,
    pub version: String,
    pub raft_term: u64,
    pub raft_index: u64,
    pub db_size: i64,
    pub db_size_in_use: i64,
    pub is_learner: bool,
    pub errors: Vec<String>,
    /// (id, name, learner) of every member, from its member list.
    pub members: Option<Vec<(u64, String, bool)>>,
    /// Active alarms of the cluster (`(member id, alarm)`), or why they could not be read.
    pub alarms: Result<Vec<(u64, String)>, String>,
}

pub fn options(access: &Access, timeout: Duration, login: bool) -> ConnectOptions {
    let mut o = ConnectOptions::new().with_connect_timeout(timeout).with_timeout(timeout);
    if let Some(t) = &access.tls {
        o = o.with_tls(
            TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(&t.ca))
                .identity(Identity::from_pem(&t.cert, &t.key))
                .domain_name(t.server_name.clone()),
        );
    }
    if login && let Some((u, p)) = &access.login {
        o = o.with_user(u.clone(), p.clone());
    }
    o
}

/// Asks the member behind `fwd` for its status, the member list and the alarms, each bounded
/// by `timeout` (the whole by three times that).
pub async fn ask(fwd: &Forward, access: &Access, timeout: Duration) -> Result<Answer, String> {
    let scheme = if access.tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://127.0.0.1:{}", fwd.port);
    let explain = |e: String| match fwd.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone() {
        Some(pf) => format!("{e} ({pf})"),
        None => e,
    };
    let status = tokio::time::timeout(timeout, async {
        let mut c = Client::connect([url.as_str()], Some(options(access, timeout, false))).await?;
        let s = c.status().await?;
        Ok::<_, etcd_client::Error>((c, s))
    })
    .await;
    let (mut c, s) = match status {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => return Err(explain(format!("status: {e}"))),
        Err(_) => return Err(explain(format!("status: no answer within {}s", timeout.as_secs()))),
    };
    let mut a = Answer {
        member_id: s.header().map_or(0, |h| h.member_id()),
        leader: s.leader(),
        version: s.version().to_string(),
        raft_term: s.raft_term(),
        raft_index: s.raft_index(),
        db_size: s.db_size(),
        db_size_in_use: s.raft_used_db_size(),
        is_learner: s.is_learner(),
        errors: s.errors().to_vec(),
        members: None,
        alarms: Err("not asked".into()),
    };
    if let Ok(Ok(m)) = tokio::time::timeout(timeout, c.member_list()).await {
        a.members = Some(m.members().iter().map(|m| (m.id(), m.name().to_string(), m.is_learner())).collect());
    }
    // Alarms go through raft (and need the login when authentication is on).
    let alarms = tokio::time::timeout(timeout, async {
        let mut c = if access.login.is_some() {
            Client::connect([url.as_str()], Some(options(access, timeout, true))).await?
        } else {
            c
        };
        let r = c.alarm(AlarmAction::Get, AlarmType::None, None).await?;
        Ok::<_, etcd_client::Error>(r.alarms().iter().map(|m| (m.member_id(), format!("{:?}", m.alarm()))).collect())
    })
    .await;
    a.alarms = match alarms {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("alarms: {e}")),
        Err(_) => Err(format!("alarms: no answer within {}s", timeout.as_secs())),
    };
    Ok(a)
}

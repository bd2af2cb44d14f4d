//! Collecting a cluster's status: the objects from the API server, each member's own answers
//! through a port-forward (all members at once, each bounded by the member timeout), the Secrets'
//! certificates. Whatever cannot be read is listed in `unseen`; nothing here waits unbounded.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use etcd_operator_api::backup::EtcdBackup;
use etcd_operator_api::cluster::EtcdCluster;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::model::*;
use crate::connect::{self, Access, Answer};

/// Conditions whose `True` means the operator is busy with something.
const BUSY: &[&str] = &["Scaling", "Upgrading", "Recovering", "TLSTransition", "Degraded", "NoSpace", "Corrupt"];

/// The pod's Ready condition is True.
pub fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The label selector of a cluster's member pods.
pub fn member_selector(name: &str) -> String {
    format!("app=etcd,etcd_cluster={name}")
}

pub async fn gather(client: &kube::Client, ns: &str, name: &str, timeout: Duration) -> Result<Status> {
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), ns);
    let c = clusters.get(name).await.with_context(|| format!("EtcdCluster {ns}/{name}"))?;
    let access = connect::access(client, ns, &c).await;
    let mut s = Status { schema: SCHEMA.into(), cluster: cluster_info(&c), ..Default::default() };
    s.unseen.extend(access.problems.iter().cloned());

    let pods_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut pods = pods_api.list(&ListParams::default().labels(&member_selector(name))).await?.items;
    pods.sort_by_key(|p| p.name_any());
    let answers =
        futures::future::join_all(pods.iter().map(|p| ask_member(pods_api.clone(), p.name_any(), &access, timeout)))
            .await;
    members(&mut s, &pods, answers);

    let st = c.status.clone().unwrap_or_default();
    s.conditions = st
        .conditions
        .iter()
        .map(|c| ConditionLine {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            last_transition_time: c.last_transition_time.clone(),
        })
        .collect();
    s.waiting_for = waiting_for(&c);

    let now = super::now();
    match last_backup(client, ns, name, now).await {
        Ok(b) => s.last_backup = b,
        Err(e) => s.unseen.push(format!("EtcdBackups: {e}")),
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    for sec in crate::certs::tls_secrets(&c) {
        match secrets.get(&sec).await {
            Ok(obj) => {
                let data: Vec<(String, Vec<u8>)> =
                    obj.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
                s.certificates.extend(crate::certs::expiries(&sec, &data, now));
            }
            Err(e) => s.unseen.push(format!("Secret {sec} (certificate expiry): {e}")),
        }
    }
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    match pdbs.get_opt(name).await {
        Ok(Some(p)) => {
            let st = p.status.unwrap_or_default();
            s.disruption_budget = Some(DisruptionBudget {
                name: name.into(),
                min_available: p.spec.and_then(|s| s.min_available).map(|m| match m {
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(i) => i.to_string(),
                    k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s,
                }),
                current_healthy: st.current_healthy,
                desired_healthy: st.desired_healthy,
                disruptions_allowed: st.disruptions_allowed,
            })
        }
        Ok(None) => s.unseen.push(format!("no PodDisruptionBudget {name}")),
        Err(e) => s.unseen.push(format!("PodDisruptionBudget {name}: {e}")),
    }
    Ok(s)
}

async fn ask_member(pods: Api<Pod>, pod: String, access: &Access, timeout: Duration) -> Result<Answer, String> {
    let fwd = connect::forward(pods, &pod, connect::CLIENT_PORT).await.map_err(|e| format!("{e:#}"))?;
    // Bounded however the calls inside behave.
    match tokio::time::timeout(timeout * 3 + Duration::from_secs(1), connect::ask(&fwd, access, timeout)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {}s", (timeout * 3).as_secs() + 1)),
    }
}

fn cluster_info(c: &EtcdCluster) -> ClusterInfo {
    let st = c.status.clone().unwrap_or_default();
    let tls = match &c.spec.tls {
        Some(t) if t.auto.is_some() => "auto",
        Some(t) if t.r#static.is_some() => "static",
        _ => "off",
    };
    ClusterInfo {
        name: c.name_any(),
        namespace: c.namespace().unwrap_or_default(),
        size: c.spec.size,
        version: c.spec.version.clone(),
        current_version: st.current_version,
        phase: st.phase,
        paused: c.spec.paused,
        tls: tls.into(),
        auth: connect::root_secret(c).is_some(),
        cluster_id: st.cluster_id,
    }
}

fn waiting_for(c: &EtcdCluster) -> Vec<String> {
    let mut out = vec![];
    if c.spec.paused {
        out.push("nothing: the cluster is paused (spec.paused), the operator changes nothing".into());
    }
    let st = c.status.clone().unwrap_or_default();
    for cond in &st.conditions {
        let busy = BUSY.contains(&cond.type_.as_str()) && cond.status == "True";
        let not_ok = matches!(cond.type_.as_str(), "Available" | "SpecValid") && cond.status != "True";
        if busy || not_ok {
            out.push(format!("{} ({}): {}", cond.type_, cond.reason, cond.message));
        }
    }
    out
}

/// Fills the members and the verdict from the pods and their answers.
pub fn members(s: &mut Status, pods: &[Pod], answers: Vec<Result<Answer, String>>) {
    let ok: Vec<&Answer> = answers.iter().filter_map(|a| a.as_ref().ok()).collect();
    // The leader most answering members follow.
    let mut votes: BTreeMap<u64, usize> = BTreeMap::new();
    for a in ok.iter().filter(|a| a.leader != 0) {
        *votes.entry(a.leader).or_default() += 1;
    }
    let leader_id = votes.iter().max_by_key(|(_, n)| **n).map(|(id, _)| *id);
    let leader_answer = leader_id.and_then(|l| ok.iter().find(|a| a.member_id == l));
    let list = ok.iter().find_map(|a| a.members.clone());
    let name_of = |id: u64| -> Option<String> {
        list.as_ref().and_then(|l| l.iter().find(|(i, _, _)| *i == id).map(|(_, n, _)| n.clone())).or_else(|| {
            ok.iter().position(|a| a.member_id == id).and_then(|_| {
                answers
                    .iter()
                    .zip(pods)
                    .find(|(a, _)| a.as_ref().is_ok_and(|a| a.member_id == id))
                    .map(|(_, p)| p.name_any())
            })
        })
    };
    s.leader = leader_id.map(|id| name_of(id).unwrap_or_else(|| format!("{id:x}")));
    let mut alarms: Option<Vec<(u64, String)>> = None;
    let mut alarm_errors = vec![];
    for a in &ok {
        match &a.alarms {
            Ok(v) if alarms.is_none() => alarms = Some(v.clone()),
            Ok(_) => {}
            Err(e) => alarm_errors.push(e.clone()),
        }
    }
    if alarms.is_none() && !ok.is_empty() {
        s.unseen.push(format!("alarms (no member answered): {}", alarm_errors.first().cloned().unwrap_or_default()));
    }
    for (pod, answer) in pods.iter().zip(&answers) {
        let st = pod.status.clone().unwrap_or_default();
        let ready = is_ready(pod);
        let phase =
            if pod.metadata.deletion_timestamp.is_some() { "Terminating".into() } else { st.phase.unwrap_or_default() };
        let mut m = Member {
            pod: pod.name_any(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            phase,
            ready,
            ..Default::default()
        };
        match answer {
            Ok(a) => {
                m.reachable = true;
                m.member_id = Some(format!("{:x}", a.member_id));
                m.role = if a.is_learner {
                    Some(Role::Learner)
                } else if a.leader == 0 {
                    None
                } else if a.leader == a.member_id {
                    Some(Role::Leader)
                } else {
                    Some(Role::Follower)
                };
                m.version = Some(a.version.clone());
                m.raft_term = Some(a.raft_term);
                m.raft_index = Some(a.raft_index);
                m.raft_lag = leader_answer.map(|l| l.raft_index.saturating_sub(a.raft_index));
                m.db_size = Some(a.db_size);
                m.db_size_in_use = Some(a.db_size_in_use);
                m.errors = a.errors.clone();
                m.alarms =
                    alarms.iter().flatten().filter(|(id, _)| *id == a.member_id).map(|(_, al)| al.clone()).collect();
            }
            Err(e) => m.error = Some(e.clone()),
        }
        s.members.push(m);
    }
    let voters =
        list.map(|l| l.iter().filter(|(_, _, learner)| !learner).count()).unwrap_or(s.cluster.size.max(0) as usize);
    if ok.is_empty() && !pods.is_empty() {
        s.unseen.push("no member answered: roles, raft indexes, sizes and alarms are unknown".into());
    }
    s.verdict = verdict(&s.members, voters.max(1), s.leader.as_deref());
    if s.cluster.paused {
        s.verdict.message.push_str(" [operator paused]");
    }
}

/// The EtcdBackup of this cluster that succeeded last.
async fn last_backup(client: &kube::Client, ns: &str, name: &str, now: i64) -> Result<Option<Backup>> {
    let api: Api<EtcdBackup> = Api::namespaced(client.clone(), ns);
    let service = format!("{name}-client");
    let mut best: Option<Backup> = None;
    for b in api.list(&ListParams::default()).await?.items {
        let ours = b.spec.cluster_name == name || b.spec.etcd_endpoints.iter().any(|e| e.contains(&service));
        let Some(st) = b.status.as_ref().filter(|_| ours) else { continue };
        let Some(time) = st.last_success_date.clone().filter(|t| !t.is_empty()) else { continue };
        let ts: Option<jiff::Timestamp> = time.parse().ok();
        if best.as_ref().is_some_and(|bb| bb.time.parse::<jiff::Timestamp>().ok() >= ts) {
            continue;
        }
        best = Some(Backup {
            name: b.name_any(),
            storage_type: b.spec.storage_type.clone(),
            path: st.path.clone(),
            size: st.size,
            age_seconds: ts.map(|t| now - t.as_second()),
            time,
        });
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use kube::api::ObjectMeta;

    fn pod(name: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(PodSpec { node_name: Some("n1".into()), ..Default::default() }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn answer(id: u64, leader: u64, index: u64, learner: bool) -> Answer {
        Answer {
            member_id: id,
            leader,
            version: "3.6.15".into(),
            raft_term: 2,
            raft_index: index,
            db_size: 4096,
            db_size_in_use: 2048,
            is_learner: learner,
            errors: vec![],
            members: Some(vec![(0xa, "ex-a".into(), false), (0xb, "ex-b".into(), false), (0xc, "ex-c".into(), true)]),
            alarms: Ok(vec![(0xb, "Nospace".into())]),
        }
    }

    /// Leader `a` at index 100, follower `b` 10 behind with an alarm, learner `c` answering,
    /// `d` (a pod the member list does not know) unreachable.
    #[test]
    fn roles_lag_alarms_and_the_leaders_name() {
        let pods = [pod("ex-a", true), pod("ex-b", true), pod("ex-c", false), pod("ex-d", false)];
        let answers = vec![
            Ok(answer(0xa, 0xa, 100, false)),
            Ok(answer(0xb, 0xa, 90, false)),
            Ok(answer(0xc, 0xa, 100, true)),
            Err("status: no answer within 5s".into()),
        ];
        let mut s = Status { cluster: ClusterInfo { size: 3, ..Default::default() }, ..Default::default() };
        members(&mut s, &pods, answers);
        assert_eq!(s.leader.as_deref(), Some("ex-a"));
        let by = |p: &str| s.members.iter().find(|m| m.pod == p).unwrap().clone();
        let (a, b, c, d) = (by("ex-a"), by("ex-b"), by("ex-c"), by("ex-d"));
        assert_eq!((a.role, a.raft_lag, a.member_id.as_deref()), (Some(Role::Leader), Some(0), Some("a")));
        assert_eq!(
            (b.role, b.raft_lag, b.alarms.clone()),
            (Some(Role::Follower), Some(10), vec!["Nospace".to_string()])
        );
        assert_eq!((c.role, c.ready), (Some(Role::Learner), false));
        assert!(!d.reachable && d.raft_index.is_none() && d.error.as_deref() == Some("status: no answer within 5s"));
        // Two voters (a learner does not vote) answer with a leader: quorum holds, degraded.
        assert_eq!(s.verdict.health, Health::Degraded, "{}", s.verdict.message);
        assert!(s.verdict.message.contains("unreachable: ex-d") && s.verdict.message.contains("alarm Nospace on ex-b"));
    }

    /// No member answers: nothing is made up, and the verdict says quorum lost.
    #[test]
    fn no_answer_at_all() {
        let pods = [pod("ex-a", false), pod("ex-b", false), pod("ex-c", false)];
        let answers = (0..3).map(|_| Err("status: no answer within 5s".to_string())).collect();
        let mut s = Status { cluster: ClusterInfo { size: 3, ..Default::default() }, ..Default::default() };
        members(&mut s, &pods, answers);
        assert_eq!((s.leader.clone(), s.verdict.health), (None, Health::QuorumLost));
        assert!(s.members.iter().all(|m| m.role.is_none() && m.raft_lag.is_none() && m.db_size.is_none()));
        assert!(s.unseen.iter().any(|u| u.starts_with("no member answered")), "{:?}", s.unseen);
    }
}

//! The status document (`-o json|yaml`, schema `kubectl-etcd/status/v1`) and its verdict. Pure.
//!
//! Stability: fields are only ever added in `v1`; a removed or changed field means `v2`. Absent
//! knowledge is `null` (e.g. a member's `raftIndex` when it does not answer), never a made-up 0.

use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "kubectl-etcd/status/v1";

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Always [`SCHEMA`].
    pub schema: String,
    pub cluster: ClusterInfo,
    pub verdict: Verdict,
    /// Pod name of the member the answering members name as leader (`null`: none).
    pub leader: Option<String>,
    pub members: Vec<Member>,
    pub conditions: Vec<ConditionLine>,
    /// What the operator is doing or waiting for, from its conditions (messages).
    pub waiting_for: Vec<String>,
    /// The most recent successful EtcdBackup of this cluster.
    pub last_backup: Option<Backup>,
    pub certificates: Vec<Certificate>,
    pub disruption_budget: Option<DisruptionBudget>,
    /// What could not be seen, and why (a Secret not readable, no member answered, ...).
    pub unseen: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInfo {
    pub name: String,
    pub namespace: String,
    /// `spec.size`.
    pub size: i32,
    /// `spec.version` (wanted) and `status.currentVersion`.
    pub version: String,
    pub current_version: String,
    pub phase: String,
    /// `spec.paused`: the operator changes nothing.
    pub paused: bool,
    /// `off`, `static` or `auto`.
    pub tls: String,
    pub auth: bool,
    pub cluster_id: String,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Health {
    /// Every member answers, is ready, agrees on one leader; no alarm.
    Healthy,
    /// Quorum holds, but a member does not answer, is not ready, has an alarm or lags.
    Degraded,
    /// Fewer voting members answer with a leader than a quorum.
    QuorumLost,
    /// No member pod at all.
    #[default]
    Unknown,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    pub health: Health,
    /// One line for a person.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    Leader,
    Follower,
    Learner,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    pub pod: String,
    pub node: Option<String>,
    /// The pod's phase and Ready condition.
    pub phase: String,
    pub ready: bool,
    /// The member answered its status call (through a port-forward to its client port).
    pub reachable: bool,
    /// Why it did not answer.
    pub error: Option<String>,
    /// etcd member ID, hex as etcdctl prints it.
    pub member_id: Option<String>,
    pub role: Option<Role>,
    pub version: Option<String>,
    pub raft_term: Option<u64>,
    pub raft_index: Option<u64>,
    /// Raft entries behind the leader's index (the leader's answer and this member's, read a
    /// moment apart: small values are normal under writes).
    pub raft_lag: Option<u64>,
    pub db_size: Option<i64>,
    pub db_size_in_use: Option<i64>,
    /// Active alarms of this member (`NOSPACE`, `CORRUPT`).
    pub alarms: Vec<String>,
    /// Errors the member reports about itself.
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionLine {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Backup {
    /// The EtcdBackup object.
    pub name: String,
    pub storage_type: String,
    pub path: String,
    pub size: i64,
    /// RFC 3339 time of the backup, and its age in seconds when this was made.
    pub time: String,
    pub age_seconds: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    pub secret: String,
    pub key: String,
    pub subject: String,
    /// RFC 3339 end of validity, and seconds left (negative: expired).
    pub not_after: String,
    pub expires_in_seconds: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudget {
    pub name: String,
    pub min_available: Option<String>,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub disruptions_allowed: i32,
}

/// Voting members a quorum needs out of `voters`.
pub fn quorum(voters: usize) -> usize {
    voters / 2 + 1
}

/// The verdict from the members (their answers filled in) and the number of voting members
/// (from a member list; else `spec.size`).
pub fn verdict(members: &[Member], voters: usize, leader: Option<&str>) -> Verdict {
    if members.is_empty() {
        return Verdict { health: Health::Unknown, message: "no member pods".into() };
    }
    let unreachable: Vec<&str> = members.iter().filter(|m| !m.reachable).map(|m| m.pod.as_str()).collect();
    // Voters that answer and follow a leader.
    let with_leader = members
        .iter()
        .filter(|m| m.reachable && leader.is_some() && matches!(m.role, Some(Role::Leader | Role::Follower)))
        .count();
    let need = quorum(voters);
    if with_leader < need {
        let mut msg =
            format!("QUORUM LOST: {with_leader} of {voters} voting members answer with a leader (a quorum is {need})");
        if !unreachable.is_empty() {
            msg.push_str(&format!("; unreachable: {}", unreachable.join(", ")));
        }
        return Verdict { health: Health::QuorumLost, message: msg };
    }
    let mut problems = vec![];
    if !unreachable.is_empty() {
        problems.push(format!("unreachable: {}", unreachable.join(", ")));
    }
    let unready: Vec<&str> = members.iter().filter(|m| m.reachable && !m.ready).map(|m| m.pod.as_str()).collect();
    if !unready.is_empty() {
        problems.push(format!("not ready: {}", unready.join(", ")));
    }
    for m in members.iter().filter(|m| !m.alarms.is_empty()) {
        problems.push(format!("alarm {} on {}", m.alarms.join(","), m.pod));
    }
    let leader = leader.unwrap_or("?");
    if problems.is_empty() {
        let n = members.len();
        Verdict { health: Health::Healthy, message: format!("healthy: {n}/{n} members answer, leader {leader}") }
    } else {
        Verdict {
            health: Health::Degraded,
            message: format!("DEGRADED (quorum holds, leader {leader}): {}", problems.join("; ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pod: &str, role: Option<Role>, ready: bool) -> Member {
        Member { pod: pod.into(), reachable: role.is_some(), ready, role, ..Default::default() }
    }
    const L: Option<Role> = Some(Role::Leader);
    const F: Option<Role> = Some(Role::Follower);

    #[test]
    fn verdicts_of_a_three_member_cluster() {
        // (members, leader known, health)
        let table: Vec<(Vec<Member>, bool, Health)> = vec![
            (vec![m("a", L, true), m("b", F, true), m("c", F, true)], true, Health::Healthy),
            (vec![m("a", L, true), m("b", F, true), m("c", None, true)], true, Health::Degraded),
            (vec![m("a", L, true), m("b", F, false), m("c", F, true)], true, Health::Degraded),
            (vec![m("a", L, true), m("b", None, false), m("c", None, false)], true, Health::QuorumLost),
            // One answers but follows no leader (the others are gone).
            (vec![m("a", F, true), m("b", None, true), m("c", None, true)], false, Health::QuorumLost),
            (vec![m("a", None, true), m("b", None, true), m("c", None, true)], false, Health::QuorumLost),
            (vec![], false, Health::Unknown),
        ];
        for (members, has_leader, want) in table {
            let v = verdict(&members, 3, has_leader.then_some("a"));
            assert_eq!(v.health, want, "{members:?}: {}", v.message);
        }
    }

    #[test]
    fn the_message_names_the_unreachable_members() {
        let v = verdict(&[m("a", L, true), m("b", F, true), m("c", None, true)], 3, Some("a"));
        assert!(v.message.contains("unreachable: c"), "{}", v.message);
        let v = verdict(&[m("a", F, true), m("b", None, true), m("c", None, true)], 3, None);
        assert!(v.message.starts_with("QUORUM LOST") && v.message.contains("unreachable: b, c"), "{}", v.message);
    }

    #[test]
    fn an_alarm_degrades() {
        let mut a = m("a", L, true);
        a.alarms = vec!["NOSPACE".into()];
        let v = verdict(&[a, m("b", F, true), m("c", F, true)], 3, Some("a"));
        assert_eq!(v.health, Health::Degraded);
        assert!(v.message.contains("alarm NOSPACE on a"), "{}", v.message);
    }

    #[test]
    fn quorum_sizes() {
        assert_eq!([1, 2, 3, 4, 5].map(quorum), [1, 2, 2, 3, 3]);
    }

    #[test]
    fn the_json_schema_is_camel_case_and_versioned() {
        let s = Status { schema: SCHEMA.into(), ..Default::default() };
        let v = serde_json::to_value(&s).unwrap();
        for k in [
            "schema",
            "cluster",
            "verdict",
            "leader",
            "members",
            "conditions",
            "waitingFor",
            "lastBackup",
            "certificates",
            "disruptionBudget",
            "unseen",
        ] {
            assert!(v.get(k).is_some(), "{k} in {v}");
        }
        assert_eq!(v["schema"], "kubectl-etcd/status/v1");
        assert_eq!(v["verdict"]["health"], "Unknown");
    }
}

//! Quorum loss: which voters can never come back, what the user is told, and the disaster
//! recovery the user may opt into with `spec.recovery.quorumLoss`:
//! - `Wait` (default): report what was lost and what can be done; change nothing.
//! - `FromSurvivor`: a new one-member cluster starts from a snapshot of the surviving member with
//!   the most data (etcd's own disaster-recovery path: the survivor's data, a new membership);
//!   the other members are then replaced by learners as usual.
//! - `FromBackup`: the same, from the newest backup of a named EtcdBackup.
//!
//! A quorum that can still come back (members restarting on their volumes, pods starting) is
//! waited for: recovery acts only when fewer than a quorum of voters can *ever* return, and only
//! after that has lasted `afterSeconds`.

use super::{NewMember, Recovery, Seed, Step, WaitReason, peer_of, upgrade::running_version, wait};
use crate::naming;
use crate::observed::{EtcdState, MemberState, Observed, QuorumLossPolicy};
use crate::validation::Desired;
use crate::version::Version;

/// A recovery under way, as the operator recorded it on the EtcdCluster before acting.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The new first member.
    pub member: String,
    /// `FromSurvivor` or `FromBackup`.
    pub policy: String,
    /// The survivor pod or the EtcdBackup (and object) the data comes from.
    pub from: String,
    pub revision: i64,
    /// Voters lost for good, of how many.
    pub lost: usize,
    pub voters: usize,
}

impl Record {
    pub fn of(r: &Recovery, policy: &str) -> Record {
        Record {
            member: r.member.name.clone(),
            policy: policy.into(),
            from: r.from.clone(),
            revision: r.revision,
            lost: r.lost.len(),
            voters: r.voters,
        }
    }
}

/// Voters that can never come back, each with why: no pod and no volume, a pod that ended
/// without a volume, or a volume its data check refused. (A pod still being deleted is not
/// counted: it may still run.)
pub fn cannot_return(o: &Observed, etcd: &EtcdState) -> Vec<String> {
    etcd.voters().filter_map(|m| lost_why(o, m).map(|why| format!("{}: {why}", m.pod))).collect()
}

fn lost_why(o: &Observed, m: &MemberState) -> Option<String> {
    let volume = o.pvcs.get(&m.pod).filter(|v| !v.deleting);
    match o.pods.get(&m.pod) {
        Some(p) if p.volume_refused.is_some() => {
            Some(format!("its volume does not hold its data ({})", p.volume_refused.as_deref().unwrap_or_default()))
        }
        // A pod being deleted may still run (a node that stopped answering can keep a quorum
        // serving clients on its side): it is lost only once its object is gone. A stuck one is
        // reported as such.
        Some(p) if !p.is_dead() => None,
        _ if volume.is_some() => None,
        Some(p) => Some(format!("its pod ended ({}) and it had no volume", p.phase)),
        None => Some("its pod is gone and it had no volume".into()),
    }
}

/// True when the cluster formed, has no quorum, and fewer than a quorum of its voters can ever
/// come back (or nothing at all is left). The operator records since when this holds.
pub fn quorum_unrecoverable(o: &Observed) -> bool {
    if !o.ever_bootstrapped || o.desired.is_err() {
        return false;
    }
    match &o.etcd {
        Some(e) => {
            let voters = e.voters().count();
            let healthy = e.voters().filter(|m| m.is_healthy()).count();
            let quorum = EtcdState::quorum_of(voters);
            healthy < quorum && voters - cannot_return(o, e).len() < quorum
        }
        None => nothing_left(o),
    }
}

/// No pod and no volume holds any of this cluster's data.
pub fn nothing_left(o: &Observed) -> bool {
    o.pods.is_empty() && o.pvcs.values().all(|v| v.deleting)
}

fn policy_name(p: &QuorumLossPolicy) -> &'static str {
    match p {
        QuorumLossPolicy::Wait => "Wait",
        QuorumLossPolicy::FromSurvivor => "FromSurvivor",
        QuorumLossPolicy::FromBackup { .. } => "FromBackup",
    }
}

const HOW_TO_RECOVER: &str = "to recover, set spec.recovery.quorumLoss to FromSurvivor (a new cluster from the surviving member with the most data; writes it lacks are lost) or FromBackup with spec.recovery.backup naming an EtcdBackup";

/// etcd answered but fewer than a quorum of voters are healthy.
pub(super) fn no_quorum(o: &Observed, d: &Desired, etcd: &EtcdState, healthy: usize) -> Step {
    let voters = etcd.voters().count();
    let quorum = EtcdState::quorum_of(voters);
    let lost = cannot_return(o, etcd);
    if voters - lost.len() >= quorum {
        return wait(
            WaitReason::NoQuorum,
            format!(
                "only {healthy} of {voters} voting members are healthy, a quorum needs {quorum}; {} can come back (starting, or restarting on their volumes): waiting for them, no membership change meanwhile",
                voters - lost.len()
            ),
        );
    }
    let lost_text = format!(
        "quorum lost for good: {} of {voters} voting members can never come back ({}); the surviving members' data is kept",
        lost.len(),
        lost.join("; ")
    );
    let policy = &d.recovery.quorum_loss;
    if *policy == QuorumLossPolicy::Wait {
        return wait(WaitReason::NoQuorum, format!("{lost_text}; {HOW_TO_RECOVER}"));
    }
    let waited = o.quorum_lost_secs.unwrap_or(0);
    if waited < d.recovery.after_secs {
        return wait(
            WaitReason::NoQuorum,
            format!(
                "{lost_text}; recovery {} starts in {}s unless members come back",
                policy_name(policy),
                d.recovery.after_secs - waited
            ),
        );
    }
    let step = match policy {
        QuorumLossPolicy::FromSurvivor => from_survivor(o, d, etcd, lost, voters),
        QuorumLossPolicy::FromBackup { backup } => from_backup(o, d, backup, lost, voters),
        QuorumLossPolicy::Wait => unreachable!("handled above"),
    };
    step.unwrap_or_else(|why| wait(WaitReason::NoQuorum, format!("{lost_text}; recovery is not possible: {why}")))
}

/// Nothing is left of a cluster that formed: no pod, no volume.
pub(super) fn all_lost(o: &Observed, d: &Desired) -> Step {
    const LOST: &str = "every member pod is gone and no volume holds this cluster's data; the operator does not start an empty cluster in its place";
    match &d.recovery.quorum_loss {
        QuorumLossPolicy::FromBackup { backup } if o.quorum_lost_secs.unwrap_or(0) >= d.recovery.after_secs => {
            from_backup(o, d, backup, vec!["every member: pod and data gone".into()], 0).unwrap_or_else(|why| {
                wait(WaitReason::DataLost, format!("{LOST}; recovery from a backup is not possible: {why}"))
            })
        }
        QuorumLossPolicy::FromBackup { .. } => wait(
            WaitReason::DataLost,
            format!(
                "{LOST}; recovery FromBackup starts in {}s",
                d.recovery.after_secs - o.quorum_lost_secs.unwrap_or(0)
            ),
        ),
        _ => wait(
            WaitReason::DataLost,
            format!(
                "{LOST}. Set spec.recovery.quorumLoss: FromBackup with spec.recovery.backup naming an EtcdBackup to start from its newest backup, or restore one with an EtcdRestore"
            ),
        ),
    }
}

fn seed_member(o: &Observed, d: &Desired, version: Version, seed: Seed) -> NewMember {
    let name = naming::member_name(&o.name, &o.new_member_suffix);
    // A backup on a claim marked as root's is read as root (`backup::volume_owner`).
    let root_data = matches!(&seed, Seed::Backup(r) if r.root_volume);
    NewMember {
        initial_cluster: vec![peer_of(o, d, &name)],
        name,
        existing: false,
        version,
        pvc: d.pod.persistent_volume_claim_spec.is_some(),
        bootstrap: true,
        restart: false,
        seed: Some(seed),
        root_data,
    }
}

/// The surviving member with the most data (highest applied raft index: the last log index can
/// include entries never committed; then the highest revision; a voter before a learner) whose
/// pod has an address.
fn survivor<'a>(o: &Observed, etcd: &'a EtcdState) -> Option<(&'a MemberState, String)> {
    let scheme = o.desired.as_ref().map(|d| d.tls_stage.operator_scheme()).unwrap_or("http");
    etcd.members
        .iter()
        .filter_map(|m| {
            let pod = o.pods.get(&m.pod).filter(|p| !p.deleting && !p.is_dead())?;
            m.status.as_ref()?;
            Some((m, format!("{scheme}://{}:{}", pod.ip.as_ref()?, naming::CLIENT_PORT)))
        })
        .max_by_key(|(m, _)| {
            let s = m.status.as_ref().expect("filtered");
            (s.raft_applied_index, s.revision, !m.is_learner)
        })
}

fn from_survivor(
    o: &Observed,
    d: &Desired,
    etcd: &EtcdState,
    lost: Vec<String>,
    voters: usize,
) -> Result<Step, String> {
    let (m, client_url) = survivor(o, etcd).ok_or("no surviving member answers with its status")?;
    let s = m.status.as_ref().expect("a survivor answered");
    let version = Version::parse(&s.version).ok().or_else(|| running_version(o)).unwrap_or_else(|| d.version.clone());
    let seed = Seed::Member { pod: m.pod.clone(), client_url, cluster_id: etcd.cluster_id, member_id: m.id };
    let member = seed_member(o, d, version, seed);
    Ok(Step::Recover(Box::new(Recovery {
        member,
        from: format!("surviving member {} (applied raft index {})", m.pod, s.raft_applied_index),
        revision: s.revision,
        lost,
        voters,
    })))
}

fn from_backup(o: &Observed, d: &Desired, backup: &str, lost: Vec<String>, voters: usize) -> Result<Step, String> {
    let b = match &o.recovery_backup {
        Some(Ok(b)) => b,
        Some(Err(e)) => return Err(format!("EtcdBackup {backup}: {e}")),
        None => return Err(format!("EtcdBackup {backup} was not read")),
    };
    let version = running_version(o).unwrap_or_else(|| d.version.clone());
    let member = seed_member(o, d, version, Seed::Backup(b.restore.clone()));
    Ok(Step::Recover(Box::new(Recovery {
        member,
        from: format!("EtcdBackup {backup} ({})", b.restore.location.url()),
        revision: b.revision,
        lost,
        voters,
    })))
}

/// A recovery recorded on the EtcdCluster whose first member is not serving yet: wait for it,
/// or give it up when it cannot start from a survivor that is gone (the next plan starts over).
pub(super) fn in_progress(o: &Observed) -> Option<Step> {
    let r = o.recovery_record.as_ref()?;
    let pod = o.pods.get(&r.member)?;
    let serving = o.etcd.as_ref().and_then(|e| e.member_for_pod(&r.member)).is_some_and(|m| m.is_healthy());
    if serving {
        return None;
    }
    if pod.is_dead() || pod.problem.is_some() {
        return Some(Step::DeletePod {
            pod: r.member.clone(),
            why: format!(
                "the recovery's first member cannot start ({}); recovery starts over",
                pod.problem.as_ref().map(|(r, m)| format!("{r}: {m}")).unwrap_or_else(|| pod.phase.clone())
            ),
            keep_volume: false,
        });
    }
    Some(wait(
        WaitReason::Recovering,
        format!(
            "recovering from quorum loss ({}): member {} starts from {} at revision {}",
            r.policy, r.member, r.from, r.revision
        ),
    ))
}

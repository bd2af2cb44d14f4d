//! Quorum loss: which voters can never come back, what the user is told, and the disaster
//! recovery the user may opt into with `spec.recovery.quorumLoss`:
//! - `Wait` (default): report what was lost and what can be done; change nothing.
//! - `FromSurvivor`: a new one-member cluster starts from a snapshot of the surviving member with
//!   the most data (etcd's own disaster-recovery path: the survivor's data, a new membership);
//!   the other members are then replaced by learners as usual.
//! - `FromBackup`: the same, from the newest backup of a named EtcdBackup of this cluster, and
//!   only when no surviving member holds newer data.
//!
//! A quorum that can still come back (members restarting on their volumes, pods starting) is
//! waited for: recovery acts only when fewer than a quorum of voters can *ever* return, and only
//! after that has lasted `afterSeconds`. What the survivors hold is judged over several looks
//! (`survivors`), never from one.

use super::survivors::{self, Survivor};
use super::{NewMember, Recovery, Seed, Step, WaitReason, peer_of, upgrade::running_version, wait};
use crate::naming;
use crate::observed::{BackupPoint, EtcdState, MemberState, Observed, RecoveryRecord};
use crate::validation::Desired;
use crate::validation::QuorumLossPolicy;
use crate::version::Version;

impl RecoveryRecord {
    pub fn of(r: &Recovery, policy: &str) -> RecoveryRecord {
        RecoveryRecord {
            member: r.member.name.clone(),
            policy: policy.into(),
            from: r.from.clone(),
            revision: r.revision,
            lost: r.lost.len(),
            voters: r.voters,
        }
    }
}

/// Voters that can never come back, each with why: no pod and no volume (a retired one is none),
/// a pod that ended without a volume, or a volume its data check refused. (A pod still being
/// deleted is not counted: it may still run. Nor is a pod object that is gone while its node
/// gives no evidence that the process stopped: `nodes::stopped_evidence`.)
pub fn cannot_return(o: &Observed, etcd: &EtcdState) -> Vec<String> {
    etcd.voters().filter_map(|m| lost_why(o, m).map(|why| format!("{}: {why}", m.pod))).collect()
}

pub(super) fn lost_why(o: &Observed, m: &MemberState) -> Option<String> {
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
        // The kubelet reported the end: the process is gone.
        Some(p) if o.retired_pvcs.contains_key(&m.pod) => {
            Some(format!("its pod ended ({}) and its volume was retired", p.phase))
        }
        Some(p) => Some(format!("its pod ended ({}) and it had no volume", p.phase)),
        // The object is gone: only its node tells whether the process stopped (a pod
        // force-deleted on a node cut off from the API server keeps running there).
        None => {
            let what = if o.retired_pvcs.contains_key(&m.pod) { "its volume was retired" } else { "it had no volume" };
            match gone_pod_stopped(o, &m.pod) {
                Ok(evidence) if evidence.is_empty() => Some(format!("its pod is gone and {what}")),
                Ok(evidence) => Some(format!("its pod is gone and {what}; {evidence}")),
                Err(_) => None,
            }
        }
    }
}

/// Whether a voter whose pod object is gone certainly stopped: the evidence, or why it may
/// still run. A pod the operator never saw on a node (never scheduled, or gone before this
/// operator version recorded nodes) ran nowhere it knows of: taken as stopped, as before
/// (empty evidence).
pub(super) fn gone_pod_stopped(o: &Observed, pod: &str) -> Result<String, String> {
    let Some(node) = o.member_nodes.get(pod) else {
        return Ok(String::new());
    };
    if let Some(e) = &o.nodes_error {
        return Err(format!("it ran on node {node}, which could not be read ({e}), so it may still run there"));
    }
    crate::nodes::stopped_evidence(node, o.nodes.get(node))
}

/// Pods (of `pods`) whose object is gone and whose stop rests only on their Node being Ready,
/// each as "pod (node)": a recovery counting them waits until the loss is older than the node
/// controller's window ([`crate::nodes::NODE_READY_TRUSTED_AFTER_SECS`]).
fn stopped_by_a_ready_node_only<'a>(o: &Observed, pods: impl Iterator<Item = &'a str>) -> Vec<String> {
    pods.filter(|pod| !o.pods.contains_key(*pod))
        .filter_map(|pod| {
            let node = o.member_nodes.get(pod)?;
            o.nodes.get(node).filter(|s| crate::nodes::only_ready_says_stopped(s)).map(|_| format!("{pod} ({node})"))
        })
        .collect()
}

/// How long the loss must have lasted before a recovery that counts `ready_only` acts, and
/// what the user is told about the extra wait.
fn recovery_after(d: &Desired, ready_only: &[String]) -> (i64, String) {
    if ready_only.is_empty() {
        return (d.recovery.after_secs, String::new());
    }
    (
        d.recovery.after_secs.max(crate::nodes::NODE_READY_TRUSTED_AFTER_SECS),
        format!(
            " (at least {}s: {} counted as stopped because their Node is Ready, which a Node stays for a while after it stopped answering)",
            crate::nodes::NODE_READY_TRUSTED_AFTER_SECS,
            ready_only.join(", ")
        ),
    )
}

/// Voters whose pod object is gone but that may still run on a node that is not Ready, each
/// with why: a quorum loss they make is not one to recover from.
pub fn may_still_run(o: &Observed, etcd: &EtcdState) -> Vec<String> {
    etcd.voters()
        .filter(|m| !o.pods.contains_key(&m.pod) && o.pvcs.get(&m.pod).is_none_or(|v| v.deleting))
        .filter_map(|m| gone_pod_stopped(o, &m.pod).err().map(|why| format!("{}: {why}", m.pod)))
        .collect()
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

/// Every voter that is not healthy is a bootstrap member whose pod is young, not being deleted
/// and has no problem: the members of a cluster that just formed, still starting (etcd answers
/// with a leader as soon as a quorum of them is up, before the others are).
fn still_forming(o: &Observed, etcd: &EtcdState) -> bool {
    etcd.voters().filter(|m| !super::membership::healthy(o, m)).all(|m| {
        o.pods.get(&m.pod).is_some_and(|p| {
            p.bootstrap && !p.deleting && p.problem.is_none() && p.age_secs < super::membership::BOOTSTRAP_RETRY_SECS
        })
    })
}

/// etcd answered but fewer than a quorum of voters are healthy.
pub(super) fn no_quorum(o: &Observed, d: &Desired, etcd: &EtcdState, healthy: usize) -> Step {
    let voters = etcd.voters().count();
    let quorum = EtcdState::quorum_of(voters);
    let lost = cannot_return(o, etcd);
    if lost.is_empty() && still_forming(o, etcd) {
        return wait(
            WaitReason::Bootstrapping,
            format!(
                "the new cluster is forming: {healthy} of {voters} members healthy so far, the others are starting"
            ),
        );
    }
    let uncertain = may_still_run(o, etcd);
    if voters - lost.len() >= quorum && !uncertain.is_empty() {
        return wait(
            WaitReason::NoQuorum,
            format!(
                "only {healthy} of {voters} voting members are healthy, a quorum needs {quorum}; members whose pod objects are gone may still run on nodes that are not Ready, where the other side of a partition may hold the quorum and serve clients: no recovery and no membership change while they may ({})",
                uncertain.join("; ")
            ),
        );
    }
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
    let lost_voters = etcd.voters().filter(|m| lost_why(o, m).is_some()).map(|m| m.pod.as_str());
    let (after, why_longer) = recovery_after(d, &stopped_by_a_ready_node_only(o, lost_voters));
    if waited < after {
        return wait(
            WaitReason::NoQuorum,
            format!(
                "{lost_text}; recovery {} starts in {}s unless members come back{why_longer}",
                policy_name(policy),
                after - waited
            ),
        );
    }
    let survivors = survivors::of(o, etcd);
    let step = match policy {
        QuorumLossPolicy::FromSurvivor => from_survivor(o, d, etcd, &survivors, lost, voters),
        QuorumLossPolicy::FromBackup { backup } => from_backup(o, d, backup, &survivors, lost, voters),
        QuorumLossPolicy::Wait => unreachable!("handled above"),
    };
    step.unwrap_or_else(|why| {
        wait(WaitReason::NoQuorum, format!("{lost_text}; recovery {} waits: {why}", policy_name(policy)))
    })
}

/// Nothing is left of a cluster that formed: no pod, no volume (but retired ones, named).
pub(super) fn all_lost(o: &Observed, d: &Desired) -> Step {
    let mut lost = "every member pod is gone and no volume holds this cluster's data".to_string();
    if let Some(evidence) = &o.formed_unrecorded {
        lost += &format!(" (the cluster formed although the operator never reached etcd to record its ID: {evidence})");
    }
    if !o.retired_pvcs.is_empty() {
        let names: Vec<&str> = o.retired_pvcs.values().map(|v| v.name.as_str()).collect();
        lost += &format!("; retired volumes (refused by their data check) are kept, not used: {}", names.join(", "));
    }
    lost += "; the operator does not start an empty cluster in its place";
    let lost = lost.as_str();
    // Every pod object is gone, but not necessarily every process: one force-deleted on a node
    // cut off from the API server may serve on there. No second cluster beside it.
    let uncertain: Vec<String> = o
        .member_nodes
        .keys()
        .filter_map(|pod| gone_pod_stopped(o, pod).err().map(|why| format!("{pod}: {why}")))
        .collect();
    if !uncertain.is_empty() {
        return wait(
            WaitReason::DataLost,
            format!(
                "{lost}; members may still run on nodes that are not Ready, so no cluster is started in their place ({})",
                uncertain.join("; ")
            ),
        );
    }
    let (after, why_longer) =
        recovery_after(d, &stopped_by_a_ready_node_only(o, o.member_nodes.keys().map(String::as_str)));
    match &d.recovery.quorum_loss {
        QuorumLossPolicy::FromBackup { backup } if o.quorum_lost_secs.unwrap_or(0) >= after => {
            from_backup(o, d, backup, &[], vec!["every member: pod and data gone".into()], 0).unwrap_or_else(|why| {
                wait(WaitReason::DataLost, format!("{lost}; recovery from a backup is not possible: {why}"))
            })
        }
        QuorumLossPolicy::FromBackup { .. } => wait(
            WaitReason::DataLost,
            format!("{lost}; recovery FromBackup starts in {}s{why_longer}", after - o.quorum_lost_secs.unwrap_or(0)),
        ),
        _ => wait(
            WaitReason::DataLost,
            format!(
                "{lost}. Set spec.recovery.quorumLoss: FromBackup with spec.recovery.backup naming an EtcdBackup to start from its newest backup, or restore one with an EtcdRestore"
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
        claim: None,
        acknowledged_index: 0,
        fenced: false,
    }
}

/// From the survivor seen with the most data over the looks, once it answers (its snapshot is
/// streamed from it).
fn from_survivor(
    o: &Observed,
    d: &Desired,
    etcd: &EtcdState,
    survivors: &[Survivor],
    lost: Vec<String>,
    voters: usize,
) -> Result<Step, String> {
    survivors::judged(o, survivors)?;
    let best = survivors::most_data(survivors).ok_or("no surviving member holds data")?;
    let (m, seen) = (best.member, best.best.unwrap_or_default());
    let looks = o.survivor_looks.looks;
    let (Some(s), Some(ip), true) = (&m.status, o.pods.get(&m.pod).and_then(|p| p.ip.as_ref()), best.answers) else {
        return Err(format!(
            "member {} was seen holding the most data (applied raft index {} over {looks} looks) but does not answer now; waiting for it",
            m.pod, seen.applied
        ));
    };
    let scheme = d.tls_stage.operator_scheme();
    let client_url = format!("{scheme}://{ip}:{}", naming::CLIENT_PORT);
    let version = Version::parse(&s.version).ok().or_else(|| running_version(o)).unwrap_or_else(|| d.version.clone());
    let seed = Seed::Member { pod: m.pod.clone(), client_url, cluster_id: etcd.cluster_id, member_id: m.id };
    let member = seed_member(o, d, version, seed);
    Ok(Step::Recover(Box::new(Recovery {
        member,
        from: format!(
            "surviving member {} (applied raft index {}, the most of {} surviving members over {looks} looks)",
            m.pod,
            s.raft_applied_index.max(seen.applied),
            survivors.len()
        ),
        revision: s.revision,
        lost,
        voters,
    })))
}

/// From the newest backup of the named EtcdBackup: one of this cluster, and only when no
/// survivor was seen holding a newer revision (its data would be thrown away).
fn from_backup(
    o: &Observed,
    d: &Desired,
    backup: &str,
    survivors: &[Survivor],
    lost: Vec<String>,
    voters: usize,
) -> Result<Step, String> {
    let b = match &o.recovery_backup {
        Some(Ok(b)) => b,
        Some(Err(e)) => return Err(format!("EtcdBackup {backup}: {e}")),
        None => return Err(format!("EtcdBackup {backup} was not read")),
    };
    of_this_cluster(o, backup, b)?;
    if !survivors.is_empty() {
        survivors::judged(o, survivors)?;
        let newer = survivors
            .iter()
            .filter_map(|s| Some((s.member.pod.as_str(), s.best?.revision)))
            .filter(|(_, r)| *r > b.revision)
            .max_by_key(|(_, r)| *r);
        if let Some((pod, revision)) = newer {
            return Err(format!(
                "surviving member {pod} was seen holding revision {revision}, newer than the backup's {}: starting from the backup would lose the writes in between. Set spec.recovery.quorumLoss: FromSurvivor to start from the member with the most data, or, to give its data up, delete its pod and its claim",
                b.revision
            ));
        }
    }
    let version = running_version(o).unwrap_or_else(|| d.version.clone());
    let member = seed_member(o, d, version, Seed::Backup(Box::new(b.restore.clone())));
    Ok(Step::Recover(Box::new(Recovery {
        member,
        from: format!("EtcdBackup {backup} ({})", b.restore.location.url()),
        revision: b.revision,
        lost,
        voters,
    })))
}

/// The EtcdBackup backs up this cluster: its `clusterName` is this one, or every one of its
/// `etcdEndpoints` is this cluster's client Service (`<name>-client[.<namespace>...]`) or a
/// member (`<member>.<name>.<namespace>...`). Anything else (another cluster, addresses) is
/// refused: restoring another cluster's data in place of this one's cannot be undone.
fn of_this_cluster(o: &Observed, backup: &str, b: &BackupPoint) -> Result<(), String> {
    let client = naming::client_service(&o.name);
    let ours = |url: &str| {
        let host = url.split_once("://").map_or(url, |(_, rest)| rest).split([':', '/']).next().unwrap_or("");
        match host.split('.').collect::<Vec<_>>().as_slice() {
            [service] => *service == client,
            [service, ns, ..] if *service == client => *ns == o.namespace,
            [_, cluster, ns, ..] => *cluster == o.name && *ns == o.namespace,
            _ => false,
        }
    };
    let (ok, what) = if !b.cluster_name.is_empty() {
        (b.cluster_name == o.name, format!("EtcdCluster {}", b.cluster_name))
    } else {
        (!b.endpoints.is_empty() && b.endpoints.iter().all(|e| ours(e)), format!("{:?}", b.endpoints))
    };
    if ok {
        return Ok(());
    }
    Err(format!(
        "EtcdBackup {backup} is not of this cluster: it backs up {what}; its spec.clusterName must be {} (or its etcdEndpoints this cluster's client Service {client} or its members)",
        o.name
    ))
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

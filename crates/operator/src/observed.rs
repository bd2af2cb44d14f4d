//! The plain snapshot the planner decides from: what Kubernetes and etcd said during one
//! reconcile. Built by `observe`, read by `planner` and `status`; nothing here does I/O.

use std::collections::BTreeMap;

use crate::validation::Desired;

/// Everything known about one EtcdCluster at one moment.
#[derive(Clone, Debug)]
pub struct Observed {
    pub name: String,
    pub namespace: String,
    /// The validated spec, or why it was refused.
    pub desired: Result<Desired, Vec<String>>,
    pub paused: bool,
    /// Both the peer (headless) and the client Service exist.
    pub services_ready: bool,
    /// Member pods of this cluster, by pod name.
    pub pods: BTreeMap<String, PodState>,
    /// This cluster's member PersistentVolumeClaims, by member name.
    pub pvcs: BTreeMap<String, PvcState>,
    /// What etcd said; `None` when no member answered.
    pub etcd: Option<EtcdState>,
    /// Why etcd could not be reached, when it could not.
    pub etcd_error: Option<String>,
    /// The cluster once formed and may hold data: an etcd cluster ID was recorded durably (the
    /// `cluster-id` annotation the operator writes on the EtcdCluster and its PVCs) or in status.
    /// A cluster that formed is never bootstrapped again.
    pub ever_bootstrapped: bool,
    /// `spec` was refused but an earlier valid spec is known (`desired` holds that one): the
    /// cluster keeps healing under it, and nothing the refused edit asked for is done.
    pub spec_refused: Option<Vec<String>>,
    /// Seconds since the planner first saw this cluster without a quorum (from the annotation
    /// the operator writes), `None` while it has one.
    pub quorum_lost_secs: Option<i64>,
    /// A quorum-loss recovery the operator recorded on the EtcdCluster and has not finished.
    pub recovery_record: Option<crate::planner::recovery::Record>,
    /// The last recovery that finished, as recorded on the EtcdCluster.
    pub last_recovery: Option<crate::planner::recovery::Record>,
    /// With `quorumLoss: FromBackup`: the newest backup of the named EtcdBackup, or why there
    /// is none to use.
    pub recovery_backup: Option<Result<BackupPoint, String>>,
    /// Version recorded in status (what the whole cluster ran last time it agreed).
    pub recorded_version: Option<String>,
    /// A fresh random suffix the planner may use to name a new member (keeps planning pure).
    pub new_member_suffix: String,
    /// The last NOSPACE recovery attempt (EtcdCluster annotation): the revision it compacted to
    /// and how many seconds ago.
    pub nospace_recovery: Option<(i64, i64)>,
    /// From the minor-since annotation: the minor every member runs and the raft index at which
    /// the cluster reached it by an upgrade (0: started there, or unknown).
    pub minor_since: Option<(String, u64)>,
    /// A backup or verify pod of this cluster that is running now (its name): no
    /// defragmentation meanwhile.
    pub backup_running: Option<String>,
    /// `spec.TLS.auto`: the operator's TLS Secrets and what members serve (`tls::auto`).
    pub certificates: Option<crate::tls::auto::Observation>,
}

impl Default for Observed {
    fn default() -> Self {
        Observed {
            name: String::new(),
            namespace: String::new(),
            desired: Err(vec!["not observed".into()]),
            paused: false,
            services_ready: false,
            pods: BTreeMap::new(),
            pvcs: BTreeMap::new(),
            etcd: None,
            etcd_error: None,
            ever_bootstrapped: false,
            spec_refused: None,
            quorum_lost_secs: None,
            recovery_record: None,
            last_recovery: None,
            recovery_backup: None,
            recorded_version: None,
            new_member_suffix: String::new(),
            backup_running: None,
            nospace_recovery: None,
            minor_since: None,
            certificates: None,
        }
    }
}

/// Kubernetes' view of one member pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodState {
    pub name: String,
    pub ip: Option<String>,
    /// Pod phase: Pending, Running, Succeeded, Failed, Unknown.
    pub phase: String,
    /// The Ready condition is True.
    pub ready: bool,
    /// deletionTimestamp is set.
    pub deleting: bool,
    /// Version from the `etcd.version` annotation.
    pub version: String,
    /// Seconds since the operator last changed `version` (from the version-changed-at
    /// annotation); `None` for pods it never upgraded.
    pub version_age_secs: Option<i64>,
    /// Image of the etcd container as specified.
    pub image: String,
    /// `Desired::pod_hash` of the spec the pod was made from (absent on older pods).
    pub spec_hash: Option<String>,
    /// Why the etcd container (or the init container) is not running, when Kubernetes says:
    /// e.g. `ImagePullBackOff`, `CrashLoopBackOff`, with its message.
    pub problem: Option<(String, String)>,
    /// Seconds since the pod was created.
    pub age_secs: i64,
    /// Created by the initial bootstrap (all members at once).
    pub bootstrap: bool,
    /// Data lives on a PVC (survives the pod).
    pub uses_pvc: bool,
    /// Carries the cluster-UID label the Services select on.
    pub labelled: bool,
    /// The serving label: `Some(true)` in the client Service, `Some(false)` drained, `None`
    /// made before the label existed.
    pub serving: Option<bool>,
    /// Seconds since the member was drained from the client Service.
    pub drained_secs: Option<i64>,
    /// The member's data check refused its volume (it does not hold this member's data): why.
    pub volume_refused: Option<String>,
    /// The member's data check found data on its volume that the pod's user cannot read or
    /// write (`member_volume::INACCESSIBLE_EXIT_CODE`): what.
    pub data_inaccessible: Option<String>,
    /// Member names in the pod's `--initial-cluster` (what etcd was told at its first start).
    pub initial_cluster: Vec<String>,
    /// Seconds since deletion was requested, while the pod is terminating.
    pub deleting_secs: Option<i64>,
    /// Seconds since the operator last defragmented this member (pod annotation).
    pub defragmented_secs: Option<i64>,
}

/// Kubernetes' view of one member's PersistentVolumeClaim.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PvcState {
    pub name: String,
    /// The member whose data it holds.
    pub member: String,
    /// The member's peer URL as written at creation (annotation), if recorded.
    pub peer_url: Option<String>,
    /// deletionTimestamp is set: its data is going away.
    pub deleting: bool,
    /// Created by the initial bootstrap.
    pub bootstrap: bool,
    /// The storage it requests (a Kubernetes quantity).
    pub storage: Option<String>,
    /// Marked as holding data only root can use (`naming::DATA_OWNER_ANNOTATION`): its member
    /// runs as root.
    pub root_data: bool,
}

/// A backup a recovery can start from.
#[derive(Clone, Debug, PartialEq)]
pub struct BackupPoint {
    pub restore: crate::validation::Restore,
    pub revision: i64,
}

/// `spec.recovery` as the planner reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recovery {
    pub quorum_loss: QuorumLossPolicy,
    /// How long a quorum must have been unrecoverable before acting.
    pub after_secs: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum QuorumLossPolicy {
    /// Report and wait for a person (the default).
    #[default]
    Wait,
    /// Start a new cluster from the surviving member with the most data.
    FromSurvivor,
    /// Start a new cluster from the newest verified backup of this EtcdBackup.
    FromBackup { backup: String },
}

impl PodState {
    /// The pod is gone for good as far as etcd is concerned (its process cannot come back).
    pub fn is_dead(&self) -> bool {
        self.phase == "Failed" || self.phase == "Succeeded"
    }
}

/// etcd's view of the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EtcdState {
    pub cluster_id: u64,
    /// Member ID of the leader, if a healthy member reported one.
    pub leader: Option<u64>,
    pub members: Vec<MemberState>,
    /// Pods whose etcd answered as a member of another cluster (after a quorum-loss recovery:
    /// the old cluster's pods). Certainly no member of this one.
    pub foreign: Vec<String>,
    /// Active alarms (etcd's alarm list), asked for when a member reports one.
    pub alarms: Vec<Alarm>,
}

/// One etcd member as the member list and its own status call describe it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberState {
    pub id: u64,
    /// etcd's member name; empty until the member has started once.
    pub name: String,
    /// The pod this member belongs to, derived from its peer URL.
    pub pod: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
    /// The member's own Status answer; `None` if it did not answer.
    pub status: Option<MemberStatus>,
}

/// What a member said about itself.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MemberStatus {
    pub version: String,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub raft_term: u64,
    /// The store revision the member has applied (from its answer's header).
    pub revision: i64,
    pub leader: u64,
    /// Size of the database file.
    pub db_size: i64,
    /// Bytes of the database file in use (the rest is free space a defragmentation returns).
    pub db_size_in_use: i64,
    /// Errors the member reports, alarms excluded (they are the cluster's, in
    /// [`EtcdState::alarms`]).
    pub errors: Vec<String>,
}

/// An active etcd alarm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alarm {
    pub member_id: u64,
    pub kind: AlarmKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum AlarmKind {
    /// A member's database reached the space quota: the cluster refuses writes (reads and
    /// deletes still work) until the alarm is disarmed.
    NoSpace,
    /// A member's data differs from the others' (corruption check): never fixed automatically.
    Corrupt,
}

impl AlarmKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmKind::NoSpace => "NOSPACE",
            AlarmKind::Corrupt => "CORRUPT",
        }
    }
}

impl MemberState {
    /// Answered its status call, sees a leader and reports no errors.
    pub fn is_healthy(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.leader != 0 && s.errors.is_empty())
    }

    pub fn started(&self) -> bool {
        !self.name.is_empty()
    }
}

impl EtcdState {
    pub fn has_alarm(&self, kind: AlarmKind) -> bool {
        self.alarms.iter().any(|a| a.kind == kind)
    }

    pub fn voters(&self) -> impl Iterator<Item = &MemberState> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    pub fn learners(&self) -> impl Iterator<Item = &MemberState> {
        self.members.iter().filter(|m| m.is_learner)
    }

    pub fn member_for_pod(&self, pod: &str) -> Option<&MemberState> {
        self.members.iter().find(|m| m.pod == pod)
    }

    pub fn leader_member(&self) -> Option<&MemberState> {
        self.leader.and_then(|id| self.members.iter().find(|m| m.id == id))
    }

    /// Votes needed for a decision with `voters` voting members.
    pub fn quorum_of(voters: usize) -> usize {
        voters / 2 + 1
    }
}

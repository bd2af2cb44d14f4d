//! The planner's vocabulary: the steps it can choose (`Step`), what each needs (`NewMember`,
//! `Seed`, `Recovery`, `SpaceRecovery`) and why it waits (`WaitReason`). Plain data, no rules:
//! the rules live in the planner's other modules.

use super::auth;
use crate::version::Version;

/// The one thing to do next.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Nothing to change now; the reason says what the cluster is waiting for.
    Wait(Wait),
    /// Create (or fix) the headless peer Service and the client Service.
    CreateServices,
    /// Start a brand-new cluster: every member at once with one static `--initial-cluster`.
    Bootstrap(Vec<NewMember>),
    /// Register a learner with etcd, then create its pod.
    AddLearner(NewMember),
    /// Create the pod of a member etcd already knows (a learner that never started, or a
    /// PVC-backed member restarting on its volume).
    CreatePod(NewMember),
    /// Disaster recovery the user opted into (`spec.recovery.quorumLoss`): start a new
    /// one-member cluster from the survivor's data or a backup; the rest re-joins as learners.
    Recover(Box<Recovery>),
    /// Make a caught-up learner a voting member.
    Promote { id: u64, pod: String },
    /// Remove a member from etcd, then delete its pod and volume.
    RemoveMember { id: u64, pod: String, why: String, cause: Removal },
    /// Change the etcd image of one member's pod in place (the data volume stays).
    UpgradeMember { pod: String, from: Version, to: Version },
    /// Hand raft leadership to another voter (before the leader is restarted, replaced or
    /// defragmented).
    MoveLeader { from_pod: String, to: u64, to_pod: String, purpose: Purpose },
    /// Take a member out of the client Service before it leaves (removal, or its pod deleted
    /// to restart it): clients stop being sent to it before it stops answering.
    Drain { pod: String },
    /// Defragment one member (the defragmentation policy): returns the space compaction left
    /// unused in its database file to the disk. The member is unavailable meanwhile.
    Defragment { pod: String, free_bytes: i64 },
    /// The NOSPACE alarm is raised: compact the history, defragment every member, and disarm
    /// once the space in use is below the quota again.
    RecoverSpace(SpaceRecovery),
    /// Delete a pod that belongs to no member (or whose member must restart on its PVC, in
    /// which case its volume is kept).
    DeletePod { pod: String, why: String, keep_volume: bool },
    /// Move a member's peer URL between http and https (etcd's member update; its volume's
    /// record first): the next member of a cluster turning peer TLS on or off. Its pod is made
    /// again right after, listening on the new scheme (`tls_transition`).
    UpdatePeerUrls { id: u64, pod: String, urls: Vec<String> },
    /// Rewrite the peer URL a member's volume records to the one the membership has: a record
    /// written ahead of a `member update` that never happened (it failed, the operator
    /// restarted, `spec.TLS` was set back). A member restarted while no member answers takes
    /// its listener's scheme from the record (`tls_transition::record_of_membership`).
    RecordPeerUrl { pod: String, url: String },
    /// The member's data check found data its non-root user cannot use (written as root on a
    /// volume type where the kubelet does not apply `fsGroup`): mark its volume as root's, then
    /// delete its pod (the volume kept) so that it restarts on it as root (`pod_security`).
    RestartAsRoot { pod: String, why: String },
    /// Turn etcd's authentication on or off, or change the root password (`spec.auth`).
    Auth(auth::AuthStep),
    /// A member's data check refused its volume: the claim is marked retired (the
    /// `naming::RETIRED_ANNOTATION`, with why) and kept. It is never used again nor deleted by
    /// the operator; its member is replaced (or counted lost) as one without a volume.
    RetireVolume { pod: String, claim: String, why: String },
}

impl Step {
    /// The step's kind, for logs, Events and counts.
    pub fn name(&self) -> &'static str {
        match self {
            Step::Wait(_) => "Wait",
            Step::CreateServices => "CreateServices",
            Step::Bootstrap(_) => "Bootstrap",
            Step::AddLearner(_) => "AddLearner",
            Step::CreatePod(_) => "CreatePod",
            Step::Recover(_) => "Recover",
            Step::Promote { .. } => "Promote",
            Step::RemoveMember { .. } => "RemoveMember",
            Step::DeletePod { .. } => "DeletePod",
            Step::UpgradeMember { .. } => "UpgradeMember",
            Step::MoveLeader { .. } => "MoveLeader",
            Step::Defragment { .. } => "Defragment",
            Step::Drain { .. } => "Drain",
            Step::RecoverSpace(_) => "RecoverSpace",
            Step::UpdatePeerUrls { .. } => "UpdatePeerUrls",
            Step::RecordPeerUrl { .. } => "RecordPeerUrl",
            Step::RestartAsRoot { .. } => "RestartAsRoot",
            Step::RetireVolume { .. } => "RetireVolume",
            Step::Auth(a) => a.name(),
        }
    }

    /// The member (pod) a step acts on, if it acts on one.
    pub fn member(&self) -> Option<&str> {
        match self {
            Step::AddLearner(m) | Step::CreatePod(m) => Some(&m.name),
            Step::Recover(r) => Some(&r.member.name),
            Step::Promote { pod, .. }
            | Step::RemoveMember { pod, .. }
            | Step::UpgradeMember { pod, .. }
            | Step::DeletePod { pod, .. }
            | Step::RestartAsRoot { pod, .. }
            | Step::RetireVolume { pod, .. }
            | Step::Defragment { pod, .. }
            | Step::Drain { pod }
            | Step::UpdatePeerUrls { pod, .. }
            | Step::RecordPeerUrl { pod, .. } => Some(pod),
            Step::MoveLeader { from_pod, .. } => Some(from_pod),
            Step::Wait(_) | Step::CreateServices | Step::Bootstrap(_) | Step::RecoverSpace(_) | Step::Auth(_) => None,
        }
    }
}

/// Why leadership moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Upgrade,
    /// A `spec.pod` change is rolled out and the leader's pod is next.
    Rollout,
    Defragment,
    /// A switchover asked for on the EtcdCluster (`switchover`).
    Switchover,
}

impl Purpose {
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Upgrade => "its upgrade",
            Purpose::Rollout => "its pod is replaced with the new spec",
            Purpose::Defragment => "its defragmentation",
            Purpose::Switchover => "the switchover asked for",
        }
    }
}

/// A NOSPACE recovery: what to compact and defragment, and when to disarm.
#[derive(Clone, Debug, PartialEq)]
pub struct SpaceRecovery {
    /// Members to defragment, by pod, followers first and the leader last.
    pub members: Vec<String>,
    /// Revisions of history kept by the compaction (revision-mode retention), else none.
    pub keep_revisions: Option<i64>,
    /// The NOSPACE alarms to disarm.
    pub alarms: Vec<crate::observed::Alarm>,
    /// Disarm only when every member uses less than this many bytes afterwards.
    pub disarm_below_bytes: i64,
}

/// A member to create.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMember {
    /// Member and pod name.
    pub name: String,
    /// `name=peerURL` pairs for `--initial-cluster`, this member included.
    pub initial_cluster: Vec<(String, String)>,
    /// `--initial-cluster-state existing` (joining) rather than `new` (bootstrap).
    pub existing: bool,
    pub version: Version,
    /// Keep data on a PersistentVolumeClaim.
    pub pvc: bool,
    /// Part of the initial bootstrap.
    pub bootstrap: bool,
    /// Restarting an existing member on its volume: the volume must prove it holds this
    /// member's data before etcd starts (else the member is replaced, never restarted empty).
    pub restart: bool,
    /// Start from this data instead of empty (disaster recovery).
    pub seed: Option<Seed>,
    /// Its volume holds data only root can use (the PVC's data-owner mark): the pod runs as
    /// root, as before the restricted default (`pod_security`). Set by [`plan`] from the PVC,
    /// and for a member restored from a backup volume marked as root's (`backup::volume_owner`):
    /// its own volume is then created marked.
    pub root_data: bool,
    /// The claim the member restarts on, as observed (set by [`plan`]): `<member>-data` for
    /// this operator's, `<member>` for the CoreOS operator's. `None`: a new member, whose claim
    /// (`naming::pvc_name`) is created with it.
    pub claim: Option<String>,
    /// A member restarting on its volume: the raft index the operator saw it acknowledge (the
    /// `member-progress` mark, set by [`plan`]); its data check refuses data that ends before
    /// it (a volume rolled back to an older snapshot). 0: none recorded.
    pub acknowledged_index: u64,
    /// Its pod starts out of the client Service: a member a person fenced whose pod is made
    /// again (`fencing::start_fenced`, set by `decide`), so that it never serves in between.
    pub fenced: bool,
}

impl NewMember {
    /// A member that joins a running cluster as a learner (or restarts as a known one).
    pub fn joining(name: String, initial_cluster: Vec<(String, String)>, version: Version, pvc: bool) -> Self {
        NewMember {
            name,
            initial_cluster,
            existing: true,
            version,
            pvc,
            bootstrap: false,
            restart: false,
            seed: None,
            root_data: false,
            claim: None,
            acknowledged_index: 0,
            fenced: false,
        }
    }
}

/// Why a member is removed. `why` says it to people; status reads this (a member replaced
/// because its data is lost is `Recovering`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Scaling down (a learner, a member that cannot run, or the member chosen first).
    ScaleDown,
    /// Scaling down a healthy voter that leaves gracefully: its pod is deleted first (etcd,
    /// stopped with SIGTERM, finishes the requests in flight and closes its client connections
    /// with an HTTP/2 GOAWAY, so clients move to another member without a failed request),
    /// then it is removed through the others. Planned only while the others hold a quorum
    /// without it, since it is a stopped voter until its removal.
    Leave,
    /// Replaced by a member made from the current spec (a rollout).
    Rollout,
    /// Its pod is gone or ended without a volume, and its data with it (a learner's too).
    PodGone,
    /// Its volume does not hold its data, or the user is deleting it.
    VolumeLost,
    /// Its emptyDir pod is being deleted, and its data with it.
    PodDeleting,
    /// A learner that lost its pod after it started.
    LearnerLost,
    /// It cannot run: crash-looping, made from an earlier spec, or a learner that cannot start.
    CannotRun,
    /// Out of reach on a node that has not been Ready for longer than `spec.recovery.nodeLoss`
    /// allows (its data, on that node, with it).
    NodeLost,
}

impl Removal {
    /// A replacement after its data was lost: what status reports as `Recovering`.
    pub fn replaces_a_loss(self) -> bool {
        matches!(self, Removal::PodGone | Removal::VolumeLost | Removal::NodeLost)
    }
}

/// Where a recovered cluster's first member takes its data from.
#[derive(Clone, Debug, PartialEq)]
pub enum Seed {
    /// A snapshot streamed from a surviving member of the old cluster; the seeding checks that
    /// the member answering at that URL is this member of this cluster.
    Member { pod: String, client_url: String, cluster_id: u64, member_id: u64 },
    /// A verified backup (boxed: the variants' sizes differ tenfold).
    Backup(Box<crate::validation::Restore>),
}

/// A quorum-loss recovery: what is started, from what, and what was lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Recovery {
    /// The new first member (seeded).
    pub member: NewMember,
    /// The survivor pod or the EtcdBackup the data comes from.
    pub from: String,
    /// The revision the cluster resumes at (the survivor's, or the backup's).
    pub revision: i64,
    /// Voters that could never come back, with why.
    pub lost: Vec<String>,
    /// Voters the cluster had.
    pub voters: usize,
}

/// Why nothing is done now.
#[derive(Clone, Debug, PartialEq)]
pub struct Wait {
    pub reason: WaitReason,
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitReason {
    /// Everything matches the spec.
    Stable,
    InvalidSpec,
    Paused,
    /// The bootstrap pods are starting.
    Bootstrapping,
    /// Fewer healthy voters than a quorum: nothing destructive is done.
    NoQuorum,
    /// No pod and no volume holds this cluster's data any more: re-creating it would serve an
    /// empty cluster in its place.
    DataLost,
    /// A quorum-loss recovery is starting its first member.
    Recovering,
    /// A member pod has been terminating for too long (e.g. on a node that stopped answering).
    PodStuckTerminating,
    /// A member is starting or restarting; the next change waits for it.
    MemberStarting,
    /// A member pod cannot run (image pull, crash loop, ...).
    MemberFailing,
    LearnerCatchingUp,
    PodTerminating,
    /// The change would leave fewer healthy voters than a quorum.
    WouldLoseQuorum,
    /// An upgraded member is restarting on its new version.
    MemberUpgrading,
    /// An upgraded member did not come back; the upgrade is stopped.
    UpgradeFailed,
    /// The version change is not allowed (downgrade, skipped minor); nothing changes.
    UpgradeRefused,
    /// The version change is allowed but must wait (3.6 → 3.7 for a raft snapshot).
    UpgradeDeferred,
    /// The NOSPACE alarm is raised and the space in use is still too close to the quota.
    NoSpace,
    /// A member raised the CORRUPT alarm: nothing is changed until a person looks.
    Corrupt,
    /// Maintenance (defragmentation) waits for something else to finish (a backup).
    MaintenanceDeferred,
    /// A member leaving was taken out of the client Service; the change waits for every
    /// node's proxy to follow.
    MemberDraining,
    /// etcd refuses the operator's login (or requires one the operator has no credentials
    /// for): it cannot see or change the cluster.
    AuthRefused,
    /// TLS material the cluster runs with is refused (expired, deleted, another issuer):
    /// what needs it waits (`planner::tls_material`).
    TlsMaterialRefused,
    /// The operator's calls get no answer from members whose pods are Ready (etcd's own health
    /// check passes): it cannot see the cluster, which most likely serves (`planner::unreachable`).
    MembersUnreachable,
    /// Member pods are stopping for a hibernation (`hibernation`).
    Hibernating,
    /// Hibernated: no member runs; the volumes and the membership are kept.
    Hibernated,
    /// A member is out of reach on a node that is not Ready: replaced after the grace of
    /// `spec.recovery.nodeLoss`, or (with a volume, by default) waited for (`planner::node_loss`).
    NodeNotReady,
}

impl WaitReason {
    /// CamelCase reason for conditions and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::Stable => "Stable",
            WaitReason::InvalidSpec => "InvalidSpec",
            WaitReason::Paused => "Paused",
            WaitReason::Bootstrapping => "Bootstrapping",
            WaitReason::NoQuorum => "NoQuorum",
            WaitReason::DataLost => "DataLost",
            WaitReason::Recovering => "Recovering",
            WaitReason::PodStuckTerminating => "PodStuckTerminating",
            WaitReason::MemberStarting => "MemberStarting",
            WaitReason::MemberFailing => "MemberFailing",
            WaitReason::LearnerCatchingUp => "LearnerCatchingUp",
            WaitReason::PodTerminating => "PodTerminating",
            WaitReason::WouldLoseQuorum => "WouldLoseQuorum",
            WaitReason::MemberUpgrading => "MemberUpgrading",
            WaitReason::UpgradeFailed => "UpgradeFailed",
            WaitReason::UpgradeRefused => "UpgradeRefused",
            WaitReason::UpgradeDeferred => "UpgradeDeferred",
            WaitReason::NoSpace => "NoSpace",
            WaitReason::Corrupt => "Corrupt",
            WaitReason::MaintenanceDeferred => "MaintenanceDeferred",
            WaitReason::MemberDraining => "MemberDraining",
            WaitReason::AuthRefused => "AuthRefused",
            WaitReason::TlsMaterialRefused => "TLSMaterialRefused",
            WaitReason::MembersUnreachable => "MembersUnreachable",
            WaitReason::Hibernating => "Hibernating",
            WaitReason::Hibernated => "Hibernated",
            WaitReason::NodeNotReady => "NodeNotReady",
        }
    }

    /// A state the user must act on (reported as a warning Event when it starts).
    pub fn needs_attention(self) -> bool {
        matches!(
            self,
            WaitReason::InvalidSpec
                | WaitReason::NoQuorum
                | WaitReason::DataLost
                | WaitReason::PodStuckTerminating
                | WaitReason::MemberFailing
                | WaitReason::WouldLoseQuorum
                | WaitReason::UpgradeFailed
                | WaitReason::UpgradeRefused
                | WaitReason::NoSpace
                | WaitReason::Corrupt
                | WaitReason::AuthRefused
                | WaitReason::TlsMaterialRefused
                | WaitReason::NodeNotReady
        )
    }
}

pub(crate) fn wait(reason: WaitReason, message: impl Into<String>) -> Step {
    Step::Wait(Wait { reason, message: message.into() })
}

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
    /// This cluster's member PersistentVolumeClaims, by member name (retired ones excepted).
    pub pvcs: BTreeMap<String, PvcState>,
    /// Claims the operator retired (their data check refused them), by member name: kept for a
    /// person to look at, never restarted on, never deleted by the operator.
    pub retired_pvcs: BTreeMap<String, PvcState>,
    /// What etcd said; `None` when no member answered.
    pub etcd: Option<EtcdState>,
    /// Why etcd could not be reached, when it could not.
    pub etcd_error: Option<String>,
    /// Member pods the operator's own call got no status from, for all it knows for a reason
    /// of its side (a timeout of its client, a login or TLS handshake that failed), with the
    /// error. A member whose host refused the connection (nothing listens on its client port:
    /// etcd is down) is not one.
    pub unreached: BTreeMap<String, String>,
    /// The cluster once formed and may hold data: an etcd cluster ID was recorded durably (the
    /// `cluster-id` annotation the operator writes on the EtcdCluster and its PVCs) or in status.
    /// A cluster that formed is never bootstrapped again.
    pub ever_bootstrapped: bool,
    /// The cluster formed but its ID was never recorded (the operator never reached etcd): the
    /// evidence, from the `formed` mark (a member pod was Ready, which takes a leader).
    pub formed_unrecorded: Option<String>,
    /// What the operator saw each member hold over several looks while the cluster had no
    /// quorum (the `survivor-looks` mark): a recovery chooses from these, not from one look.
    pub survivor_looks: Looks,
    /// Per member (pod): the raft index the operator saw it acknowledge (the `member-progress`
    /// mark). A member restarts on its volume only if its data reaches it.
    pub acknowledged: BTreeMap<String, u64>,
    /// `spec` was refused but an earlier valid spec is known (`desired` holds that one): the
    /// cluster keeps healing under it, and nothing the refused edit asked for is done.
    pub spec_refused: Option<Vec<String>>,
    /// `spec` was refused and no valid spec is on record (a formed cluster adopted from the
    /// CoreOS operator, or the mark lost): `desired` is that spec as earlier rules read it,
    /// without what today's rules refuse. The cluster heals under it; no running member is
    /// changed (no rollout, upgrade, TLS or authentication step) until a valid spec is given.
    pub no_valid_spec: bool,
    /// Seconds since the planner first saw this cluster without a quorum (from the annotation
    /// the operator writes), `None` while it has one.
    pub quorum_lost_secs: Option<i64>,
    /// A quorum-loss recovery the operator recorded on the EtcdCluster and has not finished.
    pub recovery_record: Option<RecoveryRecord>,
    /// The last recovery that finished, as recorded on the EtcdCluster.
    pub last_recovery: Option<RecoveryRecord>,
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
    /// From the minor-since annotation (`marks`): the minor every member ran when last seen
    /// together, and what the raft log may still hold from earlier minors.
    pub minor_since: Option<MinorSince>,
    /// A backup or verify pod of this cluster that is running now (its name): no
    /// defragmentation meanwhile.
    pub backup_running: Option<String>,
    /// `spec.TLS.auto`: the operator's TLS Secrets and what members serve (`tls::auto`).
    pub certificates: Option<crate::tls::auto::Observation>,
    /// `spec.auth`: the root Secret and the operator's record as read, and whether etcd refused
    /// the login (etcd's own state is in [`EtcdState::auth`]).
    pub auth: crate::auth::AuthObserved,
    /// What the checks of the TLS Secrets the cluster runs with found (`tls::material`): the
    /// problems, when each certificate expires (the operator's client identity is taken out).
    pub tls_material: crate::tls::material::Verdict,
    /// The cluster's NetworkPolicy (named after it) as the watch cache holds it.
    pub network_policy: Option<k8s_openapi::api::networking::v1::NetworkPolicy>,
    /// Where the operator's own pods run (the NetworkPolicy admits them); `None`: the operator
    /// is not a pod.
    pub operator_namespace: Option<String>,
    /// The switchover asked for (`naming::SWITCHOVER_ANNOTATION`): the member pod to lead, `""`
    /// for any caught-up voter; `None`: none asked for.
    pub switchover: Option<String>,
    /// The member pods asked to be fenced (`naming::FENCED_MEMBERS_ANNOTATION`), or why the
    /// annotation could not be read.
    pub fence_request: Result<Vec<String>, String>,
    /// The hibernation asked for (`naming::HIBERNATION_ANNOTATION`: `on` is `Ok(true)`), or
    /// why the value could not be read.
    pub hibernation_asked: Result<bool, String>,
    /// The operator began stopping the members for a hibernation (`naming::HIBERNATED_AT_ANNOTATION`).
    pub hibernation_started: bool,
    /// A one-shot defragmentation asked for (`naming::DEFRAGMENT_ANNOTATION`): `Some(None)` for
    /// every member, `Some(Some(pod))` for one.
    pub defrag_asked: Option<Option<String>>,
    /// Seconds since the operator first saw that request (`naming::DEFRAGMENT_ASKED_AT_ANNOTATION`).
    pub defrag_asked_secs: Option<i64>,
    /// The node each member pod was last seen on (`nodes`: the `member-nodes` mark), including
    /// pods whose object is gone.
    pub member_nodes: crate::nodes::MemberNodes,
    /// The Nodes read for this look, by name: those of member pods that are not Ready and of
    /// members whose pod object is gone (none read while every pod is Ready).
    pub nodes: BTreeMap<String, crate::nodes::NodeState>,
    /// Why Nodes could not be read (no permission, say): node loss is then never assumed.
    pub nodes_error: Option<String>,
    /// The client Service's endpoints as the EndpointSlice watch shows them; `None` when not
    /// known (the server serves no `discovery.k8s.io/v1`, or the watch has not listed every
    /// slice yet, or fails): a drain then lasts `planner::DRAIN_SECS`.
    pub client_endpoints: Option<ClientEndpoints>,
}

/// What the client Service routes to: the member pods its EndpointSlices list (ready or not:
/// a listed pod may get traffic), and for pods no longer listed, how long ago the operator's
/// watch saw them go (ms); a pod in neither was not listed since the watch's last full list,
/// `watch_ms` ago.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientEndpoints {
    pub listed: std::collections::BTreeSet<String>,
    pub unlisted_ms: BTreeMap<String, u64>,
    pub watch_ms: u64,
}

impl ClientEndpoints {
    /// How long `pod` has not been listed (ms); `None` while it is.
    pub fn unlisted_for(&self, pod: &str) -> Option<u64> {
        (!self.listed.contains(pod)).then(|| self.unlisted_ms.get(pod).copied().unwrap_or(self.watch_ms))
    }
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
            retired_pvcs: BTreeMap::new(),
            etcd: None,
            etcd_error: None,
            unreached: BTreeMap::new(),
            ever_bootstrapped: false,
            formed_unrecorded: None,
            survivor_looks: Default::default(),
            acknowledged: BTreeMap::new(),
            spec_refused: None,
            no_valid_spec: false,
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
            auth: Default::default(),
            tls_material: Default::default(),
            network_policy: None,
            operator_namespace: None,
            switchover: None,
            fence_request: Ok(Vec::new()),
            hibernation_asked: Ok(false),
            hibernation_started: false,
            defrag_asked: None,
            defrag_asked_secs: None,
            member_nodes: Default::default(),
            nodes: BTreeMap::new(),
            nodes_error: None,
            client_endpoints: None,
        }
    }
}

/// The minor-since mark: the minor (`3.5`; `3.5+v2` while a member serves etcd's v2 API) every
/// member ran when last seen together, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MinorSince {
    pub minor: String,
    pub since: Since,
}

/// What the raft log may hold from before the recorded minor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    /// Nothing: the log began at this minor (this operator's bootstrap, restore or recovery).
    LogStart,
    /// Entries up to this raft index may have been written by members of an earlier minor.
    Index(u64),
    /// Not known (the `0` an earlier operator version wrote both for "started here" and for
    /// "first seen here"): as if up to now.
    Unknown,
}

/// Kubernetes' view of one member pod.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodState {
    pub name: String,
    pub ip: Option<String>,
    /// The node it was scheduled to (`spec.nodeName`), once scheduled.
    pub node: Option<String>,
    /// Pod phase: Pending, Running, Succeeded, Failed, Unknown.
    pub phase: String,
    /// The Ready condition is True.
    pub ready: bool,
    /// deletionTimestamp is set.
    pub deleting: bool,
    /// Version from the `etcd.version` annotation.
    pub version: String,
    /// Seconds since the operator last changed `version` (from the version-changed-at
    /// annotation); `None` for pods it never upgraded, or whose member has been back at that
    /// version since (`marks::upgrades_confirmed` removes the annotation).
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
    /// Container restarts: the highest `restartCount` of its containers, init containers
    /// included.
    pub restarts: i32,
    /// Seconds since the pod stopped being Ready (since it was created, if it never was);
    /// `None` while it is Ready.
    pub unready_secs: Option<i64>,
    /// Seconds since the etcd container that runs now started, once Kubernetes reports it
    /// ready; `None` while none is (not running, or not ready yet).
    pub etcd_ready_run_secs: Option<i64>,
    /// The image the kubelet reports for the etcd container while it is ready.
    pub etcd_ready_image: Option<String>,
    /// Created by the initial bootstrap (all members at once).
    pub bootstrap: bool,
    /// Data lives on a PVC (survives the pod).
    pub uses_pvc: bool,
    /// Carries the cluster-UID label the Services select on.
    pub labelled: bool,
    /// The serving label: `Some(true)` in the client Service, `Some(false)` drained, `None`
    /// made before the label existed.
    pub serving: Option<bool>,
    /// Milliseconds since the member was drained from the client Service (the mark is written
    /// to the millisecond or finer); [`PodState::drained_secs`] in whole seconds.
    pub drained_ms: Option<i64>,
    /// The operator fenced the member (`naming::FENCED_AT_ANNOTATION`): out of the client
    /// Service on a person's request, not for a change of its own.
    pub fenced: bool,
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
    /// Seconds since a defragmentation of this member was started that was not seen to end
    /// (its start recorded on the pod after its end, or with no end): it may still run in etcd.
    pub defrag_unfinished_secs: Option<i64>,
    /// How it speaks TLS, as its command line and volumes say (`tls::transition`).
    pub tls: crate::tls::transition::PodTls,
    /// etcd's settings in the pod spec, by flag name (`snapshot-count`): its command-line flags,
    /// then its `ETCD_*` variables; the value is `None` when it cannot be read from the spec (a
    /// reference, or a flag whose value is the next argument).
    pub etcd_flags: Vec<(String, Option<String>)>,
    /// Its readiness probe reads a key through etcdctl (`pod_spec::member`): authentication
    /// would make it fail.
    pub readiness_reads_key: bool,
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
    /// Retired by the operator (`naming::RETIRED_ANNOTATION`): why. Kept, never used again.
    pub retired: Option<String>,
}

/// A backup a recovery can start from.
#[derive(Clone, Debug, PartialEq)]
pub struct BackupPoint {
    pub restore: crate::validation::Restore,
    pub revision: i64,
    /// What the EtcdBackup backs up: its `spec.clusterName` (additive)...
    pub cluster_name: String,
    /// ... or its `spec.etcdEndpoints` (CoreOS).
    pub endpoints: Vec<String>,
}

impl PodState {
    /// Whole seconds since the member was drained from the client Service.
    pub fn drained_secs(&self) -> Option<i64> {
        self.drained_ms.map(|ms| ms / 1000)
    }

    /// The pod is gone for good as far as etcd is concerned (its process cannot come back).
    pub fn is_dead(&self) -> bool {
        self.phase == "Failed" || self.phase == "Succeeded"
    }

    /// The value of etcd setting `flag` in the pod spec: `None` when not set, `Some(None)` when
    /// set but unreadable there.
    pub fn etcd_flag(&self, flag: &str) -> Option<Option<&str>> {
        self.etcd_flags.iter().find(|(f, _)| f == flag).map(|(_, v)| v.as_deref())
    }

    /// Its experimental etcd settings (etcd 3.7 has none), by flag name.
    pub fn experimental_flags(&self) -> Vec<&str> {
        self.etcd_flags.iter().map(|(f, _)| f.as_str()).filter(|f| crate::etcd_flags::is_experimental(f)).collect()
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
    /// etcd's authentication, as the operator's logins found it (`spec.auth`).
    pub auth: crate::auth::EtcdAuth,
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

/// A recovery under way, as the operator recorded it on the EtcdCluster before acting.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryRecord {
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

/// What the operator saw each member hold while the cluster had no quorum.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Looks {
    /// Looks taken: observations at least `planner::survivors::LOOK_SECS` apart in which a member answered.
    pub looks: u32,
    /// Unix seconds of the last look.
    pub at: i64,
    /// The most each member (by pod) was seen holding, over the looks.
    pub members: BTreeMap<String, Seen>,
}

/// The most one member was seen holding.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// etcd's member ID: a record of another member of the same name does not count.
    pub id: u64,
    /// Highest applied raft index reported.
    pub applied: u64,
    /// Highest store revision reported.
    pub revision: i64,
}

//! `EtcdCluster`: the declared state of one etcd cluster.
//!
//! Every field's doc comment is its `description` in the CRD schema, which `kubectl explain`
//! prints: say the unit, the default, the range, and the CoreOS field it mirrors (or
//! "additive" for fields CoreOS did not have). `tests::every_property_is_described` guards it.

use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;

mod pod;
mod tls;

pub use pod::PodPolicy;
pub use tls::{AutoTls, CertManagerTls, IssuerRef, MemberSecret, StaticTls, TlsPolicy};

/// Image repository used when `spec.repository` is empty (as in CoreOS).
pub const DEFAULT_REPOSITORY: &str = "quay.io/coreos/etcd";
/// etcd version used when `spec.version` is empty for a new cluster (a running cluster with an
/// empty version keeps the version it runs: a new default never upgrades it). CoreOS defaulted to
/// 3.2.13, which this operator refuses (below 3.4); a current 3.6 patch past the 3.6 → 3.7
/// stepping stone. `spec.version`'s description names it too (a test keeps them equal).
pub const DEFAULT_VERSION: &str = "3.6.15";

/// Desired state of an etcd cluster. The fields of CoreOS' `ClusterSpec` keep their names and
/// meaning; `restore`, `recovery` and `maintenance` are additive.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcd",
    namespaced,
    doc = "An etcd cluster run by the etcd operator: member pods, a peer and a client Service, optional volumes. API-compatible with the CoreOS etcd-operator's EtcdCluster (etcd.database.coreos.com/v1beta2).",
    status = "EtcdClusterStatus",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size","description":"Desired number of members"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyMembers","description":"Members that are healthy voters"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.currentVersion","description":"Version every member runs"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Number of etcd members, 1 to 7 (any other value is refused with SpecValid=False). Odd sizes
    /// tolerate the most failures per member: 3 members survive the loss of 1, 5 of 2. A change
    /// resizes the running cluster one member at a time; new members join as learners and are
    /// promoted once caught up. Mirrors CoreOS `spec.size`.
    #[serde(default)]
    pub size: i32,
    /// Image repository of etcd; a member runs the image `<repository>:v<version>`, so the
    /// repository must carry etcd's release tags. Default `quay.io/coreos/etcd`. A change is
    /// rolled out to running members one at a time. Mirrors CoreOS `spec.repository`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repository: String,
    /// etcd version, `MAJOR.MINOR.PATCH` with or without a leading `v` (e.g. `3.5.1`),
    /// from 3.4.0 to 3.7.x. Default for a new cluster: 3.6.15; a running cluster left empty
    /// keeps the version it runs. A change is a rolling upgrade, one member at a time, the
    /// leader last; one minor version at a time, from the upstream stepping stones only (3.5 →
    /// 3.6 from 3.5.32, 3.6 → 3.7 from 3.6.11). Mirrors CoreOS `spec.version` (whose default
    /// 3.2.13 is refused).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// When true the operator changes nothing in this cluster (no healing, resizing or
    /// upgrade); status still updates and `status.controlPaused` says so. Default false.
    /// Mirrors CoreOS `spec.paused`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// How member pods are built: labels, scheduling, resources, etcd environment, volumes. A
    /// change is rolled out to running members one at a time while every voter is healthy
    /// (a member on a PVC restarts on it, an emptyDir member is replaced through a learner).
    /// Mirrors CoreOS `spec.pod` (CoreOS applied changes to new members only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodPolicy>,
    /// TLS for peer and client traffic, in the CoreOS shape: `static` (certificates you keep in
    /// Secrets, as CoreOS) or the additive `auto` (the operator makes and renews them). Peer
    /// and client sides are independent. A running cluster may turn a side on or off: members
    /// move one at a time without losing data (TLSTransition condition); a side that stays on
    /// keeps its Secret. Material that cannot work (a missing Secret or key, an uncovered DNS
    /// name, an expired certificate) is refused (SpecValid=False) before any pod uses it.
    /// Mirrors CoreOS `spec.TLS`.
    #[serde(default, rename = "TLS", skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsPolicy>,
    /// Additive: start every member of this new cluster from one verified backup (an
    /// EtcdRestore sets it). Read only when the cluster is first created; members added later
    /// join from the running cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<crate::backup::RestoreFrom>,
    /// Additive: what the operator does when a quorum of voting members is lost for good
    /// (fewer than a quorum can ever come back). Default: wait for a person (`Wait`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryPolicy>,
    /// Additive: keeping the database small: space quota, history compaction and
    /// defragmentation (etcd's "maintenance" guide). Unset fields take etcd's or the
    /// operator's defaults, named on each field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenancePolicy>,
    /// Additive: the cluster's NetworkPolicy (on by default): peers only from members, the
    /// client port from the members, the operator, this cluster's backup pods and `clients`.
    /// `{enabled: false}` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkAccessPolicy>,
    /// Additive: etcd's own authentication (users, roles, `auth enable`). With `enabled: true`
    /// the operator creates etcd's `root` user with the password of `rootSecret`, grants it
    /// the `root` role and turns authentication on; it then authenticates as root for its own
    /// calls and for backups of this cluster. Absent: the operator leaves authentication as it
    /// is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthPolicy>,
}

/// etcd authentication (additive). Turned on only while every voting member is healthy, one
/// step per reconcile (root user, root role, `auth enable`); the state is etcd's own, so
/// members added later need nothing. A cluster restored from a backup keeps the users, the
/// root password and the authentication state of its snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthPolicy {
    /// `true`: authentication on, clients must log in (an unauthenticated request is refused
    /// with `user name is empty`). `false` after `true`: the operator turns it off again (as
    /// root; the root user is kept). Default false. Not on etcd 3.5.0 and 3.5.1 (their
    /// readiness probe reads a key). Additive.
    #[serde(default)]
    pub enabled: bool,
    /// Name of a Secret in this namespace holding the root user's password under key
    /// `password` (at most 72 bytes, no line breaks or other control characters) and
    /// optionally `username`, which must then be `root`. If the Secret does not exist the
    /// operator creates it with a random password, owned by this EtcdCluster. Changing
    /// `password` changes the root password in etcd (`user change-password`). Default
    /// `<name>-etcd-root`. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub root_secret: String,
}

/// Who may reach the members (additive). The operator keeps one NetworkPolicy per cluster,
/// named like the cluster: the peer port (2380) admits only the cluster's members; the client
/// port (2379) admits the members, the operator's pods, the backup pods of EtcdBackups that
/// name this cluster (`clusterName`), and `clients`. Enforcement needs a network plugin that
/// enforces NetworkPolicies; elsewhere the object exists and changes nothing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkAccessPolicy {
    /// `false`: no NetworkPolicy (an existing one is deleted). Default `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Who else may reach the client port, as NetworkPolicy `from` entries (each a
    /// `podSelector`, a `namespaceSelector`, both, or an `ipBlock`; at most 32). Unset: every
    /// pod of the cluster's namespace (`[{podSelector: {}}]`). `[]`: nobody else. List a
    /// Prometheus that scrapes the members' `/metrics` here, and the host of an operator that
    /// runs outside the Kubernetes cluster (`ipBlock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clients: Option<Vec<NetworkPolicyPeer>>,
}

/// Space quota, compaction and defragmentation (additive). Settings that etcd reads at start
/// (`quotaBackendBytes`, `autoCompaction*`) reach existing members by a rolling restart, one
/// member at a time; an `etcdEnv` entry for the same etcd setting (e.g.
/// `ETCD_QUOTA_BACKEND_BYTES`, as CoreOS users configured it) is refused together with the field
/// here and otherwise keeps working as before.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MaintenancePolicy {
    /// etcd's `--quota-backend-bytes`: the database size at which etcd raises the NOSPACE alarm
    /// and refuses writes, in bytes, 16777216 (16 MiB) to 68719476736 (64 GiB); default
    /// 2147483648 (2 GiB, etcd's own default; etcd advises at most 8 GiB). Additive (CoreOS
    /// users set `ETCD_QUOTA_BACKEND_BYTES` in `pod.etcdEnv`, which still works; not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16777216, max = 68719476736_i64))]
    pub quota_backend_bytes: Option<i64>,
    /// etcd's `--auto-compaction-mode`: `periodic` (keep a time window of history; the
    /// default) or `revision` (keep a number of revisions). Additive (CoreOS: `etcdEnv`
    /// `ETCD_AUTO_COMPACTION_MODE`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "periodic", "revision"]))]
    pub auto_compaction_mode: String,
    /// etcd's `--auto-compaction-retention`: a duration such as `1h` or `30m` for `periodic`
    /// (default `1h`), a number of revisions such as `10000` for `revision` (default `10000`).
    /// `0` turns automatic compaction off. At most 32 characters. Additive (CoreOS: `etcdEnv`
    /// `ETCD_AUTO_COMPACTION_RETENTION`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub auto_compaction_retention: String,
    /// When the operator defragments members (returns the space compaction left unused to the
    /// file system). Default: `Auto` with the thresholds below. Additive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defragmentation: Option<DefragmentationPolicy>,
}

/// Defragmentation policy (additive): a member is defragmented when at least `minFreePercent`
/// of its database file and at least `minFreeBytes` are unused, one member at a time, followers
/// first and the leader last (after handing leadership away), only while every member is
/// healthy and nothing else (membership change, upgrade, rollout, backup) runs, and at most once
/// per member every 10 minutes. A NOSPACE alarm defragments every member regardless.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefragmentationPolicy {
    /// `Auto` (the default: defragment a member when both thresholds are met) or `Off` (only a
    /// NOSPACE recovery defragments). Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "Auto", "Off"]))]
    pub mode: String,
    /// Share of a member's database file that must be unused before it is defragmented, in
    /// percent, 1 to 99; default 50. Additive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 99))]
    pub min_free_percent: Option<i32>,
    /// Unused bytes a member's database file must have at least before it is defragmented,
    /// 0 to 68719476736 (64 GiB); default 67108864 (64 MiB). Additive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 68719476736_i64))]
    pub min_free_bytes: Option<i64>,
}

/// Quorum-loss recovery policy (additive).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryPolicy {
    /// `Wait` (the default): report the loss in the `Degraded` condition and change nothing.
    /// `FromSurvivor`: start a new cluster from a snapshot of the surviving member with the
    /// highest raft index (writes acknowledged after its revision are lost), then add the other
    /// members back as learners. `FromBackup`: the same from the newest backup of the
    /// EtcdBackup named in `backup` (also when every member is gone). Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "Wait", "FromSurvivor", "FromBackup"]))]
    pub quorum_loss: String,
    /// How long the loss must have lasted before `FromSurvivor` or `FromBackup` acts, in
    /// seconds, 0 to 86400 (a day); default 60. Additive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub after_seconds: Option<i64>,
    /// Name of an EtcdBackup in this namespace whose newest successful backup `FromBackup`
    /// restores (checked against its sha256). Required with `FromBackup`. Additive.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup: String,
    /// What happens to a member whose node stopped answering (its Node is not Ready):
    /// replaced on a live node after a grace period, or, with a volume, waited for. Additive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_loss: Option<NodeLossPolicy>,
}

/// `spec.recovery.nodeLoss`. A member counts as lost with its node only while etcd's health
/// check through the operator fails, its pod is not Ready and its Node is not Ready; a
/// replacement is a membership change like any other (a learner first, one at a time, only with
/// a quorum of healthy voters left). Additive.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeLossPolicy {
    /// How long the node of a member without a volume (emptyDir) must have been not Ready
    /// before the member is removed and a new one joins on a live node, in seconds, 0 to 86400;
    /// default 60 (Kubernetes marks a node not Ready about 40-50 s after it stops answering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub after_seconds: Option<i64>,
    /// Members with a volume: `Wait` (the default) waits for the node to come back, since the
    /// volume cannot move with the member; `Replace` replaces the member like one without a
    /// volume after `volumeAfterSeconds`, its claim kept (annotated retired, named in the
    /// `VolumesRetired` condition) for a person to delete.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "Wait", "Replace"]))]
    pub volume_members: String,
    /// With `volumeMembers: Replace`: how long the node must have been not Ready, in seconds,
    /// 0 to 604800 (a week); default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 604800))]
    pub volume_after_seconds: Option<i64>,
}

/// Observed state, in the CoreOS shape plus additive fields. Every field is always serialized:
/// the status is written with a merge patch, where a missing key would keep a stale value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// `Creating` (members starting), `Running` (it formed and served) or `Failed` (its data
    /// is lost, or its spec is refused before it ever formed). Mirrors CoreOS `status.phase`.
    #[serde(default)]
    pub phase: String,
    /// Why the phase is what it is, when that is not obvious. Mirrors CoreOS `status.reason`.
    #[serde(default)]
    pub reason: String,
    /// True while `spec.paused` is honoured. Mirrors CoreOS `status.controlPaused`.
    #[serde(default)]
    pub control_paused: bool,
    /// `Available`, `SpecValid`, `Scaling`, `Upgrading`, `Recovering`, `Degraded`,
    /// `RecoveredFromQuorumLoss`, `NoSpace`, `Corrupt`: each with a reason and a message;
    /// every change is also an Event. Mirrors CoreOS `status.conditions` (same shape, more
    /// types).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Current number of etcd members, voters and learners. Mirrors CoreOS `status.size`.
    #[serde(default)]
    pub size: i32,
    /// Name of the client Service, `<name>-client`: the address clients use. Mirrors CoreOS
    /// `status.serviceName`.
    #[serde(default)]
    pub service_name: String,
    /// Port of the client Service and of every member, 2379. Mirrors CoreOS
    /// `status.clientPort`.
    #[serde(default)]
    pub client_port: i32,
    /// Members by state, named by their pods. Mirrors CoreOS `status.members` (plus
    /// `learners`).
    #[serde(default)]
    pub members: MembersStatus,
    /// etcd version every member reports; kept at the last common version while they differ.
    /// Mirrors CoreOS `status.currentVersion`.
    #[serde(default)]
    pub current_version: String,
    /// Version being rolled out; empty when every member runs `spec.version`. Mirrors CoreOS
    /// `status.targetVersion`.
    #[serde(default)]
    pub target_version: String,
    /// Additive: number of healthy voting members (the `Ready` column).
    #[serde(default)]
    pub ready_members: i32,
    /// Additive: the member (pod name) that leads; empty without a leader.
    #[serde(default)]
    pub leader: String,
    /// Additive: etcd's cluster ID in hex, once the cluster formed (also kept in the
    /// `etcd.database.coreos.com/cluster-id` annotation).
    #[serde(default)]
    pub cluster_id: String,
    /// Additive: the `metadata.generation` this status was computed for.
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

/// Member names by state. Names are the member pod names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembersStatus {
    /// Voting members that are healthy (answer with a leader, no errors). Mirrors CoreOS
    /// `status.members.ready`.
    #[serde(default)]
    pub ready: Vec<String>,
    /// Voting members that are not healthy, or pods not (yet) members while etcd does not
    /// answer. Mirrors CoreOS `status.members.unready`.
    #[serde(default)]
    pub unready: Vec<String>,
    /// Additive: members that are learners (catching up, not yet voting).
    #[serde(default)]
    pub learners: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_manifest_parses_verbatim() {
        let yaml = r#"
apiVersion: "etcd.database.coreos.com/v1beta2"
kind: "EtcdCluster"
metadata:
  name: "example-etcd-cluster"
spec:
  size: 3
  version: "3.5.1"
"#;
        let c: EtcdCluster = serde_yaml::from_str(yaml).unwrap();
        assert_eq!(c.spec.size, 3);
        assert_eq!(c.spec.version, "3.5.1");
        assert!(c.status.is_none());
    }

    #[test]
    fn coreos_pod_policy_fields_keep_their_names() {
        let yaml = r#"
size: 3
TLS:
  static:
    member: {peerSecret: p, serverSecret: s}
    operatorSecret: o
pod:
  busyboxImage: busybox:1.28.0-glibc
  ClusterDomain: cluster.local
  DNSTimeoutInSecond: 60
  antiAffinity: true
  etcdEnv: [{name: ETCD_QUOTA_BACKEND_BYTES, value: "4294967296"}]
  persistentVolumeClaimSpec:
    accessModes: [ReadWriteOnce]
    resources: {requests: {storage: 1Gi}}
"#;
        let spec: EtcdClusterSpec = serde_yaml::from_str(yaml).unwrap();
        let pod = spec.pod.clone().unwrap();
        assert_eq!(pod.cluster_domain, "cluster.local");
        assert_eq!(pod.dns_timeout_in_second, 60);
        assert!(pod.anti_affinity);
        assert_eq!(spec.tls.as_ref().unwrap().r#static.as_ref().unwrap().operator_secret, "o");
        // Round trip keeps the CoreOS spelling.
        let back = serde_json::to_value(&spec).unwrap();
        assert!(back["pod"].get("ClusterDomain").is_some());
        assert!(back["pod"].get("DNSTimeoutInSecond").is_some());
        assert!(back.get("TLS").is_some());
    }

    #[test]
    fn auto_tls_is_additive_and_an_empty_block_survives() {
        let spec: EtcdClusterSpec = serde_yaml::from_str("size: 3\nTLS: {auto: {}}").unwrap();
        assert_eq!(spec.tls.as_ref().unwrap().auto, Some(AutoTls::default()));
        assert!(spec.tls.as_ref().unwrap().r#static.is_none());
        let back = serde_json::to_value(&spec).unwrap();
        assert_eq!(back["TLS"], serde_json::json!({"auto": {}}), "auto: {{}} means the defaults, kept as written");
        let spec: EtcdClusterSpec =
            serde_yaml::from_str("size: 3\nTLS: {auto: {validity: 10m, renewBefore: 8m, caValidity: 1h}}").unwrap();
        assert_eq!(spec.tls.unwrap().auto.unwrap().renew_before, "8m");
    }

    #[test]
    fn network_policy_is_optional_and_keeps_an_empty_client_list() {
        let spec: EtcdClusterSpec = serde_yaml::from_str("size: 3").unwrap();
        assert!(spec.network_policy.is_none(), "absent: the operator's default applies");
        assert!(serde_json::to_value(&spec).unwrap().get("networkPolicy").is_none());
        let yaml = r#"
size: 3
networkPolicy:
  enabled: true
  clients:
  - podSelector: {matchLabels: {app: api}}
  - namespaceSelector: {matchLabels: {team: a}}
    podSelector: {}
  - ipBlock: {cidr: 10.0.0.0/8}
"#;
        let spec: EtcdClusterSpec = serde_yaml::from_str(yaml).unwrap();
        let np = spec.network_policy.clone().unwrap();
        assert_eq!(np.enabled, Some(true));
        assert_eq!(np.clients.as_ref().unwrap().len(), 3);
        // `clients: []` (nobody else) must survive a round trip as an empty list, not vanish.
        let none: EtcdClusterSpec = serde_yaml::from_str("size: 1\nnetworkPolicy: {clients: []}").unwrap();
        let back = serde_json::to_value(&none).unwrap();
        assert_eq!(back["networkPolicy"]["clients"], serde_json::json!([]));
    }
}

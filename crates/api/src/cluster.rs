//! `EtcdCluster`: the declared state of one etcd cluster.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, PodSecurityContext, ResourceRequirements, Toleration,
};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::Condition;

/// Image repository used when `spec.repository` is empty (as in CoreOS).
pub const DEFAULT_REPOSITORY: &str = "quay.io/coreos/etcd";
/// etcd version used when `spec.version` is empty for a new cluster (a running cluster with an
/// empty version keeps the version it runs: a new default never upgrades it). CoreOS defaulted to
/// 3.2.13, which this operator refuses (below 3.4); a current 3.6 patch past the 3.6 → 3.7
/// stepping stone.
pub const DEFAULT_VERSION: &str = "3.6.15";

/// Desired state of an etcd cluster.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdCluster",
    plural = "etcdclusters",
    shortname = "etcd",
    namespaced,
    doc = "An etcd cluster managed by the operator (CoreOS-compatible).",
    status = "EtcdClusterStatus",
    printcolumn = r#"{"name":"Size","type":"integer","jsonPath":".spec.size","description":"Desired number of members"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyMembers","description":"Members that are healthy voters"}"#,
    printcolumn = r#"{"name":"Version","type":"string","jsonPath":".status.currentVersion","description":"Version every member runs"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Number of members (1 to 7; odd sizes tolerate the most failures per member).
    #[serde(default)]
    pub size: i32,
    /// Image repository with the same tags as etcd's releases; default `quay.io/coreos/etcd`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repository: String,
    /// etcd version, semver with or without a leading `v`; default [`DEFAULT_VERSION`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// When true the operator makes no change to this cluster (status still updates).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// How member pods are made. Changes apply to members created afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodPolicy>,
    /// TLS for peers and clients (accepted; see the README for what is wired).
    #[serde(default, rename = "TLS", skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsPolicy>,
    /// Additive: start every member of this new cluster from one verified backup (an
    /// EtcdRestore sets it). Read only when the cluster is first created; members added later
    /// join from the running cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<crate::backup::RestoreFrom>,
    /// Additive: what the operator does when a quorum of voting members is lost for good
    /// (fewer than a quorum can ever come back). Default: wait for a person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryPolicy>,
    /// Additive: keeping the database small: space quota, history compaction and
    /// defragmentation (etcd's "maintenance" guide). Unset fields take the defaults below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance: Option<MaintenancePolicy>,
    /// Additive: the cluster's NetworkPolicy (on by default): peers only from members, the
    /// client port from the members, the operator, this cluster's backup pods and `clients`.
    /// `{enabled: false}` removes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkAccessPolicy>,
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
    /// and refuses writes, in bytes (16 MiB to 64 GiB); default 2 GiB (etcd's own default;
    /// etcd advises at most 8 GiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16777216, max = 68719476736_i64))]
    pub quota_backend_bytes: Option<i64>,
    /// etcd's `--auto-compaction-mode`: `periodic` (keep a time window of history, default) or
    /// `revision` (keep a number of revisions).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "periodic", "revision"]))]
    pub auto_compaction_mode: String,
    /// etcd's `--auto-compaction-retention`: a duration such as `1h` or `30m` for `periodic`
    /// (default `1h`), a number of revisions such as `10000` for `revision` (default `10000`).
    /// `0` turns automatic compaction off.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 32))]
    pub auto_compaction_retention: String,
    /// When the operator defragments members (frees the space compaction left unused).
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
    /// `Auto` (default) or `Off` (only NOSPACE recovery defragments).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "Auto", "Off"]))]
    pub mode: String,
    /// Share of the database file that must be unused, in percent (1 to 99); default 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 99))]
    pub min_free_percent: Option<i32>,
    /// Unused bytes needed at least (0 to 64 GiB); default 64 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 68719476736_i64))]
    pub min_free_bytes: Option<i64>,
}

/// Quorum-loss recovery policy (additive).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryPolicy {
    /// `Wait` (default): report the loss in the `Degraded` condition and change nothing.
    /// `FromSurvivor`: start a new cluster from a snapshot of the surviving member with the
    /// highest raft index (writes acknowledged after its revision are lost), then add the other
    /// members back as learners. `FromBackup`: the same from the newest backup of the
    /// EtcdBackup named in `backup` (also when every member is gone).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(extend("enum" = ["", "Wait", "FromSurvivor", "FromBackup"]))]
    pub quorum_loss: String,
    /// Seconds the loss must have lasted before recovering (0 to 86400); default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 86400))]
    pub after_seconds: Option<i64>,
    /// Name of an EtcdBackup in this namespace, for `FromBackup`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub backup: String,
}

/// How member pods are built. Field names are CoreOS' (including `ClusterDomain`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicy {
    /// Extra pod labels. `app` and `etcd_*` are reserved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Deprecated in CoreOS: becomes a required pod anti-affinity on `etcd_cluster`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anti_affinity: bool,
    /// Resources of the etcd container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Environment of the etcd container (`ETCD_*` variables configure etcd). Must not
    /// repeat the bootstrap flags the operator sets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_env: Vec<EnvVar>,
    /// When set, each member keeps its data on a PVC made from this spec instead of emptyDir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_spec: Option<PersistentVolumeClaimSpec>,
    /// Extra pod annotations. `etcd.version` is reserved.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Accepted for CoreOS compatibility and ignored: the DNS wait runs in the operator's image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub busybox_image: String,
    /// Pod-level security context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// How long a new member waits for its own DNS name before failing, in seconds (0 to
    /// 3600); 0 means forever.
    #[serde(default, rename = "DNSTimeoutInSecond", skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 3600))]
    pub dns_timeout_in_second: i64,
    /// Cluster domain for member URLs, e.g. `cluster.local`. Empty: names end at `.svc`.
    #[serde(default, rename = "ClusterDomain", skip_serializing_if = "String::is_empty")]
    pub cluster_domain: String,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// TLS policy in the CoreOS shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#static: Option<StaticTls>,
}

/// Certificates the user made and stored in Secrets.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaticTls {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberSecret>,
    /// Secret with the client certificate the operator uses.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operator_secret: String,
}

/// Secrets each member pod mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberSecret {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub peer_secret: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub server_secret: String,
}

/// Observed state, in the CoreOS shape plus additive fields. Every field is always serialized:
/// the status is written with a merge patch, where a missing key would keep a stale value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// `Creating`, `Running` or `Failed` (CoreOS values).
    #[serde(default)]
    pub phase: String,
    /// Why the phase is what it is, when that is not obvious.
    #[serde(default)]
    pub reason: String,
    /// True while `spec.paused` is honoured.
    #[serde(default)]
    pub control_paused: bool,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Current number of etcd members (voters and learners).
    #[serde(default)]
    pub size: i32,
    /// Name of the client Service.
    #[serde(default)]
    pub service_name: String,
    /// Port of the client Service.
    #[serde(default)]
    pub client_port: i32,
    #[serde(default)]
    pub members: MembersStatus,
    /// Version every member runs (empty while they differ).
    #[serde(default)]
    pub current_version: String,
    /// Version being rolled out; empty when not upgrading.
    #[serde(default)]
    pub target_version: String,
    /// Additive: number of ready voting members (printer column).
    #[serde(default)]
    pub ready_members: i32,
    /// Additive: the member that leads, by name.
    #[serde(default)]
    pub leader: String,
    /// Additive: etcd cluster ID in hex.
    #[serde(default)]
    pub cluster_id: String,
    /// Additive: `metadata.generation` this status was computed for.
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

/// Member names by state. Names are the member pod names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembersStatus {
    #[serde(default)]
    pub ready: Vec<String>,
    #[serde(default)]
    pub unready: Vec<String>,
    /// Additive: members that are learners (not yet voting).
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

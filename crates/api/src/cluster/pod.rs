//! `spec.pod`: how member pods are built, in the shape of CoreOS' `PodPolicy`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, PodSecurityContext, ResourceRequirements, Toleration,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How member pods are built. Field names and meanings are CoreOS' `PodPolicy` (including the
/// capitalised `ClusterDomain` and `DNSTimeoutInSecond`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicy {
    /// Extra labels of member pods. `app` and `etcd_*` are reserved for the operator (refused);
    /// its `etcd.database.coreos.com/*` labels override yours. Mirrors CoreOS `spec.pod.labels`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Node labels a member pod's node must have (the pod's `nodeSelector`). Mirrors CoreOS
    /// `spec.pod.nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Scheduling constraints of member pods (the pod's `affinity`). Default: members prefer
    /// distinct nodes (preferred pod anti-affinity on `kubernetes.io/hostname`) and zones (a
    /// `ScheduleAnyway` topology spread). Mirrors CoreOS `spec.pod.affinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// When true and `affinity` is unset: at most one member of this cluster per node (a
    /// required pod anti-affinity on `etcd_cluster`, `kubernetes.io/hostname`). Default false.
    /// Mirrors CoreOS `spec.pod.antiAffinity` (deprecated there in favour of `affinity`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anti_affinity: bool,
    /// CPU and memory requests and limits of the etcd container. Default: none. Mirrors CoreOS
    /// `spec.pod.resources`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Taints member pods tolerate (the pod's `tolerations`). Mirrors CoreOS
    /// `spec.pod.tolerations`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Environment of the etcd container, at most 128 entries: `ETCD_*` variables configure
    /// etcd (e.g. `ETCD_SNAPSHOT_COUNT`). Names the operator owns (`ETCD_NAME`,
    /// `ETCD_DATA_DIR`, `ETCD_WAL_DIR`, `ETCD_INITIAL_*`, `ETCD_*_URLS`,
    /// `ETCD_FORCE_NEW_CLUSTER`, `ETCD_STRICT_RECONFIG_CHECK`, `ETCD_DISCOVERY*`) are refused.
    /// Mirrors CoreOS `spec.pod.etcdEnv`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_env: Vec<EnvVar>,
    /// When set, each member keeps its data on its own PersistentVolumeClaim `<member>-data`
    /// made from this spec (e.g. `accessModes: [ReadWriteOnce]`, `resources.requests.storage:
    /// 1Gi`) instead of an emptyDir: a member whose pod is lost restarts on its volume with its
    /// data. Default: emptyDir (data lives as long as the pod). A larger storage request
    /// raises existing claims (their StorageClass must allow expansion). Mirrors CoreOS
    /// `spec.pod.persistentVolumeClaimSpec` (an alpha, non-stable storage there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_spec: Option<PersistentVolumeClaimSpec>,
    /// Extra annotations of member pods. `etcd.version` is reserved for the operator (refused).
    /// Mirrors CoreOS `spec.pod.annotations`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Accepted for compatibility and ignored: the DNS wait of a new member runs in the
    /// operator's own image (`etcd-operator wait-dns`). Mirrors CoreOS `spec.pod.busyboxImage`
    /// (default `busybox:1.28.0-glibc` there).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub busybox_image: String,
    /// Pod-level security context of member pods (user, group, `fsGroup`, seccomp), used as
    /// given. Default: members pass the `restricted` Pod Security Standard (uid and gid 65532,
    /// `fsGroup` 65532 with `OnRootMismatch`, seccomp `RuntimeDefault`, no privilege
    /// escalation, no capabilities, read-only root filesystems); a member whose volume holds
    /// data written as root that uid 65532 cannot use (storage that ignores `fsGroup`, e.g.
    /// hostPath) runs as root instead, its PVC annotated
    /// `etcd.database.coreos.com/data-owner: "0"`. Mirrors CoreOS `spec.pod.securityContext`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,
    /// How long a new member's init container waits for the member's own DNS name to
    /// resolve before failing, in seconds, 0 to 3600; 0 (the default) waits forever. Mirrors
    /// CoreOS `spec.pod.DNSTimeoutInSecond`.
    #[serde(default, rename = "DNSTimeoutInSecond", skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = 3600))]
    pub dns_timeout_in_second: i64,
    /// DNS domain of the Kubernetes cluster used in member URLs, e.g. `cluster.local` (a
    /// leading dot as in CoreOS' `.cluster.local` is accepted). Empty: the operator's own
    /// `--cluster-domain` (learned from its pod's resolv.conf), else names end at `.svc`.
    /// Mirrors CoreOS `spec.pod.ClusterDomain`.
    #[serde(default, rename = "ClusterDomain", skip_serializing_if = "String::is_empty")]
    pub cluster_domain: String,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

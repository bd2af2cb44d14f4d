//! Names and URLs of the objects that make up one etcd cluster. Everything that must agree
//! between the planner, the pod builder and the observer is derived here, from the names alone.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

pub const CLIENT_PORT: i32 = 2379;
pub const PEER_PORT: i32 = 2380;
/// Label every etcd pod carries (CoreOS: `app=etcd`).
pub const APP_LABEL: (&str, &str) = ("app", "etcd");
/// Label naming the owning cluster (CoreOS: `etcd_cluster=<name>`).
pub const CLUSTER_LABEL: &str = "etcd_cluster";
/// Pod annotation with the etcd version the pod runs (CoreOS: `etcd.version`).
pub const VERSION_ANNOTATION: &str = "etcd.version";
/// Pod annotation with the time (RFC 3339) the operator last changed the pod's version.
pub const VERSION_CHANGED_ANNOTATION: &str = "etcd.database.coreos.com/version-changed-at";
/// Member pod annotation: when the operator last defragmented the member (RFC 3339).
pub const DEFRAGMENTED_AT_ANNOTATION: &str = "etcd.database.coreos.com/defragmented-at";
/// Member pod annotation: when the operator last started a defragmentation of the member (RFC
/// 3339); one later than `defragmented-at` was not seen to end and may still run.
pub const DEFRAG_STARTED_ANNOTATION: &str = "etcd.database.coreos.com/defrag-started-at";
/// Pod annotation set on pods created by the initial bootstrap.
pub const BOOTSTRAP_ANNOTATION: &str = "etcd.database.coreos.com/bootstrap";
/// Label carrying the owning EtcdCluster's UID on every member pod and PVC; the Services select
/// on it, so pods left behind by a deleted cluster of the same name never serve behind a new one.
pub const CLUSTER_UID_LABEL: &str = "etcd.database.coreos.com/cluster-uid";
/// EtcdCluster annotation: the etcd cluster ID (hex) once the cluster formed. Durable proof that
/// the cluster holds data, independent of status: it is never bootstrapped again.
pub const CLUSTER_ID_ANNOTATION: &str = "etcd.database.coreos.com/cluster-id";
/// EtcdCluster annotation: evidence that the cluster formed while its ID could not be recorded
/// (the operator never reached etcd): `<pod> was Ready at <RFC 3339>` (a member is Ready only
/// with a leader, i.e. a quorum formed). Like the cluster ID, it is never bootstrapped again.
pub const FORMED_ANNOTATION: &str = "etcd.database.coreos.com/formed";
/// EtcdCluster annotation: what the operator saw each member hold while the cluster had no
/// quorum, over several looks (JSON `planner::survivors::Looks`); removed once a quorum is back.
pub const SURVIVOR_LOOKS_ANNOTATION: &str = "etcd.database.coreos.com/survivor-looks";
/// EtcdCluster annotation: per member, the raft index the operator saw it acknowledge (JSON
/// `progress::Progress`). A member restarts on its volume only if the data there reaches it.
pub const MEMBER_PROGRESS_ANNOTATION: &str = "etcd.database.coreos.com/member-progress";
/// EtcdCluster annotation: the node each member pod was last seen on (JSON, pod to node), kept
/// after a pod object is gone while it may still be a member (`nodes`): a gone pod's process is
/// known to have stopped only from its node.
pub const MEMBER_NODES_ANNOTATION: &str = "etcd.database.coreos.com/member-nodes";
/// EtcdCluster annotation: the last spec that passed validation (JSON). An invalid edit is
/// refused while the cluster keeps healing under this one.
pub const LAST_VALID_SPEC_ANNOTATION: &str = "etcd.database.coreos.com/last-valid-spec";
/// EtcdCluster annotation: the Secrets of a TLS side `spec.TLS` turned off while members still
/// use them (JSON `tls::transition::Leaving`), removed once no member does.
pub const TLS_LEAVING_ANNOTATION: &str = "etcd.database.coreos.com/tls-leaving";
/// EtcdCluster annotation a user sets to `"true"`: members serve clients over http and https on
/// the client port, both, whichever way `spec.TLS` moves them, until it is removed (time for
/// clients to move; `tls::transition::stage`).
pub const TLS_SERVE_BOTH_ANNOTATION: &str = "etcd.database.coreos.com/tls-serve-both";
/// EtcdCluster annotation: RFC 3339 time since which a quorum cannot come back.
pub const QUORUM_LOST_AT_ANNOTATION: &str = "etcd.database.coreos.com/quorum-lost-at";
/// EtcdCluster annotation: the store revision the operator last compacted to while recovering
/// from NOSPACE and when, `<revision> <RFC 3339>`.
pub const NOSPACE_RECOVERY_ANNOTATION: &str = "etcd.database.coreos.com/nospace-recovery";
/// EtcdCluster annotation: the minor version every member runs and the raft index at which the
/// last of them reported it after a minor upgrade, `<major.minor> <index>` (index 0: the
/// cluster started at that minor, or its history is unknown).
pub const MINOR_SINCE_ANNOTATION: &str = "etcd.database.coreos.com/minor-since";
/// EtcdCluster annotation: a quorum-loss recovery under way (JSON `observed::RecoveryRecord`).
pub const RECOVERY_ANNOTATION: &str = "etcd.database.coreos.com/recovery";
/// EtcdCluster annotation: the last quorum-loss recovery that finished (JSON
/// `observed::RecoveryRecord`), from which status reports `RecoveredFromQuorumLoss`.
pub const LAST_RECOVERY_ANNOTATION: &str = "etcd.database.coreos.com/last-recovery";
/// PVC annotation: the operator retired the claim (its member's data check refused it), and
/// why. A retired claim is kept for a person to look at and delete; the operator never uses it
/// again and never deletes it.
pub const RETIRED_ANNOTATION: &str = "etcd.database.coreos.com/retired";
/// PVC annotation: the member whose data the volume holds.
pub const MEMBER_ANNOTATION: &str = "etcd.database.coreos.com/member";
/// PVC annotation: that member's peer URL, to name it in `--initial-cluster` when no member
/// answers.
pub const PEER_URL_ANNOTATION: &str = "etcd.database.coreos.com/peer-url";
/// Member pod annotation: when the member was drained from the client Service (RFC 3339).
pub const DRAINED_AT_ANNOTATION: &str = "etcd.database.coreos.com/drained-at";
/// The requests a person (or `kubectl etcd`) writes on an EtcdCluster (part of the API).
pub use etcd_operator_api::{
    DEFRAGMENT_ANNOTATION, FENCED_MEMBERS_ANNOTATION, HIBERNATION_ANNOTATION, RESTORE_BUMP_REVISION_ANNOTATION,
    SERVING_LABEL, SWITCHOVER_ANNOTATION,
};
/// EtcdCluster annotation: when the operator first saw the [`DEFRAGMENT_ANNOTATION`] request
/// (RFC 3339); a member counts as done once defragmented after it.
pub const DEFRAGMENT_ASKED_AT_ANNOTATION: &str = "etcd.database.coreos.com/defragment-asked-at";
/// EtcdCluster annotation: when the operator began to stop the members for a hibernation
/// (RFC 3339), written before the first pod is deleted; removed when the cluster resumes.
pub const HIBERNATED_AT_ANNOTATION: &str = "etcd.database.coreos.com/hibernated-at";
/// Member pod annotation: when the operator fenced the member (RFC 3339); the pod is served
/// again once its name leaves [`FENCED_MEMBERS_ANNOTATION`].
pub const FENCED_AT_ANNOTATION: &str = "etcd.database.coreos.com/fenced-at";
/// Pod annotation: `Desired::pod_hash` of the spec the pod was made from.
pub const POD_SPEC_HASH_ANNOTATION: &str = "etcd.database.coreos.com/pod-spec-hash";
/// PVC annotation: who the member's data belongs to when the default non-root user could not
/// use it. [`ROOT_DATA_OWNER`]: the volume holds data written as root that uid 65532 cannot read
/// or write (its volume type does not apply `fsGroup`), so the member runs as root (see
/// `pod_security`). Written by the operator only; removing it (after making the data the
/// non-root user's) moves the member to the default at its next restart.
pub const DATA_OWNER_ANNOTATION: &str = "etcd.database.coreos.com/data-owner";
/// [`DATA_OWNER_ANNOTATION`]'s value for root.
pub const ROOT_DATA_OWNER: &str = "0";
/// Longest EtcdCluster name: `<name>-client` must be a 63-character DNS label.
pub const MAX_CLUSTER_NAME: usize = etcd_operator_api::validation_rules::MAX_CLUSTER_NAME;
/// Length of the random member suffix.
pub const SUFFIX_LEN: usize = 5;

/// Name of the client Service.
pub fn client_service(cluster: &str) -> String {
    format!("{cluster}-client")
}

/// Name of a new member (and its pod): `<cluster>-<suffix>`.
pub fn member_name(cluster: &str, suffix: &str) -> String {
    format!("{cluster}-{suffix}")
}

/// The member a claim of this cluster stands for, by its name: `<member>-data` (this
/// operator's, [`pvc_name`]), else the name itself (the CoreOS operator named a member's claim
/// after the member, `k8sutil.PVCNameFromMember`). Member names never end in `-data`: their
/// random suffix has no `a`.
pub fn member_of_pvc(pvc: &str) -> &str {
    pvc.strip_suffix("-data").unwrap_or(pvc)
}

/// Name of a member's PersistentVolumeClaim.
pub fn pvc_name(member: &str) -> String {
    format!("{member}-data")
}

/// DNS name of a member through the headless peer Service (which is named after the cluster):
/// `<member>.<cluster>.<ns>.svc[.<domain>]`.
pub fn member_host(member: &str, cluster: &str, namespace: &str, cluster_domain: &str) -> String {
    let d = cluster_domain.trim_matches('.');
    if d.is_empty() {
        format!("{member}.{cluster}.{namespace}.svc")
    } else {
        format!("{member}.{cluster}.{namespace}.svc.{d}")
    }
}

/// A member's peer URL; `scheme` is `https` when peers speak TLS (`tls::Policy::peer_scheme`).
pub fn peer_url(scheme: &str, host: &str) -> String {
    format!("{scheme}://{host}:{PEER_PORT}")
}

/// A member's client URL; `scheme` is `https` when clients speak TLS.
pub fn client_url(scheme: &str, host: &str) -> String {
    format!("{scheme}://{host}:{CLIENT_PORT}")
}

/// The member (pod) name a peer URL points at: the first label of its host. This is how the
/// planner matches etcd members, even unstarted ones that have no name yet, to pods.
pub fn member_of_peer_url(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let host = rest.split([':', '/']).next()?;
    if host.is_empty() || host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return None;
    }
    host.split('.').next().map(str::to_string)
}

/// Hex form of a member or cluster ID, as etcdctl prints it.
pub fn hex(id: u64) -> String {
    format!("{id:x}")
}

/// Labels of every object of the operator's install, and the operator pods' selector.
pub fn operator_labels() -> BTreeMap<String, String> {
    BTreeMap::from([("app.kubernetes.io/name".to_string(), crate::OPERATOR_NAME.to_string())])
}

/// Labels every object of the cluster carries (CoreOS' pair).
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (APP_LABEL.0.to_string(), APP_LABEL.1.to_string()),
        (CLUSTER_LABEL.to_string(), cluster.to_string()),
    ])
}

/// Labels of member pods and PVCs, and the Services' selector: CoreOS' pair plus the
/// EtcdCluster's UID, so that pods of an earlier cluster of the same name (left behind by
/// `kubectl delete --cascade=orphan`) never serve behind this one's Services.
pub fn member_labels(c: &EtcdCluster) -> BTreeMap<String, String> {
    let mut l = selector_labels(&cluster_name(c));
    l.insert(CLUSTER_UID_LABEL.to_string(), c.meta().uid.clone().unwrap_or_default());
    l
}

/// [`member_labels`] and the serving label: what member pods carry while they take client
/// traffic, and what the client Service selects on.
pub fn serving_labels(c: &EtcdCluster) -> BTreeMap<String, String> {
    let mut l = member_labels(c);
    l.insert(SERVING_LABEL.to_string(), "true".into());
    l
}

/// Controller owner reference to the EtcdCluster: deleting it deletes everything it made.
pub fn owner_ref(c: &EtcdCluster) -> OwnerReference {
    c.controller_owner_ref(&()).expect("EtcdCluster from the API has a name and uid")
}

/// The EtcdCluster's name.
pub fn cluster_name(c: &EtcdCluster) -> String {
    c.meta().name.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_round_trip_to_member_names() {
        let h = member_host("ex-abcde", "ex", "ns", "");
        assert_eq!(h, "ex-abcde.ex.ns.svc");
        assert_eq!(member_of_peer_url(&peer_url("http", &h)).as_deref(), Some("ex-abcde"));
        assert_eq!(peer_url("https", &h), "https://ex-abcde.ex.ns.svc:2380");
        let h = member_host("ex-abcde", "ex", "ns", ".cluster.local");
        assert_eq!(h, "ex-abcde.ex.ns.svc.cluster.local");
        assert_eq!(member_of_peer_url("https://m1.c.ns.svc:2380").as_deref(), Some("m1"));
        assert_eq!(member_of_peer_url("http://10.0.0.1:2380"), None);
        assert_eq!(member_of_peer_url("garbage"), None);
    }

    #[test]
    fn longest_name_fits_a_dns_label() {
        let name = "a".repeat(MAX_CLUSTER_NAME);
        assert_eq!(client_service(&name).len(), 63);
        assert!(member_name(&name, "abcde").len() <= 63);
    }
}

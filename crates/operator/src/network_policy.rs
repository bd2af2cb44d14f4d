//! The NetworkPolicy of each cluster (`spec.networkPolicy`, on by default): who may reach the
//! members. Pure: the object and the decision (apply, delete, nothing); the controller's
//! upkeep carries it out beside the planned step.
//!
//! - It selects the cluster's member pods by CoreOS' pair `app=etcd, etcd_cluster=<name>`
//!   (not the cluster-UID label: a member an earlier operator version made carries it only
//!   once `marks` added it, and a peer left out of the policy would lose its quorum).
//! - Peer port (2380): only from those members.
//! - Client port (2379): from the members (a new member seeds from one), the operator's pods
//!   (`app.kubernetes.io/name=etcd-operator`, in the operator's namespace), the backup pods of
//!   EtcdBackups naming this cluster (`etcd_backup_of=<name>`), and the user's `clients`
//!   (default: every pod of the namespace).
//! - Ingress only: members' egress (DNS, each other) is not restricted.
//! - An operator that is not a pod (a process on a host) has no pod labels: NetworkPolicies let
//!   traffic from a pod's own node through (Kubernetes' documented exception), so an operator on
//!   a node of the cluster keeps working; one elsewhere needs its address in `clients`
//!   (`ipBlock`) or the policy off.
//! - Enforcement is the network plugin's: on a plugin without NetworkPolicy support (e.g. the
//!   plain `bridge` CNI plugin) the object exists and changes nothing.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::backup::contract::BACKUP_OF_LABEL;
use crate::naming::{CLIENT_PORT, PEER_PORT};
use crate::pod_spec;
use crate::validation::{Desired, NetworkAccess};

/// The label every namespace carries with its own name (Kubernetes 1.21+; on older servers a
/// namespace has it only when someone set it).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Where the operator's own pods run: `None` when the operator is not a pod.
pub type OperatorNamespace<'a> = Option<&'a str>;

/// What to do about the cluster's NetworkPolicy.
#[derive(Debug, PartialEq)]
pub enum Action {
    Apply(Box<NetworkPolicy>),
    Delete,
    Nothing,
}

fn pods(labels: BTreeMap<String, String>) -> LabelSelector {
    LabelSelector { match_labels: Some(labels), ..Default::default() }
}

fn port(p: i32) -> Option<Vec<NetworkPolicyPort>> {
    Some(vec![NetworkPolicyPort { port: Some(IntOrString::Int(p)), protocol: Some("TCP".into()), end_port: None }])
}

/// The operator's pods, seen from the cluster's namespace.
fn operator_peer(cluster_ns: &str, operator_ns: OperatorNamespace) -> Option<NetworkPolicyPeer> {
    let ns = operator_ns?;
    let namespace_selector =
        (ns != cluster_ns).then(|| pods(BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), ns.to_string())])));
    Some(NetworkPolicyPeer { pod_selector: Some(pods(crate::manifests::labels())), namespace_selector, ip_block: None })
}

/// The cluster's NetworkPolicy.
pub fn policy(cluster: &EtcdCluster, access: &NetworkAccess, operator_ns: OperatorNamespace) -> NetworkPolicy {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let members =
        NetworkPolicyPeer { pod_selector: Some(pods(pod_spec::selector_labels(&name))), ..Default::default() };
    let backups = NetworkPolicyPeer {
        pod_selector: Some(pods(BTreeMap::from([(BACKUP_OF_LABEL.to_string(), name.clone())]))),
        ..Default::default()
    };
    let mut clients = vec![members.clone()];
    clients.extend(operator_peer(&ns, operator_ns));
    clients.push(backups);
    clients.extend(access.clients.iter().cloned());
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns),
            labels: Some(pod_spec::selector_labels(&name)),
            owner_references: Some(vec![pod_spec::owner_ref(cluster)]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pods(pod_spec::selector_labels(&name))),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule { from: Some(vec![members]), ports: port(PEER_PORT) },
                NetworkPolicyIngressRule { from: Some(clients), ports: port(CLIENT_PORT) },
            ]),
            egress: None,
        }),
    }
}

/// Whether `np` was made for this EtcdCluster (its controller owner reference has its UID).
fn owned_by(np: &NetworkPolicy, cluster: &EtcdCluster) -> bool {
    let uid = cluster.uid();
    np.owner_references().iter().any(|r| r.controller == Some(true) && Some(&r.uid) == uid.as_ref())
}

/// Apply when the spec wants a policy that differs from `have` (absent, changed by someone,
/// or an earlier spec's); delete when the spec turned it off and ours exists; nothing while the
/// spec is invalid with no last valid one (what runs stays as it is).
pub fn decide(
    cluster: &EtcdCluster,
    desired: Option<&Desired>,
    have: Option<&NetworkPolicy>,
    operator_ns: OperatorNamespace,
) -> Action {
    let Some(d) = desired else { return Action::Nothing };
    match (&d.network_policy, have) {
        (None, Some(np)) if owned_by(np, cluster) => Action::Delete,
        (None, _) => Action::Nothing,
        (Some(access), have) => {
            let want = policy(cluster, access, operator_ns);
            let same = have.is_some_and(|h| {
                h.spec == want.spec && owned_by(h, cluster) && {
                    let labels = h.labels();
                    want.labels().iter().all(|(k, v)| labels.get(k) == Some(v))
                }
            });
            if same { Action::Nothing } else { Action::Apply(Box::new(want)) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::validate;
    use etcd_operator_api::EtcdClusterSpec;
    use etcd_operator_api::cluster::NetworkAccessPolicy;
    use k8s_openapi::api::networking::v1::IPBlock;

    fn cluster(np: Option<NetworkAccessPolicy>) -> EtcdCluster {
        let mut c = EtcdCluster::new("ex", EtcdClusterSpec { size: 3, network_policy: np, ..Default::default() });
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        c
    }

    fn desired(c: &EtcdCluster) -> Desired {
        validate(&c.name_any(), &c.spec).unwrap()
    }

    fn built(c: &EtcdCluster, operator_ns: OperatorNamespace) -> NetworkPolicy {
        match decide(c, Some(&desired(c)), None, operator_ns) {
            Action::Apply(np) => *np,
            other => panic!("expected Apply, got {other:?}"),
        }
    }

    fn rule(np: &NetworkPolicy, port: i32) -> Vec<NetworkPolicyPeer> {
        let spec = np.spec.as_ref().unwrap();
        let rules: Vec<_> = spec
            .ingress
            .iter()
            .flatten()
            .filter(|r| r.ports.iter().flatten().any(|p| p.port == Some(IntOrString::Int(port))))
            .collect();
        assert_eq!(rules.len(), 1, "one rule for port {port}");
        assert_eq!(rules[0].ports.as_ref().unwrap().len(), 1, "the rule opens only port {port}");
        rules[0].from.clone().unwrap()
    }

    fn labels(sel: &Option<LabelSelector>) -> BTreeMap<String, String> {
        sel.as_ref().and_then(|s| s.match_labels.clone()).unwrap_or_default()
    }

    #[test]
    fn selects_the_members_and_admits_peers_only_from_them() {
        let c = cluster(None);
        let np = built(&c, Some("ns"));
        let spec = np.spec.as_ref().unwrap();
        let members = pod_spec::selector_labels("ex");
        assert_eq!(labels(&spec.pod_selector), members);
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]), "egress stays open (DNS, peers)");
        assert_eq!(spec.ingress.as_ref().unwrap().len(), 2, "peer and client port, nothing else");
        let peers = rule(&np, PEER_PORT);
        assert_eq!(peers.len(), 1);
        assert_eq!(labels(&peers[0].pod_selector), members);
        assert_eq!(peers[0].namespace_selector, None, "members of this namespace only");
        assert_eq!(np.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        assert_eq!(np.metadata.name.as_deref(), Some("ex"));
        // The controller's watch finds it by the labels every child carries.
        assert_eq!(np.metadata.labels.as_ref(), Some(&members));
    }

    #[test]
    fn client_port_admits_members_operator_backups_and_by_default_the_namespace() {
        let c = cluster(None);
        let from = rule(&built(&c, Some("ns")), CLIENT_PORT);
        assert_eq!(labels(&from[0].pod_selector), pod_spec::selector_labels("ex"), "members");
        assert_eq!(labels(&from[1].pod_selector), crate::manifests::labels(), "operator");
        assert_eq!(from[1].namespace_selector, None, "operator in the cluster's namespace");
        assert_eq!(labels(&from[2].pod_selector), BTreeMap::from([(BACKUP_OF_LABEL.to_string(), "ex".to_string())]));
        assert_eq!(from[3], NetworkPolicyPeer { pod_selector: Some(LabelSelector::default()), ..Default::default() });
        assert_eq!(from.len(), 4);
    }

    #[test]
    fn an_operator_elsewhere_is_named_by_namespace_and_a_process_operator_by_nothing() {
        let c = cluster(Some(NetworkAccessPolicy { clients: Some(vec![]), ..Default::default() }));
        let from = rule(&built(&c, Some("ops")), CLIENT_PORT);
        assert_eq!(from.len(), 3, "members, operator, backups; clients: [] adds nobody");
        assert_eq!(labels(&from[1].pod_selector), crate::manifests::labels());
        assert_eq!(
            labels(&from[1].namespace_selector),
            BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), "ops".to_string())])
        );
        let from = rule(&built(&c, None), CLIENT_PORT);
        assert_eq!(from.len(), 2, "members and backups only");
    }

    #[test]
    fn user_clients_are_added_verbatim() {
        let ip = NetworkPolicyPeer {
            ip_block: Some(IPBlock { cidr: "192.0.2.7/32".into(), except: None }),
            ..Default::default()
        };
        let c = cluster(Some(NetworkAccessPolicy { clients: Some(vec![ip.clone()]), ..Default::default() }));
        let from = rule(&built(&c, Some("ns")), CLIENT_PORT);
        assert_eq!(from.last(), Some(&ip));
        assert!(!rule(&built(&c, Some("ns")), PEER_PORT).contains(&ip), "clients never reach the peer port");
    }

    #[test]
    fn decide_applies_changes_deletes_only_its_own_and_waits_on_an_invalid_spec() {
        let on = cluster(None);
        let d = desired(&on);
        let current = built(&on, Some("ns"));
        assert_eq!(decide(&on, Some(&d), Some(&current), Some("ns")), Action::Nothing, "up to date");
        assert!(matches!(decide(&on, Some(&d), Some(&current), Some("ops")), Action::Apply(_)), "operator moved");
        let mut edited = current.clone();
        edited.spec.as_mut().unwrap().ingress = None;
        assert!(matches!(decide(&on, Some(&d), Some(&edited), Some("ns")), Action::Apply(_)), "edited by someone");
        assert_eq!(decide(&on, None, None, Some("ns")), Action::Nothing, "no valid spec: leave things be");

        let off = cluster(Some(NetworkAccessPolicy { enabled: Some(false), ..Default::default() }));
        let d_off = desired(&off);
        assert_eq!(decide(&off, Some(&d_off), Some(&current), Some("ns")), Action::Delete);
        assert_eq!(decide(&off, Some(&d_off), None, Some("ns")), Action::Nothing);
        let mut foreign = current.clone();
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        assert_eq!(decide(&off, Some(&d_off), Some(&foreign), Some("ns")), Action::Nothing, "not ours");
        assert!(matches!(decide(&on, Some(&d), Some(&foreign), Some("ns")), Action::Apply(_)), "taken back");
    }
}

//! The NetworkPolicy of each cluster (`spec.networkPolicy`, on by default): who may reach the
//! members. Pure: the object and the decision (apply, delete, nothing), which `decide` puts in
//! the plan; the controller's upkeep carries it out beside the planned step.
//!
//! - It selects the cluster's member pods by CoreOS' pair `app=etcd, etcd_cluster=<name>`
//!   (not the cluster-UID label: a member an earlier operator version made carries it only
//!   once `marks` added it, and a peer left out of the policy would lose its quorum).
//! - Peer port (2380): only from those members.
//! - Client port (2379): from the members (a new member seeds from one), the operator's pods
//!   (`app.kubernetes.io/name=etcd-operator`, in the operator's namespace), the backup pods of
//!   EtcdBackups naming this cluster (`etcd_backup_of=<name>`), and the user's `clients`.
//! - `clients` unset: what the cluster's durable `network-policy-default` mark says, set once
//!   when the operator first sees the cluster (`DefaultClients::first`): a cluster it is about to
//!   create gets `namespace` (every pod of its namespace); one that already exists (formed
//!   before this policy existed, adopted from the CoreOS operator, made by an earlier version)
//!   gets `any`: its client port stays open to every source, as it was without a policy, so an
//!   operator upgrade cuts no client off. The user narrows it with `clients`, or opts in to the
//!   namespace default by setting the mark to `namespace`.
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
use crate::observed::Observed;
use crate::validation::{Desired, NetworkAccess};

/// The label every namespace carries with its own name (Kubernetes 1.21+; on older servers a
/// namespace has it only when someone set it).
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The durable mark on the EtcdCluster saying who its client port admits while
/// `spec.networkPolicy.clients` is unset: `namespace` or `any` ([`DefaultClients`]).
pub const DEFAULT_ANNOTATION: &str = "etcd.database.coreos.com/network-policy-default";

/// Who the client port admits while `spec.networkPolicy.clients` is unset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultClients {
    /// Every pod of the cluster's namespace (clusters the operator created with the policy).
    Namespace,
    /// Every source: the client port as open as it was before the cluster had a policy.
    Any,
}

impl DefaultClients {
    pub fn as_str(self) -> &'static str {
        match self {
            DefaultClients::Namespace => "namespace",
            DefaultClients::Any => "any",
        }
    }

    /// The mark's value: `namespace` opts in to the namespace default; anything else (and no
    /// mark) keeps the port open (never narrower than asked).
    pub fn of_mark(value: Option<&str>) -> DefaultClients {
        if value == Some("namespace") { DefaultClients::Namespace } else { DefaultClients::Any }
    }

    /// The mark to set when a cluster has none: `namespace` only for a cluster the operator is
    /// about to create (never formed, no pod, no volume); any other existed before the policy
    /// and keeps its reachability.
    pub fn first(o: &Observed) -> DefaultClients {
        if o.ever_bootstrapped || !o.pods.is_empty() || !o.pvcs.is_empty() {
            DefaultClients::Any
        } else {
            DefaultClients::Namespace
        }
    }
}

/// Where the operator's own pods run: `None` when the operator is not a pod.
pub type OperatorNamespace<'a> = Option<&'a str>;

/// What to do about the cluster's NetworkPolicy.
#[derive(Clone, Debug, PartialEq)]
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
    Some(NetworkPolicyPeer {
        pod_selector: Some(pods(crate::naming::operator_labels())),
        namespace_selector,
        ip_block: None,
    })
}

/// The cluster's NetworkPolicy. With `clients` unset and the `any` default the client port's
/// rule has no `from`: every source (pods of any namespace, nodes, outside the cluster).
pub fn policy(
    cluster: &EtcdCluster,
    access: &NetworkAccess,
    default: DefaultClients,
    operator_ns: OperatorNamespace,
) -> NetworkPolicy {
    let name = cluster.name_any();
    let ns = cluster.namespace().unwrap_or_default();
    let members =
        NetworkPolicyPeer { pod_selector: Some(pods(crate::naming::selector_labels(&name))), ..Default::default() };
    let backups = NetworkPolicyPeer {
        pod_selector: Some(pods(BTreeMap::from([(BACKUP_OF_LABEL.to_string(), name.clone())]))),
        ..Default::default()
    };
    let listed = match (&access.clients, default) {
        (Some(list), _) => Some(list.clone()),
        (None, DefaultClients::Namespace) => Some(crate::validation::default_clients()),
        (None, DefaultClients::Any) => None,
    };
    let ns_of_peers = ns.clone();
    let clients = listed.map(|listed| {
        let mut clients = vec![members.clone()];
        clients.extend(operator_peer(&ns, operator_ns));
        clients.push(backups);
        clients.extend(listed);
        clients
    });
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns),
            labels: Some(crate::naming::selector_labels(&name)),
            owner_references: Some(vec![crate::naming::owner_ref(cluster)]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(pods(crate::naming::selector_labels(&name))),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![
                // The operator reads the peer certificate each member serves (CA bundle changes).
                NetworkPolicyIngressRule {
                    from: Some(std::iter::once(members).chain(operator_peer(&ns_of_peers, operator_ns)).collect()),
                    ports: port(PEER_PORT),
                },
                NetworkPolicyIngressRule { from: clients, ports: port(CLIENT_PORT) },
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
    default: DefaultClients,
    have: Option<&NetworkPolicy>,
    operator_ns: OperatorNamespace,
) -> Action {
    let Some(d) = desired else { return Action::Nothing };
    match (&d.network_policy, have) {
        (None, Some(np)) if owned_by(np, cluster) => Action::Delete,
        (None, _) => Action::Nothing,
        (Some(access), have) => {
            let want = policy(cluster, access, default, operator_ns);
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

    use DefaultClients::{Any, Namespace};

    fn built(c: &EtcdCluster, operator_ns: OperatorNamespace) -> NetworkPolicy {
        built_with(c, Namespace, operator_ns)
    }

    fn built_with(c: &EtcdCluster, default: DefaultClients, operator_ns: OperatorNamespace) -> NetworkPolicy {
        match decide(c, Some(&desired(c)), default, None, operator_ns) {
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
        rules[0].from.clone().unwrap_or_default()
    }

    fn labels(sel: &Option<LabelSelector>) -> BTreeMap<String, String> {
        sel.as_ref().and_then(|s| s.match_labels.clone()).unwrap_or_default()
    }

    /// The peer port admits the members and the operator: it reads the peer certificate each
    /// member serves before a CA bundle changes (`observe::tls::guard_trust`, the `TLS.auto`
    /// rotation's probe); refused there, it could not tell whether a restart cuts a member off.
    #[test]
    fn selects_the_members_and_admits_peers_only_from_them_and_the_operator() {
        let c = cluster(None);
        let np = built(&c, Some("ns"));
        let spec = np.spec.as_ref().unwrap();
        let members = crate::naming::selector_labels("ex");
        assert_eq!(labels(&spec.pod_selector), members);
        assert_eq!(spec.policy_types, Some(vec!["Ingress".to_string()]), "egress stays open (DNS, peers)");
        assert_eq!(spec.ingress.as_ref().unwrap().len(), 2, "peer and client port, nothing else");
        let peers = rule(&np, PEER_PORT);
        assert_eq!(peers.len(), 2, "{peers:?}");
        assert_eq!(labels(&peers[0].pod_selector), members);
        assert_eq!(peers[0].namespace_selector, None, "members of this namespace only");
        assert_eq!(labels(&peers[1].pod_selector), crate::naming::operator_labels(), "the operator");
        let elsewhere = rule(&built(&c, Some("ops")), PEER_PORT);
        assert_eq!(
            labels(&elsewhere[1].namespace_selector),
            BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), "ops".to_string())])
        );
        assert_eq!(rule(&built(&c, None), PEER_PORT).len(), 1, "a process operator: members only");
        assert_eq!(np.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        assert_eq!(np.metadata.name.as_deref(), Some("ex"));
        // The controller's watch finds it by the labels every child carries.
        assert_eq!(np.metadata.labels.as_ref(), Some(&members));
    }

    #[test]
    fn client_port_admits_members_operator_backups_and_by_default_the_namespace() {
        let c = cluster(None);
        let from = rule(&built(&c, Some("ns")), CLIENT_PORT);
        assert_eq!(labels(&from[0].pod_selector), crate::naming::selector_labels("ex"), "members");
        assert_eq!(labels(&from[1].pod_selector), crate::naming::operator_labels(), "operator");
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
        assert_eq!(labels(&from[1].pod_selector), crate::naming::operator_labels());
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
        assert_eq!(decide(&on, Some(&d), Namespace, Some(&current), Some("ns")), Action::Nothing, "up to date");
        let moved = decide(&on, Some(&d), Namespace, Some(&current), Some("ops"));
        assert!(matches!(moved, Action::Apply(_)), "operator moved");
        let mut edited = current.clone();
        edited.spec.as_mut().unwrap().ingress = None;
        let fixed = decide(&on, Some(&d), Namespace, Some(&edited), Some("ns"));
        assert!(matches!(fixed, Action::Apply(_)), "edited by someone");
        assert_eq!(decide(&on, None, Namespace, None, Some("ns")), Action::Nothing, "no valid spec: leave things be");

        let off = cluster(Some(NetworkAccessPolicy { enabled: Some(false), ..Default::default() }));
        let d_off = desired(&off);
        assert_eq!(decide(&off, Some(&d_off), Namespace, Some(&current), Some("ns")), Action::Delete);
        assert_eq!(decide(&off, Some(&d_off), Namespace, None, Some("ns")), Action::Nothing);
        let mut foreign = current.clone();
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        assert_eq!(decide(&off, Some(&d_off), Namespace, Some(&foreign), Some("ns")), Action::Nothing, "not ours");
        let taken = decide(&on, Some(&d), Namespace, Some(&foreign), Some("ns"));
        assert!(matches!(taken, Action::Apply(_)), "taken back");
    }

    /// A cluster that existed before the policy (mark `any`) keeps its client port open to every
    /// source: the rule has no `from` (pods of every namespace, nodes, hosts outside the
    /// cluster), while the peer port stays members-only. `clients` narrows it as for any cluster.
    #[test]
    fn a_cluster_that_existed_before_keeps_its_client_port_open_until_clients_narrow_it() {
        let c = cluster(None);
        let np = built_with(&c, Any, Some("ns"));
        let spec = np.spec.as_ref().unwrap();
        let client = spec.ingress.as_ref().unwrap().iter().find(|r| r.ports == port(CLIENT_PORT)).unwrap();
        assert_eq!(client.from, None, "every source");
        assert_eq!(rule(&np, PEER_PORT).len(), 2, "peers: members and the operator only");
        assert_eq!(labels(&rule(&np, PEER_PORT)[0].pod_selector), crate::naming::selector_labels("ex"));

        let api = NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), "api".to_string())])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let narrowed = cluster(Some(NetworkAccessPolicy { clients: Some(vec![api.clone()]), ..Default::default() }));
        let from = rule(&built_with(&narrowed, Any, Some("ns")), CLIENT_PORT);
        assert_eq!(from.len(), 4, "members, operator, backups and the named clients");
        assert_eq!(from.last(), Some(&api));
        assert_eq!(
            rule(&built_with(&narrowed, Any, Some("ns")), CLIENT_PORT),
            rule(&built_with(&narrowed, Namespace, Some("ns")), CLIENT_PORT),
            "named clients are the same whatever the default"
        );
        // The same mark keeps the same policy: nothing to apply on the next reconcile.
        let d = desired(&c);
        assert_eq!(decide(&c, Some(&d), Any, Some(&np), Some("ns")), Action::Nothing);
        assert!(matches!(decide(&c, Some(&d), Namespace, Some(&np), Some("ns")), Action::Apply(_)), "opted in");
    }

    #[test]
    fn the_mark_opts_in_only_when_it_says_namespace() {
        assert_eq!(DefaultClients::of_mark(Some("namespace")), Namespace);
        assert_eq!(DefaultClients::of_mark(Some("any")), Any);
        assert_eq!(DefaultClients::of_mark(Some("Namespace")), Any, "anything else: never narrower");
        assert_eq!(DefaultClients::of_mark(None), Any);
        for d in [Namespace, Any] {
            assert_eq!(DefaultClients::of_mark(Some(d.as_str())), d);
        }
    }
}

//! The nodes member pods run on, as far as node loss is concerned: whether a Node is Ready and
//! since when, whether a person declared it out of service, whether it still exists; and the
//! `member-nodes` mark that keeps the node of each member after its pod object is gone.
//!
//! A member pod object that disappeared proves nothing about its etcd process: a pod
//! force-deleted while its node is cut off from the API server keeps running there (the
//! kubelet that would stop it cannot hear of the deletion), possibly in the majority of a
//! partition that serves clients. What does prove the process stopped, in Kubernetes' own
//! terms ([`stopped_evidence`]):
//! - the Node is Ready: its kubelet talks to the API server and stops the containers of pods
//!   that are no longer there;
//! - the Node carries the `node.kubernetes.io/out-of-service` taint: a person (or their
//!   automation) says the machine is shut down, as for Kubernetes' non-graceful node shutdown;
//! - the Node object was deleted: the cloud provider's controller does that for a machine that
//!   no longer exists, or a person does it for one that is gone for good.
//!
//! Pure: the reads are in `observe`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

/// The taint of Kubernetes' non-graceful node shutdown: the node is shut down and will not run
/// its pods again until the taint is removed.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

/// How long after a member's pod object went a Node still Ready is evidence that the process
/// stopped. A Node stays Ready for kube-controller-manager's `--node-monitor-grace-period` (50 s
/// since Kubernetes 1.32, 40 s before) after its kubelet stopped talking, plus the controller's
/// 5 s monitor period: only once that has passed since the loss began does "Ready" say the
/// kubelet still talks to the API server (and so stopped the containers of deleted pods).
pub const NODE_READY_TRUSTED_AFTER_SECS: i64 = 60;

/// What the operator knows of one Node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeState {
    /// The Node object exists.
    pub exists: bool,
    /// Its Ready condition is True.
    pub ready: bool,
    /// Seconds since its Ready condition left True (since the Node was created, when it has
    /// none); `None` while Ready.
    pub not_ready_secs: Option<i64>,
    /// It carries the out-of-service taint.
    pub out_of_service: bool,
}

impl NodeState {
    /// A Node the API server says does not exist.
    pub fn gone() -> NodeState {
        NodeState::default()
    }

    /// The Node as the API server returned it.
    pub fn of(n: &Node, now_secs: i64) -> NodeState {
        let ready_cond =
            n.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let ready = ready_cond.is_some_and(|c| c.status == "True");
        let since = ready_cond
            .and_then(|c| c.last_transition_time.as_ref())
            .or(n.metadata.creation_timestamp.as_ref())
            .map(|t| (now_secs - t.0.as_second()).max(0));
        let taints = n.spec.as_ref().and_then(|s| s.taints.as_deref()).unwrap_or_default();
        NodeState {
            exists: true,
            ready,
            not_ready_secs: (!ready).then(|| since.unwrap_or(0)),
            out_of_service: taints.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT),
        }
    }

    /// Not Ready for at least `secs` seconds (and still there).
    pub fn not_ready_for(&self, secs: i64) -> bool {
        self.exists && !self.ready && self.not_ready_secs.is_some_and(|s| s >= secs)
    }
}

/// Why the etcd process of a pod that ran on `node` and whose object is gone has certainly
/// stopped, or why that is not known. `state` is the node as read (`None`: not read).
pub fn stopped_evidence(node: &str, state: Option<&NodeState>) -> Result<String, String> {
    const HOW: &str = "if that machine is gone for good, taint its Node node.kubernetes.io/out-of-service=nodeshutdown:NoExecute or delete the Node";
    match state {
        None => Err(format!("its node {node} could not be read, so it may still run there; {HOW}")),
        Some(s) if !s.exists => Ok(format!("its node {node} was deleted")),
        Some(s) if s.out_of_service => Ok(format!("its node {node} is declared out of service")),
        Some(s) if s.ready => Ok(format!("its node {node} is Ready (its kubelet stops containers of deleted pods)")),
        Some(s) => Err(format!(
            "its pod object is gone but it may still run on node {node}, which has not been Ready for {}s (down, or cut off from the API server); {HOW}",
            s.not_ready_secs.unwrap_or_default()
        )),
    }
}

/// The Node's only word that a deleted pod's process stopped is that it is Ready: evidence
/// that can be stale ([`NODE_READY_TRUSTED_AFTER_SECS`]), unlike a deleted Node or the
/// out-of-service taint.
pub fn only_ready_says_stopped(state: &NodeState) -> bool {
    state.exists && state.ready && !state.out_of_service
}

/// The `member-nodes` mark: the node each member pod was last seen on, by pod name.
pub type MemberNodes = BTreeMap<String, String>;

/// The mark as recorded (an unreadable one is empty: the planner then knows less, and says so).
pub fn parse_member_nodes(v: Option<&String>) -> MemberNodes {
    v.and_then(|j| serde_json::from_str(j).ok()).unwrap_or_default()
}

/// The mark after one look: every pod seen on a node is recorded there; a recorded pod that is
/// gone stays while it may still be a member (`members`: etcd's member pods, `None` when etcd
/// did not answer, so nothing is forgotten).
pub fn next_member_nodes<'a>(
    recorded: &MemberNodes,
    placed: impl Iterator<Item = (&'a str, &'a str)>,
    present: &dyn Fn(&str) -> bool,
    members: Option<&dyn Fn(&str) -> bool>,
) -> MemberNodes {
    let mut next: MemberNodes = recorded
        .iter()
        .filter(|(pod, _)| present(pod) || members.is_none_or(|is_member| is_member(pod)))
        .map(|(p, n)| (p.clone(), n.clone()))
        .collect();
    for (pod, node) in placed {
        next.insert(pod.to_string(), node.to_string());
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, Taint};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn node(ready: &str, since: i64, taints: &[&str]) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(
                    taints
                        .iter()
                        .map(|k| Taint { key: k.to_string(), effect: "NoExecute".into(), ..Default::default() })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::from_second(since).unwrap())),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_whose_kubelet_stopped_posting_is_not_ready_since_the_transition() {
        let s = NodeState::of(&node("Unknown", 1000, &[]), 1090);
        assert_eq!(s, NodeState { exists: true, ready: false, not_ready_secs: Some(90), out_of_service: false });
        assert!(s.not_ready_for(60) && !s.not_ready_for(91));
        let s = NodeState::of(&node("True", 1000, &[OUT_OF_SERVICE_TAINT]), 1090);
        assert!(s.ready && s.out_of_service && s.not_ready_secs.is_none() && !s.not_ready_for(0));
        assert!(!NodeState::gone().not_ready_for(0), "a deleted node is not a node that is not Ready");
    }

    /// The rule of evidence, case by case: only a deleted Node, an out-of-service taint or a
    /// Ready kubelet show that a deleted pod's process stopped.
    #[test]
    fn only_the_node_shows_that_a_deleted_pods_process_stopped() {
        let cut_off = NodeState::of(&node("Unknown", 0, &[]), 600);
        let e = stopped_evidence("n1", Some(&cut_off)).unwrap_err();
        assert!(e.contains("may still run on node n1") && e.contains("600s") && e.contains("out-of-service"), "{e}");
        assert!(stopped_evidence("n1", None).is_err(), "a node that could not be read proves nothing");
        let declared = NodeState::of(&node("Unknown", 0, &[OUT_OF_SERVICE_TAINT]), 600);
        assert!(stopped_evidence("n1", Some(&declared)).unwrap().contains("out of service"));
        assert!(stopped_evidence("n1", Some(&NodeState::gone())).unwrap().contains("deleted"));
        assert!(stopped_evidence("n1", Some(&NodeState::of(&node("True", 0, &[]), 600))).unwrap().contains("Ready"));
        // Another taint (the node controller's own) is no declaration.
        let tainted = NodeState::of(&node("False", 0, &["node.kubernetes.io/unreachable"]), 600);
        assert!(stopped_evidence("n1", Some(&tainted)).is_err());
    }

    #[test]
    fn the_mark_keeps_a_gone_pods_node_while_it_may_be_a_member() {
        let recorded =
            MemberNodes::from([("a".into(), "n1".into()), ("b".into(), "n2".into()), ("c".into(), "n3".into())]);
        let placed = [("a", "n4"), ("d", "n1")];
        let present = |p: &str| p == "a" || p == "d";
        // etcd answered: b is still a member (its pod gone), c is not any more.
        let member = |p: &str| p != "c";
        let next = next_member_nodes(&recorded, placed.into_iter(), &present, Some(&member));
        assert_eq!(
            next,
            MemberNodes::from([("a".into(), "n4".into()), ("b".into(), "n2".into()), ("d".into(), "n1".into())])
        );
        // etcd did not answer: nothing recorded is forgotten.
        let next = next_member_nodes(&recorded, [].into_iter(), &present, None);
        assert_eq!(next, recorded);
        assert_eq!(parse_member_nodes(Some(&"not json".to_string())), MemberNodes::new());
        assert_eq!(parse_member_nodes(Some(&serde_json::to_string(&recorded).unwrap())), recorded);
    }
}

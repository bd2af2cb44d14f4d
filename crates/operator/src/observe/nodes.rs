//! The Nodes node-loss decisions need (`nodes`): those of member pods that are not Ready, and
//! those recorded for members whose pod object is gone or waits unscheduled. Read one by one, only then: a healthy
//! cluster costs no call, and an operator without permission to read Nodes still works (it
//! never assumes a node lost; `Observed::nodes_error` says why).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use crate::nodes::NodeState;
use crate::observed::Observed;

/// The names of the Nodes worth reading for `o`.
pub(super) fn wanted(o: &Observed) -> BTreeSet<String> {
    let member = |pod: &str| o.etcd.as_ref().is_none_or(|e| e.member_for_pod(pod).is_some());
    let unready = o.pods.values().filter(|p| !p.ready).filter_map(|p| p.node.clone());
    // Recorded for a member whose pod object is gone, or was made again and waits unscheduled
    // (its node may have been deleted, its volume bound there).
    let unplaced = |pod: &str| o.pods.get(pod).is_none_or(|p| p.node.is_none() && !p.ready);
    let gone = o.member_nodes.iter().filter(|(pod, _)| unplaced(pod) && member(pod)).map(|(_, n)| n.clone());
    unready.chain(gone).collect()
}

/// Reads `names`; the first error stops the reading and is returned (nothing is assumed from a
/// partial read).
pub(super) async fn read(
    client: &kube::Client,
    names: &BTreeSet<String>,
    now_secs: i64,
) -> Result<BTreeMap<String, NodeState>, String> {
    let api: Api<Node> = Api::all(client.clone());
    let mut out = BTreeMap::new();
    for name in names {
        let state = match api.get_opt(name).await {
            Ok(Some(n)) => NodeState::of(&n, now_secs),
            Ok(None) => NodeState::gone(),
            Err(e) => return Err(format!("reading Node {name}: {e}")),
        };
        out.insert(name.clone(), state);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{EtcdState, MemberState, PodState};

    #[test]
    fn only_nodes_of_unready_pods_and_of_gone_members_are_read() {
        let pod = |name: &str, node: &str, ready: bool| {
            (name.to_string(), PodState { name: name.into(), node: Some(node.into()), ready, ..Default::default() })
        };
        let mut o = Observed {
            pods: BTreeMap::from([pod("a", "n1", true), pod("b", "n2", false)]),
            member_nodes: BTreeMap::from([
                ("a".into(), "n1".into()),
                ("b".into(), "n2".into()),
                ("c".into(), "n3".into()),
                ("d".into(), "n4".into()),
            ]),
            ..Default::default()
        };
        // etcd not answering: every gone pod may be a member.
        assert_eq!(wanted(&o), BTreeSet::from(["n2".into(), "n3".into(), "n4".into()]));
        let m = |pod: &str| MemberState { pod: pod.into(), ..Default::default() };
        o.etcd = Some(EtcdState { members: vec![m("a"), m("b"), m("c")], ..Default::default() });
        assert_eq!(wanted(&o), BTreeSet::from(["n2".into(), "n3".into()]), "d is no member");
        // c's pod made again, waiting unscheduled: its recorded node is still read (it may have
        // been deleted); once scheduled, only the node it runs on.
        let waiting = PodState { name: "c".into(), ..Default::default() };
        o.pods.insert("c".into(), waiting);
        assert_eq!(wanted(&o), BTreeSet::from(["n2".into(), "n3".into()]));
        o.pods.insert("c".into(), pod("c", "n5", false).1);
        assert_eq!(wanted(&o), BTreeSet::from(["n2".into(), "n5".into()]));
    }
}

//! The PodDisruptionBudget of each cluster: voluntary disruptions (a `kubectl drain`, a node
//! upgrade, the cluster autoscaler) take at most one member at a time.
//!
//! Choice: `minAvailable: n − 1` (an integer), i.e. "at most one member down", counting a
//! member that is already down, where `n` is the most members the cluster has or is about to
//! have: the spec's size, etcd's members (voters and learners), and the member pods there are
//! or that the planned step creates, counted together by name (the disruption controller counts
//! every pod the selector matches; a member whose pod is gone is down without a pod to show it,
//! and a pod whose member left with a scale-down is Ready without a vote). Not the spec's size
//! alone: while a 5-member cluster scales down to 3, or an emptyDir member is replaced (a
//! fourth member joins first), `size − 1` would let a drain take two or three members at once,
//! a quorum. A budget that must rise for a step is applied before
//! the step (the controller holds a step that adds a pod until it is), one that may fall after
//! the pods are gone (until then it only asks more). Not `maxUnavailable: 1`: for pods whose
//! controller is a custom resource the disruption controller needs a scale subresource to turn
//! `maxUnavailable` into a count, and without it allows no eviction at all. Not `minAvailable:
//! quorum`: with 5 members that allows two down at once, leaving a cluster one failure from
//! losing its quorum. A one-member cluster on an emptyDir gets `minAvailable: 1` (an eviction
//! would delete the only copy of its data; drain waits until the user scales up or moves to a
//! PVC); on a PVC it gets 0 (the member restarts on its volume).
//!
//! The API version is found through discovery at start: `policy/v1` (Kubernetes 1.21+), else
//! `policy/v1beta1`, else none (reported once; clusters run without a budget).

use etcd_operator_api::EtcdCluster;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};

use crate::observed::Observed;
use crate::planner::Step;

/// `minAvailable` for the cluster as observed with the pods `step` creates, `None` when there
/// is nothing to protect yet (the spec is invalid).
pub fn min_available(o: &Observed, step: &Step) -> Option<i32> {
    let d = o.desired.as_ref().ok()?;
    // Pods and members by name, together: a member whose pod is gone is down though no pod
    // shows it, and a pod of no member (leaving with a scale-down) is Ready without a vote.
    let mut names: std::collections::BTreeSet<&str> =
        o.pods.values().filter(|p| !p.deleting).map(|p| p.name.as_str()).collect();
    names.extend(created_by(step));
    let joining = usize::from(matches!(step, Step::AddLearner(_)));
    if let Some(e) = &o.etcd {
        names.extend(e.members.iter().map(|m| m.pod.as_str()).filter(|p| !p.is_empty()));
    }
    let members = o.etcd.as_ref().map_or(0, |e| e.members.len() + joining);
    let n = d.size.max(members).max(names.len());
    Some(match n {
        1 if d.pod.persistent_volume_claim_spec.is_some() => 0,
        1 => 1,
        n => i32::try_from(n).unwrap_or(i32::MAX) - 1,
    })
}

/// The member pods `step` creates.
fn created_by(step: &Step) -> Vec<&str> {
    match step {
        Step::Bootstrap(ms) => ms.iter().map(|m| m.name.as_str()).collect(),
        Step::AddLearner(m) | Step::CreatePod(m) => vec![m.name.as_str()],
        Step::Recover(r) => vec![r.member.name.as_str()],
        _ => vec![],
    }
}

/// The budget object for `cluster` in the given API version (both versions have this shape).
pub fn budget(cluster: &EtcdCluster, ar: &ApiResource, min_available: i32) -> serde_json::Value {
    let name = cluster.name_any();
    let labels = crate::naming::member_labels(cluster);
    serde_json::json!({
        "apiVersion": ar.api_version,
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": name,
            "namespace": cluster.namespace(),
            "labels": crate::naming::selector_labels(&name),
            "ownerReferences": [crate::naming::owner_ref(cluster)],
        },
        "spec": {
            "minAvailable": min_available,
            "selector": {"matchLabels": labels},
        },
    })
}

/// The budget to apply now, given the one in place (`have`): `want`, or `None` when nothing is
/// to change. It never falls while etcd could not be seen (`etcd_seen`): the members etcd has
/// are unknown then, and a scale-down's leaving members may still be voters whose pods are gone.
pub fn to_apply(want: i32, have: Option<i32>, etcd_seen: bool) -> Option<i32> {
    match have {
        Some(h) if h == want => None,
        Some(h) if h > want && !etcd_seen => None,
        _ => Some(want),
    }
}

/// `minAvailable` of an existing budget object.
pub fn min_available_of(pdb: &DynamicObject) -> Option<i32> {
    pdb.data.get("spec")?.get("minAvailable")?.as_i64().map(|v| v as i32)
}

/// Which PodDisruptionBudget API the server serves.
pub async fn discover(client: &Client) -> Option<ApiResource> {
    for version in ["v1", "v1beta1"] {
        let gv = format!("policy/{version}");
        match client.list_api_group_resources(&gv).await {
            Ok(list) if list.resources.iter().any(|r| r.name == "poddisruptionbudgets") => {
                return Some(ApiResource {
                    group: "policy".into(),
                    version: version.into(),
                    api_version: gv,
                    kind: "PodDisruptionBudget".into(),
                    plural: "poddisruptionbudgets".into(),
                });
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(group_version = %gv, error = %e, "not served"),
        }
    }
    None
}

/// Create or update the cluster's budget (server-side apply).
pub async fn apply(client: &Client, cluster: &EtcdCluster, ar: &ApiResource, min_available: i32) -> kube::Result<()> {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
    let obj = budget(cluster, ar, min_available);
    api.patch(&cluster.name_any(), &PatchParams::apply(crate::OPERATOR_NAME).force(), &Patch::Apply(&obj)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    /// While etcd cannot be seen, the members it has are unknown (a 5 → 3 scale-down's leaving
    /// members may still be voters, their pods already gone): the budget never falls then; it
    /// still rises, and falls once etcd answers.
    #[test]
    fn the_budget_never_falls_while_etcd_cannot_be_seen() {
        let rows = [
            ("unchanged", 4, Some(4), true, None),
            ("rises, etcd seen", 4, Some(2), true, Some(4)),
            ("rises, etcd unseen", 4, Some(2), false, Some(4)),
            ("falls, etcd seen", 2, Some(4), true, Some(2)),
            ("would fall, etcd unseen: kept", 2, Some(4), false, None),
            ("none yet, etcd unseen", 2, None, false, Some(2)),
        ];
        for (what, want, have, seen, expect) in rows {
            assert_eq!(super::to_apply(want, have, seen), expect, "{what}");
        }
    }

    use super::*;
    use crate::validation::validate;
    use etcd_operator_api::EtcdClusterSpec;

    fn observed(size: i32, pvc: bool) -> Observed {
        let mut spec = EtcdClusterSpec { size, ..Default::default() };
        if pvc {
            spec.pod = Some(etcd_operator_api::cluster::PodPolicy {
                persistent_volume_claim_spec: Some(Default::default()),
                ..Default::default()
            });
        }
        Observed { desired: validate("ex", &spec), ..Default::default() }
    }

    fn idle() -> Step {
        crate::planner::wait(crate::planner::WaitReason::Stable, "")
    }

    /// Evictions allowed at once = members − minAvailable (when all are up).
    #[test]
    fn at_most_one_member_may_be_evicted_and_never_the_only_copy() {
        for size in 2..=7 {
            let min = min_available(&observed(size, false), &idle()).unwrap();
            assert_eq!(size - min, 1, "size {size}: exactly one eviction at a time");
            assert!(min > size / 2 || size == 2, "size {size}: a quorum stays up");
        }
        assert_eq!(min_available(&observed(1, false), &idle()), Some(1), "emptyDir: the pod is the only copy");
        assert_eq!(min_available(&observed(1, true), &idle()), Some(0), "PVC: the member restarts on its volume");
        assert_eq!(min_available(&Observed::default(), &idle()), None, "no valid spec: nothing to protect yet");
    }

    /// `voters` voters (`ready` of them with a Ready pod), a learner or not, `orphans` pods of no
    /// member, the spec asking for `size`.
    fn cluster(size: i32, voters: u64, learner: bool, orphans: usize) -> Observed {
        use crate::observed::{EtcdState, MemberState, PodState};
        let mut o = observed(size, false);
        let mut e = EtcdState::default();
        let names =
            (1..=voters).map(|i| (i, format!("ex-m{i}"), false)).chain(learner.then(|| (9, "ex-l".into(), true)));
        for (id, pod, is_learner) in names {
            e.members.push(MemberState { id, pod: pod.clone(), is_learner, ..Default::default() });
            o.pods.insert(pod.clone(), PodState { name: pod, ready: true, ..Default::default() });
        }
        for i in 0..orphans {
            o.pods.insert(format!("ex-o{i}"), PodState { name: format!("ex-o{i}"), ready: true, ..Default::default() });
        }
        o.etcd = Some(e);
        o
    }

    /// What the disruption controller allows (`currentHealthy − minAvailable`), evicting voters
    /// first (the worst case), never leaves fewer than a majority of the voters up (clusters of
    /// three or more: a majority of 2 is 2), nor takes more than one member at a time: while
    /// the cluster scales down (more members than the spec asks), while a replacement joins
    /// (learner), beside pods of no member, before and after the step that adds a pod.
    #[test]
    fn no_drain_takes_a_quorum_whatever_the_membership_and_the_step() {
        use crate::planner::NewMember;
        let joining = |name: &str| {
            NewMember::joining(name.into(), vec![], crate::version::Version::parse("3.5.1").unwrap(), false)
        };
        for size in 1..=7 {
            for voters in 1..=7u64 {
                for learner in [false, true] {
                    for orphans in 0..=2 {
                        let o = cluster(size, voters, learner, orphans);
                        let steps = [idle(), Step::AddLearner(joining("ex-new")), Step::CreatePod(joining("ex-m1"))];
                        for step in steps {
                            let min = min_available(&o, &step).unwrap() as usize;
                            // The pods the step creates count once they exist, Ready at worst.
                            let healthy = o.pods.len() + usize::from(matches!(step, Step::AddLearner(_)));
                            let allowed = healthy.saturating_sub(min);
                            let case =
                                format!("size {size}, {voters} voters, learner {learner}, {orphans} orphans, {step:?}");
                            assert!(allowed <= 1, "{case}: {allowed} evictions at once");
                            if voters >= 3 {
                                let left = voters as usize - allowed.min(voters as usize);
                                assert!(left > voters as usize / 2, "{case}: {left} of {voters} voters left");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The two situations of the issue, as a drain meets them.
    #[test]
    fn a_scale_down_or_a_replacement_keeps_the_budget_at_the_members_there_are() {
        // 5 → 3: the spec says 3, five members are there until they are removed.
        assert_eq!(min_available(&cluster(3, 5, false, 0), &idle()), Some(4));
        assert_eq!(min_available(&cluster(3, 4, false, 0), &idle()), Some(3));
        // An emptyDir member replaced: a learner joins a 3-member cluster first.
        assert_eq!(min_available(&cluster(3, 3, true, 0), &idle()), Some(3));
        // Raised before the step adds the learner's pod.
        let new = crate::planner::NewMember::joining(
            "ex-new".into(),
            vec![],
            crate::version::Version::parse("3.5.1").unwrap(),
            false,
        );
        assert_eq!(min_available(&cluster(3, 3, false, 0), &Step::AddLearner(new)), Some(3));
    }

    /// A member whose pod is gone (evicted, deleted, not made again yet) is down even though no
    /// pod shows it, and a pod of no member (one that left with a scale-down and is still
    /// stopping) is Ready without holding a vote: beside each other, no eviction is allowed, or
    /// a drain would take a second voter (seen in e2e: 5 → 3, a member evicted, then another).
    #[test]
    fn a_member_without_its_pod_counts_as_down_beside_pods_of_no_member() {
        for size in 1..=5 {
            for voters in 3..=5u64 {
                for orphans in 0..=2 {
                    for gone in 1..=2u64 {
                        let mut o = cluster(size, voters, false, orphans);
                        for i in 1..=gone {
                            o.pods.remove(&format!("ex-m{i}"));
                        }
                        let min = min_available(&o, &idle()).unwrap() as usize;
                        let healthy = o.pods.values().filter(|p| p.ready).count();
                        let allowed = healthy.saturating_sub(min);
                        assert_eq!(
                            allowed, 0,
                            "size {size}, {voters} voters of which {gone} without a pod, {orphans} orphans: \
                             minAvailable {min} lets {allowed} more go"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_budget_selects_exactly_the_members_of_its_cluster() {
        let mut c = EtcdCluster::new("ex", EtcdClusterSpec { size: 3, ..Default::default() });
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("uid-1".into());
        let ar = ApiResource {
            group: "policy".into(),
            version: "v1beta1".into(),
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        };
        let b = budget(&c, &ar, 2);
        assert_eq!(b["apiVersion"], "policy/v1beta1");
        assert_eq!(b["spec"]["minAvailable"], 2);
        let sel = b["spec"]["selector"]["matchLabels"].as_object().unwrap();
        for (k, v) in crate::naming::member_labels(&c) {
            assert_eq!(sel[&k], v.as_str(), "selects on {k}");
        }
        assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    }
}

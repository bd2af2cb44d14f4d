//! Out of the operator's sight is not down. A member pod's readiness probe is etcd's own
//! `/health` (a linearizable read: it passes only on a member with a leader, through a quorum),
//! run by the kubelet beside the member; the operator's calls go over the pod network with its
//! own client, login and TLS identity. When those calls fail (a timeout of its client, a login
//! or TLS handshake refused, a network policy) while the pods stay Ready, what is known is that
//! the operator cannot reach the members, not that the cluster lost its quorum: that is what is
//! reported (`MembersUnreachable`, `Available=Unknown`), and nothing is changed either way.
//! The kubelet notices a member that stopped within its probe's few failures; then the quorum
//! loss is reported as such.

use super::{Step, WaitReason, wait};
use crate::observed::{EtcdState, MemberState, Observed};

/// Voters that gave the operator no status for what may be its own trouble, their pods Ready.
fn out_of_sight<'a>(o: &'a Observed, etcd: &'a EtcdState) -> impl Iterator<Item = &'a MemberState> {
    etcd.voters().filter(|m| m.status.is_none() && o.unreached.contains_key(&m.pod) && pod_ready(o, &m.pod))
}

fn pod_ready(o: &Observed, pod: &str) -> bool {
    o.pods.get(pod).is_some_and(|p| p.ready && !p.deleting && !p.is_dead())
}

/// etcd answered, fewer than a quorum of voters healthy to the operator's eyes: the wait when
/// the voters it could not ask but whose pods are Ready make up the quorum.
pub(super) fn with_etcd(o: &Observed, etcd: &EtcdState, healthy: usize) -> Option<Step> {
    let voters = etcd.voters().count();
    let unseen: Vec<&str> = out_of_sight(o, etcd).map(|m| m.pod.as_str()).collect();
    if unseen.is_empty() || healthy + unseen.len() < EtcdState::quorum_of(voters) {
        return None;
    }
    Some(wait(
        WaitReason::MembersUnreachable,
        format!(
            "operator cannot reach members {} ({}); their pods are Ready (etcd's own health check, a read through the quorum, passes), so the cluster is most likely serving: {healthy} of {voters} voting members answered the operator; no change until it sees a quorum",
            unseen.join(", "),
            errors(o, &unseen)
        ),
    ))
}

/// No member answered: the wait when the member pods the operator could not reach for what
/// may be its own trouble, Ready, make up a quorum of the pods.
pub(super) fn without_etcd(o: &Observed) -> Option<Step> {
    let unseen: Vec<&str> =
        o.pods.keys().filter(|p| o.unreached.contains_key(*p) && pod_ready(o, p)).map(String::as_str).collect();
    if unseen.is_empty() || unseen.len() < EtcdState::quorum_of(o.pods.len()) {
        return None;
    }
    Some(wait(
        WaitReason::MembersUnreachable,
        format!(
            "operator cannot reach members: {}; {} of {} member pods are Ready (etcd's own health check, a read through the quorum, passes), so the cluster is most likely serving; no change until the operator reaches it",
            errors(o, &unseen),
            unseen.len(),
            o.pods.len()
        ),
    ))
}

/// `pod: error` of each, or the one error when all are the same.
fn errors(o: &Observed, pods: &[&str]) -> String {
    let errs: Vec<&str> = pods.iter().filter_map(|p| o.unreached.get(*p).map(String::as_str)).collect();
    let mut distinct = errs.clone();
    distinct.dedup();
    match distinct.as_slice() {
        [one] => one.to_string(),
        _ => pods.iter().zip(errs).map(|(p, e)| format!("{p}: {e}")).collect::<Vec<_>>().join("; "),
    }
}

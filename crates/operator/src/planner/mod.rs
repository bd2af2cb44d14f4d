//! The planner: a pure function from what was observed to the next single safe step.
//!
//! It holds the domain rules of running etcd:
//! - never change membership without a quorum of healthy voting members; restarting a member
//!   on its own volume is not a change (it is how a quorum comes back) and needs none;
//! - recover from quorum loss only when the user opted in (`spec.recovery.quorumLoss`);
//! - one membership change at a time, and only once the previous one is healthy;
//! - scale up by adding a *learner* and promoting it when it has caught up;
//! - scale down one member at a time, never the leader while another member can go;
//! - never remove the last copy of data, never bootstrap twice: a cluster that formed is never
//!   bootstrapped again; a volume must prove it holds its member's data before the member
//!   restarts on it;
//! - a failing member (image pull, crash loop) is surfaced; it holds up only what needs it, is
//!   made again once the spec changes, and is replaced when it keeps crashing and holds nothing
//!   the others lack (`failing`).
//!
//! Steps that need a quorum check compute it against the membership *after* the step.

pub mod auth;
pub mod certificates;
#[cfg(test)]
mod certificates_world;
pub mod failing;
pub mod hibernation;
pub mod maintenance;
mod membership;
mod node_loss;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod proptests_safety;
pub mod recovery;
pub mod replay;
mod rollout;
mod step;
pub mod survivors;
pub mod switchover;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_auth;
#[cfg(test)]
mod tests_cert_manager;
#[cfg(test)]
mod tests_certificates;
#[cfg(test)]
mod tests_day2;
#[cfg(test)]
mod tests_defrag_overlap;
#[cfg(test)]
mod tests_failures;
#[cfg(test)]
mod tests_healing;
#[cfg(test)]
mod tests_membership;
#[cfg(test)]
mod tests_node_loss;
#[cfg(test)]
mod tests_pod_security;
#[cfg(test)]
mod tests_recovery;
#[cfg(test)]
mod tests_restore;
#[cfg(test)]
mod tests_tls_material;
#[cfg(test)]
mod tests_tls_transition;
#[cfg(test)]
mod tests_tls_transition_generated;
#[cfg(test)]
mod tests_tls_transition_played;
#[cfg(test)]
mod tests_unreachable;
#[cfg(test)]
mod tests_upgrade;
#[cfg(test)]
mod tests_upgrade_flags;
#[cfg(test)]
mod tests_upgrade_replay;
#[cfg(test)]
mod tests_volumes;
mod tls_material;
pub mod tls_transition;
mod unreachable;
pub mod upgrade;
mod volumes;

use crate::observed::{EtcdState, Observed};
use crate::validation::Desired;
use crate::version::Version;

pub use step::*;

/// Decide the next step for one cluster.
pub fn plan(o: &Observed) -> Step {
    with_volumes(o, tls_material::gate(o, next_step(o)))
}

/// What a member made or restarted takes from its volume, whatever the step: the claim it
/// mounts (named by whoever made it); for a restart, the raft index its data must reach; and
/// root, when the volume is marked as holding root's data (`pod_security`), as for one that
/// restores from a backup volume marked as root's (set by the step). Every other member runs as
/// the spec says.
fn with_volumes(o: &Observed, mut step: Step) -> Step {
    let mark = |m: &mut NewMember| {
        m.root_data |= root_data(o, &m.name);
        m.claim = o.pvcs.get(&m.name).filter(|v| !v.deleting).map(|v| v.name.clone());
        if m.restart {
            m.acknowledged_index = o.acknowledged.get(&m.name).copied().unwrap_or(0);
        }
    };
    match &mut step {
        Step::CreatePod(m) | Step::AddLearner(m) => mark(m),
        Step::Bootstrap(ms) => ms.iter_mut().for_each(mark),
        Step::Recover(r) => mark(&mut r.member),
        _ => {}
    }
    step
}

/// Whether `pod`'s volume is marked as holding root's data.
pub(crate) fn root_data(o: &Observed, pod: &str) -> bool {
    o.pvcs.get(pod).is_some_and(|v| v.root_data)
}

fn next_step(o: &Observed) -> Step {
    let d = match &o.desired {
        Err(errs) => {
            return wait(WaitReason::InvalidSpec, format!("spec refused, nothing was changed: {}", errs.join("; ")));
        }
        Ok(d) => d,
    };
    if o.paused {
        return wait(WaitReason::Paused, "spec.paused is true: the operator makes no change to this cluster");
    }
    if !o.services_ready {
        return Step::CreateServices;
    }
    if let Some(step) = hibernation::next(o, d) {
        return step;
    }
    if let Some(step) = recovery::in_progress(o) {
        return step;
    }
    if let Some(step) = volumes::restart(o, d) {
        return step;
    }
    if let Some(step) = failing::remake_on_volume(o, d) {
        return step;
    }
    match &o.etcd {
        None => membership::without_etcd(o, d),
        Some(etcd) => membership::with_etcd(o, d, etcd),
    }
}

/// How long a drained member keeps answering before it leaves when the client Service's
/// endpoints are not known (no `discovery.k8s.io/v1`, or its watch not listed yet): the time
/// for the endpoints controller and every node's proxy to drop it from the client Service.
pub const DRAIN_SECS: i64 = 3;
/// Where they are known: how long a drained member must have been gone from the client
/// Service's EndpointSlices before it leaves. A rule of thumb for every node's proxy to follow:
/// kube-proxy applies a change at most once per `minSyncPeriod` (1 s by default, iptables and
/// nftables alike), after its own watch saw it; the margin covers a slow rule sync.
pub const PROXY_SYNC_MS: u64 = 2000;
/// The longest a drain waits for the endpoints to drop the member (an EndpointSlice controller
/// that is down or behind): then the member leaves as without the watch, later.
pub const DRAIN_MAX_SECS: i64 = 10;
/// A member drained this long ago that is still there (the change was called off) takes client
/// traffic again.
pub const DRAIN_STALE_SECS: i64 = 60;

/// Before a member leaves on purpose (removed, or its pod deleted to restart it) it is drained
/// from the client Service: the step for that, or the wait until the Service no longer routes
/// to it, or `None` once done (or when its pod is going anyway). Done once the client Service's
/// EndpointSlices have not listed it for [`PROXY_SYNC_MS`], counted from a drop the operator saw
/// after the drain began (so a cache that never saw the member served again ends nothing), or
/// after [`DRAIN_MAX_SECS`]; after [`DRAIN_SECS`] where the endpoints are not known. A fenced
/// member is out of the Service since its fence, which nothing undoes.
pub(crate) fn drained_first(o: &Observed, pod: &str) -> Option<Step> {
    let p = o.pods.get(pod)?;
    if p.deleting || p.is_dead() {
        return None;
    }
    let unlisted = o.client_endpoints.as_ref().and_then(|ep| ep.unlisted_for(pod));
    if p.fenced && p.serving == Some(false) && unlisted.is_some_and(|ms| ms >= PROXY_SYNC_MS) {
        return None;
    }
    // A drain gone stale (`DRAIN_STALE_SECS`: the step after it did not come, an operator
    // restart) is made again: the stale one is about to be served again (`marks`).
    let (Some(false), Some(secs)) = (p.serving, p.drained_secs().filter(|s| *s < DRAIN_STALE_SECS)) else {
        return Some(Step::Drain { pod: pod.to_string() });
    };
    let drained_ms = u64::try_from(p.drained_ms.unwrap_or_default()).unwrap_or(0);
    let why = match (&o.client_endpoints, unlisted) {
        (None, _) if secs >= DRAIN_SECS => return None,
        (None, _) => format!("member {pod} was taken out of the client Service; it leaves in a moment"),
        (Some(_), _) if secs >= DRAIN_MAX_SECS => return None,
        (Some(_), None) => {
            format!("member {pod} was taken out of the client Service; waiting for its endpoints to drop it")
        }
        // A pod without an address was never an endpoint.
        (Some(_), Some(_)) if p.ip.is_none() => return None,
        // Gone from the endpoints since before the drain: a cache that may not have seen the
        // member served again is no evidence.
        (Some(_), Some(ms)) if ms > drained_ms => {
            format!("member {pod} was taken out of the client Service; waiting for its endpoints to change")
        }
        (Some(_), Some(ms)) if ms >= PROXY_SYNC_MS => return None,
        (Some(_), Some(_)) => {
            format!("member {pod} is gone from the client Service's endpoints; every node's proxy follows")
        }
    };
    Some(wait(WaitReason::MemberDraining, why))
}

/// Whether the defragmentation policy could pick a member now (observation then also asks
/// whether a backup runs).
pub fn may_defragment(o: &Observed) -> bool {
    let (Ok(d), Some(etcd)) = (&o.desired, &o.etcd) else { return false };
    if !maintenance::asked_not_done(o, etcd).is_empty() {
        return true;
    }
    let in_use = maintenance::least_in_use(etcd);
    d.maintenance.defrag.is_some_and(|rule| {
        etcd.voters().filter_map(|m| m.status.as_ref()).any(|s| rule.is_due(s.db_size, s.db_size_in_use.min(in_use)))
    })
}

/// Version for members created now. Scaling never changes versions: a new member runs the
/// lowest version any pod runs (etcd refuses a member older than the cluster version, and the
/// lowest pod version is never older). A brand-new cluster starts at the desired version.
pub(crate) fn version_for_new_member(o: &Observed, d: &Desired) -> Version {
    o.pods.values().filter_map(|p| Version::parse(&p.version).ok()).min().unwrap_or_else(|| d.version.clone())
}

/// `name=peerURL` pairs of the current membership, named after their pods.
pub(crate) fn initial_cluster_of(etcd: &EtcdState) -> Vec<(String, String)> {
    etcd.members.iter().flat_map(|m| m.peer_urls.iter().map(|u| (m.pod.clone(), u.clone()))).collect()
}

/// `name=peerURL` for a member about to be created.
pub(crate) fn peer_of(o: &Observed, d: &Desired, member: &str) -> (String, String) {
    let host = crate::naming::member_host(member, &o.name, &o.namespace, &d.pod.cluster_domain);
    (member.to_string(), crate::naming::peer_url(d.tls_stage.peer_scheme(), &host))
}

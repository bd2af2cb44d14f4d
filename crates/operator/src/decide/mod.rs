//! One reconcile's decisions, from the observation alone: [`decide`] returns the [`Plan`] that
//! `controller/reconcile.rs` executes in a fixed order (certificates, marks,
//! PodDisruptionBudget, the upkeep beside the step, the step, status, requeue). Pure.
//!
//! The certificate planner runs once per observation, here: the controller writes the
//! certificates the plan says and, after a write, observes and decides again (the material and
//! the pod-spec hash depend on them); status reports the same decision.

use std::time::Duration;

use etcd_operator_api::{EtcdCluster, EtcdClusterStatus};

use crate::auth::Upkeep;
use crate::marks::AnnotationChanges;
use crate::network_policy;
use crate::observed::Observed;
use crate::planner::{self, Step, WaitReason};
use crate::tls::auto::decision::Decision;

#[cfg(test)]
mod tests;

/// How often a settled cluster's etcd health is checked. Pod failures reach the operator as
/// watch events at once (readiness flips within 15 s); this period catches what only etcd
/// knows (leader changes, alarms, db size) for about four gRPC calls per cluster.
pub const HEALTH_CHECK_PERIOD: Duration = Duration::from_secs(15);
/// Requeue while a step is in progress (learner catching up, member starting or upgrading, a
/// change etcd refused for now). Pod events wake the controller too; this catches what only
/// etcd shows.
pub const PROGRESS_PERIOD: Duration = Duration::from_millis(500);

/// Requeue while a member drains: a removal waits at most this long past the drain's end.
pub const DRAIN_POLL: Duration = Duration::from_millis(200);

/// Everything one reconcile does, as decided from one observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The one step (`planner::plan`).
    pub step: Step,
    /// Durable marks on the EtcdCluster, written before anything else (`marks`).
    pub marks: AnnotationChanges,
    /// Member pods to give the serving label (`marks::pods_to_label`), but fenced ones.
    pub unlabelled: Vec<String>,
    /// Member pods to take out of the client Service, and to serve again, on a person's
    /// request (`fencing`).
    pub fencing: crate::fencing::Fencing,
    /// Upgraded members back at their version (`marks::upgrades_confirmed`).
    pub confirmed: Vec<String>,
    /// The PodDisruptionBudget's `minAvailable` for the observation and the step
    /// (`disruption_budget::min_available`); `None`: no budget is kept.
    pub min_available: Option<i32>,
    /// Member PVCs to grow, with the size asked (`volume_size::to_grow`).
    pub volumes: Vec<(String, String)>,
    /// `spec.auth`'s Secrets to keep (`planner::auth::upkeep`).
    pub auth: Option<Upkeep>,
    /// The NetworkPolicy against the one the cache holds (`network_policy::decide`), with the
    /// default the marks above leave.
    pub network_policy: network_policy::Action,
    /// `spec.TLS.auto`'s next write or why there is none (`planner::certificates::plan`):
    /// written first; status reports it.
    pub certificates: Decision,
    /// The new status.
    pub status: EtcdClusterStatus,
    /// When to look again once the step went as planned.
    pub requeue: Duration,
}

/// The plan for `cluster` as observed in `o`, at `now` (RFC 3339). `spec_json`: the spec as
/// the last-valid-spec mark records it.
pub fn decide(o: &Observed, cluster: &EtcdCluster, spec_json: &str, now: &str) -> Plan {
    use kube::ResourceExt;
    let step = planner::plan(o);
    let certificates = planner::certificates::plan(o);
    let prev = cluster.status.clone().unwrap_or_default();
    let mut status = crate::status::compute_planned(o, &step, &certificates, &prev, cluster.metadata.generation, now);
    let fencing = crate::fencing::decide(o, &step);
    let switchover = planner::switchover::judge(o);
    crate::status::requests::update(&mut status.conditions, &fencing, &switchover, &step, now);
    let mut marks = crate::marks::cluster_annotations(o, cluster.annotations(), spec_json, now);
    match &switchover {
        // A request for any member names the one chosen, so that the next reconcile sees it done.
        planner::switchover::Switchover::Move { to_pod, .. }
            if o.switchover.as_deref() == Some("")
                && matches!(step, Step::MoveLeader { purpose: planner::Purpose::Switchover, .. }) =>
        {
            marks.insert(crate::naming::SWITCHOVER_ANNOTATION.into(), Some(to_pod.clone()));
        }
        // The request goes once its outcome is in the status the cluster had (this reconcile's
        // status patch may not happen: a reconcile can end before it), so that whoever asked
        // always finds the answer.
        planner::switchover::Switchover::Done(_) | planner::switchover::Switchover::Refused(_)
            if recorded(&prev.conditions, &status.conditions, crate::status::requests::SWITCHOVER) =>
        {
            marks.insert(crate::naming::SWITCHOVER_ANNOTATION.into(), None);
        }
        _ => {}
    }
    let hibernation = o.desired.as_ref().map(|d| planner::hibernation::judge(o, d));
    if let Ok(h) = &hibernation {
        crate::status::requests::update_hibernation(&mut status.conditions, h, now);
    }
    match &hibernation {
        // Recorded before the first pod is deleted: from then on the pods go, whatever else.
        Ok(planner::hibernation::Hibernation::Begin) => {
            marks.insert(crate::naming::HIBERNATED_AT_ANNOTATION.into(), Some(now.to_string()));
        }
        // Cleared once the status says so (as for the switchover above).
        Ok(planner::hibernation::Hibernation::Resuming)
            if recorded(&prev.conditions, &status.conditions, crate::status::requests::HIBERNATED) =>
        {
            marks.insert(crate::naming::HIBERNATED_AT_ANNOTATION.into(), None);
        }
        _ => {}
    }
    let defrag = planner::maintenance::judge_request(o);
    crate::status::requests::update_defrag(&mut status.conditions, &defrag, now);
    match &defrag {
        planner::maintenance::DefragRequest::NotAsked if o.defrag_asked_secs.is_some() => {
            marks.insert(crate::naming::DEFRAGMENT_ASKED_AT_ANNOTATION.into(), None);
        }
        // First seen: a member counts as done once defragmented after now.
        // A mark in the future (written by a clock ahead, or by hand) would keep every member
        // "not done since": written again.
        planner::maintenance::DefragRequest::Pending(_) if o.defrag_asked_secs.is_none_or(|s| s < 0) => {
            marks.insert(crate::naming::DEFRAGMENT_ASKED_AT_ANNOTATION.into(), Some(now.to_string()));
        }
        planner::maintenance::DefragRequest::Done(_) | planner::maintenance::DefragRequest::Refused(_)
            if recorded(&prev.conditions, &status.conditions, crate::status::requests::DEFRAGMENTATION) =>
        {
            marks.insert(crate::naming::DEFRAGMENT_ANNOTATION.into(), None);
            marks.insert(crate::naming::DEFRAGMENT_ASKED_AT_ANNOTATION.into(), None);
        }
        _ => {}
    }
    let unlabelled = crate::marks::pods_to_label(o)
        .into_iter()
        .filter(|p| !fencing.fenced().any(|f| f == p) && !fencing.unfence.contains(p))
        .collect();
    let default = network_policy::DefaultClients::of_mark(crate::marks::after(
        cluster.annotations(),
        &marks,
        network_policy::DEFAULT_ANNOTATION,
    ));
    let np = o.network_policy.as_ref();
    let network_policy =
        network_policy::decide(cluster, o.desired.as_ref().ok(), default, np, o.operator_namespace.as_deref());
    Plan {
        marks,
        unlabelled,
        fencing,
        confirmed: crate::marks::upgrades_confirmed(o),
        min_available: crate::disruption_budget::min_available(o, &step),
        volumes: crate::volume_size::to_grow(o),
        auth: planner::auth::upkeep(o),
        network_policy,
        requeue: requeue(o, &step),
        certificates,
        status,
        step,
    }
}

/// Condition `type_` is in the previous status as this reconcile computed it (status, reason
/// and message).
fn recorded(prev: &[etcd_operator_api::Condition], new: &[etcd_operator_api::Condition], type_: &str) -> bool {
    let find = |cs: &[etcd_operator_api::Condition]| {
        cs.iter().find(|c| c.type_ == type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    find(new).is_some() && find(prev) == find(new)
}

/// When to look again after `step` went as planned.
fn requeue(o: &Observed, step: &Step) -> Duration {
    match step {
        Step::Wait(w) => match w.reason {
            WaitReason::Stable => HEALTH_CHECK_PERIOD,
            // Refused, with a spec to heal under (the last valid one, or `no_valid_spec`).
            WaitReason::InvalidSpec if o.desired.is_ok() => HEALTH_CHECK_PERIOD,
            WaitReason::InvalidSpec | WaitReason::Paused | WaitReason::DataLost | WaitReason::Hibernated => {
                Duration::from_secs(60)
            }
            WaitReason::NoQuorum
            | WaitReason::MembersUnreachable
            | WaitReason::MemberFailing
            | WaitReason::WouldLoseQuorum
            | WaitReason::UpgradeFailed
            | WaitReason::UpgradeRefused => Duration::from_secs(5),
            // Writes are refused: look again every second for the delete that frees space.
            WaitReason::NoSpace => Duration::from_secs(1),
            // A drain ends on the second (`planner::DRAIN_SECS`): the member leaves soon after.
            WaitReason::MemberDraining => DRAIN_POLL,
            WaitReason::Corrupt => Duration::from_secs(30),
            _ => PROGRESS_PERIOD,
        },
        _ => Duration::from_millis(500),
    }
}

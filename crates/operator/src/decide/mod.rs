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

mod requests;
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
    let mut step = planner::plan(o);
    crate::fencing::start_fenced(o, &mut step);
    let certificates = planner::certificates::plan(o);
    let prev = cluster.status.clone().unwrap_or_default();
    let mut status = crate::status::compute_planned(o, &step, &certificates, &prev, cluster.metadata.generation, now);
    let fencing = crate::fencing::decide(o, &step);
    let mut marks = crate::marks::cluster_annotations(o, cluster.annotations(), spec_json, now);
    requests::answer(o, &step, &fencing, &prev, &mut status.conditions, &mut marks, now);
    // Written before the step: never the pod the step drains, removes or restarts (a stale
    // drain re-labelled beside it would put it back in the client Service just before).
    let acted_on = step.member().filter(|_| !matches!(step, Step::Wait(_)));
    let unlabelled: Vec<String> = crate::marks::pods_to_label(o)
        .into_iter()
        .filter(|p| !fencing.fenced().any(|f| f == p) && !fencing.unfence.contains(p) && acted_on != Some(p.as_str()))
        .collect();
    // A member drained for its upgrade's restart and back is confirmed only beside its return
    // to the client Service (or fenced): confirmed alone, nothing would serve it again.
    let confirmed = crate::marks::upgrades_confirmed(o)
        .into_iter()
        .filter(|p| {
            let drained = o.pods.get(p).is_some_and(|s| s.serving == Some(false) && !s.fenced);
            !drained || unlabelled.contains(p)
        })
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
        confirmed,
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
            // A drain ends when the endpoints drop the member (`planner::drained_first`): soon.
            WaitReason::MemberDraining => DRAIN_POLL,
            WaitReason::Corrupt => Duration::from_secs(30),
            _ => PROGRESS_PERIOD,
        },
        _ => Duration::from_millis(500),
    }
}

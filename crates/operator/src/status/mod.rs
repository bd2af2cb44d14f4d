//! Status: what `kubectl get etcd` and `kubectl describe` show, computed from the observation
//! and the plan (the step, the certificate decision). Pure; the controller writes the result with one status patch. Here:
//! members, versions, phase; the conditions are in `conditions`.

mod conditions;
pub mod requests;
#[cfg(test)]
mod tests;
pub mod tls_auto;
pub mod tls_expiry;
pub mod tls_trust;

use etcd_operator_api::EtcdClusterStatus;

use crate::naming::{self, CLIENT_PORT};
use crate::observed::{EtcdState, Observed};
use crate::planner::{Step, WaitReason};
use crate::tls::auto::decision::Decision;

pub use conditions::{
    AVAILABLE, CORRUPT, DEGRADED, ETCD_ADVISORY, NO_SPACE, RECOVERED_FROM_QUORUM_LOSS, RECOVERING, SCALING, SPEC_VALID,
    UPGRADING, changed, is_warning,
};

pub const PHASE_CREATING: &str = "Creating";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_FAILED: &str = "Failed";

/// Ready members: voters whose etcd answered the operator just now, on a pod that is not going
/// away. Judged from etcd itself rather than the pod's readiness probe, which trails it by up
/// to a probe period; the probe still decides what the client Service routes to.
fn healthy_voter_pods(o: &Observed, e: &EtcdState) -> Vec<String> {
    e.voters()
        .filter(|m| m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting))
        .map(|m| m.pod.clone())
        .collect()
}

/// [`compute_planned`] with the certificate planner asked here: for tests, which plan the
/// step themselves too (`decide` asks it once per reconcile).
#[cfg(test)]
pub fn compute(
    o: &Observed,
    step: &Step,
    prev: &EtcdClusterStatus,
    generation: Option<i64>,
    now: &str,
) -> EtcdClusterStatus {
    compute_planned(o, step, &crate::planner::certificates::plan(o), prev, generation, now)
}

/// The new status for the planned `step` and `certificates` (the certificate planner's
/// decision, reported as `CertificatesReady`). `prev` supplies what must persist (cluster ID,
/// condition times, phase).
pub fn compute_planned(
    o: &Observed,
    step: &Step,
    certificates: &Decision,
    prev: &EtcdClusterStatus,
    generation: Option<i64>,
    now: &str,
) -> EtcdClusterStatus {
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.control_paused = o.paused;
    s.service_name = naming::client_service(&o.name);
    s.client_port = CLIENT_PORT;
    let wait = match step {
        Step::Wait(w) => Some(w),
        _ => None,
    };

    // Membership as etcd reports it; without etcd, as the pods show it.
    match &o.etcd {
        Some(e) => {
            let ready = healthy_voter_pods(o, e);
            let mut learners: Vec<String> = e.learners().map(|m| m.pod.clone()).collect();
            learners.sort();
            let mut unready: Vec<String> = e.voters().map(|m| m.pod.clone()).filter(|p| !ready.contains(p)).collect();
            unready.sort();
            s.size = e.members.len() as i32;
            s.ready_members = ready.len() as i32;
            s.members.ready = ready;
            s.members.ready.sort();
            s.members.unready = unready;
            s.members.learners = learners;
            s.leader = e.leader_member().map(|m| m.pod.clone()).unwrap_or_default();
            // Only a member with a leader proves the cluster formed (a lone bootstrap member
            // knows its cluster ID before that); observation reads it back as that proof.
            if e.cluster_id != 0 && e.leader.is_some() {
                s.cluster_id = crate::naming::hex(e.cluster_id);
            }
        }
        None => {
            s.size = o.pods.len() as i32;
            s.ready_members = 0;
            s.members.ready.clear();
            s.members.unready = o.pods.keys().cloned().collect();
            s.members.learners.clear();
            s.leader.clear();
        }
    }

    // Versions: current is what every pod runs once they agree; target is the spec's while
    // it differs.
    // Current: the version every member *reports* (not what the pods are annotated with: an
    // upgraded member counts once it runs the new version), kept as it was while they differ
    // or one does not answer.
    if let Some(e) = &o.etcd {
        let reported: Option<Vec<&str>> =
            e.members.iter().map(|m| m.status.as_ref().map(|st| st.version.as_str())).collect();
        if let Some(mut versions) = reported.filter(|v| !v.is_empty()) {
            versions.sort();
            versions.dedup();
            if versions.len() == 1 && !versions[0].is_empty() {
                s.current_version = versions[0].to_string();
            }
        }
    }
    s.target_version = match &o.desired {
        Ok(d) if d.version.to_string() != s.current_version => d.version.to_string(),
        _ => String::new(),
    };

    // Conditions.
    conditions::update(&mut s.conditions, o, step, certificates, now);

    // Phase, in CoreOS' three values.
    let all_ready = o.desired.as_ref().is_ok_and(|d| s.ready_members as usize == d.size);
    let failed =
        wait.is_some_and(|w| w.reason == WaitReason::DataLost) || (o.desired.is_err() && s.cluster_id.is_empty());
    s.phase = if failed {
        PHASE_FAILED.into()
    } else if prev.phase == PHASE_RUNNING || all_ready {
        PHASE_RUNNING.into()
    } else {
        PHASE_CREATING.into()
    };
    s.reason = match wait {
        Some(w) if w.reason.needs_attention() => w.message.clone(),
        _ => String::new(),
    };
    s
}

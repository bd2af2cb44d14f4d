//! What a backup or verify pod in the cache says, as plain data for the planners: how it ended
//! (from its phase and termination message), when it was created and ended, and why it waits if
//! it never started. Pure.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use serde::de::DeserializeOwned;

/// How a job pod ended.
#[derive(Clone, Debug, PartialEq)]
pub enum PodResult<T> {
    Running,
    Succeeded(T),
    Failed(String),
}

/// One job pod, observed.
#[derive(Clone, Debug, PartialEq)]
pub struct JobPodState<T> {
    pub name: String,
    pub created: Option<Timestamp>,
    pub result: PodResult<T>,
    /// Still Pending (not started): why, from its conditions and container states.
    pub pending: Option<String>,
    /// When its container ended.
    pub finished: Option<Timestamp>,
}

impl<T> JobPodState<T> {
    pub fn running(name: &str) -> JobPodState<T> {
        JobPodState { name: name.into(), created: None, result: PodResult::Running, pending: None, finished: None }
    }
}

fn time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<Timestamp> {
    Some(t.0)
}

pub fn observe<T: DeserializeOwned>(p: &Pod) -> JobPodState<T> {
    let status = p.status.clone().unwrap_or_default();
    let pending = status.phase.as_deref().is_none_or(|ph| ph == "Pending").then(|| pending_reason(p));
    let finished = status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.first()?.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref().and_then(time));
    JobPodState {
        name: p.name_any(),
        created: p.creation_timestamp().as_ref().and_then(time),
        result: pod_result(p),
        pending,
        finished,
    }
}

/// The result of a job pod, from its phase and termination message.
pub fn pod_result<T: DeserializeOwned>(pod: &Pod) -> PodResult<T> {
    let status = pod.status.clone().unwrap_or_default();
    let terminated = status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone());
    let message = terminated.as_ref().and_then(|t| t.message.clone()).unwrap_or_default();
    match status.phase.as_deref() {
        Some("Succeeded") => match serde_json::from_str(message.trim()) {
            Ok(v) => PodResult::Succeeded(v),
            Err(e) => PodResult::Failed(format!("pod {} succeeded but its report is unreadable: {e}", pod.name_any())),
        },
        Some("Failed") => {
            let why = if !message.trim().is_empty() {
                message.trim().to_string()
            } else {
                // Killed from outside: activeDeadlineSeconds, eviction, a node loss.
                let r = status.reason.unwrap_or_default();
                let m = status.message.unwrap_or_default();
                format!("pod {} failed: {} {}", pod.name_any(), r, m).trim().to_string()
            };
            PodResult::Failed(why)
        }
        _ => PodResult::Running,
    }
}

/// Why a pending pod waits, from its conditions and container states.
fn pending_reason(p: &Pod) -> String {
    let st = p.status.clone().unwrap_or_default();
    let waiting = st
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| format!("{} {}", w.reason.clone().unwrap_or_default(), w.message.clone().unwrap_or_default()))
        .next();
    let unscheduled = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| format!("not scheduled: {}", c.message.clone().unwrap_or_default()));
    waiting.or(unscheduled).unwrap_or_else(|| "still Pending".into()).trim().to_string()
}

/// Pod names kept in `status.recordedPods`.
pub const RECORDED_PODS: usize = 10;

/// Note in `recorded` (a status' `recordedPods`) that the result of `pod` is in the status
/// being written, keeping the newest [`RECORDED_PODS`].
pub fn remember(recorded: &mut Vec<String>, pod: &str) {
    recorded.push(pod.to_string());
    let extra = recorded.len().saturating_sub(RECORDED_PODS);
    recorded.drain(..extra);
}

/// The pods among `pods` that carry `label=<name>` in `namespace` and are owned by `uid`,
/// oldest first.
pub fn owned(pods: Vec<Arc<Pod>>, label: &str, namespace: &str, name: &str, uid: &str) -> Vec<Arc<Pod>> {
    let mut v: Vec<Arc<Pod>> = pods
        .into_iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(namespace) && p.labels().get(label).map(String::as_str) == Some(name)
        })
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    v.sort_by_key(|p| p.creation_timestamp().map(|t| t.0));
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::contract::SaveReport;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodCondition, PodStatus,
    };

    fn finished_pod(phase: &str, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                reason: Some("DeadlineExceeded".into()),
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            message: Some(message.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_results_come_from_the_termination_message() {
        let ok = serde_json::to_string(&SaveReport::default()).unwrap();
        assert_eq!(
            pod_result::<SaveReport>(&finished_pod("Succeeded", &ok)),
            PodResult::Succeeded(SaveReport::default())
        );
        assert_eq!(
            pod_result::<SaveReport>(&finished_pod("Failed", "checksum mismatch: x\n")),
            PodResult::Failed("checksum mismatch: x".into())
        );
        let r = pod_result::<SaveReport>(&finished_pod("Failed", ""));
        assert!(matches!(r, PodResult::Failed(m) if m.contains("DeadlineExceeded")));
        assert_eq!(pod_result::<SaveReport>(&finished_pod("Running", "")), PodResult::Running);
        let r = pod_result::<SaveReport>(&finished_pod("Succeeded", "{not json"));
        assert!(matches!(r, PodResult::Failed(m) if m.contains("unreadable")));
    }

    #[test]
    fn a_pending_pod_says_why_it_waits() {
        let mut p = Pod::default();
        p.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                message: Some("0/1 nodes are available: 1 Insufficient memory.".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let s = observe::<SaveReport>(&p);
        assert_eq!(s.pending.as_deref(), Some("not scheduled: 0/1 nodes are available: 1 Insufficient memory."));
        assert_eq!(s.created.unwrap().to_string(), "2026-01-01T00:00:00Z");
        p.status.as_mut().unwrap().phase = Some("Running".into());
        assert_eq!(observe::<SaveReport>(&p).pending, None, "running pods have their deadline");
    }
}

//! A member pod as the planner sees it ([`PodState`]): ready, version, what its init containers
//! and containers say (stuck, the data check's verdicts), its TLS, its age and marks.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

use crate::naming::{self, BOOTSTRAP_ANNOTATION, VERSION_ANNOTATION, VERSION_CHANGED_ANNOTATION};
use crate::observed::PodState;
use crate::pod_spec::DATA_VOLUME;

/// Waiting reasons that mean the container will not run without a change.
const STUCK_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The member data check's verdict `code` (a refusal, or data the pod's user cannot use), from
/// its init container: it ended with that code now, or is waiting to retry after doing so. A
/// check that passed since (running, exit 0) is no such verdict, whatever it said before.
fn data_check_exit(inits: &[ContainerStatus], code: i32) -> Option<String> {
    use crate::member_volume::CHECK_CONTAINER;
    let s = inits.iter().find(|s| s.name == CHECK_CONTAINER)?;
    let state = s.state.as_ref()?;
    let ended = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| {
        (t.exit_code == code).then(|| t.message.clone().unwrap_or_else(|| format!("exit code {code}")))
    };
    let why = match (&state.terminated, &state.waiting) {
        (Some(t), _) => ended(t),
        (None, Some(_)) => s.last_state.as_ref()?.terminated.as_ref().and_then(ended),
        _ => None,
    }?;
    Some(why.trim().to_string())
}

/// Member names in an etcd command line's `--initial-cluster=` flag.
fn initial_cluster_names(command: &[String]) -> Vec<String> {
    command
        .iter()
        .find_map(|a| a.strip_prefix("--initial-cluster="))
        .map(|v| v.split(',').filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string())).collect())
        .unwrap_or_default()
}

fn problem_of(statuses: &[ContainerStatus]) -> Option<(String, String)> {
    statuses.iter().find_map(|s| {
        let w = s.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.clone()?;
        STUCK_REASONS
            .contains(&reason.as_str())
            .then(|| (reason, format!("container {}: {}", s.name, w.message.clone().unwrap_or_default())))
    })
}

/// Kubernetes' view of a member pod, in planner terms.
pub fn pod_state(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> PodState {
    let status = p.status.clone().unwrap_or_default();
    let ready =
        status.conditions.as_ref().is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let containers = status.container_statuses.clone().unwrap_or_default();
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let etcd_container = p.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == "etcd"));
    PodState {
        name: p.name_any(),
        ip: status.pod_ip.clone().filter(|ip| !ip.is_empty()),
        phase: status.phase.clone().unwrap_or_else(|| "Pending".into()),
        ready,
        deleting: p.metadata.deletion_timestamp.is_some(),
        version: p.annotations().get(VERSION_ANNOTATION).cloned().unwrap_or_default(),
        version_age_secs: p
            .annotations()
            .get(VERSION_CHANGED_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| (now.as_second() - t.as_second()).max(0)),
        image: etcd_container.and_then(|c| c.image.clone()).unwrap_or_default(),
        spec_hash: p.annotations().get(naming::POD_SPEC_HASH_ANNOTATION).cloned(),
        problem: problem_of(&inits).or_else(|| problem_of(&containers)).or_else(|| unschedulable(p, now)),
        volume_refused: data_check_exit(&inits, crate::member_volume::REFUSED_EXIT_CODE),
        data_inaccessible: data_check_exit(&inits, crate::member_volume::INACCESSIBLE_EXIT_CODE),
        initial_cluster: etcd_container
            .and_then(|c| c.command.as_deref())
            .map(initial_cluster_names)
            .unwrap_or_default(),
        deleting_secs: p.metadata.deletion_timestamp.as_ref().map(|t| (now.as_second() - t.0.as_second()).max(0)),
        defragmented_secs: p
            .annotations()
            .get(naming::DEFRAGMENTED_AT_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| (now.as_second() - t.as_second()).max(0)),
        age_secs: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| (now.as_second() - t.0.as_second()).max(0))
            .unwrap_or(0),
        bootstrap: p.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        labelled: p.labels().contains_key(naming::CLUSTER_UID_LABEL),
        serving: p.labels().get(naming::SERVING_LABEL).map(|v| v == "true"),
        drained_secs: p
            .annotations()
            .get(naming::DRAINED_AT_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| (now.as_second() - t.as_second()).max(0)),
        uses_pvc: uses_pvc(p),
        tls: crate::tls::transition::PodTls::of(
            etcd_container.and_then(|c| c.command.as_deref()).unwrap_or_default(),
            p.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default(),
        ),
    }
}

/// How long a pod may be unschedulable before it counts as a member that cannot run.
pub const UNSCHEDULABLE_SECS: i64 = 120;

/// A pod the scheduler could not place for a while, with the scheduler's reason.
fn unschedulable(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> Option<(String, String)> {
    let c =
        p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })?;
    let since = c.last_transition_time.as_ref().map(|t| now.as_second() - t.0.as_second()).unwrap_or(0);
    (since >= UNSCHEDULABLE_SECS).then(|| {
        ("Unschedulable".to_string(), format!("pending for {since}s: {}", c.message.clone().unwrap_or_default()))
    })
}

/// The member's data is on a claim (its data volume is one; a restored member also mounts the
/// backup's claim, which is not its data).
fn uses_pvc(p: &Pod) -> bool {
    let volumes = p.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.is_some_and(|vs| vs.iter().any(|v| v.name == DATA_VOLUME && v.persistent_volume_claim.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member restored from a PVC backup mounts the backup's claim beside its emptyDir: still
    /// an emptyDir member (replaced, not restarted on a volume, by a rollout; it used to stall
    /// every rollout of such a cluster).
    #[test]
    fn only_the_data_volume_makes_a_pvc_member() {
        use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, PodSpec, Volume};
        let claim = |name: &str, claim: &str| Volume {
            name: name.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Default::default()
        };
        let empty =
            Volume { name: DATA_VOLUME.into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() };
        let pod = |volumes: Vec<Volume>| Pod {
            spec: Some(PodSpec { volumes: Some(volumes), ..Default::default() }),
            ..Default::default()
        };
        assert!(!uses_pvc(&pod(vec![empty, claim("backup-volume", "backups")])));
        assert!(uses_pvc(&pod(vec![claim(DATA_VOLUME, "ex-a-data"), claim("backup-volume", "backups")])));
        assert!(!uses_pvc(&Pod::default()));
    }

    /// The data check's two verdicts are told apart by exit code, now or in the last state
    /// while the container waits to run again; a check that passed since is neither (the PVC's
    /// data-owner mark: `volumes`).
    #[test]
    fn the_data_checks_verdicts_are_read() {
        use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStateWaiting};
        let ended = |code: i32| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                message: Some(format!("said {code}\n")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let waiting = ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        let check = |state: ContainerState, last: Option<ContainerState>| {
            vec![ContainerStatus {
                name: crate::member_volume::CHECK_CONTAINER.into(),
                state: Some(state),
                last_state: last,
                ..Default::default()
            }]
        };
        use crate::member_volume::{INACCESSIBLE_EXIT_CODE as NO_ACCESS, REFUSED_EXIT_CODE as REFUSED};
        for (inits, refused, no_access) in [
            (check(ended(3), None), Some("said 3"), None),
            (check(ended(4), None), None, Some("said 4")),
            (check(waiting.clone(), Some(ended(4))), None, Some("said 4")),
            (check(waiting, Some(ended(1))), None, None),
            (check(ended(0), Some(ended(4))), None, None),
        ] {
            assert_eq!(data_check_exit(&inits, REFUSED).as_deref(), refused, "{inits:?}");
            assert_eq!(data_check_exit(&inits, NO_ACCESS).as_deref(), no_access, "{inits:?}");
        }
    }
}

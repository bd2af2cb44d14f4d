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
    use crate::pod::member_volume::CHECK_CONTAINER;
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

/// The pod's Ready condition is True.
pub fn is_ready(p: &Pod) -> bool {
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Kubernetes' view of a member pod, in planner terms.
pub fn pod_state(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> PodState {
    let status = p.status.clone().unwrap_or_default();
    let ready = is_ready(p);
    let containers = status.container_statuses.clone().unwrap_or_default();
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let etcd_container = p.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == "etcd"));
    let etcd_ready = containers.iter().find(|c| c.name == "etcd" && c.ready);
    PodState {
        name: p.name_any(),
        ip: status.pod_ip.clone().filter(|ip| !ip.is_empty()),
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty()),
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
        volume_refused: data_check_exit(&inits, crate::pod::member_volume::REFUSED_EXIT_CODE),
        data_inaccessible: data_check_exit(&inits, crate::pod::member_volume::INACCESSIBLE_EXIT_CODE),
        initial_cluster: etcd_container
            .and_then(|c| c.command.as_deref())
            .map(initial_cluster_names)
            .unwrap_or_default(),
        deleting_secs: p.metadata.deletion_timestamp.as_ref().map(|t| (now.as_second() - t.0.as_second()).max(0)),
        defragmented_secs: time_of(p, naming::DEFRAGMENTED_AT_ANNOTATION).map(|t| secs_between(t, now)),
        defrag_unfinished_secs: time_of(p, naming::DEFRAG_STARTED_ANNOTATION)
            .filter(|started| time_of(p, naming::DEFRAGMENTED_AT_ANNOTATION).is_none_or(|done| done < *started))
            .map(|t| secs_between(t, now)),
        age_secs: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| (now.as_second() - t.0.as_second()).max(0))
            .unwrap_or(0),
        restarts: containers.iter().chain(&inits).map(|s| s.restart_count).max().unwrap_or(0),
        unready_secs: (!ready).then(|| unready_since(p, now)),
        etcd_ready_run_secs: etcd_ready
            .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.as_ref())
            .map(|t| (now.as_second() - t.0.as_second()).max(0)),
        etcd_ready_image: etcd_ready.map(|c| c.image.clone()),
        bootstrap: p.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        labelled: p.labels().contains_key(naming::CLUSTER_UID_LABEL),
        serving: p.labels().get(naming::SERVING_LABEL).map(|v| v == "true"),
        drained_ms: time_of(p, naming::DRAINED_AT_ANNOTATION)
            .map(|t| i64::try_from(now.duration_since(t).as_millis()).unwrap_or(i64::MAX).max(0)),
        fenced: p.annotations().contains_key(naming::FENCED_AT_ANNOTATION),
        uses_pvc: uses_pvc(p),
        tls: crate::tls::transition::PodTls::of(
            etcd_container.and_then(|c| c.command.as_deref()).unwrap_or_default(),
            p.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default(),
        ),
        etcd_flags: etcd_container.map(etcd_flags).unwrap_or_default(),
        readiness_reads_key: etcd_container.and_then(|c| c.readiness_probe.as_ref()).is_some_and(|p| p.exec.is_some()),
    }
}

/// Seconds since the pod's Ready condition last turned False (since it was created when the
/// condition is missing).
fn unready_since(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> i64 {
    let since = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| (now.as_second() - t.0.as_second()).max(0);
    let conditions = p.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready" && c.status != "True"))
        .and_then(|c| c.last_transition_time.as_ref())
        .or(p.metadata.creation_timestamp.as_ref())
        .map(since)
        .unwrap_or(0)
}

/// etcd's settings in its container, by flag name: `--flag=value` (or `-flag=value`) arguments
/// of its command, then `ETCD_*` variables. A flag without `=` has its value in the next
/// argument, or is a boolean: unreadable here (`None`), as is a variable from a reference.
fn etcd_flags(c: &k8s_openapi::api::core::v1::Container) -> Vec<(String, Option<String>)> {
    let args = c.command.iter().flatten().chain(c.args.iter().flatten());
    let flags = args.filter_map(|a| {
        let a = a.strip_prefix("--").or_else(|| a.strip_prefix('-'))?;
        Some(match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.to_string(), None),
        })
    });
    let env = c.env.iter().flatten().filter_map(|e| {
        let value = if e.value_from.is_some() { None } else { Some(e.value.clone().unwrap_or_default()) };
        Some((crate::etcd_flags::flag_of_env(&e.name)?, value))
    });
    flags.chain(env).collect()
}

/// How long a pod may be unschedulable before it counts as a member that cannot run.
pub const UNSCHEDULABLE_SECS: i64 = 120;

/// A pod the scheduler could not place for a while, with the scheduler's reason.
/// The time a pod annotation records (RFC 3339).
fn time_of(p: &Pod, annotation: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    p.annotations().get(annotation).and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
}

/// Whole seconds elapsed from `t` to `now` (never negative).
fn secs_between(t: k8s_openapi::jiff::Timestamp, now: k8s_openapi::jiff::Timestamp) -> i64 {
    now.duration_since(t).as_secs().max(0)
}

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

    /// Time since a mark counts whole seconds that really passed: a drain marked at x.9 s is
    /// not 3 s old at x+3.0 s (seconds truncated on both sides made a 3 s drain last 2.1 s).
    #[test]
    fn seconds_since_a_mark_are_whole_seconds_elapsed() {
        let t = |s: &str| s.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
        assert_eq!(secs_between(t("2026-01-01T00:00:10.9Z"), t("2026-01-01T00:00:13.0Z")), 2);
        assert_eq!(secs_between(t("2026-01-01T00:00:10.9Z"), t("2026-01-01T00:00:13.9Z")), 3);
        assert_eq!(secs_between(t("2026-01-01T00:00:10.0Z"), t("2026-01-01T00:00:13.99Z")), 3);
        assert_eq!(secs_between(t("2026-01-01T00:00:13.0Z"), t("2026-01-01T00:00:10.0Z")), 0);
    }

    /// The settings a member runs with, from the pod: what the snapshot-count and experimental
    /// flag rules read (`planner::replay`, `etcd_flags`).
    #[test]
    fn etcd_settings_are_read_from_command_and_environment() {
        use k8s_openapi::api::core::v1::{Container, EnvVar, EnvVarSource};
        let c = Container {
            command: Some(
                ["/usr/local/bin/etcd", "--name=ex-a", "--snapshot-count=5000", "--experimental-initial-corrupt-check"]
                    .map(String::from)
                    .to_vec(),
            ),
            env: Some(vec![
                EnvVar {
                    name: "ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME".into(),
                    value: Some("5m".into()),
                    ..Default::default()
                },
                EnvVar {
                    name: "ETCD_QUOTA_BACKEND_BYTES".into(),
                    value_from: Some(EnvVarSource::default()),
                    ..Default::default()
                },
                EnvVar { name: "GOMAXPROCS".into(), value: Some("2".into()), ..Default::default() },
            ]),
            ..Default::default()
        };
        let p = PodState { etcd_flags: etcd_flags(&c), ..Default::default() };
        assert_eq!(p.etcd_flag("name"), Some(Some("ex-a")));
        assert_eq!(p.etcd_flag("snapshot-count"), Some(Some("5000")));
        assert_eq!(p.etcd_flag("quota-backend-bytes"), Some(None), "a reference is unreadable");
        assert_eq!(p.etcd_flag("gomaxprocs"), None);
        assert_eq!(p.experimental_flags(), ["experimental-initial-corrupt-check", "experimental-corrupt-check-time"]);
    }

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

    /// Restarts and time unready, the bound on "crash-looping" (`planner::failing`): the most
    /// restarted container counts (a data check failing in a loop as much as etcd), and a pod is
    /// unready since its Ready condition turned False, or since it was created.
    #[test]
    fn restarts_and_time_unready_are_read() {
        use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let now: k8s_openapi::jiff::Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let at = |s: &str| Time(s.parse().unwrap());
        let status = |name: &str, restarts: i32| ContainerStatus {
            name: name.into(),
            restart_count: restarts,
            ..Default::default()
        };
        let ready = |ok: bool, since: &str| PodCondition {
            type_: "Ready".into(),
            status: if ok { "True" } else { "False" }.into(),
            last_transition_time: Some(at(since)),
            ..Default::default()
        };
        let pod = |conditions: Vec<PodCondition>| Pod {
            metadata: kube::api::ObjectMeta {
                creation_timestamp: Some(at("2026-01-01T00:00:00Z")),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(conditions),
                container_statuses: Some(vec![status("etcd", 4)]),
                init_container_statuses: Some(vec![status("check-data", 7)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let s = pod_state(&pod(vec![ready(false, "2026-01-01T00:08:00Z")]), now);
        assert_eq!((s.restarts, s.unready_secs), (7, Some(120)));
        let s = pod_state(&pod(vec![ready(true, "2026-01-01T00:08:00Z")]), now);
        assert_eq!(s.unready_secs, None, "ready");
        let s = pod_state(&pod(vec![]), now);
        assert_eq!(s.unready_secs, Some(600), "never ready: since it was created");
    }

    /// How long the etcd container that runs now has run, once the kubelet reports it ready
    /// (what tells a restarted member's new container from the one before it).
    #[test]
    fn the_ready_etcd_containers_run_is_read() {
        use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, PodStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let now: k8s_openapi::jiff::Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        let pod = |name: &str, ready: bool, started: Option<&str>| Pod {
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: name.into(),
                    ready,
                    state: Some(ContainerState {
                        running: Some(ContainerStateRunning { started_at: started.map(|s| Time(s.parse().unwrap())) }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pod_state(&pod("etcd", true, Some("2026-01-01T00:09:30Z")), now).etcd_ready_run_secs, Some(30));
        assert_eq!(pod_state(&pod("etcd", false, Some("2026-01-01T00:09:30Z")), now).etcd_ready_run_secs, None);
        assert_eq!(pod_state(&pod("etcd", true, None), now).etcd_ready_run_secs, None);
        assert_eq!(pod_state(&pod("sidecar", true, Some("2026-01-01T00:09:30Z")), now).etcd_ready_run_secs, None);
        let mut p = pod("etcd", true, Some("2026-01-01T00:09:30Z"));
        p.status.as_mut().unwrap().container_statuses.as_mut().unwrap()[0].image = "quay.io/coreos/etcd:v3.7.2".into();
        assert_eq!(pod_state(&p, now).etcd_ready_image.as_deref(), Some("quay.io/coreos/etcd:v3.7.2"));
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
                name: crate::pod::member_volume::CHECK_CONTAINER.into(),
                state: Some(state),
                last_state: last,
                ..Default::default()
            }]
        };
        use crate::pod::member_volume::{INACCESSIBLE_EXIT_CODE as NO_ACCESS, REFUSED_EXIT_CODE as REFUSED};
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

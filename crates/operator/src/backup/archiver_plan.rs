//! The continuous archiver's pod, decided (pure): one long-running pod per EtcdBackup with
//! `continuous.enabled`, named `<backup>-archiver`, started once the first periodic snapshot
//! succeeded (the archive continues a snapshot), made again when its spec changes or it ended,
//! and removed when the archive is turned off. An EtcdBackup whose spec is refused keeps its
//! archiver as it is (an invalid object changes nothing). The `Archiving` condition says where
//! it stands.

use k8s_openapi::api::core::v1::Pod;

/// Default `continuous.flushIntervalInSecond`.
pub const DEFAULT_FLUSH_SECS: u64 = 10;
/// Longest `continuous.flushIntervalInSecond`.
pub const MAX_FLUSH_SECS: i64 = 3600;
/// Label value of `ROLE_LABEL` on archiver pods (backup pods carry none).
pub const ROLE_ARCHIVER: &str = "archiver";
/// Label telling an EtcdBackup's archiver pod from its backup pods.
pub const ROLE_LABEL: &str = "etcd_backup_role";
/// Annotation with the hash of what the archiver pod was made from.
pub const SPEC_ANNOTATION: &str = "etcd.database.coreos.com/archiver-spec";
/// The condition type.
pub const CONDITION: &str = "Archiving";

/// The archiver pod's name for EtcdBackup `backup`.
pub fn pod_name(backup: &str) -> String {
    format!("{backup}-archiver")
}

/// An archiver pod, as the cache shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArchiverPod {
    pub name: String,
    pub spec_hash: String,
    pub ready: bool,
    /// Its phase is Failed or Succeeded: it will not run again by itself.
    pub ended: bool,
    pub deleting: bool,
    pub restarts: i32,
    /// Why its container is waiting or last ended (e.g. `CrashLoopBackOff: …`).
    pub problem: Option<String>,
}

pub fn observe(p: &Pod) -> ArchiverPod {
    let status = p.status.clone().unwrap_or_default();
    let cs = status.container_statuses.unwrap_or_default();
    let problem = cs.iter().find_map(|c| {
        let waiting = c.state.as_ref()?.waiting.as_ref()?;
        let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).and_then(|t| t.message.clone());
        Some(format!(
            "{}{}",
            waiting.reason.clone().unwrap_or_default(),
            last.map(|m| format!(": {}", m.trim())).unwrap_or_default()
        ))
    });
    ArchiverPod {
        name: p.metadata.name.clone().unwrap_or_default(),
        spec_hash: p.metadata.annotations.as_ref().and_then(|a| a.get(SPEC_ANNOTATION)).cloned().unwrap_or_default(),
        ready: cs.iter().all(|c| c.ready) && !cs.is_empty(),
        ended: matches!(status.phase.as_deref(), Some("Failed" | "Succeeded")),
        deleting: p.metadata.deletion_timestamp.is_some(),
        restarts: cs.iter().map(|c| c.restart_count).sum(),
        problem,
    }
}

/// What to do with archiver pods in one reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Nothing,
    Create,
    Delete(String),
}

/// The decision and the `Archiving` condition (None: no archive configured, no condition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    pub action: Action,
    pub condition: Option<(bool, &'static str, String)>,
}

/// `wanted`: the spec was accepted and asks for the archive (`None`: refused spec: nothing
/// changes). `has_snapshot`: a periodic snapshot succeeded. `hash`: of what the pod would be
/// made from now.
pub fn decide(wanted: Option<bool>, has_snapshot: bool, hash: &str, pods: &[ArchiverPod]) -> Decision {
    let nothing = |condition| Decision { action: Action::Nothing, condition };
    let Some(wanted) = wanted else { return nothing(None) };
    let live: Vec<&ArchiverPod> = pods.iter().filter(|p| !p.deleting).collect();
    if !wanted {
        return match live.first() {
            Some(p) => Decision { action: Action::Delete(p.name.clone()), condition: None },
            None => nothing(None),
        };
    }
    if !has_snapshot {
        let why = "the archive starts after the first periodic snapshot succeeds".to_string();
        return nothing(Some((false, "WaitingForSnapshot", why)));
    }
    if let Some(p) = live.iter().find(|p| p.spec_hash != hash) {
        let why = format!("archiver pod {} was made from an earlier spec: it is made again", p.name);
        return Decision { action: Action::Delete(p.name.clone()), condition: Some((false, "Restarting", why)) };
    }
    if let Some(p) = live.iter().find(|p| p.ended) {
        let why = format!("archiver pod {} ended: it is made again and resumes after the last segment written", p.name);
        return Decision { action: Action::Delete(p.name.clone()), condition: Some((false, "Restarting", why)) };
    }
    match live.first() {
        None if pods.is_empty() => Decision {
            action: Action::Create,
            condition: Some((false, "Starting", "starting the archiver pod".into())),
        },
        None => nothing(Some((false, "Restarting", "waiting for the previous archiver pod to go".into()))),
        Some(p) if p.ready => {
            nothing(Some((true, "Archiving", format!("archiver pod {} follows every change", p.name))))
        }
        Some(p) => {
            let why = match &p.problem {
                Some(problem) => {
                    format!("archiver pod {} is not running ({problem}); restarts: {}", p.name, p.restarts)
                }
                None => format!("archiver pod {} is starting", p.name),
            };
            nothing(Some((false, if p.problem.is_some() { "ArchiverFailing" } else { "Starting" }, why)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(hash: &str) -> ArchiverPod {
        ArchiverPod { name: "b-archiver".into(), spec_hash: hash.into(), ready: true, ..Default::default() }
    }

    #[test]
    fn the_archiver_starts_only_after_the_first_snapshot() {
        let d = decide(Some(true), false, "h", &[]);
        assert_eq!((d.action, d.condition.map(|c| (c.0, c.1))), (Action::Nothing, Some((false, "WaitingForSnapshot"))));
        assert_eq!(decide(Some(true), true, "h", &[]).action, Action::Create);
    }

    #[test]
    fn a_running_archiver_of_the_current_spec_is_left_alone() {
        let d = decide(Some(true), true, "h", &[pod("h")]);
        assert_eq!((d.action, d.condition.map(|c| (c.0, c.1))), (Action::Nothing, Some((true, "Archiving"))));
    }

    #[test]
    fn a_changed_spec_or_an_ended_pod_makes_it_again_one_pod_at_a_time() {
        assert_eq!(decide(Some(true), true, "new", &[pod("old")]).action, Action::Delete("b-archiver".into()));
        let ended = ArchiverPod { ended: true, ready: false, ..pod("h") };
        assert_eq!(decide(Some(true), true, "h", &[ended]).action, Action::Delete("b-archiver".into()));
        // While the old one is still going, no second one is started.
        let going = ArchiverPod { deleting: true, ..pod("old") };
        assert_eq!(decide(Some(true), true, "h", &[going]).action, Action::Nothing);
    }

    #[test]
    fn turned_off_it_goes_and_a_refused_spec_changes_nothing() {
        assert_eq!(
            decide(Some(false), true, "h", &[pod("h")]),
            Decision { action: Action::Delete("b-archiver".into()), condition: None }
        );
        assert_eq!(decide(None, true, "other", &[pod("h")]), Decision { action: Action::Nothing, condition: None });
    }

    #[test]
    fn a_crash_looping_archiver_is_reported_with_its_reason() {
        let p = ArchiverPod {
            ready: false,
            restarts: 4,
            problem: Some("CrashLoopBackOff: no full snapshot".into()),
            ..pod("h")
        };
        let c = decide(Some(true), true, "h", &[p]).condition.expect("condition");
        assert_eq!((c.0, c.1), (false, "ArchiverFailing"));
        assert!(c.2.contains("CrashLoopBackOff: no full snapshot") && c.2.contains("restarts: 4"), "{}", c.2);
    }

    #[test]
    fn the_continuous_archive_needs_periodic_backups_and_a_sane_flush_interval() {
        use crate::backup::backup_planner::check_spec;
        use etcd_operator_api::backup::{BackupPolicy, BackupSource, ContinuousArchive, EtcdBackupSpec, S3Source};
        let spec = |interval: i64, _max: i32| EtcdBackupSpec {
            cluster_name: "ex".into(),
            storage_type: "S3".into(),
            backup_policy: Some(BackupPolicy { backup_interval_in_second: interval, ..Default::default() }),
            source: BackupSource {
                s3: Some(S3Source { path: "b/k".into(), aws_secret: "aws".into(), ..Default::default() }),
                ..Default::default()
            },
            ..Default::default()
        };
        let with = |interval: i64, flush: i64| EtcdBackupSpec {
            continuous: Some(ContinuousArchive { enabled: true, flush_interval_in_second: flush }),
            ..spec(interval, 0)
        };
        let once = check_spec(&with(0, 5), "ns").expect_err("one-shot backups cannot carry an archive");
        assert!(once.contains("continuous.enabled needs periodic backups"), "{once}");
        assert_eq!(check_spec(&with(60, 0), "ns").map(|t| t.archive_flush_secs), Ok(Some(10)));
        assert_eq!(check_spec(&with(60, 5), "ns").map(|t| t.archive_flush_secs), Ok(Some(5)));
        assert!(check_spec(&with(60, 3601), "ns").is_err());
        assert!(check_spec(&with(60, -1), "ns").is_err());
        // Disabled, it is as if absent, whatever else it says.
        let off = EtcdBackupSpec {
            continuous: Some(ContinuousArchive { enabled: false, flush_interval_in_second: 99_999 }),
            ..spec(0, 0)
        };
        assert_eq!(check_spec(&off, "ns").map(|t| t.archive_flush_secs), Ok(None));
    }
}

//! Table tests of the EtcdRestore planner, one decision each.

use super::*;
use crate::backup::volume_owner;
use etcd_operator_api::backup::{BackupSource, S3Source};
use etcd_operator_api::restore::EtcdClusterRef;

fn spec(cluster_spec: Option<EtcdClusterSpec>) -> EtcdRestoreSpec {
    EtcdRestoreSpec {
        backup_storage_type: "S3".into(),
        source: BackupSource {
            s3: Some(S3Source { path: "b/k".into(), aws_secret: "aws".into(), ..Default::default() }),
            ..Default::default()
        },
        etcd_cluster: EtcdClusterRef { name: "restored".into(), spec: cluster_spec },
        point_in_time: None,
    }
}

fn meta(version: &str) -> BackupMeta {
    BackupMeta { etcd_version: version.into(), sha256: "ab".repeat(32), ..Default::default() }
}

#[test]
fn without_a_spec_the_cluster_has_three_members_of_the_backups_version() {
    let s = cluster_spec(&spec(None), &meta("3.5.1"), &"ab".repeat(32)).unwrap();
    assert_eq!((s.size, s.version.as_str()), (3, "3.5.1"));
    let r = s.restore.unwrap();
    assert_eq!((r.backup_storage_type.as_str(), r.sha256.len()), ("S3", 64));
    assert_eq!(r.source.s3.unwrap().path, "b/k");
}

#[test]
fn restoring_with_an_older_or_much_newer_etcd_than_the_backups_is_refused() {
    let with = |v: &str| EtcdClusterSpec { size: 1, version: v.into(), ..Default::default() };
    let err = cluster_spec(&spec(Some(with("3.4.23"))), &meta("3.5.1"), &"ab".repeat(32)).unwrap_err();
    assert!(err.contains("restoring it with etcd 3.4.23 is refused") && err.contains("downgrade"), "{err}");
    assert!(cluster_spec(&spec(Some(with("3.5.1"))), &meta("3.4.23"), &"ab".repeat(32)).is_ok(), "the next minor");
    assert!(cluster_spec(&spec(Some(with("3.5.0"))), &meta("3.5.1"), &"ab".repeat(32)).is_ok(), "the same minor");
    let err = cluster_spec(&spec(Some(with("3.6.0"))), &meta("3.4.23"), &"ab".repeat(32)).unwrap_err();
    assert!(err.contains("skips a minor version"), "{err}");
}

#[test]
fn a_spec_without_a_version_restores_with_the_backups_version() {
    let with = EtcdClusterSpec { size: 1, ..Default::default() };
    let s = cluster_spec(&spec(Some(with)), &meta("3.5.17"), &"ab".repeat(32)).unwrap();
    assert_eq!(s.version, "3.5.17");
}

#[test]
fn a_backup_of_a_version_this_operator_does_not_run_needs_a_version_in_the_spec() {
    let err = cluster_spec(&spec(None), &meta("3.2.13"), &"ab".repeat(32)).unwrap_err();
    assert!(err.contains("3.2.13") && err.contains("set etcdCluster.spec.version"), "{err}");
    let with = EtcdClusterSpec { size: 3, version: "3.4.23".into(), ..Default::default() };
    let err = cluster_spec(&spec(Some(with)), &meta("3.2.13"), &"ab".repeat(32)).unwrap_err();
    assert!(err.contains("skips a minor version") || err.contains("refused"), "{err}");
}

#[test]
fn invalid_restores_say_why() {
    let mut s = spec(None);
    s.etcd_cluster.name.clear();
    assert!(check_spec(&s).unwrap_err().contains("etcdCluster.name is empty"));
    let s = spec(Some(EtcdClusterSpec { size: 9, version: "3.5.1".into(), ..Default::default() }));
    assert!(check_spec(&s).unwrap_err().contains("spec.size 9"));
    let mut s = spec(None);
    s.backup_storage_type = "GlusterFS".into();
    assert!(check_spec(&s).unwrap_err().contains("GlusterFS"));
    let mut s = spec(None);
    s.etcd_cluster.name = "Bad_Name".into();
    assert!(check_spec(&s).is_err());
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// Restore `r` (UID `uid-r`, generation 1) of `s3://b/k` into `restored`, nothing done yet.
fn observed() -> RestoreObserved {
    RestoreObserved {
        name: "r".into(),
        namespace: "ns".into(),
        uid: "uid-r".into(),
        generation: 1,
        scope: None,
        bump_revision: None,
        spec: Ok(spec(None)),
        status: EtcdRestoreStatus { observed_generation: 1, ..Default::default() },
        cluster: None,
        pods: vec![],
        backup_size: None,
        volume_root: false,
        now: t("2026-01-01T00:10:00Z"),
    }
}

fn verify_pod(name: &str, result: PodResult<BackupMeta>, finished: Option<&str>) -> JobPodState<BackupMeta> {
    JobPodState { result, finished: finished.map(t), ..JobPodState::running(name) }
}

fn reasons(p: &RestorePlan) -> Vec<&'static str> {
    p.events.iter().map(|e| e.1).collect()
}

#[test]
fn a_new_restore_verifies_the_backup_first() {
    let p = plan(&observed());
    assert!(
        matches!(&p.step, RestoreStep::StartVerify { pod, attempt: 0, deadline_secs: 600, .. } if pod == "r-verify-1"),
        "{:?}",
        p.step
    );
    assert_eq!(p.status.phase, PHASE_VERIFYING);
    assert_eq!(reasons(&p), ["VerifyStarted"]);
}

#[test]
fn a_verified_backup_creates_the_cluster_marked_as_this_restores() {
    let mut o = observed();
    o.scope = Some("team-a".into());
    o.bump_revision = Some("false".into());
    o.pods = vec![verify_pod("r-verify-1", PodResult::Succeeded(meta("3.5.1")), None)];
    let p = plan(&o);
    let RestoreStep::CreateCluster(c) = &p.step else { panic!("{:?}", p.step) };
    let a = c.metadata.annotations.clone().unwrap();
    assert_eq!(a[RESTORED_BY_ANNOTATION], "uid-r");
    assert_eq!(a[RESTORED_FROM_ANNOTATION], "s3://b/k");
    assert_eq!(a[SCOPE_ANNOTATION], "team-a");
    assert_eq!(a[crate::naming::RESTORE_BUMP_REVISION_ANNOTATION], "false");
    assert_eq!(c.spec.restore.as_ref().unwrap().sha256, "ab".repeat(32));
    assert_eq!((c.spec.size, c.spec.version.as_str()), (3, "3.5.1"));
    assert_eq!(p.delete_pods, ["r-verify-1"]);
    assert_eq!(reasons(&p), ["BackupVerified", "ClusterCreated"]);
    assert_eq!(p.status.sha256, "ab".repeat(32));
}

#[test]
fn a_cluster_this_restore_did_not_create_is_never_replaced() {
    let mut o = observed();
    o.cluster = Some(ClusterSeen { restored_by: None, size: 3, ready_members: 3, restore_sha256: None });
    o.pods = vec![verify_pod("r-verify-1", PodResult::Succeeded(meta("3.5.1")), None)];
    let p = plan(&o);
    assert_eq!(p.step, RestoreStep::Nothing);
    assert_eq!(p.status.phase, PHASE_WAITING);
    assert!(p.status.reason.contains("never replaces a running cluster"));
    assert_eq!(reasons(&p), ["ClusterExists"]);
    o.status = p.status;
    assert!(plan(&o).events.is_empty(), "said once");
    // Another restore's cluster is not ours either.
    o.cluster.as_mut().unwrap().restored_by = Some("uid-other".into());
    assert_eq!(plan(&o).status.phase, PHASE_WAITING);
}

/// A restore that found the cluster in place waits for it to go only so long: deleted within
/// the wait, the restore proceeds; still there after it, or deleted only later (the operator may
/// have been down meanwhile), the restore is called off and never fires on its own: a cluster
/// deleted weeks later must not come back from an old backup.
#[test]
fn a_restore_waits_for_the_cluster_to_go_only_so_long() {
    use etcd_operator_api::condition;
    let mut o = observed();
    o.cluster = Some(ClusterSeen { restored_by: None, size: 3, ready_members: 3, restore_sha256: None });
    o.now = t("2026-01-01T00:00:00Z");
    let p = plan(&o);
    assert_eq!(p.status.phase, PHASE_WAITING);
    let waiting =
        condition::find(&p.status.conditions, "WaitingForCluster").cloned().expect("a condition says since when");
    assert_eq!((waiting.status.as_str(), waiting.last_transition_time.as_str()), ("True", "2026-01-01T00:00:00Z"));
    o.status = p.status;

    // Gone within the wait: verified and created as usual.
    let mut gone = o.clone();
    gone.cluster = None;
    gone.now = t("2026-01-01T00:20:00Z");
    assert!(matches!(plan(&gone).step, RestoreStep::StartVerify { .. }), "{:?}", plan(&gone).step);

    // Gone only hours later: called off, nothing verified or created, said once.
    gone.now = t("2026-01-01T03:00:00Z");
    let p = plan(&gone);
    assert_eq!(p.step, RestoreStep::Nothing);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert!(p.status.reason.contains("called off"), "{}", p.status.reason);
    assert_eq!(reasons(&p), ["ClusterWaitExpired"]);
    gone.status = p.status;
    let again = plan(&gone);
    assert!(again.events.is_empty() && again.step == RestoreStep::Nothing, "final until the spec changes");

    // Still there after the wait: called off too.
    let mut still = o.clone();
    still.now = t("2026-01-01T00:31:00Z");
    let p = plan(&still);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert_eq!(reasons(&p), ["ClusterWaitExpired"]);

    // A new spec starts afresh: the earlier wait does not count.
    let mut edited = gone.clone();
    edited.generation = 2;
    assert!(matches!(plan(&edited).step, RestoreStep::StartVerify { .. }), "{:?}", plan(&edited).step);
}

#[test]
fn the_restore_is_done_when_every_member_of_its_cluster_is_ready() {
    let mut o = observed();
    o.status.phase = PHASE_RESTORING.into();
    let ours = |ready| ClusterSeen {
        restored_by: Some("uid-r".into()),
        size: 3,
        ready_members: ready,
        restore_sha256: Some("cd".repeat(32)),
    };
    o.cluster = Some(ours(2));
    let p = plan(&o);
    assert_eq!((p.status.phase.as_str(), p.status.succeeded), (PHASE_RESTORING, false));
    assert!(p.status.reason.contains("2/3 members ready"));
    assert_eq!(p.status.sha256, "cd".repeat(32), "a lost status write is recovered from the cluster");
    o.cluster = Some(ours(3));
    let p = plan(&o);
    assert_eq!((p.status.phase.as_str(), p.status.succeeded), (PHASE_RESTORED, true));
    assert_eq!(p.requeue, None);
    // Final: nothing more for this generation, even if the cluster changes.
    o.status = p.status;
    o.cluster = None;
    let again = plan(&o);
    assert!(again.events.is_empty() && again.step == RestoreStep::Nothing && again.status.succeeded);
}

#[test]
fn a_cluster_deleted_while_it_is_restored_fails_the_restore() {
    let mut o = observed();
    o.status.phase = PHASE_RESTORING.into();
    let p = plan(&o);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert_eq!(reasons(&p), ["RestoreFailed"]);
}

#[test]
fn only_the_current_generations_verify_pods_count() {
    let mut o = observed();
    o.generation = 2;
    o.pods = vec![verify_pod("r-verify-1", PodResult::Succeeded(meta("3.5.1")), None)];
    let p = plan(&o);
    assert_eq!(p.delete_pods, ["r-verify-1"], "it checked the spec before the change");
    assert!(matches!(&p.step, RestoreStep::StartVerify { pod, .. } if pod == "r-verify-2"));
}

#[test]
fn a_wrong_backup_is_refused_at_once_and_nothing_is_created() {
    let mut o = observed();
    // The termination message of `backup-verify` that found the wrong backup.
    let why = super::super::contract::PodError::Refused("checksum mismatch: x".into()).to_string();
    o.pods = vec![verify_pod("r-verify-1", PodResult::Failed(why), Some("2026-01-01T00:09:59Z"))];
    let p = plan(&o);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert!(p.status.reason.contains("backup refused, nothing created: checksum mismatch"));
    assert_eq!(reasons(&p), ["BackupRejected"]);
    assert_eq!(p.delete_pods, ["r-verify-1"]);
}

/// A store that is down is not a wrong backup: the verify is retried after a pause, with more
/// time, and given up only after the last attempt.
#[test]
fn a_verify_that_failed_for_another_reason_is_retried_with_a_pause() {
    let mut o = observed();
    o.pods =
        vec![verify_pod("r-verify-1", PodResult::Failed("connection refused".into()), Some("2026-01-01T00:09:58Z"))];
    let p = plan(&o);
    assert_eq!(p.step, RestoreStep::Nothing, "paused");
    assert_eq!(p.requeue, Some(Duration::from_secs(8)));
    assert_eq!(reasons(&p), ["VerifyRetrying"]);
    o.status = p.status;
    o.now = t("2026-01-01T00:10:08Z");
    let p = plan(&o);
    assert!(
        matches!(&p.step, RestoreStep::StartVerify { pod, attempt: 1, deadline_secs: 1200, .. } if pod == "r-verify-1-1"),
        "{:?}",
        p.step
    );
    assert_eq!(p.delete_pods, ["r-verify-1"]);
    let last = verify_policy::VERIFY_ATTEMPTS - 1;
    o.pods = vec![verify_pod(
        &verify_policy::pod_name("r", 1, last),
        PodResult::Failed("connection refused".into()),
        Some("2026-01-01T00:00:00Z"),
    )];
    let p = plan(&o);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert_eq!(reasons(&p), ["BackupUnreadable"]);
}

/// A big backup gets a verify pod with time for its size (an EtcdBackup's status records it),
/// on every attempt: 10 min and a minute per GiB, doubled per attempt.
#[test]
fn the_verify_time_limit_grows_with_the_backups_recorded_size() {
    let mut o = observed();
    o.backup_size = Some(8 << 30);
    let p = plan(&o);
    assert!(matches!(&p.step, RestoreStep::StartVerify { deadline_secs: 1080, .. }), "{:?}", p.step);
    o.pods = vec![verify_pod(
        "r-verify-1",
        PodResult::Failed("pod r-verify-1 failed: DeadlineExceeded".into()),
        Some("2026-01-01T00:00:00Z"),
    )];
    let p = plan(&o);
    assert!(matches!(&p.step, RestoreStep::StartVerify { attempt: 1, deadline_secs: 2160, .. }), "{:?}", p.step);
    assert!(p.status.reason.contains("attempt 2 of 5, 2160s allowed"), "{}", p.status.reason);
}

#[test]
fn a_backup_of_an_etcd_too_old_for_the_requested_version_creates_nothing() {
    let mut o = observed();
    o.spec = Ok(spec(Some(EtcdClusterSpec { size: 3, version: "3.6.6".into(), ..Default::default() })));
    o.pods = vec![verify_pod("r-verify-1", PodResult::Succeeded(meta("3.4.23")), None)];
    let p = plan(&o);
    assert_eq!(p.step, RestoreStep::Nothing);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert!(p.status.reason.contains("skips a minor version"), "{}", p.status.reason);
}

#[test]
fn an_invalid_restore_changes_nothing_and_says_why() {
    let mut o = observed();
    o.spec = Err("spec cannot be read: invalid type".into());
    let p = plan(&o);
    assert_eq!((p.step.clone(), p.status.phase.as_str()), (RestoreStep::Nothing, PHASE_FAILED));
    assert_eq!(reasons(&p), ["InvalidSpec"]);
    o.status = p.status;
    o.spec = Ok(spec(None));
    assert_eq!(plan(&o).step, RestoreStep::Nothing, "refused for this generation until the spec changes");
    o.generation = 2;
    assert!(matches!(plan(&o).step, RestoreStep::StartVerify { .. }), "a new spec starts over");
}

/// Restore `r` of `pvc://backups/ex/etcd.backup`.
fn from_pvc() -> RestoreObserved {
    let mut s = spec(None);
    s.backup_storage_type = "PVC".into();
    s.source = BackupSource {
        pvc: Some(etcd_operator_api::backup::PvcSource { claim_name: "backups".into(), path: "ex/etcd.backup".into() }),
        ..Default::default()
    };
    RestoreObserved { spec: Ok(s), ..observed() }
}

const DENIED: &str = "access denied to uid 65532: uid 65532 (gid 65532, groups [65532]) cannot read /backup/ex/etcd.backup (owner 0:0, mode 600)";

/// The verify pod runs as non-root; denied the claim, the claim is marked as root's (which also
/// runs the restored member that reads it as root) and the next attempt starts at once, as root.
#[test]
fn a_backup_volume_the_non_root_user_may_not_read_is_marked_and_verified_again_at_once_as_root() {
    let o = from_pvc();
    assert!(matches!(plan(&o).step, RestoreStep::StartVerify { as_root: false, .. }), "non-root first");
    let mut o = from_pvc();
    o.pods = vec![verify_pod("r-verify-1", PodResult::Failed(DENIED.into()), Some("2026-01-01T00:09:59Z"))];
    let p = plan(&o);
    assert_eq!(p.mark_root_volume.as_deref(), Some("backups"));
    assert!(
        matches!(&p.step, RestoreStep::StartVerify { pod, attempt: 1, as_root: true, .. } if pod == "r-verify-1-1"),
        "at once, no pause: {:?}",
        p.step
    );
    assert_eq!(p.delete_pods, ["r-verify-1"]);
    assert_eq!(reasons(&p), ["VerifyRunsAsRoot"]);
    let note = &p.events[0].2;
    assert!(note.contains("volume backups is not readable by uid 65532") && note.contains("mode 600"), "{note}");
    assert!(note.contains("restored member") && note.contains("restricted"), "{note}");
    let c = etcd_operator_api::condition::find(&p.status.conditions, volume_owner::RUNS_AS_ROOT).expect("condition");
    assert_eq!((c.status.as_str(), &c.message), ("True", note));
    // Marked (this attempt or an earlier object's): every verify pod runs as root, the
    // condition says why.
    let mut o = from_pvc();
    o.volume_root = true;
    let p = plan(&o);
    assert!(matches!(p.step, RestoreStep::StartVerify { as_root: true, .. }), "{:?}", p.step);
    assert_eq!(p.mark_root_volume, None);
    let c = etcd_operator_api::condition::find(&p.status.conditions, volume_owner::RUNS_AS_ROOT).expect("condition");
    assert!(c.message.contains("is marked") && c.message.contains("restricted"), "{}", c.message);
}

/// Root denied (it has no capability in the pod), or another location: nothing to mark, the
/// ordinary retry policy.
#[test]
fn a_denial_to_root_or_to_an_object_store_pod_marks_nothing() {
    let mut o = from_pvc();
    o.volume_root = true;
    let as_root = DENIED.replace("uid 65532:", "uid 0:");
    o.pods = vec![verify_pod("r-verify-1-1", PodResult::Failed(as_root), Some("2026-01-01T00:09:59Z"))];
    let p = plan(&o);
    assert_eq!((p.step.clone(), p.mark_root_volume.clone()), (RestoreStep::Nothing, None), "paused as usual");
    assert_eq!(reasons(&p), ["VerifyRetrying"]);
    let mut o = observed();
    o.pods = vec![verify_pod("r-verify-1", PodResult::Failed(DENIED.into()), Some("2026-01-01T00:09:59Z"))];
    let p = plan(&o);
    assert_eq!((p.step.clone(), p.mark_root_volume.clone()), (RestoreStep::Nothing, None));
    assert!(p.status.conditions.is_empty());
}

// ---- point in time ------------------------------------------------------------------------------

fn at(revision: Option<i64>, time: Option<&str>) -> EtcdRestoreSpec {
    let mut s = spec(None);
    s.point_in_time =
        Some(etcd_operator_api::restore::PointInTime { revision, time: time.map(String::from), cluster_id: None });
    s
}

#[test]
fn a_point_in_time_is_a_revision_or_a_moment_never_both_nor_neither() {
    let r = check_spec(&at(Some(42), None)).unwrap().replay.unwrap();
    assert_eq!(r.target, PointTarget::Revision(42));
    assert_eq!((r.version.to_string(), r.cluster_id), (etcd_operator_api::cluster::DEFAULT_VERSION.to_string(), None));
    let r = check_spec(&at(None, Some("2026-11-28T01:00:00.250Z"))).unwrap().replay.unwrap();
    assert_eq!(r.target, PointTarget::Time(t("2026-11-28T01:00:00.250Z").as_millisecond()));
    for (s, says) in [
        (at(Some(1), Some("2026-11-28T01:00:00Z")), "not both"),
        (at(None, None), "give a revision or a time"),
        (at(Some(0), None), "1 or more"),
        (at(None, Some("yesterday")), "not an RFC 3339 time"),
    ] {
        let err = check_spec(&s).unwrap_err();
        assert!(err.contains(says), "{err}");
    }
    let mut s = at(Some(5), None);
    s.point_in_time.as_mut().unwrap().cluster_id = Some("not-hex".into());
    assert!(check_spec(&s).unwrap_err().contains("clusterId"));
    assert_eq!(check_spec(&spec(None)).unwrap().replay, None, "the CoreOS shape restores one snapshot");
}

/// The replay runs the etcd the cluster will run: the restore's version, else the default.
#[test]
fn the_replay_runs_the_version_the_cluster_will_run() {
    let mut s = at(Some(5), None);
    s.etcd_cluster.spec = Some(EtcdClusterSpec { size: 1, version: "3.5.26".into(), ..Default::default() });
    assert_eq!(check_spec(&s).unwrap().replay.unwrap().version.to_string(), "3.5.26");
}

#[test]
fn a_point_in_time_restore_replays_in_its_verify_pod_with_more_time_into_its_own_snapshot() {
    let mut o = observed();
    o.spec = Ok(at(Some(42), None));
    let p = plan(&o);
    let RestoreStep::StartVerify { deadline_secs, output: Some(out), target, .. } = &p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(*deadline_secs, 600 + REPLAY_EXTRA_SECS);
    assert_eq!(out.url(), "s3://b/k.restores/uid-r-g1.db");
    assert_eq!(target.location.url(), "s3://b/k", "the series is read");
    assert!(p.status.reason.contains("replaying the archive of s3://b/k to revision 42"), "{}", p.status.reason);
}

#[test]
fn a_replayed_snapshot_is_what_the_members_restore() {
    let mut o = observed();
    o.spec = Ok(at(Some(42), None));
    let mut m = meta("3.6.15");
    m.etcd_revision = 42;
    o.pods = vec![verify_pod("r-verify-1", PodResult::Succeeded(m), None)];
    let p = plan(&o);
    let RestoreStep::CreateCluster(c) = &p.step else { panic!("{:?}", p.step) };
    let from = c.spec.restore.as_ref().unwrap();
    assert_eq!(from.source.s3.as_ref().unwrap().path, "b/k.restores/uid-r-g1.db");
    assert_eq!(from.source.s3.as_ref().unwrap().aws_secret, "aws", "the same credentials");
    assert_eq!(c.metadata.annotations.as_ref().unwrap()[RESTORED_FROM_ANNOTATION], "s3://b/k.restores/uid-r-g1.db");
    assert_eq!(c.spec.version, "3.6.15", "the version that wrote the snapshot");
    assert_eq!(p.status.restored_from, "s3://b/k.restores/uid-r-g1.db");
    assert_eq!(p.status.etcd_revision, 42);
    assert_eq!(reasons(&p), ["PointInTimeReplayed", "ClusterCreated"]);
}

/// A target outside the archive is refused at once with what is restorable, nothing created.
#[test]
fn a_point_the_archive_cannot_restore_is_refused_with_the_ranges() {
    let mut o = observed();
    o.spec = Ok(at(Some(9999), None));
    let why = super::super::contract::PodError::Refused(
        "revision 9999 cannot be restored: it is after the last durable change; restorable: revisions 100..=250".into(),
    )
    .to_string();
    o.pods = vec![verify_pod("r-verify-1", PodResult::Failed(why), Some("2026-01-01T00:09:59Z"))];
    let p = plan(&o);
    assert_eq!(p.status.phase, PHASE_FAILED);
    assert!(p.status.reason.contains("point-in-time restore refused") && p.status.reason.contains("100..=250"));
    assert_eq!(reasons(&p), ["PointInTimeRefused"]);
    assert!(matches!(p.step, RestoreStep::Nothing));
}

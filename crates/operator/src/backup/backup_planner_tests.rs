//! Table tests of the EtcdBackup planner, one decision each, read like an operations runbook.

use super::*;
use crate::backup::location::BackupMeta;
use etcd_operator_api::backup::{BackupPolicy, BackupSource, S3Source};
use etcd_operator_api::condition;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn spec(interval: i64, max: i32) -> EtcdBackupSpec {
    EtcdBackupSpec {
        cluster_name: "ex".into(),
        storage_type: "S3".into(),
        backup_policy: Some(BackupPolicy {
            backup_interval_in_second: interval,
            max_backups: max,
            timeout_in_second: 0,
            retention: String::new(),
        }),
        source: BackupSource {
            s3: Some(S3Source { path: "b/k".into(), aws_secret: "aws".into(), ..Default::default() }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A backup `b` of spec generation 1, observed at 00:10:00.
fn observed(interval: i64) -> BackupObserved {
    BackupObserved {
        name: "b".into(),
        namespace: "ns".into(),
        generation: 1,
        spec: Ok(spec(interval, 2)),
        status: EtcdBackupStatus::default(),
        pods: vec![],
        drill_pods: vec![],
        volume_root: false,
        now: t("2026-01-01T00:10:00Z"),
    }
}

fn succeeded(name: &str, sha: &str) -> JobPodState<SaveReport> {
    let backup = BackupMeta {
        path: "s3://b/k".into(),
        sha256: sha.into(),
        time: "2026-01-01T00:09:30Z".into(),
        ..Default::default()
    };
    JobPodState {
        result: PodResult::Succeeded(SaveReport { kept: vec![backup.clone()], backup, ..Default::default() }),
        ..JobPodState::running(name)
    }
}

fn failed(name: &str, why: &str) -> JobPodState<SaveReport> {
    JobPodState { result: PodResult::Failed(why.into()), ..JobPodState::running(name) }
}

fn reasons(p: &BackupPlan) -> Vec<&'static str> {
    p.events.iter().map(|e| e.1).collect()
}

#[test]
fn a_new_one_shot_backup_starts_at_once_and_says_so() {
    let p = plan(&observed(0));
    assert!(matches!(&p.step, BackupStep::StartBackup { pod, .. } if pod == "b-1767226200"), "{:?}", p.step);
    assert_eq!(p.status.last_attempt_date.as_deref(), Some("2026-01-01T00:10:00Z"));
    assert_eq!(p.status.observed_generation, 1);
    assert_eq!(reasons(&p), ["BackupStarted"]);
}

/// Events are read by more people than the spec: `BackupStarted` names the EtcdCluster (or how
/// many endpoints), never the endpoint URLs (which may carry credentials or internal addresses).
#[test]
fn backup_started_does_not_echo_the_endpoints() {
    let p = plan(&observed(0));
    let note = &p.events[0].2;
    assert!(note.contains("EtcdCluster ex") && note.contains("s3://b/k"), "{note}");
    assert!(!note.contains("http"), "{note}");
    let mut o = observed(0);
    let mut s = spec(0, 0);
    s.cluster_name.clear();
    s.etcd_endpoints = vec!["https://user:secret@10.0.0.7:2379".into(), "https://10.0.0.8:2379".into()];
    o.spec = Ok(s);
    let p = plan(&o);
    let note = &p.events[0].2;
    assert_eq!(p.events[0].1, "BackupStarted");
    assert!(note.contains("2 etcdEndpoints"), "{note}");
    assert!(!note.contains("10.0.0.7") && !note.contains("secret"), "{note}");
}

/// The EtcdCluster was deleted and re-created (another etcd cluster ID): the first backup of
/// the new cluster is recorded with its cluster, says in a Warning that the old cluster's
/// backups are kept, and a condition says so while they are.
#[test]
fn the_first_backup_of_another_etcd_cluster_warns_and_records_the_cluster() {
    let mut o = observed(60);
    o.status.last_attempt_date = Some("2026-01-01T00:09:30Z".into());
    o.status.observed_generation = 1;
    o.status.cluster_id = "aa".into();
    let mut pod = succeeded("b-1", "cc");
    if let PodResult::Succeeded(r) = &mut pod.result {
        r.backup.cluster_id = "bb".into();
        r.kept[0].cluster_id = "bb".into();
        r.other_clusters = std::collections::BTreeMap::from([("aa".to_string(), 2)]);
    }
    o.pods = vec![pod.clone()];
    let p = plan(&o);
    assert_eq!(reasons(&p), ["BackupSucceeded", "BackupClusterChanged"]);
    assert_eq!(p.events[1].0, EventType::Warning);
    assert_eq!(p.status.cluster_id, "bb");
    assert_eq!(p.status.history[0].cluster_id, "bb");
    let c = condition::find(&p.status.conditions, crate::backup::identity::OTHER_CLUSTERS).expect("condition");
    assert!(c.message.contains("2 of etcd cluster aa"), "{}", c.message);
    // The next backup of the new cluster: no Warning again.
    o.status = p.status;
    o.pods = vec![JobPodState { name: "b-2".into(), ..pod }];
    assert_eq!(reasons(&plan(&o)), ["BackupSucceeded"]);
}

#[test]
fn a_finished_pod_is_recorded_once_then_deleted() {
    let mut o = observed(0);
    o.status.last_attempt_date = Some("2026-01-01T00:09:00Z".into());
    o.status.observed_generation = 1;
    o.pods = vec![succeeded("b-1", "aa")];
    let p = plan(&o);
    assert_eq!(reasons(&p), ["BackupSucceeded"]);
    assert_eq!((p.status.succeeded, p.status.sha256.as_str()), (true, "aa"));
    assert_eq!(p.status.recorded_pods, ["b-1"], "the pod is named in the same status write");
    assert_eq!(p.delete_pods, ["b-1"]);
    assert_eq!(p.step, BackupStep::Nothing, "a one-shot backup that succeeded is done");
    assert_eq!(p.requeue, Some(Duration::from_secs(300)));
}

/// The operator restarted after writing status and before deleting the pod: the pod is still
/// there, but status names it, so it is deleted without counting it again.
#[test]
fn a_pod_already_in_status_is_not_counted_again_after_an_operator_restart() {
    let mut o = observed(0);
    o.status.last_attempt_date = Some("2026-01-01T00:09:00Z".into());
    o.status.observed_generation = 1;
    o.pods = vec![failed("b-1", "connection refused")];
    let first = plan(&o);
    assert_eq!(first.status.consecutive_failures, 1);
    // Restart: status as written, the pod not deleted.
    o.status = first.status.clone();
    let again = plan(&o);
    assert_eq!(again.status.consecutive_failures, 1, "counted once");
    assert!(again.events.iter().all(|e| e.1 != "BackupFailed"), "no second Event: {:?}", again.events);
    assert_eq!(again.delete_pods, ["b-1"]);
}

#[test]
fn recorded_pod_names_are_bounded() {
    let mut o = observed(60);
    o.status.recorded_pods = (0..RECORDED_PODS).map(|i| format!("b-{i}")).collect();
    o.pods = vec![failed("b-new", "x")];
    let p = plan(&o);
    assert_eq!(p.status.recorded_pods.len(), RECORDED_PODS);
    assert_eq!(p.status.recorded_pods.last().unwrap(), "b-new");
    assert_eq!(p.status.recorded_pods[0], "b-1", "the oldest name goes");
}

#[test]
fn a_failed_one_shot_backup_is_retried_after_a_growing_delay() {
    for (failures, last_attempt, due) in [
        (1, "2026-01-01T00:09:55Z", "2026-01-01T00:10:05Z"), // 10 s after one failure
        (3, "2026-01-01T00:09:55Z", "2026-01-01T00:10:35Z"), // 40 s after three
        (20, "2026-01-01T00:09:55Z", "2026-01-01T00:14:55Z"), // capped at 5 min
    ] {
        let mut o = observed(0);
        o.status = EtcdBackupStatus {
            last_attempt_date: Some(last_attempt.into()),
            observed_generation: 1,
            consecutive_failures: failures,
            ..Default::default()
        };
        let p = plan(&o);
        assert_eq!(p.step, BackupStep::Nothing, "{failures}");
        assert_eq!(p.requeue, Some(Duration::try_from(t(due).duration_since(o.now)).unwrap()), "{failures}");
        o.now = t(due);
        assert!(matches!(plan(&o).step, BackupStep::StartBackup { .. }), "due at {due}");
    }
}

#[test]
fn a_changed_spec_backs_up_again_even_after_success() {
    let mut o = observed(0);
    o.status = EtcdBackupStatus {
        last_attempt_date: Some("2026-01-01T00:09:55Z".into()),
        observed_generation: 1,
        succeeded: true,
        ..Default::default()
    };
    assert_eq!(plan(&o).step, BackupStep::Nothing);
    o.generation = 2;
    assert!(matches!(plan(&o).step, BackupStep::StartBackup { .. }));
}

/// A periodic backup is due an interval after the last attempt; one that failed is tried again
/// after the one-shot's growing delay (10 s, doubling), never later than the interval: an hourly
/// backup that failed once does not leave the cluster an hour without one.
#[test]
fn a_failed_periodic_backup_is_retried_after_a_growing_delay_at_most_its_interval() {
    let at = |interval: i64, failures: i32| {
        let mut o = observed(interval);
        o.status = EtcdBackupStatus {
            last_attempt_date: Some("2026-01-01T00:09:00Z".into()),
            observed_generation: 1,
            consecutive_failures: failures,
            ..Default::default()
        };
        o
    };
    // Now is 00:10:00, a minute after the last attempt.
    let p = plan(&at(3600, 0));
    assert_eq!(p.step, BackupStep::Nothing);
    assert_eq!(p.requeue, Some(Duration::from_secs(3540)), "succeeded: due at 01:09:00");
    assert!(matches!(plan(&at(3600, 1)).step, BackupStep::StartBackup { .. }), "failed once: due at 00:09:10");
    let p = plan(&at(3600, 4));
    assert_eq!(p.step, BackupStep::Nothing);
    assert_eq!(p.requeue, Some(Duration::from_secs(20)), "failed 4 times: due 80 s after, at 00:10:20");
    let p = plan(&at(120, 5));
    assert_eq!(p.requeue, Some(Duration::from_secs(60)), "160 s is past the interval: due at 00:11:00");
    let mut o = at(120, 5);
    o.now = t("2026-01-01T00:11:00Z");
    assert!(matches!(plan(&o).step, BackupStep::StartBackup { .. }));
}

/// The CoreOS upgrade guide: every 30 s with the default 60 s limit. A backup due while one runs
/// waits (never two at once), and status says so; the note goes once nothing waits.
#[test]
fn a_backup_due_while_one_runs_waits_and_status_says_so() {
    let mut o = observed(30);
    o.status.last_attempt_date = Some("2026-01-01T00:09:00Z".into());
    o.status.observed_generation = 1;
    o.pods = vec![JobPodState::running("b-1")];
    let p = plan(&o);
    assert_eq!(p.step, BackupStep::Nothing);
    assert!(p.status.reason.contains("b-1") && p.status.reason.contains("never overlap"), "{}", p.status.reason);
    assert_eq!(p.requeue, Some(Duration::from_secs(30)));
    o.status = p.status;
    o.pods = vec![succeeded("b-1", "aa")];
    let p = plan(&o);
    assert!(matches!(p.step, BackupStep::StartBackup { .. }), "the delayed backup starts as the last ends");
    assert_eq!(p.status.reason, "");
}

/// A backup's retention could delete the snapshot a running restore drill reads (a false
/// `DrillFailed` with `maxBackups: 1`): a due backup waits for the drill, and says so.
#[test]
fn a_backup_due_while_a_restore_drill_runs_waits_for_it() {
    let mut o = observed(30);
    o.status.last_attempt_date = Some("2026-01-01T00:09:00Z".into());
    o.status.observed_generation = 1;
    o.drill_pods = vec![JobPodState::running("b-drill-1767225600")];
    let p = plan(&o);
    assert_eq!(p.step, BackupStep::Nothing);
    assert!(
        p.status.reason.contains("restore drill") && p.status.reason.contains("b-drill-1767225600"),
        "{}",
        p.status.reason
    );
    o.drill_pods.clear();
    assert!(matches!(plan(&o).step, BackupStep::StartBackup { .. }));
}

#[test]
fn a_pod_that_never_started_is_given_up_with_its_reason() {
    let mut o = observed(0);
    o.status.last_attempt_date = Some("2026-01-01T00:00:00Z".into());
    o.status.observed_generation = 1;
    let stuck = |created: &str| JobPodState {
        created: Some(t(created)),
        pending: Some("not scheduled: 0/1 nodes are available".into()),
        ..JobPodState::running("b-1")
    };
    // The limit: the 60 s timeout and twice the 60 s start slack.
    o.pods = vec![stuck("2026-01-01T00:07:01Z")];
    assert!(plan(&o).delete_pods.is_empty(), "young enough");
    o.pods = vec![stuck("2026-01-01T00:06:59Z")];
    let p = plan(&o);
    assert_eq!(p.delete_pods, ["b-1"]);
    assert!(p.status.reason.contains("did not start within 180s: not scheduled"), "{}", p.status.reason);
    assert_eq!(p.status.consecutive_failures, 1);
}

#[test]
fn a_second_pod_in_the_same_second_is_not_attempted() {
    let mut o = observed(1);
    o.status.last_attempt_date = Some("2026-01-01T00:09:59Z".into());
    o.status.observed_generation = 1;
    o.status.recorded_pods = vec!["b-1767226200".into()];
    o.pods = vec![failed("b-1767226200", "x")];
    let p = plan(&o);
    assert_eq!(p.step, BackupStep::Nothing);
    assert_eq!(p.requeue, Some(Duration::from_secs(1)));
}

#[test]
fn a_pod_refused_by_admission_is_a_failed_attempt() {
    let mut p = plan(&observed(0));
    start_failed(&mut p, "b-1767226200", "exceeded quota".into());
    assert_eq!(p.step, BackupStep::Nothing);
    assert!(p.status.reason.contains("could not create the backup pod b-1767226200: exceeded quota"));
    assert_eq!(p.status.consecutive_failures, 1);
    assert_eq!(p.requeue, Some(Duration::from_secs(10)));
    assert_eq!(reasons(&p), ["BackupStarted", "BackupFailed"]);
}

#[test]
fn an_invalid_spec_changes_nothing_and_says_why_once() {
    let mut o = observed(0);
    let mut s = spec(0, 0);
    s.etcd_endpoints = vec!["http://x:2379".into()];
    o.spec = Ok(s);
    o.pods = vec![JobPodState::running("b-1")];
    let p = plan(&o);
    assert_eq!(p.step, BackupStep::Nothing);
    assert!(p.delete_pods.is_empty());
    assert!(p.status.reason.contains("not both"), "{}", p.status.reason);
    assert_eq!(reasons(&p), ["InvalidSpec"]);
    assert_eq!(p.requeue, None);
    o.status = p.status;
    assert!(plan(&o).events.is_empty(), "said once");
    o.spec = Err("spec cannot be read: invalid type".into());
    assert!(plan(&o).status.reason.contains("cannot be read"));
}

/// `retention` is a window such as `168h`: anything else is refused before any backup pod
/// runs, so nothing is deleted on a misread window; said once, as every invalid spec.
#[test]
fn an_unreadable_retention_window_is_refused_and_nothing_runs() {
    for (window, says) in
        [("7d", "not a duration such as 168h"), ("0s", "no time at all"), ("1 week", "not a duration such as 168h")]
    {
        let mut o = observed(60);
        let mut s = spec(60, 2);
        s.backup_policy.as_mut().unwrap().retention = window.into();
        o.spec = Ok(s);
        let p = plan(&o);
        assert_eq!(p.step, BackupStep::Nothing, "{window}");
        assert!(
            p.status.reason.starts_with("invalid spec, no backup taken: backupPolicy.retention"),
            "{}",
            p.status.reason
        );
        assert!(p.status.reason.contains(says), "{window}: {}", p.status.reason);
        assert_eq!(reasons(&p), ["InvalidSpec"]);
        o.status = p.status;
        assert!(plan(&o).events.is_empty(), "said once");
    }
    // A window without periodic backups decides nothing: refused too.
    let mut s = spec(0, 0);
    s.backup_policy.as_mut().unwrap().retention = "168h".into();
    assert!(check_spec(&s, "ns").unwrap_err().contains("needs periodic backups"));
    // Read, it goes to the backup pod in seconds.
    let mut s = spec(60, 2);
    s.backup_policy.as_mut().unwrap().retention = "1h30m".into();
    assert_eq!(check_spec(&s, "ns").map(|t| t.retention_secs), Ok(Some(5400)));
    assert_eq!(check_spec(&spec(60, 2), "ns").map(|t| t.retention_secs), Ok(None));
}

/// A periodic backup's report says what the series restores: status takes it whole; a
/// report without it (a one-shot backup, a listing that failed) leaves status as it was.
#[test]
fn restorable_ranges_come_from_the_last_report_that_listed_them() {
    use etcd_operator_api::backup::RestorableRange;
    let range = |from: i64, to: i64| RestorableRange {
        cluster_id: "c1".into(),
        from_revision: from,
        to_revision: to,
        ..Default::default()
    };
    let mut st = EtcdBackupStatus::default();
    let mut r = SaveReport { restorable: Some(vec![range(100, 250), range(300, 300)]), ..Default::default() };
    record(&mut st, Ok(r.clone()));
    assert_eq!(st.restorable_ranges, [range(100, 250), range(300, 300)]);
    r.restorable = None;
    record(&mut st, Ok(r.clone()));
    assert_eq!(st.restorable_ranges.len(), 2, "not listed: kept as it was");
    r.restorable = Some(vec![range(300, 420)]);
    record(&mut st, Ok(r));
    assert_eq!(st.restorable_ranges, [range(300, 420)], "retention deleted the older snapshot");
}

#[test]
fn a_failure_keeps_the_last_good_backup_in_status() {
    let mut st = EtcdBackupStatus::default();
    let mut r = SaveReport::default();
    r.backup.path = "s3://b/k_v5".into();
    r.backup.sha256 = "aa".into();
    r.kept = vec![r.backup.clone()];
    let (ty, reason, _) = record(&mut st, Ok(r));
    assert_eq!((ty, reason), (EventType::Normal, "BackupSucceeded"));
    let (ty, reason, note) = record(&mut st, Err("connection refused".into()));
    assert_eq!((ty, reason, note.as_str()), (EventType::Warning, "BackupFailed", "connection refused"));
    assert!(!st.succeeded);
    assert_eq!((st.path.as_str(), st.sha256.as_str(), st.history.len()), ("s3://b/k_v5", "aa", 1));
    assert_eq!(st.consecutive_failures, 1);
}

/// Numbers far past any sensible value are refused naming the field and the range; before,
/// they panicked in date arithmetic and took the whole operator down.
#[test]
fn absurd_policy_numbers_are_refused_not_panicked_on() {
    for (interval, timeout, max, field) in [
        (100_000_000_000_000, 0, 0, "backupIntervalInSecond"),
        (0, 10_000_000_000_000_000, 0, "timeoutInSecond"),
        (i64::MAX, 0, 0, "backupIntervalInSecond"),
        (-1, 0, 0, "backupIntervalInSecond"),
        (0, 0, i32::MAX, "maxBackups"),
    ] {
        let mut s = spec(interval, max);
        s.backup_policy.as_mut().unwrap().timeout_in_second = timeout;
        let e = check_spec(&s, "ns").unwrap_err();
        assert!(e.contains(field) && e.contains("between 0 and"), "{e}");
    }
    // The largest accepted interval still has a due time (no overflow, no panic).
    let p = check_spec(&spec(MAX_INTERVAL_SECS, 0), "ns").unwrap();
    let st = EtcdBackupStatus { last_attempt_date: Some("2026-01-01T00:00:00Z".into()), ..Default::default() };
    assert!(next_due(&p, &st, 0, t("2026-01-01T00:00:01Z")).is_some());
}

#[test]
fn specs_are_checked_with_the_reason_named() {
    let p = check_spec(&spec(0, 0), "ns").unwrap();
    assert_eq!(p.endpoints, ["http://ex-client.ns.svc:2379"]);
    assert_eq!(p.timeout_secs, DEFAULT_TIMEOUT_SECS);
    assert!(p.interval.is_none());
    let mut s = spec(0, 0);
    s.cluster_name.clear();
    assert!(check_spec(&s, "ns").unwrap_err().contains("no cluster"));
    // The CoreOS upgrade guide's policy: every 30 s with the default 60 s limit.
    assert!(check_spec(&spec(30, 2), "ns").is_ok());
    let mut s = spec(0, 0);
    s.client_tls_secret = "tls".into();
    assert_eq!(check_spec(&s, "ns").unwrap().endpoints, ["https://ex-client.ns.svc:2379"], "a client certificate: TLS");
    let mut s = spec(0, 0);
    s.storage_type = "NFS".into();
    assert!(check_spec(&s, "ns").unwrap_err().contains("NFS"));
    let mut o = observed(0);
    o.name = "b".repeat(64);
    assert!(plan(&o).status.reason.contains("at most 63"));
}

/// A backup `b` to `pvc://backups/ex/etcd.backup`, an attempt made at 00:09:58 (a failure
/// would be retried at 00:10:08).
fn to_pvc() -> BackupObserved {
    let mut s = spec(0, 0);
    s.storage_type = "PVC".into();
    s.source = BackupSource {
        pvc: Some(etcd_operator_api::backup::PvcSource { claim_name: "backups".into(), path: "ex/etcd.backup".into() }),
        ..Default::default()
    };
    let mut o = BackupObserved { spec: Ok(s), ..observed(0) };
    o.status.last_attempt_date = Some("2026-01-01T00:09:58Z".into());
    o.status.observed_generation = 1;
    o
}

const DENIED: &str = "access denied to uid 65532: uid 65532 (gid 65532, groups [65532]) cannot create, replace and delete files in /backup/ex (owner 0:0, mode 755)";

/// The backup pod runs as non-root; denied the claim, the failure is recorded, the claim is
/// marked as root's and the backup starts again at once (no back-off), as root; status and an
/// Event say why and that `restricted` refuses such a pod.
#[test]
fn a_volume_the_non_root_user_may_not_write_is_marked_and_backed_up_again_at_once_as_root() {
    let mut o = to_pvc();
    o.pods = vec![failed("b-1", DENIED)];
    let p = plan(&o);
    assert_eq!(p.mark_root_volume.as_deref(), Some("backups"));
    assert!(matches!(&p.step, BackupStep::StartBackup { as_root: true, .. }), "{:?}", p.step);
    assert_eq!(reasons(&p), ["BackupFailed", "BackupRunsAsRoot", "BackupStarted"]);
    assert_eq!(p.status.consecutive_failures, 1, "the denied attempt counts as failed");
    let note = &p.events[1].2;
    for want in ["volume backups is not writable by uid 65532", "mode 755", "data-owner=0", "as root", "restricted"] {
        assert!(note.contains(want), "{want}: {note}");
    }
    assert!(p.events[2].2.contains("as root"), "{}", p.events[2].2);
    let c = condition::find(&p.status.conditions, volume_owner::RUNS_AS_ROOT).expect("condition");
    assert_eq!((c.status.as_str(), &c.message), ("True", note));

    // The root attempt succeeds: the result says the user, the condition stays.
    o.status = p.status;
    o.volume_root = true;
    let mut ok = succeeded("b-2", "aa");
    if let PodResult::Succeeded(r) = &mut ok.result {
        r.uid = Some(0);
    }
    o.pods = vec![ok];
    let p = plan(&o);
    assert_eq!((p.status.succeeded, p.status.consecutive_failures), (true, 0));
    assert!(p.events.iter().any(|e| e.1 == "BackupSucceeded" && e.2.contains("as uid 0")), "{:?}", p.events);
    let c = condition::find(&p.status.conditions, volume_owner::RUNS_AS_ROOT).expect("condition kept");
    assert_eq!(c.message, *note, "the first message, which says why, stays");
    assert_eq!(p.mark_root_volume, None, "marked once");
}

/// Pods run as root only to a PVC marked as root's; an object store's never.
#[test]
fn backup_pods_run_as_root_only_to_a_pvc_marked_as_roots() {
    for (pvc, marked, as_root) in
        [(false, false, false), (false, true, false), (true, false, false), (true, true, true)]
    {
        let mut o = if pvc { to_pvc() } else { observed(0) };
        o.status = EtcdBackupStatus::default();
        o.volume_root = marked;
        let p = plan(&o);
        assert!(
            matches!(&p.step, BackupStep::StartBackup { as_root: a, .. } if *a == as_root),
            "pvc {pvc} marked {marked}: {:?}",
            p.step
        );
        let c = condition::find(&p.status.conditions, volume_owner::RUNS_AS_ROOT);
        assert_eq!(c.is_some(), as_root, "pvc {pvc} marked {marked}");
        if let Some(c) = c {
            assert!(c.message.contains("volume backups is marked") && c.message.contains("restricted"), "{c:?}");
        }
    }
    // The mark removed by a person: non-root again, the condition goes.
    let mut o = to_pvc();
    o.status.succeeded = false;
    o.volume_root = true;
    let st = plan(&o).status;
    o.status = EtcdBackupStatus { last_attempt_date: None, ..st };
    o.volume_root = false;
    let p = plan(&o);
    assert!(matches!(&p.step, BackupStep::StartBackup { as_root: false, .. }));
    assert!(p.status.conditions.is_empty());
}

/// Root denied (it has no capability in the pod) is an ordinary failure; a denial in a status
/// written before a person removed the mark marks nothing again; a denial recorded in the same
/// second as the mark (the next pod's name is not free yet) is retried at once.
#[test]
fn only_a_fresh_denial_to_the_non_root_user_marks_and_skips_the_back_off() {
    let mut o = to_pvc();
    o.volume_root = true;
    o.pods = vec![failed("b-1", &DENIED.replace("uid 65532:", "uid 0:"))];
    let p = plan(&o);
    assert_eq!((p.step.clone(), p.mark_root_volume.clone()), (BackupStep::Nothing, None), "back-off as usual");
    assert_eq!(p.requeue, Some(Duration::from_secs(8)));

    let mut o = to_pvc();
    o.status.reason = DENIED.into();
    o.status.consecutive_failures = 1;
    let p = plan(&o);
    assert_eq!((p.step.clone(), p.mark_root_volume.clone()), (BackupStep::Nothing, None), "no pod said it now");
    o.volume_root = true;
    assert!(matches!(plan(&o).step, BackupStep::StartBackup { as_root: true, .. }), "marked: at once");

    // An object store pod never says it; if a message did, nothing is marked.
    let mut o = observed(0);
    o.status.last_attempt_date = Some("2026-01-01T00:09:58Z".into());
    o.status.observed_generation = 1;
    o.pods = vec![failed("b-1", DENIED)];
    let p = plan(&o);
    assert_eq!((p.step.clone(), p.mark_root_volume.clone()), (BackupStep::Nothing, None));
}

/// Restore drills through the planner: the backup that just succeeded makes the first drill
/// due in the same reconcile (`drill::plan` has the drill's own table), besides the backup's
/// result; a `restoreDrill` out of range refuses the spec like any other field.
#[test]
fn the_first_drill_starts_in_the_reconcile_that_records_the_first_success() {
    use etcd_operator_api::backup::RestoreDrill;
    let mut o = observed(3600);
    if let Ok(s) = o.spec.as_mut() {
        s.restore_drill = Some(RestoreDrill { interval_in_second: 60, timeout_in_second: 0 });
    }
    o.status.last_attempt_date = Some("2026-01-01T00:09:00Z".into());
    o.status.observed_generation = 1;
    let p = plan(&o);
    assert_eq!(p.drill, None, "no backup has succeeded yet");
    o.pods = vec![succeeded("b-1767225540", "aa")];
    let p = plan(&o);
    // Named after the success it follows (00:09:30): the same name however often it is planned.
    assert_eq!(p.drill.map(|d| (d.pod, d.timeout_secs)), Some(("b-drill-1767226170".to_string(), 600)));
    assert!(p.events.iter().any(|e| e.1 == "BackupSucceeded") && p.events.iter().any(|e| e.1 == "DrillStarted"));
    if let Ok(s) = o.spec.as_mut() {
        s.restore_drill = Some(RestoreDrill { interval_in_second: -5, timeout_in_second: 0 });
    }
    let p = plan(&o);
    assert_eq!(p.drill, None);
    assert!(p.status.reason.contains("restoreDrill.intervalInSecond -5 is out of range"), "{}", p.status.reason);
}

//! Tests of restore drills' pure part: the key-space digest, and when a drill is due.

use super::*;
use crate::backup::job_pods::JobPodState;

fn e<'a>(key: &'a str, value: &'a str, create: i64, modified: i64, version: i64) -> Entry<'a> {
    Entry {
        key: key.as_bytes(),
        value: value.as_bytes(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease: 0,
    }
}

fn space() -> Vec<Entry<'static>> {
    vec![e("a", "1", 2, 9, 3), e("b/x", "two", 4, 4, 1), e("c", "", 5, 7, 2)]
}

#[test]
fn the_digest_does_not_depend_on_the_order_keys_are_listed_in() {
    let want = digest(&space()).unwrap();
    assert_eq!(want.keys, 3);
    assert_eq!(want.sha256.len(), 64);
    let mut reversed = space();
    reversed.reverse();
    assert_eq!(digest(&reversed).unwrap(), want);
    let rotated = [space()[1], space()[2], space()[0]];
    assert_eq!(digest(&rotated).unwrap(), want);
    // Page by page in key order (what the drill does) gives the same as all at once.
    let mut d = Digest::default();
    for x in space() {
        d.add(&x).unwrap();
    }
    assert_eq!(d.finish(), want);
}

/// The live cluster's keys may be attached to leases; a point-in-time restore writes them
/// without (lease grants are not in the watch history). Leases are not compared.
#[test]
fn the_digest_ignores_leases() {
    let leased: Vec<Entry> = space().into_iter().map(|x| Entry { lease: 0x694d_7a3c_1f00_0001, ..x }).collect();
    assert_eq!(digest(&leased).unwrap(), digest(&space()).unwrap());
}

#[test]
fn any_change_of_a_key_its_value_or_its_revisions_changes_the_digest() {
    let want = digest(&space()).unwrap();
    type Change = Box<dyn Fn(&mut Vec<Entry<'static>>)>;
    let changed: [(&str, Change); 8] = [
        ("value", Box::new(|s| s[1].value = b"tw0")),
        ("mod_revision", Box::new(|s| s[0].mod_revision = 8)),
        ("create_revision", Box::new(|s| s[2].create_revision = 6)),
        ("version", Box::new(|s| s[0].version = 4)),
        ("key", Box::new(|s| s[1].key = b"b/y")),
        (
            "a key missing",
            Box::new(|s| {
                s.remove(1);
            }),
        ),
        ("a key more", Box::new(|s| s.push(e("d", "", 10, 10, 1)))),
        (
            "a key with an empty value missing",
            Box::new(|s| {
                s.remove(2);
            }),
        ),
    ];
    for (what, change) in changed {
        let mut s = space();
        change(&mut s);
        let got = digest(&s).unwrap();
        assert_ne!(got.sha256, want.sha256, "{what}");
    }
}

/// Fields are length-prefixed: moving bytes from a key into its value is a different key space.
#[test]
fn moving_bytes_between_key_and_value_changes_the_digest() {
    let one = digest(&[e("ab", "c", 1, 1, 1)]).unwrap();
    let two = digest(&[e("a", "bc", 1, 1, 1)]).unwrap();
    assert_ne!(one.sha256, two.sha256);
}

#[test]
fn keys_out_of_order_or_twice_are_refused_not_hashed() {
    let mut d = Digest::default();
    d.add(&e("b", "", 1, 1, 1)).unwrap();
    let why = d.add(&e("a", "", 1, 1, 1)).unwrap_err();
    assert!(why.contains("out of order"), "{why}");
    assert!(d.add(&e("b", "", 1, 1, 1)).is_err(), "the same key twice");
    assert!(digest(&[e("k", "1", 1, 1, 1), e("k", "2", 2, 2, 2)]).is_err());
}

#[test]
fn the_verdict_names_both_sides_when_they_differ() {
    let live = digest(&space()).unwrap();
    let ok = compare(42, &live, &live).unwrap();
    assert!(ok.contains("revision 42") && ok.contains("3 keys") && ok.contains(&live.sha256), "{ok}");
    let mut s = space();
    s[0].value = b"X";
    let restored = digest(&s).unwrap();
    let why = compare(42, &restored, &live).unwrap_err();
    assert!(why.contains(&restored.sha256) && why.contains(&live.sha256) && why.contains("revision 42"), "{why}");
}

// --- When a drill is due ---

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const HOURLY: Schedule = Schedule { interval_secs: 3600, timeout_secs: 300 };

/// An EtcdBackup whose last backup succeeded at 00:00.
fn backed_up() -> EtcdBackupStatus {
    EtcdBackupStatus { succeeded: true, last_success_date: Some("2026-01-01T00:00:00Z".into()), ..Default::default() }
}

fn drilled_at(time: &str, succeeded: bool) -> EtcdBackupStatus {
    let d = DrillResult { time: time.into(), succeeded, revision: 100, ..Default::default() };
    EtcdBackupStatus { last_drill: Some(d), ..backed_up() }
}

fn run(
    st: &EtcdBackupStatus,
    schedule: Option<Schedule>,
    pods: &[JobPodState<DrillReport>],
    now: &str,
) -> (EtcdBackupStatus, DrillPlan) {
    let mut st = st.clone();
    let o = DrillObserved { backup: "b", schedule, pods, now: t(now), backup_running: false };
    let p = plan(&o, &mut st);
    (st, p)
}

fn pod(name: &str, created: &str, result: PodResult<DrillReport>) -> JobPodState<DrillReport> {
    JobPodState { created: Some(t(created)), result, ..JobPodState::running(name) }
}

fn passed() -> DrillReport {
    DrillReport {
        succeeded: true,
        cluster_id: "c0ffee".into(),
        revision: 250,
        snapshot: "s3://b/k_v100_2026-01-01-000000".into(),
        snapshot_revision: 100,
        segments: 3,
        restored: Some(KeySpace { keys: 12, sha256: "ab".into() }),
        live: Some(KeySpace { keys: 12, sha256: "ab".into() }),
        duration_seconds: 7.5,
        message: "the restore equals the live cluster at revision 250: 12 keys, sha256 ab".into(),
    }
}

#[test]
fn no_drill_before_the_first_successful_backup() {
    for st in [
        EtcdBackupStatus::default(),
        EtcdBackupStatus { succeeded: false, consecutive_failures: 3, ..Default::default() },
    ] {
        let (_, p) = run(&st, Some(HOURLY), &[], "2026-01-01T05:00:00Z");
        assert_eq!(p.start, None, "{st:?}");
        assert_eq!(p.requeue, None, "nothing to wait for: a backup's success reconciles again");
    }
}

#[test]
fn the_first_drill_starts_once_a_backup_succeeded_with_its_time_limit() {
    let (_, p) = run(&backed_up(), Some(HOURLY), &[], "2026-01-01T00:00:05Z");
    let start = p.start.expect("due at once");
    assert_eq!(start, DrillStart { pod: "b-drill-1767225600".into(), timeout_secs: 300, deadline_secs: 360 });
    assert_eq!(p.events.len(), 1);
    assert_eq!((p.events[0].0, p.events[0].1), (EventType::Normal, "DrillStarted"));
    // The defaults: daily, ten minutes.
    let s = schedule(Some(&RestoreDrill::default())).unwrap().unwrap();
    assert_eq!(s, Schedule { interval_secs: 86_400, timeout_secs: 600 });
    let (_, p) = run(&backed_up(), Some(s), &[], "2026-01-01T00:00:05Z");
    assert_eq!(p.start.map(|s| (s.timeout_secs, s.deadline_secs)), Some((600, 660)));
}

/// A reconcile whose pod cache has not caught up plans the same pod again: the same name, so
/// the API refuses the second create (the controller takes 409 as done), never two drills.
#[test]
fn a_drill_planned_twice_before_the_cache_shows_it_is_the_same_pod() {
    let (_, a) = run(&backed_up(), Some(HOURLY), &[], "2026-01-01T00:00:05Z");
    let (_, b) = run(&backed_up(), Some(HOURLY), &[], "2026-01-01T00:00:09Z");
    assert_eq!(a.start.unwrap().pod, b.start.unwrap().pod);
}

/// A backup's retention (`maxBackups: 1`, a window) may delete the snapshot a drill reads:
/// a due drill waits for a running backup rather than report a false failure.
#[test]
fn a_due_drill_waits_for_a_running_backup() {
    let mut st = backed_up();
    let o = DrillObserved {
        backup: "b",
        schedule: Some(HOURLY),
        pods: &[],
        now: t("2026-01-01T00:00:05Z"),
        backup_running: true,
    };
    let p = plan(&o, &mut st);
    assert_eq!(p.start, None);
    assert_eq!(p.requeue, Some(Duration::from_secs(5)));
    let p = plan(&DrillObserved { backup_running: false, ..o }, &mut st);
    assert!(p.start.is_some());
}

#[test]
fn never_two_drills_at_once() {
    let running = [pod("b-drill-1767225600", "2026-01-01T00:00:05Z", PodResult::Running)];
    // Long overdue, but one is still running.
    let (st, p) = run(&drilled_at("2025-12-01T00:00:00Z", true), Some(HOURLY), &running, "2026-01-01T00:04:00Z");
    assert_eq!(p.start, None);
    assert!(p.events.is_empty() && p.delete_pods.is_empty());
    assert_eq!(st.last_drill.unwrap().time, "2025-12-01T00:00:00Z", "nothing recorded while it runs");
}

#[test]
fn the_next_drill_is_due_an_interval_after_the_last_one_started() {
    let st = drilled_at("2026-01-01T01:00:00Z", true);
    let (_, p) = run(&st, Some(HOURLY), &[], "2026-01-01T01:59:59Z");
    assert_eq!(p.start, None);
    assert_eq!(p.requeue, Some(Duration::from_secs(1)), "looks again when it is due");
    let (_, p) = run(&st, Some(HOURLY), &[], "2026-01-01T02:00:00Z");
    assert_eq!(p.start.unwrap().pod, "b-drill-1767232800");
    // A failed drill is not retried sooner: it is a finding, not a hiccup; the alert is on.
    let (_, p) = run(&drilled_at("2026-01-01T01:00:00Z", false), Some(HOURLY), &[], "2026-01-01T01:30:00Z");
    assert_eq!(p.start, None);
}

/// A drill that took more than half its interval (a large key space, a slow store) pushes the
/// next one to twice its duration after its start: drills take at most half the time, so an
/// interval close to the drill's duration does not read the live cluster back to back.
#[test]
fn drills_rest_at_least_as_long_as_the_last_one_took() {
    let minute = Schedule { interval_secs: 60, timeout_secs: 600 };
    // (seconds the last drill took) → seconds after its start when the next is due.
    // An absurd recorded duration (negative, NaN, infinite: a status someone edited) is no
    // reason to stop drilling: it counts as none.
    for (took, due) in [
        (0.0, 60),
        (10.0, 60),
        (30.0, 60),
        (45.0, 90),
        (59.5, 119),
        (300.0, 600),
        (-5.0, 60),
        (f64::NAN, 60),
        (f64::INFINITY, 60),
    ] {
        let mut st = drilled_at("2026-01-01T01:00:00Z", true);
        st.last_drill.as_mut().unwrap().duration_seconds = took;
        let start = t("2026-01-01T01:00:00Z");
        let at = |secs: i64| k8s_openapi::jiff::Timestamp::from_second(start.as_second() + secs).unwrap().to_string();
        let (_, p) = run(&st, Some(minute), &[], &at(due - 1));
        assert_eq!(p.start, None, "took {took}s: not due at {}s", due - 1);
        let (_, p) = run(&st, Some(minute), &[], &at(due));
        assert!(p.start.is_some(), "took {took}s: due at {due}s");
    }
}

/// The operator keeps nothing in memory about drills: after a restart, the status alone says
/// when the last one started, so a drill is neither repeated early nor forgotten.
#[test]
fn after_an_operator_restart_the_status_decides() {
    let st = drilled_at("2026-01-01T03:50:00Z", true);
    let (_, p) = run(&st, Some(HOURLY), &[], "2026-01-01T04:00:00Z");
    assert_eq!(p.start, None, "the last drill started 10 minutes ago");
    let (_, p) = run(&st, Some(HOURLY), &[], "2026-01-01T07:00:00Z");
    assert!(p.start.is_some(), "overdue after a long outage: one drill, now");
    // A changed interval counts from the last drill too.
    let daily = Schedule { interval_secs: 86_400, ..HOURLY };
    let (_, p) = run(&st, Some(daily), &[], "2026-01-01T07:00:00Z");
    assert_eq!(p.start, None);
}

#[test]
fn a_finished_drill_is_recorded_once_with_an_event_and_its_pod_deleted() {
    let done = [pod("b-drill-1767225600", "2026-01-01T00:00:05Z", PodResult::Succeeded(passed()))];
    let (st, p) = run(&backed_up(), Some(HOURLY), &done, "2026-01-01T00:01:00Z");
    let d = st.last_drill.clone().expect("recorded");
    assert_eq!(
        d,
        DrillResult {
            time: "2026-01-01T00:00:05Z".into(),
            succeeded: true,
            revision: 250,
            snapshot: "s3://b/k_v100_2026-01-01-000000".into(),
            segments: 3,
            duration_seconds: 7.5,
            message: passed().message,
        }
    );
    assert_eq!(p.delete_pods, ["b-drill-1767225600"]);
    assert!(st.recorded_pods.contains(&"b-drill-1767225600".to_string()));
    let (kind, reason, note) = p.events[0].clone();
    assert_eq!((kind, reason), (EventType::Normal, "DrillSucceeded"));
    assert!(note.contains("revision 250") && note.contains("12 keys") && note.contains("7.5s"), "{note}");
    assert_eq!(p.start, None, "the next one is an interval after this one started");
    // The pod is still in a stale cache at the next reconcile: deleted again, not counted again.
    let (again, p) = run(&st, Some(HOURLY), &done, "2026-01-01T00:01:01Z");
    assert_eq!(again.last_drill, st.last_drill);
    assert!(p.events.is_empty(), "{:?}", p.events);
    assert_eq!(p.delete_pods, ["b-drill-1767225600"]);
}

#[test]
fn a_failed_drill_is_a_warning_with_what_it_found() {
    let found = DrillReport {
        succeeded: false,
        revision: 250,
        message: "segment k.archive/c0ffee/0000000101-0000000180.seg is damaged: checksum mismatch".into(),
        ..passed()
    };
    // A failed drill exits with 1: its report is the termination message of a Failed pod.
    let json = crate::backup::contract::drill_report_json(found.clone());
    let failed = [pod("b-drill-1767225600", "2026-01-01T00:00:05Z", PodResult::Failed(json))];
    let (st, p) = run(&backed_up(), Some(HOURLY), &failed, "2026-01-01T00:01:00Z");
    let d = st.last_drill.unwrap();
    assert!(!d.succeeded);
    assert_eq!((d.revision, d.segments, d.message.as_str()), (250, 3, found.message.as_str()));
    let (kind, reason, note) = p.events[0].clone();
    assert_eq!((kind, reason), (EventType::Warning, "DrillFailed"));
    assert!(note.contains("0000000101-0000000180.seg is damaged") && note.contains("revision 250"), "{note}");
}

#[test]
fn a_drill_pod_killed_at_its_deadline_or_never_started_is_a_failed_drill() {
    let mut killed = pod(
        "b-drill-1767225600",
        "2026-01-01T00:00:05Z",
        PodResult::Failed("pod b-drill-1767225600 failed: DeadlineExceeded Pod was active on the node longer than the specified deadline".into()),
    );
    killed.finished = Some(t("2026-01-01T00:06:05Z"));
    let (st, p) = run(&backed_up(), Some(HOURLY), &[killed], "2026-01-01T00:06:10Z");
    let d = st.last_drill.unwrap();
    assert!(!d.succeeded && d.message.contains("DeadlineExceeded"), "{d:?}");
    assert_eq!(d.duration_seconds, 360.0);
    assert_eq!(p.events[0].1, "DrillFailed");

    // Pending (an image that cannot be pulled): given up after the time limit and twice the
    // start slack, not before.
    let mut pending = pod("b-drill-1767225600", "2026-01-01T00:00:05Z", PodResult::Running);
    pending.pending = Some("ErrImagePull quay.io/coreos/etcd:v9".into());
    let (st, p) = run(&backed_up(), Some(HOURLY), std::slice::from_ref(&pending), "2026-01-01T00:07:05Z");
    assert_eq!((st.last_drill, p.start), (None, None), "420 s: still within 300 + 2 × 60");
    let (st, p) = run(&backed_up(), Some(HOURLY), &[pending], "2026-01-01T00:07:06Z");
    let d = st.last_drill.unwrap();
    assert!(d.message.contains("did not start within 420s") && d.message.contains("ErrImagePull"), "{d:?}");
    assert_eq!(p.delete_pods, ["b-drill-1767225600"]);
}

#[test]
fn without_restore_drill_none_starts_but_a_finished_one_is_still_recorded() {
    let (_, p) = run(&backed_up(), None, &[], "2026-01-01T00:00:05Z");
    assert_eq!((p.start, p.requeue), (None, None));
    let done = [pod("b-drill-1767225600", "2026-01-01T00:00:05Z", PodResult::Succeeded(passed()))];
    let (st, p) = run(&backed_up(), None, &done, "2026-01-01T00:01:00Z");
    assert!(st.last_drill.is_some_and(|d| d.succeeded));
    assert_eq!(p.delete_pods, ["b-drill-1767225600"]);
}

#[test]
fn the_schedule_is_checked_like_the_backup_policy() {
    assert_eq!(schedule(None), Ok(None));
    let s =
        |interval, timeout| schedule(Some(&RestoreDrill { interval_in_second: interval, timeout_in_second: timeout }));
    assert_eq!(s(60, 30), Ok(Some(Schedule { interval_secs: 60, timeout_secs: 30 })));
    assert!(s(-1, 0).unwrap_err().contains("restoreDrill.intervalInSecond -1 is out of range"));
    assert!(s(0, 86_401).unwrap_err().contains("restoreDrill.timeoutInSecond"));
    assert!(s(MAX_INTERVAL_SECS, MAX_TIMEOUT_SECS).is_ok());
}

//! When an EtcdRestore's verify pod fails: a backup that is wrong (checksum or size mismatch, no
//! backup or no sidecar where the spec points) is refused at once; anything else (the object
//! store unreachable, a read cut off, the pod killed or out of time) is retried, each attempt
//! with twice the time limit (a big backup on a slow store needs more than the first one),
//! after a pause that doubles too, at most [`VERIFY_ATTEMPTS`] times. The first time limit grows
//! with the backup's size where an EtcdBackup's status records it ([`recorded_size`]): 10 min
//! and a minute per GiB. Attempts are numbered by the pod names
//! (`<restore>-verify-<generation>[-<n>]`), so the count survives an operator restart without
//! status. Pure.

use etcd_operator_api::backup::EtcdBackupStatus;

use super::contract::PodError;

/// Verify pods tried before a backup that cannot be read is given up.
pub const VERIFY_ATTEMPTS: u32 = 5;
/// Time limit of the first verify pod, whatever the backup's size; doubled per attempt.
pub const FIRST_DEADLINE_SECS: i64 = 600;
/// Time the first verify pod gets per GiB of backup (each GiB begun counts) on top of
/// [`FIRST_DEADLINE_SECS`]: reading and hashing at 17 MiB/s at least, far below what any
/// object store or volume serves. Doubled per attempt, like the rest.
pub const DEADLINE_SECS_PER_GIB: i64 = 60;
/// Longest time limit of one verify pod: 6 h (the fifth attempt for an 8 GiB database, etcd's
/// largest, has 4.8 h).
pub const MAX_DEADLINE_SECS: i64 = 6 * 3600;
/// Pause after the first failed attempt; doubled per attempt.
pub const FIRST_PAUSE_SECS: i64 = 10;

/// Name of attempt `n` (0: the name verify pods always had).
pub fn pod_name(restore: &str, generation: i64, attempt: u32) -> String {
    if attempt == 0 {
        format!("{restore}-verify-{generation}")
    } else {
        format!("{restore}-verify-{generation}-{attempt}")
    }
}

/// The attempt a pod of this restore and generation is, if it is one.
pub fn attempt_of(pod: &str, restore: &str, generation: i64) -> Option<u32> {
    let base = pod_name(restore, generation, 0);
    if pod == base {
        return Some(0);
    }
    pod.strip_prefix(&base)?.strip_prefix('-')?.parse().ok()
}

/// The time limit (`activeDeadlineSeconds`) of attempt `attempt` for a backup of `size` bytes
/// (None: not known, the limit of a small backup).
pub fn deadline_secs(attempt: u32, size: Option<i64>) -> i64 {
    const GIB: u64 = 1 << 30;
    let gib = size.unwrap_or(0).max(0) as u64;
    let gib = i64::try_from(gib.div_ceil(GIB)).unwrap_or(i64::MAX);
    let first = FIRST_DEADLINE_SECS.saturating_add(DEADLINE_SECS_PER_GIB.saturating_mul(gib));
    first.saturating_mul(1 << attempt.min(6)).min(MAX_DEADLINE_SECS)
}

/// The size of the backup at `url` as the EtcdBackups' statuses record it (the last backup, or
/// one of the kept ones: the size its sidecar holds); the largest when several do (a one-shot
/// key written again), None when none does.
pub fn recorded_size<'a>(url: &str, statuses: impl IntoIterator<Item = &'a EtcdBackupStatus>) -> Option<i64> {
    statuses
        .into_iter()
        .flat_map(|st| {
            let last = (st.path == url && st.size > 0).then_some(st.size);
            last.into_iter().chain(st.history.iter().filter(|h| h.path == url && h.size > 0).map(|h| h.size))
        })
        .max()
}

/// What to do after attempt `attempt` failed with `why`, `since_secs` after it ended.
#[derive(Debug, PartialEq)]
pub enum AfterFailure {
    /// The backup is wrong: refuse the restore now.
    Refuse(String),
    /// Too many attempts: give up, saying why the last one failed.
    GiveUp(String),
    /// Try again once the pause is over (`wait_secs` more; 0: now) with this attempt number.
    Retry { attempt: u32, wait_secs: i64 },
}

pub fn after_failure(attempt: u32, why: &str, since_secs: i64) -> AfterFailure {
    if let PodError::Refused(r) = PodError::from_message(why) {
        return AfterFailure::Refuse(r);
    }
    if attempt + 1 >= VERIFY_ATTEMPTS {
        return AfterFailure::GiveUp(format!(
            "the backup could not be read in {VERIFY_ATTEMPTS} attempts, the last: {why}"
        ));
    }
    let pause = FIRST_PAUSE_SECS << attempt.min(6);
    AfterFailure::Retry { attempt: attempt + 1, wait_secs: (pause - since_secs).max(0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_are_numbered_by_pod_name_and_the_first_keeps_the_old_name() {
        assert_eq!(pod_name("r", 2, 0), "r-verify-2");
        assert_eq!(pod_name("r", 2, 3), "r-verify-2-3");
        assert_eq!(attempt_of("r-verify-2", "r", 2), Some(0));
        assert_eq!(attempt_of("r-verify-2-3", "r", 2), Some(3));
        assert_eq!(attempt_of("r-verify-1", "r", 2), None, "another generation");
        assert_eq!(attempt_of("r-verify-23", "r", 2), None, "not generation 23's attempt");
        assert_eq!(attempt_of("rr-verify-2", "r", 2), None);
    }

    #[test]
    fn a_wrong_backup_is_refused_at_once_and_a_read_error_retried_with_more_time() {
        assert_eq!(
            after_failure(0, "refused: checksum mismatch: x", 0),
            AfterFailure::Refuse("checksum mismatch: x".into())
        );
        // The store did not answer: retried after 10 s, then 20 s, ...
        assert_eq!(
            after_failure(0, "read backup s3://b/k: connection refused", 3),
            AfterFailure::Retry { attempt: 1, wait_secs: 7 }
        );
        assert_eq!(
            after_failure(1, "pod r-verify-2-1 failed: DeadlineExceeded", 30),
            AfterFailure::Retry { attempt: 2, wait_secs: 0 }
        );
        match after_failure(VERIFY_ATTEMPTS - 1, "read backup: timeout", 100) {
            AfterFailure::GiveUp(why) => assert!(why.contains("5 attempts") && why.contains("timeout"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// The verify pod's time limit: 10 min and a minute per GiB begun, doubled per attempt,
    /// at most 6 h; a backup of unknown size gets the limit of a small one.
    #[test]
    fn the_time_limit_grows_with_the_backups_size_and_per_attempt() {
        const GIB: i64 = 1 << 30;
        for (attempt, size, secs) in [
            (0, None, 600),
            (1, None, 1200),
            (4, None, 9600),
            (0, Some(0), 600),
            (0, Some(1), 660),
            (0, Some(GIB), 660),
            (0, Some(GIB + 1), 720),
            (0, Some(2 * GIB), 720),
            (0, Some(8 * GIB), 1080),
            (1, Some(8 * GIB), 2160),
            (4, Some(8 * GIB), 17_280),
            (4, Some(100 * GIB), MAX_DEADLINE_SECS),
            (0, Some(i64::MAX), MAX_DEADLINE_SECS),
            (u32::MAX, Some(i64::MAX), MAX_DEADLINE_SECS),
            (0, Some(-1), 600),
        ] {
            assert_eq!(deadline_secs(attempt, size), secs, "attempt {attempt}, {size:?} bytes");
        }
    }

    #[test]
    fn the_size_comes_from_the_backups_that_record_the_location() {
        use etcd_operator_api::backup::BackupRecord;
        let record = |path: &str, size| BackupRecord { path: path.into(), size, ..Default::default() };
        let a = EtcdBackupStatus {
            path: "s3://b/k".into(),
            size: 100,
            history: vec![record("s3://b/k", 100), record("s3://b/k_v1_2026-01-01-000000", 7)],
            ..Default::default()
        };
        let b = EtcdBackupStatus {
            path: "s3://b/other".into(),
            size: 5,
            history: vec![record("s3://b/k", 300)],
            ..Default::default()
        };
        assert_eq!(recorded_size("s3://b/k", [&a]), Some(100));
        assert_eq!(recorded_size("s3://b/k", [&a, &b]), Some(300), "the largest");
        assert_eq!(recorded_size("s3://b/k_v1_2026-01-01-000000", [&a, &b]), Some(7), "a kept periodic backup");
        assert_eq!(recorded_size("s3://b/none", [&a, &b]), None);
        assert_eq!(recorded_size("s3://b/k", []), None);
        let failed = EtcdBackupStatus { path: "s3://b/k".into(), ..Default::default() };
        assert_eq!(recorded_size("s3://b/k", [&failed]), None, "no size recorded");
    }
}

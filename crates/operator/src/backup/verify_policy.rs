//! When an EtcdRestore's verify pod fails: a backup that is wrong (checksum or size mismatch, no
//! backup or no sidecar where the spec points) is refused at once; anything else (the object
//! store unreachable, a read cut off, the pod killed or out of time) is retried, each attempt
//! with twice the time limit (a big backup on a slow store needs more than the first 10 min),
//! after a pause that doubles too, at most [`VERIFY_ATTEMPTS`] times. Attempts are numbered by
//! the pod names (`<restore>-verify-<generation>[-<n>]`), so the count survives an operator
//! restart without status. Pure.

/// Verify pods tried before a backup that cannot be read is given up.
pub const VERIFY_ATTEMPTS: u32 = 5;
/// Time limit of the first verify pod; doubled per attempt.
pub const FIRST_DEADLINE_SECS: i64 = 600;
/// Pause after the first failed attempt; doubled per attempt.
pub const FIRST_PAUSE_SECS: i64 = 10;
pub use super::contract::REFUSED;

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

pub fn deadline_secs(attempt: u32) -> i64 {
    FIRST_DEADLINE_SECS << attempt.min(6)
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
    if let Some(r) = why.strip_prefix(REFUSED) {
        return AfterFailure::Refuse(r.to_string());
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
        assert!(deadline_secs(1) == 2 * deadline_secs(0) && deadline_secs(0) == 600);
        match after_failure(VERIFY_ATTEMPTS - 1, "read backup: timeout", 100) {
            AfterFailure::GiveUp(why) => assert!(why.contains("5 attempts") && why.contains("timeout"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}

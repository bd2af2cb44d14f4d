//! Restore drills (issue 29), the pure part: what a drill compares and when one is due.
//!
//! A drill restores the newest restorable point of the series (the newest snapshot and the
//! archive after it) into a throw-away one-member etcd (`pod_commands::restore_drill`) and
//! compares its key space with the live cluster's at the same revision R. What is compared is
//! [`digest`]: a sha256 over every key at R in key order, each with its value,
//! `create_revision`, `mod_revision` and `version`, and the key count. Not etcd's `HashKV`:
//! that also hashes each key's lease and depends on the compaction history, and a restore
//! differs from the live cluster in both (the replay writes keys without leases, and its
//! compaction points are its own), so `HashKV` would differ on a healthy archive.
//!
//! When one is due ([`plan`]): with `spec.restoreDrill` set, once a backup has succeeded, never
//! two at once, then every `intervalInSecond` after the start of the last one, as
//! `status.lastDrill` says (so an operator restart changes nothing). A finished drill pod's
//! result is folded into `status.lastDrill` once (its name goes to `recordedPods` in the same
//! write, as backup pods') with an Event, and the pod is deleted after that write.

use std::time::Duration;

use etcd_operator_api::backup::{DrillResult, EtcdBackupStatus, RestoreDrill};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::events::EventType;
use sha2::{Digest as _, Sha256};

use super::contract::{DrillReport, KeySpace};
use super::identity::Note;
use super::job_pods::{self, JobPodState, PodResult};
use super::{parse_time, rfc3339};

/// Default `restoreDrill.intervalInSecond`: daily.
pub const DEFAULT_INTERVAL_SECS: i64 = 86_400;
/// Default `restoreDrill.timeoutInSecond`.
pub const DEFAULT_TIMEOUT_SECS: i64 = 600;
/// Longest interval: a year.
pub const MAX_INTERVAL_SECS: i64 = 365 * 24 * 3600;
/// Longest time limit of one drill: a day.
pub const MAX_TIMEOUT_SECS: i64 = 24 * 3600;
/// Extra time a drill pod gets beyond the drill's own limit, to start (the etcd tools are
/// copied in by init containers) and report.
pub const POD_START_SLACK_SECS: i64 = 60;
/// Label value of `archiver_plan::ROLE_LABEL` on drill pods.
pub const ROLE_DRILL: &str = "drill";

/// The first bytes hashed: a digest of another format can never equal one of this.
const DIGEST_FORMAT: &[u8] = b"etcd-operator-rs/keyspace/v1\n";

/// One key at the compared revision, as a range at that revision returns it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    /// Not hashed: a restore writes keys without their leases (see the module documentation).
    pub lease: i64,
}

/// The digest of a key space read page by page in key order (as etcd's range returns it):
/// memory for one key, however many there are.
#[derive(Clone, Debug)]
pub struct Digest {
    sha: Sha256,
    keys: u64,
    last: Option<Vec<u8>>,
}

impl Default for Digest {
    fn default() -> Digest {
        let mut sha = Sha256::new();
        sha.update(DIGEST_FORMAT);
        Digest { sha, keys: 0, last: None }
    }
}

impl Digest {
    /// Add the next key; keys must come in strictly ascending byte order (a key out of order,
    /// or twice, would make two equal key spaces differ, or hide a difference).
    pub fn add(&mut self, e: &Entry<'_>) -> Result<(), String> {
        if let Some(last) = &self.last
            && e.key <= last.as_slice()
        {
            return Err(format!(
                "keys out of order: {:?} after {:?}",
                String::from_utf8_lossy(e.key),
                String::from_utf8_lossy(last)
            ));
        }
        for field in [e.key, e.value] {
            self.sha.update((field.len() as u64).to_be_bytes());
            self.sha.update(field);
        }
        for n in [e.create_revision, e.mod_revision, e.version] {
            self.sha.update(n.to_be_bytes());
        }
        self.keys += 1;
        self.last = Some(e.key.to_vec());
        Ok(())
    }

    pub fn finish(self) -> KeySpace {
        KeySpace { keys: self.keys, sha256: hex::encode(self.sha.finalize()) }
    }
}

/// The digest of `entries` in any order: sorted by key, then hashed as [`Digest`] does. A key
/// listed twice is an error.
pub fn digest(entries: &[Entry<'_>]) -> Result<KeySpace, String> {
    let mut sorted = entries.to_vec();
    sorted.sort_by(|a, b| a.key.cmp(b.key));
    let mut d = Digest::default();
    for e in &sorted {
        d.add(e)?;
    }
    Ok(d.finish())
}

/// The verdict of a drill at `revision`: what passed, or how the two differ.
pub fn compare(revision: i64, restored: &KeySpace, live: &KeySpace) -> Result<String, String> {
    if restored == live {
        Ok(format!(
            "the restore equals the live cluster at revision {revision}: {} keys, sha256 {}",
            live.keys, live.sha256
        ))
    } else {
        Err(format!(
            "the restore differs from the live cluster at revision {revision}: restored {} keys (sha256 {}), live {} keys (sha256 {})",
            restored.keys, restored.sha256, live.keys, live.sha256
        ))
    }
}

/// `spec.restoreDrill`, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    pub interval_secs: i64,
    pub timeout_secs: i64,
}

/// The schedule `spec.restoreDrill` asks for (None: no drills), or why it is refused.
pub fn schedule(spec: Option<&RestoreDrill>) -> Result<Option<Schedule>, String> {
    let Some(d) = spec else { return Ok(None) };
    for (field, value, max) in [
        ("intervalInSecond", d.interval_in_second, MAX_INTERVAL_SECS),
        ("timeoutInSecond", d.timeout_in_second, MAX_TIMEOUT_SECS),
    ] {
        if !(0..=max).contains(&value) {
            return Err(format!("restoreDrill.{field} {value} is out of range: it must be between 0 and {max}"));
        }
    }
    let or = |v: i64, default: i64| if v == 0 { default } else { v };
    Ok(Some(Schedule {
        interval_secs: or(d.interval_in_second, DEFAULT_INTERVAL_SECS),
        timeout_secs: or(d.timeout_in_second, DEFAULT_TIMEOUT_SECS),
    }))
}

/// When the next drill is due: None before the first successful backup (nothing to restore);
/// the first one at once; then `interval` after the start of the last one, or twice its
/// duration when that is longer (drills take at most half the time: a drill reads the live
/// cluster's whole key space).
pub fn next_due(s: Schedule, st: &EtcdBackupStatus) -> Option<Timestamp> {
    let backed_up = parse_time(&st.last_success_date)?;
    let Some(last) = st.last_drill.as_ref() else { return Some(backed_up) };
    let Ok(started) = last.time.parse::<Timestamp>() else { return Some(backed_up) };
    let took = if last.duration_seconds.is_finite() { last.duration_seconds.max(0.0) } else { 0.0 };
    // Whole seconds, at most the longest interval (an absurd duration is not an overflow).
    let rest = ((2.0 * took) as i64).min(MAX_INTERVAL_SECS);
    // Checked: a time past the representable range is "never", not a panic.
    started.checked_add(SignedDuration::from_secs(s.interval_secs.max(rest))).ok()
}

/// The drill pod of the drill due at `due`: the same name however often it is planned, so a
/// pod cache that has not caught up yet cannot start it twice (the second create is refused).
pub fn pod_name(backup: &str, due: Timestamp) -> String {
    format!("{backup}-drill-{}", due.as_second())
}

/// What the drill controller sees.
#[derive(Clone, Debug)]
pub struct DrillObserved<'a> {
    pub backup: &'a str,
    /// None: `restoreDrill` is unset (or the spec is refused): no drill starts, finished ones
    /// are still recorded.
    pub schedule: Option<Schedule>,
    /// This EtcdBackup's drill pods, oldest first.
    pub pods: &'a [JobPodState<DrillReport>],
    pub now: Timestamp,
    /// A backup pod of this EtcdBackup is running: its retention may delete the snapshot a
    /// drill would read (a false failure), so a due drill waits for it.
    pub backup_running: bool,
}

/// A drill pod to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrillStart {
    pub pod: String,
    /// The drill's own limit (`--timeout-secs`).
    pub timeout_secs: i64,
    /// The pod's `activeDeadlineSeconds`.
    pub deadline_secs: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct DrillPlan {
    pub events: Vec<Note>,
    pub start: Option<DrillStart>,
    /// Finished drill pods, deleted once the status is written.
    pub delete_pods: Vec<String>,
    /// When to look again (None: no drill scheduled).
    pub requeue: Option<Duration>,
}

/// Fold finished drill pods into `st.lastDrill` and decide whether a drill starts now.
pub fn plan(o: &DrillObserved<'_>, st: &mut EtcdBackupStatus) -> DrillPlan {
    let mut p = DrillPlan::default();
    let timeout = o.schedule.map_or(DEFAULT_TIMEOUT_SECS, |s| s.timeout_secs);
    let start_limit = SignedDuration::from_secs(timeout + 2 * POD_START_SLACK_SECS);
    let mut running = None;
    for pod in o.pods {
        if st.recorded_pods.contains(&pod.name) {
            // In status already (the operator stopped before deleting it, or the cache lags).
            p.delete_pods.push(pod.name.clone());
            continue;
        }
        let result = match &pod.result {
            PodResult::Running => match (&pod.pending, pod.created) {
                (Some(why), Some(created)) if o.now.duration_since(created) > start_limit => failure(
                    pod,
                    o.now,
                    format!("drill pod {} did not start within {}s: {why}", pod.name, start_limit.as_secs()),
                ),
                _ => {
                    running = Some(pod.name.clone());
                    continue;
                }
            },
            PodResult::Succeeded(r) => result_of(r, pod, o.now),
            // A failed drill reports JSON too; a pod killed from outside says why as text.
            PodResult::Failed(why) => match serde_json::from_str::<DrillReport>(why) {
                Ok(r) => result_of(&r, pod, o.now),
                Err(_) => failure(pod, o.now, why.clone()),
            },
        };
        p.events.push(note(&result));
        st.last_drill = Some(result);
        job_pods::remember(&mut st.recorded_pods, &pod.name);
        p.delete_pods.push(pod.name.clone());
    }
    let Some(s) = o.schedule else { return p };
    let Some(due) = next_due(s, st) else { return p };
    if running.is_some() {
        // Its end wakes the controller up (the pod is watched); this is only a fallback.
        p.requeue = Some(Duration::from_secs(30));
        return p;
    }
    if due > o.now {
        p.requeue = Duration::try_from(due.duration_since(o.now)).ok();
        return p;
    }
    if o.backup_running {
        p.requeue = Some(Duration::from_secs(5));
        return p;
    }
    let pod = pod_name(o.backup, due);
    if o.pods.iter().any(|q| q.name == pod) {
        // Recorded and still going: the next reconcile plans from the recorded result.
        p.requeue = Some(Duration::from_secs(1));
        return p;
    }
    let deadline_secs = timeout + POD_START_SLACK_SECS;
    p.events.push((
        EventType::Normal,
        "DrillStarted",
        format!("pod {pod} restores the newest restorable point into a throw-away etcd and compares it with the live cluster"),
    ));
    p.requeue = Some(Duration::from_secs(deadline_secs as u64));
    p.start = Some(DrillStart { pod, timeout_secs: timeout, deadline_secs });
    p
}

/// When the drill of `pod` started: its creation, else now.
fn started(pod: &JobPodState<DrillReport>, now: Timestamp) -> String {
    rfc3339(pod.created.unwrap_or(now))
}

fn result_of(r: &DrillReport, pod: &JobPodState<DrillReport>, now: Timestamp) -> DrillResult {
    DrillResult {
        time: started(pod, now),
        succeeded: r.succeeded,
        revision: r.revision,
        snapshot: r.snapshot.clone(),
        segments: r.segments,
        duration_seconds: r.duration_seconds,
        message: r.message.clone(),
    }
}

/// A drill pod that ended without a report (killed at its deadline, evicted, never started).
fn failure(pod: &JobPodState<DrillReport>, now: Timestamp, why: String) -> DrillResult {
    let duration = match (pod.created, pod.finished) {
        (Some(c), Some(f)) => f.duration_since(c).as_secs_f64(),
        (Some(c), None) => now.duration_since(c).as_secs_f64(),
        _ => 0.0,
    };
    DrillResult {
        time: started(pod, now),
        succeeded: false,
        duration_seconds: duration.max(0.0),
        message: why,
        ..Default::default()
    }
}

/// The Event of a recorded drill.
fn note(r: &DrillResult) -> Note {
    let took = format!("{:.1}s", r.duration_seconds);
    if r.succeeded {
        let note = format!(
            "restore drill passed in {took}: {} restored with {} archive segments to revision {}; {}",
            r.snapshot, r.segments, r.revision, r.message
        );
        (EventType::Normal, "DrillSucceeded", note)
    } else {
        let at = if r.revision > 0 { format!(" at revision {}", r.revision) } else { String::new() };
        (EventType::Warning, "DrillFailed", format!("restore drill failed{at} after {took}: {}", r.message))
    }
}

#[cfg(test)]
#[path = "drill_tests.rs"]
mod tests;

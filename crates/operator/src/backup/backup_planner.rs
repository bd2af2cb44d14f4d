//! The EtcdBackup planner: from what was observed (the object, its status, its pods), the next
//! status, the Events, at most one backup pod to start and the finished pods to delete. Pure;
//! `backup_controller` observes and executes. Rules:
//!
//! - an invalid spec changes nothing and says why (status and one Event);
//! - a finished pod's result is folded into status exactly once: its name is recorded in status
//!   (`recordedPods`) in the same write, and it is deleted only after that write, so neither a
//!   stale pod cache nor an operator restart between the two counts it twice;
//! - a pod that never started (unschedulable, an image that cannot be pulled) is not bounded by
//!   its `activeDeadlineSeconds` (it counts from the start) and is given up here;
//! - a backup is due once per spec (one-shot; failures retried 10 s doubling to 5 min) or every
//!   `backupIntervalInSecond` after the last attempt (periodic); never two at once: one due
//!   while another runs waits, and status says so;
//! - backup pods run as the non-root user; to a PVC whose files that user may not write (the
//!   pod said `AccessDenied`), the claim is marked as root's and the backup retried at once as
//!   root, and from then on runs as root there (`volume_owner`: the `RunsAsRoot` condition and
//!   an Event say why, and that Pod Security `restricted` refuses such a pod).

use super::{parse_time, rfc3339};
use std::time::Duration;

use etcd_operator_api::backup::{BackupRecord, EtcdBackupSpec, EtcdBackupStatus};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::events::EventType;

use super::contract::{DrillReport, SaveReport};
use super::drill::{self, DrillStart};
use super::identity;
use super::job_pods::{JobPodState, PodResult};
use super::location::{Kind, Location};
use super::volume_owner::{self, Use};

/// Default `backupPolicy.timeoutInSecond`, as in CoreOS.
pub const DEFAULT_TIMEOUT_SECS: i64 = 60;
/// Extra time a backup pod gets beyond the backup's own time limit, to start and report.
pub const POD_START_SLACK_SECS: i64 = 60;
/// Longest backup interval: a year. Longer ones would overflow time arithmetic and mean "never".
pub const MAX_INTERVAL_SECS: i64 = 365 * 24 * 3600;
/// Longest time limit of one backup: a day.
pub const MAX_TIMEOUT_SECS: i64 = 24 * 3600;
/// Most backups kept by retention.
pub const MAX_BACKUPS: i64 = 10_000;
pub use super::job_pods::RECORDED_PODS;
/// Prefix of the status reason while a due backup waits for a running one.
const DELAYED: &str = "the backup due at ";

/// A checked EtcdBackup spec: what a backup pod is given.
#[derive(Clone, Debug, PartialEq)]
pub struct BackupTarget {
    pub location: Location,
    pub endpoints: Vec<String>,
    pub interval: Option<Duration>,
    pub max_backups: i32,
    /// `backupPolicy.retention` in seconds: keep every moment of this window restorable.
    pub retention_secs: Option<u64>,
    pub timeout_secs: i64,
    /// The continuous archive's flush interval (`spec.continuous`), when enabled.
    pub archive_flush_secs: Option<u64>,
    /// Restore drills (`spec.restoreDrill`), when set.
    pub drill: Option<super::drill::Schedule>,
}

/// An EtcdBackup as observed.
#[derive(Clone, Debug)]
pub struct BackupObserved {
    pub name: String,
    pub namespace: String,
    pub generation: i64,
    /// The spec, or why it cannot be read.
    pub spec: Result<EtcdBackupSpec, String>,
    pub status: EtcdBackupStatus,
    /// This backup's pods, oldest first.
    pub pods: Vec<JobPodState<SaveReport>>,
    /// Its restore drill pods (`drill`), oldest first.
    pub drill_pods: Vec<JobPodState<DrillReport>>,
    /// The destination is a PVC marked as root's (`volume_owner`): its backup pods run as root.
    pub volume_root: bool,
    pub now: Timestamp,
}

/// The one action of a reconcile besides writing status.
#[derive(Clone, Debug, PartialEq)]
pub enum BackupStep {
    Nothing,
    /// Create the backup pod `pod` (status already says the attempt started); `as_root`: only
    /// to a PVC marked as root's (or being marked now).
    StartBackup {
        pod: String,
        target: BackupTarget,
        as_root: bool,
    },
}

pub use super::identity::Note;

#[derive(Clone, Debug)]
pub struct BackupPlan {
    pub status: EtcdBackupStatus,
    pub events: Vec<Note>,
    pub step: BackupStep,
    /// Finished pods, deleted once `status` is written.
    pub delete_pods: Vec<String>,
    /// Mark this PVC as root's (`volume_owner`) before the step.
    pub mark_root_volume: Option<String>,
    /// Start this restore drill pod (besides the step: a drill only reads the backups).
    pub drill: Option<DrillStart>,
    /// None: wait for a change.
    pub requeue: Option<Duration>,
}

/// Check a spec; `namespace` resolves `clusterName` to its client Service.
pub fn check_spec(spec: &EtcdBackupSpec, namespace: &str) -> Result<BackupTarget, String> {
    let location = Location::of(&spec.storage_type, &spec.source)?;
    // With a client certificate the cluster's clients speak TLS (CoreOS `clientTLSSecret`).
    let scheme = crate::tls::scheme(!spec.client_tls_secret.is_empty());
    let endpoints = match (spec.etcd_endpoints.is_empty(), spec.cluster_name.is_empty()) {
        (false, true) => spec.etcd_endpoints.clone(),
        (true, false) => {
            vec![format!(
                "{scheme}://{}.{namespace}.svc:{}",
                crate::naming::client_service(&spec.cluster_name),
                crate::naming::CLIENT_PORT
            )]
        }
        (false, false) => return Err("set either etcdEndpoints or clusterName, not both".into()),
        (true, true) => return Err("no cluster to back up: set etcdEndpoints or clusterName".into()),
    };
    if let Some(bad) = endpoints.iter().find(|e| !(e.starts_with("http://") || e.starts_with("https://"))) {
        return Err(format!("etcdEndpoints: {bad:?} is not an http(s) URL"));
    }
    let policy = spec.backup_policy.clone().unwrap_or_default();
    for (field, value, max) in [
        ("backupIntervalInSecond", policy.backup_interval_in_second, MAX_INTERVAL_SECS),
        ("timeoutInSecond", policy.timeout_in_second, MAX_TIMEOUT_SECS),
        ("maxBackups", i64::from(policy.max_backups), MAX_BACKUPS),
    ] {
        if !(0..=max).contains(&value) {
            return Err(format!("backupPolicy.{field} {value} is out of range: it must be between 0 and {max}"));
        }
    }
    let retention_secs = super::archive::retention::parse_window(&policy.retention)?;
    let timeout_secs = if policy.timeout_in_second == 0 { DEFAULT_TIMEOUT_SECS } else { policy.timeout_in_second };
    // An interval shorter than the time limit is accepted (the CoreOS upgrade guide runs
    // backups every 30 s with the default 60 s limit): a backup still running when the next is
    // due delays it, never two at once (`delayed_note` says so in status).
    let interval =
        (policy.backup_interval_in_second > 0).then(|| Duration::from_secs(policy.backup_interval_in_second as u64));
    if retention_secs.is_some() && interval.is_none() {
        return Err("backupPolicy.retention needs periodic backups (backupIntervalInSecond > 0): it decides which of them are kept".into());
    }
    let archive_flush_secs = match spec.continuous.as_ref().filter(|c| c.enabled) {
        None => None,
        Some(_) if interval.is_none() => {
            return Err("continuous.enabled needs periodic backups (backupPolicy.backupIntervalInSecond > 0): the archive continues the newest periodic snapshot".into());
        }
        Some(c) if !(0..=super::archiver_plan::MAX_FLUSH_SECS).contains(&c.flush_interval_in_second) => {
            return Err(format!(
                "continuous.flushIntervalInSecond {} is out of range: it must be between 0 and {}",
                c.flush_interval_in_second,
                super::archiver_plan::MAX_FLUSH_SECS
            ));
        }
        Some(c) if c.flush_interval_in_second == 0 => Some(super::archiver_plan::DEFAULT_FLUSH_SECS),
        Some(c) => Some(c.flush_interval_in_second as u64),
    };
    let drill = drill::schedule(spec.restore_drill.as_ref())?;
    Ok(BackupTarget {
        location,
        endpoints,
        interval,
        max_backups: policy.max_backups,
        retention_secs,
        timeout_secs,
        archive_flush_secs,
        drill,
    })
}

/// `t + d`, None past the representable range ("never", not a panic).
fn after(t: Timestamp, d: Duration) -> Option<Timestamp> {
    SignedDuration::try_from(d).ok().and_then(|d| t.checked_add(d).ok())
}

/// When the next backup is due but one is still running, or a restore drill: what status says
/// (the next starts once the running one ends; two never run at once, nor a backup beside a
/// drill, whose snapshot its retention may delete).
pub fn delayed_note(running: Option<&str>, due: Option<Timestamp>, now: Timestamp) -> Option<String> {
    let (pod, due) = (running?, due.filter(|d| *d <= now)?);
    if pod.contains("-drill-") {
        return Some(format!(
            "{DELAYED}{} waits for the restore drill still running (pod {pod}): a backup's retention could delete the snapshot the drill reads",
            rfc3339(due)
        ));
    }
    Some(format!(
        "{DELAYED}{} waits for the backup still running (pod {pod}): backups never overlap, so one that takes longer than backupIntervalInSecond delays the next",
        rfc3339(due)
    ))
}

/// Delay before retrying a failed one-shot backup: 10 s doubling to 5 min.
pub fn retry_delay(failures: i32) -> Duration {
    let f = failures.clamp(1, 10) as u32;
    Duration::from_secs((10u64 << (f - 1)).min(300))
}

/// When the next backup is due (None: never, the one-shot backup of this spec is done).
pub fn next_due(target: &BackupTarget, st: &EtcdBackupStatus, generation: i64, now: Timestamp) -> Option<Timestamp> {
    let last = parse_time(&st.last_attempt_date);
    let same_spec = st.observed_generation == generation;
    match (target.interval, last) {
        (_, None) => Some(now),
        (_, Some(_)) if !same_spec => Some(now),
        // Checked: a time past the representable range is "never", not a panic.
        // A failed attempt is tried again sooner (RPO): the growing delay, at most the interval.
        (Some(i), Some(l)) if st.consecutive_failures > 0 => after(l, i.min(retry_delay(st.consecutive_failures))),
        (Some(i), Some(l)) => after(l, i),
        (None, Some(_)) if st.succeeded => None,
        (None, Some(l)) => after(l, retry_delay(st.consecutive_failures)),
    }
}

/// Fold one finished backup pod into the status; returns the Event to publish.
pub fn record(st: &mut EtcdBackupStatus, result: Result<SaveReport, String>) -> Note {
    match result {
        Ok(r) => {
            let b = &r.backup;
            st.succeeded = true;
            st.reason.clear();
            st.etcd_version = b.etcd_version.clone();
            st.etcd_revision = b.etcd_revision;
            st.last_success_date = Some(b.time.clone());
            st.path = b.path.clone();
            st.size = b.size;
            st.sha256 = b.sha256.clone();
            st.cluster_id = b.cluster_id.clone();
            st.consecutive_failures = 0;
            if let Some(ranges) = &r.restorable {
                st.restorable_ranges = ranges.clone();
            }
            st.history = r
                .kept
                .iter()
                .map(|m| BackupRecord {
                    path: m.path.clone(),
                    sha256: m.sha256.clone(),
                    size: m.size,
                    etcd_revision: m.etcd_revision,
                    time: m.time.clone(),
                    cluster_id: m.cluster_id.clone(),
                })
                .collect();
            let mut note = format!(
                "backup of member {} at revision {} ({} bytes, sha256 {}) written to {} in {:.1}s",
                b.member, b.etcd_revision, b.size, b.sha256, b.path, r.transfer_seconds
            );
            if !r.deleted.is_empty() {
                note.push_str(&format!("; retention deleted {}", r.deleted.join(", ")));
            }
            if let Some(uid) = r.uid {
                note.push_str(&format!(" as uid {uid}"));
            }
            if !r.warnings.is_empty() {
                note.push_str(&format!("; warning: {}", r.warnings.join("; ")));
            }
            (EventType::Normal, "BackupSucceeded", note)
        }
        Err(why) => {
            st.succeeded = false;
            st.reason = why.clone();
            st.consecutive_failures += 1;
            (EventType::Warning, "BackupFailed", why)
        }
    }
}

/// The backup pod created at `now`.
pub fn pod_name(backup: &str, now: Timestamp) -> String {
    format!("{backup}-{}", now.as_second())
}

pub fn plan(o: &BackupObserved) -> BackupPlan {
    let mut st = o.status.clone();
    let mut events = Vec::new();
    let target =
        super::pods::check_job_owner_name(&o.name).and(o.spec.clone()).and_then(|s| check_spec(&s, &o.namespace));
    let target = match target {
        Ok(t) => t,
        Err(why) => {
            st.succeeded = false;
            st.reason = format!("invalid spec, no backup taken: {why}");
            st.observed_generation = o.generation;
            if st != o.status {
                events.push((EventType::Warning, "InvalidSpec", st.reason.clone()));
            }
            return BackupPlan {
                status: st,
                events,
                step: BackupStep::Nothing,
                delete_pods: vec![],
                mark_root_volume: None,
                drill: None,
                requeue: None,
            };
        }
    };

    let mut delete_pods = Vec::new();
    let mut running: Option<&str> = None;
    // A non-root pod just said it may not write the claim.
    let mut denied_now = None;
    let start_limit = SignedDuration::from_secs(target.timeout_secs + 2 * POD_START_SLACK_SECS);
    for p in &o.pods {
        if o.status.recorded_pods.contains(&p.name) {
            // In status already (the operator stopped before deleting it, or the cache lags).
            delete_pods.push(p.name.clone());
            continue;
        }
        let result = match &p.result {
            PodResult::Running => match (&p.pending, p.created) {
                (Some(why), Some(created)) if o.now.duration_since(created) > start_limit => {
                    Err(format!("backup pod {} did not start within {}s: {why}", p.name, start_limit.as_secs()))
                }
                _ => {
                    running = Some(&p.name);
                    continue;
                }
            },
            PodResult::Succeeded(r) => Ok(r.clone()),
            PodResult::Failed(why) => Err(why.clone()),
        };
        denied_now = result.as_ref().err().and_then(|why| volume_owner::denied_to_non_root(why));
        // Another etcd cluster than the last backup's: said before `record` moves status on.
        let changed = result.as_ref().ok().and_then(|r| identity::cluster_changed(&st, r));
        if let Ok(r) = &result {
            identity::set_condition(&mut st.conditions, r, &rfc3339(o.now));
        }
        events.push(record(&mut st, result));
        events.extend(changed);
        super::job_pods::remember(&mut st.recorded_pods, &p.name);
        delete_pods.push(p.name.clone());
    }

    let now = o.now;
    // Who the pods run as on a PVC: root once it is marked; marked when a non-root pod was
    // denied it (never on a stale status: a person may have removed the mark).
    let pvc = (target.location.kind == Kind::Pvc).then(|| target.location.bucket.clone());
    let mut mark_root_volume = None;
    let mut volume_root = o.volume_root && pvc.is_some();
    let mut root_note = volume_root.then(|| volume_owner::marked_before(Use::Backup, &target.location.bucket));
    if let (Some(pvc), Some((uid, what)), false) = (&pvc, &denied_now, volume_root) {
        let note = volume_owner::marked_now(Use::Backup, pvc, *uid, what);
        events.push((EventType::Warning, "BackupRunsAsRoot", note.clone()));
        mark_root_volume = Some(pvc.clone());
        volume_root = true;
        root_note = Some(note);
    }
    volume_owner::set_condition(&mut st.conditions, root_note, mark_root_volume.is_some(), &rfc3339(now));
    let mut due = next_due(&target, &st, o.generation, now);
    // Denied as non-root, now root's: the next attempt at once, not after the back-off.
    if volume_root && volume_owner::denied_to_non_root(&st.reason).is_some() && due.is_some_and(|d| d > now) {
        due = Some(now);
    }
    // A restore drill reads snapshots this backup's retention may delete: never both at once
    // (the drill waits for a running backup in `drill::plan`).
    let drill_running = o
        .drill_pods
        .iter()
        .find(|p| matches!(p.result, PodResult::Running) && !st.recorded_pods.contains(&p.name))
        .map(|p| p.name.as_str());
    let backup_running = running.is_some();
    let running = running.or(drill_running);
    match delayed_note(running, due, now) {
        Some(note) => st.reason = note,
        None if st.reason.starts_with(DELAYED) => st.reason.clear(),
        None => {}
    }
    let mut step = BackupStep::Nothing;
    let mut requeue = target.interval.unwrap_or(Duration::from_secs(300));
    match due.filter(|_| running.is_none()) {
        Some(t) if t <= now => {
            let pod = pod_name(&o.name, now);
            if o.pods.iter().any(|p| p.name == pod) {
                // One was created this very second (and has ended already): the next second.
                requeue = Duration::from_secs(1);
            } else {
                st.last_attempt_date = Some(rfc3339(now));
                st.observed_generation = o.generation;
                let as_root = if volume_root { " as root (the volume is marked as root's)" } else { "" };
                events.push((
                    EventType::Normal,
                    "BackupStarted",
                    format!("pod {pod} is taking a snapshot of {} to {}{as_root}", source_of(o), target.location.url()),
                ));
                requeue = Duration::from_secs((target.timeout_secs + POD_START_SLACK_SECS) as u64);
                step = BackupStep::StartBackup { pod, target: target.clone(), as_root: volume_root };
            }
        }
        Some(t) => requeue = Duration::try_from(t.duration_since(now)).unwrap_or(requeue),
        None if running.is_some() => requeue = Duration::from_secs(30),
        None => {}
    }
    // Restore drills, after the backups' results: a backup that just succeeded makes the first
    // one due.
    let started_now = !matches!(step, BackupStep::Nothing);
    let d = drill::plan(
        &drill::DrillObserved {
            backup: &o.name,
            schedule: target.drill,
            pods: &o.drill_pods,
            now,
            backup_running: backup_running || started_now,
        },
        &mut st,
    );
    events.extend(d.events);
    delete_pods.extend(d.delete_pods);
    if let Some(r) = d.requeue {
        requeue = requeue.min(r);
    }
    BackupPlan { status: st, events, step, delete_pods, mark_root_volume, drill: d.start, requeue: Some(requeue) }
}

/// What a backup is taken of, for Events (which more people may read than the spec): the
/// EtcdCluster's name, or how many `etcdEndpoints`, never their URLs (credentials or internal
/// addresses can be in them).
fn source_of(o: &BackupObserved) -> String {
    match o.spec.as_ref() {
        Ok(s) if !s.cluster_name.is_empty() => format!("EtcdCluster {}", s.cluster_name),
        Ok(s) if s.etcd_endpoints.len() == 1 => "the 1 etcdEndpoint".into(),
        Ok(s) => format!("the {} etcdEndpoints", s.etcd_endpoints.len()),
        Err(_) => "the cluster".into(),
    }
}

/// The backup pod of `plan` could not be created (refused by admission: a quota, a policy): a
/// failed attempt, said in status and an Event, retried like any failed backup.
pub fn start_failed(plan: &mut BackupPlan, pod: &str, why: String) {
    let note = record(&mut plan.status, Err(format!("could not create the backup pod {pod}: {why}")));
    plan.events.push(note);
    let interval = match &plan.step {
        BackupStep::StartBackup { target, .. } => target.interval,
        BackupStep::Nothing => None,
    };
    plan.requeue = Some(retry_delay(plan.status.consecutive_failures).min(interval.unwrap_or(Duration::MAX)));
    plan.step = BackupStep::Nothing;
}

#[cfg(test)]
#[path = "backup_planner_tests.rs"]
mod tests;

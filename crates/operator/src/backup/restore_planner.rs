//! The EtcdRestore planner: from what was observed (the object, its status, its verify pods, the
//! EtcdCluster of the name it restores), the next status, the Events and at most one action:
//! start a verify pod, or create the EtcdCluster. Pure; `restore_controller` observes and
//! executes. Rules:
//!
//! - never destructive: an EtcdCluster of that name that this restore did not create is never
//!   replaced; the restore waits, saying so, until it is gone, for at most half an hour
//!   (`restore_wait`: a cluster deleted later never comes back from an old backup on its own);
//! - nothing is created from a backup whose checksum does not match its sidecar, or that has no
//!   sidecar: a verify pod checks it first; a verify that failed for another reason (the store
//!   unreachable, the pod out of time) is retried (`verify_policy`);
//! - only the verify pods of the current spec generation count; others are removed;
//! - verify pods run as the non-root user; from a PVC whose files that user may not read (the
//!   pod said `AccessDenied`), the claim is marked as root's and the next attempt starts at
//!   once, as root (`volume_owner`); the restored member that reads the claim then runs as
//!   root too (the EtcdCluster planner reads the mark);
//! - the cluster's etcd is never older than the one that took the backup, nor more than one minor
//!   version newer (the upgrade rule);
//! - done (or refused) for a spec generation is final until the spec changes.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_operator_api::backup::RestoreFrom;
use etcd_operator_api::restore::{EtcdRestoreSpec, EtcdRestoreStatus};
use etcd_operator_api::{EtcdCluster, EtcdClusterSpec, SCOPE_ANNOTATION, condition};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use super::archive::point_in_time::Target as PointTarget;
use super::job_pods::{JobPodState, PodResult};
use super::location::{BackupMeta, Kind, Location};
use super::restore_wait;
use super::verify_policy::{self, AfterFailure};
use super::volume_owner::{self, Use};
use crate::version::Version;

/// Annotation on an EtcdCluster created by a restore: the EtcdRestore's UID.
pub const RESTORED_BY_ANNOTATION: &str = "etcd.database.coreos.com/restored-by";
/// Annotation on an EtcdCluster created by a restore: the backup it came from.
pub const RESTORED_FROM_ANNOTATION: &str = "etcd.database.coreos.com/restored-from";
/// Members of a restored cluster when the EtcdRestore gives no spec.
pub const DEFAULT_SIZE: i32 = 3;

pub const PHASE_VERIFYING: &str = "Verifying";
pub const PHASE_RESTORING: &str = "Restoring";
pub const PHASE_RESTORED: &str = "Restored";
pub const PHASE_FAILED: &str = "Failed";
/// An EtcdCluster of the name exists: the restore waits for it to be deleted.
pub const PHASE_WAITING: &str = "WaitingForCluster";

/// A checked EtcdRestore spec.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoreTarget {
    /// The backup; with `replay`, the base key of the snapshot series whose archive it replays.
    pub location: Location,
    pub cluster: String,
    /// `spec.pointInTime`: the verify pod replays the archive and writes a snapshot first.
    pub replay: Option<Replay>,
}

/// A point-in-time restore, checked: what to reach, and the etcd whose tools replay (the
/// version the cluster will run: `etcdCluster.spec.version`, else the operator's default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replay {
    pub target: PointTarget,
    pub cluster_id: Option<String>,
    pub version: Version,
    pub repository: String,
}

/// Where a point-in-time restore writes the snapshot it replayed, for restore `uid` at spec
/// `generation`: next to the series, `<base>.restores/<uid>-g<generation>.db`, where no
/// retention of periodic backups or segments ever looks.
pub fn replay_output(series: &Location, uid: &str, generation: i64) -> Location {
    series.with_key(format!("{}.restores/{uid}-g{generation}.db", series.key))
}

/// Extra time a verify pod gets to replay an archive (fetch, replay, write a snapshot).
pub const REPLAY_EXTRA_SECS: i64 = 900;

/// The EtcdCluster of the restore's name, as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterSeen {
    /// Its [`RESTORED_BY_ANNOTATION`].
    pub restored_by: Option<String>,
    pub size: i64,
    pub ready_members: i64,
    /// `spec.restore.sha256`.
    pub restore_sha256: Option<String>,
}

/// An EtcdRestore as observed.
#[derive(Clone, Debug)]
pub struct RestoreObserved {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub generation: i64,
    /// Its scope annotation, passed on to the cluster it creates.
    pub scope: Option<String>,
    /// Its `naming::RESTORE_BUMP_REVISION_ANNOTATION`, passed on likewise.
    pub bump_revision: Option<String>,
    pub spec: Result<EtcdRestoreSpec, String>,
    pub status: EtcdRestoreStatus,
    /// None: there is no EtcdCluster of the name (or the spec names none).
    pub cluster: Option<ClusterSeen>,
    /// This restore's verify pods, oldest first.
    pub pods: Vec<JobPodState<BackupMeta>>,
    /// The backup's size as an EtcdBackup's status records it (`verify_policy::recorded_size`),
    /// for the verify pod's time limit; None: no EtcdBackup says.
    pub backup_size: Option<i64>,
    /// The source is a PVC marked as root's (`volume_owner`): its verify pods run as root.
    pub volume_root: bool,
    pub now: Timestamp,
}

#[derive(Clone, Debug)]
pub enum RestoreStep {
    Nothing,
    /// Create verify pod `pod`, attempt `attempt`, with this time limit (it grows per attempt
    /// and with the backup's size); `as_root`: only from a PVC marked as root's (or being
    /// marked now).
    StartVerify {
        pod: String,
        attempt: u32,
        deadline_secs: i64,
        target: Box<RestoreTarget>,
        as_root: bool,
        /// A point-in-time restore: where the pod writes the snapshot it replays.
        output: Option<Location>,
    },
    /// Create this EtcdCluster: every bootstrap member starts from the verified backup.
    CreateCluster(Box<EtcdCluster>),
}

impl PartialEq for RestoreStep {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (RestoreStep::Nothing, RestoreStep::Nothing) => true,
            (
                RestoreStep::StartVerify { pod: a, attempt: x, deadline_secs: d, target: t, as_root: r, output: o },
                RestoreStep::StartVerify { pod: b, attempt: y, deadline_secs: e, target: u, as_root: q, output: p },
            ) => (a, x, d, t, r, o) == (b, y, e, u, q, p),
            // EtcdCluster has no PartialEq: compared as the objects the API would get.
            (RestoreStep::CreateCluster(a), RestoreStep::CreateCluster(b)) => {
                serde_json::to_value(a).ok() == serde_json::to_value(b).ok()
            }
            _ => false,
        }
    }
}

pub type Note = (EventType, &'static str, String);

#[derive(Clone, Debug)]
pub struct RestorePlan {
    pub status: EtcdRestoreStatus,
    pub events: Vec<Note>,
    pub step: RestoreStep,
    /// Verify pods to delete once `status` is written.
    pub delete_pods: Vec<String>,
    /// Mark this PVC as root's (`volume_owner`) before the step.
    pub mark_root_volume: Option<String>,
    /// None: wait for a change.
    pub requeue: Option<Duration>,
}

pub fn check_spec(spec: &EtcdRestoreSpec) -> Result<RestoreTarget, String> {
    let location = Location::of(&spec.backup_storage_type, &spec.source)?;
    let cluster = spec.etcd_cluster.name.clone();
    if cluster.is_empty() {
        return Err("etcdCluster.name is empty".into());
    }
    if let Some(s) = &spec.etcd_cluster.spec {
        if s.restore.is_some() {
            return Err("etcdCluster.spec.restore is set by the operator; leave it out".into());
        }
        crate::validation::validate(&cluster, s).map_err(|e| format!("etcdCluster.spec: {}", e.join("; ")))?;
    } else {
        crate::validation::validate(&cluster, &EtcdClusterSpec { size: DEFAULT_SIZE, ..Default::default() })
            .map_err(|e| format!("etcdCluster.name: {}", e.join("; ")))?;
    }
    let replay = spec.point_in_time.as_ref().map(|p| check_point_in_time(spec, p)).transpose()?;
    Ok(RestoreTarget { location, cluster, replay })
}

fn check_point_in_time(spec: &EtcdRestoreSpec, p: &etcd_operator_api::restore::PointInTime) -> Result<Replay, String> {
    let target = match (p.revision, p.time.as_deref()) {
        (Some(r), None) if r >= 1 => PointTarget::Revision(r),
        (Some(r), None) => return Err(format!("pointInTime.revision {r} must be 1 or more")),
        (None, Some(t)) => {
            let at: Timestamp =
                t.parse().map_err(|e| format!("pointInTime.time {t:?} is not an RFC 3339 time: {e}"))?;
            PointTarget::Time(at.as_millisecond())
        }
        (Some(_), Some(_)) => return Err("pointInTime: give revision or time, not both".into()),
        (None, None) => return Err("pointInTime: give a revision or a time".into()),
    };
    if let Some(id) = &p.cluster_id
        && (id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit()))
    {
        return Err(format!("pointInTime.clusterId {id:?} must be hex digits (an EtcdCluster's status.clusterId)"));
    }
    let cluster = spec.etcd_cluster.spec.as_ref();
    let version = cluster.map(|s| s.version.clone()).filter(|v| !v.is_empty());
    let repository = cluster.map(|s| s.repository.clone()).filter(|r| !r.is_empty());
    let version = version.unwrap_or_else(|| etcd_operator_api::cluster::DEFAULT_VERSION.to_string());
    let version = Version::parse(&version).map_err(|e| format!("etcdCluster.spec.version {version:?}: {e}"))?;
    Ok(Replay {
        target,
        cluster_id: p.cluster_id.as_ref().map(|id| id.to_ascii_lowercase()),
        version,
        repository: repository.unwrap_or_else(|| etcd_operator_api::cluster::DEFAULT_REPOSITORY.to_string()),
    })
}

/// The spec of the cluster to create: the restore's, or 3 members of the backup's version;
/// never older than the etcd that took the backup, nor more than one minor version newer.
pub fn cluster_spec(spec: &EtcdRestoreSpec, meta: &BackupMeta, sha256: &str) -> Result<EtcdClusterSpec, String> {
    let mut s = spec.etcd_cluster.spec.clone().unwrap_or_else(|| EtcdClusterSpec {
        size: DEFAULT_SIZE,
        version: meta.etcd_version.clone(),
        ..Default::default()
    });
    // No version given: the backup's own (a restore is no place for an implicit upgrade, and a
    // 3.5.17 backup could not step to the 3.6 default anyway).
    if s.version.is_empty() {
        s.version = meta.etcd_version.clone();
    }
    let backup_version = Version::parse(&meta.etcd_version).ok();
    let version = s.version.as_str();
    if let (Some(b), Ok(v)) = (backup_version, Version::parse(version)) {
        // The same rule as an upgrade of the running cluster: the same minor or the next one.
        crate::version::check_change(&b, &v)
            .map_err(|e| format!("the backup was taken by etcd {b}; restoring it with etcd {v} is refused: {e}"))?;
    }
    s.restore = Some(RestoreFrom {
        backup_storage_type: spec.backup_storage_type.clone(),
        source: spec.source.clone(),
        sha256: sha256.to_string(),
    });
    // Never create a cluster the operator would then refuse (e.g. a backup whose sidecar names
    // an etcd version this operator does not run, and no version in etcdCluster.spec).
    crate::validation::validate(&spec.etcd_cluster.name, &s).map_err(|e| {
        format!(
            "the EtcdCluster this restore would create is refused ({}); the backup was taken by etcd {:?}: set etcdCluster.spec.version",
            e.join("; "),
            meta.etcd_version
        )
    })?;
    Ok(s)
}

/// Record a failure (status, and one Warning Event when it is news); nothing more until the
/// spec changes.
fn fail(
    o: &RestoreObserved,
    mut st: EtcdRestoreStatus,
    reason: &'static str,
    why: String,
    delete_pods: Vec<String>,
) -> RestorePlan {
    st.succeeded = false;
    st.phase = PHASE_FAILED.into();
    st.reason = why;
    let events = if st != o.status { vec![(EventType::Warning, reason, st.reason.clone())] } else { vec![] };
    RestorePlan { status: st, events, step: RestoreStep::Nothing, delete_pods, mark_root_volume: None, requeue: None }
}

/// `revision 42`, `2026-11-28T01:00:00Z`: a point-in-time target as the user gave it.
pub fn describe(t: &PointTarget) -> String {
    match t {
        PointTarget::Revision(r) => format!("revision {r}"),
        PointTarget::Time(ms) => super::archive::restorable_ranges::time(*ms),
    }
}

pub fn plan(o: &RestoreObserved) -> RestorePlan {
    let prev = &o.status;
    let done = |st: EtcdRestoreStatus| RestorePlan {
        status: st,
        events: vec![],
        step: RestoreStep::Nothing,
        delete_pods: vec![],
        mark_root_volume: None,
        requeue: None,
    };
    if (prev.succeeded || prev.phase == PHASE_FAILED) && prev.observed_generation == o.generation {
        // Done, or refused: a new spec (or a new EtcdRestore) starts again.
        return done(prev.clone());
    }
    let mut st = prev.clone();
    if st.observed_generation != o.generation {
        // A new spec: start over (a verification of the old spec does not count).
        st = EtcdRestoreStatus { conditions: prev.conditions.clone(), ..Default::default() };
        st.observed_generation = o.generation;
        // Nor does the wait for a cluster of an earlier spec.
        condition::remove(&mut st.conditions, restore_wait::WAITING_CONDITION);
    }
    let checked =
        super::pods::check_job_owner_name(&o.name).and(o.spec.clone()).and_then(|s| check_spec(&s).map(|t| (s, t)));
    let (spec, target) = match checked {
        Ok(v) => v,
        Err(why) => return fail(o, st, "InvalidSpec", format!("invalid spec, nothing created: {why}"), vec![]),
    };
    // A point-in-time restore: the verify pod replays the archive into this snapshot, which the
    // members then restore.
    let output = target.replay.as_ref().map(|_| replay_output(&target.location, &o.uid, o.generation));
    let extra_secs = if target.replay.is_some() { REPLAY_EXTRA_SECS } else { 0 };
    let checking = |url: String| match &target.replay {
        Some(r) => format!("replaying the archive of {url} to {}", describe(&r.target)),
        None => format!("verifying the checksum of {url}"),
    };
    let mut events: Vec<Note> = Vec::new();
    let mut step = RestoreStep::Nothing;
    let mut delete_pods = Vec::new();
    let mut requeue = Duration::from_secs(2);
    // Who verify pods run as on a PVC: root once it is marked (`volume_owner`).
    let pvc = (target.location.kind == Kind::Pvc).then(|| target.location.bucket.clone());
    let mut mark_root_volume = None;
    let mut volume_root = o.volume_root && pvc.is_some();
    let mut root_note = volume_root.then(|| volume_owner::marked_before(Use::Restore, &target.location.bucket));
    match &o.cluster {
        Some(c) if c.restored_by.as_deref() == Some(o.uid.as_str()) => {
            // Ours: done when every member is a ready voter.
            if st.sha256.is_empty() {
                // Created, but the status write after it was lost: the cluster names its backup.
                st.sha256 = c.restore_sha256.clone().unwrap_or_default();
            }
            if c.size > 0 && c.ready_members == c.size {
                st.succeeded = true;
                st.phase = PHASE_RESTORED.into();
                st.reason.clear();
                events.push((
                    EventType::Normal,
                    "Restored",
                    format!(
                        "EtcdCluster {} is up with {} members restored from {}",
                        target.cluster,
                        c.size,
                        target.location.url()
                    ),
                ));
            } else {
                st.phase = PHASE_RESTORING.into();
                st.reason =
                    format!("waiting for EtcdCluster {}: {}/{} members ready", target.cluster, c.ready_members, c.size);
            }
            // Verify pods left over (their deletion raced an operator restart).
            delete_pods.extend(o.pods.iter().map(|p| p.name.clone()));
        }
        Some(_) => {
            let why = match restore_wait::found(&mut st.conditions, &target.cluster, o.now) {
                Ok(why) => why,
                Err(why) => return fail(o, st, "ClusterWaitExpired", why, vec![]),
            };
            st.phase = PHASE_WAITING.into();
            if st.reason != why {
                events.push((EventType::Warning, "ClusterExists", why.clone()));
            }
            st.reason = why;
            requeue = Duration::from_secs(10);
        }
        None if st.phase == PHASE_RESTORING || st.phase == PHASE_RESTORED => {
            return fail(
                o,
                st,
                "RestoreFailed",
                format!("EtcdCluster {} was deleted while it was being restored", target.cluster),
                vec![],
            );
        }
        None => {
            if let Err(why) = restore_wait::gone(&mut st.conditions, &target.cluster, o.now) {
                return fail(o, st, "ClusterWaitExpired", why, vec![]);
            }
            // Verify first; create only from a verified backup. Only this spec's verify pods
            // count (one per attempt); one of an earlier generation checked another source.
            let attempt_of = |p: &JobPodState<BackupMeta>| verify_policy::attempt_of(&p.name, &o.name, o.generation);
            delete_pods.extend(o.pods.iter().filter(|p| attempt_of(p).is_none()).map(|p| p.name.clone()));
            let latest = o.pods.iter().filter(|p| attempt_of(p).is_some()).max_by_key(|p| attempt_of(p));
            match latest {
                None => {
                    let pod = verify_policy::pod_name(&o.name, o.generation, 0);
                    st.phase = PHASE_VERIFYING.into();
                    st.reason = checking(target.location.url());
                    events.push((EventType::Normal, "VerifyStarted", format!("pod {pod} is {}", st.reason)));
                    let deadline_secs = verify_policy::deadline_secs(0, o.backup_size) + extra_secs;
                    step = RestoreStep::StartVerify {
                        pod,
                        attempt: 0,
                        deadline_secs,
                        target: Box::new(target.clone()),
                        as_root: volume_root,
                        output: output.clone(),
                    };
                }
                Some(p) => match &p.result {
                    PodResult::Running => st.phase = PHASE_VERIFYING.into(),
                    PodResult::Failed(why) => {
                        let attempt = attempt_of(p).unwrap_or(0);
                        let since = p.finished.map(|f| o.now.duration_since(f).as_secs().max(0)).unwrap_or(0);
                        let mut after = verify_policy::after_failure(attempt, why, since);
                        // Denied to the non-root user: the claim becomes root's and the next
                        // attempt, as root, starts at once (a pod is removed with this plan, so
                        // a denial is acted on once).
                        let denied = pvc.as_ref().zip(volume_owner::denied_to_non_root(why));
                        if let (Some((claim, (uid, what))), AfterFailure::Retry { attempt: next, .. }) =
                            (denied, &after)
                        {
                            after = AfterFailure::Retry { attempt: *next, wait_secs: 0 };
                            if !volume_root {
                                let note = volume_owner::marked_now(Use::Restore, claim, uid, &what);
                                events.push((EventType::Warning, "VerifyRunsAsRoot", note.clone()));
                                mark_root_volume = Some(claim.clone());
                                volume_root = true;
                                root_note = Some(note);
                            }
                        }
                        match after {
                            AfterFailure::Refuse(why) if target.replay.is_some() => {
                                delete_pods.push(p.name.clone());
                                let why = format!("point-in-time restore refused, nothing created: {why}");
                                return fail(o, st, "PointInTimeRefused", why, delete_pods);
                            }
                            AfterFailure::Refuse(why) => {
                                delete_pods.push(p.name.clone());
                                let why = format!("backup refused, nothing created: {why}");
                                return fail(o, st, "BackupRejected", why, delete_pods);
                            }
                            AfterFailure::GiveUp(why) => {
                                delete_pods.push(p.name.clone());
                                return fail(o, st, "BackupUnreadable", format!("nothing created: {why}"), delete_pods);
                            }
                            AfterFailure::Retry { wait_secs, .. } if wait_secs > 0 => {
                                st.phase = PHASE_VERIFYING.into();
                                let note = format!(
                                    "verify attempt {} of {} failed: {why}; trying again in {wait_secs}s",
                                    attempt + 1,
                                    verify_policy::VERIFY_ATTEMPTS
                                );
                                // One Event per failed attempt (the wait in the note counts down).
                                if !st.reason.starts_with(&format!("verify attempt {} of", attempt + 1)) {
                                    events.push((EventType::Warning, "VerifyRetrying", note.clone()));
                                }
                                st.reason = note;
                                requeue = Duration::from_secs(wait_secs as u64);
                            }
                            AfterFailure::Retry { attempt: next, .. } => {
                                delete_pods.push(p.name.clone());
                                let pod = verify_policy::pod_name(&o.name, o.generation, next);
                                let deadline_secs = verify_policy::deadline_secs(next, o.backup_size) + extra_secs;
                                st.phase = PHASE_VERIFYING.into();
                                st.reason = format!(
                                    "{} (attempt {} of {}, {deadline_secs}s allowed)",
                                    checking(target.location.url()),
                                    next + 1,
                                    verify_policy::VERIFY_ATTEMPTS,
                                );
                                step = RestoreStep::StartVerify {
                                    pod,
                                    attempt: next,
                                    deadline_secs,
                                    target: Box::new(target.clone()),
                                    as_root: volume_root,
                                    output: output.clone(),
                                };
                            }
                        }
                    }
                    PodResult::Succeeded(meta) => {
                        st.sha256 = meta.sha256.clone();
                        st.size = meta.size;
                        st.etcd_version = meta.etcd_version.clone();
                        st.etcd_revision = meta.etcd_revision;
                        delete_pods.push(p.name.clone());
                        let mut cspec = match cluster_spec(&spec, meta, &meta.sha256) {
                            Ok(s) => s,
                            Err(why) => return fail(o, st, "InvalidSpec", why, delete_pods),
                        };
                        // Replayed: the members restore the snapshot the pod wrote.
                        let from = output.clone().unwrap_or_else(|| target.location.clone());
                        if let (Some(out), Some(r)) = (&output, cspec.restore.as_mut()) {
                            r.source = super::location::source_with_key(out.kind, &spec.source, &out.key);
                            st.restored_from = out.url();
                        }
                        let mut annotations = BTreeMap::from([
                            (RESTORED_BY_ANNOTATION.to_string(), o.uid.clone()),
                            (RESTORED_FROM_ANNOTATION.to_string(), from.url()),
                        ]);
                        if let Some(scope) = &o.scope {
                            annotations.insert(SCOPE_ANNOTATION.to_string(), scope.clone());
                        }
                        if let Some(bump) = &o.bump_revision {
                            annotations
                                .insert(crate::naming::RESTORE_BUMP_REVISION_ANNOTATION.to_string(), bump.clone());
                        }
                        let mut cluster = EtcdCluster::new(&target.cluster, cspec);
                        cluster.metadata.namespace = Some(o.namespace.clone());
                        cluster.metadata.annotations = Some(annotations);
                        st.phase = PHASE_RESTORING.into();
                        st.reason = format!("creating EtcdCluster {}", target.cluster);
                        let (reason, note) = match &target.replay {
                            Some(r) => (
                                "PointInTimeReplayed",
                                format!(
                                    "the archive of {} was replayed to revision {} ({}) into {} (sha256 {}, {} bytes, etcd {})",
                                    target.location.url(),
                                    meta.etcd_revision,
                                    describe(&r.target),
                                    from.url(),
                                    meta.sha256,
                                    meta.size,
                                    meta.etcd_version
                                ),
                            ),
                            None => (
                                "BackupVerified",
                                format!(
                                    "{} matches its checksum (sha256 {}, {} bytes, etcd {} revision {})",
                                    target.location.url(),
                                    meta.sha256,
                                    meta.size,
                                    meta.etcd_version,
                                    meta.etcd_revision
                                ),
                            ),
                        };
                        events.push((EventType::Normal, reason, note));
                        events.push((
                            EventType::Normal,
                            "ClusterCreated",
                            format!("EtcdCluster {} created; every member starts from this backup", target.cluster),
                        ));
                        step = RestoreStep::CreateCluster(Box::new(cluster));
                        requeue = Duration::from_millis(500);
                    }
                },
            }
        }
    }
    volume_owner::set_condition(&mut st.conditions, root_note, mark_root_volume.is_some(), &super::rfc3339(o.now));
    let requeue = (!st.succeeded && st.phase != PHASE_FAILED).then_some(requeue);
    RestorePlan { status: st, events, step, delete_pods, mark_root_volume, requeue }
}

#[cfg(test)]
#[path = "restore_planner_tests.rs"]
mod tests;

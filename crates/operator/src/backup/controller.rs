//! The EtcdBackup controller: starts a backup pod when one is due (once, or every
//! `backupIntervalInSecond`), reads the pod's result from its termination message into status,
//! publishes an Event for every start, success and failure, and deletes finished pods.
//! Failed one-shot backups are retried with a growing delay; a periodic series simply tries
//! again at the next interval. The stored backups are never touched from here: retention runs
//! in the backup pod, after its own backup is complete.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_operator_api::backup::{BackupRecord, EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::location::Location;
use super::pods::{self, BACKUP_LABEL, JobPod};
use super::save::SaveReport;
use crate::controller::Scope;
use crate::events::Recorder;

/// Default `backupPolicy.timeoutInSecond`, as in CoreOS.
pub const DEFAULT_TIMEOUT_SECS: i64 = 60;
/// Extra time a backup pod gets beyond the backup's own time limit, to start and report.
const POD_START_SLACK_SECS: i64 = 60;

/// What the backup and restore controllers share.
pub struct JobContext {
    pub client: Client,
    pub scope: Scope,
    pub recorder: Recorder,
    pub init_image: String,
    /// Pods carrying this controller's label.
    pub pods: Store<Pod>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Finished pods whose result is recorded and which were deleted: the pod cache can still
    /// show one for a moment, and its result must not be counted twice.
    pub recorded: Recorded,
}

/// UIDs of finished job pods already recorded (kept 10 minutes, far longer than a cache lags).
#[derive(Default)]
pub struct Recorded(std::sync::Mutex<BTreeMap<String, std::time::Instant>>);

impl Recorded {
    const KEEP: Duration = Duration::from_secs(600);

    pub fn insert(&self, pod: &Pod) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = std::time::Instant::now();
        m.retain(|_, t| now.duration_since(*t) < Self::KEEP);
        if let Some(uid) = pod.uid() {
            m.insert(uid, now);
        }
    }

    pub fn contains(&self, pod: &Pod) -> bool {
        let m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        pod.uid().is_some_and(|uid| m.contains_key(&uid))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
}

/// How a job pod ended.
#[derive(Clone, Debug, PartialEq)]
pub enum PodResult<T> {
    Running,
    Succeeded(T),
    Failed(String),
}

/// The result of a job pod, from its phase and termination message.
pub fn pod_result<T: DeserializeOwned>(pod: &Pod) -> PodResult<T> {
    let status = pod.status.clone().unwrap_or_default();
    let terminated = status
        .container_statuses
        .as_ref()
        .and_then(|cs| cs.first())
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone());
    let message = terminated.as_ref().and_then(|t| t.message.clone()).unwrap_or_default();
    match status.phase.as_deref() {
        Some("Succeeded") => match serde_json::from_str(message.trim()) {
            Ok(v) => PodResult::Succeeded(v),
            Err(e) => PodResult::Failed(format!("pod {} succeeded but its report is unreadable: {e}", pod.name_any())),
        },
        Some("Failed") => {
            let why = if !message.trim().is_empty() {
                message.trim().to_string()
            } else {
                // Killed from outside: activeDeadlineSeconds, eviction, a node loss.
                let r = status.reason.unwrap_or_default();
                let m = status.message.unwrap_or_default();
                format!("pod {} failed: {} {}", pod.name_any(), r, m).trim().to_string()
            };
            PodResult::Failed(why)
        }
        _ => PodResult::Running,
    }
}

/// This object's job pods in the cache, oldest first.
pub fn job_pods(store: &Store<Pod>, label: &str, obj: &DynamicObject) -> Vec<Arc<Pod>> {
    let uid = obj.uid();
    let mut v: Vec<Arc<Pod>> = store
        .state()
        .into_iter()
        .filter(|p| p.namespace() == obj.namespace() && p.labels().get(label) == Some(&obj.name_any()))
        .filter(|p| p.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
        .collect();
    v.sort_by_key(|p| p.creation_timestamp().map(|t| t.0));
    v
}

pub async fn publish(
    ctx: &JobContext,
    obj: &DynamicObject,
    ar: &ApiResource,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let reference = obj.object_ref(ar);
    let ev = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
    if let Err(e) = ctx.recorder.publish(&ev, &reference).await {
        tracing::warn!(error = %e, reason, "could not publish Event");
    }
}

/// The object as the API has it now. The controller hands over the watch cache's copy, which may
/// not show this controller's own last status write yet; every status field is written back on
/// each change, so planning from a stale status would undo that write (a lost sha256, a failure
/// counted twice). Backups and restores are few and reconciled rarely: one GET each is cheap.
pub async fn fresh(ctx: &JobContext, obj: &DynamicObject, ar: &ApiResource) -> Result<Option<DynamicObject>, Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &obj.namespace().unwrap_or_default(), ar);
    Ok(api.get_opt(&obj.name_any()).await?)
}

pub async fn patch_status<S: Serialize>(
    ctx: &JobContext,
    obj: &DynamicObject,
    ar: &ApiResource,
    status: &S,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &obj.namespace().unwrap_or_default(), ar);
    let body = serde_json::json!({ "status": status });
    api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&body)).await?;
    Ok(())
}

pub async fn delete_pod(ctx: &JobContext, pod: &Pod) {
    ctx.recorded.insert(pod);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    match api.delete(&pod.name_any(), &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => tracing::warn!(pod = %pod.name_any(), error = %e, "could not delete a finished job pod"),
    }
}

pub async fn create_pod(ctx: &JobContext, pod: &Pod) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), pod.metadata.namespace.as_deref().unwrap_or_default());
    match api.create(&PostParams::default(), pod).await {
        Ok(_) => Ok(()),
        // Created by an earlier reconcile whose cache had not caught up yet.
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn parse_time(s: &Option<String>) -> Option<DateTime<Utc>> {
    s.as_deref().and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|t| t.to_utc())
}

/// A checked EtcdBackup spec.
#[derive(Clone, Debug, PartialEq)]
pub struct BackupPlan {
    pub location: Location,
    pub endpoints: Vec<String>,
    pub interval: Option<Duration>,
    pub max_backups: i32,
    pub timeout_secs: i64,
}

/// Check a spec; `namespace` resolves `clusterName` to its client Service.
pub fn plan(spec: &EtcdBackupSpec, namespace: &str) -> Result<BackupPlan, String> {
    let location = Location::of(&spec.storage_type, &spec.source)?;
    if !spec.client_tls_secret.is_empty() {
        return Err("clientTLSSecret is not supported yet by this operator version (TLS is not wired)".into());
    }
    let endpoints = match (spec.etcd_endpoints.is_empty(), spec.cluster_name.is_empty()) {
        (false, true) => spec.etcd_endpoints.clone(),
        (true, false) => {
            vec![format!(
                "http://{}.{namespace}.svc:{}",
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
    let timeout_secs = if policy.timeout_in_second == 0 { DEFAULT_TIMEOUT_SECS } else { policy.timeout_in_second };
    // An interval shorter than the time limit is accepted (the CoreOS upgrade guide runs
    // backups every 30 s with the default 60 s limit): a backup still running when the next is
    // due delays it, never two at once (`delayed_note` says so in status).
    let interval =
        (policy.backup_interval_in_second > 0).then(|| Duration::from_secs(policy.backup_interval_in_second as u64));
    Ok(BackupPlan { location, endpoints, interval, max_backups: policy.max_backups, timeout_secs })
}

/// Prefix of the status reason while a due backup waits for a running one.
const DELAYED: &str = "the backup due at ";

/// When the next backup is due but one is still running: what status says (the next starts once
/// the running one ends; two never run at once).
pub fn delayed_note(running: Option<&str>, due: Option<DateTime<Utc>>, now: DateTime<Utc>) -> Option<String> {
    let (pod, due) = (running?, due.filter(|d| *d <= now)?);
    Some(format!(
        "{DELAYED}{} waits for the backup still running (pod {pod}): backups never overlap, so one that takes longer than backupIntervalInSecond delays the next",
        rfc3339(due)
    ))
}

/// Longest backup interval: a year. Longer ones would overflow time arithmetic and mean "never".
pub const MAX_INTERVAL_SECS: i64 = 365 * 24 * 3600;
/// Longest time limit of one backup: a day.
pub const MAX_TIMEOUT_SECS: i64 = 24 * 3600;
/// Most backups kept by retention.
pub const MAX_BACKUPS: i64 = 10_000;

/// A pod still Pending (not started) that was created before `before`.
fn stuck_pending(p: &Pod, before: DateTime<Utc>) -> bool {
    let pending = p.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|ph| ph == "Pending");
    let created = p.creation_timestamp().and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0));
    pending && created.is_some_and(|c| c < before)
}

/// Why a pending pod waits, from its conditions and container states.
fn pending_reason(p: &Pod) -> String {
    let st = p.status.clone().unwrap_or_default();
    let waiting = st
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
        .map(|w| format!("{} {}", w.reason.clone().unwrap_or_default(), w.message.clone().unwrap_or_default()))
        .next();
    let unscheduled = st
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| format!("not scheduled: {}", c.message.clone().unwrap_or_default()));
    waiting.or(unscheduled).unwrap_or_else(|| "still Pending".into()).trim().to_string()
}

/// Delay before retrying a failed one-shot backup: 10 s doubling to 5 min.
pub fn retry_delay(failures: i32) -> Duration {
    let f = failures.clamp(1, 10) as u32;
    Duration::from_secs((10u64 << (f - 1)).min(300))
}

/// When the next backup is due (None: never, the one-shot backup of this spec is done).
pub fn next_due(
    plan: &BackupPlan,
    st: &EtcdBackupStatus,
    generation: i64,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let last = parse_time(&st.last_attempt_date);
    let same_spec = st.observed_generation == generation;
    match (plan.interval, last) {
        (_, None) => Some(now),
        (_, Some(_)) if !same_spec => Some(now),
        // Checked: a time past chrono's range is "never", not a panic.
        (Some(i), Some(l)) => chrono::Duration::from_std(i).ok().and_then(|d| l.checked_add_signed(d)),
        (None, Some(_)) if st.succeeded => None,
        (None, Some(l)) => {
            chrono::Duration::from_std(retry_delay(st.consecutive_failures)).ok().and_then(|d| l.checked_add_signed(d))
        }
    }
}

/// Fold one finished backup pod into the status; returns the Event to publish.
pub fn record(st: &mut EtcdBackupStatus, result: Result<SaveReport, String>) -> (EventType, &'static str, String) {
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
            st.consecutive_failures = 0;
            st.history = r
                .kept
                .iter()
                .map(|m| BackupRecord {
                    path: m.path.clone(),
                    sha256: m.sha256.clone(),
                    size: m.size,
                    etcd_revision: m.etcd_revision,
                    time: m.time.clone(),
                })
                .collect();
            let mut note = format!(
                "backup of member {} at revision {} ({} bytes, sha256 {}) written to {} in {:.1}s",
                b.member, b.etcd_revision, b.size, b.sha256, b.path, r.transfer_seconds
            );
            if !r.deleted.is_empty() {
                note.push_str(&format!("; retention deleted {}", r.deleted.join(", ")));
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

fn backup_ar() -> ApiResource {
    ApiResource::erase::<EtcdBackup>(&())
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<JobContext>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ar = backup_ar();
    let Some(obj) = fresh(&ctx, &obj, &ar).await? else { return Ok(Action::await_change()) };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let prev: EtcdBackupStatus =
        obj.data.get("status").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
    let mut st = prev.clone();
    let ns = obj.namespace().unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or_default();
    let spec: Result<EtcdBackupSpec, String> = obj
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| "no spec".to_string())
        .and_then(|s| serde_json::from_value(s).map_err(|e| format!("spec cannot be read: {e}")));
    let plan = super::pods::check_job_owner_name(&obj.name_any()).and(spec).and_then(|s| plan(&s, &ns));
    let plan = match plan {
        Ok(p) => p,
        Err(why) => {
            st.succeeded = false;
            st.reason = format!("invalid spec, no backup taken: {why}");
            st.observed_generation = generation;
            if st != prev {
                publish(&ctx, &obj, &ar, EventType::Warning, "InvalidSpec", st.reason.clone()).await;
                patch_status(&ctx, &obj, &ar, &st).await?;
            }
            return Ok(Action::await_change());
        }
    };

    let pods = job_pods(&ctx.pods, BACKUP_LABEL, &obj);
    let mut finished = Vec::new();
    let mut running: Option<String> = None;
    // A pod that never started (unschedulable, an image that cannot be pulled) is not bounded
    // by its activeDeadlineSeconds, which counts from the start: give up on it here.
    let start_limit = chrono::Duration::seconds(plan.timeout_secs + 2 * POD_START_SLACK_SECS);
    for p in pods.iter().filter(|p| !ctx.recorded.contains(p)) {
        match pod_result::<SaveReport>(p) {
            PodResult::Running if stuck_pending(p, Utc::now() - start_limit) => {
                let why = format!(
                    "backup pod {} did not start within {}s: {}",
                    p.name_any(),
                    start_limit.num_seconds(),
                    pending_reason(p)
                );
                finished.push((p.clone(), Err(why)));
            }
            PodResult::Running => running = Some(p.name_any()),
            PodResult::Succeeded(r) => finished.push((p.clone(), Ok(r))),
            PodResult::Failed(why) => finished.push((p.clone(), Err(why))),
        }
    }
    let mut events = Vec::new();
    for (_, result) in &finished {
        events.push(record(&mut st, result.clone()));
    }
    // From status, not only from a result just recorded: after an operator restart the series
    // come back at the first reconcile.
    let last_success = parse_time(&st.last_success_date).map(|t| t.timestamp());
    ctx.metrics.observe_backup(&ns, &obj.name_any(), last_success, plan.interval);
    let now = Utc::now();
    let due = next_due(&plan, &st, generation, now);
    match delayed_note(running.as_deref(), due, now) {
        Some(note) => st.reason = note,
        None if st.reason.starts_with(DELAYED) => st.reason.clear(),
        None => {}
    }
    let due = if running.is_some() { None } else { due };
    let mut requeue = plan.interval.unwrap_or(Duration::from_secs(300));
    match due {
        Some(t) if t <= now => {
            let name = format!("{}-{}", obj.name_any(), now.timestamp());
            let pod = backup_pod(&obj, &plan, &ctx.init_image, &name)?;
            st.last_attempt_date = Some(rfc3339(now));
            st.observed_generation = generation;
            match create_pod(&ctx, &pod).await {
                Ok(()) => {
                    events.push((
                        EventType::Normal,
                        "BackupStarted",
                        format!(
                            "pod {name} is taking a snapshot of {} to {}",
                            plan.endpoints.join(","),
                            plan.location.url()
                        ),
                    ));
                    requeue = Duration::from_secs((plan.timeout_secs + POD_START_SLACK_SECS) as u64);
                }
                // Refused by admission (a quota, a pod security policy): a failed attempt, said
                // in status and an Event, retried like any failed backup.
                Err(e) => {
                    events.push(record(&mut st, Err(format!("could not create the backup pod {name}: {e}"))));
                    requeue = retry_delay(st.consecutive_failures).min(plan.interval.unwrap_or(Duration::MAX));
                }
            }
        }
        Some(t) => requeue = (t - now).to_std().unwrap_or(requeue),
        None if running.is_some() => requeue = Duration::from_secs(30),
        None => {}
    }
    for (type_, reason, note) in events {
        publish(&ctx, &obj, &ar, type_, reason, note).await;
    }
    if st != prev {
        patch_status(&ctx, &obj, &ar, &st).await?;
    }
    // Only once the result is in status: a pod deleted before that would lose it.
    for (p, _) in &finished {
        delete_pod(&ctx, p).await;
    }
    ctx.metrics.reconciled("etcdbackup", started.elapsed(), false);
    Ok(Action::requeue(requeue))
}

/// The backup pod for `plan`, owned by the EtcdBackup.
fn backup_pod(obj: &DynamicObject, plan: &BackupPlan, image: &str, name: &str) -> Result<Pod, Error> {
    let backup: EtcdBackup = serde_json::from_value(serde_json::to_value(obj)?)?;
    let owner = backup.controller_owner_ref(&()).expect("EtcdBackup from the API has a name and uid");
    let mut command = vec![crate::OPERATOR_NAME.to_string(), "backup-save".into()];
    command.extend(pods::storage_args(&plan.location, &backup.spec.source));
    command.push(format!("--endpoints={}", plan.endpoints.join(",")));
    command.push(format!("--timeout-secs={}", plan.timeout_secs));
    if plan.interval.is_some() {
        command.push("--periodic".into());
        command.push(format!("--max-backups={}", plan.max_backups));
    }
    Ok(pods::job_pod(JobPod {
        name: name.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        labels: {
            let mut l = BTreeMap::from([(BACKUP_LABEL.to_string(), obj.name_any())]);
            if !backup.spec.cluster_name.is_empty() {
                l.insert(pods::BACKUP_OF_LABEL.to_string(), backup.spec.cluster_name.clone());
            }
            l
        },
        owner,
        image,
        command,
        loc: &plan.location,
        source: &backup.spec.source,
        deadline_secs: plan.timeout_secs + POD_START_SLACK_SECS,
        writes: true,
    }))
}

fn error_policy(obj: Arc<DynamicObject>, err: &Error, _ctx: Arc<JobContext>) -> Action {
    tracing::warn!(backup = %obj.name_any(), error = %err, "backup reconcile failed; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

/// A watched, cached stream of the pods carrying `label`, for a job controller.
pub fn job_pod_watch(
    client: &Client,
    scope: &Scope,
    label: &str,
) -> (Store<Pod>, impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + 'static) {
    let (store, writer) = reflector::store::<Pod>();
    let events = watcher(scope.api::<Pod>(client), watcher::Config::default().labels(label))
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    (store, events)
}

pub struct Options {
    pub client: Client,
    pub scope: Scope,
    pub init_image: String,
    pub reporter_instance: Option<String>,
    pub metrics: Arc<crate::metrics::Metrics>,
}

/// Run the EtcdBackup controller until `shutdown` resolves.
pub async fn run(opts: Options, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let (pods, pod_events) = job_pod_watch(&opts.client, &opts.scope, BACKUP_LABEL);
    let ar = backup_ar();
    let backups: Api<DynamicObject> = match &opts.scope.namespace {
        Some(ns) => Api::namespaced_with(opts.client.clone(), ns, &ar),
        None => Api::all_with(opts.client.clone(), &ar),
    };
    let reporter = Reporter { controller: crate::OPERATOR_NAME.into(), instance: opts.reporter_instance };
    let ctx = Arc::new(JobContext {
        recorder: Recorder::new(opts.client.clone(), reporter),
        client: opts.client,
        scope: opts.scope,
        init_image: opts.init_image,
        pods: pods.clone(),
        metrics: opts.metrics,
        recorded: Default::default(),
    });
    let synced = pods.clone();
    let controller = Controller::new_with(backups, watcher::Config::default(), ar);
    let store = controller.store();
    ctx.metrics.set_live_backups(Box::new(move || {
        store
            .state()
            .iter()
            .map(|b| crate::metrics::ClusterLabels { namespace: b.namespace().unwrap_or_default(), name: b.name_any() })
            .collect()
    }));
    controller
        .owns_stream_with(pod_events, ())
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx| {
                let synced = synced.clone();
                async move {
                    // Results are read from pods in the cache: wait for its first full list.
                    synced.wait_until_ready().await.ok();
                    let ar = kube::api::ApiResource::erase::<etcd_operator_api::EtcdBackup>(&());
                    let fut = reconcile(obj.clone(), ctx.clone());
                    crate::panic_guard::guard("etcdbackup", &ar, &obj, &ctx.recorder, &ctx.metrics, fut).await
                }
            },
            error_policy,
            ctx,
        )
        .for_each(|item| async move {
            if let Err(e) = item {
                tracing::debug!(error = %e, "backup controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::backup::{BackupPolicy, BackupSource, S3Source};
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus};

    fn spec(interval: i64, max: i32) -> EtcdBackupSpec {
        EtcdBackupSpec {
            cluster_name: "ex".into(),
            storage_type: "S3".into(),
            backup_policy: Some(BackupPolicy {
                backup_interval_in_second: interval,
                max_backups: max,
                timeout_in_second: 0,
            }),
            source: BackupSource {
                s3: Some(S3Source { path: "b/k".into(), aws_secret: "aws".into(), ..Default::default() }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    #[test]
    fn a_pod_that_never_started_is_given_up_with_its_reason() {
        use k8s_openapi::api::core::v1::PodCondition;
        let mut p = Pod::default();
        p.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
        p.status = Some(PodStatus {
            phase: Some("Pending".into()),
            conditions: Some(vec![PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                message: Some("0/1 nodes are available: 1 Insufficient memory.".into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(stuck_pending(&p, t("2026-01-01T00:03:00Z")));
        assert!(!stuck_pending(&p, t("2025-12-31T23:59:00Z")), "young enough");
        assert_eq!(pending_reason(&p), "not scheduled: 0/1 nodes are available: 1 Insufficient memory.");
        p.status.as_mut().unwrap().phase = Some("Running".into());
        assert!(!stuck_pending(&p, t("2026-01-01T00:03:00Z")), "running pods have their deadline");
    }

    #[test]
    fn a_recorded_pod_is_recognised_by_uid() {
        let mut p = Pod::default();
        p.metadata.name = Some("b-1".into());
        p.metadata.uid = Some("u1".into());
        let r = Recorded::default();
        assert!(!r.contains(&p));
        r.insert(&p);
        assert!(r.contains(&p));
        let mut again = p.clone();
        again.metadata.uid = Some("u2".into()); // same name, a new pod
        assert!(!r.contains(&again));
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
            let e = plan(&s, "ns").unwrap_err();
            assert!(e.contains(field) && e.contains("between 0 and"), "{e}");
        }
        // The largest accepted interval still has a due time (no overflow, no panic).
        let p = plan(&spec(MAX_INTERVAL_SECS, 0), "ns").unwrap();
        let st = EtcdBackupStatus { last_attempt_date: Some("2026-01-01T00:00:00Z".into()), ..Default::default() };
        assert!(next_due(&p, &st, 0, t("2026-01-01T00:00:01Z")).is_some());
    }

    #[test]
    fn cluster_name_means_its_client_service() {
        let p = plan(&spec(0, 0), "ns").unwrap();
        assert_eq!(p.endpoints, ["http://ex-client.ns.svc:2379"]);
        assert_eq!(p.timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert!(p.interval.is_none());
    }

    #[test]
    fn invalid_specs_say_why() {
        let mut s = spec(0, 0);
        s.etcd_endpoints = vec!["http://x:2379".into()];
        assert!(plan(&s, "ns").unwrap_err().contains("not both"));
        let mut s = spec(0, 0);
        s.cluster_name.clear();
        assert!(plan(&s, "ns").unwrap_err().contains("no cluster"));
        // The CoreOS upgrade guide's policy: every 30 s with the default 60 s limit.
        assert!(plan(&spec(30, 2), "ns").is_ok());
        let mut s = spec(0, 0);
        s.client_tls_secret = "tls".into();
        assert!(plan(&s, "ns").unwrap_err().contains("clientTLSSecret"));
        let mut s = spec(0, 0);
        s.storage_type = "NFS".into();
        assert!(plan(&s, "ns").unwrap_err().contains("NFS"));
    }

    #[test]
    fn a_backup_due_while_one_runs_waits_and_status_says_so() {
        let now = t("2026-01-01T00:01:00Z");
        let note = delayed_note(Some("b-1"), Some(t("2026-01-01T00:00:30Z")), now).unwrap();
        assert!(note.contains("b-1") && note.contains("00:00:30") && note.contains("never overlap"), "{note}");
        assert_eq!(delayed_note(None, Some(now), now), None, "nothing running: it starts");
        assert_eq!(delayed_note(Some("b-1"), Some(t("2026-01-01T00:01:30Z")), now), None, "not due yet");
    }

    #[test]
    fn one_shot_runs_once_per_spec_and_retries_failures_with_backoff() {
        let p = plan(&spec(0, 0), "ns").unwrap();
        let now = t("2026-01-01T00:10:00Z");
        let mut st = EtcdBackupStatus::default();
        assert_eq!(next_due(&p, &st, 1, now), Some(now), "never attempted");
        st.last_attempt_date = Some("2026-01-01T00:09:55Z".into());
        st.observed_generation = 1;
        st.succeeded = true;
        assert_eq!(next_due(&p, &st, 1, now), None, "done");
        assert_eq!(next_due(&p, &st, 2, now), Some(now), "a changed spec backs up again");
        st.succeeded = false;
        st.consecutive_failures = 1;
        assert_eq!(next_due(&p, &st, 1, now), Some(t("2026-01-01T00:10:05Z")), "10 s after one failure");
        st.consecutive_failures = 3;
        assert_eq!(next_due(&p, &st, 1, now), Some(t("2026-01-01T00:10:35Z")), "40 s after three");
        assert_eq!(retry_delay(20), Duration::from_secs(300), "capped at 5 min");
    }

    #[test]
    fn periodic_backups_are_due_an_interval_after_the_last_attempt_even_a_failed_one() {
        let p = plan(&spec(120, 2), "ns").unwrap();
        let st = EtcdBackupStatus {
            last_attempt_date: Some("2026-01-01T00:00:00Z".into()),
            observed_generation: 1,
            succeeded: false,
            consecutive_failures: 4,
            ..Default::default()
        };
        assert_eq!(next_due(&p, &st, 1, t("2026-01-01T00:01:00Z")), Some(t("2026-01-01T00:02:00Z")));
    }

    fn finished_pod(phase: &str, message: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                reason: Some("DeadlineExceeded".into()),
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            message: Some(message.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_results_come_from_the_termination_message() {
        let ok = serde_json::to_string(&SaveReport::default()).unwrap();
        assert_eq!(
            pod_result::<SaveReport>(&finished_pod("Succeeded", &ok)),
            PodResult::Succeeded(SaveReport::default())
        );
        assert_eq!(
            pod_result::<SaveReport>(&finished_pod("Failed", "checksum mismatch: x\n")),
            PodResult::Failed("checksum mismatch: x".into())
        );
        let r = pod_result::<SaveReport>(&finished_pod("Failed", ""));
        assert!(matches!(r, PodResult::Failed(m) if m.contains("DeadlineExceeded")));
        assert_eq!(pod_result::<SaveReport>(&finished_pod("Running", "")), PodResult::Running);
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
}

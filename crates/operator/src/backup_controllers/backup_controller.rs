//! The EtcdBackup controller (I/O): observe the object (fresh from the API) and its pods (from the
//! cache) into a [`BackupObserved`], let `backup_planner` decide, then execute: write status,
//! start the backup pod, publish Events, delete finished pods — in that order, so a result is in
//! status before its pod goes.

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_operator_api::backup::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::jobs::{self, Error, JobContext, Options};
use crate::backup::archiver_plan;
use crate::backup::backup_planner::{self, BackupObserved, BackupStep, BackupTarget, POD_START_SLACK_SECS};
use crate::backup::contract::{BACKUP_LABEL, BACKUP_OF_LABEL, DrillReport, SaveReport};
use crate::backup::drill::{self, DrillStart};
use crate::backup::pods::{self, JobPod};
use crate::backup::{restorable, series_owner};

fn backup_ar() -> ApiResource {
    ApiResource::erase::<EtcdBackup>(&())
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<JobContext>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ar = backup_ar();
    let Some(obj) = jobs::fresh(&ctx, &obj, &ar).await? else { return Ok(Action::await_change()) };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let ns = obj.namespace().unwrap_or_default();
    let mut spec = jobs::spec_of::<EtcdBackupSpec>(&obj);
    // A series another EtcdBackup schedules into first is refused like an invalid spec, and
    // looked at again a minute later (the other's deletion does not wake this one).
    let mut shared = false;
    if let Some(series) = spec.as_ref().ok().and_then(|s| series_owner::series_of(s, &ns)) {
        let created = obj.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let me = series_owner::Scheduler::of(&obj.name_any(), created, spec.as_ref().ok(), &ns);
        if let Some(owner) = series_owner::owner(&me, &schedulers(&ctx, &ns).await?) {
            spec = Err(series_owner::refusal(&series, &owner.name));
            shared = true;
        }
    }
    let volume_root = match spec.as_ref().ok().and_then(pvc_of) {
        Some(claim) => jobs::volume_marked_root(&ctx, &ns, &claim).await?,
        None => false,
    };
    // The archiver and drill pods carry the backup's label too (so they are in the cache) and a
    // role of their own.
    let role = |p: &Pod| p.metadata.labels.as_ref().and_then(|l| l.get(archiver_plan::ROLE_LABEL)).cloned();
    let mut archivers = Vec::new();
    let mut drills = Vec::new();
    let mut job_pods = Vec::new();
    for p in jobs::job_pods(&ctx, BACKUP_LABEL, &obj) {
        match role(&p).as_deref() {
            Some(archiver_plan::ROLE_ARCHIVER) => archivers.push(p),
            Some(drill::ROLE_DRILL) => drills.push(p),
            _ => job_pods.push(p),
        }
    }
    let o = BackupObserved {
        name: obj.name_any(),
        namespace: ns.clone(),
        generation: obj.metadata.generation.unwrap_or_default(),
        spec,
        status: jobs::status_of::<EtcdBackupStatus>(&obj),
        pods: job_pods.iter().map(|p| crate::backup::job_pods::observe::<SaveReport>(p)).collect(),
        drill_pods: drills.iter().map(|p| crate::backup::job_pods::observe::<DrillReport>(p)).collect(),
        volume_root,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    let mut plan = backup_planner::plan(&o);
    if let Some(claim) = &plan.mark_root_volume {
        // Before the pod: the mark is what runs the next pods as root.
        jobs::mark_root_volume(&ctx, &ns, claim).await?;
    }
    if let BackupStep::StartBackup { pod, target, as_root } = &plan.step {
        let (pod, target, as_root) = (pod.clone(), target.clone(), *as_root);
        let auth = match &o.spec {
            Ok(spec) => auth_secret(&ctx, &ns, spec).await,
            Err(_) => None,
        };
        let made = backup_pod(&obj, &target, &ctx.init_image, &pod, auth.as_deref(), as_root)?;
        if let Err(e) = jobs::create_pod(&ctx, &made).await {
            backup_planner::start_failed(&mut plan, &pod, e.to_string());
        }
    }
    if let (Some(start), Ok(spec)) = (plan.drill.clone(), &o.spec)
        && let Ok(target) = backup_planner::check_spec(spec, &ns)
    {
        let auth = auth_secret(&ctx, &ns, spec).await;
        let created = match drill_tools(&ctx, &ns, spec, &plan.status).await {
            Ok(tools) => {
                let made = drill_pod(&obj, &target, &ctx.init_image, &start, &tools, auth.as_deref(), o.volume_root)?;
                jobs::create_pod(&ctx, &made).await.map_err(|e| e.to_string())
            }
            Err(why) => Err(why),
        };
        if let Err(e) = created {
            // Refused by admission (a quota, a policy): said, and tried again shortly.
            plan.events.push((
                kube::runtime::events::EventType::Warning,
                "DrillFailed",
                format!("could not create the drill pod {}: {e}", start.pod),
            ));
            plan.requeue = Some(plan.requeue.map_or(DRILL_RETRY, |r| r.min(DRILL_RETRY)));
        }
    }
    archive(&ctx, &obj, &o, &mut plan, &archivers).await?;
    // From status, not only from a result just recorded: after an operator restart the series
    // come back at the first reconcile.
    if let Some(target) = o.spec.as_ref().ok().and_then(|s| backup_planner::check_spec(s, &ns).ok()) {
        {
            let last_success = crate::backup::parse_time(&plan.status.last_success_date).map(|t| t.as_second());
            ctx.metrics.observe_backup(&ns, &o.name, last_success, target.interval);
            ctx.metrics.observe_archive(&ns, &o.name, plan.status.archive.as_ref());
            ctx.metrics.observe_restorable(&ns, &o.name, &plan.status.restorable_ranges);
            ctx.metrics.observe_drill(&ns, &o.name, plan.status.last_drill.as_ref());
        }
    }
    if shared {
        plan.requeue = Some(SHARED_SERIES_RECHECK);
    }
    jobs::write_back(&ctx, &obj, &ar, (&o.status, &plan.status), &plan.events, &plan.delete_pods).await?;
    ctx.metrics.reconciled("etcdbackup", started.elapsed(), false);
    Ok(plan.requeue.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// How soon an EtcdBackup refused for another one's series looks again.
const SHARED_SERIES_RECHECK: std::time::Duration = std::time::Duration::from_secs(60);

/// The namespace's EtcdBackups that are not being deleted, as far as series go (a spec that
/// cannot be read schedules nothing).
async fn schedulers(ctx: &JobContext, ns: &str) -> Result<Vec<series_owner::Scheduler>, Error> {
    // Untyped: one object whose spec does not parse must not fail the listing for the others.
    let api: kube::Api<DynamicObject> = kube::Api::namespaced_with(ctx.client.clone(), ns, &backup_ar());
    let listed = api.list(&kube::api::ListParams::default()).await?;
    Ok(listed
        .items
        .into_iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .map(|b| {
            let created = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
            series_owner::Scheduler::of(&b.name_any(), created, jobs::spec_of::<EtcdBackupSpec>(&b).ok().as_ref(), ns)
        })
        .collect())
}

/// The continuous archive (`archiver_plan`): its pod made, made again or removed, and the
/// `Archiving` condition in the status about to be written.
async fn archive(
    ctx: &JobContext,
    obj: &DynamicObject,
    o: &BackupObserved,
    plan: &mut backup_planner::BackupPlan,
    archivers: &[Arc<Pod>],
) -> Result<(), Error> {
    let ns = obj.namespace().unwrap_or_default();
    let target = o.spec.as_ref().ok().map(|s| backup_planner::check_spec(s, &ns));
    let wanted = match &target {
        Some(Ok(t)) => Some(t.archive_flush_secs.is_some()),
        _ => None,
    };
    let made = match (&target, &o.spec) {
        (Some(Ok(t)), Ok(spec)) if t.archive_flush_secs.is_some() => {
            let auth = auth_secret(ctx, &ns, spec).await;
            Some(archiver_pod(obj, t, &ctx.init_image, auth.as_deref(), o.volume_root)?)
        }
        _ => None,
    };
    let hash = made.as_ref().map(archiver_hash).unwrap_or_default();
    let observed: Vec<_> = archivers.iter().map(|p| archiver_plan::observe(p)).collect();
    let has_snapshot = plan.status.last_success_date.is_some();
    let d = archiver_plan::decide(wanted, has_snapshot, &hash, &observed);
    match (&d.action, made) {
        (archiver_plan::Action::Create, Some(mut pod)) => {
            pod.metadata.annotations.get_or_insert_default().insert(archiver_plan::SPEC_ANNOTATION.into(), hash);
            jobs::create_pod(ctx, &pod).await?;
        }
        (archiver_plan::Action::Delete(name), _) => jobs::delete_pod(ctx, &ns, name).await,
        _ => {}
    }
    // Where the archive stands, as the running archiver says (kept as last reported when it
    // cannot be asked now).
    let reported = match wanted {
        Some(false) => None,
        _ => match archivers.iter().find(|p| archiver_plan::observe(p).ready) {
            Some(p) => archive_status(p).await,
            None => None,
        },
    };
    let answered = reported.is_some();
    plan.status.archive = match wanted {
        Some(false) => None,
        _ => reported.or_else(|| plan.status.archive.take()),
    };
    let now = crate::backup::rfc3339(o.now);
    // What can be restored, the archive's progress since the last backup listed it included;
    // a gap said once; whether the archive is current.
    plan.events.extend(restorable::new_gaps(o.status.archive.as_ref(), plan.status.archive.as_ref()));
    plan.status.restorable_ranges = restorable::extend(&plan.status.restorable_ranges, plan.status.archive.as_ref());
    match (&target, wanted) {
        (Some(Ok(t)), Some(true)) if has_snapshot => {
            let flush = t.archive_flush_secs.unwrap_or(archiver_plan::DEFAULT_FLUSH_SECS);
            let last_success = crate::backup::parse_time(&plan.status.last_success_date);
            let (ok, reason, message) = restorable::condition(
                plan.status.archive.as_ref(),
                answered,
                flush,
                last_success,
                &plan.status.restorable_ranges,
                o.now,
            );
            let c = etcd_operator_api::Condition {
                type_: restorable::CONDITION.into(),
                status: if ok { "True" } else { "False" }.into(),
                reason: reason.into(),
                message,
                ..Default::default()
            };
            etcd_operator_api::condition::upsert(&mut plan.status.conditions, c, &now);
            ctx.metrics.observe_archive_lag(
                &ns,
                &o.name,
                plan.status.archive.as_ref().and_then(|a| restorable::lag_secs(a, answered, o.now)),
            );
        }
        (_, Some(false)) => {
            etcd_operator_api::condition::remove(&mut plan.status.conditions, restorable::CONDITION);
            ctx.metrics.observe_archive_lag(&ns, &o.name, None);
        }
        _ => {}
    }
    let settled =
        !matches!(d.action, archiver_plan::Action::Delete(_)) && matches!(d.condition, Some((true, ..)) | None);
    match d.condition {
        Some((ok, reason, message)) => {
            let c = etcd_operator_api::Condition {
                type_: archiver_plan::CONDITION.into(),
                status: if ok { "True" } else { "False" }.into(),
                reason: reason.into(),
                message,
                ..Default::default()
            };
            etcd_operator_api::condition::upsert(&mut plan.status.conditions, c, &now);
        }
        None if wanted.is_some() => {
            etcd_operator_api::condition::remove(&mut plan.status.conditions, archiver_plan::CONDITION)
        }
        None => {}
    }
    // Until the archiver runs, look again soon (its pod's changes also wake this up); while it
    // runs, often enough that status follows its progress.
    let again = match (settled, wanted) {
        (false, _) => Some(ARCHIVER_RECHECK),
        (true, Some(true)) => Some(ARCHIVE_STATUS_PERIOD),
        _ => None,
    };
    if let Some(again) = again {
        plan.requeue = Some(plan.requeue.map_or(again, |r| r.min(again)));
    }
    Ok(())
}

/// `GET /status` of a running archiver pod (`backup::archiver`), or None if it does not answer.
async fn archive_status(pod: &Pod) -> Option<etcd_operator_api::backup::ArchiveStatus> {
    let ip = pod.status.as_ref()?.pod_ip.clone()?;
    let url = format!("http://{ip}:{}/status", crate::backup::archiver::STATUS_PORT);
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(2)).build().ok()?;
    let text = client.get(&url).send().await.ok()?.text().await.ok()?;
    serde_json::from_str(&text).ok()
}

/// How soon an archive that is not running yet is looked at again.
const ARCHIVER_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);
/// How often a running archiver's progress is copied into status.
const ARCHIVE_STATUS_PERIOD: std::time::Duration = std::time::Duration::from_secs(15);

/// What the archiver pod is made from: its whole spec (image, command, credential, TLS and
/// login mounts), so a changed destination, Secret or interval makes it again.
fn archiver_hash(pod: &Pod) -> String {
    use sha2::{Digest, Sha256};
    let text = serde_json::to_string(&pod.spec).unwrap_or_default();
    hex::encode(&Sha256::digest(text.as_bytes())[..8])
}

/// The archiver pod (`etcd-operator archive-follow`): a job pod that runs until it fails
/// (restarted in place), without a deadline.
fn archiver_pod(
    obj: &DynamicObject,
    target: &BackupTarget,
    image: &str,
    auth: Option<&str>,
    as_root: bool,
) -> Result<Pod, Error> {
    let flush = target.archive_flush_secs.unwrap_or(archiver_plan::DEFAULT_FLUSH_SECS);
    let run = PodRun {
        name: archiver_plan::pod_name(&obj.name_any()),
        subcommand: "archive-follow",
        args: vec![format!("--flush-interval-secs={flush}")],
        role: Some(archiver_plan::ROLE_ARCHIVER),
        deadline_secs: None,
        writes: true,
    };
    job_pod_for(obj, target, image, run, auth, as_root)
}

/// The Secret the backup pod logs in to etcd with: `authSecret`, else the root Secret of the
/// EtcdCluster `clusterName` names when it has `spec.auth` (read now: a cluster that cannot be
/// read gives none, and the backup pod says what etcd answered).
async fn auth_secret(ctx: &JobContext, ns: &str, spec: &EtcdBackupSpec) -> Option<String> {
    if !spec.auth_secret.is_empty() {
        return Some(spec.auth_secret.clone());
    }
    if spec.cluster_name.is_empty() {
        return None;
    }
    let api: kube::Api<etcd_operator_api::EtcdCluster> = kube::Api::namespaced(ctx.client.clone(), ns);
    let cluster = api.get_opt(&spec.cluster_name).await.ok().flatten()?;
    let policy = crate::auth::Policy::of(&spec.cluster_name, cluster.spec.auth.as_ref(), None).ok()?;
    policy.root_secret().map(str::to_string)
}

/// The claim a PVC destination names.
fn pvc_of(spec: &EtcdBackupSpec) -> Option<String> {
    let loc = crate::backup::location::Location::of(&spec.storage_type, &spec.source).ok()?;
    (loc.kind == crate::backup::location::Kind::Pvc).then_some(loc.bucket)
}

/// The backup pod for `target` (`etcd-operator backup-save`).
fn backup_pod(
    obj: &DynamicObject,
    target: &BackupTarget,
    image: &str,
    name: &str,
    auth: Option<&str>,
    as_root: bool,
) -> Result<Pod, Error> {
    let mut args = vec![format!("--timeout-secs={}", target.timeout_secs)];
    if target.interval.is_some() {
        args.push("--periodic".into());
        args.push(format!("--max-backups={}", target.max_backups));
        if let Some(secs) = target.retention_secs {
            args.push(format!("--retention-secs={secs}"));
        }
    }
    let run = PodRun {
        name: name.to_string(),
        subcommand: "backup-save",
        args,
        role: None,
        deadline_secs: Some(target.timeout_secs + POD_START_SLACK_SECS),
        writes: true,
    };
    job_pod_for(obj, target, image, run, auth, as_root)
}

/// How soon a drill pod that could not be created is tried again.
const DRILL_RETRY: std::time::Duration = std::time::Duration::from_secs(60);

/// The etcd a drill replays with: the version of the etcd that took the last backup (the
/// snapshot it restores), else the EtcdCluster's; the EtcdCluster's repository (a mirror),
/// else the default.
struct DrillTools {
    version: crate::version::Version,
    repository: String,
}

async fn drill_tools(
    ctx: &JobContext,
    ns: &str,
    spec: &EtcdBackupSpec,
    st: &EtcdBackupStatus,
) -> Result<DrillTools, String> {
    let cluster = if spec.cluster_name.is_empty() {
        None
    } else {
        let api: kube::Api<etcd_operator_api::EtcdCluster> = kube::Api::namespaced(ctx.client.clone(), ns);
        api.get_opt(&spec.cluster_name).await.ok().flatten()
    };
    let version = [st.etcd_version.as_str(), cluster.as_ref().map(|c| c.spec.version.as_str()).unwrap_or_default()]
        .into_iter()
        .find_map(|v| crate::version::Version::parse(v).ok())
        .or_else(|| crate::version::Version::parse(etcd_operator_api::cluster::DEFAULT_VERSION).ok());
    let repository = cluster
        .map(|c| c.spec.repository)
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| etcd_operator_api::cluster::DEFAULT_REPOSITORY.to_string());
    let version = version.ok_or("no etcd version to restore with")?;
    Ok(DrillTools { version, repository })
}

/// The drill pod (`etcd-operator restore-drill`): reads the series (a PVC mounted read-only)
/// and the live cluster (its client certificate and login mounted as the backup pods'), with
/// the etcd image's `etcd` and `etcdutl` copied onto its scratch volume by init containers.
fn drill_pod(
    obj: &DynamicObject,
    target: &BackupTarget,
    image: &str,
    start: &DrillStart,
    tools: &DrillTools,
    auth: Option<&str>,
    as_root: bool,
) -> Result<Pod, Error> {
    let run = PodRun {
        name: start.pod.clone(),
        subcommand: "restore-drill",
        args: vec![
            format!("--etcd-version={}", tools.version),
            format!("--work-dir={}", pods::REPLAY_WORK_DIR),
            format!("--timeout-secs={}", start.timeout_secs),
        ],
        role: Some(drill::ROLE_DRILL),
        deadline_secs: Some(start.deadline_secs),
        writes: false,
    };
    let mut pod = job_pod_for(obj, target, image, run, auth, as_root)?;
    let etcd_image = crate::validation::image_for(&tools.repository, &tools.version);
    pods::with_replay_tools(&mut pod, image, &etcd_image, tools.version.minor_line() >= (3, 5));
    Ok(pod)
}

/// What differs between an EtcdBackup's pods.
struct PodRun {
    name: String,
    subcommand: &'static str,
    /// Flags of the subcommand beyond destination, endpoints, owner, TLS and login.
    args: Vec<String>,
    /// `archiver_plan::ROLE_LABEL`'s value (backup pods carry none).
    role: Option<&'static str>,
    /// `None`: runs until it fails, restarted in place.
    deadline_secs: Option<i64>,
    /// It writes to the destination (a PVC is mounted read-only otherwise).
    writes: bool,
}

/// A pod of the EtcdBackup for `target`, owned by it: the operator's image running `run`, with
/// the destination's credentials, the client certificate and `auth` (the login Secret, if any)
/// mounted; `as_root`: to a PVC marked as root's.
fn job_pod_for(
    obj: &DynamicObject,
    target: &BackupTarget,
    image: &str,
    run: PodRun,
    auth: Option<&str>,
    as_root: bool,
) -> Result<Pod, Error> {
    let backup: EtcdBackup = serde_json::from_value(serde_json::to_value(obj)?)?;
    let owner = backup.controller_owner_ref(&()).expect("EtcdBackup from the API has a name and uid");
    let mut command = vec![crate::OPERATOR_NAME.to_string(), run.subcommand.into()];
    command.extend(pods::storage_args(&target.location, &backup.spec.source));
    command.push(format!("--endpoints={}", target.endpoints.join(",")));
    command.extend(run.args);
    command.push(format!("--owner-uid={}", owner.uid));
    command.extend(crate::backup::contract::ClientTlsArgs::of(&backup.spec.client_tls_secret).to_args());
    command.extend(crate::backup::contract::AuthArgs::of(auth).to_args());
    let mut labels = BTreeMap::from([(BACKUP_LABEL.to_string(), obj.name_any())]);
    if !backup.spec.cluster_name.is_empty() {
        labels.insert(BACKUP_OF_LABEL.to_string(), backup.spec.cluster_name.clone());
    }
    if let Some(role) = run.role {
        labels.insert(archiver_plan::ROLE_LABEL.to_string(), role.to_string());
    }
    let mut pod = pods::job_pod(JobPod {
        name: run.name,
        namespace: obj.namespace().unwrap_or_default(),
        labels,
        owner,
        image,
        command,
        loc: &target.location,
        source: &backup.spec.source,
        deadline_secs: run.deadline_secs.unwrap_or(0),
        writes: run.writes,
        as_root,
    });
    if run.deadline_secs.is_none()
        && let Some(spec) = pod.spec.as_mut()
    {
        spec.restart_policy = Some("Always".into());
        spec.active_deadline_seconds = None;
    }
    pods::mount_client_tls(&mut pod, &backup.spec.client_tls_secret);
    if let Some(secret) = auth {
        pods::mount_auth(&mut pod, secret);
    }
    Ok(pod)
}

/// Run the EtcdBackup controller until `shutdown` resolves.
pub async fn run(opts: Options, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let on_store = |store: kube::runtime::reflector::Store<DynamicObject>, ctx: &JobContext| {
        ctx.metrics.set_live_backups(Box::new(move || {
            store
                .state()
                .iter()
                .map(|b| crate::runtime::metrics::ClusterLabels {
                    namespace: b.namespace().unwrap_or_default(),
                    name: b.name_any(),
                })
                .collect()
        }));
    };
    jobs::run(opts, "etcdbackup", backup_ar(), BACKUP_LABEL, shutdown, on_store, reconcile).await;
}

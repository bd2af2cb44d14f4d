//! The EtcdRestore controller: verify the backup's checksum in a pod, then create the named
//! EtcdCluster with `spec.restore` set, so that the cluster controller starts every bootstrap
//! member from that same backup; report success once the cluster is up.
//!
//! Never destructive: an existing EtcdCluster of that name (one this restore did not create)
//! is not replaced; the restore waits, saying so, until it is gone. Nothing is created from a
//! backup whose checksum does not match, or that has no checksum.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_operator_api::backup::RestoreFrom;
use etcd_operator_api::restore::{EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus};
use etcd_operator_api::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus, SCOPE_ANNOTATION};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Reporter};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use super::controller::{
    Error, JobContext, Options, PodResult, create_pod, delete_pod, fresh, job_pod_watch, job_pods, patch_status,
    pod_result, publish,
};
use super::location::{BackupMeta, Location};
use super::pods::{self, JobPod, RESTORE_LABEL};
use super::verify_policy;
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
pub struct RestorePlan {
    pub location: Location,
    pub cluster: String,
}

pub fn plan(spec: &EtcdRestoreSpec) -> Result<RestorePlan, String> {
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
    Ok(RestorePlan { location, cluster })
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

fn restore_ar() -> ApiResource {
    ApiResource::erase::<EtcdRestore>(&())
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<JobContext>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ar = restore_ar();
    let Some(obj) = fresh(&ctx, &obj, &ar).await? else { return Ok(Action::await_change()) };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let prev: EtcdRestoreStatus =
        obj.data.get("status").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
    let generation = obj.metadata.generation.unwrap_or_default();
    if (prev.succeeded || prev.phase == PHASE_FAILED) && prev.observed_generation == generation {
        // Done, or refused: a new spec (or a new EtcdRestore) starts again.
        return Ok(Action::await_change());
    }
    let mut st = prev.clone();
    if st.observed_generation != generation {
        // A new spec: start over (a verification of the old spec does not count).
        st = EtcdRestoreStatus { conditions: prev.conditions.clone(), ..Default::default() };
        st.observed_generation = generation;
    }
    let ns = obj.namespace().unwrap_or_default();
    let spec: Result<EtcdRestoreSpec, String> = obj
        .data
        .get("spec")
        .cloned()
        .ok_or_else(|| "no spec".to_string())
        .and_then(|s| serde_json::from_value(s).map_err(|e| format!("spec cannot be read: {e}")));
    let named = pods::check_job_owner_name(&obj.name_any());
    let (spec, plan) = match named.and(spec).and_then(|s| plan(&s).map(|p| (s, p))) {
        Ok(v) => v,
        Err(why) => {
            return fail(&ctx, &obj, &ar, &prev, st, "InvalidSpec", format!("invalid spec, nothing created: {why}"))
                .await;
        }
    };
    let mut events: Vec<(EventType, &str, String)> = Vec::new();
    let clusters: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &ApiResource::erase::<EtcdCluster>(&()));
    let existing = clusters.get_opt(&plan.cluster).await?;
    let uid = obj.uid().unwrap_or_default();
    let mut requeue = Duration::from_secs(2);
    match existing {
        Some(c) if c.annotations().get(RESTORED_BY_ANNOTATION) == Some(&uid) => {
            // Ours: done when every member is a ready voter.
            let cs: EtcdClusterStatus =
                c.data.get("status").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
            let size = c.data.pointer("/spec/size").and_then(|v| v.as_i64()).unwrap_or_default();
            if st.sha256.is_empty() {
                // Created, but the status write after it was lost: the cluster names its backup.
                if let Some(sha) = c.data.pointer("/spec/restore/sha256").and_then(|v| v.as_str()) {
                    st.sha256 = sha.to_string();
                }
            }
            if size > 0 && cs.ready_members as i64 == size {
                st.succeeded = true;
                st.phase = PHASE_RESTORED.into();
                st.reason.clear();
                events.push((
                    EventType::Normal,
                    "Restored",
                    format!(
                        "EtcdCluster {} is up with {size} members restored from {}",
                        plan.cluster,
                        plan.location.url()
                    ),
                ));
            } else {
                st.phase = PHASE_RESTORING.into();
                st.reason =
                    format!("waiting for EtcdCluster {}: {}/{size} members ready", plan.cluster, cs.ready_members);
            }
        }
        Some(_) => {
            let why = format!(
                "EtcdCluster {} already exists and was not created by this restore: a restore never replaces a running cluster; delete it first (the restore proceeds once it is gone)",
                plan.cluster
            );
            st.phase = PHASE_WAITING.into();
            if st.reason != why {
                events.push((EventType::Warning, "ClusterExists", why.clone()));
            }
            st.reason = why;
            requeue = Duration::from_secs(10);
        }
        None if st.phase == PHASE_RESTORING || st.phase == PHASE_RESTORED => {
            st.phase = PHASE_FAILED.into();
            st.reason = format!("EtcdCluster {} was deleted while it was being restored", plan.cluster);
            events.push((EventType::Warning, "RestoreFailed", st.reason.clone()));
        }
        None => {
            // Verify first; create only from a verified backup.
            // Only this spec's verify pods count (one per attempt, `verify_policy`): one left from
            // an earlier generation checked another source (or the same one before a fix) and is
            // removed.
            let (name, generation_now) = (obj.name_any(), generation);
            let attempt_of = |p: &Arc<k8s_openapi::api::core::v1::Pod>| {
                verify_policy::attempt_of(&p.name_any(), &name, generation_now)
            };
            let (job, stale): (Vec<_>, Vec<_>) =
                job_pods(&ctx.pods, RESTORE_LABEL, &obj).into_iter().partition(|p| attempt_of(p).is_some());
            for p in &stale {
                delete_pod(&ctx, p).await;
            }
            let latest = job.iter().max_by_key(|p| attempt_of(p)).cloned();
            let verified = latest.as_ref().map(|p| (p.clone(), pod_result::<BackupMeta>(p)));
            match verified {
                None => {
                    let pod = verify_policy::pod_name(&name, generation, 0);
                    create_pod(&ctx, &verify_pod(&obj, &spec, &plan, &ctx.init_image, &pod, 0)?).await?;
                    st.phase = PHASE_VERIFYING.into();
                    st.reason = format!("verifying the checksum of {}", plan.location.url());
                    events.push((
                        EventType::Normal,
                        "VerifyStarted",
                        format!("pod {pod} is checking {}", plan.location.url()),
                    ));
                }
                Some((_, PodResult::Running)) => st.phase = PHASE_VERIFYING.into(),
                Some((pod, PodResult::Failed(why))) => {
                    let attempt = attempt_of(&pod).unwrap_or(0);
                    match verify_policy::after_failure(attempt, &why, finished_secs(&pod)) {
                        verify_policy::AfterFailure::Refuse(why) => {
                            let r = fail(
                                &ctx,
                                &obj,
                                &ar,
                                &prev,
                                st,
                                "BackupRejected",
                                format!("backup refused, nothing created: {why}"),
                            )
                            .await;
                            delete_pod(&ctx, &pod).await;
                            return r;
                        }
                        verify_policy::AfterFailure::GiveUp(why) => {
                            let r =
                                fail(&ctx, &obj, &ar, &prev, st, "BackupUnreadable", format!("nothing created: {why}"))
                                    .await;
                            delete_pod(&ctx, &pod).await;
                            return r;
                        }
                        verify_policy::AfterFailure::Retry { wait_secs, .. } if wait_secs > 0 => {
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
                        verify_policy::AfterFailure::Retry { attempt: next, .. } => {
                            delete_pod(&ctx, &pod).await;
                            let name = verify_policy::pod_name(&name, generation, next);
                            create_pod(&ctx, &verify_pod(&obj, &spec, &plan, &ctx.init_image, &name, next)?).await?;
                            st.phase = PHASE_VERIFYING.into();
                            st.reason = format!(
                                "verifying the checksum of {} (attempt {} of {}, {}s allowed)",
                                plan.location.url(),
                                next + 1,
                                verify_policy::VERIFY_ATTEMPTS,
                                verify_policy::deadline_secs(next)
                            );
                        }
                    }
                }
                Some((pod, PodResult::Succeeded(meta))) => {
                    st.sha256 = meta.sha256.clone();
                    st.size = meta.size;
                    st.etcd_version = meta.etcd_version.clone();
                    st.etcd_revision = meta.etcd_revision;
                    let cspec = match cluster_spec(&spec, &meta, &meta.sha256) {
                        Ok(s) => s,
                        Err(why) => {
                            let r = fail(&ctx, &obj, &ar, &prev, st, "InvalidSpec", why).await;
                            delete_pod(&ctx, &pod).await;
                            return r;
                        }
                    };
                    let mut annotations = BTreeMap::from([
                        (RESTORED_BY_ANNOTATION.to_string(), uid.clone()),
                        (RESTORED_FROM_ANNOTATION.to_string(), plan.location.url()),
                    ]);
                    if let Some(scope) = obj.annotations().get(SCOPE_ANNOTATION) {
                        annotations.insert(SCOPE_ANNOTATION.to_string(), scope.clone());
                    }
                    let mut cluster = EtcdCluster::new(&plan.cluster, cspec);
                    cluster.metadata.namespace = Some(ns.clone());
                    cluster.metadata.annotations = Some(annotations);
                    let typed: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
                    typed.create(&PostParams::default(), &cluster).await?;
                    st.phase = PHASE_RESTORING.into();
                    st.reason = format!("creating EtcdCluster {}", plan.cluster);
                    events.push((
                        EventType::Normal,
                        "BackupVerified",
                        format!(
                            "{} matches its checksum (sha256 {}, {} bytes, etcd {} revision {})",
                            plan.location.url(),
                            meta.sha256,
                            meta.size,
                            meta.etcd_version,
                            meta.etcd_revision
                        ),
                    ));
                    events.push((
                        EventType::Normal,
                        "ClusterCreated",
                        format!("EtcdCluster {} created; every member starts from this backup", plan.cluster),
                    ));
                    delete_pod(&ctx, &pod).await;
                    requeue = Duration::from_millis(500);
                }
            }
        }
    }
    for (type_, reason, note) in events {
        publish(&ctx, &obj, &ar, type_, reason, note).await;
    }
    if st != prev {
        patch_status(&ctx, &obj, &ar, &st).await?;
    }
    Ok(if st.succeeded || st.phase == PHASE_FAILED { Action::await_change() } else { Action::requeue(requeue) })
}

/// Record a failure (status + one Warning Event when it is news) and stop until the spec changes.
async fn fail(
    ctx: &JobContext,
    obj: &DynamicObject,
    ar: &ApiResource,
    prev: &EtcdRestoreStatus,
    mut st: EtcdRestoreStatus,
    reason: &str,
    why: String,
) -> Result<Action, Error> {
    st.succeeded = false;
    st.phase = PHASE_FAILED.into();
    st.reason = why;
    if st != *prev {
        publish(ctx, obj, ar, EventType::Warning, reason, st.reason.clone()).await;
        patch_status(ctx, obj, ar, &st).await?;
    }
    Ok(Action::await_change())
}

/// Seconds since the pod's container ended (0 if unknown).
fn finished_secs(p: &k8s_openapi::api::core::v1::Pod) -> i64 {
    let finished = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref()?.first()?.state.as_ref()?.terminated.as_ref()?.finished_at.clone());
    finished.map(|t| (k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second()).max(0)).unwrap_or(0)
}

fn verify_pod(
    obj: &DynamicObject,
    spec: &EtcdRestoreSpec,
    plan: &RestorePlan,
    image: &str,
    name: &str,
    attempt: u32,
) -> Result<k8s_openapi::api::core::v1::Pod, Error> {
    let restore: EtcdRestore = serde_json::from_value(serde_json::to_value(obj)?)?;
    let owner = restore.controller_owner_ref(&()).expect("EtcdRestore from the API has a name and uid");
    let mut command = vec![crate::OPERATOR_NAME.to_string(), "backup-verify".into()];
    command.extend(pods::storage_args(&plan.location, &spec.source));
    Ok(pods::job_pod(JobPod {
        name: name.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        labels: BTreeMap::from([(RESTORE_LABEL.to_string(), obj.name_any())]),
        owner,
        image,
        command,
        loc: &plan.location,
        source: &spec.source,
        deadline_secs: verify_policy::deadline_secs(attempt),
        writes: false,
    }))
}

fn error_policy(obj: Arc<DynamicObject>, err: &Error, _ctx: Arc<JobContext>) -> Action {
    tracing::warn!(restore = %obj.name_any(), error = %err, "restore reconcile failed; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

/// Run the EtcdRestore controller until `shutdown` resolves.
pub async fn run(opts: Options, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let (pods, pod_events) = job_pod_watch(&opts.client, &opts.scope, RESTORE_LABEL);
    let ar = restore_ar();
    let restores: Api<DynamicObject> = match &opts.scope.namespace {
        Some(ns) => Api::namespaced_with(opts.client.clone(), ns, &ar),
        None => Api::all_with(opts.client.clone(), &ar),
    };
    let reporter = Reporter { controller: crate::OPERATOR_NAME.into(), instance: opts.reporter_instance };
    let ctx = Arc::new(JobContext {
        recorder: crate::events::Recorder::new(opts.client.clone(), reporter),
        client: opts.client,
        scope: opts.scope,
        init_image: opts.init_image,
        pods: pods.clone(),
        metrics: opts.metrics,
        recorded: Default::default(),
    });
    let synced = pods.clone();
    Controller::new_with(restores, watcher::Config::default(), ar)
        .owns_stream_with(pod_events, ())
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx| {
                let synced = synced.clone();
                async move {
                    synced.wait_until_ready().await.ok();
                    let ar = kube::api::ApiResource::erase::<etcd_operator_api::EtcdRestore>(&());
                    let fut = reconcile(obj.clone(), ctx.clone());
                    crate::panic_guard::guard("etcdrestore", &ar, &obj, &ctx.recorder, &ctx.metrics, fut).await
                }
            },
            error_policy,
            ctx,
        )
        .for_each(|item| async move {
            if let Err(e) = item {
                tracing::debug!(error = %e, "restore controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
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
        assert!(plan(&s).unwrap_err().contains("etcdCluster.name is empty"));
        let s = spec(Some(EtcdClusterSpec { size: 9, version: "3.5.1".into(), ..Default::default() }));
        assert!(plan(&s).unwrap_err().contains("spec.size 9"));
        let mut s = spec(None);
        s.backup_storage_type = "GlusterFS".into();
        assert!(plan(&s).unwrap_err().contains("GlusterFS"));
        let mut s = spec(None);
        s.etcd_cluster.name = "Bad_Name".into();
        assert!(plan(&s).is_err());
    }
}

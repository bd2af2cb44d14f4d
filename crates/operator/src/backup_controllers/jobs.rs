//! What the EtcdBackup and EtcdRestore controllers share (I/O): the context, reading an object
//! fresh from the API and writing its status, Events, creating and deleting job pods, the
//! watched cache of job pods, and one controller runner for both. Objects are watched as
//! `DynamicObject` and their spec and status decoded here, per object: one malformed object
//! (a spec that does not decode) is that object's error, said in its status, and never stops the
//! watch for the others.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controller::WatchScope;
use crate::runtime::events::Recorder;

pub struct JobContext {
    pub client: Client,
    pub scope: WatchScope,
    pub recorder: Recorder,
    pub init_image: String,
    /// Pods carrying this controller's label.
    pub pods: Store<Pod>,
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
}

pub struct Options {
    pub client: Client,
    pub scope: WatchScope,
    pub init_image: String,
    pub reporter_instance: Option<String>,
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
}

/// The object's spec, or why it cannot be read.
pub fn spec_of<S: DeserializeOwned>(obj: &DynamicObject) -> Result<S, String> {
    obj.data
        .get("spec")
        .cloned()
        .ok_or_else(|| "no spec".to_string())
        .and_then(|s| serde_json::from_value(s).map_err(|e| format!("spec cannot be read: {e}")))
}

/// The object's status (default when absent or unreadable: it is rewritten whole).
pub fn status_of<S: DeserializeOwned + Default>(obj: &DynamicObject) -> S {
    obj.data.get("status").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default()
}

/// This object's job pods in the cache, oldest first.
pub fn job_pods(ctx: &JobContext, label: &str, obj: &DynamicObject) -> Vec<Arc<Pod>> {
    crate::backup::job_pods::owned(
        ctx.pods.state(),
        label,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
        &obj.uid().unwrap_or_default(),
    )
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

pub async fn delete_pod(ctx: &JobContext, namespace: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => tracing::warn!(pod = %name, error = %e, "could not delete a finished job pod"),
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

/// Whether the claim `name` is marked as root's (`volume_owner`: its job pods run as root); a
/// claim that does not exist is not (its pods wait for it, as non-root).
pub async fn volume_marked_root(ctx: &JobContext, namespace: &str, name: &str) -> Result<bool, Error> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), namespace);
    let pvc = api.get_metadata_opt(name).await?;
    Ok(crate::backup::volume_owner::marked_root(pvc.as_ref().and_then(|p| p.metadata.annotations.as_ref())))
}

/// Mark the claim `name` as root's, with the member volumes' mark (`volume_owner`).
pub async fn mark_root_volume(ctx: &JobContext, namespace: &str, name: &str) -> Result<(), Error> {
    let patch = serde_json::json!({"metadata": {"annotations": {
        crate::naming::DATA_OWNER_ANNOTATION: crate::naming::ROOT_DATA_OWNER,
    }}});
    Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The common end of a job reconcile, in the order that loses nothing: the new status (only when
/// it changed), then its Events, then the finished pods (a pod deleted before its result is in
/// status would lose it).
pub async fn write_back<S: Serialize + PartialEq>(
    ctx: &JobContext,
    obj: &DynamicObject,
    ar: &ApiResource,
    (old, new): (&S, &S),
    events: &[(EventType, &'static str, String)],
    delete_pods: &[String],
) -> Result<(), Error> {
    if new != old {
        patch_status(ctx, obj, ar, new).await?;
    }
    for (type_, reason, note) in events {
        publish(ctx, obj, ar, *type_, reason, note.clone()).await;
    }
    let ns = obj.namespace().unwrap_or_default();
    for pod in delete_pods {
        delete_pod(ctx, &ns, pod).await;
    }
    Ok(())
}

/// A watched, cached stream of the pods carrying `label`, for a job controller.
fn job_pod_watch(
    client: &Client,
    scope: &WatchScope,
    label: &str,
) -> (Store<Pod>, impl futures::Stream<Item = Result<Pod, watcher::Error>> + Send + 'static) {
    let (store, writer) = reflector::store::<Pod>();
    let events = watcher(scope.api::<Pod>(client), watcher::Config::default().labels(label))
        .default_backoff()
        .reflect(writer)
        .touched_objects();
    (store, events)
}

/// Run a job controller for the objects of `ar`, whose pods carry `label`, until `shutdown`.
/// `on_store` gets the objects' cache (for metrics of live objects). Each reconcile waits for
/// the pod cache's first full list (results are read from pods) and runs under the panic guard.
pub async fn run<R, Fut>(
    opts: Options,
    kind: &'static str,
    ar: ApiResource,
    label: &'static str,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    on_store: impl FnOnce(Store<DynamicObject>, &JobContext),
    reconcile: R,
) where
    R: Fn(Arc<DynamicObject>, Arc<JobContext>) -> Fut + Send + Sync + Clone + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let (pods, pod_events) = job_pod_watch(&opts.client, &opts.scope, label);
    let objects: Api<DynamicObject> = match &opts.scope.namespace {
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
    });
    let controller = Controller::new_with(objects, watcher::Config::default(), ar.clone());
    on_store(controller.store(), &ctx);
    let error_policy = move |obj: Arc<DynamicObject>, err: &Error, _: Arc<JobContext>| {
        tracing::warn!(kind, name = %obj.name_any(), error = %err, "reconcile failed; retrying in 5s");
        Action::requeue(Duration::from_secs(5))
    };
    controller
        .owns_stream_with(pod_events, ())
        .graceful_shutdown_on(shutdown)
        .run(
            move |obj, ctx| {
                let (pods, ar, reconcile) = (pods.clone(), ar.clone(), reconcile.clone());
                async move {
                    pods.wait_until_ready().await.ok();
                    let fut = reconcile(obj.clone(), ctx.clone());
                    crate::runtime::panic_guard::guard(kind, &ar, &obj, &ctx.recorder, &ctx.metrics, fut).await
                }
            },
            error_policy,
            ctx,
        )
        .for_each(|item| async move {
            if let Err(e) = item {
                tracing::debug!(kind, error = %e, "job controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use etcd_operator_api::backup::{EtcdBackupSpec, EtcdBackupStatus};
    use etcd_operator_api::restore::EtcdRestoreSpec;

    use super::*;

    fn object(kind: &str, body: serde_json::Value) -> DynamicObject {
        let mut o = serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": kind,
            "metadata": {"name": "b", "namespace": "ns"},
        });
        o.as_object_mut().unwrap().extend(body.as_object().unwrap().clone());
        serde_json::from_value(o).unwrap()
    }

    /// A spec the Rust type cannot read (what a CRD without this operator's schema, such as the
    /// CoreOS operator's, would let through; this one's apiserver schema refuses it) is that
    /// object's own refusal, with serde's reason, and its unreadable status is rewritten whole:
    /// nothing here can fail the watch of the others.
    #[test]
    fn a_spec_that_does_not_decode_is_the_objects_refusal() {
        let bad = object(
            "EtcdBackup",
            serde_json::json!({"spec": {"backupPolicy": {"maxBackups": "many"}}, "status": {"size": "big"}}),
        );
        let why = spec_of::<EtcdBackupSpec>(&bad).unwrap_err();
        assert!(why.starts_with("spec cannot be read: invalid type: string \"many\""), "{why}");
        assert_eq!(status_of::<EtcdBackupStatus>(&bad), EtcdBackupStatus::default());
        let none = object("EtcdRestore", serde_json::json!({}));
        assert_eq!(spec_of::<EtcdRestoreSpec>(&none).unwrap_err(), "no spec");
        let good = object("EtcdBackup", serde_json::json!({"spec": {"clusterName": "ex", "storageType": "S3"}}));
        assert_eq!(spec_of::<EtcdBackupSpec>(&good).unwrap().cluster_name, "ex");
    }
}

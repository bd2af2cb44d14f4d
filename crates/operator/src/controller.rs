//! Wiring of the EtcdCluster controller: watches and caches, the reconcile loop
//! (observe → plan → act → status), Events, requeue policy.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_operator_api::{EtcdCluster, EtcdClusterStatus, SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod, Service};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt, Resource, ResourceExt};

use crate::act::{self, Target};
use crate::events::Recorder;
use crate::observe::{self, Caches};
use crate::planner::{self, Step, WaitReason};
use crate::status;

/// How often a settled cluster's etcd health is checked. Pod failures reach the operator as
/// watch events at once (readiness flips within 15 s); this period catches what only etcd
/// knows (leader changes, alarms, db size) for about four gRPC calls per cluster.
pub const HEALTH_CHECK_PERIOD: Duration = Duration::from_secs(15);
/// Requeue while a step is in progress (learner catching up, member starting or upgrading, a
/// change etcd refused for now). Pod events wake the controller too; this catches what only
/// etcd shows.
const PROGRESS_PERIOD: Duration = Duration::from_millis(500);
/// How long to wait for the watch cache to show a pod this operator created or deleted.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Which EtcdClusters this operator instance manages.
#[derive(Clone, Debug)]
pub struct Scope {
    /// `Some(ns)`: only that namespace. `None`: every namespace (`-cluster-wide`).
    pub namespace: Option<String>,
}

impl Scope {
    /// CoreOS semantics (`Controller.managed`): a cluster-wide operator manages only objects
    /// annotated `etcd.database.coreos.com/scope: clusterwide`; a namespaced one only objects
    /// without that annotation, whatever its value. An object annotated with another value is
    /// managed by neither.
    pub fn manages<K: Resource>(&self, obj: &K) -> bool {
        match (obj.annotations().get(SCOPE_ANNOTATION), &self.namespace) {
            (None, Some(_)) => true,
            (Some(v), None) => v == SCOPE_CLUSTERWIDE,
            _ => false,
        }
    }

    pub(crate) fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

/// Pods this operator created or deleted and has not yet seen so in its cache. Planning waits
/// for them: a plan made from a cache that lags our own writes would repeat them.
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, (BTreeSet<String>, BTreeSet<String>, Instant)>>,
}

impl Expectations {
    fn expect(&self, key: &str, created: &[String], deleted: &[String]) {
        if created.is_empty() && deleted.is_empty() {
            return;
        }
        self.pending.lock().unwrap().insert(
            key.to_string(),
            (created.iter().cloned().collect(), deleted.iter().cloned().collect(), Instant::now()),
        );
    }

    /// True when the cache shows every expected create and delete (or they timed out).
    fn satisfied(&self, key: &str, pods: &[Arc<Pod>]) -> bool {
        let mut pending = self.pending.lock().unwrap();
        let Some((created, deleted, since)) = pending.get(key) else { return true };
        let present = |n: &String| pods.iter().any(|p| p.name_any() == *n && p.metadata.deletion_timestamp.is_none());
        let done = created.iter().all(present) && !deleted.iter().any(present);
        if done || since.elapsed() > EXPECTATION_TIMEOUT {
            if !done {
                tracing::warn!(cluster = key, "watch cache did not show our pod changes in time; planning anyway");
            }
            pending.remove(key);
            return true;
        }
        false
    }
}

/// Shared state of reconciles.
pub struct Context {
    pub client: Client,
    pub scope: Scope,
    pub caches: Caches,
    /// Per-member etcd clients kept between reconciles.
    pub etcd_clients: crate::etcd::MemberClients,
    pub recorder: Recorder,
    pub init_image: String,
    /// Cluster DNS domain for members of clusters that set none (may be empty).
    pub cluster_domain: String,
    pub expectations: Expectations,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Set once every watch cache holds its first full list.
    pub caches_synced: Arc<std::sync::atomic::AtomicBool>,
    /// Volume growths the API server refused (reported once).
    pub refused_volume_sizes: crate::volume_size::Refused,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Act(#[from] act::Error),
    #[error("serialization: {0}")]
    Json(#[from] serde_json::Error),
}

fn key_of<K: Resource>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Publish an Event about the EtcdCluster; `member` names the pod it concerns. The recorder folds
/// Events with the same reason, action and objects into one series (keeping the first note), so
/// naming the member keeps "added learner A" and "added learner B" apart.
async fn publish(
    ctx: &Context,
    reference: &ObjectReference,
    member: Option<&str>,
    type_: EventType,
    reason: &str,
    note: String,
    action: &str,
) {
    let secondary = member.map(|pod| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(pod.into()),
        namespace: reference.namespace.clone(),
        ..Default::default()
    });
    let ev = Event { type_, reason: reason.into(), note: Some(note), action: action.into(), secondary };
    if let Err(e) = ctx.recorder.publish(&ev, reference).await {
        tracing::warn!(error = %e, reason, "could not publish Event");
    }
}

async fn patch_status(ctx: &Context, obj: &DynamicObject, status: &EtcdClusterStatus) -> Result<(), Error> {
    let ar = ApiResource::erase::<EtcdCluster>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &obj.namespace().unwrap_or_default(), &ar);
    let body = serde_json::json!({ "status": status });
    api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&body)).await?;
    Ok(())
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
        .to_string()
}

/// An object whose spec cannot even be read as an EtcdCluster (stored before the schema, or
/// edited around it): say why on the object itself and leave its cluster alone.
async fn report_unreadable(obj: &DynamicObject, err: &serde_json::Error, ctx: &Context) -> Result<Action, Error> {
    let reference = obj.object_ref(&ApiResource::erase::<EtcdCluster>(&()));
    let prev: EtcdClusterStatus =
        obj.data.get("status").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
    let mut st = prev.clone();
    let msg = format!("spec cannot be read, nothing was changed: {err}");
    let c = etcd_operator_api::Condition {
        type_: status::SPEC_VALID.into(),
        status: "False".into(),
        reason: "InvalidSpec".into(),
        message: msg.clone(),
        ..Default::default()
    };
    etcd_operator_api::condition::upsert(&mut st.conditions, c, &now_rfc3339());
    if st != prev {
        publish(ctx, &reference, None, EventType::Warning, "InvalidSpec", msg, "Validate").await;
        patch_status(ctx, obj, &st).await?;
    }
    Ok(Action::await_change())
}

/// Keep the cluster's PodDisruptionBudget as `disruption_budget` says, beside the planned step:
/// a failure is reported and never holds up the step (healing must not wait for it).
async fn ensure_disruption_budget(
    ctx: &Context,
    cluster: &EtcdCluster,
    o: &crate::observed::Observed,
    reference: &ObjectReference,
) {
    let Some((ar, store)) = &ctx.caches.budgets else { return };
    let Some(want) = crate::disruption_budget::min_available(o) else { return };
    let key = reflector::ObjectRef::<DynamicObject>::new_with(&cluster.name_any(), ar.clone())
        .within(&cluster.namespace().unwrap_or_default());
    let have = store.get(&key).and_then(|b| crate::disruption_budget::min_available_of(&b));
    if have == Some(want) {
        return;
    }
    match crate::disruption_budget::apply(&ctx.client, cluster, ar, want).await {
        Ok(()) => tracing::info!(cluster = %key_of(cluster), min_available = want, "PodDisruptionBudget applied"),
        Err(e) => {
            let note =
                format!("PodDisruptionBudget {} ({}) could not be applied: {e}", cluster.name_any(), ar.api_version);
            tracing::warn!(cluster = %key_of(cluster), "{note}");
            publish(ctx, reference, None, EventType::Warning, "DisruptionBudgetFailed", note, "DisruptionBudget").await;
        }
    }
}

/// Raise member PVCs' storage requests to the spec's (`volume_size`), beside the planned step; a
/// refusal is reported once per PVC and size and never holds anything up.
async fn grow_volumes(
    ctx: &Context,
    cluster: &EtcdCluster,
    o: &crate::observed::Observed,
    reference: &ObjectReference,
) {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for (pvc, size) in crate::volume_size::to_grow(o) {
        let key = (format!("{ns}/{pvc}"), size.clone());
        if ctx.refused_volume_sizes.contains(&key) {
            continue;
        }
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": size}}}});
        match api.patch(&pvc, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                let note = format!("volume {pvc} asked to grow to {size} (spec.pod.persistentVolumeClaimSpec)");
                tracing::info!(cluster = %key_of(cluster), "{note}");
                publish(ctx, reference, None, EventType::Normal, "VolumeExpansionRequested", note, "GrowVolume").await;
            }
            Err(e) => {
                let why = match &e {
                    kube::Error::Api(s) => s.message.clone(),
                    other => other.to_string(),
                };
                let class = ctx
                    .caches
                    .pvcs
                    .state()
                    .iter()
                    .find(|v| v.name_any() == pvc && v.namespace().as_deref() == Some(ns.as_str()))
                    .and_then(|v| v.spec.as_ref()?.storage_class_name.clone())
                    .unwrap_or_else(|| "(default)".into());
                let note = format!(
                    "volume {pvc} cannot grow to {size}: {why}. Its StorageClass {class} must allow volume expansion (allowVolumeExpansion: true) and its provisioner support it; the member keeps its current volume, new members get {size}"
                );
                tracing::warn!(cluster = %key_of(cluster), "{note}");
                publish(ctx, reference, None, EventType::Warning, "VolumeExpansionRefused", note, "GrowVolume").await;
                ctx.refused_volume_sizes.insert(key);
            }
        }
    }
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ar = ApiResource::erase::<EtcdCluster>(&());
    let fut = reconcile_one(obj.clone(), ctx.clone());
    crate::panic_guard::guard("etcdcluster", &ar, &obj, &ctx.recorder, &ctx.metrics, fut).await
}

async fn reconcile_one(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) || obj.metadata.deletion_timestamp.is_some() {
        // Deletion: owner references let the garbage collector remove pods, Services, PVCs.
        return Ok(Action::await_change());
    }
    let cluster: EtcdCluster = match serde_json::from_value(serde_json::to_value(obj.as_ref())?) {
        Ok(c) => c,
        Err(e) => return report_unreadable(&obj, &e, &ctx).await,
    };
    let key = key_of(&cluster);
    // Plans read the caches: none may run before every cache holds its first full list, or an
    // empty pod cache would look like a cluster with no members.
    if !ctx.caches_synced.load(std::sync::atomic::Ordering::Acquire) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    if !ctx.expectations.satisfied(&key, &ctx.caches.pods.state()) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let started = Instant::now();
    let (observed, endpoints) =
        observe::observe(&ctx.client, &cluster, &ctx.caches, &ctx.etcd_clients, &ctx.cluster_domain).await;
    let step = planner::plan(&observed);
    let reference = cluster.object_ref(&());
    tracing::debug!(cluster = %key, ?step, "planned");

    // Durable marks first (cluster formed, last valid spec, quorum-loss clock, recovery done;
    // pod labels the Services select on), so that the step below acts on what is recorded.
    let spec_json = serde_json::to_string(&cluster.spec)?;
    let marks = crate::marks::cluster_annotations(&observed, cluster.annotations(), &spec_json, &now_rfc3339());
    let unlabelled = crate::marks::pods_to_label(&observed);
    if let Err(e) = act::record_marks(&ctx.client, &cluster, &marks, &unlabelled).await {
        // Nothing is acted on without them: a stale mark must not drive the step.
        tracing::warn!(cluster = %key, error = %e, "could not record marks; retrying");
        return Ok(Action::requeue(PROGRESS_PERIOD));
    }
    ensure_disruption_budget(&ctx, &cluster, &observed, &reference).await;
    grow_volumes(&ctx, &cluster, &observed, &reference).await;
    let target = Target {
        client: &ctx.client,
        cluster: &cluster,
        observed: &observed,
        endpoints: &endpoints,
        init_image: &ctx.init_image,
    };
    let outcome = act::execute(&target, &step).await;
    match &outcome {
        Ok(Some(done)) => {
            tracing::info!(cluster = %key, reason = done.reason, "{}", done.note);
            ctx.expectations.expect(&key, &done.created, &done.deleted);
            let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
            for (member, reclaimed) in &done.defragmented {
                ctx.metrics.record_defrag(&ns, &name, member, *reclaimed);
            }
            if done.alarm_recovered {
                ctx.metrics.record_alarm_recovery(&ns, &name);
            }
            let type_ = if done.is_warning() { EventType::Warning } else { EventType::Normal };
            publish(&ctx, &reference, step.member(), type_, done.reason, done.note.clone(), done.reason).await;
        }
        Ok(None) => {}
        Err(e) if e.is_transient() => {
            // etcd refuses membership changes for a few seconds after one (its peers must have
            // been connected for 5 s): expected, retried shortly, not worth an Event.
            tracing::info!(cluster = %key, error = %e, step = step.name(), "step refused for now; retrying");
        }
        Err(e) => {
            tracing::warn!(cluster = %key, error = %e, ?step, "step failed");
            let note = format!("{}: {e}", step.name());
            publish(&ctx, &reference, step.member(), EventType::Warning, "StepFailed", note, step.name()).await;
        }
    }

    let prev = cluster.status.clone().unwrap_or_default();
    let new = status::compute(&observed, &step, &prev, cluster.metadata.generation, &now_rfc3339());
    for c in status::changed(&prev.conditions, &new.conditions) {
        let type_ = if status::is_warning(c) { EventType::Warning } else { EventType::Normal };
        let note = if c.message.is_empty() { format!("{} is {}", c.type_, c.status) } else { c.message.clone() };
        publish(&ctx, &reference, None, type_, &c.reason, note, &c.type_).await;
    }
    ctx.metrics.observe_cluster(&observed, &new);
    if let Some(e) = &observed.etcd {
        use crate::observed::AlarmKind;
        let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
        ctx.metrics.set_alarms(&ns, &name, e.has_alarm(AlarmKind::NoSpace), e.has_alarm(AlarmKind::Corrupt));
    }
    ctx.metrics.observe_step(&observed, &step);
    ctx.metrics.reconciled("etcdcluster", started.elapsed(), outcome.is_err());
    if new != prev {
        patch_status(&ctx, &obj, &new).await?;
    }
    tracing::debug!(cluster = %key, elapsed_ms = started.elapsed().as_millis() as u64, "reconciled");
    if outcome.is_err() {
        // Reported above; plan again soon from a fresh observation.
        return Ok(Action::requeue(PROGRESS_PERIOD));
    }
    Ok(match &step {
        Step::Wait(w) => match w.reason {
            WaitReason::Stable => Action::requeue(HEALTH_CHECK_PERIOD),
            WaitReason::InvalidSpec | WaitReason::Paused | WaitReason::DataLost => {
                Action::requeue(Duration::from_secs(60))
            }
            WaitReason::NoQuorum
            | WaitReason::MemberFailing
            | WaitReason::WouldLoseQuorum
            | WaitReason::UpgradeFailed
            | WaitReason::UpgradeRefused => Action::requeue(Duration::from_secs(5)),
            // Writes are refused: look again every second for the delete that frees space.
            WaitReason::NoSpace => Action::requeue(Duration::from_secs(1)),
            WaitReason::Corrupt => Action::requeue(Duration::from_secs(30)),
            _ => Action::requeue(PROGRESS_PERIOD),
        },
        _ => Action::requeue(Duration::from_millis(500)),
    })
}

fn error_policy(obj: Arc<DynamicObject>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(cluster = %key_of(obj.as_ref()), error = %err, "reconcile failed; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

/// Options of the controller that come from flags.
pub struct Options {
    pub scope: Scope,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Set once the watch caches are synced (read by `/readyz`).
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    pub init_image: String,
    pub cluster_domain: String,
    pub reporter_instance: Option<String>,
}

/// Run the controller until `shutdown` resolves.
pub async fn run(client: Client, opts: Options, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
    let scope = opts.scope.clone();
    // kube wants a Sync shutdown future; relay the caller's through a oneshot channel.
    let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        shutdown.await;
        let _ = shutdown_tx.send(());
    });
    // Everything the operator creates carries app=etcd and etcd_cluster=<name>.
    let children = watcher::Config::default().labels("app=etcd,etcd_cluster");
    let (pods, pods_w) = reflector::store::<Pod>();
    let (services, services_w) = reflector::store::<Service>();
    let (pvcs, pvcs_w) = reflector::store::<PersistentVolumeClaim>();
    let pod_events =
        watcher(scope.api::<Pod>(&client), children.clone()).default_backoff().reflect(pods_w).touched_objects();
    let svc_events = watcher(scope.api::<Service>(&client), children.clone())
        .default_backoff()
        .reflect(services_w)
        .touched_objects();
    let pvc_events = watcher(scope.api::<PersistentVolumeClaim>(&client), children.clone())
        .default_backoff()
        .reflect(pvcs_w)
        .touched_objects();
    // PodDisruptionBudgets in whichever policy version the server serves (discovery).
    let budget_api = crate::disruption_budget::discover(&client).await;
    match &budget_api {
        Some(ar) => tracing::info!(api_version = %ar.api_version, "PodDisruptionBudgets: one per cluster"),
        None => tracing::warn!(
            "the API server serves no PodDisruptionBudget API (policy/v1 or v1beta1): clusters run without one, and a drain may evict several members at once"
        ),
    }
    let budgets = budget_api.map(|ar| {
        let w = reflector::store::Writer::<DynamicObject>::new(ar.clone());
        let store = w.as_reader();
        let api: Api<DynamicObject> = match &scope.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let events = watcher(api, children.clone()).default_backoff().reflect(w).touched_objects();
        (ar, store, events)
    });

    let ar = ApiResource::erase::<EtcdCluster>(&());
    let clusters: Api<DynamicObject> = match &scope.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    let reporter = Reporter { controller: crate::OPERATOR_NAME.into(), instance: opts.reporter_instance.clone() };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        scope,
        caches: Caches {
            pods: pods.clone(),
            services: services.clone(),
            pvcs: pvcs.clone(),
            budgets: budgets.as_ref().map(|(ar, store, _)| (ar.clone(), store.clone())),
        },
        etcd_clients: Default::default(),
        init_image: opts.init_image,
        cluster_domain: opts.cluster_domain,
        expectations: Expectations::default(),
        caches_synced: opts.ready.clone(),
        metrics: opts.metrics.clone(),
        refused_volume_sizes: Default::default(),
    });
    tracing::info!(crd = EtcdCluster::crd_name(), "watching EtcdClusters");
    let controller = Controller::new_with(clusters, watcher::Config::default(), ar.clone());
    let store = controller.store();
    ctx.metrics.set_live_clusters(Box::new(move || {
        store
            .state()
            .iter()
            .map(|c| crate::metrics::ClusterLabels { namespace: c.namespace().unwrap_or_default(), name: c.name_any() })
            .collect()
    }));
    let controller =
        controller.owns_stream_with(pod_events, ()).owns_stream_with(svc_events, ()).owns_stream_with(pvc_events, ());
    let budget_store = budgets.as_ref().map(|(_, store, _)| store.clone());
    let controller = match budgets {
        Some((ar, _, events)) => controller.owns_stream_with(events, ar),
        None => controller,
    };
    let controller = controller.graceful_shutdown_on(async move {
        let _ = shutdown_rx.await;
    });
    let synced_ctx = ctx.clone();
    tokio::spawn(async move {
        let _ = tokio::join!(pods.wait_until_ready(), services.wait_until_ready(), pvcs.wait_until_ready());
        if let Some(b) = budget_store {
            let _ = b.wait_until_ready().await;
        }
        synced_ctx.caches_synced.store(true, std::sync::atomic::Ordering::Release);
        tracing::info!("watch caches synced");
    });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|item| async move {
            if let Err(e) = item {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::EtcdClusterSpec;

    fn cluster(annotated: bool) -> EtcdCluster {
        cluster_with_scope(annotated.then_some(SCOPE_CLUSTERWIDE))
    }

    fn cluster_with_scope(scope: Option<&str>) -> EtcdCluster {
        let mut c = EtcdCluster::new("a", EtcdClusterSpec::default());
        if let Some(v) = scope {
            c.annotations_mut().insert(SCOPE_ANNOTATION.into(), v.into());
        }
        c
    }

    #[test]
    fn namespaced_operator_skips_clusterwide_objects() {
        let s = Scope { namespace: Some("ns".into()) };
        assert!(s.manages(&cluster(false)));
        assert!(!s.manages(&cluster(true)));
    }

    #[test]
    fn clusterwide_operator_takes_only_annotated_objects() {
        let s = Scope { namespace: None };
        assert!(!s.manages(&cluster(false)));
        assert!(s.manages(&cluster(true)));
    }

    /// As CoreOS: the annotation with any other value (a typo, an empty string) takes the object
    /// away from the namespaced operator without giving it to a cluster-wide one.
    #[test]
    fn a_scope_annotation_with_another_value_is_managed_by_neither() {
        for v in ["", "namespaced", "ClusterWide"] {
            let c = cluster_with_scope(Some(v));
            assert!(!Scope { namespace: Some("ns".into()) }.manages(&c), "{v:?}");
            assert!(!Scope { namespace: None }.manages(&c), "{v:?}");
        }
    }

    #[test]
    fn expectations_hold_planning_until_the_cache_shows_our_writes() {
        let e = Expectations::default();
        e.expect("ns/a", &["a-1".into()], &[]);
        assert!(!e.satisfied("ns/a", &[]));
        let mut p = Pod::default();
        p.metadata.name = Some("a-1".into());
        assert!(e.satisfied("ns/a", &[Arc::new(p)]));
        assert!(e.satisfied("ns/a", &[]), "cleared once satisfied");
    }
}

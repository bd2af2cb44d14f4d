//! Wiring of the EtcdCluster controller: watches and caches, the shared reconcile context,
//! Events. The reconcile itself is in `reconcile`; `scope` says which objects are ours,
//! `expectations` holds planning until the cache shows our writes, `upkeep` keeps the
//! PodDisruptionBudget, the NetworkPolicy and volume sizes. I/O: Kubernetes API.

mod certificates;
mod expectations;
mod reconcile;
mod scope;
mod upkeep;

use std::sync::Arc;

use etcd_operator_api::EtcdCluster;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Event, EventType, Reporter};
use kube::runtime::reflector;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, CustomResourceExt, Resource, ResourceExt};

pub use expectations::Expectations;
pub use scope::WatchScope;

use crate::act;
use crate::observe::Caches;
use crate::observe::client_endpoints::SliceClock;
use crate::runtime::events::Recorder;
use reconcile::{error_policy, reconcile};

pub use crate::decide::{HEALTH_CHECK_PERIOD, PROGRESS_PERIOD};

/// Shared state of reconciles.
pub struct Context {
    pub client: Client,
    pub scope: WatchScope,
    pub caches: Caches,
    /// Per-member etcd clients kept between reconciles.
    pub etcd_clients: crate::etcd::MemberClients,
    pub recorder: Recorder,
    pub init_image: String,
    /// Cluster DNS domain for members of clusters that set none (may be empty).
    pub cluster_domain: String,
    pub expectations: Expectations,
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
    /// Set once every watch cache holds its first full list.
    pub caches_synced: Arc<std::sync::atomic::AtomicBool>,
    /// Volume growths the API server refused (reported once).
    pub refused_volume_sizes: crate::volume_size::Refused,
    /// Namespace of the operator's own pods; `None` when it runs as a process outside a pod.
    pub operator_namespace: Option<String>,
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

/// Options of the controller that come from flags.
pub struct Options {
    pub scope: WatchScope,
    pub metrics: Arc<crate::runtime::metrics::Metrics>,
    /// Set once the watch caches are synced (read by `/readyz`).
    pub ready: Arc<std::sync::atomic::AtomicBool>,
    pub init_image: String,
    pub cluster_domain: String,
    pub reporter_instance: Option<String>,
    /// Namespace of the operator's own pods (NetworkPolicies admit them); `None` outside a pod.
    pub operator_namespace: Option<String>,
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
    let (policies, policies_w) = reflector::store::<NetworkPolicy>();
    let policy_events = watcher(scope.api::<NetworkPolicy>(&client), children.clone())
        .default_backoff()
        .reflect(policies_w)
        .touched_objects();
    if opts.operator_namespace.is_none() {
        tracing::info!(
            "the operator runs outside a pod: cluster NetworkPolicies cannot name it; it reaches members from a node of the cluster (always allowed) or through spec.networkPolicy.clients (ipBlock)"
        );
    }
    // The EndpointSlices of the clusters' Services (they carry their Service's labels): a
    // drained member leaves once the client Service no longer lists it (`observe::
    // client_endpoints`). discovery.k8s.io/v1 only; without it a drain lasts a fixed time.
    let slices = if crate::observe::client_endpoints::served(&client).await {
        let clock = SliceClock::default();
        let noted = clock.clone();
        // The clock is the cache: it keeps what each slice lists and when a pod left.
        let events = watcher(scope.api::<EndpointSlice>(&client), children.clone())
            .default_backoff()
            .inspect(move |e| match e {
                Ok(e) => noted.note(e),
                Err(e) => noted.failed(e),
            })
            .touched_objects();
        tracing::info!("EndpointSlices: a drain ends once the client Service no longer lists the member");
        Some((clock, events))
    } else {
        tracing::warn!(
            "the API server serves no discovery.k8s.io/v1 EndpointSlices: a drained member leaves after a fixed {} s, whether or not the client Service still lists it",
            crate::planner::DRAIN_SECS
        );
        None
    };
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
            network_policies: policies.clone(),
            endpoint_slices: slices.as_ref().map(|(clock, _)| clock.clone()),
        },
        etcd_clients: Default::default(),
        init_image: opts.init_image,
        cluster_domain: opts.cluster_domain,
        expectations: Expectations::default(),
        caches_synced: opts.ready.clone(),
        metrics: opts.metrics.clone(),
        refused_volume_sizes: Default::default(),
        operator_namespace: opts.operator_namespace,
    });
    tracing::info!(crd = EtcdCluster::crd_name(), "watching EtcdClusters");
    let controller = Controller::new_with(clusters, watcher::Config::default(), ar.clone());
    let store = controller.store();
    ctx.metrics.set_live_clusters(Box::new(move || {
        store
            .state()
            .iter()
            .map(|c| crate::runtime::metrics::ClusterLabels {
                namespace: c.namespace().unwrap_or_default(),
                name: c.name_any(),
            })
            .collect()
    }));
    let controller = controller
        .owns_stream_with(pod_events, ())
        .owns_stream_with(svc_events, ())
        .owns_stream_with(pvc_events, ())
        .owns_stream_with(policy_events, ());
    let controller = match slices {
        // Only the client Service's slices matter; they name their cluster in its label.
        Some((_, events)) => controller.watches_stream_with(
            events,
            move |s: EndpointSlice| {
                let cluster = s.labels().get(crate::naming::CLUSTER_LABEL)?;
                let service = s.labels().get(crate::observe::client_endpoints::SERVICE_NAME_LABEL)?;
                (*service == crate::naming::client_service(cluster)).then(|| {
                    reflector::ObjectRef::new_with(cluster, ar.clone()).within(&s.namespace().unwrap_or_default())
                })
            },
            (),
        ),
        None => controller,
    };
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
        let _ = tokio::join!(
            pods.wait_until_ready(),
            services.wait_until_ready(),
            pvcs.wait_until_ready(),
            policies.wait_until_ready()
        );
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

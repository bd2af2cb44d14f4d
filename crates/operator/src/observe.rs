//! Observation: gathers the Kubernetes objects of one EtcdCluster (from the controller's
//! watch caches, no extra LIST calls) and etcd's own view (from the members) into [`Observed`].

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, Service};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use rand::Rng;

use crate::etcd;
use crate::naming::{
    self, BOOTSTRAP_ANNOTATION, CLIENT_PORT, CLUSTER_LABEL, VERSION_ANNOTATION, VERSION_CHANGED_ANNOTATION,
};
use crate::observed::{Observed, PodState};
use crate::validation::validate;

/// The watch caches observation reads from.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub pvcs: Store<PersistentVolumeClaim>,
}

/// Waiting reasons that mean the container will not run without a change.
const STUCK_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

fn owned_by<K: kube::Resource>(obj: &K, cluster: &EtcdCluster) -> bool {
    let uid = cluster.metadata.uid.as_deref();
    obj.meta().namespace == cluster.metadata.namespace
        && obj.labels().get(CLUSTER_LABEL) == cluster.metadata.name.as_ref()
        && obj.owner_references().iter().any(|o| Some(o.uid.as_str()) == uid)
}

fn problem_of(statuses: &[ContainerStatus]) -> Option<(String, String)> {
    statuses.iter().find_map(|s| {
        let w = s.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.clone()?;
        STUCK_REASONS
            .contains(&reason.as_str())
            .then(|| (reason, format!("container {}: {}", s.name, w.message.clone().unwrap_or_default())))
    })
}

/// Kubernetes' view of a member pod, in planner terms.
pub fn pod_state(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> PodState {
    let status = p.status.clone().unwrap_or_default();
    let ready =
        status.conditions.as_ref().is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let containers = status.container_statuses.clone().unwrap_or_default();
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let etcd_container = p.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == "etcd"));
    PodState {
        name: p.name_any(),
        ip: status.pod_ip.clone().filter(|ip| !ip.is_empty()),
        phase: status.phase.clone().unwrap_or_else(|| "Pending".into()),
        ready,
        deleting: p.metadata.deletion_timestamp.is_some(),
        version: p.annotations().get(VERSION_ANNOTATION).cloned().unwrap_or_default(),
        version_age_secs: p
            .annotations()
            .get(VERSION_CHANGED_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| (now.as_second() - t.as_second()).max(0)),
        image: etcd_container.and_then(|c| c.image.clone()).unwrap_or_default(),
        problem: problem_of(&inits).or_else(|| problem_of(&containers)),
        age_secs: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| (now.as_second() - t.0.as_second()).max(0))
            .unwrap_or(0),
        bootstrap: p.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        uses_pvc: p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| v.persistent_volume_claim.is_some())),
    }
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..naming::SUFFIX_LEN).map(|_| CHARS[rng.random_range(0..CHARS.len())] as char).collect()
}

/// Observe one cluster. etcd is only contacted when the spec is valid and pods have addresses.
/// `cluster_domain` is the operator's default for clusters whose spec names none.
pub async fn observe(
    cluster: &EtcdCluster,
    caches: &Caches,
    clients: &etcd::MemberClients,
    cluster_domain: &str,
) -> (Observed, etcd::Endpoints) {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let now = k8s_openapi::jiff::Timestamp::now();
    let pods: BTreeMap<String, PodState> = caches
        .pods
        .state()
        .iter()
        .filter(|p| owned_by(p.as_ref(), cluster))
        .map(|p| (p.name_any(), pod_state(p, now)))
        .collect();
    let services: Vec<String> =
        caches.services.state().iter().filter(|s| owned_by(s.as_ref(), cluster)).map(|s| s.name_any()).collect();
    let pvcs = caches.pvcs.state().iter().filter(|s| owned_by(s.as_ref(), cluster)).map(|s| s.name_any()).collect();
    let status = cluster.status.clone().unwrap_or_default();
    let endpoints: etcd::Endpoints = pods
        .values()
        // A terminating or ended pod's etcd is going away: not worth a connection timeout.
        .filter(|p| !p.is_dead() && !p.deleting)
        .filter_map(|p| p.ip.as_ref().map(|ip| (p.name.clone(), format!("http://{ip}:{CLIENT_PORT}"))))
        .collect();
    let desired = validate(&name, &cluster.spec).map(|mut d| {
        if d.pod.cluster_domain.is_empty() {
            d.pod.cluster_domain = cluster_domain.to_string();
        }
        d
    });
    let (etcd, etcd_error) = if desired.is_err() || endpoints.is_empty() {
        (None, None)
    } else {
        let recorded_id = u64::from_str_radix(&status.cluster_id, 16).ok().filter(|id| *id != 0);
        match etcd::observe(clients, &endpoints, recorded_id).await {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        }
    };
    let o = Observed {
        services_ready: services.contains(&name) && services.contains(&naming::client_service(&name)),
        name,
        namespace,
        desired,
        paused: cluster.spec.paused,
        pods,
        pvcs,
        etcd,
        etcd_error,
        ever_bootstrapped: !status.cluster_id.is_empty(),
        recorded_version: (!status.current_version.is_empty()).then_some(status.current_version),
        new_member_suffix: random_suffix(),
    };
    (o, endpoints)
}

//! Observation: gathers the Kubernetes objects of one EtcdCluster (from the controller's
//! watch caches, no extra LIST calls) and etcd's own view (from the members) into [`Observed`].
//!
//! Here: `observe`, which puts it together. [`pods`]: a member pod in planner terms;
//! [`volumes`]: a member PVC; [`desired`]: the spec to plan from (this one, or the last valid one)
//! and the TLS stage; [`backups`]: an EtcdBackup's newest backup, a running backup pod;
//! [`tls_auto`]: the Secrets of `spec.TLS.auto`; etcd's own view comes from `etcd::observe`.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use rand::Rng;

use crate::etcd;
use crate::naming::{
    self, CLIENT_PORT, CLUSTER_ID_ANNOTATION, CLUSTER_LABEL, QUORUM_LOST_AT_ANNOTATION, RECOVERY_ANNOTATION,
};
use crate::observed::{EtcdState, Observed, PodState, PvcState};
use crate::tls::transition::PodTls;
use crate::validation::QuorumLossPolicy;

pub mod auth_secrets;
mod backups;
pub mod client_endpoints;
mod desired;
mod nodes;
mod pods;
pub use pods::is_ready;
mod tls;
pub mod tls_auto;
pub mod tls_probe;
mod volumes;

pub use pods::{UNSCHEDULABLE_SECS, pod_state};
pub use volumes::pvc_state;

/// The watch caches observation reads from.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub pvcs: Store<PersistentVolumeClaim>,
    /// PodDisruptionBudgets, in the policy version the server serves (none: no budgets).
    pub budgets: Option<(kube::api::ApiResource, Store<kube::api::DynamicObject>)>,
    /// The clusters' NetworkPolicies (`network_policy`).
    pub network_policies: Store<k8s_openapi::api::networking::v1::NetworkPolicy>,
    /// What the clusters' Services' EndpointSlices list, and since when pods are no longer
    /// listed (none: the server serves no `discovery.k8s.io/v1`).
    pub endpoint_slices: Option<client_endpoints::SliceClock>,
}

fn owned_by<K: kube::Resource>(obj: &K, cluster: &EtcdCluster) -> bool {
    let uid = cluster.metadata.uid.as_deref();
    obj.meta().namespace == cluster.metadata.namespace
        && obj.labels().get(CLUSTER_LABEL) == cluster.metadata.name.as_ref()
        && obj.owner_references().iter().any(|o| Some(o.uid.as_str()) == uid)
}

fn random_suffix() -> String {
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..naming::SUFFIX_LEN).map(|_| CHARS[rng.random_range(0..CHARS.len())] as char).collect()
}

/// Observe one cluster. etcd is only contacted when the spec is valid and pods have addresses.
/// `cluster_domain` is the operator's default for clusters whose spec names none.
pub async fn observe(
    client: &kube::Client,
    cluster: &EtcdCluster,
    caches: &Caches,
    clients: &etcd::MemberClients,
    cluster_domain: &str,
    operator_namespace: Option<&str>,
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
    // A Service counts once it selects on the cluster's UID, and the client Service on serving
    // members only (older ones are updated).
    let client_service = naming::client_service(&cluster.name_any());
    let services: Vec<String> = caches
        .services
        .state()
        .iter()
        .filter(|s| owned_by(s.as_ref(), cluster))
        .filter(|s| {
            let sel = s.spec.as_ref().and_then(|sp| sp.selector.as_ref());
            sel.and_then(|sel| sel.get(naming::CLUSTER_UID_LABEL)) == cluster.metadata.uid.as_ref()
                && (s.name_any() != client_service
                    || sel.and_then(|sel| sel.get(naming::SERVING_LABEL)).map(String::as_str) == Some("true"))
        })
        .map(|s| s.name_any())
        .collect();
    // Retired claims (their data check refused them) are kept apart: never restarted on.
    let (pvcs, retired_pvcs): (BTreeMap<String, PvcState>, BTreeMap<String, PvcState>) = caches
        .pvcs
        .state()
        .iter()
        .filter(|s| owned_by(s.as_ref(), cluster))
        .filter_map(|v| pvc_state(v))
        .map(|v| (v.member.clone(), v))
        .partition(|(_, v)| v.retired.is_none());
    let status = cluster.status.clone().unwrap_or_default();
    let annotations = cluster.annotations();
    let record =
        |k: &str| annotations.get(k).and_then(|j| serde_json::from_str::<crate::observed::RecoveryRecord>(j).ok());
    let recovery_record = record(RECOVERY_ANNOTATION);
    let last_recovery = record(naming::LAST_RECOVERY_ANNOTATION);
    // During a recovery the new first member is the cluster: only it is asked, whatever cluster
    // ID it has. Otherwise answers from another cluster (a reused pod IP) are ignored.
    let seeded = recovery_record.as_ref().filter(|r| pods.contains_key(&r.member)).map(|r| r.member.clone());
    // A status that shows the cluster ran (CoreOS' included: it recorded no cluster ID) counts.
    // So does a member pod seen Ready while the operator could not reach etcd (`marks`).
    let id_recorded = annotations.contains_key(CLUSTER_ID_ANNOTATION) || !status.cluster_id.is_empty();
    let formed_unrecorded = annotations.get(naming::FORMED_ANNOTATION).filter(|_| !id_recorded).cloned();
    let formed = id_recorded || formed_unrecorded.is_some() || crate::coreos::status_shows_it_ran(&status);
    let pod_tls: Vec<&PodTls> = pods.values().map(|p| &p.tls).collect();
    let planned = desired::desired_of(cluster, &name, formed, &pod_tls);
    let (desired, spec_refused, version_defaulted, no_valid_spec) =
        (planned.desired, planned.refused, planned.version_defaulted, planned.no_valid_spec);
    let prepare = |mut d: crate::validation::Desired| {
        if d.pod.cluster_domain.is_empty() {
            d.pod.cluster_domain = cluster_domain.to_string();
        }
        d.tls_stage = desired::tls_stage(cluster, &name, &d, &pod_tls, &pvcs)?;
        Ok(d)
    };
    let desired = desired.and_then(prepare);
    // spec.TLS.auto: the operator's Secrets, read before the material check below (which checks
    // them as it checks static ones; a new cluster's are made from this observation); their CA
    // bundle is part of the pod-spec hash (`tls::auto`).
    // Also after auto was turned off while pods are still made with them: they are renewed.
    let auto = |d: &crate::validation::Desired| {
        Some((crate::validation::tls_auto_in_use(d, &name)?, d.pod.cluster_domain.clone(), d.tls_cert_manager.clone()))
    };
    let mut certificates = match desired.as_ref().ok().and_then(auto) {
        Some((in_use, domain, cm)) => Some(tls_auto::read(client, cluster, in_use, &domain, cm.as_ref()).await),
        None => None,
    };
    // TLS material is checked before anything uses it (`tls`): the Secrets checked are the ones
    // pods are made with now (a side being turned off keeps its Secrets until no member uses
    // them). Refused material of a change is a refused change; refused material the cluster
    // runs with is reported and holds up only what needs new material (`planner::tls_material`).
    // Boxed: futures this large overflow a debug build's worker stack.
    let planned = (desired, spec_refused, version_defaulted);
    let tls::Checked { desired, spec_refused, version_defaulted, verdict: mut tls_material } =
        Box::pin(tls::checked(client, cluster, &name, &namespace, planned, prepare, &pod_tls)).await;
    let client_tls = tls_material.client.take().map(std::sync::Arc::new);
    let desired = desired.map(|mut d| {
        if crate::validation::tls_auto_in_use(&d, &name).is_some() {
            d.tls_trust = certificates.as_ref().filter(|c| !c.leaving).and_then(|c| c.trust_fingerprint());
        }
        d
    });
    // The root Secret and the operator's record of the password etcd has (`spec.auth`).
    let (mut auth, root) = match &desired {
        Ok(d) => {
            let uid = cluster.metadata.uid.clone().unwrap_or_default();
            Box::pin(auth_secrets::load(client, &namespace, &name, &uid, &d.auth)).await
        }
        Err(_) => Default::default(),
    };
    // A restore from a PVC marked as root's: its member runs as root. Asked until the cluster
    // forms (no member is restored after); a claim that cannot be read holds the bootstrap.
    let mut desired = desired;
    if !formed
        && let Ok(d) = desired.as_mut()
        && let Some(r) = d.restore.as_mut()
    {
        match backups::volume_marked_root(client, &namespace, &r.location).await {
            Ok(root) => r.root_volume = root,
            Err(e) => desired = Err(vec![format!("spec.restore: {e}")]),
        }
    }
    // One scheme for every member: the one every member serves (`tls::transition::stage`).
    let operator_https = desired.as_ref().is_ok_and(|d| d.tls_stage.operator_https);
    let scheme = crate::tls::scheme(operator_https);
    let client_tls = client_tls.filter(|_| operator_https);
    let endpoints = etcd::Endpoints {
        urls: pods
            .values()
            // A terminating or ended pod's etcd is going away: not worth a connection timeout.
            .filter(|p| !p.is_dead() && !p.deleting)
            .filter(|p| seeded.as_ref().is_none_or(|m| *m == p.name))
            .filter_map(|p| p.ip.as_ref().map(|ip| (p.name.clone(), format!("{scheme}://{ip}:{CLIENT_PORT}"))))
            .collect(),
        tls: client_tls,
        root,
    };
    let recorded_cluster_id = annotations.get(CLUSTER_ID_ANNOTATION).cloned().unwrap_or(status.cluster_id.clone());
    let mut unreached = BTreeMap::new();
    let (etcd, etcd_error) = if desired.is_err() || endpoints.is_empty() {
        (None, None)
    } else {
        let recorded_id = u64::from_str_radix(&recorded_cluster_id, 16).ok().filter(|id| *id != 0 && seeded.is_none());
        match etcd::observe(clients, &endpoints, recorded_id, &mut unreached).await {
            Ok(s) => (Some(s), None),
            Err(e) => {
                if e.is_auth_refusal() {
                    let policy = desired.as_ref().map(|d| d.auth.clone()).unwrap_or_default();
                    auth.refused = Some(crate::auth::refusal(&policy, &e.to_string()));
                }
                (None, Some(e.to_string()))
            }
        }
    };
    if let Some(c) = certificates.as_mut().filter(|c| c.read_error.is_none() && !c.leaving) {
        c.served = crate::observe::tls_probe::served(&pods, c).await;
    }
    let quorum_missing = etcd
        .as_ref()
        .is_none_or(|e| e.voters().filter(|m| m.is_healthy()).count() < EtcdState::quorum_of(e.voters().count()));
    let recovery_backup = match desired.as_ref().map(|d| &d.recovery.quorum_loss) {
        Ok(QuorumLossPolicy::FromBackup { backup }) if quorum_missing => {
            Some(backups::newest_backup(client, &namespace, backup).await)
        }
        _ => None,
    };
    let quorum_lost_secs = annotations
        .get(QUORUM_LOST_AT_ANNOTATION)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| (now.as_second() - t.as_second()).max(0));
    let client_endpoints = caches.endpoint_slices.as_ref().and_then(|clock| clock.read(&namespace, &client_service));
    let mut o = Observed {
        services_ready: services.contains(&name) && services.contains(&naming::client_service(&name)),
        name,
        namespace,
        desired,
        paused: cluster.spec.paused,
        pods,
        etcd,
        etcd_error,
        unreached,
        // PVCs that no bootstrap of this operator made (an earlier version's, CoreOS') may hold
        // data: such a cluster is treated as formed, as is one whose status shows it ran.
        ever_bootstrapped: formed || pvcs.values().any(|v| !v.bootstrap) || !retired_pvcs.is_empty(),
        formed_unrecorded,
        survivor_looks: annotations
            .get(naming::SURVIVOR_LOOKS_ANNOTATION)
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default(),
        acknowledged: crate::progress::Progress::parse(annotations.get(naming::MEMBER_PROGRESS_ANNOTATION))
            .acknowledged(),
        pvcs,
        retired_pvcs,
        spec_refused,
        no_valid_spec,
        quorum_lost_secs,
        recovery_record,
        last_recovery,
        recovery_backup,
        recorded_version: (!status.current_version.is_empty()).then_some(status.current_version),
        new_member_suffix: random_suffix(),
        backup_running: None,
        auth,
        minor_since: annotations.get(naming::MINOR_SINCE_ANNOTATION).and_then(|v| crate::marks::parse_minor_since(v)),
        certificates,
        tls_material,
        nospace_recovery: annotations.get(naming::NOSPACE_RECOVERY_ANNOTATION).and_then(|v| {
            let (rev, at) = v.split_once(' ')?;
            let at = at.parse::<k8s_openapi::jiff::Timestamp>().ok()?;
            Some((rev.parse().ok()?, (now.as_second() - at.as_second()).max(0)))
        }),
        network_policy: caches
            .network_policies
            .get(
                &kube::runtime::reflector::ObjectRef::new(&cluster.name_any())
                    .within(&cluster.namespace().unwrap_or_default()),
            )
            .map(|np| np.as_ref().clone()),
        operator_namespace: operator_namespace.map(str::to_string),
        switchover: annotations.get(naming::SWITCHOVER_ANNOTATION).map(|v| v.trim().to_string()),
        fence_request: crate::fencing::parse_request(
            annotations.get(naming::FENCED_MEMBERS_ANNOTATION).map(String::as_str),
        ),
        hibernation_asked: crate::planner::hibernation::parse(
            annotations.get(naming::HIBERNATION_ANNOTATION).map(String::as_str),
        ),
        hibernation_started: annotations.contains_key(naming::HIBERNATED_AT_ANNOTATION),
        defrag_asked: annotations.get(naming::DEFRAGMENT_ANNOTATION).map(|v| {
            let v = v.trim();
            (!v.is_empty() && !v.eq_ignore_ascii_case("all")).then(|| v.to_string())
        }),
        defrag_asked_secs: annotations
            .get(naming::DEFRAGMENT_ASKED_AT_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            // Unclamped: a mark in the future (a clock ahead) is written again (`decide`).
            .map(|t| now.as_second() - t.as_second()),
        member_nodes: crate::nodes::parse_member_nodes(annotations.get(naming::MEMBER_NODES_ANNOTATION)),
        nodes: BTreeMap::new(),
        nodes_error: None,
        client_endpoints,
    };
    let wanted = nodes::wanted(&o);
    if !wanted.is_empty() {
        match nodes::read(client, &wanted, now.as_second()).await {
            Ok(n) => o.nodes = n,
            Err(e) => o.nodes_error = Some(e),
        }
    }
    // Only when a member is due for defragmentation: is a backup of this cluster running?
    if crate::planner::may_defragment(&o) {
        o.backup_running = backups::running_backup(client, &o.namespace, &o.name).await;
    }
    if version_defaulted {
        crate::planner::upgrade::keep_running_version(&mut o);
    }
    // Members about to restart into another CA bundle: do they all serve certificates it trusts?
    Box::pin(tls::guard_trust(&mut o)).await;
    (o, endpoints)
}

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
    self, BOOTSTRAP_ANNOTATION, CLIENT_PORT, CLUSTER_ID_ANNOTATION, CLUSTER_LABEL, LAST_VALID_SPEC_ANNOTATION,
    MEMBER_ANNOTATION, PEER_URL_ANNOTATION, QUORUM_LOST_AT_ANNOTATION, RECOVERY_ANNOTATION, VERSION_ANNOTATION,
    VERSION_CHANGED_ANNOTATION,
};
use crate::observed::{BackupPoint, EtcdState, Observed, PodState, PvcState, QuorumLossPolicy};
use crate::tls::transition::PodTls;
use crate::validation::{Desired, validate};

/// The watch caches observation reads from.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub pvcs: Store<PersistentVolumeClaim>,
    /// PodDisruptionBudgets, in the policy version the server serves (none: no budgets).
    pub budgets: Option<(kube::api::ApiResource, Store<kube::api::DynamicObject>)>,
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

/// The member data check's verdict `code` (a refusal, or data the pod's user cannot use), from
/// its init container: it ended with that code now, or is waiting to retry after doing so. A
/// check that passed since (running, exit 0) is no such verdict, whatever it said before.
fn data_check_exit(inits: &[ContainerStatus], code: i32) -> Option<String> {
    use crate::member_volume::CHECK_CONTAINER;
    let s = inits.iter().find(|s| s.name == CHECK_CONTAINER)?;
    let state = s.state.as_ref()?;
    let ended = |t: &k8s_openapi::api::core::v1::ContainerStateTerminated| {
        (t.exit_code == code).then(|| t.message.clone().unwrap_or_else(|| format!("exit code {code}")))
    };
    let why = match (&state.terminated, &state.waiting) {
        (Some(t), _) => ended(t),
        (None, Some(_)) => s.last_state.as_ref()?.terminated.as_ref().and_then(ended),
        _ => None,
    }?;
    Some(why.trim().to_string())
}

/// Member names in an etcd command line's `--initial-cluster=` flag.
fn initial_cluster_names(command: &[String]) -> Vec<String> {
    command
        .iter()
        .find_map(|a| a.strip_prefix("--initial-cluster="))
        .map(|v| v.split(',').filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string())).collect())
        .unwrap_or_default()
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
        spec_hash: p.annotations().get(naming::POD_SPEC_HASH_ANNOTATION).cloned(),
        problem: problem_of(&inits).or_else(|| problem_of(&containers)).or_else(|| unschedulable(p, now)),
        volume_refused: data_check_exit(&inits, crate::member_volume::REFUSED_EXIT_CODE),
        data_inaccessible: data_check_exit(&inits, crate::member_volume::INACCESSIBLE_EXIT_CODE),
        initial_cluster: etcd_container
            .and_then(|c| c.command.as_deref())
            .map(initial_cluster_names)
            .unwrap_or_default(),
        deleting_secs: p.metadata.deletion_timestamp.as_ref().map(|t| (now.as_second() - t.0.as_second()).max(0)),
        defragmented_secs: p
            .annotations()
            .get(naming::DEFRAGMENTED_AT_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| (now.as_second() - t.as_second()).max(0)),
        age_secs: p
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| (now.as_second() - t.0.as_second()).max(0))
            .unwrap_or(0),
        bootstrap: p.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        labelled: p.labels().contains_key(naming::CLUSTER_UID_LABEL),
        serving: p.labels().get(naming::SERVING_LABEL).map(|v| v == "true"),
        drained_secs: p
            .annotations()
            .get(naming::DRAINED_AT_ANNOTATION)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map(|t| (now.as_second() - t.as_second()).max(0)),
        uses_pvc: p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| v.persistent_volume_claim.is_some())),
        tls: crate::tls::transition::PodTls::of(
            etcd_container.and_then(|c| c.command.as_deref()).unwrap_or_default(),
            p.spec.as_ref().and_then(|s| s.volumes.as_deref()).unwrap_or_default(),
        ),
    }
}

/// How long a pod may be unschedulable before it counts as a member that cannot run.
pub const UNSCHEDULABLE_SECS: i64 = 120;

/// A pod the scheduler could not place for a while, with the scheduler's reason.
fn unschedulable(p: &Pod, now: k8s_openapi::jiff::Timestamp) -> Option<(String, String)> {
    let c =
        p.status.as_ref()?.conditions.as_ref()?.iter().find(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })?;
    let since = c.last_transition_time.as_ref().map(|t| now.as_second() - t.0.as_second()).unwrap_or(0);
    (since >= UNSCHEDULABLE_SECS).then(|| {
        ("Unschedulable".to_string(), format!("pending for {since}s: {}", c.message.clone().unwrap_or_default()))
    })
}

/// Kubernetes' view of a member PVC.
pub fn pvc_state(v: &PersistentVolumeClaim) -> Option<PvcState> {
    let name = v.name_any();
    let member =
        v.annotations().get(MEMBER_ANNOTATION).cloned().or_else(|| naming::member_of_pvc(&name).map(str::to_string))?;
    Some(PvcState {
        member,
        peer_url: v.annotations().get(PEER_URL_ANNOTATION).cloned(),
        deleting: v.metadata.deletion_timestamp.is_some(),
        bootstrap: v.annotations().contains_key(BOOTSTRAP_ANNOTATION),
        storage: v
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
            .map(|q| q.0.clone()),
        root_data: v.annotations().get(naming::DATA_OWNER_ANNOTATION).is_some_and(|o| o == naming::ROOT_DATA_OWNER),
        name,
    })
}

/// The spec to plan from: this one if valid; else the last valid one the operator recorded
/// (the cluster keeps healing under it), with the reasons this one was refused. A cluster that
/// formed under an operator version that recorded no last valid spec keeps its spec if that
/// version's rules accepted it. The last value says whether the spec planned from left
/// `version` empty (the default applies). `pods`: how the member pods speak TLS.
fn desired_of(
    cluster: &EtcdCluster,
    name: &str,
    formed: bool,
    pods: &[&PodTls],
) -> (Result<Desired, Vec<String>>, Option<Vec<String>>, bool) {
    match validate(name, &cluster.spec)
        .and_then(|d| tls_change_allowed(cluster, name, formed, pods, d))
        .and_then(|d| auth_kept(cluster, name, d))
    {
        Ok(d) => (Ok(d), None, cluster.spec.version.is_empty()),
        Err(errs) => {
            let recorded = cluster.annotations().get(LAST_VALID_SPEC_ANNOTATION);
            let last = match recorded {
                Some(j) => serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(j)
                    .ok()
                    .and_then(|spec| validate(name, &spec).ok().map(|d| (d, spec.version.is_empty()))),
                None if formed => crate::validation::validate_legacy(name, &cluster.spec)
                    .ok()
                    .map(|d| (d, cluster.spec.version.is_empty())),
                None => None,
            };
            match last {
                Some((d, empty)) => (Ok(d), Some(errs), empty),
                None => (Err(errs), None, false),
            }
        }
    }
}

/// The policy of the last valid spec the operator recorded, if any.
fn last_valid_tls(cluster: &EtcdCluster, name: &str) -> Option<crate::tls::Policy> {
    let recorded = cluster.annotations().get(LAST_VALID_SPEC_ANNOTATION)?;
    let spec = serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(recorded).ok()?;
    validate(name, &spec).ok().map(|d| d.tls)
}

/// A formed cluster may turn TLS on or off, not swap the Secrets of a side that stays on
/// (`tls::transition::check_change`, against the last valid spec and the pods).
fn tls_change_allowed(
    cluster: &EtcdCluster,
    name: &str,
    formed: bool,
    pods: &[&PodTls],
    d: Desired,
) -> Result<Desired, Vec<String>> {
    if !formed {
        return Ok(d);
    }
    let before = last_valid_tls(cluster, name).unwrap_or_default();
    crate::tls::transition::check_change(&before, &d.tls, pods).map(|_| d).map_err(|e| vec![e])
}

/// The stage member pods are made at now (`tls::transition::stage`): the Secrets of a side
/// `spec.TLS` turns off come from the `tls-leaving` mark, else the last valid spec, else the
/// pods' volumes.
fn tls_stage(
    cluster: &EtcdCluster,
    name: &str,
    d: &Desired,
    pods: &[&PodTls],
    pvcs: &BTreeMap<String, PvcState>,
) -> Result<crate::tls::transition::Stage, Vec<String>> {
    use crate::tls::transition::{Leaving, stage};
    let mut sources = vec![];
    if let Some(l) =
        cluster.annotations().get(naming::TLS_LEAVING_ANNOTATION).and_then(|j| serde_json::from_str(j).ok())
    {
        sources.push(l);
    }
    if let Some(p) = last_valid_tls(cluster, name) {
        sources.push(Leaving::of_policy(&p));
    }
    sources.push(Leaving::of_pods(pods.iter().copied()));
    let https_url_on_volume =
        pvcs.values().any(|v| !v.deleting && v.peer_url.as_deref().is_some_and(|u| u.starts_with("https://")));
    let serve_both = cluster.annotations().get(naming::TLS_SERVE_BOTH_ANNOTATION).is_some_and(|v| v == "true");
    let on_volumes = pvcs.values().any(|v| !v.deleting);
    stage(&d.tls, &Leaving::find(&d.tls, &sources), pods, https_url_on_volume, on_volumes, serve_both)
        .map_err(|e| vec![e])
}

/// `spec.auth` with authentication on is not dropped (the last valid spec's; `auth::check_change`).
fn auth_kept(cluster: &EtcdCluster, name: &str, d: Desired) -> Result<Desired, Vec<String>> {
    let before = cluster
        .annotations()
        .get(LAST_VALID_SPEC_ANNOTATION)
        .and_then(|j| serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(j).ok())
        .and_then(|spec| validate(name, &spec).ok());
    match before {
        Some(b) => crate::auth::check_change(&b.auth, &d.auth).map(|_| d).map_err(|e| vec![e]),
        None => Ok(d),
    }
}

/// The newest backup of an EtcdBackup, as a restore source.
async fn newest_backup(client: &kube::Client, namespace: &str, name: &str) -> Result<BackupPoint, String> {
    let api: kube::Api<etcd_operator_api::EtcdBackup> = kube::Api::namespaced(client.clone(), namespace);
    let b = api.get(name).await.map_err(|e| format!("cannot be read: {e}"))?;
    let st = b.status.unwrap_or_default();
    let (path, sha256, revision) = match st.history.first() {
        Some(h) => (h.path.clone(), h.sha256.clone(), h.etcd_revision),
        None if !st.sha256.is_empty() => (st.path.clone(), st.sha256.clone(), st.etcd_revision),
        None => return Err("has no successful backup yet".into()),
    };
    let base = crate::backup::location::Location::of(&b.spec.storage_type, &b.spec.source)?;
    let (bucket, key) = path
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('/'))
        .ok_or_else(|| format!("backup path {path:?} is not <scheme>://<bucket>/<key>"))?;
    let location = crate::backup::location::Location { bucket: bucket.to_string(), ..base.with_key(key.to_string()) };
    Ok(BackupPoint {
        restore: crate::validation::Restore { location, source: b.spec.source.clone(), sha256 },
        revision,
    })
}

/// A backup pod of this cluster that runs now (an API read, not the watch caches: backup pods
/// are not watched by this controller). An error counts as one running: maintenance waits.
async fn running_backup(client: &kube::Client, namespace: &str, cluster: &str) -> Option<String> {
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), namespace);
    let lp = kube::api::ListParams::default().labels(&format!("{}={cluster}", crate::backup::pods::BACKUP_OF_LABEL));
    match api.list_metadata(&lp).await {
        Ok(l) => l.items.iter().find(|p| p.metadata.deletion_timestamp.is_none()).map(|p| p.name_any()),
        Err(e) => Some(format!("(unknown: listing backup pods failed: {e})")),
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
    client: &kube::Client,
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
    let pvcs: BTreeMap<String, PvcState> = caches
        .pvcs
        .state()
        .iter()
        .filter(|s| owned_by(s.as_ref(), cluster))
        .filter_map(|v| pvc_state(v))
        .map(|v| (v.member.clone(), v))
        .collect();
    let status = cluster.status.clone().unwrap_or_default();
    let annotations = cluster.annotations();
    let record =
        |k: &str| annotations.get(k).and_then(|j| serde_json::from_str::<crate::planner::recovery::Record>(j).ok());
    let recovery_record = record(RECOVERY_ANNOTATION);
    let last_recovery = record(naming::LAST_RECOVERY_ANNOTATION);
    // During a recovery the new first member is the cluster: only it is asked, whatever cluster
    // ID it has. Otherwise answers from another cluster (a reused pod IP) are ignored.
    let seeded = recovery_record.as_ref().filter(|r| pods.contains_key(&r.member)).map(|r| r.member.clone());
    // A status that shows the cluster ran (CoreOS' included: it recorded no cluster ID) counts.
    let formed = annotations.contains_key(CLUSTER_ID_ANNOTATION)
        || !status.cluster_id.is_empty()
        || crate::coreos::status_shows_it_ran(&status);
    let pod_tls: Vec<&PodTls> = pods.values().map(|p| &p.tls).collect();
    let (desired, spec_refused, version_defaulted) = desired_of(cluster, &name, formed, &pod_tls);
    let desired = desired.and_then(|mut d| {
        if d.pod.cluster_domain.is_empty() {
            d.pod.cluster_domain = cluster_domain.to_string();
        }
        d.tls_stage = tls_stage(cluster, &name, &d, &pod_tls, &pvcs)?;
        Ok(d)
    });
    // spec.TLS.auto: the operator's Secrets, read before the material check below (which checks
    // them as it checks static ones); their CA bundle is part of the pod-spec hash (`tls::auto`).
    // Also after auto was turned off while pods are still made with them: they are renewed.
    let auto =
        |d: &crate::validation::Desired| Some((crate::tls::auto::in_use(d, &name)?, d.pod.cluster_domain.clone()));
    let mut certificates = match desired.as_ref().ok().and_then(auto) {
        Some((in_use, domain)) => Some(crate::tls::auto::read::observe(client, cluster, in_use, &domain).await),
        None => None,
    };
    let desired = desired.map(|mut d| {
        d.tls_trust = certificates.as_ref().filter(|c| !c.leaving).and_then(|c| c.trust_fingerprint());
        d
    });
    // TLS material is checked before anything uses it: refused material is an invalid spec. The
    // Secrets checked are the ones pods are made with now (a side being turned off keeps its
    // Secrets until no member uses them).
    let (desired, client_tls) = match desired {
        Ok(d) => {
            match crate::tls::material::load(client, &namespace, &name, &d.pod.cluster_domain, &d.tls_stage.secrets)
                .await
            {
                Ok(t) => (Ok(d), t),
                Err(reasons) => (Err(reasons), None),
            }
        }
        Err(e) => (Err(e), None),
    };
    // The root Secret and the operator's record of the password etcd has (`spec.auth`).
    let (mut auth, root) = match &desired {
        Ok(d) => {
            let uid = cluster.metadata.uid.clone().unwrap_or_default();
            Box::pin(crate::auth::secrets::load(client, &namespace, &name, &uid, &d.auth)).await
        }
        Err(_) => Default::default(),
    };
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
    let (etcd, etcd_error) = if desired.is_err() || endpoints.is_empty() {
        (None, None)
    } else {
        let recorded_id = u64::from_str_radix(&recorded_cluster_id, 16).ok().filter(|id| *id != 0 && seeded.is_none());
        match etcd::observe(clients, &endpoints, recorded_id).await {
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
        c.served = crate::tls::auto::probe::served(&pods, c).await;
    }
    let quorum_missing = etcd
        .as_ref()
        .is_none_or(|e| e.voters().filter(|m| m.is_healthy()).count() < EtcdState::quorum_of(e.voters().count()));
    let recovery_backup = match desired.as_ref().map(|d| &d.recovery.quorum_loss) {
        Ok(QuorumLossPolicy::FromBackup { backup }) if quorum_missing => {
            Some(newest_backup(client, &namespace, backup).await)
        }
        _ => None,
    };
    let quorum_lost_secs = annotations
        .get(QUORUM_LOST_AT_ANNOTATION)
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| (now.as_second() - t.as_second()).max(0));
    let mut o = Observed {
        services_ready: services.contains(&name) && services.contains(&naming::client_service(&name)),
        name,
        namespace,
        desired,
        paused: cluster.spec.paused,
        pods,
        etcd,
        etcd_error,
        // PVCs that no bootstrap of this operator made (an earlier version's, CoreOS') may hold
        // data: such a cluster is treated as formed, as is one whose status shows it ran.
        ever_bootstrapped: formed || pvcs.values().any(|v| !v.bootstrap),
        pvcs,
        spec_refused,
        quorum_lost_secs,
        recovery_record,
        last_recovery,
        recovery_backup,
        recorded_version: (!status.current_version.is_empty()).then_some(status.current_version),
        new_member_suffix: random_suffix(),
        backup_running: None,
        auth,
        minor_since: annotations.get(naming::MINOR_SINCE_ANNOTATION).and_then(|v| {
            let (minor, index) = v.split_once(' ')?;
            Some((minor.to_string(), index.parse().ok()?))
        }),
        certificates,
        nospace_recovery: annotations.get(naming::NOSPACE_RECOVERY_ANNOTATION).and_then(|v| {
            let (rev, at) = v.split_once(' ')?;
            let at = at.parse::<k8s_openapi::jiff::Timestamp>().ok()?;
            Some((rev.parse().ok()?, (now.as_second() - at.as_second()).max(0)))
        }),
    };
    // Only when a member is due for defragmentation: is a backup of this cluster running?
    if crate::planner::may_defragment(&o) {
        o.backup_running = running_backup(client, &o.namespace, &o.name).await;
    }
    if version_defaulted {
        crate::planner::upgrade::keep_running_version(&mut o);
    }
    (o, endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(spec: etcd_operator_api::EtcdClusterSpec, last_valid: Option<&str>) -> EtcdCluster {
        let mut c = EtcdCluster::new("ex", spec);
        if let Some(j) = last_valid {
            c.metadata.annotations = Some([(LAST_VALID_SPEC_ANNOTATION.to_string(), j.to_string())].into());
        }
        c
    }

    /// The data check's two verdicts are told apart by exit code, now or in the last state
    /// while the container waits to run again; a check that passed since is neither; the PVC's
    /// data-owner mark reads as root's data only for "0".
    #[test]
    fn the_data_checks_verdicts_and_the_root_data_mark_are_read() {
        use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStateWaiting};
        let ended = |code: i32| ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                message: Some(format!("said {code}\n")),
                ..Default::default()
            }),
            ..Default::default()
        };
        let waiting = ContainerState { waiting: Some(ContainerStateWaiting::default()), ..Default::default() };
        let check = |state: ContainerState, last: Option<ContainerState>| {
            vec![ContainerStatus {
                name: crate::member_volume::CHECK_CONTAINER.into(),
                state: Some(state),
                last_state: last,
                ..Default::default()
            }]
        };
        use crate::member_volume::{INACCESSIBLE_EXIT_CODE as NO_ACCESS, REFUSED_EXIT_CODE as REFUSED};
        for (inits, refused, no_access) in [
            (check(ended(3), None), Some("said 3"), None),
            (check(ended(4), None), None, Some("said 4")),
            (check(waiting.clone(), Some(ended(4))), None, Some("said 4")),
            (check(waiting, Some(ended(1))), None, None),
            (check(ended(0), Some(ended(4))), None, None),
        ] {
            assert_eq!(data_check_exit(&inits, REFUSED).as_deref(), refused, "{inits:?}");
            assert_eq!(data_check_exit(&inits, NO_ACCESS).as_deref(), no_access, "{inits:?}");
        }
        let pvc = |owner: Option<&str>| PersistentVolumeClaim {
            metadata: kube::api::ObjectMeta {
                name: Some("ex-a-data".into()),
                annotations: owner.map(|o| [(naming::DATA_OWNER_ANNOTATION.to_string(), o.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(pvc_state(&pvc(Some("0"))).unwrap().root_data);
        assert!(!pvc_state(&pvc(Some("65532"))).unwrap().root_data);
        assert!(!pvc_state(&pvc(None)).unwrap().root_data);
    }

    /// Whether the default version applies is a property of the spec planned from: a refused
    /// edit of a cluster whose last valid spec left the version empty must not turn into an
    /// upgrade to a newer default.
    #[test]
    fn the_version_default_follows_the_spec_planned_from() {
        use etcd_operator_api::EtcdClusterSpec;
        let (d, refused, empty) =
            desired_of(&cluster(EtcdClusterSpec { size: 3, ..Default::default() }, None), "ex", true, &[]);
        assert!(d.is_ok() && refused.is_none() && empty);
        let pinned = EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() };
        assert!(!desired_of(&cluster(pinned, None), "ex", true, &[]).2);
        // An invalid edit (size 0) of a cluster last valid with an empty version.
        let edit = EtcdClusterSpec { size: 0, version: "3.5.1".into(), ..Default::default() };
        let (d, refused, empty) = desired_of(&cluster(edit.clone(), Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(d.is_ok() && refused.is_some());
        assert!(empty, "the last valid spec left the version empty");
        let (_, _, empty) = desired_of(&cluster(edit, Some(r#"{"size":3,"version":"3.5.1"}"#)), "ex", true, &[]);
        assert!(!empty);
    }

    /// A formed cluster may turn TLS on (its members move one at a time), not swap the Secret of
    /// a side that stays on: such an edit is refused and it plans under the last valid spec.
    #[test]
    fn a_formed_cluster_turns_tls_on_but_keeps_its_secrets() {
        let with_tls = |peer: &str| -> etcd_operator_api::EtcdClusterSpec {
            serde_json::from_str(&format!(
                r#"{{"size":3,"TLS":{{"static":{{"member":{{"peerSecret":"{peer}","serverSecret":"s"}},"operatorSecret":"o"}}}}}}"#
            ))
            .unwrap()
        };
        let (d, refused, _) = desired_of(&cluster(with_tls("p"), Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(d.unwrap().tls.peer_secret.is_some() && refused.is_none(), "turning TLS on is accepted");
        let last = serde_json::to_string(&with_tls("p")).unwrap();
        let (d, refused, _) = desired_of(&cluster(with_tls("q"), Some(&last)), "ex", true, &[]);
        assert_eq!(d.unwrap().tls.peer_secret.as_deref(), Some("p"), "planned under the last valid spec");
        assert!(refused.unwrap()[0].contains("cannot switch to Secret q"));
        let (d, refused, _) = desired_of(&cluster(with_tls("q"), Some(&last)), "ex", false, &[]);
        assert!(
            d.unwrap().tls.peer_secret.as_deref() == Some("q") && refused.is_none(),
            "not formed yet: no history to keep"
        );
    }
}

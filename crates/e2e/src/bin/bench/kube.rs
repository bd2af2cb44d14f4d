//! The bench's parsed view of what kubectl shows: pods and EtcdCluster status, read in one call.
//! Namespaces, the operator and manifests are the e2e library's (`e2e::harness`, `e2e::manifests`).

use anyhow::Result;
use e2e::TestNamespace;
use e2e::harness::{condition_true, stuck_container};
use serde_json::Value;

/// One pod, as far as the bench cares.
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub name: String,
    pub ip: Option<String>,
    pub deleting: bool,
    pub ready: bool,
    pub initialized: bool,
    pub restarts: i64,
    /// Image of the `etcd` container in the pod spec.
    pub image: String,
    pub uid: String,
    pub raw: Value,
}

impl PodInfo {
    pub fn from_json(p: &Value) -> PodInfo {
        let image = p["spec"]["containers"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "etcd"))
            .and_then(|c| c["image"].as_str())
            .unwrap_or_default()
            .to_string();
        PodInfo {
            name: p["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            ip: p["status"]["podIP"].as_str().filter(|s| !s.is_empty()).map(str::to_string),
            deleting: !p["metadata"]["deletionTimestamp"].is_null(),
            ready: condition_true(p, "Ready"),
            initialized: condition_true(p, "Initialized"),
            restarts: p["status"]["containerStatuses"]
                .as_array()
                .map(|cs| cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum())
                .unwrap_or(0),
            image,
            uid: p["metadata"]["uid"].as_str().unwrap_or_default().to_string(),
            raw: p.clone(),
        }
    }

    /// A container that cannot start for a reason waiting will not fix (a missing image, a bad
    /// spec): the bench stops with this instead of running into its timeout.
    pub fn hopeless(&self) -> Option<String> {
        stuck_container(&self.raw, false)
            .map(|why| format!("pod {} {why} (are the images loaded? `bash hack/images.sh`)", self.name))
    }
}

/// The EtcdCluster's status, as far as the bench cares.
#[derive(Clone, Debug, Default)]
pub struct StatusInfo {
    pub ready: Vec<String>,
    pub learners: Vec<String>,
    pub current_version: String,
    pub leader: String,
    pub phase: String,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

impl StatusInfo {
    pub fn from_json(c: &Value) -> StatusInfo {
        let st = &c["status"];
        StatusInfo {
            ready: strings(&st["members"]["ready"]),
            learners: strings(&st["members"]["learners"]),
            current_version: st["currentVersion"].as_str().unwrap_or_default().to_string(),
            leader: st["leader"].as_str().unwrap_or_default().to_string(),
            phase: st["phase"].as_str().unwrap_or_default().to_string(),
        }
    }
}

/// Pods matching `selector` and, with `cluster`, that EtcdCluster's status, in one kubectl call.
pub fn get_pods_and_status(
    ns: &TestNamespace,
    selector: &str,
    cluster: Option<&str>,
) -> Result<(Vec<PodInfo>, Option<StatusInfo>)> {
    let (pods, status, _) = get_view(ns, selector, cluster, None)?;
    Ok((pods, status))
}

/// The IPs of the ready endpoints of Service `service` in EndpointSlice objects of a list.
fn ready_ips(items: &[Value], service: &str) -> Vec<String> {
    let mut ips: Vec<String> = items
        .iter()
        .filter(|it| it["kind"] == "EndpointSlice" && it["metadata"]["labels"]["kubernetes.io/service-name"] == service)
        .flat_map(|it| it["endpoints"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["conditions"]["ready"] != false)
        .flat_map(|e| strings(&e["addresses"]))
        .collect();
    ips.sort();
    ips
}

/// Pods, the EtcdCluster's status, the client Service's ready endpoint IPs.
pub type View = (Vec<PodInfo>, Option<StatusInfo>, Option<Vec<String>>);

/// `get_pods_and_status`, and with `service` the ready endpoint IPs of that (client) Service,
/// all in one kubectl call.
pub fn get_view(ns: &TestNamespace, selector: &str, cluster: Option<&str>, service: Option<&str>) -> Result<View> {
    let mut kinds = vec!["pods"];
    if cluster.is_some() {
        kinds.push("etcdclusters.etcd.database.coreos.com");
    }
    if service.is_some() {
        kinds.push("endpointslices.discovery.k8s.io");
    }
    // The namespace is the bench's own: list the kinds in it and pick ours.
    let list = ns.json(&["get", &kinds.join(",")])?;
    let items = list["items"].as_array().cloned().unwrap_or_else(|| vec![list.clone()]);
    let labels: Vec<(&str, &str)> = selector.split(',').filter_map(|kv| kv.split_once('=')).collect();
    let mut pods = vec![];
    let mut status = None;
    for it in &items {
        match it["kind"].as_str() {
            Some("EtcdCluster") if Some(it["metadata"]["name"].as_str().unwrap_or_default()) == cluster => {
                status = Some(StatusInfo::from_json(it))
            }
            Some("Pod") if labels.iter().all(|(k, v)| it["metadata"]["labels"][*k] == *v) => {
                pods.push(PodInfo::from_json(it))
            }
            _ => {}
        }
    }
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    let ips = service.map(|svc| ready_ips(&items, svc));
    Ok((pods, status, ips))
}

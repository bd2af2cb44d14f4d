//! An EtcdCluster under test as the API shows it: the object and its conditions, its member
//! pods, waiting until it is healthy, its client endpoints, spec patches.

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::{TestNamespace, wait_until};

pub fn cluster(ns: &TestNamespace, name: &str) -> Result<Value> {
    ns.json(&["get", "etcdcluster", name])
}

/// Member pods of the cluster that are not being deleted, by name.
pub fn member_pods(ns: &TestNamespace, name: &str) -> Result<Vec<Value>> {
    let pods = ns.json(&["get", "pods", "-l", &format!("app=etcd,etcd_cluster={name}")])?;
    let mut v: Vec<Value> = pods["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    v.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string());
    Ok(v)
}

pub fn pod_names(pods: &[Value]) -> Vec<String> {
    pods.iter().map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string()).collect()
}

/// Wait until status says `size` ready voting members, no learners, and exactly `size` pods,
/// in a status written for the current spec (`observedGeneration`, when the status has it).
pub fn wait_healthy(ns: &TestNamespace, name: &str, size: usize, timeout: Duration) -> Result<Value> {
    wait_until(timeout, &format!("{name} to have {size} healthy members"), || {
        let c = cluster(ns, name)?;
        let st = &c["status"];
        let ready = st["members"]["ready"].as_array().map(|a| a.len()).unwrap_or(0);
        let learners = st["members"]["learners"].as_array().map(|a| a.len()).unwrap_or(0);
        let current = st["observedGeneration"].is_null() || st["observedGeneration"] == c["metadata"]["generation"];
        let pods = member_pods(ns, name)?.len();
        Ok((ready == size && learners == 0 && pods == size && st["size"] == size && current).then_some(c))
    })
    .inspect(|_| client_service_connects(ns, name))
}

/// Waits (up to 30 s) until a TCP connection to the client Service's ClusterIP is accepted:
/// kube-proxy programs a new Service's endpoints a moment after its pods are ready, and a
/// client that connects in between is refused (seen in CI right after `wait_healthy`). Never
/// fails: a Service that stays closed (no Service, a NetworkPolicy in the way) is left to the
/// test's own client to report.
fn client_service_connects(ns: &TestNamespace, name: &str) {
    let Ok(svc) = ns.json(&["get", "service", &format!("{name}-client")]) else { return };
    let Some(addr) = svc["spec"]["clusterIP"].as_str().and_then(|ip| format!("{ip}:2379").parse().ok()) else {
        return;
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `http://<client Service ClusterIP>:2379`, reached from the host through kube-proxy.
pub fn client_endpoint(ns: &TestNamespace, name: &str) -> Result<String> {
    let svc = ns.json(&["get", "service", &format!("{name}-client")])?;
    let ip = svc["spec"]["clusterIP"].as_str().context("client Service has no clusterIP")?;
    Ok(format!("http://{ip}:2379"))
}

pub fn condition<'a>(c: &'a Value, type_: &str) -> Option<&'a Value> {
    c["status"]["conditions"].as_array()?.iter().find(|x| x["type"] == type_)
}

/// `kubectl patch etcdcluster NAME --type=merge -p '{"spec": SPEC}'`.
pub fn patch_spec(ns: &TestNamespace, name: &str, spec: &str) -> Result<()> {
    ns.run(&["patch", "etcdcluster", name, "--type=merge", "-p", &format!(r#"{{"spec":{spec}}}"#)]).map(drop)
}

/// Each member's own client endpoint, `(pod, http://<pod IP>:2379)`, reachable from the host.
/// Fails while a member pod has no IP yet.
pub fn member_endpoints(ns: &TestNamespace, name: &str) -> Result<Vec<(String, String)>> {
    member_pods(ns, name)?
        .iter()
        .map(|p| {
            let pod = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let ip = p["status"]["podIP"].as_str().filter(|ip| !ip.is_empty());
            let ip = ip.with_context(|| format!("pod {pod} has no IP yet"))?;
            Ok((pod, format!("http://{ip}:2379")))
        })
        .collect()
}

/// What the operator set on one member pod and what Kubernetes did with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodVersion {
    pub pod: String,
    pub uid: String,
    /// Image of the `etcd` container in the spec.
    pub image: String,
    /// The `etcd.version` annotation.
    pub annotation: String,
    /// Restarts of the etcd container.
    pub restarts: i64,
}

pub fn pod_versions(ns: &TestNamespace, name: &str) -> Result<Vec<PodVersion>> {
    Ok(member_pods(ns, name)?
        .iter()
        .map(|p| {
            let etcd = |list: &Value| {
                list.as_array().and_then(|cs| cs.iter().find(|c| c["name"] == "etcd")).cloned().unwrap_or_default()
            };
            PodVersion {
                pod: p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                uid: p["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                image: etcd(&p["spec"]["containers"])["image"].as_str().unwrap_or("").to_string(),
                annotation: p["metadata"]["annotations"]["etcd.version"].as_str().unwrap_or("").to_string(),
                restarts: etcd(&p["status"]["containerStatuses"])["restartCount"].as_i64().unwrap_or(0),
            }
        })
        .collect())
}

/// A field of condition `type_` of an object, "" when absent.
pub fn cond_str(c: &Value, type_: &str, field: &str) -> String {
    condition(c, type_).and_then(|x| x[field].as_str()).unwrap_or("").to_string()
}

//! Harness for the operator's end-to-end tests: a real `etcd-operator` process scoped to a
//! fresh namespace of the real local cluster, and helpers that read EtcdCluster status and
//! talk to the etcd cluster with the real etcdctl.

#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e::{TestNamespace, host_etcdctl, wait_until};
use serde_json::Value;

/// The operator binary under test: `$ETCD_OPERATOR_BIN`, else the workspace's debug build.
pub fn operator_bin() -> PathBuf {
    std::env::var_os("ETCD_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/etcd-operator"))
}

/// A running operator; killed when dropped.
pub struct Operator {
    child: Child,
    pub log: PathBuf,
}

impl Operator {
    pub fn start(ns: &TestNamespace) -> Result<Operator> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/e2e-logs");
        std::fs::create_dir_all(&dir)?;
        let log = dir.join(format!("{}.log", ns.name));
        let out = File::create(&log)?;
        let bin = operator_bin();
        let child = Command::new(&bin)
            // Any free port for /healthz and /metrics: several operators (parallel tests, other
            // runs on the same host) must not compete for the default 0.0.0.0:8080.
            .args(["run", "--namespace", &ns.name, "--listen-address", "127.0.0.1:0"])
            .env("KUBECONFIG", &ns.kubectl.kubeconfig)
            .env("RUST_LOG", "info,etcd_operator=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let op = Operator { child, log };
        // Proof the operator is live: it logs once its watch caches hold a full list.
        wait_until(Duration::from_secs(60), "the operator to sync its caches", || {
            Ok(op.log_text().contains("watch caches synced").then_some(()))
        })?;
        Ok(op)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Run `body` with a fresh namespace and an operator for it; on failure the error carries the
/// tail of the operator's log and the namespace's Events.
pub fn with_operator(prefix: &str, body: impl FnOnce(&TestNamespace, &mut Operator) -> Result<()>) -> Result<()> {
    let ns = TestNamespace::create(prefix)?;
    let mut op = Operator::start(&ns)?;
    let r = body(&ns, &mut op);
    if let Err(e) = r {
        let log = op.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let events = ns.run(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
        let pods = ns.run(&["get", "pods", "-o", "wide"]).unwrap_or_default();
        let st = ns.run(&["get", "etcdclusters", "-o", "yaml"]).unwrap_or_default();
        return Err(e.context(format!(
            "operator log {} (last lines, newest first):\n{}\n--- pods:\n{pods}\n--- events:\n{events}\n--- etcdclusters:\n{st}",
            op.log.display(),
            tail.join("\n")
        )));
    }
    Ok(())
}

pub fn cluster_manifest(ns: &str, name: &str, size: i32, version: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: {size}\n  version: \"{version}\"\n{extra_spec}"
    )
}

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

/// Wait until status says `size` ready voting members, no learners, and exactly `size` pods.
pub fn wait_healthy(ns: &TestNamespace, name: &str, size: usize, timeout: Duration) -> Result<Value> {
    wait_until(timeout, &format!("{name} to have {size} healthy members"), || {
        let c = cluster(ns, name)?;
        let st = &c["status"];
        let ready = st["members"]["ready"].as_array().map(|a| a.len()).unwrap_or(0);
        let learners = st["members"]["learners"].as_array().map(|a| a.len()).unwrap_or(0);
        let pods = member_pods(ns, name)?.len();
        Ok((ready == size && learners == 0 && pods == size && st["size"] == size).then_some(c))
    })
}

/// `http://<client Service ClusterIP>:2379`, reached from the host through kube-proxy.
pub fn client_endpoint(ns: &TestNamespace, name: &str) -> Result<String> {
    let svc = ns.json(&["get", "service", &format!("{name}-client")])?;
    let ip = svc["spec"]["clusterIP"].as_str().context("client Service has no clusterIP")?;
    Ok(format!("http://{ip}:2379"))
}

/// Put `n` keys `<prefix>/<i>` = `value-<i>`.
pub fn write_keys(endpoint: &str, prefix: &str, n: usize) -> Result<()> {
    for i in 0..n {
        let (k, v) = (format!("{prefix}/{i}"), format!("value-{i}"));
        // A fresh cluster may need a moment before the client Service routes: retry briefly.
        wait_until(Duration::from_secs(30), &format!("put {k}"), || {
            Ok(host_etcdctl(endpoint, &["put", &k, &v]).map(drop).ok())
        })?;
    }
    Ok(())
}

/// Every key written by `write_keys` is there with its value.
pub fn check_keys(endpoint: &str, prefix: &str, n: usize) -> Result<()> {
    let out = wait_until(Duration::from_secs(30), "a range read", || {
        Ok(host_etcdctl(endpoint, &["get", "--prefix", &format!("{prefix}/")]).ok())
    })?;
    let lines: Vec<&str> = out.lines().collect();
    for i in 0..n {
        let k = format!("{prefix}/{i}");
        let pos = lines.iter().position(|l| *l == k);
        match pos.and_then(|p| lines.get(p + 1)) {
            Some(v) if *v == format!("value-{i}") => {}
            other => bail!("key {k}: expected value-{i}, got {other:?}"),
        }
    }
    Ok(())
}

/// The etcd member list as etcdctl prints it (`id, status, name, peer, client, learner`).
pub fn member_list(endpoint: &str) -> Result<Vec<Vec<String>>> {
    let out = host_etcdctl(endpoint, &["member", "list"])?;
    Ok(out.lines().map(|l| l.split(", ").map(str::to_string).collect()).collect())
}

pub fn condition<'a>(c: &'a Value, type_: &str) -> Option<&'a Value> {
    c["status"]["conditions"].as_array()?.iter().find(|x| x["type"] == type_)
}

/// Events of the namespace about `name`, as (reason, message).
pub fn events_for(ns: &TestNamespace, name: &str) -> Result<Vec<(String, String)>> {
    let evs = ns.json(&["get", "events.v1.events.k8s.io"])?;
    Ok(evs["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["regarding"]["name"] == name)
        .map(|e| (e["reason"].as_str().unwrap_or("").to_string(), e["note"].as_str().unwrap_or("").to_string()))
        .collect())
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

/// The server version one member reports (`etcdctl endpoint status` against that member alone).
pub fn server_version(endpoint: &str) -> Result<String> {
    let out = host_etcdctl(endpoint, &["endpoint", "status", "-w", "json"])?;
    let v: Value = serde_json::from_str(&out).with_context(|| format!("endpoint status of {endpoint}: {out}"))?;
    v[0]["Status"]["version"].as_str().map(str::to_string).with_context(|| format!("no version in {out}"))
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

/// One `events.k8s.io/v1` Event about an EtcdCluster.
#[derive(Clone, Debug)]
pub struct EventRecord {
    pub name: String,
    pub type_: String,
    pub reason: String,
    pub note: String,
    /// `related.name`: the member pod the Event concerns, if any.
    pub related: String,
    /// When it was last observed: `series.lastObservedTime` for a folded series, else
    /// `eventTime` (RFC 3339 with microseconds, so the strings sort by time).
    pub last: String,
    pub count: i64,
}

/// Events about the EtcdCluster `name`, oldest (by last observation) first.
pub fn events_v1(ns: &TestNamespace, name: &str) -> Result<Vec<EventRecord>> {
    let evs = ns.json(&["get", "events.v1.events.k8s.io"])?;
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut out: Vec<EventRecord> = evs["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["regarding"]["name"] == name && e["regarding"]["kind"] == "EtcdCluster")
        .map(|e| EventRecord {
            name: s(&e["metadata"]["name"]),
            type_: s(&e["type"]),
            reason: s(&e["reason"]),
            note: s(&e["note"]),
            related: s(&e["related"]["name"]),
            last: e["series"]["lastObservedTime"].as_str().map(str::to_string).unwrap_or_else(|| s(&e["eventTime"])),
            count: e["series"]["count"].as_i64().unwrap_or(1),
        })
        .collect();
    out.sort_by(|a, b| a.last.cmp(&b.last));
    Ok(out)
}

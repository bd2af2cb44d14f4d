//! Harness for the operator's end-to-end tests: the real `etcd-operator` scoped to a fresh
//! namespace of the real local cluster, and helpers that read EtcdCluster status and talk to the
//! etcd cluster with the real etcdctl.
//!
//! `E2E_OPERATOR` picks how `with_operator` runs the operator, so the same test bodies cover both:
//! - `process` (default): a process on this machine with the admin kubeconfig;
//! - `in-cluster`: installed into the test namespace the way a user installs it (`etcd-operator
//!   manifests | kubectl apply -f -`: ServiceAccount, the shipped RBAC, a Deployment running the
//!   image `operator_image()`), see [`InClusterOperator`].

#![allow(dead_code)]

pub mod backups;
pub mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::{Kubectl, TestNamespace, host_etcdctl, wait_until};
use serde_json::Value;

/// The operator binary under test: `$ETCD_OPERATOR_BIN`, else the workspace's debug build.
pub fn operator_bin() -> PathBuf {
    std::env::var_os("ETCD_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/etcd-operator"))
}

/// Where operator logs of the tests are kept.
fn log_dir() -> Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/e2e-logs");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// How the tests run the operator (`$E2E_OPERATOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Process,
    InCluster,
}

pub fn mode() -> Result<Mode> {
    match std::env::var("E2E_OPERATOR").as_deref() {
        Err(_) | Ok("") | Ok("process") => Ok(Mode::Process),
        Ok("in-cluster") => Ok(Mode::InCluster),
        Ok(other) => bail!("E2E_OPERATOR={other}: expected `process` or `in-cluster`"),
    }
}

/// The operator image of in-cluster installs, a tag of its own so that other runs loading
/// `quay.io/etcd-operator-rs/etcd-operator:v0.1.0` (hack/up.sh, hack/bench.sh) cannot swap the
/// binary under test.
pub const E2E_IMAGE: &str = "quay.io/etcd-operator-rs/etcd-operator:e2e";

/// The image in-cluster installs run: `$E2E_OPERATOR_IMAGE` as given (hack/test.sh loads it), else
/// [`E2E_IMAGE`], built from `operator_bin()` and loaded into the local cluster's containerd by
/// `hack/images.sh operator` once per test process. Either way every install then checks that its
/// pod runs exactly `operator_bin()` (see [`InClusterOperator::install`]).
pub fn operator_image() -> Result<String> {
    static LOADED: OnceLock<Result<String, String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            if let Some(img) = std::env::var("E2E_OPERATOR_IMAGE").ok().filter(|s| !s.is_empty()) {
                return Ok(img);
            }
            let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../hack/images.sh");
            let bin = operator_bin();
            eprintln!("loading {} as {E2E_IMAGE} (hack/images.sh operator)", bin.display());
            e2e::run(Command::new("bash").arg(&script).arg("operator").arg(&bin).arg(E2E_IMAGE))
                .map(|_| E2E_IMAGE.to_string())
                .map_err(|e| format!("cannot load the operator image (set E2E_OPERATOR_IMAGE to a loaded one): {e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// A running operator, stopped (process) or uninstalled (in-cluster) when dropped.
pub struct Operator {
    kind: Kind,
    /// The operator's log file (in-cluster: a copy of the pod logs, refreshed by `log_text`).
    pub log: PathBuf,
}

enum Kind {
    Process(Child),
    InCluster(InClusterOperator),
}

impl Operator {
    /// Starts an operator for `ns` the way `$E2E_OPERATOR` says.
    pub fn start(ns: &TestNamespace) -> Result<Operator> {
        match mode()? {
            Mode::Process => Operator::start_process(ns),
            Mode::InCluster => {
                let op = InClusterOperator::install(ns, &Install::default())?;
                Ok(Operator { log: op.log.clone(), kind: Kind::InCluster(op) })
            }
        }
    }

    /// The operator as a process of this machine, whatever `$E2E_OPERATOR` says.
    pub fn start_process(ns: &TestNamespace) -> Result<Operator> {
        Operator::start_process_with_env(ns, &[])
    }

    /// [`Operator::start_process`] with extra environment variables (e.g. failpoints).
    pub fn start_process_with_env(ns: &TestNamespace, env: &[(&str, &str)]) -> Result<Operator> {
        let log = log_dir()?.join(format!("{}.log", ns.name));
        let out = File::create(&log)?;
        let bin = operator_bin();
        let child = Command::new(&bin)
            // Any free port for /healthz and /metrics: several operators (parallel tests, other
            // runs on the same host) must not compete for the default 0.0.0.0:8080.
            .args(["run", "--namespace", &ns.name, "--listen-address", "127.0.0.1:0"])
            .env("KUBECONFIG", &ns.kubectl.kubeconfig)
            .env("RUST_LOG", "info,etcd_operator=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let op = Operator { kind: Kind::Process(child), log };
        // Proof the operator is live: it logs once its watch caches hold a full list.
        wait_until(Duration::from_secs(60), "the operator to sync its caches", || {
            Ok(op.log_text().contains("watch caches synced").then_some(()))
        })?;
        Ok(op)
    }

    /// The installed operator, when it runs in-cluster.
    pub fn in_cluster(&self) -> Option<&InClusterOperator> {
        match &self.kind {
            Kind::InCluster(op) => Some(op),
            Kind::Process(_) => None,
        }
    }

    /// Times the operator stopped or restarted since it was started (the process exited; or the
    /// restart counts of its pods): 0 means it never went down.
    pub fn restarts(&mut self) -> Result<i64> {
        match &mut self.kind {
            Kind::Process(child) => Ok(i64::from(child.try_wait()?.is_some())),
            Kind::InCluster(op) => Ok(op
                .pods()?
                .iter()
                .flat_map(|p| p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default())
                .map(|c| c["restartCount"].as_i64().unwrap_or(0))
                .sum()),
        }
    }

    /// Everything the operator logged so far (in-cluster: its pods' logs, also saved to `log`).
    pub fn log_text(&self) -> String {
        match &self.kind {
            Kind::Process(_) => std::fs::read_to_string(&self.log).unwrap_or_default(),
            Kind::InCluster(op) => op.logs(),
        }
    }

    /// Stops the operator: kills the process, or scales the Deployment to 0.
    pub fn stop(&mut self) {
        match &mut self.kind {
            Kind::Process(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            Kind::InCluster(op) => {
                let _ = op.logs();
                let _ = op.run(&["scale", "deployment", "etcd-operator", "--replicas=0"]);
            }
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Kind::Process(_) = self.kind {
            self.stop();
        }
        // In-cluster: InClusterOperator's own Drop keeps the logs and removes the cluster RBAC.
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

/// What to install in-cluster.
#[derive(Clone, Debug)]
pub struct Install {
    pub replicas: u32,
    /// `manifests --cluster-wide`: a ClusterRole with everything and `-cluster-wide`.
    pub cluster_wide: bool,
    /// Another install holds the lease: wait for this one's pod to run as a standby (alive, not
    /// Ready, saying who leads) instead of for a Ready leader.
    pub standby: bool,
}

impl Default for Install {
    fn default() -> Self {
        Install { replicas: 1, cluster_wide: false, standby: false }
    }
}

/// Label of the operator's own objects and pods (`manifests`).
pub const OPERATOR_SELECTOR: &str = "app.kubernetes.io/name=etcd-operator";

/// The operator installed into a test namespace from `etcd-operator manifests` (CRDs included, as
/// a user applies them: they are cluster-scoped and shared, so they are never deleted). Dropping
/// it keeps the pods' logs in `target/e2e-logs/<namespace>.log` and deletes the install's
/// cluster-scoped objects (ClusterRole and ClusterRoleBinding `etcd-operator-<namespace>`); the
/// rest goes with the namespace. A cluster-wide install is also stopped and waited for, as it
/// would act in other tests' namespaces.
pub struct InClusterOperator {
    kubectl: Kubectl,
    pub namespace: String,
    pub image: String,
    pub cluster_wide: bool,
    pub log: PathBuf,
    /// Log lines of pods seen so far, by pod: the logs of a deleted pod stay available.
    seen: std::sync::Mutex<std::collections::BTreeMap<String, String>>,
}

impl InClusterOperator {
    pub fn install(ns: &TestNamespace, opts: &Install) -> Result<Self> {
        let image = operator_image()?;
        sweep_stale_cluster_rbac(&ns.kubectl);
        let mut args = vec!["manifests", "--namespace", &ns.name, "--image", &image];
        let replicas = opts.replicas.to_string();
        args.extend(["--replicas", &replicas]);
        if opts.cluster_wide {
            args.push("--cluster-wide");
        }
        if !ns.kubectl.has_crd_validation_rules()? {
            args.push("--no-validation-rules");
        }
        let out = Command::new(operator_bin()).args(&args).output().context("running etcd-operator manifests")?;
        ensure!(out.status.success(), "manifests: {}", String::from_utf8_lossy(&out.stderr));
        let op = InClusterOperator {
            kubectl: ns.kubectl.clone(),
            namespace: ns.name.clone(),
            image,
            cluster_wide: opts.cluster_wide,
            log: log_dir()?.join(format!("{}.log", ns.name)),
            seen: Default::default(),
        };
        // From here on, dropping `op` removes what was applied outside the namespace.
        ns.apply(&String::from_utf8(out.stdout)?)?;
        if opts.standby {
            wait_until(Duration::from_secs(120), "the operator to wait as a standby", || {
                let running = op.pods()?.iter().any(|p| p["status"]["phase"] == "Running");
                Ok((running && op.logs().contains("another replica leads")).then_some(()))
            })?;
            return Ok(op);
        }
        let pod = wait_until(Duration::from_secs(120), "an operator replica to lead and be Ready", || {
            for p in op.pods()? {
                if let Some(why) = failing(&p) {
                    bail!("operator pod is failing: {why}\n{}", op.logs());
                }
                if e2e::condition_true(&p, "Ready") {
                    return Ok(Some(p["metadata"]["name"].as_str().unwrap_or_default().to_string()));
                }
            }
            Ok(None)
        })?;
        op.check_binary(&pod)?;
        Ok(op)
    }

    /// kubectl in the operator's namespace.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        self.kubectl.run(&[&["-n", self.namespace.as_str()], args].concat())
    }

    pub fn pods(&self) -> Result<Vec<Value>> {
        let v = self.kubectl.json(&["-n", &self.namespace, "get", "pods", "-l", OPERATOR_SELECTOR])?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    /// The Lease this install elects its leader on: its namespace's, or for cluster-wide
    /// installs the one all of them share in kube-system.
    pub fn lease(&self) -> Result<Value> {
        if self.cluster_wide {
            self.kubectl.json(&["-n", "kube-system", "get", "lease", "etcd-operator-cluster-wide"])
        } else {
            self.kubectl.json(&["-n", &self.namespace, "get", "lease", "etcd-operator"])
        }
    }

    /// The pod holding the Lease (its identity is `<install namespace>/<pod>`).
    pub fn leader(&self) -> Result<String> {
        let lease = self.lease()?;
        let holder = lease["spec"]["holderIdentity"].as_str().context("no lease holder")?;
        let (ns, pod) = holder.split_once('/').unwrap_or(("", holder));
        ensure!(ns.is_empty() || ns == self.namespace, "the lease is held by another install: {holder}");
        Ok(pod.to_string())
    }

    /// The logs of every operator pod seen so far (deleted ones included), each line prefixed
    /// with its pod; also written to `self.log`.
    pub fn logs(&self) -> String {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        for p in self.pods().unwrap_or_default() {
            let name = p["metadata"]["name"].as_str().unwrap_or_default().to_string();
            if let Ok(text) = self.run(&["logs", &name, "--tail=-1"]) {
                seen.insert(name, text);
            }
        }
        let all: String =
            seen.iter().flat_map(|(pod, text)| text.lines().map(move |l| format!("[pod/{pod}] {l}\n"))).collect();
        let _ = std::fs::write(&self.log, &all);
        all
    }

    /// The pod runs exactly the binary under test: its process, found on this machine by the
    /// downward-API environment, has the same executable as `operator_bin()`. Guards against an
    /// image tag that another run reloaded with another build. Only possible when the cluster's
    /// node is this machine; elsewhere it says so and passes.
    pub fn check_binary(&self, pod: &str) -> Result<()> {
        let bin = operator_bin();
        let want = [format!("MY_POD_NAME={pod}"), format!("MY_POD_NAMESPACE={}", self.namespace)];
        let pid = std::fs::read_dir("/proc")?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let env = std::fs::read(e.path().join("environ")).ok()?;
            let vars: Vec<&[u8]> = env.split(|b| *b == 0).collect();
            want.iter().all(|w| vars.contains(&w.as_bytes())).then_some(pid)
        });
        let Some(pid) = pid else {
            ensure!(
                self.kubectl.kubeconfig != Path::new(e2e::DEFAULT_KUBECONFIG),
                "the process of operator pod {pod} is not visible on this machine, yet the cluster is the local one"
            );
            eprintln!("note: pod {pod} does not run on this machine: cannot compare its binary with {}", bin.display());
            return Ok(());
        };
        let exe = format!("/proc/{pid}/exe");
        let same = Command::new("cmp").args(["-s", &exe]).arg(&bin).status().context("running cmp")?;
        ensure!(
            same.success(),
            "operator pod {pod} (image {}) does not run {}: the image holds another build (reload it: \
             hack/images.sh operator {} {})",
            self.image,
            bin.display(),
            bin.display(),
            self.image
        );
        Ok(())
    }

    fn cluster_rbac_name(&self) -> String {
        format!("etcd-operator-{}", self.namespace)
    }
}

impl Drop for InClusterOperator {
    fn drop(&mut self) {
        let _ = self.logs();
        if self.cluster_wide {
            // It sees every namespace: make sure it is gone before the next test starts.
            let r = self.run(&["delete", "deployment", "etcd-operator", "--ignore-not-found", "--wait=true"]);
            let gone = r.and_then(|_| {
                wait_until(Duration::from_secs(60), "the cluster-wide operator's pods to be gone", || {
                    Ok(self.pods()?.is_empty().then_some(()))
                })
            });
            if let Err(e) = gone {
                eprintln!("warning: cluster-wide operator in {} may still run: {e:#}", self.namespace);
            }
        }
        let name = self.cluster_rbac_name();
        if let Err(e) = self.kubectl.run(&["delete", "clusterrole,clusterrolebinding", &name, "--ignore-not-found"]) {
            eprintln!("warning: could not delete ClusterRole/ClusterRoleBinding {name}: {e:#}");
        }
    }
}

/// Why a pod will not become Ready without help (image missing, crash loop), if so.
fn failing(pod: &Value) -> Option<String> {
    let statuses = pod["status"]["containerStatuses"].as_array()?;
    statuses.iter().find_map(|s| {
        let reason = s["state"]["waiting"]["reason"].as_str()?;
        matches!(reason, "CrashLoopBackOff" | "ErrImagePull" | "ImagePullBackOff" | "ErrImageNeverPull")
            .then(|| format!("{reason}: {}", s["state"]["waiting"]["message"].as_str().unwrap_or("")))
    })
}

/// Deletes the cluster RBAC that in-cluster installs of earlier, killed test runs left behind:
/// `etcd-operator-e2e-*` whose namespace no longer exists.
fn sweep_stale_cluster_rbac(k: &Kubectl) {
    let Ok(list) = k.json(&["get", "clusterroles,clusterrolebindings", "-l", OPERATOR_SELECTOR]) else { return };
    for item in list["items"].as_array().cloned().unwrap_or_default() {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let Some(ns) = name.strip_prefix("etcd-operator-").filter(|ns| ns.starts_with("e2e-")) else { continue };
        if k.run(&["get", "namespace", ns, "-o", "name"]).is_err_and(|e| format!("{e:#}").contains("NotFound")) {
            let kind = if item["kind"] == "ClusterRole" { "clusterrole" } else { "clusterrolebinding" };
            let _ = k.run(&["delete", kind, name, "--ignore-not-found"]);
        }
    }
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
/// Like `check_keys`, the call is retried for a while: through the client Service it can land
/// on a member that was just removed (kube-proxy drops it from the Service a moment later).
pub fn member_list(endpoint: &str) -> Result<Vec<Vec<String>>> {
    let out =
        wait_until(Duration::from_secs(30), "a member list", || Ok(host_etcdctl(endpoint, &["member", "list"]).ok()))?;
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

/// Events of `name` by Event name → when last observed, to tell later ones apart.
pub fn event_marks(ns: &TestNamespace, name: &str) -> Result<std::collections::BTreeMap<String, String>> {
    Ok(events_v1(ns, name)?.into_iter().map(|e| (e.name, e.last)).collect())
}

/// Events of `name` that are new or were observed again since `before` (from `event_marks`).
pub fn events_since(
    ns: &TestNamespace,
    name: &str,
    before: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<EventRecord>> {
    Ok(events_v1(ns, name)?.into_iter().filter(|e| before.get(&e.name) != Some(&e.last)).collect())
}

/// A field of condition `type_` of an object, "" when absent.
pub fn cond_str(c: &Value, type_: &str, field: &str) -> String {
    condition(c, type_).and_then(|x| x[field].as_str()).unwrap_or("").to_string()
}

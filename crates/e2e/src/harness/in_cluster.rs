//! The operator installed into a test namespace from `etcd-operator manifests`, as a user
//! installs it, and the image it runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::operator::{log_dir, operator_bin};
use super::pods::{condition_true, stuck_container};
use crate::{Kubectl, TestNamespace, wait_until};

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
            crate::run(Command::new("bash").arg(&script).arg("operator").arg(&bin).arg(E2E_IMAGE))
                .map(|_| E2E_IMAGE.to_string())
                .map_err(|e| format!("cannot load the operator image (set E2E_OPERATOR_IMAGE to a loaded one): {e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
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
    /// `manifests --monitoring`: the PodMonitors, PrometheusRule and dashboard too (needs the
    /// Prometheus Operator's CRDs: `MONITORING=1 hack/cluster.sh up`).
    pub monitoring: bool,
}

impl Default for Install {
    fn default() -> Self {
        Install { replicas: 1, cluster_wide: false, standby: false, monitoring: false }
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
    /// Installed with `--monitoring` (its metrics reader's cluster RBAC goes on drop too).
    pub monitoring: bool,
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
        if opts.monitoring {
            args.push("--monitoring");
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
            monitoring: opts.monitoring,
            log: log_dir()?.join(format!("{}.log", ns.name)),
            seen: Default::default(),
        };
        // From here on, dropping `op` removes what was applied outside the namespace. Installs
        // at once on a cluster without the CRDs both create them: one gets AlreadyExists, and
        // applies again over the other's.
        let yaml = String::from_utf8(out.stdout)?;
        wait_until(Duration::from_secs(60), "the operator's manifests applied", || match ns.apply(&yaml) {
            Ok(_) => Ok(Some(())),
            Err(e) if format!("{e:#}").contains("AlreadyExists") => Ok(None),
            Err(e) => Err(e),
        })?;
        if opts.standby {
            wait_until(Duration::from_secs(120), "the operator to wait as a standby", || {
                let running = op.pods()?.iter().any(|p| p["status"]["phase"] == "Running");
                Ok((running && op.logs().contains("another replica leads")).then_some(()))
            })?;
            return Ok(op);
        }
        let pod = wait_until(Duration::from_secs(120), "an operator replica to lead and be Ready", || {
            for p in op.pods()? {
                if let Some(why) = stuck_container(&p, true) {
                    bail!("operator pod is failing: {why}\n{}", op.logs());
                }
                if condition_true(&p, "Ready") {
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
                self.kubectl.kubeconfig != Path::new(crate::DEFAULT_KUBECONFIG),
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
        let mut names = vec![self.cluster_rbac_name()];
        if self.monitoring {
            names.push(format!("etcd-operator-metrics-reader-{}", self.namespace));
        }
        for name in names {
            if let Err(e) = self.kubectl.run(&["delete", "clusterrole,clusterrolebinding", &name, "--ignore-not-found"])
            {
                eprintln!("warning: could not delete ClusterRole/ClusterRoleBinding {name}: {e:#}");
            }
        }
    }
}

/// Deletes the cluster RBAC that in-cluster installs of earlier, killed test runs left behind:
/// `etcd-operator-e2e-*` whose namespace no longer exists.
fn sweep_stale_cluster_rbac(k: &Kubectl) {
    let Ok(list) = k.json(&["get", "clusterroles,clusterrolebindings", "-l", OPERATOR_SELECTOR]) else { return };
    for item in list["items"].as_array().cloned().unwrap_or_default() {
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        // `etcd-operator-<ns>`, and `etcd-operator-metrics-reader-<ns>` of `--monitoring`.
        let ns = name.strip_prefix("etcd-operator-metrics-reader-").or_else(|| name.strip_prefix("etcd-operator-"));
        let Some(ns) = ns.filter(|ns| ns.starts_with("e2e-")) else { continue };
        if k.run(&["get", "namespace", ns, "-o", "name"]).is_err_and(|e| format!("{e:#}").contains("NotFound")) {
            let kind = if item["kind"] == "ClusterRole" { "clusterrole" } else { "clusterrolebinding" };
            let _ = k.run(&["delete", kind, name, "--ignore-not-found"]);
        }
    }
}

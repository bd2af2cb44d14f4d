//! The operator installed with its Helm chart on the real cluster, the way a user does it:
//! `helm install` into a fresh namespace (namespaced, managing only that namespace, the image of
//! this build), the example EtcdCluster reaches 3 ready members; `helm upgrade` to another image
//! tag rolls the operator and no etcd pod; `helm uninstall` removes the operator and leaves the
//! EtcdCluster, its pods and the CRDs alone.
//!
//! Helm is `$HELM` (hack/test.sh exports it from hack/build-helm.sh); without it the test fails
//! saying so. The release, its cluster-scoped RBAC and the namespace are removed at the end,
//! also when the test fails (`Release`'s and `TestNamespace`'s Drop).

mod common;
mod helm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use common::*;
use e2e::{Kubectl, TestNamespace, wait_until};
use serde_json::Value;

const RELEASE: &str = "etcd-operator";
const EXAMPLE: &str = "example-etcd-cluster";

/// The Helm release of one test, uninstalled (and its cluster RBAC deleted, should Helm have
/// failed half-way) when dropped.
struct Release {
    kubectl: Kubectl,
    namespace: String,
}

impl Release {
    fn helm(&self, args: &[&str]) -> Result<String> {
        let mut c = helm::helm()?;
        c.args(args).arg("--namespace").arg(&self.namespace).arg("--kubeconfig").arg(&self.kubectl.kubeconfig);
        helm::output(&mut c)
    }

    /// `helm install` or `helm upgrade` of the chart with these values, waiting for the
    /// Deployment to be ready.
    fn deploy(&self, verb: &str, set: &[String]) -> Result<String> {
        let chart = helm::chart_dir();
        let mut args = vec![verb, RELEASE, chart.to_str().context("chart path")?, "--wait", "--timeout", "180s"];
        for s in set {
            args.extend(["--set", s.as_str()]);
        }
        // Before 1.25 the apiserver refuses the CRDs' validation rules: the operator installs its
        // CRDs itself (docs/src/install/helm.md).
        if verb == "install" && !self.kubectl.has_crd_validation_rules()? {
            args.push("--skip-crds");
        }
        self.helm(&args)
    }

    fn operator_pods(&self) -> Result<Vec<Value>> {
        let v = self.kubectl.json(&["-n", &self.namespace, "get", "pods", "-l", OPERATOR_SELECTOR])?;
        Ok(v["items"].as_array().cloned().unwrap_or_default())
    }

    fn operator_logs(&self) -> String {
        self.kubectl
            .run(&["-n", &self.namespace, "logs", "-l", OPERATOR_SELECTOR, "--tail=60", "--prefix"])
            .unwrap_or_else(|e| format!("(no logs: {e:#})"))
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        let _ = self.helm(&["uninstall", RELEASE, "--ignore-not-found", "--wait", "--timeout", "60s"]);
        let name = format!("etcd-operator-{}", self.namespace);
        if let Err(e) = self.kubectl.run(&["delete", "clusterrole,clusterrolebinding", &name, "--ignore-not-found"]) {
            eprintln!("warning: could not delete ClusterRole/ClusterRoleBinding {name}: {e:#}");
        }
    }
}

/// What must not change about a member pod: UID, etcd's start time and restart count.
fn member_identities(ns: &TestNamespace) -> Result<BTreeMap<String, String>> {
    Ok(member_pods(ns, EXAMPLE)?
        .iter()
        .map(|p| {
            let etcd =
                p["status"]["containerStatuses"].as_array().and_then(|cs| cs.iter().find(|c| c["name"] == "etcd"));
            let started = etcd.map(|c| c["state"]["running"]["startedAt"].clone()).unwrap_or(Value::Null);
            let restarts = etcd.map(|c| c["restartCount"].clone()).unwrap_or(Value::Null);
            let name = p["metadata"]["name"].as_str().unwrap_or_default().to_string();
            (name, format!("uid={} started={started} restarts={restarts}", p["metadata"]["uid"]))
        })
        .collect())
}

fn uids(pods: &[Value]) -> Vec<String> {
    pods.iter().map(|p| p["metadata"]["uid"].as_str().unwrap_or_default().to_string()).collect()
}

fn example_manifest() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/example-etcd-cluster.yaml")
}

#[test]
fn helm_install_upgrade_and_uninstall_leave_the_etcd_cluster_alone() -> Result<()> {
    helm::helm_bin()?; // no Helm: fail before creating anything
    let image = operator_image()?;
    let (repo, tag) = image.rsplit_once(':').filter(|(_, t)| !t.contains('/')).context("image without a tag")?;
    let ns = TestNamespace::create("e2e-helm")?;
    let release = Release { kubectl: ns.kubectl.clone(), namespace: ns.name.clone() };
    let r = (|| -> Result<()> {
        // Namespaced: the release namespace is the one it manages (watchNamespace's default).
        release.deploy("install", &[format!("image.repository={repo}"), format!("image.tag={tag}")])?;
        let before_upgrade = release.operator_pods()?;
        ensure!(before_upgrade.len() == 1, "operator pods: {}", before_upgrade.len());
        let cr = ns.kubectl.json(&["get", "clusterrole", &format!("etcd-operator-{}", ns.name)])?;
        ensure!(cr["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", "{cr}");

        ns.run(&["apply", "-f", example_manifest().to_str().context("path")?])?;
        wait_healthy(&ns, EXAMPLE, 3, Duration::from_secs(240))?;
        let members = member_identities(&ns)?;
        ensure!(members.len() == 3, "members: {members:?}");

        // The same binary under a second tag: a new image for Kubernetes.
        let image2 = format!("{repo}:{tag}-helm-upgrade");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/images.sh");
        e2e::run(Command::new("bash").arg(script).arg("operator").arg(operator_bin()).arg(&image2))?;
        release.deploy("upgrade", &[format!("image.repository={repo}"), format!("image.tag={tag}-helm-upgrade")])?;
        let old = uids(&before_upgrade);
        let leader = wait_until(Duration::from_secs(120), "the upgraded operator to lead", || {
            let pods = release.operator_pods()?;
            let new: Vec<&Value> = pods
                .iter()
                .filter(|p| !old.contains(&p["metadata"]["uid"].as_str().unwrap_or("").to_string()))
                .collect();
            if new.len() != pods.len() || new.is_empty() {
                return Ok(None);
            }
            for p in &new {
                let c = &p["spec"]["containers"][0];
                ensure!(c["image"] == image2.as_str(), "operator pod runs {}", c["image"]);
                let init = c["env"].as_array().into_iter().flatten().find(|e| e["name"] == "ETCD_OPERATOR_INIT_IMAGE");
                ensure!(init.is_some_and(|e| e["value"] == image2.as_str()), "init image env: {init:?}");
            }
            let lease = ns.json(&["get", "lease", "etcd-operator"])?;
            let holder = lease["spec"]["holderIdentity"].as_str().unwrap_or_default().to_string();
            Ok(new
                .iter()
                .any(|p| holder.ends_with(&format!("/{}", p["metadata"]["name"].as_str().unwrap_or(""))))
                .then_some(holder))
        })?;
        // The new leader reconciled the cluster (its per-cluster gauges, set at the end of every
        // reconcile, say 3 ready members), and went on for a while: no etcd pod changed.
        let pod = leader.rsplit('/').next().unwrap_or_default();
        let ip = ns.json(&["get", "pod", pod])?["status"]["podIP"].as_str().context("no pod IP")?.to_string();
        let gauge = format!(r#"etcd_operator_cluster_ready_members{{namespace="{}",name="{EXAMPLE}"}}"#, ns.name);
        // The chart serves /metrics to a token allowed to get it (`--metrics-auth=kubernetes`).
        let (token, _reader) = metrics_reader(&ns)?;
        let bearer = format!("Authorization: Bearer {token}");
        wait_until(Duration::from_secs(60), "the new leader to have reconciled the cluster", || {
            let url = format!("http://{ip}:8080/metrics");
            let out = Command::new("curl").args(["-sf", "--max-time", "5", "-H", &bearer, &url]).output()?;
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let value = text.lines().find_map(|l| l.strip_prefix(&gauge)?.trim().parse::<f64>().ok());
            Ok((value == Some(3.0)).then_some(()))
        })?;
        std::thread::sleep(Duration::from_secs(20));
        wait_healthy(&ns, EXAMPLE, 3, Duration::from_secs(30))?;
        let after = member_identities(&ns)?;
        ensure!(
            after == members,
            "etcd pods changed by the operator upgrade (leader {leader}):\nbefore {members:?}\nafter  {after:?}"
        );

        // Uninstall: the operator goes, the EtcdCluster and its members stay.
        release.helm(&["uninstall", RELEASE, "--wait", "--timeout", "120s"])?;
        wait_until(Duration::from_secs(60), "the operator pods to be gone", || {
            Ok(release.operator_pods()?.is_empty().then_some(()))
        })?;
        for kind in ["deployment", "serviceaccount", "role", "rolebinding"] {
            let left = ns.run(&["get", kind, "etcd-operator", "--ignore-not-found", "-o", "name"])?;
            ensure!(left.trim().is_empty(), "helm uninstall left {left}");
        }
        let cr_left = ns.kubectl.run(&[
            "get",
            "clusterrole",
            &format!("etcd-operator-{}", ns.name),
            "--ignore-not-found",
            "-o",
            "name",
        ])?;
        ensure!(cr_left.trim().is_empty(), "ClusterRole left: {cr_left}");
        std::thread::sleep(Duration::from_secs(10));
        cluster(&ns, EXAMPLE).context("the EtcdCluster after helm uninstall")?;
        ns.kubectl
            .run(&["get", "crd", "etcdclusters.etcd.database.coreos.com"])
            .context("the CRD after helm uninstall")?;
        let left = member_identities(&ns)?;
        ensure!(left == members, "etcd pods changed by helm uninstall:\nbefore {members:?}\nafter  {left:?}");
        let ep = client_endpoint(&ns, EXAMPLE)?;
        write_keys(&ep, "after-uninstall", 3)?;
        check_keys(&ep, "after-uninstall", 3)?;
        Ok(())
    })();
    if let Err(e) = r {
        let pods = ns.run(&["get", "pods", "-o", "wide"]).unwrap_or_default();
        let events = ns.run(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
        let logs = release.operator_logs();
        bail!("{e:#}\n--- operator logs:\n{logs}\n--- pods:\n{pods}\n--- events:\n{events}");
    }
    Ok(())
}

/// A ServiceAccount token allowed to get `/metrics` (a ClusterRole and binding removed when the
/// guard drops), as a Prometheus is given one.
fn metrics_reader(ns: &TestNamespace) -> Result<(String, MetricsReader)> {
    ns.run(&["create", "serviceaccount", "scraper"])?;
    let token = ns.kubectl.service_account_token(&ns.name, "scraper")?;
    let name = format!("e2e-metrics-{}", ns.name);
    let guard = MetricsReader(ns.kubectl.clone(), name.clone());
    ns.kubectl.run(&["create", "clusterrole", &name, "--verb=get", "--non-resource-url=/metrics"])?;
    let sa = format!("--serviceaccount={}:scraper", ns.name);
    ns.kubectl.run(&["create", "clusterrolebinding", &name, &format!("--clusterrole={name}"), &sa])?;
    Ok((token, guard))
}

struct MetricsReader(Kubectl, String);

impl Drop for MetricsReader {
    fn drop(&mut self) {
        let _ = self.0.run(&["delete", "clusterrolebinding,clusterrole", &self.1, "--ignore-not-found"]);
    }
}

//! kubectl against the local cluster, running commands, and polling against a deadline.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// The admin kubeconfig `hack/cluster.sh up` writes (`$STATE_DIR/kubeconfig`).
pub const DEFAULT_KUBECONFIG: &str = "/var/lib/etcd-operator-dev/kubeconfig";
/// Where `hack/cluster.sh up` records the Kubernetes version it started (`1.37.2`, `1.20.2`).
pub const K8S_VERSION_FILE: &str = "/var/lib/etcd-operator-dev/k8s-version";

/// kubectl matching the local cluster's server, built by `hack/build-kubernetes.sh`.
pub fn default_kubectl() -> Option<PathBuf> {
    let version = std::fs::read_to_string(K8S_VERSION_FILE).ok()?;
    let path = PathBuf::from(format!("/var/cache/etcd-operator-dev/kubernetes-{}/bin/kubectl", version.trim()));
    path.is_file().then_some(path)
}

/// Polls `check` every 250 ms until it returns `Some`, or fails after `timeout` with the last
/// error (if any) in the message.
pub fn wait_until<T>(timeout: Duration, what: &str, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last_err = None;
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() >= deadline {
            return Err(match last_err {
                Some(e) => e.context(format!("timed out after {timeout:?} waiting for {what}")),
                None => anyhow!("timed out after {timeout:?} waiting for {what}"),
            });
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A name unique to this process and moment, usable as a namespace name (`prefix` <= 40 chars).
pub fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{prefix}-{}-{:x}", std::process::id(), nanos % 0xffff_ffff)
}

/// Runs a command and returns its stdout; an error carries the command line and its stderr.
pub fn run(cmd: &mut Command) -> Result<String> {
    run_with_stdin(cmd, None)
}

pub(crate) fn run_with_stdin(cmd: &mut Command, stdin: Option<&str>) -> Result<String> {
    let desc = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("cannot run {desc}"))?;
    if let Some(input) = stdin {
        child.stdin.take().expect("piped stdin").write_all(input.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{desc} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim(),
            String::from_utf8_lossy(&out.stdout).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl` against the local cluster.
#[derive(Clone, Debug)]
pub struct Kubectl {
    pub kubectl: PathBuf,
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    /// `$KUBECONFIG` (or the cluster's default kubeconfig) and `$KUBECTL` (or the local
    /// cluster's build, or `kubectl` on PATH). Fails when the kubeconfig does not exist: no cluster, no test.
    pub fn from_env() -> Result<Self> {
        let kubeconfig = std::env::var_os("KUBECONFIG")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_KUBECONFIG));
        if !kubeconfig.is_file() {
            bail!("kubeconfig {} not found: start the cluster with `hack/cluster.sh up`", kubeconfig.display());
        }
        let kubectl = std::env::var_os("KUBECTL")
            .map(PathBuf::from)
            .or_else(default_kubectl)
            .unwrap_or_else(|| PathBuf::from("kubectl"));
        Ok(Kubectl { kubectl, kubeconfig })
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.arg("--kubeconfig").arg(&self.kubeconfig).arg("--request-timeout=20s");
        c
    }

    /// `kubectl ARGS`; a `get ... -o json` of a common kind is asked of the API server directly
    /// (`api_get`: the same answer without a kubectl process).
    pub fn run(&self, args: &[&str]) -> Result<String> {
        if let Some(out) = crate::api_get::get(&self.kubeconfig, args)? {
            return Ok(out);
        }
        run(self.command().args(args))
    }

    pub fn json(&self, args: &[&str]) -> Result<Value> {
        let out = self.run(&[args, &["-o", "json"]].concat())?;
        serde_json::from_str(&out).with_context(|| format!("kubectl {args:?}: not JSON"))
    }

    pub fn apply(&self, manifest: &str) -> Result<()> {
        run_with_stdin(self.command().args(["apply", "-f", "-"]), Some(manifest)).map(drop)
    }

    /// The server's minor version (20 for 1.20.2, 37 for 1.37.2), asked once per process.
    pub fn server_minor(&self) -> Result<u32> {
        static MINOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        if let Some(m) = MINOR.get() {
            return Ok(*m);
        }
        let v: Value = serde_json::from_str(&self.run(&["get", "--raw", "/version"])?)?;
        // "minor" may carry a "+" (vendor builds); the digits are the version.
        let minor: String = v["minor"].as_str().unwrap_or_default().chars().take_while(char::is_ascii_digit).collect();
        let m = minor.parse().with_context(|| format!("no minor version in /version: {v}"))?;
        Ok(*MINOR.get_or_init(|| m))
    }

    /// Whether the apiserver runs CRD validation rules (CEL), as the operator detects it: its
    /// OpenAPI v3 document of apiextensions.k8s.io/v1 names `x-kubernetes-validations`.
    pub fn has_crd_validation_rules(&self) -> Result<bool> {
        static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        if let Some(h) = HAS.get() {
            return Ok(*h);
        }
        let out = self.command().args(["get", "--raw", "/openapi/v3/apis/apiextensions.k8s.io/v1"]).output()?;
        let has = out.status.success() && String::from_utf8_lossy(&out.stdout).contains("\"x-kubernetes-validations\"");
        // CEL is on by default from 1.25: a "no" there is a broken probe, not a fact.
        if !has && self.server_minor()? >= 25 {
            bail!(
                "Kubernetes 1.{} has CEL, but its OpenAPI v3 document does not say so: {}",
                self.server_minor()?,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(*HAS.get_or_init(|| has))
    }

    /// Waits until `namespace`'s ServiceAccount `name` can run pods: it exists and, before 1.24
    /// (token Secrets still made by the token controller; 1.20 refuses pods without one: "no API
    /// token found for service account"), has its token Secret.
    pub fn wait_service_account(&self, namespace: &str, name: &str) -> Result<()> {
        let needs_secret = self.server_minor()? < 24;
        wait_until(Duration::from_secs(60), &format!("ServiceAccount {namespace}/{name}"), || {
            let Ok(sa) = self.json(&["-n", namespace, "get", "serviceaccount", name]) else { return Ok(None) };
            Ok((!needs_secret || sa["secrets"][0]["name"].is_string()).then_some(()))
        })
    }

    /// A token of ServiceAccount `namespace/name` from the TokenRequest API (every version the
    /// project runs on serves it; `kubectl create token` is not in kubectl 1.20).
    pub fn service_account_token(&self, namespace: &str, name: &str) -> Result<String> {
        let req =
            r#"{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":7200}}"#;
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
        let out = run_with_stdin(self.command().args(["create", "--raw", &path, "-f", "-"]), Some(req))?;
        let v: Value = serde_json::from_str(&out).with_context(|| format!("TokenRequest answer: {out}"))?;
        v["status"]["token"].as_str().map(str::to_string).with_context(|| format!("no token in {v}"))
    }

    /// The node's Ready condition status ("True", "False", "Unknown").
    pub fn node_ready_statuses(&self) -> Result<Vec<(String, String)>> {
        let nodes = self.json(&["get", "nodes"])?;
        let items = nodes["items"].as_array().context("no items in node list")?;
        Ok(items
            .iter()
            .map(|n| {
                let name = n["metadata"]["name"].as_str().unwrap_or_default().to_string();
                let ready = n["status"]["conditions"]
                    .as_array()
                    .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
                    .and_then(|c| c["status"].as_str())
                    .unwrap_or("Unknown")
                    .to_string();
                (name, ready)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_until_reports_the_last_error() {
        let err =
            wait_until(Duration::from_millis(300), "nothing", || -> Result<Option<()>> { bail!("boom") }).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("waiting for nothing") && msg.contains("boom"), "{msg}");
    }

    #[test]
    fn unique_names_are_valid_namespace_names() {
        let n = unique_name("e2e-dns");
        assert!(n.len() <= 63 && n.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'), "{n}");
    }
}

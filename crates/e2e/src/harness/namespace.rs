//! A namespace per test or bench sample, deleted on every way out: dropped (a failed or
//! panicking test: deletion requested, not waited for), [`TestNamespace::finish`] (deleted and
//! waited for, so the next bench sample does not run beside a teardown), or
//! [`delete_live_namespaces`] from a signal handler (the bench's Ctrl-C). A SIGKILLed process
//! runs none of these: its namespaces stay until deleted by hand (`kubectl get ns`; their names
//! start with the test's prefix and carry the process id).

use std::io::Write;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use super::pods::stuck_container;
use crate::{CLUSTER_DOMAIN, Kubectl, condition_true, manifests::one_shot_pod, unique_name, wait_until};

/// Namespaces this process created and has not deleted yet.
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn live() -> std::sync::MutexGuard<'static, Vec<String>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Requests deletion of every namespace this process created and has not deleted yet (for a
/// signal handler, right before the process exits). Writes what it did to stderr, ignoring
/// write errors (the reader of a pipe may have been interrupted too). Holds the list while it
/// deletes: a second caller (another handler of the same signal) waits, finds nothing left and
/// does not exit the process half-way through the first one's deletions.
pub fn delete_live_namespaces(kubectl: &Kubectl) {
    let mut namespaces = live();
    for ns in namespaces.drain(..) {
        let msg = match kubectl.run(&["delete", "namespace", &ns, "--wait=false"]) {
            Ok(_) => format!("deleted namespace {ns}\n"),
            Err(e) => format!("could not delete namespace {ns}: {e:#}\n"),
        };
        let _ = std::io::stderr().write_all(msg.as_bytes());
    }
}

/// From the first namespace on: SIGTERM, SIGINT or SIGHUP (a CI timeout, Ctrl-C, a closed
/// terminal) deletes this process's live namespaces ([`delete_live_namespaces`]), then ends the
/// process by that signal, as the signal itself would have. A signal the process ignores (SIGHUP
/// under `nohup`) stays ignored. A SIGKILL still leaves them.
fn delete_on_signal(kubectl: &Kubectl) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let kubectl = kubectl.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("namespace-cleanup".into()).spawn(move || {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_io().build() else { return };
            rt.block_on(async {
                let handle = |kind: SignalKind| {
                    if crate::process::signal_ignored(kind.as_raw_value()) {
                        return None;
                    }
                    signal(kind).map_err(|e| eprintln!("warning: no handler for {kind:?}: {e}")).ok()
                };
                let mut term = handle(SignalKind::terminate());
                let mut int = handle(SignalKind::interrupt());
                let mut hup = handle(SignalKind::hangup());
                let _ = ready_tx.send(());
                let n = tokio::select! {
                    Some(_) = async { term.as_mut()?.recv().await } => libc::SIGTERM,
                    Some(_) = async { int.as_mut()?.recv().await } => libc::SIGINT,
                    Some(_) = async { hup.as_mut()?.recv().await } => libc::SIGHUP,
                    else => return,
                };
                let _ =
                    std::io::stderr().write_all(format!("\nsignal {n}: deleting this test's namespaces\n").as_bytes());
                delete_live_namespaces(&kubectl);
                crate::process::die_by(n);
            });
        });
        // The handlers are in place before the first namespace exists.
        if spawned.is_ok() {
            let _ = ready_rx.recv_timeout(Duration::from_secs(5));
        }
    });
}

/// A namespace for one test, deleted (without waiting) when dropped.
pub struct TestNamespace {
    pub kubectl: Kubectl,
    pub name: String,
    deleted: bool,
}

impl TestNamespace {
    /// Creates the namespace (kubectl from the environment, [`Kubectl::from_env`]) and waits
    /// until its `default` ServiceAccount can run pods.
    pub fn create(prefix: &str) -> Result<Self> {
        Self::create_with(&Kubectl::from_env()?, prefix)
    }

    /// [`TestNamespace::create`] with this kubectl.
    pub fn create_with(kubectl: &Kubectl, prefix: &str) -> Result<Self> {
        delete_on_signal(kubectl);
        let name = unique_name(prefix);
        kubectl.run(&["create", "namespace", &name]).with_context(|| format!("creating namespace {name}"))?;
        live().push(name.clone());
        // From here on, dropping `ns` deletes the namespace.
        let ns = TestNamespace { kubectl: kubectl.clone(), name, deleted: false };
        ns.kubectl.wait_service_account(&ns.name, "default")?;
        Ok(ns)
    }

    /// Deletes the namespace and waits (bounded) until the API no longer has it.
    pub fn finish(mut self, timeout: Duration) -> Result<()> {
        // Pods first, waiting for them: the namespace controller retries a namespace whose pods
        // are still terminating with a growing back-off, which made deletions take minutes.
        let secs = format!("--timeout={}s", timeout.as_secs());
        if let Err(e) = self.run(&["delete", "pods", "--all", "--wait=true", &secs]) {
            eprintln!("warning: deleting the pods of {}: {e:#}", self.name);
        }
        self.kubectl.run(&["delete", "namespace", &self.name, "--wait=false"])?;
        self.forget();
        wait_until(timeout, &format!("namespace {} to be deleted", self.name), || {
            match self.kubectl.run(&["get", "namespace", &self.name, "-o", "name"]) {
                Ok(_) => Ok(None),
                Err(e) if format!("{e:#}").contains("NotFound") => Ok(Some(())),
                Err(e) => Err(e),
            }
        })
    }

    /// Deletion was requested: nothing left to do on drop or on a signal.
    fn forget(&mut self) {
        self.deleted = true;
        live().retain(|n| *n != self.name);
    }

    /// kubectl with `-n <namespace>` in front of `args`.
    pub fn run(&self, args: &[&str]) -> Result<String> {
        self.kubectl.run(&[&["-n", self.name.as_str()], args].concat())
    }

    pub fn json(&self, args: &[&str]) -> Result<Value> {
        self.kubectl.json(&[&["-n", self.name.as_str()], args].concat())
    }

    pub fn apply(&self, manifest: &str) -> Result<()> {
        self.kubectl.apply(manifest)
    }

    /// `<name>.<namespace>.svc.cluster.local`
    pub fn service_fqdn(&self, service: &str) -> String {
        format!("{service}.{}.svc.{CLUSTER_DOMAIN}", self.name)
    }

    pub fn pod(&self, name: &str) -> Result<Value> {
        self.json(&["get", "pod", name])
    }

    /// Waits for the pod's Ready condition; fails early when a container keeps crashing.
    pub fn wait_pod_ready(&self, name: &str, timeout: Duration) -> Result<Value> {
        wait_until(timeout, &format!("pod {}/{name} Ready", self.name), || {
            let pod = self.pod(name)?;
            if let Some(reason) = stuck_container(&pod, true) {
                bail!("pod {name} is failing ({reason}); logs:\n{}", self.logs(name).unwrap_or_default());
            }
            Ok(condition_true(&pod, "Ready").then_some(pod))
        })
    }

    /// Waits until a `restartPolicy: Never` pod finishes; returns its logs, or an error with the
    /// logs when it failed.
    pub fn wait_pod_succeeded(&self, name: &str, timeout: Duration) -> Result<String> {
        let phase = wait_until(timeout, &format!("pod {}/{name} to finish", self.name), || {
            let pod = self.pod(name)?;
            Ok(match pod["status"]["phase"].as_str() {
                Some(p @ ("Succeeded" | "Failed")) => Some(p.to_string()),
                _ => None,
            })
        })?;
        let logs = self.logs(name)?;
        if phase != "Succeeded" {
            bail!("pod {}/{name} failed; logs:\n{logs}", self.name);
        }
        Ok(logs)
    }

    pub fn logs(&self, pod: &str) -> Result<String> {
        self.run(&["logs", pod])
    }

    /// `kubectl exec POD -- CMD...` (no shell needed in the image).
    pub fn exec(&self, pod: &str, cmd: &[&str]) -> Result<String> {
        self.run(&[&["exec", pod, "--"], cmd].concat())
    }

    /// Runs CMD to completion in a new `restartPolicy: Never` pod and returns its logs.
    pub fn run_pod(&self, name: &str, image: &str, cmd: &[&str], timeout: Duration) -> Result<String> {
        self.apply(&one_shot_pod(&self.name, name, image, cmd))?;
        self.wait_pod_succeeded(name, timeout)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.deleted {
            return;
        }
        if let Err(e) = self.kubectl.run(&["delete", "namespace", &self.name, "--wait=false"]) {
            eprintln!("warning: could not delete namespace {}: {e:#}", self.name);
        }
        self.forget();
    }
}

//! The Kubernetes side of the bench: namespaces and operator processes that are cleaned up on
//! every exit path (including Ctrl-C), manifests, and the parsed view of pods and status.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::{CLUSTER_DOMAIN, Kubectl, unique_name, wait_until};
use serde_json::Value;

/// What an interrupted run must undo: namespaces it created, operator processes it started.
struct Cleanup {
    namespaces: Vec<String>,
    pids: Vec<u32>,
}

static CLEANUP: Mutex<Cleanup> = Mutex::new(Cleanup { namespaces: Vec::new(), pids: Vec::new() });

fn registry() -> std::sync::MutexGuard<'static, Cleanup> {
    CLEANUP.lock().unwrap_or_else(|e| e.into_inner())
}

/// Another process of the bench (a `kubectl --watch`) to stop on SIGINT/SIGTERM.
pub fn track_pid(pid: u32) {
    registry().pids.push(pid);
}

/// The process has ended: no longer ours to stop.
pub fn untrack_pid(pid: u32) {
    registry().pids.retain(|p| *p != pid);
}

/// On SIGINT/SIGTERM: stop the operators and request deletion of every namespace still alive.
pub fn cleanup_everything(kubectl: &Kubectl) {
    let (namespaces, pids) = {
        let mut r = registry();
        (std::mem::take(&mut r.namespaces), std::mem::take(&mut r.pids))
    };
    for pid in pids {
        let _ = Command::new("kill").arg(pid.to_string()).stderr(Stdio::null()).status();
    }
    for ns in namespaces {
        // Not eprintln!: when stderr is a pipe whose reader was interrupted too, a failed write
        // must not stop the clean-up.
        let msg = match kubectl.run(&["delete", "namespace", &ns, "--wait=false"]) {
            Ok(_) => format!("bench: deleted namespace {ns}\n"),
            Err(e) => format!("bench: could not delete namespace {ns}: {e:#}\n"),
        };
        let _ = std::io::stderr().write_all(msg.as_bytes());
    }
}

/// A fresh namespace for one sample. `finish` deletes it and waits until it is gone; dropping it
/// (error paths) requests the deletion without waiting.
pub struct Ns {
    pub kubectl: Kubectl,
    pub name: String,
    deleted: bool,
}

impl Ns {
    pub fn create(kubectl: &Kubectl, prefix: &str) -> Result<Ns> {
        let name = unique_name(prefix);
        kubectl.run(&["create", "namespace", &name]).with_context(|| format!("creating namespace {name}"))?;
        registry().namespaces.push(name.clone());
        let ns = Ns { kubectl: kubectl.clone(), name, deleted: false };
        kubectl.wait_service_account(&ns.name, "default")?;
        Ok(ns)
    }

    pub fn run(&self, args: &[&str]) -> Result<String> {
        self.kubectl.run(&[&["-n", self.name.as_str()], args].concat())
    }

    pub fn json(&self, args: &[&str]) -> Result<Value> {
        self.kubectl.json(&[&["-n", self.name.as_str()], args].concat())
    }

    pub fn apply(&self, manifest: &str) -> Result<()> {
        self.kubectl.apply(manifest)
    }

    /// Delete the namespace and wait (bounded) until the API no longer has it, so the next
    /// sample does not run next to a teardown.
    pub fn finish(mut self, timeout: Duration) -> Result<()> {
        // Pods first, waiting for them: the namespace controller retries a namespace whose pods
        // are still terminating with a growing back-off, which made deletions take minutes.
        let secs = format!("--timeout={}s", timeout.as_secs());
        if let Err(e) = self.run(&["delete", "pods", "--all", "--wait=true", &secs]) {
            eprintln!("bench: warning: deleting the pods of {}: {e:#}", self.name);
        }
        self.kubectl.run(&["delete", "namespace", &self.name, "--wait=false"])?;
        self.deleted = true;
        let r = wait_until(timeout, &format!("namespace {} to be deleted", self.name), || {
            match self.kubectl.run(&["get", "namespace", &self.name, "-o", "name"]) {
                Ok(_) => Ok(None),
                Err(e) if format!("{e:#}").contains("NotFound") => Ok(Some(())),
                Err(e) => Err(e),
            }
        });
        registry().namespaces.retain(|n| *n != self.name);
        r
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        if !self.deleted {
            if let Err(e) = self.kubectl.run(&["delete", "namespace", &self.name, "--wait=false"]) {
                eprintln!("bench: warning: could not delete namespace {}: {e:#}", self.name);
            }
            registry().namespaces.retain(|n| *n != self.name);
        }
    }
}

/// The operator under test as a process on this machine, scoped to one namespace; killed when
/// dropped. It logs JSON so the bench can read the time of each action it took.
pub struct Operator {
    child: Child,
    pub log: PathBuf,
}

/// The operator's log filter in the timed samples: its debug lines say what it planned.
pub const SAMPLE_LOG: &str = "info,etcd_operator=debug";

impl Operator {
    pub fn start(bin: &Path, ns: &Ns, log_dir: &Path, init_image: &str) -> Result<Operator> {
        Operator::start_with_log(bin, ns, log_dir, init_image, SAMPLE_LOG)
    }

    /// `start` with another `RUST_LOG`.
    pub fn start_with_log(bin: &Path, ns: &Ns, log_dir: &Path, init_image: &str, rust_log: &str) -> Result<Operator> {
        std::fs::create_dir_all(log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
        let log = log_dir.join(format!("{}.log", ns.name));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(bin)
            // Port 0: never collide with another operator (an e2e run) on this machine's :8080.
            .args(["run", "--namespace", &ns.name, "--log-format", "json", "--listen-address", "127.0.0.1:0"])
            .env("KUBECONFIG", &ns.kubectl.kubeconfig)
            .env("RUST_LOG", rust_log)
            .env("ETCD_OPERATOR_INIT_IMAGE", init_image)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start the operator {}", bin.display()))?;
        registry().pids.push(child.id());
        let mut op = Operator { child, log };
        let started = Instant::now();
        loop {
            if op.log_text().contains("watch caches synced") {
                return Ok(op);
            }
            if let Some(status) = op.child.try_wait()? {
                bail!(
                    "the operator exited ({status}) before syncing its caches; log {}:\n{}",
                    op.log.display(),
                    op.log_text()
                );
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the operator did not log \"watch caches synced\" within 60s; log {}:\n{}",
                    op.log.display(),
                    op.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id (for /proc/<pid>/status and /proc/<pid>/stat).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let pid = self.child.id();
        let _ = self.child.kill();
        let _ = self.child.wait();
        registry().pids.retain(|p| *p != pid);
    }
}

// --- manifests ---------------------------------------------------------------------------------

pub fn cluster_manifest(ns: &str, name: &str, size: usize, version: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  size: {size}\n  version: \"{version}\"\n"
    )
}

fn yaml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| Value::from(s.as_str()).to_string()).collect();
    format!("[{}]", quoted.join(", "))
}

/// What a user would write by hand for a 3-member etcd without an operator: a headless Service
/// that publishes not-ready addresses and `size` pods with a static `--initial-cluster`, data in
/// emptyDir, the same readiness probe as the operator's members. No DNS wait: etcd exits when
/// its peers' names do not resolve yet and the kubelet restarts it, which is part of the time.
pub fn static_cluster_manifest(ns: &str, service: &str, size: usize, image: &str) -> String {
    let host = |i: usize| format!("{service}-{i}.{service}.{ns}.svc.{CLUSTER_DOMAIN}");
    let initial: Vec<String> = (0..size).map(|i| format!("{service}-{i}=http://{}:2380", host(i))).collect();
    let mut out = e2e::headless_service(ns, service);
    for i in 0..size {
        let name = format!("{service}-{i}");
        let cmd = vec![
            "/usr/local/bin/etcd".to_string(),
            format!("--name={name}"),
            "--data-dir=/var/lib/etcd/data".to_string(),
            "--listen-client-urls=http://0.0.0.0:2379".to_string(),
            format!("--advertise-client-urls=http://{}:2379", host(i)),
            "--listen-peer-urls=http://0.0.0.0:2380".to_string(),
            format!("--initial-advertise-peer-urls=http://{}:2380", host(i)),
            format!("--initial-cluster={}", initial.join(",")),
            "--initial-cluster-state=new".to_string(),
            format!("--initial-cluster-token={ns}"),
        ];
        out.push_str(&format!(
            r#"---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: {ns}
  labels: {{ app: {service} }}
spec:
  hostname: {name}
  subdomain: {service}
  enableServiceLinks: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: etcd
    image: {image}
    imagePullPolicy: IfNotPresent
    command: {cmd}
    ports:
    - {{ name: client, containerPort: 2379 }}
    - {{ name: peer, containerPort: 2380 }}
    readinessProbe:
      httpGet: {{ path: /health, port: 2379 }}
      periodSeconds: 5
      timeoutSeconds: 5
      failureThreshold: 3
    volumeMounts:
    - {{ name: data, mountPath: /var/lib/etcd }}
  volumes:
  - name: data
    emptyDir: {{}}
"#,
            cmd = yaml_list(&cmd)
        ));
    }
    out
}

// --- what kubectl shows ------------------------------------------------------------------------

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
    pub raw: Value,
}

fn condition(pod: &Value, type_: &str) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == type_ && c["status"] == "True"))
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
            ready: condition(p, "Ready"),
            initialized: condition(p, "Initialized"),
            restarts: p["status"]["containerStatuses"]
                .as_array()
                .map(|cs| cs.iter().filter_map(|c| c["restartCount"].as_i64()).sum())
                .unwrap_or(0),
            image,
            raw: p.clone(),
        }
    }

    /// A container that cannot start for a reason waiting will not fix (a missing image, a bad
    /// spec): the bench stops with this instead of running into its timeout.
    pub fn hopeless(&self) -> Option<String> {
        let all = ["initContainerStatuses", "containerStatuses"];
        all.iter().flat_map(|k| self.raw["status"][k].as_array().cloned().unwrap_or_default()).find_map(|s| {
            let reason = s["state"]["waiting"]["reason"].as_str()?;
            matches!(
                reason,
                "ErrImagePull"
                    | "ImagePullBackOff"
                    | "ErrImageNeverPull"
                    | "InvalidImageName"
                    | "CreateContainerConfigError"
                    | "CreateContainerError"
            )
            .then(|| {
                format!(
                    "pod {} container {}: {reason} {} (are the images loaded? `bash hack/images.sh`)",
                    self.name,
                    s["name"].as_str().unwrap_or("?"),
                    s["state"]["waiting"]["message"].as_str().unwrap_or("")
                )
            })
        })
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
    ns: &Ns,
    selector: &str,
    cluster: Option<&str>,
) -> Result<(Vec<PodInfo>, Option<StatusInfo>)> {
    let Some(cluster) = cluster else {
        let list = ns.json(&["get", "pods", "-l", selector])?;
        let pods = list["items"].as_array().map(|a| a.iter().map(PodInfo::from_json).collect()).unwrap_or_default();
        return Ok((pods, None));
    };
    // The namespace is the bench's own: list both kinds in it and pick ours.
    let list = ns.json(&["get", "etcdclusters.etcd.database.coreos.com,pods"])?;
    let items = list["items"].as_array().cloned().unwrap_or_else(|| vec![list.clone()]);
    let labels: Vec<(&str, &str)> = selector.split(',').filter_map(|kv| kv.split_once('=')).collect();
    let mut pods = vec![];
    let mut status = None;
    for it in &items {
        match it["kind"].as_str() {
            Some("EtcdCluster") if it["metadata"]["name"] == cluster => status = Some(StatusInfo::from_json(it)),
            Some("Pod") if labels.iter().all(|(k, v)| it["metadata"]["labels"][*k] == *v) => {
                pods.push(PodInfo::from_json(it))
            }
            _ => {}
        }
    }
    pods.sort_by(|a, b| a.name.cmp(&b.name));
    Ok((pods, status))
}

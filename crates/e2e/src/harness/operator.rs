//! The operator under test, scoped to one namespace: a process of this machine (tests and
//! bench) or installed in-cluster from its manifests ([`super::in_cluster`]).
//!
//! `E2E_OPERATOR` picks how [`Operator::start`] runs it, so the same test bodies cover both:
//! - `process` (default): a process on this machine with the admin kubeconfig, started through
//!   [`crate::process`]: it dies with the test process, even a SIGKILLed one;
//! - `in-cluster`: installed into the test namespace the way a user installs it (`etcd-operator
//!   manifests | kubectl apply -f -`: ServiceAccount, the shipped RBAC, a Deployment running the
//!   image [`super::operator_image`]), see [`InClusterOperator`].

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::in_cluster::{InClusterOperator, Install};
use crate::TestNamespace;
use crate::process::Supervised;

/// The operator binary under test: `$ETCD_OPERATOR_BIN`, else the workspace's debug build.
pub fn operator_bin() -> PathBuf {
    std::env::var_os("ETCD_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/etcd-operator"))
}

/// The CRDs, applied as a user installs them (`etcd-operator crds`), for a test that makes
/// objects before any operator of this project ran (a cluster the CoreOS operator made: it
/// had installed the CRD). Waits until the API server serves them.
pub fn ensure_crds(ns: &TestNamespace) -> Result<()> {
    let mut args = vec!["crds"];
    if !ns.kubectl.has_crd_validation_rules()? {
        args.push("--no-validation-rules");
    }
    let out = Command::new(operator_bin()).args(&args).output().context("running etcd-operator crds")?;
    anyhow::ensure!(out.status.success(), "crds: {}", String::from_utf8_lossy(&out.stderr));
    // Tests running at once may create them at the same moment: one gets AlreadyExists, and
    // applies again over the other's.
    let yaml = String::from_utf8(out.stdout)?;
    crate::wait_until(Duration::from_secs(60), "the CRDs applied", || Ok(ns.apply(&yaml).ok()))?;
    for crd in ["etcdclusters", "etcdbackups", "etcdrestores"] {
        ns.run(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            &format!("crd/{crd}.etcd.database.coreos.com"),
        ])?;
        // Established is not yet served: the API server (and kubectl's discovery) follow.
        crate::wait_until(Duration::from_secs(60), &format!("{crd} served"), || Ok(ns.run(&["get", crd]).ok()))?;
    }
    Ok(())
}

/// Where operator logs of the tests are kept (created when missing).
pub fn log_dir() -> Result<PathBuf> {
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

/// The operator's log filter unless told otherwise: its debug lines say what it planned.
pub const DEFAULT_LOG: &str = "info,etcd_operator=debug";

/// How to run the operator as a process of this machine.
#[derive(Clone, Debug)]
pub struct ProcessOptions {
    /// Default: [`operator_bin`].
    pub bin: PathBuf,
    /// `RUST_LOG`; default [`DEFAULT_LOG`].
    pub rust_log: String,
    /// `--log-format json` (the bench reads the time of each action from it).
    pub json_log: bool,
    /// Where `<namespace>.log` (its stdout and stderr) goes; default [`log_dir`].
    pub log_dir: Option<PathBuf>,
    /// More environment: failpoints, `ETCD_OPERATOR_INIT_IMAGE`. The rest is inherited.
    pub env: Vec<(String, String)>,
}

impl Default for ProcessOptions {
    fn default() -> Self {
        ProcessOptions {
            bin: operator_bin(),
            rust_log: DEFAULT_LOG.into(),
            json_log: false,
            log_dir: None,
            env: vec![],
        }
    }
}

/// A running operator, stopped (process) or uninstalled (in-cluster) when dropped.
pub struct Operator {
    kind: Kind,
    /// The operator's log file (in-cluster: a copy of the pod logs, refreshed by `log_text`).
    pub log: PathBuf,
}

enum Kind {
    Process(Supervised),
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
        Operator::start_process_with(ns, &ProcessOptions::default())
    }

    /// [`Operator::start_process`] with extra environment variables (e.g. failpoints).
    pub fn start_process_with_env(ns: &TestNamespace, env: &[(&str, &str)]) -> Result<Operator> {
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Operator::start_process_with(ns, &ProcessOptions { env, ..ProcessOptions::default() })
    }

    /// The operator as a process watching `ns` alone, with the kubeconfig of `ns.kubectl`;
    /// returns once it logged that its watch caches are synced (proof that it is live).
    pub fn start_process_with(ns: &TestNamespace, opts: &ProcessOptions) -> Result<Operator> {
        let dir = match &opts.log_dir {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                d.clone()
            }
            None => log_dir()?,
        };
        let log = dir.join(format!("{}.log", ns.name));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut cmd = Command::new(&opts.bin);
        // Any free port for /healthz and /metrics: several operators (parallel tests, other
        // runs on the same host) must not compete for the default 0.0.0.0:8080.
        cmd.args(["run", "--namespace", &ns.name, "--listen-address", "127.0.0.1:0"]);
        if opts.json_log {
            cmd.args(["--log-format", "json"]);
        }
        cmd.env("KUBECONFIG", &ns.kubectl.kubeconfig)
            .env("RUST_LOG", &opts.rust_log)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SIGKILL at once on stop, as a crash would.
        let proc = Supervised::spawn(cmd, &format!("the operator {}", opts.bin.display()), Duration::ZERO)?;
        let mut op = Operator { kind: Kind::Process(proc), log };
        let started = Instant::now();
        loop {
            if op.log_text().contains("watch caches synced") {
                return Ok(op);
            }
            if let Kind::Process(p) = &mut op.kind
                && let Some(status) = p.try_wait()?
            {
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

    /// The installed operator, when it runs in-cluster.
    pub fn in_cluster(&self) -> Option<&InClusterOperator> {
        match &self.kind {
            Kind::InCluster(op) => Some(op),
            Kind::Process(_) => None,
        }
    }

    /// The process id, when it runs as a process (also its process group id).
    pub fn pid(&self) -> Option<u32> {
        match &self.kind {
            Kind::Process(p) => Some(p.pid()),
            Kind::InCluster(_) => None,
        }
    }

    /// Whether the process still runs (in-cluster: always true; see `restarts`).
    pub fn running(&mut self) -> bool {
        match &mut self.kind {
            Kind::Process(p) => p.running(),
            Kind::InCluster(_) => true,
        }
    }

    /// Times the operator stopped or restarted since it was started (the process exited; or the
    /// restart counts of its pods): 0 means it never went down.
    pub fn restarts(&mut self) -> Result<i64> {
        match &mut self.kind {
            Kind::Process(p) => Ok(i64::from(p.try_wait()?.is_some())),
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
            Kind::Process(p) => p.stop(),
            Kind::InCluster(op) => {
                let _ = op.logs();
                let _ = op.run(&["scale", "deployment", "etcd-operator", "--replicas=0"]);
            }
        }
    }
}

// Dropping a process operator drops its `Supervised`, which kills it; an in-cluster one keeps
// its logs and removes its cluster RBAC (`InClusterOperator`'s Drop).

/// What to attach to a failure: the namespace's pods, Events and EtcdClusters, and with an
/// operator the last lines of its log.
pub fn diagnostics(ns: &TestNamespace, op: Option<&Operator>) -> String {
    let pods = ns.run(&["get", "pods", "-o", "wide"]).unwrap_or_default();
    let events = ns.run(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
    let st = ns.run(&["get", "etcdclusters", "-o", "yaml"]).unwrap_or_default();
    let mut out = format!("namespace {}\n--- pods:\n{pods}--- events:\n{events}--- etcdclusters:\n{st}", ns.name);
    if let Some(op) = op {
        let log = op.log_text();
        let lines: Vec<&str> = log.lines().collect();
        let tail = &lines[lines.len().saturating_sub(40)..];
        out.push_str(&format!(
            "--- operator log {} (last {} lines):\n{}",
            op.log.display(),
            tail.len(),
            tail.join("\n")
        ));
    }
    out
}

/// Run `body` with a fresh namespace and an operator for it; on failure the error carries the
/// [`diagnostics`].
pub fn with_operator(prefix: &str, body: impl FnOnce(&TestNamespace, &mut Operator) -> Result<()>) -> Result<()> {
    let ns = TestNamespace::create(prefix)?;
    let mut op = Operator::start(&ns)?;
    body(&ns, &mut op).map_err(|e| e.context(diagnostics(&ns, Some(&op))))
}

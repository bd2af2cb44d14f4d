//! Helpers of the upgrade tests (`upgrade`, `upgrade_failures`): their time limits and what
//! "the whole cluster runs a version" means, in the status and as each member answers.

use std::time::Duration;

use anyhow::Result;
use e2e::TestNamespace;
use serde_json::Value;

use super::{cond_str, member_endpoints, server_version};

pub const CREATE: Duration = Duration::from_secs(180);
/// One upgrade step of three members: each restarts on its new image and must report the new
/// version before the next one goes (the operator's own per-member deadline is 120 s).
pub const UPGRADE: Duration = Duration::from_secs(360);
/// How long "nothing else happens" is watched: three of the operator's 5 s re-checks and more.
pub const HOLD: Duration = Duration::from_secs(20);
pub const KEYS: usize = 50;
pub const REPOSITORY: &str = "quay.io/coreos/etcd";

/// Every member answers `endpoint status` with `version`.
pub fn all_report(ns: &TestNamespace, name: &str, version: &str) -> Result<bool> {
    for (_, ep) in member_endpoints(ns, name)? {
        match server_version(&ep) {
            Ok(v) if v == version => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// status says the whole cluster runs `version`: current == it, no target, `size` ready
/// members, no Upgrading condition left True and nothing Degraded.
pub fn settled_at(c: &Value, version: &str, size: usize) -> bool {
    let st = &c["status"];
    st["currentVersion"] == version
        && st["targetVersion"] == ""
        && st["members"]["ready"].as_array().is_some_and(|a| a.len() == size)
        && cond_str(c, "Upgrading", "status") != "True"
        && cond_str(c, "Degraded", "status") != "True"
}

/// Watches a cluster's member pods while it changes, for a pod the client Service may route a
/// new connection to while its etcd container is about to be restarted: Ready (the old
/// container still answers the probe), labelled serving, and running an image other than the
/// one its spec names now. The kubelet kills that container a moment later, and connections
/// the Service routed to it are refused until its readiness probe fails.
pub struct ServingWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl ServingWatch {
    pub fn start(ns: &TestNamespace, name: &str) -> ServingWatch {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (stop2, kubectl, ns_name) = (stop.clone(), ns.kubectl.clone(), ns.name.clone());
        let selector = format!("app=etcd,etcd_cluster={name}");
        let thread = std::thread::spawn(move || {
            let mut seen = vec![];
            while !stop2.load(Ordering::Relaxed) {
                if let Ok(pods) = kubectl.json(&["-n", &ns_name, "get", "pods", "-l", &selector]) {
                    for p in pods["items"].as_array().into_iter().flatten() {
                        if let Some(v) = serving_before_restart(p)
                            && !seen.contains(&v)
                            && !etcd_runs_spec_version(p)
                        {
                            seen.push(v);
                        }
                    }
                }
                std::thread::sleep(Duration::from_millis(150));
            }
            seen
        });
        ServingWatch { stop, thread: Some(thread) }
    }

    /// Stops watching; each pod seen serving with a restart pending, once per image change.
    pub fn finish(mut self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().map(|t| t.join().unwrap_or_default()).unwrap_or_default()
    }
}

impl Drop for ServingWatch {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The etcd answering at `pod`'s IP already reports the version of the image its spec names: the
/// restart happened, and a pod status still naming the old image is the kubelet's status lagging
/// (seen on 1.20: up to a relist after the operator, which asks etcd itself, put the member back).
/// Plaintext clusters only; anything else (no answer, TLS) is not evidence of a restart.
fn etcd_runs_spec_version(pod: &Value) -> bool {
    let Some(ip) = pod["status"]["podIP"].as_str() else { return false };
    let containers = pod["spec"]["containers"].as_array().cloned().unwrap_or_default();
    let Some(image) = containers.iter().find(|c| c["name"] == "etcd").and_then(|c| c["image"].as_str()) else {
        return false;
    };
    let Some(want) = image.rsplit_once(':').map(|(_, tag)| tag.trim_start_matches('v').to_string()) else {
        return false;
    };
    let config = ureq::Agent::config_builder().timeout_global(Some(Duration::from_secs(1))).build();
    let agent = ureq::Agent::new_with_config(config);
    let Ok(mut resp) = agent.get(&format!("http://{ip}:2379/version")).call() else { return false };
    let Ok(body) = resp.body_mut().read_to_string() else { return false };
    serde_json::from_str::<Value>(&body).is_ok_and(|v| v["etcdserver"] == want.as_str())
}

/// `pod` is in the client Service (Ready, labelled serving) while its etcd container runs an
/// image other than its spec's: "<pod>: runs <old>, spec <new>".
pub fn serving_before_restart(pod: &Value) -> Option<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let serving = pod["metadata"]["labels"]["etcd.database.coreos.com/serving"] == "true";
    let ready = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    let spec = pod["spec"]["containers"].as_array()?.iter().find(|c| c["name"] == "etcd")?["image"].as_str()?;
    let status = pod["status"]["containerStatuses"].as_array()?.iter().find(|c| c["name"] == "etcd")?;
    let runs = status["image"].as_str()?;
    let bare = |i: &str| i.strip_prefix("docker.io/").unwrap_or(i).to_string();
    (serving && ready && pod["metadata"]["deletionTimestamp"].is_null() && bare(runs) != bare(spec))
        .then(|| format!("{name}: runs {runs}, spec {spec}"))
}

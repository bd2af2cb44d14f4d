//! The outside observer: every second, per cluster, the EtcdCluster status, its member pods and
//! a probe of each member straight at its pod IP (status and a linearizable read). From these
//! samples come the invariants (invariants.rs) and what the faults and clients need now: the
//! member IPs, the etcd leader, each member's container, whether everything converged.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use e2e::TestNamespace;
use etcd_client::{Client, ConnectOptions};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::task::JoinSet;

use crate::clients::{Shared, Targets};
use crate::now_ms;

const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);
const PERIOD: Duration = Duration::from_secs(1);

#[derive(Clone, Debug, Default)]
pub struct Member {
    pub pod: String,
    pub ip: String,
    /// containerd id of the `etcd` container.
    pub container: String,
    pub read_ok: bool,
    pub leader: bool,
    pub cluster_id: u64,
    /// The member's status reports an alarm (NOSPACE, CORRUPT).
    pub alarm: bool,
}

/// One observation of one cluster.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub t_ms: u64,
    pub cluster: String,
    pub spec_size: usize,
    pub status_ready: usize,
    pub learners: usize,
    pub members: Vec<Member>,
    /// Members answering a linearizable read (a started voter of a cluster with a leader).
    pub healthy: usize,
    /// At least one member answered a linearizable read: the cluster has a quorum.
    pub quorum: bool,
    pub converged: bool,
    /// Ready endpoints of the client Service (its EndpointSlices).
    pub service_ready: usize,
    pub status_cluster_id: String,
    pub phase: String,
    /// When this round's probes had all returned: a probe of this sample ran within
    /// `t_ms..=probed_ms`.
    pub probed_ms: u64,
    /// No member answered, yet a client operation on this cluster that needs a quorum was
    /// acknowledged wholly within `t_ms..=probed_ms`: the probes were false negatives (a loaded
    /// machine), the cluster had its quorum. Set by `invariants::refute`.
    pub refuted: bool,
}

impl Sample {
    /// A member answered, or clients were served while the probes failed (`refuted`).
    pub fn had_quorum(&self) -> bool {
        self.quorum || self.refuted
    }

    pub fn line(&self) -> String {
        let pods: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                let state = if !m.read_ok {
                    "(down)"
                } else if m.alarm {
                    "(alarm)"
                } else {
                    ""
                };
                format!("{}{}{state}", m.pod, if m.leader { "*" } else { "" })
            })
            .collect();
        format!(
            "{} {} spec={} healthy={} ready={} learners={} svc={} quorum={}{} converged={} phase={} id={} [{}]",
            crate::fmt_ms(self.t_ms),
            self.cluster,
            self.spec_size,
            self.healthy,
            self.status_ready,
            self.learners,
            self.service_ready,
            self.quorum,
            if self.refuted { " (refuted by acked client ops)" } else { "" },
            self.converged,
            self.phase,
            self.status_cluster_id,
            pods.join(" ")
        )
    }
}

#[derive(Default)]
pub struct Monitor {
    pub samples: Mutex<Vec<Sample>>,
    pub latest: Mutex<BTreeMap<String, Sample>>,
    /// Operator pods by uid: (name, highest restart count seen).
    pub operator_pods: Mutex<BTreeMap<String, (String, i64)>>,
    /// Why each operator container restart happened (see `exit_cause`), in the order seen.
    pub operator_exits: Mutex<Vec<(u64, String, String)>>,
    /// Lease holders in the order seen, with the time.
    pub lease_holders: Mutex<Vec<(u64, String)>>,
}

impl Monitor {
    pub fn latest(&self, cluster: &str) -> Option<Sample> {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner).get(cluster).cloned()
    }

    pub fn all_converged_since(&self, t_ms: u64) -> bool {
        let l = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        !l.is_empty() && l.values().all(|s| s.converged && s.t_ms >= t_ms)
    }
}

fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(800))
        .with_timeout(PROBE_TIMEOUT)
        .with_require_leader(true)
}

/// (read ok, is leader, cluster id, alarm): a second attempt when the first fails, so one
/// connection lost to a loaded machine does not count as a member down.
async fn probe(ip: String) -> (bool, bool, u64, bool) {
    let first = probe_once(ip.clone()).await;
    if first.0 {
        return first;
    }
    probe_once(ip).await
}

async fn probe_once(ip: String) -> (bool, bool, u64, bool) {
    let attempt = async {
        let mut c = Client::connect([format!("http://{ip}:2379")], Some(options())).await.ok()?;
        let st = c.status().await.ok()?;
        let leader = st.header().is_some_and(|h| h.member_id() == st.leader());
        let cid = st.header().map(|h| h.cluster_id()).unwrap_or(0);
        let alarm = !st.errors().is_empty();
        let read = c.get("chaos-probe", None).await.is_ok();
        Some((read, leader, cid, alarm))
    };
    tokio::time::timeout(PROBE_TIMEOUT, attempt).await.ok().flatten().unwrap_or((false, false, 0, false))
}

fn pods_of<'a>(pods: &'a [Value], cluster: &str) -> Vec<&'a Value> {
    let mut v: Vec<&Value> = pods
        .iter()
        .filter(|p| p["metadata"]["labels"]["etcd_cluster"] == cluster && p["metadata"]["labels"]["app"] == "etcd")
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    v.sort_by_key(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string());
    v
}

fn etcd_container(p: &Value) -> String {
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == "etcd"))
        .and_then(|c| c["containerID"].as_str())
        .map(|id| id.rsplit("://").next().unwrap_or(id).to_string())
        .unwrap_or_default()
}

/// The operator holds an upgrade back on purpose (3.6 → 3.7 waits for a raft snapshot past
/// the 3.5 → 3.6 boundary: `Upgrading=False`, reason `UpgradeDeferred`): the cluster is settled
/// for now; the upgrade happens once enough is written, while later faults go on.
fn upgrade_deferred(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Upgrading" && c["reason"] == "UpgradeDeferred"))
}

/// One round over every cluster.
fn round(
    ns: &TestNamespace,
    rt: &Handle,
    clusters: &[String],
    services: &HashMap<String, String>,
    shared: &Shared,
    mon: &Monitor,
) {
    let (Ok(ecs), Ok(pods)) = (ns.json(&["get", "etcdclusters"]), ns.json(&["get", "pods"])) else { return };
    let slices = ns.json(&["get", "endpointslices"]).unwrap_or_default();
    let slices = slices["items"].as_array().cloned().unwrap_or_default();
    let service_ready = |c: &str| -> usize {
        slices
            .iter()
            .filter(|s| s["metadata"]["labels"]["kubernetes.io/service-name"] == format!("{c}-client").as_str())
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .count()
    };
    let t_ms = now_ms();
    let pods = pods["items"].as_array().cloned().unwrap_or_default();
    let ecs = ecs["items"].as_array().cloned().unwrap_or_default();
    let mut probes = JoinSet::new();
    let mut members: HashMap<String, Vec<Member>> = HashMap::new();
    for c in clusters {
        let list: Vec<Member> = pods_of(&pods, c)
            .iter()
            .map(|p| Member {
                pod: p["metadata"]["name"].as_str().unwrap_or("").to_string(),
                ip: p["status"]["podIP"].as_str().unwrap_or("").to_string(),
                container: etcd_container(p),
                ..Default::default()
            })
            .collect();
        for (i, m) in list.iter().enumerate() {
            if !m.ip.is_empty() {
                let (c2, ip) = (c.clone(), m.ip.clone());
                probes.spawn_on(async move { (c2, i, probe(ip).await) }, rt);
            }
        }
        members.insert(c.clone(), list);
    }
    rt.block_on(async {
        while let Some(r) = probes.join_next().await {
            if let Ok((c, i, (read_ok, leader, cid, alarm))) = r {
                let m = &mut members.get_mut(&c).expect("cluster")[i];
                (m.read_ok, m.leader, m.cluster_id, m.alarm) = (read_ok, leader, cid, alarm);
            }
        }
    });
    let probed_ms = now_ms();
    for c in clusters {
        let ec = ecs.iter().find(|e| e["metadata"]["name"] == c.as_str()).cloned().unwrap_or_default();
        let st = &ec["status"];
        let ms = members.remove(c).unwrap_or_default();
        let spec_size = ec["spec"]["size"].as_u64().unwrap_or(0) as usize;
        let healthy = ms.iter().filter(|m| m.read_ok).count();
        let status_ready = st["members"]["ready"].as_array().map(|a| a.len()).unwrap_or(0);
        let learners = st["members"]["learners"].as_array().map(|a| a.len()).unwrap_or(0);
        // The operator saw the latest spec and every member runs its version (an upgrade that has
        // not started yet is not converged).
        let spec_version = ec["spec"]["version"].as_str().unwrap_or("");
        let runs_spec_version = st["currentVersion"]
            .as_str()
            .is_some_and(|v| v.trim_start_matches('v') == spec_version.trim_start_matches('v'))
            && st["targetVersion"].as_str().unwrap_or("").is_empty();
        let caught_up =
            st["observedGeneration"] == ec["metadata"]["generation"] && (runs_spec_version || upgrade_deferred(st));
        let converged = caught_up
            && !ms.iter().any(|m| m.alarm)
            && healthy == spec_size
            && ms.len() == spec_size
            && status_ready == spec_size
            && learners == 0
            && st["size"].as_u64() == Some(spec_size as u64);
        let s = Sample {
            t_ms,
            cluster: c.clone(),
            spec_size,
            status_ready,
            learners,
            healthy,
            quorum: healthy > 0,
            converged,
            service_ready: service_ready(c),
            status_cluster_id: st["clusterId"].as_str().or(st["clusterID"].as_str()).unwrap_or("").to_string(),
            phase: st["phase"].as_str().unwrap_or("").to_string(),
            members: ms,
            probed_ms,
            refuted: false,
        };
        let ips: Vec<String> =
            s.members.iter().filter(|m| !m.ip.is_empty()).map(|m| format!("http://{}:2379", m.ip)).collect();
        shared
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(c.clone(), Targets { service: services.get(c).cloned().unwrap_or_default(), members: ips });
        mon.latest.lock().unwrap_or_else(PoisonError::into_inner).insert(c.clone(), s.clone());
        mon.samples.lock().unwrap_or_else(PoisonError::into_inner).push(s);
    }
    let mut restarted = Vec::new();
    {
        let mut op = mon.operator_pods.lock().unwrap_or_else(PoisonError::into_inner);
        for p in pods.iter().filter(|p| p["metadata"]["labels"]["app.kubernetes.io/name"] == "etcd-operator") {
            let uid = p["metadata"]["uid"].as_str().unwrap_or("").to_string();
            let cs: &[Value] = p["status"]["containerStatuses"].as_array().map_or(&[], |v| v.as_slice());
            let count = |c: &Value| c["restartCount"].as_i64().unwrap_or(0);
            let restarts: i64 = cs.iter().map(count).sum();
            let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
            let e = op.entry(uid).or_insert((name.clone(), 0));
            if restarts > e.1 {
                // The container that restarted last (one today; the Deployment may grow sidecars).
                let c = cs.iter().max_by_key(|c| count(c)).cloned().unwrap_or_default();
                restarted.push((name, c, restarts - e.1));
            }
            e.1 = e.1.max(restarts);
        }
    }
    // The previous container's last lines say why it ended (read now: the next restart replaces
    // them). Restarts while the monitor could not look (the apiserver down) have no log left.
    for (name, c, rose_by) in restarted {
        let container = c["name"].as_str().unwrap_or_default();
        let log = ns.run(&["logs", &name, "-c", container, "--previous", "--tail", "30"]).unwrap_or_default();
        let last = &c["lastState"]["terminated"];
        let why = exit_cause(&log, last["reason"].as_str(), last["exitCode"].as_i64());
        let mut exits = mon.operator_exits.lock().unwrap_or_else(PoisonError::into_inner);
        exits.push((now_ms(), name.clone(), why));
        for _ in 1..rose_by {
            exits.push((now_ms(), name.clone(), UNSEEN_EXIT.into()));
        }
    }
}

/// The cause of a restart the monitor did not see (the count rose by more than one between two
/// looks, and only the last container's log is kept).
pub const UNSEEN_EXIT: &str = "not seen: restarted again before the monitor looked";

/// Why an operator container ended, from its last log lines and its terminated state, in this
/// order: killed by a signal (exit code 128+: the liveness probe, the OOM killer, a node restart;
/// an old ERROR line says nothing then); the process's own last word (`error: ...`, what main
/// prints on its way out); a panic (location and message); the last ERROR line (timestamp and
/// `key=value` fields cut off, so that causes group); else the runtime's reason.
pub fn exit_cause(log: &str, reason: Option<&str>, exit_code: Option<i64>) -> String {
    let state = format!("{} (exit {})", reason.unwrap_or("unknown"), exit_code.map_or("?".into(), |c| c.to_string()));
    if let Some(code) = exit_code.filter(|c| *c >= 128) {
        return format!("killed by signal {} — {state}", code - 128);
    }
    let lines: Vec<&str> = log.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let Some(last) = lines.last().filter(|l| l.starts_with("error: ")) {
        return format!("{last} — {state}");
    }
    if let Some(i) = lines.iter().rposition(|l| l.contains("panicked at")) {
        let message = lines.get(i + 1).filter(|l| !l.starts_with("note: ")).copied().unwrap_or("");
        return format!("panic: {} {message} — {state}", lines[i]).replace("  ", " ");
    }
    match lines.iter().rev().find_map(|l| l.split_once(" ERROR ")) {
        Some((_, msg)) => format!("{} — {state}", without_fields(msg.trim())),
        None => state,
    }
}

/// A tracing message without its `key=value` fields (they vary per occurrence).
fn without_fields(msg: &str) -> &str {
    let mut end = msg.len();
    for (i, _) in msg.match_indices(' ') {
        let word = msg[i + 1..].split(' ').next().unwrap_or("");
        if let Some((key, _)) = word.split_once('=')
            && !key.is_empty()
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            end = i;
            break;
        }
    }
    &msg[..end]
}

/// Runs until `stop` is set: one round per second; the operator's logs every 10 s.
#[allow(clippy::too_many_arguments)]
pub fn run(
    ns: &TestNamespace,
    rt: &Handle,
    clusters: &[String],
    services: &HashMap<String, String>,
    shared: &Shared,
    mon: &Monitor,
    op: &e2e::harness::InClusterOperator,
    stop: &std::sync::atomic::AtomicBool,
) {
    let mut last_lease = Instant::now() - Duration::from_secs(10);
    let mut last_logs = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        round(ns, rt, clusters, services, shared, mon);
        if last_lease.elapsed() >= Duration::from_secs(3) {
            last_lease = Instant::now();
            if let Ok(l) = ns.json(&["get", "lease", "etcd-operator"]) {
                let h = l["spec"]["holderIdentity"].as_str().unwrap_or("").to_string();
                let mut hs = mon.lease_holders.lock().unwrap_or_else(PoisonError::into_inner);
                if hs.last().map(|x| &x.1) != Some(&h) {
                    hs.push((now_ms(), h));
                }
            }
        }
        // The operator's logs, kept for pods that a fault deletes later.
        if last_logs.elapsed() >= Duration::from_secs(10) {
            last_logs = Instant::now();
            let _ = op.logs();
        }
        if let Some(rest) = PERIOD.checked_sub(t0.elapsed()) {
            std::thread::sleep(rest);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_deferred_upgrade_is_settled_any_other_upgrade_state_is_not() {
        let st = |reason: &str| json!({"conditions": [{"type": "Upgrading", "status": "False", "reason": reason}]});
        assert!(super::upgrade_deferred(&st("UpgradeDeferred")));
        assert!(!super::upgrade_deferred(&st("UpgradeFailed")));
        assert!(!super::upgrade_deferred(&json!({"conditions": [{"type": "Available", "reason": "UpgradeDeferred"}]})));
        assert!(!super::upgrade_deferred(&json!({})));
    }

    #[test]
    fn an_exit_is_named_by_its_last_word_its_panic_its_last_error_or_its_signal() {
        use super::exit_cause;
        let lost = "2026-11-24T19:23:13.767873Z  WARN could not renew the lease error=Connect\n\
                    2026-11-24T19:23:15.769589Z ERROR could not renew the lease in time lease=etcd-operator deadline=10s\n\
                    2026-11-24T19:23:15.775201Z ERROR leadership lost; exiting so that only the new leader acts\n";
        assert_eq!(
            exit_cause(lost, Some("Error"), Some(1)),
            "leadership lost; exiting so that only the new leader acts — Error (exit 1)"
        );
        // Fields are cut wherever they start, so one cause groups.
        let fields = "2026-11-24T19:23:15Z ERROR reconcile failed error=timeout cluster=ns/a\n";
        assert_eq!(exit_cause(fields, Some("Error"), Some(1)), "reconcile failed — Error (exit 1)");
        // main's own last word beats an older ERROR line.
        let word = "2026-11-24T19:23:15Z ERROR an older problem\nerror: the apiserver did not answer within 60s\n";
        assert_eq!(
            exit_cause(word, Some("Error"), Some(1)),
            "error: the apiserver did not answer within 60s — Error (exit 1)"
        );
        // A panic: the location and, on the next line, the message.
        let panic = "2026-11-24T19:23:15Z ERROR earlier\nthread 'main' panicked at src/x.rs:1:1:\nindex out of bounds\n\
                     note: run with `RUST_BACKTRACE=1`\n";
        assert_eq!(
            exit_cause(panic, Some("Error"), Some(101)),
            "panic: thread 'main' panicked at src/x.rs:1:1: index out of bounds — Error (exit 101)"
        );
        // Killed (liveness probe, OOM): an ERROR line minutes old is not the cause.
        assert_eq!(exit_cause(lost, Some("Error"), Some(137)), "killed by signal 9 — Error (exit 137)");
        assert_eq!(exit_cause("", Some("OOMKilled"), Some(137)), "killed by signal 9 — OOMKilled (exit 137)");
        assert_eq!(exit_cause("INFO fine\n", None, None), "unknown (exit ?)");
        assert_eq!(exit_cause("INFO fine\n", Some("Completed"), Some(0)), "Completed (exit 0)");
    }
}

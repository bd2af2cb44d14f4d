//! Injecting one planned fault into the run's own namespace (or, for node-level faults, into
//! this machine's cluster components) and healing it. The pod a fault hits is resolved from
//! the monitor's latest sample: the etcd leader, a follower, a member's containerd task.
//!
//! - pod deletions: `kubectl delete pod` (graceful, not waited for);
//! - SIGKILL / SIGSTOP (+SIGCONT at heal) of the etcd process: `ctr -n k8s.io tasks kill` on
//!   this machine, the cluster's only node; the container stays;
//! - network cut: iptables rules in the member pod's network namespace (`nsenter -t <pid> -n`)
//!   dropping peer traffic (port 2380) both ways, deleted at heal;
//! - operator leader: its pod force-deleted (grace 0), as a crash of its node would;
//! - quota fill: 512 KiB puts until etcd says the database space is exceeded, then after the
//!   hold the filler keys are deleted (as a user would), leaving the rest to the operator;
//! - resize / upgrade: spec patches; upgrade+delete: a member pod deleted mid-upgrade;
//! - kube-apiserver / kubelet restart: `hack/cluster.sh restart <component>`, only with
//!   `--node-faults` (they stop the cluster for everyone on this machine).

use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::harness::{InClusterOperator, patch_spec};
use e2e::{TestNamespace, run};
use etcd_client::{Client, ConnectOptions, DeleteOptions};

use crate::monitor::{Member, Monitor};
use crate::plan::{ClusterDesc, Kind, Rng, Step, VERSIONS};
use crate::{WORKSPACE, now_ms};

#[derive(Clone, Debug, Default)]
pub struct FaultRecord {
    pub index: usize,
    pub kind: Kind,
    pub cluster: Option<String>,
    /// What was hit, how.
    pub detail: String,
    pub inject_ms: u64,
    pub heal_ms: Option<u64>,
    pub error: Option<String>,
    /// Filled in afterwards from the samples.
    pub converged_ms: Option<u64>,
}

/// Something to undo if the run stops before the heal: (kind, containerd id or netns pid).
#[derive(Clone, Debug)]
enum Undo {
    Cont(String),
    Uncut(u32),
}

pub struct Injector<'a> {
    pub ns: &'a TestNamespace,
    pub op: &'a InClusterOperator,
    pub mon: &'a Monitor,
    pub rt: &'a tokio::runtime::Handle,
    pub clusters: &'a [ClusterDesc],
    /// `ctr` and the containerd sockets (hack/cluster-env.sh): the cluster's, or with several
    /// nodes each live node's (`CHAOS_CONTAINERD_SOCK` separated by spaces).
    pub ctr: (String, Vec<String>),
    pending: Mutex<Vec<Undo>>,
}

/// Peer traffic dropped both ways; the comment marks the rules as the chaos tool's.
const CUT_RULE: [&str; 10] = ["-p", "tcp", "--dport", "2380", "-m", "comment", "--comment", "chaos-cut", "-j", "DROP"];

impl<'a> Injector<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ns: &'a TestNamespace,
        op: &'a InClusterOperator,
        mon: &'a Monitor,
        rt: &'a tokio::runtime::Handle,
        clusters: &'a [ClusterDesc],
    ) -> Result<Self> {
        // hack/chaos.sh exports them; else ask the scripts where the local cluster's containerd is.
        let ctr = match (std::env::var("CHAOS_CTR"), std::env::var("CHAOS_CONTAINERD_SOCK")) {
            (Ok(c), Ok(s)) if !c.is_empty() => (c, s),
            _ => {
                let out = run(Command::new("bash").arg("-c").arg(format!(
                    "source {WORKSPACE}/hack/common.sh && source {WORKSPACE}/hack/cluster-env.sh && echo \"$RUNTIME_BIN/ctr\" && for n in $(live_nodes); do node_env \"$n\"; echo \"$N_CONTAINERD_SOCK\"; done"
                )))?;
                let mut l = out.lines();
                (l.next().unwrap_or("ctr").to_string(), l.collect::<Vec<_>>().join(" "))
            }
        };
        let ctr = (ctr.0, ctr.1.split_whitespace().map(str::to_string).collect::<Vec<_>>());
        Ok(Injector { ns, op, mon, rt, clusters, ctr, pending: Mutex::default() })
    }

    /// `ctr -n k8s.io ARGS` against each containerd (one per node): the first that succeeds
    /// (a container's task is known to its node's only), or for `tasks ls` all of them.
    fn ctr(&self, args: &[&str]) -> Result<String> {
        let socks: Vec<Option<&str>> =
            if self.ctr.1.is_empty() { vec![None] } else { self.ctr.1.iter().map(|s| Some(s.as_str())).collect() };
        let (mut out, mut last_err) = (String::new(), None);
        let mut ok = false;
        for sock in socks {
            let mut c = Command::new(&self.ctr.0);
            if let Some(sock) = sock {
                c.args(["--address", sock]);
            }
            match run(c.args(["-n", "k8s.io"]).args(args)) {
                Ok(o) if args.first() == Some(&"tasks") && args.get(1) == Some(&"ls") => {
                    out.push_str(&o);
                    ok = true;
                }
                Ok(o) => return Ok(o),
                Err(e) => last_err = Some(e),
            }
        }
        match (ok, last_err) {
            (true, _) => Ok(out),
            (false, Some(e)) => Err(e),
            (false, None) => Ok(out),
        }
    }

    /// The operator pod that holds the lease, once the holder is a pod that exists and is not
    /// going: right after the last leader was killed, the lease still names it until the
    /// standby takes over (up to a lease duration).
    fn live_operator_leader(&self) -> Result<String> {
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let leader = self.op.leader()?;
            let pods = self.op.pods()?;
            let live = pods.iter().any(|p| {
                p["metadata"]["name"].as_str() == Some(leader.as_str()) && p["metadata"]["deletionTimestamp"].is_null()
            });
            if live {
                return Ok(leader);
            }
            if Instant::now() > deadline {
                bail!("the operator lease still names {leader}, a pod that is gone or going, after 45 s");
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn members(&self, cluster: &str) -> Result<Vec<Member>> {
        let s = self.mon.latest(cluster).context("no sample of the cluster yet")?;
        if s.members.is_empty() {
            bail!("cluster {cluster} has no member pods now");
        }
        Ok(s.members)
    }

    /// The leader if `leader`, else a follower (or any member if none is known to lead).
    fn pick(&self, rng: &mut Rng, cluster: &str, leader: bool) -> Result<Member> {
        let ms = self.members(cluster)?;
        let (lead, rest): (Vec<Member>, Vec<Member>) = ms.iter().cloned().partition(|m| m.leader);
        let pool = if leader && !lead.is_empty() {
            lead
        } else if !leader && !rest.is_empty() {
            rest
        } else {
            ms
        };
        Ok(pool[rng.below(pool.len() as u64) as usize].clone())
    }

    fn delete_pod(&self, pod: &str) -> Result<()> {
        self.ns.run(&["delete", "pod", pod, "--wait=false"]).map(drop)
    }

    fn signal(&self, m: &Member, sig: &str) -> Result<()> {
        if m.container.is_empty() {
            bail!("pod {} has no running etcd container", m.pod);
        }
        self.ctr(&["tasks", "kill", "-s", sig, &m.container]).map(drop)
    }

    fn task_pid(&self, container: &str) -> Result<u32> {
        let out = self.ctr(&["tasks", "ls"])?;
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(container))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("no task {container} in `ctr tasks ls`"))
    }

    fn iptables(pid: u32, op: &str) -> Result<()> {
        for chain in ["INPUT", "OUTPUT"] {
            run(Command::new("nsenter").args(["-t", &pid.to_string(), "-n", "iptables", op, chain]).args(CUT_RULE))?;
        }
        Ok(())
    }

    /// Injects `step`, holds and heals it; returns what happened.
    pub fn inject(&self, step: &Step, seed: u64) -> FaultRecord {
        // The pod choice is random too, from the seed and the step: replays pick the same role.
        let mut rng = Rng::new(seed ^ (step.index as u64).wrapping_mul(0x9E37_79B9));
        let cluster = step.cluster.map(|i| self.clusters[i].name.clone());
        let mut rec = FaultRecord {
            index: step.index,
            kind: step.kind,
            cluster: cluster.clone(),
            inject_ms: now_ms(),
            ..Default::default()
        };
        let c = cluster.as_deref().unwrap_or("");
        let r = self.apply(step, c, &mut rng, &mut rec);
        if let Err(e) = r {
            rec.error = Some(format!("{e:#}"));
        }
        rec
    }

    fn hold(&self, step: &Step) {
        std::thread::sleep(Duration::from_millis(step.hold_ms));
    }

    fn apply(&self, step: &Step, c: &str, rng: &mut Rng, rec: &mut FaultRecord) -> Result<()> {
        match step.kind {
            Kind::DeleteFollower | Kind::DeleteLeader => {
                let m = self.pick(rng, c, step.kind == Kind::DeleteLeader)?;
                rec.detail = format!("deleted pod {} (leader: {})", m.pod, m.leader);
                self.delete_pod(&m.pod)
            }
            Kind::DeleteTwo => {
                let mut ms = self.members(c)?;
                let a = ms.remove(rng.below(ms.len() as u64) as usize);
                let b = ms.get(rng.below(ms.len().max(1) as u64) as usize).cloned().context("only one member")?;
                rec.detail = format!("deleted pods {} and {}", a.pod, b.pod);
                self.ns.run(&["delete", "pod", &a.pod, &b.pod, "--wait=false"]).map(drop)
            }
            Kind::KillEtcd => {
                let lead = rng.percent(50);
                let m = self.pick(rng, c, lead)?;
                rec.detail = format!("SIGKILL etcd of {} (leader: {})", m.pod, m.leader);
                self.signal(&m, "SIGKILL")
            }
            Kind::StopEtcd => {
                let lead = rng.percent(50);
                let m = self.pick(rng, c, lead)?;
                rec.detail = format!("SIGSTOP etcd of {} (leader: {}) for {} ms", m.pod, m.leader, step.hold_ms);
                self.signal(&m, "SIGSTOP")?;
                self.pending.lock().unwrap_or_else(PoisonError::into_inner).push(Undo::Cont(m.container.clone()));
                self.hold(step);
                let r = self.signal(&m, "SIGCONT");
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|u| !matches!(u, Undo::Cont(x) if *x == m.container));
                rec.heal_ms = Some(now_ms());
                // A container that was replaced meanwhile has no task to continue: fine.
                if let Err(e) = r {
                    rec.detail.push_str(&format!("; SIGCONT: {e:#}"));
                }
                Ok(())
            }
            Kind::NetworkCut => {
                let lead = rng.percent(50);
                let m = self.pick(rng, c, lead)?;
                let pid = self.task_pid(&m.container)?;
                rec.detail = format!("cut {} (leader: {}) off its peers for {} ms", m.pod, m.leader, step.hold_ms);
                Self::iptables(pid, "-I")?;
                self.pending.lock().unwrap_or_else(PoisonError::into_inner).push(Undo::Uncut(pid));
                self.hold(step);
                let r = Self::iptables(pid, "-D");
                self.pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .retain(|u| !matches!(u, Undo::Uncut(p) if *p == pid));
                rec.heal_ms = Some(now_ms());
                if let Err(e) = r {
                    rec.detail.push_str(&format!("; heal: {e:#} (the pod may be gone)"));
                }
                Ok(())
            }
            Kind::KillOperatorLeader => {
                let leader = self.live_operator_leader()?;
                let _ = self.op.logs(); // its log up to now: the pod and its log go
                rec.detail = format!("force-deleted operator leader pod {leader}");
                self.op.run(&["delete", "pod", &leader, "--grace-period=0", "--force", "--wait=false"]).map(drop)
            }
            Kind::QuotaFill => {
                // Straight to the members: with etcd < 3.5.2 a NOSPACE alarm raised by several
                // members makes /health?exclude=NOSPACE fail (etcd#13467), so every member is
                // unready and the client Service has no endpoint for the delete.
                let eps: Vec<String> = self
                    .members(c)?
                    .iter()
                    .filter(|m| !m.ip.is_empty())
                    .map(|m| format!("http://{}:2379", m.ip))
                    .collect();
                let puts = self.rt.block_on(fill(&eps))?;
                rec.detail = format!(
                    "filled the quota after {puts} puts of 512 KiB; deleted the filler after {} ms",
                    step.hold_ms
                );
                self.hold(step);
                let eps: Vec<String> = self
                    .members(c)?
                    .iter()
                    .filter(|m| !m.ip.is_empty())
                    .map(|m| format!("http://{}:2379", m.ip))
                    .collect();
                self.rt.block_on(unfill(&eps))?;
                rec.heal_ms = Some(now_ms());
                Ok(())
            }
            Kind::Resize => {
                rec.detail = format!("size → {}", step.target);
                patch_spec(self.ns, c, &format!("{{\"size\":{}}}", step.target))
            }
            Kind::Upgrade => {
                rec.detail = format!("version → {}", VERSIONS[step.target]);
                patch_spec(self.ns, c, &format!("{{\"version\":\"{}\"}}", VERSIONS[step.target]))
            }
            Kind::UpgradeDeletePvcPod => {
                patch_spec(self.ns, c, &format!("{{\"version\":\"{}\"}}", VERSIONS[step.target]))?;
                self.hold(step);
                let lead = rng.percent(50);
                let m = self.pick(rng, c, lead)?;
                rec.detail = format!(
                    "version → {}, then after {} ms deleted pod {}",
                    VERSIONS[step.target], step.hold_ms, m.pod
                );
                self.delete_pod(&m.pod)
            }
            Kind::RestartApiserver | Kind::RestartKubelet => {
                let comp = if step.kind == Kind::RestartApiserver { "kube-apiserver" } else { "kubelet" };
                rec.detail = format!("hack/cluster.sh restart {comp}");
                let restarted =
                    run(Command::new("bash").arg(format!("{WORKSPACE}/hack/cluster.sh")).args(["restart", comp]))
                        .map(drop);
                if restarted.is_err() {
                    // A failed restart may leave the component stopped: bring the cluster back
                    // (idempotent) so the run goes on measuring the operator, not a dead node;
                    // the fault keeps its error in the report.
                    let _ = run(Command::new("bash").arg(format!("{WORKSPACE}/hack/cluster.sh")).arg("up"));
                }
                restarted
            }
        }
    }

    /// Self-test (`CHAOS_SABOTAGE=hidden-quorum-loss`): SIGSTOP two members of `cluster` for
    /// `hold`, recorded as no fault: the report must show an unattributed quorum loss.
    pub fn sabotage_stop_two(&self, cluster: &str, hold: Duration) -> Result<String> {
        let ms = self.members(cluster)?;
        let two: Vec<&Member> = ms.iter().take(2).collect();
        for m in &two {
            self.signal(m, "SIGSTOP")?;
            self.pending.lock().unwrap_or_else(PoisonError::into_inner).push(Undo::Cont(m.container.clone()));
        }
        std::thread::sleep(hold);
        self.heal_all();
        Ok(two.iter().map(|m| m.pod.clone()).collect::<Vec<_>>().join(", "))
    }

    /// Undoes whatever is still held (SIGCONT, network rules): on every way out.
    pub fn heal_all(&self) {
        for u in std::mem::take(&mut *self.pending.lock().unwrap_or_else(PoisonError::into_inner)) {
            let _ = match u {
                Undo::Cont(id) => self.ctr(&["tasks", "kill", "-s", "SIGCONT", &id]).map(drop),
                Undo::Uncut(pid) => Self::iptables(pid, "-D"),
            };
        }
    }
}

fn options() -> ConnectOptions {
    ConnectOptions::new().with_connect_timeout(Duration::from_secs(2)).with_timeout(Duration::from_secs(10))
}

async fn fill(eps: &[String]) -> Result<u64> {
    let mut c = Client::connect(eps, Some(options())).await?;
    let blob = vec![b'x'; 512 << 10];
    let t = Instant::now();
    for i in 0..4000u64 {
        match c.put(format!("fill/{i:05}"), blob.clone(), None).await {
            Ok(_) => {}
            Err(e) if e.to_string().contains("database space exceeded") => return Ok(i),
            Err(e) if t.elapsed() < Duration::from_secs(120) => {
                // A fault elsewhere may interrupt a put: carry on.
                eprintln!("chaos: quota fill put {i}: {e}");
            }
            Err(e) => return Err(e.into()),
        }
    }
    bail!("4000 puts of 512 KiB never filled the quota")
}

async fn unfill(eps: &[String]) -> Result<()> {
    let t = Instant::now();
    loop {
        let r = async {
            let mut c = Client::connect(eps, Some(options())).await?;
            c.delete("fill/", Some(DeleteOptions::new().with_prefix())).await
        };
        match r.await {
            Ok(_) => return Ok(()),
            Err(e) if t.elapsed() > Duration::from_secs(120) => bail!("deleting the filler keys: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}

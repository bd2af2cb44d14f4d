//! The nodes of the local cluster and their faults, for tests that need several nodes
//! (`NODES=3 hack/cluster.sh up`): each call runs `hack/cluster.sh node ...` (see
//! docs/src/development.md, "Several nodes"), so a test never shells out to a fault by hand.
//!
//! - [`Nodes::detect`]: the cluster's nodes, or `None` (with the reason printed) when it has fewer
//!   than a test needs, so the test can return early;
//! - [`Nodes::lose`] / [`Nodes::restore`]: a machine dying (link cut, every process of the node
//!   SIGKILLed) and booting again, with its disk or wiped;
//! - [`Nodes::partition`] / [`Nodes::heal`]: two nodes cut apart (both ways or one way);
//! - [`Nodes::netem`] / [`Nodes::netem_off`]: latency and loss on a node's link;
//! - [`Nodes::fill`] / [`Nodes::unfill`]: a node's volume filesystem full.
//!
//! Faults outlive a failed test: [`Nodes::guard`] returns a value whose drop heals partitions,
//! removes latency and restores lost nodes.

use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, Result, ensure};

use crate::Kubectl;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// One node faults at a time from this process (each is a `cluster.sh` run).
static FAULTS: Mutex<()> = Mutex::new(());

/// A node of the local cluster: its name, zone and whether it is Ready.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub zone: Option<String>,
    pub ready: bool,
}

/// The nodes of the local cluster, and the fault tools of `hack/cluster.sh node`.
#[derive(Debug)]
pub struct Nodes {
    pub nodes: Vec<Node>,
}

impl Nodes {
    /// The cluster's nodes from the API.
    pub fn list(kubectl: &Kubectl) -> Result<Vec<Node>> {
        let v = kubectl.json(&["get", "nodes"])?;
        let mut nodes: Vec<Node> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| Node {
                name: n["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                zone: n["metadata"]["labels"]["topology.kubernetes.io/zone"].as_str().map(str::to_string),
                ready: n["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True"),
            })
            .collect();
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    /// The nodes when the cluster has at least `min` Ready ones with the fault tools
    /// (`NODES>1`); otherwise prints why and returns `None`: the test then skips itself.
    pub fn detect(kubectl: &Kubectl, min: usize) -> Result<Option<Nodes>> {
        let nodes = Self::list(kubectl)?;
        let ready = nodes.iter().filter(|n| n.ready).count();
        if ready < min || nodes.iter().any(|n| !n.name.starts_with("node-")) {
            println!(
                "SKIPPED: this test needs a local cluster of at least {min} nodes (NODES={min} hack/cluster.sh up); \
                 this one has {ready} Ready: {:?}",
                nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>()
            );
            return Ok(None);
        }
        Ok(Some(Nodes { nodes }))
    }

    pub fn names(&self) -> Vec<&str> {
        self.nodes.iter().map(|n| n.name.as_str()).collect()
    }

    /// The zone label of node `name`.
    pub fn zone_of(&self, name: &str) -> Option<&str> {
        self.nodes.iter().find(|n| n.name == name).and_then(|n| n.zone.as_deref())
    }

    /// Node `name` dies: its link cut, kubelet, runtime and every container process killed. The
    /// API is left to notice (NotReady after the node-monitor grace period).
    pub fn lose(&self, name: &str) -> Result<()> {
        node_cmd(&["lose", name])
    }

    /// Node `name` boots again (with its disk, or `wipe`d) and is Ready when this returns.
    pub fn restore(&self, name: &str, wipe: bool) -> Result<()> {
        if wipe { node_cmd(&["restore", name, "--wipe"]) } else { node_cmd(&["restore", name]) }
    }

    /// Nothing passes between `a` and `b` (`one_way`: nothing from `a` reaches `b`).
    pub fn partition(&self, a: &str, b: &str, one_way: bool) -> Result<()> {
        if one_way { node_cmd(&["partition", a, b, "--one-way"]) } else { node_cmd(&["partition", a, b]) }
    }

    /// Every partition removed.
    pub fn heal(&self) -> Result<()> {
        node_cmd(&["heal"])
    }

    /// `delay` (e.g. "100ms") each way and `loss_percent` of the packets dropped on `name`'s link.
    /// Where the kernel has no netem only loss works (delay "0"); a delay fails saying so.
    pub fn netem(&self, name: &str, delay: &str, loss_percent: f64) -> Result<()> {
        node_cmd(&["netem", name, delay, &loss_percent.to_string()])
    }

    pub fn netem_off(&self, name: &str) -> Result<()> {
        node_cmd(&["netem", name, "off"])
    }

    /// `name`'s volume filesystem full (and room again with `unfill`).
    pub fn fill(&self, name: &str) -> Result<()> {
        node_cmd(&["fill", name])
    }

    pub fn unfill(&self, name: &str) -> Result<()> {
        node_cmd(&["unfill", name])
    }

    /// Undoes every fault when dropped (a failed test must not leave the cluster partitioned or a
    /// node lost for the next test).
    pub fn guard(&self) -> FaultGuard {
        FaultGuard { names: self.names().iter().map(|s| s.to_string()).collect() }
    }
}

/// See [`Nodes::guard`].
pub struct FaultGuard {
    names: Vec<String>,
}

impl Drop for FaultGuard {
    fn drop(&mut self) {
        let _ = node_cmd(&["heal"]);
        for n in &self.names {
            let _ = node_cmd(&["netem", n, "off"]);
            let _ = node_cmd(&["unfill", n]);
        }
        let lost = Command::new("bash")
            .arg(format!("{WORKSPACE}/hack/cluster.sh"))
            .args(["node", "list"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        for line in lost.lines().filter(|l| l.ends_with(" lost")) {
            if let Some(n) = line.split_whitespace().next()
                && let Err(e) = node_cmd(&["restore", n])
            {
                eprintln!("restoring {n} after the test: {e:#}");
            }
        }
    }
}

/// `hack/cluster.sh node ARGS...`, its output passed through; an error names the command.
fn node_cmd(args: &[&str]) -> Result<()> {
    let _one = FAULTS.lock().unwrap_or_else(|e| e.into_inner());
    let script = format!("{WORKSPACE}/hack/cluster.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("node")
        .args(args)
        .output()
        .with_context(|| format!("running {script} node {}", args.join(" ")))?;
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    ensure!(
        out.status.success(),
        "hack/cluster.sh node {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
    );
    Ok(())
}

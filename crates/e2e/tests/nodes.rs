//! Several nodes (`NODES=3 hack/cluster.sh up`, issue 28): a 3-member cluster lands one member
//! per node and zone (the operator's anti-affinity and zone spreading), and keeps taking writes
//! through its client Service when the node of one member is lost (`cluster.sh node lose`: its
//! link cut and every process of it killed, as when a machine dies). On a cluster of fewer than
//! three nodes the test prints why and passes without doing anything.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use e2e::nodes::Nodes;
use e2e::{Kubectl, wait_until};

const CREATE: Duration = Duration::from_secs(180);
const VERSION: &str = "3.6.15";

#[test]
fn three_members_spread_over_three_nodes_and_survive_losing_one() -> Result<()> {
    let Some(nodes) = Nodes::detect(&Kubectl::from_env()?, 3)? else { return Ok(()) };
    with_operator("e2e-nodes", |ns, _op| {
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let pods = member_pods(ns, "ex")?;
        let placed: Vec<(String, String)> = pods
            .iter()
            .map(|p| {
                let name = p["metadata"]["name"].as_str().unwrap_or_default().to_string();
                (name, p["spec"]["nodeName"].as_str().unwrap_or_default().to_string())
            })
            .collect();
        println!("members on nodes: {placed:?}");
        let on: BTreeSet<&str> = placed.iter().map(|(_, n)| n.as_str()).collect();
        ensure!(on.len() == 3, "three members on {} node(s): {placed:?}", on.len());
        let zones: BTreeSet<&str> = on.iter().filter_map(|n| nodes.zone_of(n)).collect();
        ensure!(zones.len() == 3, "three members in {} zone(s) {zones:?}: {placed:?}", zones.len());

        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "before", 20)?;

        // Lose the node of a member that does not lead (the common case; the leader's node is
        // the same fault plus an election).
        let leader = cluster(ns, "ex")?["status"]["leader"].as_str().unwrap_or_default().to_string();
        let (victim_pod, victim) =
            placed.iter().find(|(p, _)| *p != leader).cloned().context("no member but the leader")?;
        let _undo = nodes.guard();
        println!("losing {victim} (member {victim_pod}; leader {leader})");
        nodes.lose(&victim)?;

        // Writes through the client Service go on. kube-proxy still lists the lost member until
        // the node controller marks its pod not Ready (the node-monitor grace period), so a put
        // that lands there times out and is tried again: counted, not failed.
        let t0 = Instant::now();
        let mut retried = 0;
        for i in 0..30 {
            let what = format!("with {victim} lost");
            retried +=
                put_retrying(&ep, &format!("during/{i}"), &format!("value-{i}"), Duration::from_secs(120), &what)?;
        }
        println!("30 writes with {victim} lost in {:?}, {retried} attempt(s) retried", t0.elapsed());
        check_keys(&ep, "before", 20)?;
        check_keys(&ep, "during", 30)?;

        // The Node goes NotReady (the API notices the machine is gone).
        let kubectl = Kubectl::from_env()?;
        wait_until(Duration::from_secs(120), &format!("node {victim} NotReady"), || {
            Ok(Nodes::list(&kubectl)?.into_iter().find(|n| n.name == victim).filter(|n| !n.ready).map(drop))
        })?;
        println!("{victim} NotReady after {:?}", t0.elapsed());

        nodes.restore(&victim, false)?;
        check_keys(&ep, "during", 30)?;
        Ok(())
    })
}

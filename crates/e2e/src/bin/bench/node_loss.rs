//! Node loss (issue 28; needs `NODES=3 hack/cluster.sh up`): a 3-member emptyDir cluster with
//! `recovery.nodeLoss.afterSeconds: 0`, one member per node, while a client writes through the
//! client Service; the node of a follower is lost (`hack/cluster.sh node lose`: links cut, every
//! process killed). Measured from the loss until 3 members answer again without the lost one, 3
//! voters, status 3 ready. The node controller's own part (the Node turning NotReady after its
//! node-monitor grace) is a milestone read from the Node's Ready condition, so the operator's
//! part shows beside it. Failed writes are counted as in `scale_down`. The node is restored
//! (not timed) before the namespace goes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use e2e::nodes::Nodes;

use crate::etcd::Writer;
use crate::observe::Observer;
use crate::phases;
use crate::report::{Sample, rel, secs};
use crate::scale_down::service_url;
use crate::scenarios::{CLUSTER, Ctx, SELECTOR, healthy_cluster_with, in_namespace, operator_sample};

/// When the Node's Ready condition last changed (its move away from True, once lost), as
/// written by the API (RFC 3339).
fn not_ready_since(ctx: &Ctx, node: &str) -> Result<String> {
    let n = ctx.kubectl.json(&["get", "node", node, "-o", "json"])?;
    let conds = n["status"]["conditions"].as_array().context("a Node without conditions")?;
    let ready = conds.iter().find(|c| c["type"] == "Ready").context("a Node without a Ready condition")?;
    if ready["status"] == "True" {
        bail!("node {node} is still Ready");
    }
    Ok(ready["lastTransitionTime"].as_str().context("no lastTransitionTime")?.to_string())
}

pub fn node_loss(ctx: &Ctx) -> Result<Sample> {
    let Some(nodes) = Nodes::detect(&ctx.kubectl, 3)? else {
        bail!("node-loss needs a cluster of 3 nodes (NODES=3 hack/cluster.sh up)");
    };
    in_namespace(ctx, "bench-nodeloss", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let spec = "  recovery:\n    nodeLoss: {afterSeconds: 0}\n";
        let before = healthy_cluster_with(ctx, ns, &mut obs, 3, "3.6.15", spec)?;
        let leader = before.probes.iter().find(|(_, p)| p.is_leader).map(|(n, _)| n.clone());
        let (victim, node) = before
            .live()
            .filter(|p| Some(&p.name) != leader.as_ref())
            .find_map(|p| p.raw["spec"]["nodeName"].as_str().map(|n| (p.name.clone(), n.to_string())))
            .context("no follower with a node")?;
        let url = service_url(ctx, ns)?;
        let writer = Writer::start(&ctx.rt, vec![url], "nodeloss", ctx.write_interval, ctx.write_timeout);
        std::thread::sleep(Duration::from_secs(1));
        let _undo = nodes.guard();
        obs.start();
        nodes.lose(&node)?;
        obs.marks.once("node lost (cluster.sh returned)", true, obs.t0.elapsed());
        let v = victim.as_str();
        let before_uids = phases::uids(&before);
        let result = obs.until(ctx.timeout, "3 healthy members again without the lost one", |s, m| {
            phases::track_new(s, m, &before_uids, 1);
            let replacement = s.live().find(|p| !before.pods.iter().any(|b| b.name == p.name));
            m.once(
                "lost member removed from etcd",
                s.members.as_ref().is_some_and(|ms| !ms.iter().any(|x| x.pod == v)),
                s.at,
            );
            m.once("replacement pod exists", replacement.is_some(), s.at);
            m.once("replacement learner in etcd", s.learners() > 0, s.at);
            m.once("replacement answers (voter)", replacement.is_some_and(|p| s.answers(&p.name)), s.at);
            m.once("replacement pod Ready", replacement.is_some_and(|p| p.ready), s.at);
            let done_etcd = s.live().filter(|p| p.name != v).count() == 3
                && s.live().filter(|p| p.name != v && s.answers(&p.name)).count() == 3
                && s.voters_are(3)
                && s.members.as_ref().is_some_and(|ms| !ms.iter().any(|x| x.pod == v));
            m.once("3 members answer (etcd healthy)", done_etcd, s.at);
            let done_status = s.status_ready(3) && !s.status.as_ref().is_some_and(|x| x.ready.iter().any(|r| r == v));
            m.once("status: 3 ready", done_status, s.at);
            done_etcd && done_status
        });
        // The node controller's part, from the Node itself (before the node comes back).
        if let Some(d) = not_ready_since(ctx, &node).ok().and_then(|t| rel(obs.t0_wall, &t)).filter(|d| *d >= 0.0) {
            obs.marks.once("Node NotReady (node controller)", true, Duration::from_secs_f64(d));
        }
        std::thread::sleep(Duration::from_secs(2));
        let records = writer.stop(&ctx.rt)?;
        nodes.restore(&node, false)?;
        let (at, _) = result?;
        let mut sample = operator_sample(&format!("node {node} lost (member {victim})"), ns, op, &obs, at, false);
        phases::collect(&mut sample, ns, SELECTOR, &before_uids, obs.t0_wall, Some(&op.log_text()), at);
        if let Some(d) = obs.marks.get("Node NotReady (node controller)") {
            sample.extra.insert("not_ready", secs(d));
            sample.extra.insert("after_not_ready", secs(at.saturating_sub(d)));
        }
        let during: Vec<_> = records.iter().filter(|r| r.started >= obs.t0).collect();
        let failed = during.iter().filter(|r| !r.ok).count();
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        for r in during.iter().filter(|r| !r.ok) {
            *errors.entry(r.last_err.clone().unwrap_or_default().chars().take(120).collect()).or_default() += 1;
        }
        eprintln!(
            "    writer through the client Service: {} writes from the loss to 2 s after the end, {failed} failed",
            during.len()
        );
        for (e, n) in &errors {
            eprintln!("      {n:5} × {e}");
        }
        sample.extra.insert("writes", during.len() as f64);
        sample.extra.insert("failed", failed as f64);
        Ok(sample)
    })
}

//! Recovery measurements: how long a cluster takes to be whole again after losing a quorum.
//! - `recover-pvc`: a 3-member PVC cluster loses two pods at once; both members restart on their
//!   volumes (no quorum in between).
//! - `recover-survivor`: a 3-member emptyDir cluster loses two members for good;
//!   `spec.recovery.quorumLoss: FromSurvivor` with `afterSeconds: 0` (the default waits 60 s
//!   first, which would only measure the wait) starts a new cluster from the survivor and grows it
//!   back to 3.
//!
//! The clock starts right before `kubectl delete` and stops when 3 members answer at their pod
//! IPs, etcd lists 3 voters and status reports 3 ready. Baseline: one bare etcd pod start.

use anyhow::{Context, Result};

use crate::observe::Observer;
use crate::report::{Sample, secs};
use crate::scenarios::{CLUSTER, Ctx, SELECTOR, healthy_cluster_with, in_namespace, operator_sample};

fn uid(p: &crate::kube::PodInfo) -> String {
    p.raw["metadata"]["uid"].as_str().unwrap_or_default().to_string()
}

const PVC: &str = "  pod:\n    persistentVolumeClaimSpec:\n      accessModes: [ReadWriteOnce]\n      resources: {requests: {storage: 64Mi}}\n";
const FROM_SURVIVOR: &str = "  recovery: {quorumLoss: FromSurvivor, afterSeconds: 0}\n";

/// Deletes two followers (force: their data is gone with them when `force`), waits until 3
/// members serve again, none of them a deleted pod object.
fn lose_two(ctx: &Ctx, prefix: &str, extra_spec: &str, force: bool, title: &str) -> Result<Sample> {
    in_namespace(ctx, prefix, true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let before = healthy_cluster_with(ctx, ns, &mut obs, 3, "3.5.1", extra_spec)?;
        let victims: Vec<String> = before
            .live()
            .map(|p| p.name.clone())
            .filter(|p| before.probes.get(p).is_some_and(|x| !x.is_leader))
            .take(2)
            .collect();
        anyhow::ensure!(victims.len() == 2, "two followers: {}", before.describe());
        let old_uids: Vec<String> = before.pods.iter().map(uid).collect();
        obs.start();
        let mut args = vec!["delete", "pod", "--wait=false"];
        if force {
            args.extend(["--force", "--grace-period=0"]);
        }
        args.extend(victims.iter().map(String::as_str));
        ns.run(&args)?;
        obs.marks.once("kubectl delete returned", true, obs.t0.elapsed());
        let (at, _) = obs.until(ctx.timeout, "3 healthy members again", |s, m| {
            let fresh = s.live().filter(|p| !old_uids.contains(&uid(p))).count();
            m.once("first new pod exists", fresh >= 1, s.at);
            m.once("first new pod answers", s.live().any(|p| !old_uids.contains(&uid(p)) && s.answers(&p.name)), s.at);
            m.once("a learner in etcd", s.learners() > 0, s.at);
            let done_etcd = s.live_count() == 3 && fresh >= 2 && s.answering() == 3 && s.voters_are(3);
            m.once("3 members answer (etcd healthy)", done_etcd, s.at);
            done_etcd && s.status_ready(3)
        })?;
        let mut sample = operator_sample(title, ns, op, &obs, at, true);
        if let Some(d) = obs.marks.get("3 members answer (etcd healthy)") {
            sample.extra.insert("etcd_healthy", secs(d));
        }
        Ok(sample)
    })
}

pub fn pvc(ctx: &Ctx) -> Result<Sample> {
    lose_two(ctx, "bench-recover-pvc", PVC, false, "recover 3-member PVC cluster from 2 deleted pods")
}

pub fn survivor(ctx: &Ctx) -> Result<Sample> {
    lose_two(ctx, "bench-recover-survivor", FROM_SURVIVOR, true, "recover 2-of-3 emptyDir loss FromSurvivor")
}

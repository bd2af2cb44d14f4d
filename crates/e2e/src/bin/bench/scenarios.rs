//! The measurements. Each sample runs in a fresh namespace (deleted afterwards, also on error);
//! operator samples start their own operator process for that namespace. The clock starts right
//! before the user's action (kubectl apply / delete) and stops at the first poll that sees the
//! end condition.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use e2e::harness::{DEFAULT_LOG, Operator, ProcessOptions, diagnostics};
use e2e::manifests::{cluster_manifest, static_cluster_manifest};
use e2e::{ETCD_IMAGE_3_5_1, Kubectl, TestNamespace};
use tokio::runtime::Runtime;

use crate::etcd::{Writer, missing_acknowledged};
use crate::observe::{Marks, Observer, Snap};
use crate::phases;
use crate::report::{Sample, operator_timeline, pod_facts, secs};

pub const CLUSTER: &str = "bench";
pub(crate) const SELECTOR: &str = "app=etcd,etcd_cluster=bench";

pub struct Ctx {
    pub kubectl: Kubectl,
    pub rt: Runtime,
    pub operator_bin: PathBuf,
    pub init_image: String,
    pub log_dir: PathBuf,
    /// Bound of every wait.
    pub timeout: Duration,
    /// Pause after a set-up cluster reports healthy, before the measured action.
    pub settle: Duration,
    pub write_interval: Duration,
    pub write_timeout: Duration,
}

impl Ctx {
    /// The operator under test as a process for `ns`, logging JSON (the bench reads the time of
    /// each action from it) with `rust_log`; killed when dropped, and when the bench dies.
    pub fn start_operator(&self, ns: &TestNamespace, rust_log: &str) -> Result<Operator> {
        let opts = ProcessOptions {
            bin: self.operator_bin.clone(),
            rust_log: rust_log.into(),
            json_log: true,
            log_dir: Some(self.log_dir.clone()),
            env: vec![("ETCD_OPERATOR_INIT_IMAGE".into(), self.init_image.clone())],
        };
        Operator::start_process_with(ns, &opts)
    }
}

/// Prints a sample's timeline (milestones, operator actions, planned steps, pod facts) to stderr.
pub(crate) fn print_timeline(title: &str, value: Duration, marks: &Marks, steps: &[String], facts: &[String]) {
    eprintln!("  {title}: {:.2}s", secs(value));
    let mut all = marks.0.clone();
    all.sort_by_key(|(_, d)| *d);
    for (name, d) in &all {
        eprintln!("    {:7.2}s  {name}", secs(*d));
    }
    if !steps.is_empty() {
        eprintln!("    operator plans (debug log):");
        for s in steps {
            eprintln!("      {s}");
        }
    }
    if !facts.is_empty() {
        eprintln!("    pods (Kubernetes timestamps, 1 s resolution, from the action):");
        for f in facts {
            eprintln!("      {f}");
        }
    }
}

/// A fresh namespace (and an operator for it when `operator`); `body` runs in it; the namespace
/// is deleted afterwards whatever happened, and waited for so samples do not overlap.
pub(crate) fn in_namespace<T>(
    ctx: &Ctx,
    prefix: &str,
    operator: bool,
    body: impl FnOnce(&TestNamespace, Option<&Operator>) -> Result<T>,
) -> Result<T> {
    let ns = TestNamespace::create_with(&ctx.kubectl, prefix)?;
    let t = Instant::now();
    let op = if operator {
        match ctx.start_operator(&ns, DEFAULT_LOG) {
            Ok(op) => Some(op),
            Err(e) => return Err(e), // `ns` is dropped: deletion requested
        }
    } else {
        None
    };
    // The cause first, then what the namespace looked like.
    let r = body(&ns, op.as_ref()).map_err(|e| anyhow::anyhow!("{e:#}\n{}", diagnostics(&ns, op.as_ref())));
    drop(op);
    let name = ns.name.clone();
    let t_del = Instant::now();
    match ns.finish(ctx.timeout) {
        Ok(()) => eprintln!(
            "  (namespace {name}: {:.1}s in all, deletion took {:.1}s)",
            t.elapsed().as_secs_f64(),
            t_del.elapsed().as_secs_f64()
        ),
        Err(e) => eprintln!("bench: warning: {e:#}"),
    }
    r
}

/// Operator sample epilogue: merge the operator's actions into the marks, print the timeline.
pub(crate) fn operator_sample(
    title: &str,
    ns: &TestNamespace,
    op: &Operator,
    obs: &Observer,
    at: Duration,
    all_pods: bool,
) -> Sample {
    let (op_marks, steps) = operator_timeline(&op.log_text(), obs.t0_wall, secs(at));
    let mut marks = obs.marks.clone();
    marks.0.extend(op_marks.0);
    let facts = pod_facts(ns, SELECTOR, obs.t0_wall, all_pods);
    print_timeline(
        &format!("{title} (namespace {}, operator log {})", ns.name, op.log.display()),
        at,
        &marks,
        &steps,
        &facts,
    );
    Sample { value: secs(at), marks, extra: BTreeMap::new() }
}

/// Set-up (not measured): apply a `size`-member cluster and wait until it is healthy.
pub(crate) fn healthy_cluster(
    ctx: &Ctx,
    ns: &TestNamespace,
    obs: &mut Observer,
    size: usize,
    version: &str,
) -> Result<Snap> {
    healthy_cluster_with(ctx, ns, obs, size, version, "")
}

/// `healthy_cluster` with more spec lines (indented two spaces, under `spec:`).
pub(crate) fn healthy_cluster_with(
    ctx: &Ctx,
    ns: &TestNamespace,
    obs: &mut Observer,
    size: usize,
    version: &str,
    extra_spec: &str,
) -> Result<Snap> {
    ns.apply(&cluster_manifest(&ns.name, CLUSTER, size, version, extra_spec))?;
    let (_, snap) = obs.until(ctx.timeout, &format!("set-up: {size} healthy members at {version}"), |s, _| {
        s.live_count() == size
            && s.answering() == size
            && s.voters_are(size)
            && s.status_ready(size)
            && s.members_reporting(version) == size
    })?;
    std::thread::sleep(ctx.settle);
    Ok(snap)
}

/// 1. `kubectl apply` of a 3-member EtcdCluster → all 3 answer a linearizable read at their pod
///    IP, etcd lists 3 voters, and status reports 3 ready.
pub fn create(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-create", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        obs.start();
        ns.apply(&cluster_manifest(&ns.name, CLUSTER, 3, "3.5.1", ""))?;
        obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
        let none = BTreeSet::new();
        let (at, _) = obs.until(ctx.timeout, "3 healthy members and status 3 ready", |s, m| {
            phases::track_new(s, m, &none, 3);
            m.once("3 pods exist", s.live_count() == 3, s.at);
            m.once("3 pods have an IP", s.with_ip() == 3, s.at);
            m.once("3 pods Initialized (wait-dns done)", s.live().filter(|p| p.initialized).count() == 3, s.at);
            m.once("first member answers", s.answering() >= 1, s.at);
            m.once("3 members answer (etcd healthy)", s.answering() == 3 && s.voters_are(3), s.at);
            m.once("3 pods Ready", s.ready_pods() == 3, s.at);
            m.once("status: 3 ready", s.status_ready(3), s.at);
            s.live_count() == 3 && s.answering() == 3 && s.voters_are(3) && s.status_ready(3)
        })?;
        phases::until_routed(&mut obs, &none, 3);
        let mut sample = operator_sample("create", ns, op, &obs, at, true);
        phases::collect(&mut sample, ns, SELECTOR, &none, obs.t0_wall, Some(&op.log_text()), at);
        if let Some(d) = obs.marks.get("3 members answer (etcd healthy)") {
            sample.extra.insert("etcd_healthy", secs(d));
        }
        Ok(sample)
    })
}

/// Baseline of 1: 3 etcd pods with a static --initial-cluster under a headless Service, applied
/// by hand → all 3 answer a linearizable read and etcd lists 3 voters.
pub fn static_create(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-static", false, |ns, _| {
        let mut obs = Observer::new(ns, &ctx.rt, "app=static", None);
        obs.start();
        ns.apply(&static_cluster_manifest(&ns.name, "static", 3, ETCD_IMAGE_3_5_1))?;
        obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
        let none = BTreeSet::new();
        let (at, _) = obs.until(ctx.timeout, "3 healthy static members", |s, m| {
            phases::track_new(s, m, &none, 3);
            m.once("3 pods exist", s.live_count() == 3, s.at);
            m.once("3 pods have an IP", s.with_ip() == 3, s.at);
            m.once("a container restarted", s.live().any(|p| p.restarts > 0), s.at);
            m.once("first member answers", s.answering() >= 1, s.at);
            m.once("3 members answer (etcd healthy)", s.answering() == 3 && s.voters_are(3), s.at);
            m.once("3 pods Ready", s.ready_pods() == 3, s.at);
            s.live_count() == 3 && s.answering() == 3 && s.voters_are(3)
        })?;
        let facts = pod_facts(ns, "app=static", obs.t0_wall, true);
        print_timeline(&format!("static 3-pod bootstrap (namespace {})", ns.name), at, &obs.marks, &[], &facts);
        let mut sample = Sample { value: secs(at), marks: obs.marks.clone(), extra: BTreeMap::new() };
        phases::collect(&mut sample, ns, "app=static", &none, obs.t0_wall, None, at);
        let (pods, _) = crate::kube::get_pods_and_status(ns, "app=static", None)?;
        sample.extra.insert("restarts", pods.iter().map(|p| p.restarts as f64).sum());
        Ok(sample)
    })
}

/// 2. Delete one member pod (a follower) of a healthy 3-member cluster → 3 members answer again,
///    etcd lists 3 voters without the deleted one, status reports 3 ready without it.
pub fn heal(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-heal", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let before = healthy_cluster(ctx, ns, &mut obs, 3, "3.5.1")?;
        let victim = before
            .live()
            .map(|p| p.name.clone())
            .find(|p| before.probes.get(p).is_some_and(|x| !x.is_leader))
            .context("no follower found")?;
        let before_uids = phases::uids(&before);
        obs.start();
        ns.run(&["delete", "pod", &victim, "--wait=false"])?;
        obs.marks.once("kubectl delete returned", true, obs.t0.elapsed());
        let v = victim.as_str();
        let (at, _) = obs.until(ctx.timeout, "3 healthy members again without the deleted one", |s, m| {
            phases::track_new(s, m, &before_uids, 1);
            let replacement = s.live().find(|p| !before.pods.iter().any(|b| b.name == p.name));
            m.once("deleted pod gone from the API", !s.pods.iter().any(|p| p.name == v), s.at);
            m.once(
                "deleted member removed from etcd",
                s.members.as_ref().is_some_and(|ms| !ms.iter().any(|x| x.pod == v)),
                s.at,
            );
            m.once("replacement pod exists", replacement.is_some(), s.at);
            m.once("replacement learner in etcd", s.learners() > 0, s.at);
            m.once("replacement pod has an IP", replacement.is_some_and(|p| p.ip.is_some()), s.at);
            m.once("replacement pod Initialized (wait-dns done)", replacement.is_some_and(|p| p.initialized), s.at);
            m.once("replacement answers (voter)", replacement.is_some_and(|p| s.answers(&p.name)), s.at);
            m.once("replacement pod Ready", replacement.is_some_and(|p| p.ready), s.at);
            let done_etcd =
                s.live_count() == 3 && !s.live().any(|p| p.name == v) && s.answering() == 3 && s.voters_are(3);
            m.once("3 members answer (etcd healthy)", done_etcd, s.at);
            let done_status = s.status_ready(3) && !s.status.as_ref().is_some_and(|x| x.ready.iter().any(|r| r == v));
            m.once("status: 3 ready", done_status, s.at);
            done_etcd && done_status
        })?;
        phases::until_routed(&mut obs, &before_uids, 1);
        let mut sample = operator_sample(&format!("heal (deleted follower {victim})"), ns, op, &obs, at, false);
        phases::collect(&mut sample, ns, SELECTOR, &before_uids, obs.t0_wall, Some(&op.log_text()), at);
        if let Some(d) = obs.marks.get("3 members answer (etcd healthy)") {
            sample.extra.insert("etcd_healthy", secs(d));
        }
        Ok(sample)
    })
}

/// Baseline of 2 and 3: one single-member etcd 3.5.1 pod (e2e::etcd_pod), create → Ready and
/// answering a linearizable read.
pub fn bare_pod(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-bare", false, |ns, _| {
        let mut obs = Observer::new(ns, &ctx.rt, "app=bare", None);
        obs.start();
        ns.apply(&e2e::etcd_pod(&ns.name, "bare-0", "bare", ETCD_IMAGE_3_5_1, "emptyDir: {}"))?;
        obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
        let none = BTreeSet::new();
        let (at, _) = obs.until(ctx.timeout, "the pod Ready and answering", |s, m| {
            phases::track_new(s, m, &none, 1);
            m.once("pod exists", s.live_count() == 1, s.at);
            m.once("pod has an IP", s.with_ip() == 1, s.at);
            m.once("etcd answers", s.answering() == 1, s.at);
            m.once("pod Ready", s.ready_pods() == 1, s.at);
            s.live_count() == 1 && s.answering() == 1 && s.ready_pods() == 1
        })?;
        let facts = pod_facts(ns, "app=bare", obs.t0_wall, true);
        print_timeline(&format!("bare pod start (namespace {})", ns.name), at, &obs.marks, &[], &facts);
        let mut sample = Sample { value: secs(at), marks: obs.marks.clone(), extra: BTreeMap::new() };
        phases::collect(&mut sample, ns, "app=bare", &none, obs.t0_wall, None, at);
        Ok(sample)
    })
}

/// 3. Apply size 5 to a healthy 3-member cluster → 5 members answer, 5 voters, status 5 ready.
///    The value is the total divided by the 2 members added.
pub fn scale(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-scale", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let before_uids = phases::uids(&healthy_cluster(ctx, ns, &mut obs, 3, "3.5.1")?);
        obs.start();
        ns.apply(&cluster_manifest(&ns.name, CLUSTER, 5, "3.5.1", ""))?;
        obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
        let (at, _) = obs.until(ctx.timeout, "5 healthy members and status 5 ready", |s, m| {
            phases::track_new(s, m, &before_uids, 2);
            for k in 4..=5 {
                let n_members = s.members.as_ref().map(|x| x.len()).unwrap_or(0);
                m.once(format!("member {k}: learner in etcd"), n_members >= k, s.at);
                m.once(format!("member {k}: pod exists"), s.live_count() >= k, s.at);
                m.once(
                    format!("member {k}: pod Initialized (wait-dns done)"),
                    s.live().filter(|p| p.initialized).count() >= k,
                    s.at,
                );
                m.once(format!("member {k}: answers (voter)"), s.answering() >= k, s.at);
                m.once(format!("member {k}: status ready"), s.status_ready_count() >= k, s.at);
            }
            s.live_count() == 5 && s.answering() == 5 && s.voters_are(5) && s.status_ready(5)
        })?;
        phases::until_routed(&mut obs, &before_uids, 2);
        let mut sample = operator_sample("scale 3→5", ns, op, &obs, at, false);
        phases::collect(&mut sample, ns, SELECTOR, &before_uids, obs.t0_wall, Some(&op.log_text()), at);
        sample.extra.insert("total", sample.value);
        sample.value /= 2.0;
        Ok(sample)
    })
}

fn endpoints_of(s: &Snap) -> Vec<String> {
    s.live().filter_map(|p| p.ip.as_ref().map(|ip| format!("http://{ip}:2379"))).collect()
}

/// 4. Upgrade a healthy 3-member 3.5.0 cluster to 3.5.1 while a client writes continuously
///    through all member endpoints → every member reports 3.5.1 and answers, status reports
///    currentVersion 3.5.1 and 3 ready. Failed writes (refused by every member) and retries
///    (a write re-sent to another member) are counted over the same interval; afterwards every
///    acknowledged write must be readable.
pub fn upgrade(ctx: &Ctx) -> Result<Sample> {
    in_namespace(ctx, "bench-upgrade", true, |ns, op| {
        let op = op.context("operator")?;
        let mut obs = Observer::new(ns, &ctx.rt, SELECTOR, Some(CLUSTER));
        let before = healthy_cluster(ctx, ns, &mut obs, 3, "3.5.0")?;
        let prefix = format!("bench/{}", ns.name);
        let writer = Writer::start(&ctx.rt, endpoints_of(&before), &prefix, ctx.write_interval, ctx.write_timeout);
        std::thread::sleep(Duration::from_secs(1)); // the writer is under way before the change
        obs.start();
        let t0 = obs.t0;
        let applied = ns.apply(&cluster_manifest(&ns.name, CLUSTER, 3, "3.5.1", ""));
        let waited = applied.and_then(|_| {
            obs.marks.once("kubectl apply returned", true, obs.t0.elapsed());
            obs.until(ctx.timeout, "3 healthy members at 3.5.1 and status currentVersion 3.5.1", |s, m| {
                writer.set_endpoints(endpoints_of(s));
                for k in 1..=3 {
                    m.once(format!("{k} member(s) report 3.5.1"), s.members_reporting("3.5.1") >= k, s.at);
                }
                let images = s.live().all(|p| p.image.ends_with(":v3.5.1"));
                m.once("all pod specs at v3.5.1", images && s.live_count() == 3, s.at);
                let st_version = s.status.as_ref().is_some_and(|x| x.current_version == "3.5.1");
                m.once("status: currentVersion 3.5.1", st_version, s.at);
                let done_etcd = images && s.members_reporting("3.5.1") == 3 && s.answering() == 3 && s.voters_are(3);
                m.once("3 members at 3.5.1 answer (etcd healthy)", done_etcd, s.at);
                m.once("status: 3 ready", s.status_ready(3), s.at);
                s.live_count() == 3 && done_etcd && s.status_ready(3) && st_version
            })
        });
        let records = writer.stop(&ctx.rt)?;
        let (at, last) = waited?;
        let end = t0 + at;
        let before_t0: Vec<_> = records.iter().filter(|r| r.started < t0).collect();
        let during: Vec<_> = records.iter().filter(|r| r.started >= t0 && r.started <= end).collect();
        let failed = during.iter().filter(|r| !r.ok).count();
        let retries: u32 = during.iter().map(|r| r.attempts.saturating_sub(1)).sum();
        let leader_waits: u32 = during.iter().map(|r| r.leader_waits).sum();
        let max_latency = during.iter().map(|r| r.latency).max().unwrap_or_default();
        // Longest time without a completed write, over the measured interval.
        let mut done_at: Vec<Instant> = during.iter().filter(|r| r.ok).map(|r| r.started + r.latency).collect();
        done_at.sort();
        let mut gap = Duration::ZERO;
        let mut prev = t0;
        for t in done_at.iter().copied().chain(std::iter::once(end)) {
            gap = gap.max(t.saturating_duration_since(prev));
            prev = prev.max(t);
        }
        let acked: BTreeSet<u64> = records.iter().filter(|r| r.ok).map(|r| r.seq).collect();
        let reader = endpoints_of(&last).into_iter().next().context("no endpoint to read back from")?;
        let missing = missing_acknowledged(&ctx.rt, &reader, &prefix, &acked)?;

        let mut sample = operator_sample("upgrade 3.5.0→3.5.1 under writes", ns, op, &obs, at, true);
        let mut errors: BTreeMap<String, usize> = BTreeMap::new();
        for r in &during {
            if r.attempts > 1 || !r.ok {
                let e = r.last_err.clone().unwrap_or_default();
                // One bucket per error kind, not per address.
                let kind = e.split_once(": ").map(|x| x.1).unwrap_or(&e).chars().take(120).collect::<String>();
                *errors.entry(format!("{}{kind}", if r.ok { "retried: " } else { "FAILED: " })).or_default() += 1;
            }
        }
        eprintln!(
            "    writer: {} writes in the interval ({} before it), {failed} failed, {retries} retries ({leader_waits} rounds re-sent during a leader election), max latency {:.0} ms, longest gap without a completed write {:.0} ms, {} acknowledged writes in all, {} missing on read-back",
            during.len(),
            before_t0.len(),
            max_latency.as_secs_f64() * 1000.0,
            gap.as_secs_f64() * 1000.0,
            acked.len(),
            missing.len()
        );
        for (e, n) in &errors {
            eprintln!("      {n:5} × {e}");
        }
        sample.extra.insert("writes", during.len() as f64);
        sample.extra.insert("failed", failed as f64);
        sample.extra.insert("retries", retries as f64);
        sample.extra.insert("leader_waits", leader_waits as f64);
        sample.extra.insert("max_latency_ms", (max_latency.as_secs_f64() * 1000.0).round());
        sample.extra.insert("longest_gap_ms", (gap.as_secs_f64() * 1000.0).round());
        sample.extra.insert("missing", missing.len() as f64);
        sample.extra.insert("failed_before", before_t0.iter().filter(|r| !r.ok).count() as f64);
        Ok(sample)
    })
}

//! `--only idle`: what the operator costs while nothing changes. Two set-ups, each in a fresh
//! namespace with a fresh operator process (release build): (a) `--idle-clusters` (10)
//! EtcdClusters of size 1 running, (b) `--idle-paused` (1000) paused EtcdClusters. After the
//! set-up has settled (no request but the Lease renewals and watches for `--idle-quiet-secs`), one
//! window of `--idle-window-secs` (300) measures
//! - the operator's RSS (`VmRSS` of /proc/<pid>/status, sampled every 5 s) and CPU time
//!   (utime + stime of /proc/<pid>/stat, end minus start);
//! - the operator's own requests by verb and resource, from its client's trace
//!   (`kube_client::client::builder=debug` names every request it sends), beside the apiserver's
//!   `apiserver_request_total` deltas over the same window. The apiserver's counter has no label for
//!   the client in Kubernetes 1.20 (neither user nor user agent), so those deltas are every
//!   client's requests (kubelet, controllers, other work on the cluster): an upper bound, not the
//!   operator's share.
//!
//! Counting those requests: `api_requests.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::harness::Operator;
use e2e::manifests::cluster_manifest;
use e2e::{Kubectl, TestNamespace};
use serde_json::Value;

use crate::api_requests::{Key, file_len, requests, server_totals};
use crate::scenarios::Ctx;

/// The operator's default filter plus kube-client's request trace (two lines per request).
pub const IDLE_LOG: &str =
    "info,kube_runtime::controller=warn,tower=warn,hyper=warn,kube_client::client::builder=debug";
const MIB: f64 = 1024.0 * 1024.0;

pub struct IdleOpts {
    pub window: Duration,
    pub clusters: usize,
    pub paused: usize,
    pub quiet: Duration,
}

/// One measured window.
struct Window {
    secs: f64,
    cpu_secs: f64,
    /// VmRSS samples, bytes.
    rss: Vec<u64>,
    /// VmHWM (peak RSS since the process started), RssAnon and RssFile at the end, bytes.
    hwm: u64,
    anon: u64,
    file: u64,
    ops: BTreeMap<Key, u64>,
    server: BTreeMap<Key, f64>,
    /// `metadata.generation` of the EtcdCluster CRD at the window's start and end.
    crd_generation: (String, String),
}

const CRD: &str = "customresourcedefinition/etcdclusters.etcd.database.coreos.com";

fn crd_generation(k: &Kubectl) -> String {
    k.run(&["get", CRD, "-o", "jsonpath={.metadata.generation}"]).unwrap_or_else(|e| format!("? ({e})"))
}

pub fn run(ctx: &Ctx, o: &IdleOpts) -> Result<(String, bool)> {
    let mut out = format!(
        "\nidle: operator {} as a process, RUST_LOG={IDLE_LOG}; {:.0} s window after {:.0} s without requests but Lease renewals and watches\n",
        ctx.operator_bin.display(),
        o.window.as_secs_f64(),
        o.quiet.as_secs_f64()
    );
    let mut ok = true;
    let setup_timeout = ctx.timeout.max(Duration::from_secs(600));

    // (a) N clusters of size 1, running.
    let title = format!("{} EtcdClusters of size 1 running", o.clusters);
    let (text, pass) = phase(ctx, o, "bench-idle-run", &title, 30.0, |ns| {
        let docs: Vec<String> =
            (0..o.clusters).map(|i| cluster_manifest(&ns.name, &format!("idle-{i:04}"), 1, "3.5.1", "")).collect();
        create_all(&ns.kubectl, &docs)?;
        wait_clusters(ns, &format!("{} clusters with 1 ready member", o.clusters), o.clusters, setup_timeout, |c| {
            let st = &c["status"];
            st["members"]["ready"].as_array().is_some_and(|a| a.len() == 1) && st["phase"] == "Running"
        })
    })?;
    out.push_str(&text);
    ok &= pass;

    // (b) N paused objects.
    let title = format!("{} paused EtcdClusters", o.paused);
    let (text, pass) = phase(ctx, o, "bench-idle-paused", &title, 100.0, |ns| {
        let docs: Vec<String> = (0..o.paused)
            .map(|i| cluster_manifest(&ns.name, &format!("paused-{i:04}"), 1, "3.5.1", "  paused: true\n"))
            .collect();
        create_all(&ns.kubectl, &docs)?;
        wait_clusters(ns, &format!("{} clusters with status.controlPaused", o.paused), o.paused, setup_timeout, |c| {
            c["status"]["controlPaused"] == true
        })
    })?;
    out.push_str(&text);
    ok &= pass;
    Ok((out, ok))
}

/// Fresh namespace and operator, `setup`, settle, one window, report; the namespace is deleted
/// afterwards whatever happened.
fn phase(
    ctx: &Ctx,
    o: &IdleOpts,
    prefix: &str,
    title: &str,
    target_mib: f64,
    setup: impl FnOnce(&TestNamespace) -> Result<()>,
) -> Result<(String, bool)> {
    let ns = TestNamespace::create_with(&ctx.kubectl, prefix)?;
    let r = (|| {
        let mut op = ctx.start_operator(&ns, IDLE_LOG)?;
        eprintln!("idle: {title} (namespace {}, operator log {})", ns.name, op.log.display());
        let t = Instant::now();
        setup(&ns).with_context(|| format!("set-up of {title}"))?;
        eprintln!("  set-up done in {:.0} s", t.elapsed().as_secs_f64());
        let settled = settle(&op, o.quiet, Duration::from_secs(300));
        match &settled {
            Ok(d) => eprintln!("  quiet after {:.0} s more", d.as_secs_f64()),
            Err(e) => eprintln!("  {e:#}"),
        }
        eprintln!("  measuring for {:.0} s", o.window.as_secs_f64());
        let w = measure(&mut op, &ctx.kubectl, o.window)?;
        let (text, pass) = render(title, &ns.name, &w, target_mib);
        let note = settled.err().map(|e| format!("  note: the operator never went quiet before the window: {e:#}\n"));
        Ok((text + &note.unwrap_or_default(), pass))
    })();
    if let Err(e) = ns.finish(ctx.timeout) {
        eprintln!("bench: warning: {e:#}");
    }
    r
}

/// `kubectl create` of the objects, 10 kubectl processes at a time (kubectl sends one request
/// per object, rate-limited on its side).
pub(crate) fn create_all(k: &Kubectl, docs: &[String]) -> Result<()> {
    let chunk = docs.len().div_ceil(10).max(1);
    std::thread::scope(|s| {
        let handles: Vec<_> = docs
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || -> Result<()> {
                    let mut child = k
                        .command()
                        .args(["create", "-f", "-", "-o", "name"])
                        .stdin(Stdio::piped())
                        .stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()?;
                    child.stdin.take().context("stdin")?.write_all(part.join("---\n").as_bytes())?;
                    let out = child.wait_with_output()?;
                    if !out.status.success() {
                        bail!("kubectl create failed: {}", String::from_utf8_lossy(&out.stderr).trim());
                    }
                    Ok(())
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| anyhow::anyhow!("kubectl thread panicked"))?)
    })
}

/// Polls the namespace's EtcdClusters every 3 s until `n` satisfy `done`.
fn wait_clusters(
    ns: &TestNamespace,
    what: &str,
    n: usize,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Result<()> {
    let t = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let list = ns.json(&["get", "etcdclusters.etcd.database.coreos.com"])?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let count = items.iter().filter(|c| done(c)).count();
        if count >= n {
            return Ok(());
        }
        if t.elapsed() > timeout {
            bail!("timed out after {timeout:?} waiting for {what}: {count} of {n}");
        }
        if last_report.elapsed() > Duration::from_secs(30) {
            eprintln!("  waiting for {what}: {count} of {n} after {:.0} s", t.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        std::thread::sleep(Duration::from_secs(3));
    }
}

/// Waits until the operator has sent nothing but Lease renewals and watches for `quiet`;
/// returns how long that took, or an error naming what it kept sending after `max`.
fn settle(op: &Operator, quiet: Duration, max: Duration) -> Result<Duration> {
    let t = Instant::now();
    let mut offset = file_len(&op.log)?;
    let mut last_busy = Instant::now();
    let mut busy: BTreeMap<Key, u64> = BTreeMap::new();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let end = file_len(&op.log)?;
        let new = requests(&op.log, offset, end)?;
        offset = end;
        let mut any = false;
        for (k, n) in new {
            if !is_background(&k) {
                any = true;
                *busy.entry(k).or_default() += n;
            }
        }
        if any {
            last_busy = Instant::now();
        } else if last_busy.elapsed() >= quiet {
            return Ok(t.elapsed());
        }
        if t.elapsed() > max {
            bail!("still sending after {max:?}: {busy:?}");
        }
    }
}

/// What an idle operator is expected to send: Lease reads and renewals, watch (re)starts.
fn is_background(k: &Key) -> bool {
    k.0 == "WATCH" || (k.1 == "leases.coordination.k8s.io" && (k.0 == "GET" || k.0 == "PUT"))
}

fn measure(op: &mut Operator, k: &Kubectl, window: Duration) -> Result<Window> {
    let pid = op.pid().context("the operator runs as a process")?;
    let log_start = file_len(&op.log)?;
    let g0 = crd_generation(k);
    let m0 = server_totals(k)?;
    let cpu0 = cpu_ticks(pid)?;
    let t0 = Instant::now();
    let mut rss = vec![proc_status(pid)?.0];
    while t0.elapsed() < window {
        std::thread::sleep(Duration::from_secs(5).min(window.saturating_sub(t0.elapsed())));
        if !op.running() {
            bail!("the operator exited during the window; log {}", op.log.display());
        }
        rss.push(proc_status(pid)?.0);
    }
    let cpu1 = cpu_ticks(pid)?;
    let secs = t0.elapsed().as_secs_f64();
    let (last, hwm, anon, file) = proc_status(pid)?;
    rss.push(last);
    let m1 = server_totals(k)?;
    let g1 = crd_generation(k);
    let ops = requests(&op.log, log_start, file_len(&op.log)?)?;
    let mut server = BTreeMap::new();
    for (key, v1) in &m1 {
        let d = v1 - m0.get(key).copied().unwrap_or(0.0);
        if d > 0.0 {
            server.insert(key.clone(), d);
        }
    }
    Ok(Window {
        secs,
        cpu_secs: (cpu1 - cpu0) as f64 / clk_tck(),
        rss,
        hwm,
        anon,
        file,
        ops,
        server,
        crd_generation: (g0, g1),
    })
}

fn render(title: &str, ns: &str, w: &Window, target_mib: f64) -> (String, bool) {
    let mib = |b: u64| b as f64 / MIB;
    let max = w.rss.iter().copied().max().unwrap_or(0);
    let rss_ok = mib(max) <= target_mib;
    let lists: u64 = w.ops.iter().filter(|(k, _)| k.0 == "LIST").map(|(_, n)| n).sum();
    let mut s = format!("\nidle with {title} (namespace {ns}), {:.0} s window:\n", w.secs);
    s.push_str(&format!(
        "  operator RSS: max {:.1} MiB (start {:.1}, end {:.1}; {} samples) (target: ≤{target_mib:.0} MiB) {}\n",
        mib(max),
        mib(w.rss[0]),
        mib(*w.rss.last().unwrap_or(&0)),
        w.rss.len(),
        if rss_ok { "PASS" } else { "MISS" }
    ));
    s.push_str(&format!(
        "    at the end: {:.1} MiB anonymous, {:.1} MiB file-backed; peak since start (VmHWM, includes the set-up) {:.1} MiB\n",
        mib(w.anon),
        mib(w.file),
        mib(w.hwm)
    ));
    s.push_str(&format!(
        "  operator CPU: {:.2} s in {:.0} s = {:.2}% of one core (target: none set) INFO\n",
        w.cpu_secs,
        w.secs,
        100.0 * w.cpu_secs / w.secs
    ));
    let total: u64 = w.ops.values().sum();
    s.push_str(&format!(
        "  operator LIST requests: {lists} (target: no periodic LIST) {}\n",
        if lists == 0 { "PASS" } else { "MISS" }
    ));
    s.push_str(&format!(
        "  operator requests to the apiserver: {total} ({:.1}/min); by verb and resource, beside apiserver_request_total deltas (all clients):\n",
        total as f64 * 60.0 / w.secs
    ));
    s.push_str(&format!(
        "    {:<8} {:<48} {:>9} {:>8} {:>12}\n",
        "verb", "resource", "operator", "per min", "all clients"
    ));
    for ((verb, res), n) in &w.ops {
        let all = w.server.get(&(verb.clone(), res.clone())).map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
        s.push_str(&format!("    {verb:<8} {res:<48} {n:>9} {:>8.1} {all:>12}\n", *n as f64 * 60.0 / w.secs));
    }
    // The apiserver's view of what the operator works with, whoever asked.
    let mine: BTreeSet<&str> =
        ["etcdclusters", "pods", "services", "persistentvolumeclaims", "leases", "events"].into_iter().collect();
    let rows: Vec<String> = w
        .server
        .iter()
        .filter(|((verb, res), _)| {
            let base = res.split(['.', '/']).next().unwrap_or("");
            mine.contains(base) && !w.ops.contains_key(&(verb.clone(), res.clone()))
        })
        .map(|((verb, res), n)| format!("{verb} {res}: {n:.0}"))
        .collect();
    if !rows.is_empty() {
        s.push_str(&format!("    other clients only, same resources: {}\n", rows.join(", ")));
    }
    let all_lists: f64 = w.server.iter().filter(|(k, _)| k.0 == "LIST").map(|(_, n)| n).sum();
    let all: f64 = w.server.values().sum();
    s.push_str(&format!("    apiserver, all clients, whole window: {all:.0} requests, {all_lists:.0} of them LIST\n"));
    let (g0, g1) = &w.crd_generation;
    if g0 != g1 {
        s.push_str(&format!(
            "  note: the EtcdCluster CRD changed during the window (generation {g0} → {g1}: an operator of another \
             build installed its CRDs). The apiserver then ends every watch of EtcdClusters and the operator must \
             list them again: such LISTs are caused from outside, not periodic.\n"
        ));
    }
    (s, rss_ok && lists == 0)
}

// --- /proc -------------------------------------------------------------------------------------

pub(crate) fn clk_tck() -> f64 {
    crate::sh("getconf", &["CLK_TCK"]).parse().unwrap_or(100.0)
}

/// utime + stime of the process, in clock ticks.
pub(crate) fn cpu_ticks(pid: u32) -> Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/<pid>/stat")?;
    // Fields after the command name (which may hold spaces) start at field 3 (state).
    let after = stat.rsplit_once(')').map(|x| x.1).context("malformed stat")?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).context("malformed stat");
    Ok(n(11)? + n(12)?)
}

/// (VmRSS, VmHWM, RssAnon, RssFile) in bytes.
pub(crate) fn proc_status(pid: u32) -> Result<(u64, u64, u64, u64)> {
    let st = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/<pid>/status")?;
    let kb = |name: &str| {
        st.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
            .unwrap_or(0)
    };
    Ok((kb("VmRSS:"), kb("VmHWM:"), kb("RssAnon:"), kb("RssFile:")))
}

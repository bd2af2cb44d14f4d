//! The operator's own scale: N EtcdClusters of 1 member (etcd 3.5.1) created at once in one
//! namespace watched by one operator process (RUST_LOG=info) → time until every one reports
//! phase Running with its member ready; the process's CPU seconds (utime + stime, from the
//! create to the end) and peak RSS (VmHWM, since its start). Runs once, whatever --runs says.
//! An operator that exits (it stops when it cannot renew its Lease in time, which an overloaded
//! API server can cause) is started again, as its Deployment would be: the row counts and prints
//! those restarts, and sums the CPU of every run of the process.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::manifests::cluster_manifest;

use crate::idle::{clk_tck, cpu_ticks, create_all, proc_status};
use crate::observe::Marks;
use crate::report::{Sample, secs};
use crate::scenarios::{Ctx, in_namespace};

pub fn run(ctx: &Ctx, clusters: usize) -> Result<Sample> {
    in_namespace(ctx, "bench-many", false, |ns, _| {
        // Each etcd member preallocates a 64 MiB WAL file: N of them on a full disk stopped the
        // local cluster's own etcd once (ENOSPC). Refuse unless the node's disk has room to spare.
        let avail: u64 = crate::sh("df", &["--output=avail", "-B1", "/var/lib"])
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        let need = clusters as u64 * (128 << 20) + (10 << 30);
        if avail < need {
            bail!(
                "{} GiB free on /var/lib, want {} GiB for {clusters} etcd members and a margin",
                avail >> 30,
                need >> 30
            );
        }
        let mut op = ctx.start_operator(ns, "info")?;
        let mut pid = op.pid().context("the operator is not a process")?;
        eprintln!("  {clusters} clusters (namespace {}, operator log {})", ns.name, op.log.display());
        // The operator's start-up (CRD check, caches) is not the measured work.
        std::thread::sleep(Duration::from_secs(3));
        let mut ticks0 = cpu_ticks(pid)?;
        // CPU of earlier runs of the process, the last reading of this one, its peak RSS.
        let (mut ticks_before, mut ticks_seen, mut peak_bytes, mut restarts) = (0u64, ticks0, 0u64, 0u32);
        let docs: Vec<String> =
            (0..clusters).map(|i| cluster_manifest(&ns.name, &format!("many-{i:03}"), 1, "3.5.1", "")).collect();
        let t0 = Instant::now();
        create_all(&ns.kubectl, &docs)?;
        let mut marks = Marks::default();
        marks.once("all created (kubectl returned)", true, t0.elapsed());
        let timeout = ctx.timeout.max(Duration::from_secs(600));
        let mut last_report = Instant::now();
        let at = loop {
            if op.running() {
                ticks_seen = cpu_ticks(pid).unwrap_or(ticks_seen);
                peak_bytes = peak_bytes.max(proc_status(pid).map(|s| s.1).unwrap_or(0));
            } else {
                let why = op.log_text().lines().rev().find(|l| l.contains("ERROR")).unwrap_or_default().to_string();
                eprintln!(
                    "  the operator exited after {:.0} s; started again, as its Deployment would be. Its last error: {}",
                    t0.elapsed().as_secs_f64(),
                    why.chars().take(300).collect::<String>()
                );
                marks.once(format!("operator restart #{}", restarts + 1), true, t0.elapsed());
                (ticks_before, restarts) = (ticks_before + ticks_seen - ticks0, restarts + 1);
                // The next run writes the same log file: keep this one's beside it.
                let _ = std::fs::copy(&op.log, op.log.with_extension(format!("run{restarts}.log")));
                drop(op);
                op = ctx.start_operator(ns, "info")?;
                pid = op.pid().context("the operator is not a process")?;
                (ticks0, ticks_seen) = (0, cpu_ticks(pid)?);
            }
            let list = ns.json(&["get", "etcdclusters.etcd.database.coreos.com"])?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let running = items
                .iter()
                .filter(|c| {
                    let st = &c["status"];
                    st["phase"] == "Running" && st["members"]["ready"].as_array().is_some_and(|a| a.len() == 1)
                })
                .count();
            let at = t0.elapsed();
            marks.once("first cluster Running", running >= 1, at);
            marks.once("half the clusters Running", running * 2 >= clusters, at);
            if running >= clusters {
                marks.once("all clusters Running", true, at);
                break at;
            }
            if at > timeout {
                bail!("timed out after {timeout:?}: {running} of {clusters} clusters Running with 1 ready member");
            }
            if last_report.elapsed() > Duration::from_secs(20) {
                eprintln!("  {running} of {clusters} Running after {:.0} s", at.as_secs_f64());
                last_report = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        let cpu = (ticks_before + cpu_ticks(pid)? - ticks0) as f64 / clk_tck();
        let (rss, hwm, _, _) = proc_status(pid)?;
        let hwm = hwm.max(peak_bytes);
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        eprintln!(
            "  {clusters} clusters Running after {:.1} s; operator CPU {cpu:.1} s, RSS {:.1} MiB, peak {:.1} MiB, restarts {restarts}",
            secs(at),
            mib(rss),
            mib(hwm)
        );
        for (n, d) in &marks.0 {
            eprintln!("    {:7.2}s  {n}", secs(*d));
        }
        let mut extra = BTreeMap::new();
        extra.insert("clusters", clusters as f64);
        extra.insert("cpu_s", (cpu * 10.0).round() / 10.0);
        extra.insert("peak_rss_mib", (mib(hwm) * 10.0).round() / 10.0);
        extra.insert("rss_mib", (mib(rss) * 10.0).round() / 10.0);
        extra.insert("operator_restarts", f64::from(restarts));
        drop(op);
        Ok(Sample { value: secs(at), marks, extra })
    })
}

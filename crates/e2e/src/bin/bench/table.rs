//! The result table printed at the end of a run: each measurement beside its baseline, ratio
//! and target, then where the time went (phases and milestones, medians over the runs).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::report::{Sample, Stats, fmt_n, fmt_s, stats};
use crate::{backup, phases};

fn values(results: &BTreeMap<&str, Vec<Sample>>, kind: &str) -> Vec<f64> {
    results.get(kind).map(|v| v.iter().map(|s| s.value).collect()).unwrap_or_default()
}

/// The time of milestone `name` in each sample of `kind` that has it.
fn mark(results: &BTreeMap<&str, Vec<Sample>>, kind: &str, name: &str) -> Vec<f64> {
    results
        .get(kind)
        .map(|v| v.iter().filter_map(|s| s.marks.get(name)).map(|d| d.as_secs_f64()).collect())
        .unwrap_or_default()
}

fn extra(results: &BTreeMap<&str, Vec<Sample>>, kind: &str, key: &str) -> Vec<f64> {
    results.get(kind).map(|v| v.iter().filter_map(|s| s.extra.get(key).copied()).collect()).unwrap_or_default()
}

/// `name: value (baseline: x, ratio: y, target: ≤z) PASS/MISS`
fn line(name: &str, value: Option<Stats>, baseline: Option<(&str, Stats)>, target: Option<f64>) -> String {
    let Some(v) = value else { return format!("{name}: no successful sample (ERROR)") };
    let (base, ratio) = match baseline {
        Some((what, b)) => (format!("{what} {}", fmt_s(b)), Some(v.median / b.median)),
        None => ("none".into(), None),
    };
    let ratio_s = ratio.map(|r| format!("{r:.2}")).unwrap_or_else(|| "-".into());
    let (target_s, verdict) = match (target, ratio) {
        (Some(t), Some(r)) => (format!("≤{t:.1}×"), if r <= t { "PASS" } else { "MISS" }),
        (Some(t), None) => (format!("≤{t:.1}×"), "ERROR (no baseline)"),
        (None, _) => ("none set".into(), "INFO"),
    };
    format!("{name}: {} (baseline: {base}, ratio: {ratio_s}, target: {target_s}) {verdict}", fmt_s(v))
}

/// Median time of each milestone over the runs (only those seen in every run).
fn breakdown(kind: &str, title: &str, results: &BTreeMap<&str, Vec<Sample>>) -> String {
    let Some(samples) = results.get(kind) else { return String::new() };
    let mut names: Vec<String> = vec![];
    for s in samples {
        for (n, _) in &s.marks.0 {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
    }
    let mut rows: Vec<(f64, String)> = names
        .iter()
        .filter_map(|n| {
            let ts: Vec<f64> = samples.iter().filter_map(|s| s.marks.get(n)).map(|d| d.as_secs_f64()).collect();
            let st = stats(&ts)?;
            let seen = if ts.len() < samples.len() {
                format!("  (in {}/{} runs)", ts.len(), samples.len())
            } else {
                String::new()
            };
            Some((st.median, format!("    {:7.2}s  [{:6.2} … {:6.2}]  {n}{seen}", st.median, st.min, st.max)))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out = format!("  {title} — medians [min … max] from the action:\n");
    for (_, r) in rows {
        out.push_str(&r);
        out.push('\n');
    }
    out
}

pub fn render(selected: &[&str], r: &BTreeMap<&str, Vec<Sample>>, header: &str, took: Duration) -> String {
    let mut out = String::new();
    out.push_str(&format!("\n=== {header}; took {:.0} min ===\n", took.as_secs_f64() / 60.0));
    let st = |k: &str| stats(&values(r, k));
    let bare = st("bare").map(|b| ("bare pod start", b));
    for m in selected {
        match *m {
            "create" => {
                out.push_str(&line(
                    "create 3 members (apply → 3 answer + status 3 ready)",
                    st("create"),
                    st("static").map(|b| ("static 3-pod bootstrap", b)),
                    Some(1.2),
                ));
                out.push('\n');
                out.push_str(&line(
                    "  create, etcd healthy only (3 answer, before status)",
                    stats(&extra(r, "create", "etcd_healthy")),
                    st("static").map(|b| ("static 3-pod bootstrap", b)),
                    None,
                ));
                out.push('\n');
                if let Some(rs) = stats(&extra(r, "static", "restarts")) {
                    out.push_str(&format!("  static bootstrap container restarts: {}\n", fmt_n(rs)));
                }
            }
            "tls" => {
                out.push_str(&line(
                    "create 3 members with TLS.auto (apply → status 3 ready)",
                    st("create-tls"),
                    stats(&mark(r, "create", "status: 3 ready")).map(|b| ("plaintext create, status 3 ready", b)),
                    None,
                ));
                out.push('\n');
                out.push_str(&line(
                    "CA rotation, per member (total / 3; two rolling restarts)",
                    st("ca-rotation"),
                    None,
                    None,
                ));
                out.push('\n');
                if let Some(t) = stats(&extra(r, "ca-rotation", "total")) {
                    out.push_str(&format!("  CA rotation of 3 members total: {}\n", fmt_s(t)));
                }
                out.push_str(&breakdown("ca-rotation", "CA rotation", r));
            }
            "heal" => {
                out.push_str(&line(
                    "heal 1 deleted emptyDir member (delete → 3 answer + status 3 ready)",
                    st("heal"),
                    bare.map(|(_, b)| ("bare pod start (+ catch-up ≈ 0: no data)", b)),
                    Some(1.5),
                ));
                out.push('\n');
                out.push_str(&line(
                    "  heal, etcd healthy only (before status)",
                    stats(&extra(r, "heal", "etcd_healthy")),
                    bare,
                    None,
                ));
                out.push('\n');
                let sts = st("statefulset").map(|b| ("StatefulSet pod deleted, 3 voters again", b));
                out.push_str(&line(
                    "heal 1 deleted PVC member, etcd 3.6.15, 64Mi (delete → old pod gone, 3 answer + status 3 ready)",
                    st("heal-pvc"),
                    sts,
                    Some(1.0),
                ));
                out.push('\n');
                out.push_str(&line(
                    "  heal PVC member, etcd healthy only (before status)",
                    stats(&extra(r, "heal-pvc", "etcd_healthy")),
                    sts,
                    Some(1.0),
                ));
                out.push('\n');
            }
            "scale" => {
                out.push_str(&line("scale 3→5, per member (total / 2)", st("scale"), bare, None));
                out.push('\n');
                if let Some(t) = stats(&extra(r, "scale", "total")) {
                    out.push_str(&format!("  scale 3→5 total: {}\n", fmt_s(t)));
                }
                out.push_str(&scale_down_line(r));
            }
            "archive" => {
                use crate::archive::*;
                let ms = |v: Option<Stats>| {
                    v.map_or("-".to_string(), |s| {
                        format!("{:.1} ms [min {:.1}, max {:.1}, n={}]", s.median * 1e3, s.min * 1e3, s.max * 1e3, s.n)
                    })
                };
                let (off, on) = (st(PUT_OFF), st(PUT_ON));
                let verdict = match (off, on) {
                    (Some(a), Some(b)) => {
                        let ratio = b.median / a.median;
                        let met = if ratio <= PUT_TARGET_RATIO { "PASS" } else { "MISS" };
                        format!("ratio {ratio:.2}, target ≤{PUT_TARGET_RATIO:.2} {met}")
                    }
                    _ => "no sample (ERROR)".into(),
                };
                out.push_str(&format!(
                    "put latency p99, archiver on: {} (baseline archiver off: {}; {verdict})\n",
                    ms(on),
                    ms(off)
                ));
                out.push_str(&format!(
                    "  p50: on {}, off {}\n",
                    ms(stats(&extra(r, PUT_ON, "p50"))),
                    ms(stats(&extra(r, PUT_OFF, "p50")))
                ));
                out.push_str(&format!(
                    "RPO (ack → durable) p99: {} (p50 {}, worst {}; promised: flushIntervalInSecond {:.0} s)\n",
                    ms(st(RPO)),
                    ms(stats(&extra(r, RPO, "p50"))),
                    ms(stats(&extra(r, RPO, "max"))),
                    stats(&extra(r, RPO, "flush")).map_or(0.0, |s| s.median)
                ));
                for kind in [RATE_1K, RATE_5K] {
                    let e = |k| stats(&extra(r, kind, k)).map_or(0.0, |s| s.median);
                    match st(kind) {
                        Some(s) => out.push_str(&format!(
                            "archive throughput at {:.0} puts/s offered: {:.0} revisions/s durable [min {:.0}, max {:.0}, n={}] (etcd acknowledged {:.0}/s, {:.0} failed; last put durable {:.2} s after it)\n",
                            e("offered"), s.median, s.min, s.max, s.n, e("acked"), e("failed"), e("lag_at_end")
                        )),
                        None => out.push_str(&format!("{kind}: no successful sample (ERROR)\n")),
                    }
                }
                out.push_str(&line(
                    "point-in-time restore, 100k+ revisions after its snapshot (apply → member ready)",
                    st(RESTORE_POINT),
                    st(RESTORE_FULL).map(|b| ("full snapshot of the same state", b)),
                    None,
                ));
                out.push('\n');
            }
            "node-loss" => {
                out.push_str(&line(
                    "node of 1 emptyDir member lost, afterSeconds 0 (loss → 3 answer + status 3 ready)",
                    st("node-loss"),
                    bare,
                    None,
                ));
                out.push('\n');
                let e = |k| stats(&extra(r, "node-loss", k));
                if let (Some(nr), Some(after)) = (e("not_ready"), e("after_not_ready")) {
                    out.push_str(&format!(
                        "  of which the node controller (Node NotReady): {}; the operator after that: {}\n",
                        fmt_s(nr),
                        fmt_s(after)
                    ));
                }
                if let (Some(f), Some(w)) = (e("failed"), e("writes")) {
                    out.push_str(&format!(
                        "  node loss failed writes through the client Service: {} of {}\n",
                        fmt_n(f),
                        fmt_n(w)
                    ));
                }
            }
            "recover" => {
                out.push_str(&line(
                    "recover 3-member PVC cluster from 2 deleted pods (no quorum meanwhile)",
                    st("recover-pvc"),
                    bare,
                    None,
                ));
                out.push('\n');
                out.push_str(&line(
                    "recover 2-of-3 emptyDir loss, FromSurvivor (afterSeconds 0) → 3 members",
                    st("recover-survivor"),
                    bare,
                    None,
                ));
                out.push('\n');
            }
            "upgrade" => {
                out.push_str(&line("upgrade 3 members 3.5.0→3.5.1 under writes", st("upgrade"), None, None));
                out.push('\n');
                let e = |k| stats(&extra(r, "upgrade", k));
                if let (Some(f), Some(rt), Some(w)) = (e("failed"), e("retries"), e("writes")) {
                    let lw = e("leader_waits").map(fmt_n).unwrap_or_else(|| "-".into());
                    out.push_str(&format!(
                        "  upgrade failed writes: {} (retries on another endpoint: {}; rounds re-sent during a leader election: {lw}; writes in the interval: {})\n",
                        fmt_n(f),
                        fmt_n(rt),
                        fmt_n(w)
                    ));
                }
                if let (Some(l), Some(g), Some(mi)) = (e("max_latency_ms"), e("longest_gap_ms"), e("missing")) {
                    out.push_str(&format!(
                        "  upgrade write max latency ms: {}; longest gap without a completed write ms: {}; acknowledged writes missing afterwards: {}\n",
                        fmt_n(l),
                        fmt_n(g),
                        fmt_n(mi)
                    ));
                }
            }
            "defrag" => {
                out.push_str(&line(
                    "defrag 1 member, s per 100 MiB rewritten (operator policy)",
                    st("defrag"),
                    st("defrag-etcdctl").map(|b| ("defragment call by hand", b)),
                    None,
                ));
                out.push('\n');
                if let Some(t) = stats(&extra(r, "defrag", "total")) {
                    out.push_str(&format!(
                        "  defrag 3 members, compaction → all shrunk (includes the ≤15 s health-check wait): {}\n",
                        fmt_s(t)
                    ));
                }
            }
            "nospace" => {
                out.push_str(&line(
                    "NOSPACE 16 MiB quota: keys deleted → writable again",
                    st("nospace"),
                    st("nospace-manual").map(|b| ("scripted compact+defrag+disarm", b)),
                    None,
                ));
                out.push('\n');
            }
            "backup" => out.push_str(&backup::render(r)),
            "many" => out.push_str(&many_line(r)),
            _ => {}
        }
    }
    if r.is_empty() {
        return out;
    }
    out.push_str(
        "\nWhere the time goes (milestones from the bench's polls every ~250 ms; `op …` from the operator's log):\n",
    );
    out.push_str("\nPhases (time from the action; cost = increase over the phase before in the same run; medians):\n");
    for (k, title) in [
        ("create", "create 3 members (operator)"),
        ("static", "static 3-pod bootstrap (baseline)"),
        ("heal", "heal emptyDir member (operator)"),
        ("bare", "bare pod start (baseline)"),
        ("heal-pvc", "heal PVC member (operator)"),
        ("statefulset", "StatefulSet pod deleted (baseline)"),
        ("scale", "scale 3→5 (operator; pod phases: the later of the 2 new pods)"),
        ("scale-down", "scale 5→3 (operator)"),
        ("node-loss", "node of a member lost (operator)"),
    ] {
        out.push_str(&phases::render(k, title, r));
    }
    out.push_str("\nMilestones (from the bench's polls every ~250 ms; `op …` from the operator's log):\n");
    for (k, title) in [
        ("create", "create (operator)"),
        ("static", "static 3-pod bootstrap (baseline)"),
        ("heal", "heal (operator)"),
        ("bare", "bare pod start (baseline)"),
        ("heal-pvc", "heal PVC member (operator)"),
        ("statefulset", "StatefulSet pod deleted (baseline)"),
        ("scale", "scale 3→5 (operator)"),
        ("scale-down", "scale 5→3 (operator)"),
        ("node-loss", "node of a member lost (operator)"),
        ("recover-pvc", "recover PVC cluster from 2 lost pods (operator)"),
        ("recover-survivor", "recover FromSurvivor (operator)"),
        ("upgrade", "upgrade 3.5.0→3.5.1 (operator)"),
        (backup::S3, "backup to S3 (operator)"),
        (backup::PVC, "backup to a PVC (operator)"),
        (backup::BASELINE, "etcdctl snapshot save pod (baseline)"),
    ] {
        out.push_str(&breakdown(k, title, r));
    }
    out
}

/// `scale 5→3: …s (target: ≤5 s with 0 failed writes) PASS/MISS` and the writer's numbers.
fn scale_down_line(r: &BTreeMap<&str, Vec<Sample>>) -> String {
    let Some(v) = stats(&values(r, "scale-down")) else {
        return "scale 5→3: no successful sample (ERROR)\n".into();
    };
    let failed = stats(&extra(r, "scale-down", "failed"));
    let max_failed = failed.map(|f| f.max).unwrap_or(f64::NAN);
    let verdict = if v.median <= 5.0 && max_failed == 0.0 { "PASS" } else { "MISS" };
    let mut out = format!(
        "scale 5→3 under a writer through the client Service (apply → 3 voters, 2 pods gone, status 3 ready): {} (target: ≤5.0 s and 0 failed writes in every run) {verdict}\n",
        fmt_s(v)
    );
    if let (Some(f), Some(w), Some(l)) =
        (failed, stats(&extra(r, "scale-down", "writes")), stats(&extra(r, "scale-down", "max_latency_ms")))
    {
        out.push_str(&format!(
            "  scale 5→3 failed writes: {}; writes: {}; max write latency ms: {}\n",
            fmt_n(f),
            fmt_n(w),
            fmt_n(l)
        ));
    }
    out
}

/// `N clusters of 1 member at once: …s until all Running; operator CPU …s, peak RSS … MiB`.
fn many_line(r: &BTreeMap<&str, Vec<Sample>>) -> String {
    let Some(s) = r.get("many").and_then(|v| v.first()) else {
        return "many clusters: no successful sample (ERROR)\n".into();
    };
    let e = |k| s.extra.get(k).copied().unwrap_or(f64::NAN);
    let mut out = format!(
        "{:.0} EtcdClusters of 1 member created at once (one operator): all Running + 1 ready after {:.1} s; operator CPU {:.1} s (from the create to the end); peak RSS {:.1} MiB (RSS at the end {:.1} MiB); operator restarts {:.0} INFO\n",
        e("clusters"),
        s.value,
        e("cpu_s"),
        e("peak_rss_mib"),
        e("rss_mib"),
        e("operator_restarts")
    );
    for (n, d) in &s.marks.0 {
        out.push_str(&format!("  {:7.2}s  {n}\n", d.as_secs_f64()));
    }
    out
}

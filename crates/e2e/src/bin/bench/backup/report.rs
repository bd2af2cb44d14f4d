//! The backup bench's pure parts: throughput, the in-pod transfer times parsed from logs and
//! termination messages, and the result rows beside their baseline.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{BASELINE, MIB, PVC, S3, SETUP, TARGET_RATIO};
use std::time::SystemTime;

use crate::report::{Sample, Stats, parse_rfc3339_utc, rel, stats};

/// MiB/s of `bytes` moved in `secs` (None for a zero or negative duration).
pub fn mib_per_s(bytes: f64, secs: f64) -> Option<f64> {
    (secs > 0.0 && bytes >= 0.0).then(|| bytes / MIB / secs)
}

pub fn fmt_rate(s: Stats) -> String {
    format!("{:.1} MiB/s [min {:.1}, max {:.1}, n={}]", s.median, s.min, s.max, s.n)
}

/// `name: value (baseline: what x, ratio: y, target: ≥z×) PASS/MISS` for throughputs, where
/// higher is better; the ratio is of the medians.
pub fn rate_line(name: &str, value: Option<Stats>, baseline: Option<(&str, Stats)>, min_ratio: f64) -> String {
    let Some(v) = value else { return format!("{name}: no successful sample (ERROR)") };
    let target = format!("≥{min_ratio:.1}×");
    match baseline {
        Some((what, b)) if b.median > 0.0 => {
            let r = v.median / b.median;
            let verdict = if r >= min_ratio { "PASS" } else { "MISS" };
            format!(
                "{name}: {} (baseline: {what} {}, ratio: {r:.2}, target: {target}) {verdict}",
                fmt_rate(v),
                fmt_rate(b)
            )
        }
        _ => format!("{name}: {} (baseline: none, ratio: -, target: {target}) ERROR (no baseline)", fmt_rate(v)),
    }
}

/// A zap timestamp as etcdctl logs it: seconds since the epoch as a number, or ISO 8601 with
/// `Z` or a numeric offset (`2021-11-16T10:23:45.123Z`, `...45.123+0000`, `...45.123+01:00`).
pub fn zap_ts(v: &Value) -> Option<f64> {
    if let Some(x) = v.as_f64() {
        return Some(x);
    }
    let s = v.as_str()?;
    if let Some(us) = parse_rfc3339_utc(s) {
        return Some(us as f64 / 1e6);
    }
    // A numeric offset after the time of day (which has no sign in it).
    let t = s.find('T')?;
    let pos = t + s[t..].rfind(['+', '-'])?;
    let (base, off) = s.split_at(pos);
    let sign = if off.starts_with('-') { -1 } else { 1 };
    let digits: String = off[1..].chars().filter(|c| *c != ':').collect();
    if digits.len() != 4 {
        return None;
    }
    let hh: i64 = digits[..2].parse().ok()?;
    let mm: i64 = digits[2..].parse().ok()?;
    let us = parse_rfc3339_utc(&format!("{base}Z"))?;
    Some((us - sign * (hh * 3600 + mm * 60) * 1_000_000) as f64 / 1e6)
}

/// From `etcdctl snapshot save`'s log: seconds from `fetching snapshot` (the stream is open) to
/// `saved` (written, fsynced and renamed into place), and the size it logged (humanized).
pub fn etcdctl_transfer(log: &str) -> Option<(f64, String)> {
    let mut fetching = None;
    let mut saved = None;
    let mut size = String::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line.trim()) else { continue };
        match v["msg"].as_str() {
            Some("fetching snapshot") => fetching = zap_ts(&v["ts"]),
            Some("fetched snapshot") => size = v["size"].as_str().unwrap_or_default().to_string(),
            Some("saved") => saved = zap_ts(&v["ts"]),
            _ => {}
        }
    }
    let (a, b) = (fetching?, saved?);
    (b >= a).then_some((b - a, size))
}

/// `transferSeconds`, `backup.size` and `backup.member` of a backup pod's termination message.
pub fn save_report(message: &str) -> Option<(f64, f64, String)> {
    let v: Value = serde_json::from_str(message.trim()).ok()?;
    Some((
        v["transferSeconds"].as_f64()?,
        v["backup"]["size"].as_f64()?,
        v["backup"]["member"].as_str().unwrap_or_default().to_string(),
    ))
}

/// The transfer time in a `BackupSucceeded` Event note (`... written to X in 2.3s[; ...]`).
pub fn transfer_from_note(note: &str) -> Option<f64> {
    let head = note.split("; ").next()?;
    let (_, t) = head.rsplit_once(" in ")?;
    t.strip_suffix('s')?.parse().ok()
}

pub(super) fn extra(r: &BTreeMap<&str, Vec<Sample>>, kind: &str, key: &str) -> Vec<f64> {
    r.get(kind).map(|v| v.iter().filter_map(|s| s.extra.get(key).copied()).collect()).unwrap_or_default()
}

pub(super) fn fmt_secs(s: Option<Stats>) -> String {
    s.map(|s| format!("{:.2}s [{:.2}, {:.2}]", s.median, s.min, s.max)).unwrap_or_else(|| "-".into())
}

/// The result rows of the backup measurement.
pub fn render(r: &BTreeMap<&str, Vec<Sample>>) -> String {
    let mut out = String::new();
    if let Some(s) = r.get(SETUP).and_then(|v| v.first()) {
        out.push_str(&format!(
            "backup of a 3-member 3.5.1 cluster, dbSize {:.1} MiB ({} values × 1 MiB written in {:.1}s); throughput = snapshot bytes / duration:\n",
            s.value / MIB,
            s.extra.get("values").copied().unwrap_or(0.0),
            s.extra.get("fill_s").copied().unwrap_or(0.0),
        ));
    }
    if let Some(s) = r.get(SETUP).and_then(|v| v.first())
        && let (Some(put), Some(sha)) = (s.extra.get("moto_put_s"), s.extra.get("moto_sha_s"))
    {
        out.push_str(&format!(
            "  S3 server alone: moto took {put:.2}s for one PUT of as many bytes from this host \
             ({:.1} MiB/s; {:.1} MiB/s without the client's {sha:.2}s of SHA-256)\n",
            mib_per_s(s.value, *put).unwrap_or(0.0),
            mib_per_s(s.value, put - sha).unwrap_or(0.0),
        ));
    }
    let rate = |k: &str, key: &str| stats(&extra(r, k, key));
    let base_e2e =
        rate(BASELINE, "e2e_mibs").map(|b| ("etcdctl snapshot save pod, create → Succeeded, incl. pod start", b));
    let base_transfer =
        rate(BASELINE, "transfer_mibs").map(|b| ("etcdctl in its pod, \"fetching snapshot\" → \"saved\"", b));
    for (kind, what) in [(S3, "S3 (moto)"), (PVC, "PVC")] {
        out.push_str(&rate_line(
            &format!("backup to {what}, end to end incl. pod start (apply → status.succeeded)"),
            rate(kind, "e2e_mibs"),
            base_e2e,
            TARGET_RATIO,
        ));
        out.push('\n');
        out.push_str(&rate_line(
            &format!("  backup to {what}, transfer only (transferSeconds inside the backup pod)"),
            rate(kind, "transfer_mibs"),
            base_transfer,
            TARGET_RATIO,
        ));
        out.push('\n');
    }
    // What a user without this operator does for an S3 backup: `etcdctl snapshot save`, then
    // upload the file. Its time is etcdctl's in-pod transfer plus moto's PUT of as many bytes.
    let put = r.get(SETUP).and_then(|v| v.first()).and_then(|s| s.extra.get("moto_put_s").copied());
    let bytes = r.get(SETUP).and_then(|v| v.first()).map(|s| s.value);
    if let (Some(put), Some(bytes)) = (put, bytes) {
        let save_then_upload: Vec<f64> =
            extra(r, BASELINE, "transfer_s").iter().filter_map(|t| mib_per_s(bytes, t + put)).collect();
        out.push_str(&rate_line(
            "  backup to S3 (moto), transfer only, vs. save-then-upload",
            rate(S3, "transfer_mibs"),
            stats(&save_then_upload).map(|b| ("etcdctl's in-pod transfer + moto's PUT of the file", b)),
            TARGET_RATIO,
        ));
        out.push('\n');
    }
    out.push_str("  backup durations, median [min, max]: end to end (incl. pod start) / apply → container running (watch) / transfer only (in the pod):\n");
    for (kind, what) in [(S3, "S3 backup"), (PVC, "PVC backup"), (BASELINE, "etcdctl snapshot save")] {
        out.push_str(&format!(
            "    {what:22} {} / {} / {}\n",
            fmt_secs(stats(&r.get(kind).map(|v| v.iter().map(|s| s.value).collect::<Vec<_>>()).unwrap_or_default())),
            fmt_secs(stats(&extra(r, kind, "start_s"))),
            fmt_secs(stats(&extra(r, kind, "transfer_s"))),
        ));
    }
    out.push_str(
        "  (end to end is mostly the pod start, and the kubelet notices a container's exit at its 1 s relist: \
         both sides alike; the transfer rows compare the data path. The S3 rows against a local etcdctl write \
         are bounded by moto on this machine: its own PUT from the host is slower than etcdctl's disk write)\n",
    );
    out
}

/// `Reason ×count, ...` of an Event list (a folded series counts as its count).
pub(super) fn event_counts(list: &Value) -> String {
    let mut by_reason: BTreeMap<String, i64> = BTreeMap::new();
    for e in list["items"].as_array().into_iter().flatten() {
        let n = e["count"].as_i64().unwrap_or(1).max(e["series"]["count"].as_i64().unwrap_or(1)).max(1);
        *by_reason.entry(e["reason"].as_str().unwrap_or("?").to_string()).or_default() += n;
    }
    if by_reason.is_empty() {
        return "none".into();
    }
    by_reason.iter().map(|(r, n)| format!("{r} ×{n}")).collect::<Vec<_>>().join(", ")
}

pub(super) fn pod_line(pod: &Value, t0: SystemTime) -> String {
    let name = pod["metadata"]["name"].as_str().unwrap_or("?");
    let f = |s: &Value| s.as_str().and_then(|s| rel(t0, s)).map(|x| format!("{x:+.0}s")).unwrap_or("?".into());
    let term = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    format!(
        "pod {name}: created {}, container ran {}→{} (exit {}), node {}",
        f(&pod["metadata"]["creationTimestamp"]),
        f(&term["startedAt"]),
        f(&term["finishedAt"]),
        term["exitCode"],
        pod["spec"]["nodeName"].as_str().unwrap_or("?")
    )
}

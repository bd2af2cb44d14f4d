//! Samples, statistics, the result table, and the evidence of where time went: the operator's
//! own log (JSON, microsecond timestamps) and the pods' status and Events (1 s resolution).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::observe::Marks;
use e2e::TestNamespace;

/// One measured run.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    /// The measured value, in seconds (or a count for count metrics).
    pub value: f64,
    /// Milestones and operator actions, from the action's start.
    pub marks: Marks,
    /// Extra numbers (writes, retries, ...).
    pub extra: BTreeMap<&'static str, f64>,
}

#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

pub fn stats(values: &[f64]) -> Option<Stats> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let median = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
    Some(Stats { median, min: v[0], max: v[n - 1], n })
}

pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

pub fn fmt_s(s: Stats) -> String {
    format!("{:.2}s [min {:.2}s, max {:.2}s, n={}]", s.median, s.min, s.max, s.n)
}

pub fn fmt_n(s: Stats) -> String {
    format!("{} [min {}, max {}, n={}]", s.median, s.min, s.max, s.n)
}

// --- timestamps --------------------------------------------------------------------------------

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// `2026-11-22T20:15:07.896500Z` or `2026-11-22T20:15:07Z` → microseconds since the epoch.
pub fn parse_rfc3339_utc(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>());
    let (y, mo, da) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|x| x.parse::<i64>());
    let (h, mi, se) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let micros = if frac.is_empty() {
        0
    } else {
        let f: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        f.parse::<i64>().ok()?
    };
    Some(((days_from_civil(y, mo, da) * 86400 + h * 3600 + mi * 60 + se) * 1_000_000) + micros)
}

fn unix_micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

/// Seconds from `t0` to an RFC 3339 timestamp (negative when before).
pub fn rel(t0: SystemTime, ts: &str) -> Option<f64> {
    parse_rfc3339_utc(ts).map(|us| (us - unix_micros(t0)) as f64 / 1e6)
}

// --- the operator's log ------------------------------------------------------------------------

/// The operator's actions (`op <Reason> #k`) and refusals/warnings between `t0` and `until`,
/// as marks; and the sequence of planned steps compressed into spans, as text lines.
pub fn operator_timeline(log: &str, t0: SystemTime, until: f64) -> (Marks, Vec<String>) {
    let mut marks = Marks::default();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut spans: Vec<(String, f64, f64, usize)> = vec![];
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let Some(t) = v["timestamp"].as_str().and_then(|ts| rel(t0, ts)) else { continue };
        if t < -0.05 || t > until + 1.0 {
            continue;
        }
        let t = t.max(0.0);
        let msg = v["message"].as_str().unwrap_or_default();
        let mut label = None;
        if let Some(reason) = v["reason"].as_str() {
            label = Some(format!("op {reason}"));
        } else if msg.contains("step refused for now") {
            label = Some(format!("op etcd refused {} (retry)", v["step"].as_str().unwrap_or("?")));
        } else if v["level"] == "WARN" {
            label = Some(format!("op WARN {}", msg.chars().take(60).collect::<String>()));
        }
        if let Some(l) = label {
            let k = counts.entry(l.clone()).or_default();
            *k += 1;
            marks.0.push((format!("{l} #{k}"), Duration::from_secs_f64(t)));
        }
        if msg == "planned" {
            let step = v["step"].as_str().unwrap_or("?");
            let name = if let Some(rest) = step.strip_prefix("Wait(Wait { reason: ") {
                format!("Wait {}", rest.split([',', ' ']).next().unwrap_or("?"))
            } else {
                step.split(['(', ' ', '{']).next().unwrap_or("?").to_string()
            };
            match spans.last_mut() {
                Some((n, _, end, count)) if *n == name => {
                    *end = t;
                    *count += 1;
                }
                _ => spans.push((name, t, t, 1)),
            }
        }
    }
    let lines = spans
        .into_iter()
        .map(|(n, a, b, c)| {
            if c == 1 {
                format!("{a:7.2}s          planned {n}")
            } else {
                format!("{a:7.2}s–{b:6.2}s planned {n} ×{c}")
            }
        })
        .collect();
    (marks, lines)
}

// --- pods: status timestamps, init-container logs, Events ---------------------------------------

/// Per-pod facts for pods created after `t0` (or all with `all`): creation, init container,
/// etcd start, restarts with their last exit, the DNS wait the init container logged, and the
/// pods' Events. Kubernetes timestamps have 1 s resolution.
pub fn pod_facts(ns: &TestNamespace, selector: &str, t0: SystemTime, all: bool) -> Vec<String> {
    let mut out = vec![];
    let Ok(list) = ns.json(&["get", "pods", "-l", selector]) else { return out };
    let events = ns.json(&["get", "events"]).ok();
    let f = |ts: &Value| ts.as_str().and_then(|s| rel(t0, s)).map(|x| format!("{x:+.0}s")).unwrap_or("?".into());
    for p in list["items"].as_array().cloned().unwrap_or_default() {
        let name = p["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let created = p["metadata"]["creationTimestamp"].as_str().and_then(|s| rel(t0, s)).unwrap_or(-1.0);
        if !all && created < -1.0 {
            continue;
        }
        let mut line = format!("pod {name}: created {}", f(&p["metadata"]["creationTimestamp"]));
        for s in p["status"]["initContainerStatuses"].as_array().cloned().unwrap_or_default() {
            let term = &s["state"]["terminated"];
            if !term.is_null() {
                line.push_str(&format!(
                    ", init {} ran {}→{}",
                    s["name"].as_str().unwrap_or("?"),
                    f(&term["startedAt"]),
                    f(&term["finishedAt"])
                ));
            }
        }
        for s in p["status"]["containerStatuses"].as_array().cloned().unwrap_or_default() {
            if let Some(st) = s["state"]["running"]["startedAt"].as_str() {
                line.push_str(&format!(
                    ", {} running since {}",
                    s["name"].as_str().unwrap_or("?"),
                    f(&Value::from(st))
                ));
            }
            let restarts = s["restartCount"].as_i64().unwrap_or(0);
            if restarts > 0 {
                let lt = &s["lastState"]["terminated"];
                line.push_str(&format!(
                    ", {restarts} restart(s), last exit {} ({}) {}→{}",
                    lt["exitCode"],
                    lt["reason"].as_str().unwrap_or("?"),
                    f(&lt["startedAt"]),
                    f(&lt["finishedAt"])
                ));
                if let Ok(prev) = ns.run(&["logs", &name, "-c", "etcd", "--previous", "--tail=40"])
                    && let Some(fatal) = prev
                        .lines()
                        .rev()
                        .find(|l| l.contains("\"level\":\"fatal\"") || l.contains("\"level\":\"panic\""))
                {
                    line.push_str(&format!(
                        "\n      previous etcd exit: {}",
                        fatal.chars().take(300).collect::<String>()
                    ));
                }
            }
        }
        if p["spec"]["initContainers"].as_array().is_some_and(|a| a.iter().any(|c| c["name"] == "wait-dns"))
            && let Ok(l) = ns.run(&["logs", &name, "-c", "wait-dns"])
            && let Some(last) = l.lines().last()
        {
            line.push_str(&format!("\n      wait-dns: {last}"));
        }
        if let Some(evs) = &events {
            let mut mine: Vec<(f64, String)> = evs["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter(|e| e["involvedObject"]["name"] == name.as_str() && e["involvedObject"]["kind"] == "Pod")
                .map(|e| {
                    let count = e["count"].as_i64().unwrap_or(1);
                    // Events the scheduler writes (events.k8s.io) have eventTime instead.
                    let first_ts = if e["firstTimestamp"].is_null() { &e["eventTime"] } else { &e["firstTimestamp"] };
                    let first = first_ts.as_str().and_then(|s| rel(t0, s)).unwrap_or(f64::MAX);
                    let text = format!(
                        "{} {}{}",
                        f(first_ts),
                        e["reason"].as_str().unwrap_or("?"),
                        if count > 1 { format!("×{count} (last {})", f(&e["lastTimestamp"])) } else { String::new() }
                    );
                    (first, text)
                })
                .collect();
            mine.sort_by(|a, b| a.0.total_cmp(&b.0));
            if !mine.is_empty() {
                let texts: Vec<String> = mine.into_iter().map(|(_, t)| t).collect();
                line.push_str(&format!("\n      events: {}", texts.join(", ")));
            }
        }
        out.push(line);
    }
    out
}

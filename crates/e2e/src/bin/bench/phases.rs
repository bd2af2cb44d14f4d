//! The phases of a step, each one's time from the user's action: what the operator logged
//! (reconcile started → planned → API write), what Kubernetes recorded for the pods the step
//! created (scheduled, init containers, etcd container started; 1 s resolution except the
//! scheduler's Event), and what the bench's polls saw (etcd listening, member healthy, the client
//! Service routing to it). Stored in a sample's marks as `phase NN <name>`; `render` prints the
//! median of each and the median cost (increase over the previous phase) per measurement.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::observe::{Marks, Observer, Snap};
use crate::report::{Sample, rel, stats};
use e2e::TestNamespace;

pub const PREFIX: &str = "phase ";
pub const EVENT: &str = "phase 01 watch event seen (op: first reconcile started after the action)";
pub const PLAN: &str = "phase 02 planned (op: first step other than Wait)";
pub const WRITE: &str = "phase 03 API write done (op: first action logged)";
pub const SCHEDULED: &str = "phase 04 pod scheduled (scheduler Event)";
pub const INIT_START: &str = "phase 05 init containers started (1 s res.)";
pub const INIT_END: &str = "phase 06 init containers finished (1 s res.)";
pub const MAIN: &str = "phase 07 etcd container started (1 s res.)";
pub const IP: &str = "phase 08 pod IP in its status (poll)";
pub const LISTEN: &str = "phase 09 etcd listening (answers Status; poll)";
pub const HEALTHY: &str = "phase 10 member healthy, a voter (linearizable read; poll)";
pub const ENDPOINTS: &str = "phase 11 client Service endpoints include it (poll)";
pub const DONE: &str = "phase 99 done (the row's end condition)";
// Scale-down.
pub const LEFT_1: &str = "phase 04 first member left etcd (poll)";
pub const LEFT_2: &str = "phase 05 second member left etcd (poll)";
pub const PODS_GONE: &str = "phase 06 removed pods gone from the API (poll)";
pub const ENDPOINTS_DOWN: &str = "phase 07 client Service endpoints = the 3 left (poll)";

/// UIDs of the pods a snapshot shows (taken before the action: the pods that are not new).
pub fn uids(s: &Snap) -> BTreeSet<String> {
    s.pods.iter().map(|p| p.uid.clone()).collect()
}

/// Poll-side phases of the pods created after the action (UIDs not in `before`): each is
/// recorded once `expect` new pods exist and every one of them has reached it.
pub fn track_new(s: &Snap, m: &mut Marks, before: &BTreeSet<String>, expect: usize) {
    let new: Vec<_> = s.live().filter(|p| !before.contains(&p.uid)).collect();
    if new.len() < expect || expect == 0 {
        return;
    }
    let voter = |name: &str| s.members.as_ref().is_none_or(|ms| ms.iter().any(|x| x.pod == name && !x.learner));
    m.once(IP, new.iter().all(|p| p.ip.is_some()), s.at);
    m.once(LISTEN, new.iter().all(|p| s.probes.get(&p.name).is_some_and(|x| x.version.is_some())), s.at);
    m.once(HEALTHY, new.iter().all(|p| s.answers(&p.name) && voter(&p.name)), s.at);
    if let Some(ips) = &s.client_ips {
        m.once(ENDPOINTS, new.iter().all(|p| p.ip.as_ref().is_some_and(|ip| ips.contains(ip))), s.at);
    }
}

/// After the end condition: keep polling (at most 15 s; not part of the row's value) until the
/// client Service routes to the new pods, so that phase is known even when it comes last.
pub fn until_routed(obs: &mut Observer, before: &BTreeSet<String>, expect: usize) {
    if obs.client_service.is_none() || obs.marks.get(ENDPOINTS).is_some() {
        return;
    }
    let _ = obs.until(Duration::from_secs(15), "the client Service routing to the new pods", |s, m| {
        track_new(s, m, before, expect);
        m.get(ENDPOINTS).is_some()
    });
}

/// Poll-side phases of a scale-down from `from` to `to` members.
pub fn track_removal(s: &Snap, m: &mut Marks, from: usize, to: usize) {
    if let Some(ms) = &s.members {
        m.once(LEFT_1, ms.len() < from, s.at);
        m.once(LEFT_2, ms.len() <= to, s.at);
    }
    m.once(PODS_GONE, s.pods.len() == to, s.at);
    if let Some(ips) = &s.client_ips {
        let live: Vec<&String> = s.live().filter_map(|p| p.ip.as_ref()).collect();
        m.once(ENDPOINTS_DOWN, ips.len() == to && ips.iter().all(|ip| live.contains(&ip)), s.at);
    }
}

/// The operator's reaction from its JSON log: the first reconcile that started after `t0` (its
/// `reconciled` line minus `elapsed_ms`), the first non-Wait plan, the first action.
pub fn from_operator_log(log: &str, t0: SystemTime, until: f64) -> Marks {
    let mut m = Marks::default();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
        let Some(t) = v["timestamp"].as_str().and_then(|ts| rel(t0, ts)) else { continue };
        if t > until + 1.0 {
            break;
        }
        let msg = v["message"].as_str().unwrap_or_default();
        let at = |x: f64| Duration::from_secs_f64(x.max(0.0));
        if msg == "reconciled" {
            let start = t - v["elapsed_ms"].as_f64().unwrap_or(0.0) / 1000.0;
            m.once(EVENT, start >= -0.01, at(start));
        } else if msg == "planned" && t >= 0.0 {
            m.once(PLAN, !v["step"].as_str().unwrap_or("Wait").starts_with("Wait"), at(t));
        } else if v["reason"].is_string() && t >= 0.0 {
            m.once(WRITE, true, at(t));
        }
    }
    // The first reconcile's end is logged after its plan: keep the phases in time order.
    m.0.sort_by_key(|(_, d)| *d);
    m
}

/// Kubernetes' timestamps of the pods created after the action (UIDs not in `before`): for each
/// phase the latest over those pods (the step waits for all of them).
pub fn from_pods(ns: &TestNamespace, selector: &str, before: &BTreeSet<String>, t0: SystemTime) -> Marks {
    let mut latest: BTreeMap<&str, f64> = BTreeMap::new();
    let Ok(list) = ns.json(&["get", "pods", "-l", selector]) else { return Marks::default() };
    let events = ns.json(&["get", "events"]).ok();
    let ts = |v: &Value| v.as_str().and_then(|s| rel(t0, s));
    let mut note = |phase: &'static str, t: Option<f64>| {
        if let Some(t) = t {
            let e = latest.entry(phase).or_insert(t);
            *e = e.max(t);
        }
    };
    for p in list["items"].as_array().cloned().unwrap_or_default() {
        let uid = p["metadata"]["uid"].as_str().unwrap_or_default();
        if before.contains(uid) || !p["metadata"]["deletionTimestamp"].is_null() {
            continue;
        }
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        // The scheduler's Event (events.k8s.io, microseconds), else the condition (1 s).
        let scheduled = events.as_ref().and_then(|evs| {
            evs["items"].as_array()?.iter().find_map(|e| {
                (e["reason"] == "Scheduled" && e["involvedObject"]["uid"] == uid && e["involvedObject"]["name"] == name)
                    .then(|| ts(&e["eventTime"]).or_else(|| ts(&e["firstTimestamp"])))?
            })
        });
        let cond = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled"))
            .and_then(|c| ts(&c["lastTransitionTime"]));
        note(SCHEDULED, scheduled.or(cond));
        let inits = p["status"]["initContainerStatuses"].as_array().cloned().unwrap_or_default();
        let started =
            |c: &Value| ts(&c["state"]["terminated"]["startedAt"]).or_else(|| ts(&c["state"]["running"]["startedAt"]));
        if let Some(first) = inits.iter().filter_map(started).reduce(f64::min) {
            note(INIT_START, Some(first));
        }
        if !inits.is_empty() && inits.iter().all(|c| !c["state"]["terminated"].is_null()) {
            note(INIT_END, inits.iter().filter_map(|c| ts(&c["state"]["terminated"]["finishedAt"])).reduce(f64::max));
        }
        let etcd =
            p["status"]["containerStatuses"].as_array().and_then(|cs| cs.iter().find(|c| c["name"] == "etcd").cloned());
        note(MAIN, etcd.as_ref().and_then(started));
    }
    let mut m = Marks::default();
    for (phase, t) in latest {
        m.once(phase, true, Duration::from_secs_f64(t.max(0.0)));
    }
    m
}

/// All phases of a finished sample: the operator's (from `log`), the new pods', and the end.
pub fn collect(
    sample: &mut Sample,
    ns: &TestNamespace,
    selector: &str,
    before: &BTreeSet<String>,
    t0: SystemTime,
    log: Option<&str>,
    at: Duration,
) {
    if let Some(log) = log {
        add(sample, from_operator_log(log, t0, at.as_secs_f64()));
    }
    add(sample, from_pods(ns, selector, before, t0));
    sample.marks.once(DONE, true, at);
}

/// Merge phase marks into a sample's marks (the first of each name wins).
pub fn add(sample: &mut Sample, phases: Marks) {
    for (n, d) in phases.0 {
        sample.marks.once(n, true, d);
    }
}

/// Per phase: the median time from the action [min … max] and the median cost, the increase over
/// the previous phase seen in the same run.
pub fn render(kind: &str, title: &str, results: &BTreeMap<&str, Vec<Sample>>) -> String {
    let Some(samples) = results.get(kind) else { return String::new() };
    let mut names: BTreeSet<String> = BTreeSet::new();
    for s in samples {
        names.extend(s.marks.0.iter().filter(|(n, _)| n.starts_with(PREFIX)).map(|(n, _)| n.clone()));
    }
    if names.is_empty() {
        return String::new();
    }
    let mut out = format!("  {title}: at (median [min … max])  cost (median increase over the phase before)\n");
    for n in &names {
        let (mut at, mut cost) = (vec![], vec![]);
        for s in samples {
            let Some(t) = s.marks.get(n) else { continue };
            at.push(t.as_secs_f64());
            let prev = s
                .marks
                .0
                .iter()
                .filter(|(p, _)| p.starts_with(PREFIX) && p < n)
                .max_by(|a, b| a.0.cmp(&b.0))
                .map(|(_, d)| d.as_secs_f64())
                .unwrap_or(0.0);
            cost.push(t.as_secs_f64() - prev);
        }
        let (Some(a), Some(c)) = (stats(&at), stats(&cost)) else { continue };
        let seen = if at.len() < samples.len() {
            format!("  (in {}/{} runs)", at.len(), samples.len())
        } else {
            String::new()
        };
        let label = n.strip_prefix(PREFIX).unwrap_or(n);
        let label = label.split_once(' ').map(|x| x.1).unwrap_or(label);
        out.push_str(&format!(
            "    {:6.2}s [{:6.2} … {:6.2}]  {:+6.2}s  {label}{seen}\n",
            a.median, a.min, a.max, c.median
        ));
    }
    out
}

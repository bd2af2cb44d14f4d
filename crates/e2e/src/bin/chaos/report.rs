//! The report: a text table for people and JSON for tools, both in the run's directory under
//! target/chaos/, and the list of violations, each with what is needed to replay it (seed,
//! fault, timeline of the samples around it, Events, where the logs are).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::checker::Verdict;
use crate::faults::FaultRecord;
use crate::invariants::{Cause, Event, Loss};
use crate::monitor::Sample;
use crate::plan::Kind;

pub struct Inputs<'a> {
    pub seed: u64,
    pub command: String,
    pub duration_s: f64,
    pub planned: usize,
    pub faults: &'a [FaultRecord],
    pub verdict: &'a Verdict,
    pub losses: &'a [Loss],
    /// Samples without a member answering while clients were served (`invariants::refute`).
    pub refuted_samples: usize,
    /// `invariants::foreign_answers`.
    pub foreign_answers: &'a [(String, u64, usize, Vec<String>)],
    pub id_changes: &'a [String],
    /// (cluster, start, end) with a quorum but no ready client Service endpoint.
    pub service_gaps: &'a [(String, u64, u64)],
    pub final_converge_s: Option<f64>,
    pub operator_restarts: i64,
    /// Why the operator's containers restarted: (time ms, pod, `monitor::exit_cause`).
    pub operator_exits: &'a [(u64, String, String)],
    pub operator_pods_seen: usize,
    pub leader_changes: usize,
    pub samples: &'a [Sample],
    pub events: &'a [Event],
    pub backups: Value,
    pub window_ms: u64,
    pub logs: String,
    pub final_reads_ok: bool,
}

/// Operator container exits grouped by cause, with their counts.
pub fn exit_causes(exits: &[(u64, String, String)]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for (_, _, why) in exits {
        *m.entry(why.clone()).or_insert(0) += 1;
    }
    m
}

/// (median, p95, max) of seconds.
pub fn stats(mut v: Vec<f64>) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1];
    Some((at(0.5), at(0.95), v[v.len() - 1]))
}

fn timeline(i: &Inputs, cluster: Option<&str>, from: u64, to: u64) -> Vec<String> {
    let mut out: Vec<(u64, String)> = vec![];
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    for s in i.samples.iter().filter(|s| s.t_ms >= from && s.t_ms <= to && cluster.is_none_or(|c| c == s.cluster)) {
        // Only changes, so that the timeline stays readable.
        let line = s.line();
        let key = line.split_once(' ').map(|x| x.1.to_string()).unwrap_or_default();
        if last.get(&s.cluster) != Some(&key) {
            last.insert(s.cluster.clone(), key);
            out.push((s.t_ms, line));
        }
    }
    for f in i.faults.iter().filter(|f| f.inject_ms >= from && f.inject_ms <= to) {
        out.push((
            f.inject_ms,
            format!(
                "{} FAULT #{} {} {}: {}",
                crate::fmt_ms(f.inject_ms),
                f.index,
                f.kind,
                f.cluster.as_deref().unwrap_or("-"),
                f.detail
            ),
        ));
    }
    for e in i.events.iter().filter(|e| e.0 >= from && e.0 <= to && cluster.is_none_or(|c| c == e.1)) {
        out.push((e.0, format!("{} EVENT {} {}: {}", crate::fmt_ms(e.0), e.1, e.2, e.3)));
    }
    out.sort_by_key(|x| x.0);
    out.into_iter().map(|x| x.1).collect()
}

fn last_fault_before(i: &Inputs, t: u64) -> Value {
    i.faults
        .iter()
        .rev()
        .find(|f| f.inject_ms <= t)
        .map(|f| json!({"index": f.index, "kind": f.kind.name(), "cluster": f.cluster, "detail": f.detail}))
        .unwrap_or(Value::Null)
}

/// The JSON report, the text report and whether the run passed.
pub fn build(i: &Inputs) -> (Value, String, bool) {
    let mut by_kind: BTreeMap<Kind, (usize, usize, Vec<f64>, usize)> = BTreeMap::new();
    for f in i.faults {
        let e = by_kind.entry(f.kind).or_default();
        e.0 += 1;
        if f.error.is_some() {
            e.1 += 1;
        }
        match f.converged_ms {
            Some(ms) => e.2.push(ms as f64 / 1000.0),
            None => e.3 += 1,
        }
    }
    let op_losses: Vec<&Loss> = i.losses.iter().filter(|l| matches!(l.cause, Cause::Operator(_))).collect();
    // An unattributed loss seen in one sample only may be a probe timing out on a loaded
    // machine: reported, not a violation. Operator-caused ones count whatever their length.
    let unattributed: Vec<&Loss> =
        i.losses.iter().filter(|l| l.cause == Cause::Unattributed && l.samples >= 2).collect();
    let blips = i.losses.iter().filter(|l| l.cause == Cause::Unattributed && l.samples < 2).count();
    let not_converged: Vec<&FaultRecord> = i.faults.iter().filter(|f| f.converged_ms.is_none()).collect();
    let mut violations: Vec<Value> = vec![];
    let v = i.verdict;
    for (what, list) in [
        ("lost write", &v.lost),
        ("phantom value", &v.phantom),
        ("not linearizable", &v.not_linearizable),
        ("checker undecided", &v.undecided),
    ] {
        for d in list {
            violations.push(json!({"type": what, "seed": i.seed, "detail": d, "logs": i.logs}));
        }
    }
    for l in op_losses.iter().chain(unattributed.iter()) {
        let to = l.end_ms.unwrap_or(l.start_ms + 60_000) + 5_000;
        violations.push(json!({
            "type": if l.cause == Cause::Unattributed { "unattributed quorum loss" } else { "operator-caused quorum loss" },
            "seed": i.seed, "cluster": l.cluster, "start": crate::fmt_ms(l.start_ms),
            "end": l.end_ms.map(crate::fmt_ms), "cause": format!("{:?}", l.cause),
            "fault": last_fault_before(i, l.start_ms),
            "timeline": timeline(i, Some(&l.cluster), l.start_ms.saturating_sub(i.window_ms), to),
            "logs": i.logs,
        }));
    }
    for (c, id, n, via) in i.foreign_answers {
        violations.push(json!({
            "type": "client operations answered by another etcd cluster",
            "seed": i.seed, "cluster": c, "answered_by": format!("{id:x}"), "operations": n, "via": via,
            "logs": i.logs,
        }));
    }
    for c in i.id_changes {
        violations.push(
            json!({"type": "second bootstrap (cluster ID changed)", "seed": i.seed, "detail": c, "logs": i.logs}),
        );
    }
    for (c, a, b) in i.service_gaps {
        violations.push(json!({
            "type": "client Service without a ready endpoint while the cluster had a quorum",
            "seed": i.seed, "cluster": c, "start": crate::fmt_ms(*a), "end": crate::fmt_ms(*b),
            "fault": last_fault_before(i, *a),
            "timeline": timeline(i, Some(c), a.saturating_sub(i.window_ms), b + 5_000),
            "logs": i.logs,
        }));
    }
    for f in &not_converged {
        violations.push(json!({
            "type": "did not converge", "seed": i.seed,
            "fault": {"index": f.index, "kind": f.kind.name(), "cluster": f.cluster, "detail": f.detail, "error": f.error},
            "timeline": timeline(i, f.cluster.as_deref(), f.inject_ms, f.inject_ms + 600_000).into_iter().take(200).collect::<Vec<_>>(),
            "logs": i.logs,
        }));
    }
    if i.final_converge_s.is_none() {
        violations.push(json!({"type": "clusters not converged at the end", "seed": i.seed, "logs": i.logs}));
    }
    if !i.final_reads_ok {
        violations.push(json!({"type": "final read failed", "seed": i.seed, "logs": i.logs}));
    }
    let pass = violations.is_empty();
    let all_conv: Vec<f64> = i.faults.iter().filter_map(|f| f.converged_ms).map(|ms| ms as f64 / 1000.0).collect();
    let kinds: Vec<Value> = by_kind
        .iter()
        .map(|(k, (n, err, conv, never))| {
            let st = stats(conv.clone());
            json!({"kind": k.name(), "count": n, "errors": err, "never_converged": never,
                   "converge_s": st.map(|(m, p, x)| json!({"median": m, "p95": p, "max": x}))})
        })
        .collect();
    let js = json!({
        "seed": i.seed,
        "command": i.command,
        "duration_s": i.duration_s,
        "faults_planned": i.planned,
        "faults_injected": i.faults.len(),
        "faults_by_kind": kinds,
        "acknowledged_writes": v.acked_writes,
        "unknown_outcome_writes": v.unknown_writes,
        "operations": v.ops,
        "keys": v.keys,
        "lost_writes": v.lost.len(),
        "phantom_values": v.phantom.len(),
        "checker": if v.pass() { "linearizable (per-key register check)" } else { "VIOLATION" },
        "quorum_losses": {
            "total": i.losses.len(),
            "by_injected_fault": i.losses.iter().filter(|l| matches!(l.cause, Cause::Fault(_))).count(),
            "size_one_spec_change": i.losses.iter().filter(|l| matches!(l.cause, Cause::SizeOneSpecChange(_))).count(),
            "operator_caused": op_losses.len(),
            "unattributed": unattributed.len(),
            "unattributed_single_sample": blips,
            "probe_false_negatives_refuted": i.refuted_samples,
            "list": i.losses.iter().map(|l| json!({"cluster": l.cluster, "start": crate::fmt_ms(l.start_ms),
                "end": l.end_ms.map(crate::fmt_ms), "samples": l.samples, "cause": format!("{:?}", l.cause)})).collect::<Vec<_>>(),
        },
        "cluster_id_changes": i.id_changes,
        "service_without_endpoints": i.service_gaps.len(),
        "convergence_s": stats(all_conv).map(|(m, p, x)| json!({"median": m, "p95": p, "max": x})),
        "final_convergence_s": i.final_converge_s,
        "operator": {"container_restarts": i.operator_restarts, "exits": exit_causes(i.operator_exits), "pods_seen": i.operator_pods_seen, "lease_holder_changes": i.leader_changes},
        "backups": i.backups,
        "faults": i.faults.iter().map(|f| json!({"index": f.index, "kind": f.kind.name(), "cluster": f.cluster, "detail": f.detail,
            "at": crate::fmt_ms(f.inject_ms), "healed": f.heal_ms.map(crate::fmt_ms), "error": f.error,
            "converged_s": f.converged_ms.map(|ms| ms as f64 / 1000.0)})).collect::<Vec<_>>(),
        "violations": violations,
        "verdict": if pass { "PASS" } else { "FAIL" },
    });
    let mut t = String::new();
    t.push_str(&format!("chaos run: seed {} — {}\n", i.seed, i.command));
    t.push_str(&format!(
        "duration {:.0} s, {} of {} planned faults injected\n\n",
        i.duration_s,
        i.faults.len(),
        i.planned
    ));
    t.push_str(&format!(
        "{:<24} {:>5} {:>6} {:>6} {:>9} {:>9} {:>9}\n",
        "fault", "count", "errors", "never", "median s", "p95 s", "max s"
    ));
    for (k, (n, err, conv, never)) in &by_kind {
        let (m, p, x) = stats(conv.clone())
            .map(|(m, p, x)| (format!("{m:.1}"), format!("{p:.1}"), format!("{x:.1}")))
            .unwrap_or_default();
        t.push_str(&format!("{:<24} {n:>5} {err:>6} {never:>6} {m:>9} {p:>9} {x:>9}\n", k.name()));
    }
    t.push('\n');
    let rows = [
        ("operations recorded", v.ops.to_string()),
        ("acknowledged writes", v.acked_writes.to_string()),
        ("unknown-outcome writes", v.unknown_writes.to_string()),
        ("lost acknowledged writes", v.lost.len().to_string()),
        ("values never written", v.phantom.len().to_string()),
        (
            "checker (per-key register)",
            if v.pass() {
                "pass".into()
            } else {
                format!("FAIL ({} keys, {} undecided)", v.not_linearizable.len(), v.undecided.len())
            },
        ),
        ("quorum losses (all)", i.losses.len().to_string()),
        ("  by injected faults", js["quorum_losses"]["by_injected_fault"].to_string()),
        ("  size-1 upgrade/resize", js["quorum_losses"]["size_one_spec_change"].to_string()),
        ("  operator-caused", op_losses.len().to_string()),
        ("  unattributed", unattributed.len().to_string()),
        ("  unattributed, one sample", blips.to_string()),
        ("samples refuted by acked ops", i.refuted_samples.to_string()),
        ("ops answered by another cluster", i.foreign_answers.iter().map(|f| f.2).sum::<usize>().to_string()),
        ("cluster ID changes", i.id_changes.len().to_string()),
        ("Service empty, cluster working", i.service_gaps.len().to_string()),
        ("final convergence s", i.final_converge_s.map(|s| format!("{s:.1}")).unwrap_or("NEVER".into())),
        ("operator container restarts", i.operator_restarts.to_string()),
        ("operator lease holder changes", i.leader_changes.to_string()),
        ("violations", violations.len().to_string()),
    ];
    for (k, val) in rows {
        t.push_str(&format!("{k:<32} {val}\n"));
    }
    for (why, n) in exit_causes(i.operator_exits) {
        t.push_str(&format!("  operator exit ×{n}: {why}\n"));
    }
    t.push_str(&format!("\nverdict: {}\n", if pass { "PASS" } else { "FAIL" }));
    for (n, viol) in violations.iter().enumerate() {
        t.push_str(&format!(
            "\nviolation {}: {}\n{}\n",
            n + 1,
            viol["type"],
            serde_json::to_string_pretty(viol).unwrap_or_default()
        ));
    }
    (js, t, pass)
}

#[cfg(test)]
mod tests {
    use super::stats;

    #[test]
    fn percentiles() {
        assert_eq!(stats(vec![]), None);
        assert_eq!(stats(vec![3.0]), Some((3.0, 3.0, 3.0)));
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(stats(v), Some((50.0, 95.0, 100.0)));
    }
}

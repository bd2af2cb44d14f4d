//! The operator's invariants, from the monitor's samples (pure functions, tested below):
//! - quorum losses per cluster (no member answers a linearizable read), each attributed: to an injected fault on that cluster within the window before it
//!   (or still held), else to a spec change of a size-1 cluster (an upgrade must restart its
//!   only member), else to the operator (its Events about the cluster, or a resize/upgrade the
//!   chaos asked for, within the window), else unattributed;
//! - the client Service keeps a ready endpoint while the cluster has a quorum (10 s grace);
//! - no second bootstrap: the etcd cluster ID of a cluster never changes;
//! - convergence: after each fault, the time until its cluster (every cluster for operator and
//!   node faults) is back to spec.size healthy voters, no learners, status agreeing.

use std::collections::BTreeSet;

use crate::checker::Op;
use crate::faults::FaultRecord;
use crate::monitor::Sample;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    Fault(usize),
    SizeOneSpecChange(usize),
    Operator(String),
    Unattributed,
}

#[derive(Clone, Debug)]
pub struct Loss {
    pub cluster: String,
    pub start_ms: u64,
    /// None: still without quorum at the end.
    pub end_ms: Option<u64>,
    pub samples: usize,
    pub cause: Cause,
}

/// An Event about an EtcdCluster: (time in unix ms, cluster, reason, note).
pub type Event = (u64, String, String, String);

/// Marks the samples in which no member answered a probe although a client operation on that
/// cluster was acknowledged wholly inside the probes' time (`t_ms..=probed_ms`): every
/// acknowledged put, transaction or linearizable read needs a working quorum at some instant
/// between its call and its return, so the probes were false negatives (a machine too loaded for
/// them to finish in time). `start_unix_ms` puts the operations' times (ns since the clients
/// started) on the samples' clock. What it cannot refute: a real loss shorter than a probe round
/// during which, by chance, some operation completed — a quorum existed then, so that is no loss.
/// Returns how many samples it refuted.
pub fn refute(samples: &mut [Sample], ops: &[Op], start_unix_ms: u64) -> usize {
    let mut acked: std::collections::HashMap<&str, Vec<(u64, u64)>> = Default::default();
    for o in ops.iter().filter(|o| o.err.is_none()) {
        if let Some(ret) = o.ret {
            acked
                .entry(o.cluster.as_str())
                .or_default()
                .push((start_unix_ms + o.call / 1_000_000, start_unix_ms + ret.div_ceil(1_000_000)));
        }
    }
    let mut n = 0;
    for s in samples.iter_mut().filter(|s| !s.quorum) {
        let inside = acked
            .get(s.cluster.as_str())
            .is_some_and(|v| v.iter().any(|(call, ret)| *call >= s.t_ms && *ret <= s.probed_ms));
        if inside {
            s.refuted = true;
            n += 1;
        }
    }
    n
}

/// Client operations of a cluster answered by an etcd cluster other than the one most of its
/// operations reached (a pod IP handed to a member of another cluster while a client still
/// had it): per cluster, (answering cluster ID, operations, endpoints). Such answers are not
/// this cluster's history; a non-linearizable key whose odd operations all carry another ID
/// is this, not a lost write.
pub fn foreign_answers(ops: &[Op]) -> Vec<(String, u64, usize, Vec<String>)> {
    use std::collections::BTreeMap;
    let mut by: BTreeMap<&str, BTreeMap<u64, (usize, BTreeSet<&str>)>> = BTreeMap::new();
    for o in ops {
        if let Some((cid, _)) = o.answered_by {
            let e = by.entry(o.cluster.as_str()).or_default().entry(cid).or_default();
            e.0 += 1;
            e.1.insert(o.via.as_str());
        }
    }
    let mut out = vec![];
    for (cluster, ids) in by {
        let main = ids.iter().max_by_key(|(_, (n, _))| *n).map(|(id, _)| *id);
        for (id, (n, via)) in ids {
            if Some(id) != main {
                out.push((cluster.to_string(), id, n, via.into_iter().map(str::to_string).collect()));
            }
        }
    }
    out
}

/// Spans without quorum of one cluster's samples (oldest first): (start, end, samples in it).
/// A span of one sample (a second or two) may be a probe that timed out on a loaded machine.
pub fn quorum_losses(samples: &[&Sample]) -> Vec<(u64, Option<u64>, usize)> {
    let mut out = vec![];
    let mut i = 0;
    while i < samples.len() {
        if samples[i].had_quorum() {
            i += 1;
            continue;
        }
        let start = samples[i].t_ms;
        let mut j = i;
        while j < samples.len() && !samples[j].had_quorum() {
            j += 1;
        }
        out.push((start, samples.get(j).map(|s| s.t_ms), j - i));
        i = j;
    }
    out
}

fn touches(f: &FaultRecord, cluster: &str) -> bool {
    f.cluster.as_deref().is_none_or(|c| c == cluster)
}

/// Event reasons with which the operator only reports what it saw or waits for (the action
/// beside a report has an Event of its own: `MemberUpgraded` beside `Upgrading`): they explain no
/// loss. Every other reason counts as an operator action, also ones added later.
const REPORTS_ONLY: &[&str] = &[
    // The status condition's reasons (the operator's `WaitReason`s: it waits, it does nothing).
    "Stable",
    "InvalidSpec",
    "Paused",
    "Bootstrapping",
    "NoQuorum",
    "DataLost",
    "Recovering",
    "PodStuckTerminating",
    "MemberStarting",
    "MemberFailing",
    "LearnerCatchingUp",
    "PodTerminating",
    "WouldLoseQuorum",
    "MemberUpgrading",
    "UpgradeFailed",
    "UpgradeRefused",
    "UpgradeDeferred",
    "NoSpace",
    "Corrupt",
    "MaintenanceDeferred",
    "MemberDraining",
    "AuthRefused",
    "TLSMaterialRefused",
    "MembersUnreachable",
    // Reports beside an action that has its own Event, or of what members run.
    "QuorumHealthy",
    "Upgrading",
    "DataInconsistencyRisk",
];

/// Why cluster `cluster` (of size `size` when the loss began) lost its quorum at `start`.
pub fn attribute(
    cluster: &str,
    start: u64,
    size: usize,
    faults: &[FaultRecord],
    events: &[Event],
    window_ms: u64,
) -> Cause {
    let in_window = |f: &FaultRecord| {
        let end = f.heal_ms.unwrap_or(f.inject_ms).max(f.inject_ms);
        touches(f, cluster) && f.inject_ms <= start && start <= end + window_ms
    };
    // Destructive faults first (and operator/node ones: a killed operator leader acts on no
    // cluster, so it explains nothing by itself unless no other cause is found).
    if let Some(f) =
        faults.iter().rev().find(|f| in_window(f) && !f.kind.spec_change() && f.cluster.as_deref() == Some(cluster))
    {
        return Cause::Fault(f.index);
    }
    if let Some(f) = faults.iter().rev().find(|f| in_window(f) && f.kind.node_level()) {
        return Cause::Fault(f.index);
    }
    if let Some(f) = faults.iter().rev().find(|f| in_window(f) && f.kind.spec_change()) {
        if size == 1 {
            return Cause::SizeOneSpecChange(f.index);
        }
        return Cause::Operator(format!("after fault #{} ({}) the operator acted on the spec change", f.index, f.kind));
    }
    let evs: Vec<String> = events
        .iter()
        .filter(|e| e.1 == cluster && e.0 + window_ms >= start && e.0 <= start + 2_000)
        .filter(|e| !REPORTS_ONLY.contains(&e.2.as_str()))
        .map(|e| format!("{} {}: {}", crate::fmt_ms(e.0), e.2, e.3))
        .collect();
    if !evs.is_empty() {
        return Cause::Operator(evs.join(" | "));
    }
    Cause::Unattributed
}

/// Spans of at least `min_ms` in which the cluster had a quorum yet its client Service had no
/// ready endpoint (clients of the Service are cut off from a working cluster): (start, end).
pub fn service_gaps(samples: &[&Sample], min_ms: u64) -> Vec<(u64, u64)> {
    let mut out = vec![];
    let mut start: Option<u64> = None;
    let mut last = 0;
    for s in samples {
        if s.had_quorum() && s.service_ready == 0 {
            start.get_or_insert(s.t_ms);
            last = s.t_ms;
        } else if let Some(st) = start.take()
            && s.t_ms - st >= min_ms
        {
            out.push((st, s.t_ms));
        }
    }
    if let Some(st) = start
        && last - st >= min_ms
    {
        out.push((st, last));
    }
    out
}

/// Distinct etcd cluster IDs seen in probes, in order; more than one is a second bootstrap.
pub fn cluster_ids(samples: &[&Sample]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = vec![];
    let mut seen = BTreeSet::new();
    for s in samples {
        for m in &s.members {
            if m.cluster_id != 0 && seen.insert(m.cluster_id) {
                out.push((s.t_ms, m.cluster_id));
            }
        }
    }
    out
}

/// Time from the fault's end (its heal, or its injection) until its cluster(s) converged: the
/// first converged sample after the first unconverged one that follows the fault; a fault that
/// never showed (no unconverged sample within `settle_ms`) converged at once. None: never.
pub fn convergence_ms(f: &FaultRecord, samples: &[Sample], settle_ms: u64) -> Option<u64> {
    let from = f.heal_ms.unwrap_or(f.inject_ms).max(f.inject_ms);
    let mine: Vec<&Sample> = samples.iter().filter(|s| touches(f, &s.cluster) && s.t_ms >= f.inject_ms).collect();
    // All touched clusters converged at time t: group by time (one round samples every cluster).
    let mut times: Vec<u64> = mine.iter().map(|s| s.t_ms).collect();
    times.dedup();
    let converged_at = |t: u64| mine.iter().filter(|s| s.t_ms == t).all(|s| s.converged);
    let first_bad = times.iter().copied().find(|t| !converged_at(*t));
    match first_bad {
        None => Some(0),
        Some(b) if b > from + settle_ms && times.iter().any(|t| *t >= from && *t < b) => Some(0),
        Some(b) => {
            times.iter().copied().find(|t| *t > b && *t >= from && converged_at(*t)).map(|t| t.saturating_sub(from))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Kind;

    fn s(t: u64, quorum: bool, converged: bool) -> Sample {
        Sample { t_ms: t, cluster: "a".into(), quorum, converged, ..Default::default() }
    }
    fn fault(index: usize, kind: Kind, cluster: Option<&str>, inject: u64, heal: Option<u64>) -> FaultRecord {
        FaultRecord {
            index,
            kind,
            cluster: cluster.map(str::to_string),
            inject_ms: inject,
            heal_ms: heal,
            ..Default::default()
        }
    }

    #[test]
    fn losses_with_their_length() {
        let v = [
            s(0, true, true),
            s(1, false, false),
            s(2, true, false),
            s(3, false, false),
            s(4, false, false),
            s(5, true, true),
        ];
        let refs: Vec<&Sample> = v.iter().collect();
        assert_eq!(quorum_losses(&refs), vec![(1, Some(2), 1), (3, Some(5), 2)]);
        let v = [s(0, false, false), s(1, false, false)];
        let refs: Vec<&Sample> = v.iter().collect();
        assert_eq!(quorum_losses(&refs), vec![(0, None, 2)]);
    }

    #[test]
    fn attribution() {
        let faults = vec![
            fault(0, Kind::DeleteTwo, Some("a"), 1_000, None),
            fault(1, Kind::Upgrade, Some("b"), 50_000, None),
            fault(2, Kind::Upgrade, Some("one"), 80_000, None),
            fault(3, Kind::StopEtcd, Some("a"), 100_000, Some(120_000)),
        ];
        let w = 10_000;
        assert_eq!(attribute("a", 5_000, 3, &faults, &[], w), Cause::Fault(0));
        // Too long after: not the fault's.
        assert_eq!(attribute("a", 30_000, 3, &faults, &[], w), Cause::Unattributed);
        // A 3-member cluster losing its quorum during an upgrade: the operator's.
        assert!(matches!(attribute("b", 52_000, 3, &faults, &[], w), Cause::Operator(_)));
        assert_eq!(attribute("one", 81_000, 1, &faults, &[], w), Cause::SizeOneSpecChange(2));
        // Held faults cover their whole hold.
        assert_eq!(attribute("a", 125_000, 3, &faults, &[], w), Cause::Fault(3));
        let ev = vec![(29_000, "a".to_string(), "MemberRemoved".to_string(), "x".to_string())];
        assert!(
            matches!(attribute("a", 30_000, 3, &faults, &ev, w), Cause::Operator(m) if m.contains("MemberRemoved"))
        );
        // A report of what the operator saw is no action.
        let ev = vec![
            (29_000, "a".to_string(), "QuorumHealthy".to_string(), "2 of 3".to_string()),
            (29_500, "a".to_string(), "MemberFailing".to_string(), "CrashLoopBackOff".to_string()),
        ];
        assert_eq!(attribute("a", 30_000, 3, &faults, &ev, w), Cause::Unattributed);
        // Another cluster's fault explains nothing.
        assert_eq!(attribute("c", 5_000, 3, &faults, &[], w), Cause::Unattributed);
    }

    fn acked(cluster: &str, call_ms: u64, ret_ms: u64) -> Op {
        Op {
            client: 0,
            cluster: cluster.into(),
            key: "k".into(),
            f: crate::checker::F::Write("v".into()),
            call: call_ms * 1_000_000,
            ret: Some(ret_ms * 1_000_000),
            via: String::new(),
            err: None,
            answered_by: None,
        }
    }

    #[test]
    fn probes_that_failed_while_clients_were_served_are_refuted() {
        let mk = |t: u64, quorum: bool| Sample {
            t_ms: 1_000_000 + t,
            probed_ms: 1_000_000 + t + 1_500,
            cluster: "a".into(),
            quorum,
            ..Default::default()
        };
        let mut v = vec![mk(0, true), mk(2_000, false), mk(4_000, false), mk(6_000, false), mk(8_000, true)];
        // Op times are on the clients' clock: ms since 1_000_000.
        let ops = vec![
            acked("a", 2_100, 3_000), // wholly inside the probes of t=2000: refutes it
            acked("a", 3_900, 4_400), // called before t=4000's probes began: proves nothing
            acked("b", 6_100, 6_200), // another cluster
            Op { err: Some("timeout".into()), ..acked("a", 6_100, 6_200) }, // not acknowledged
        ];
        assert_eq!(refute(&mut v, &ops, 1_000_000), 1);
        assert_eq!(v.iter().map(|s| s.refuted).collect::<Vec<_>>(), [false, true, false, false, false]);
        let refs: Vec<&Sample> = v.iter().collect();
        // The refuted sample splits nothing off: one loss of two samples remains.
        assert_eq!(quorum_losses(&refs), vec![(1_004_000, Some(1_008_000), 2)]);
    }

    #[test]
    fn answers_from_another_etcd_cluster_are_found() {
        let by = |cluster: &str, cid: u64, via: &str| Op {
            answered_by: Some((cid, 1)),
            via: via.into(),
            ..acked(cluster, 1, 2)
        };
        let ops = vec![by("a", 7, "ip1"), by("a", 7, "ip2"), by("a", 9, "ip2"), by("b", 9, "ip3"), acked("a", 1, 2)];
        assert_eq!(foreign_answers(&ops), vec![("a".to_string(), 9, 1, vec!["ip2".to_string()])]);
        assert!(foreign_answers(&ops[..2]).is_empty());
    }

    #[test]
    fn convergence() {
        let f = fault(0, Kind::DeleteFollower, Some("a"), 10, None);
        let v = vec![s(5, true, true), s(11, true, true), s(12, true, false), s(13, true, false), s(20, true, true)];
        assert_eq!(convergence_ms(&f, &v, 5), Some(10));
        let v = vec![s(11, true, true), s(12, true, true), s(30, true, false)];
        assert_eq!(convergence_ms(&f, &v, 5), Some(0));
        let v = vec![s(11, true, false), s(12, true, false)];
        assert_eq!(convergence_ms(&f, &v, 5), None);
    }

    #[test]
    fn service_without_endpoints_while_the_cluster_works() {
        let mk =
            |t: u64, quorum: bool, svc: usize| Sample { t_ms: t, quorum, service_ready: svc, ..Default::default() };
        let v = [mk(0, true, 3), mk(1_000, true, 0), mk(5_000, true, 0), mk(12_000, true, 0), mk(13_000, true, 2)];
        let refs: Vec<&Sample> = v.iter().collect();
        assert_eq!(service_gaps(&refs, 10_000), vec![(1_000, 13_000)]);
        assert!(service_gaps(&refs, 20_000).is_empty());
        // No quorum: nothing to serve anyway.
        let v = [mk(0, false, 0), mk(30_000, false, 0)];
        let refs: Vec<&Sample> = v.iter().collect();
        assert!(service_gaps(&refs, 10_000).is_empty());
    }

    #[test]
    fn second_bootstrap_is_seen() {
        let mut a = s(1, true, true);
        a.members = vec![crate::monitor::Member { cluster_id: 7, ..Default::default() }];
        let mut b = s(2, true, true);
        b.members = vec![crate::monitor::Member { cluster_id: 9, ..Default::default() }];
        assert_eq!(cluster_ids(&[&a, &a.clone()]).len(), 1);
        assert_eq!(cluster_ids(&[&a, &b]), vec![(1, 7), (2, 9)]);
    }
}

//! Space maintenance: etcd's alarms and defragmentation.
//!
//! - An alarm is not an unhealthy member: members that raise one still count for the quorum
//!   (etcd still serves reads and deletes under NOSPACE).
//! - CORRUPT freezes every change and names the member: a person decides (never "fixed" here).
//! - NOSPACE is recovered: compact the history, defragment every member (followers first, the
//!   leader last), disarm once the space in use is well below the quota; otherwise retry while
//!   the user frees space.
//! - The defragmentation policy defragments one member at a time when enough of its database
//!   file is unused, only when nothing else runs, leadership handed away from the leader first.
//! - A defragmentation whose call failed or timed out may still run inside etcd: until its
//!   member is seen defragmented again or [`DEFRAG_GUARD_SECS`] passed, only that member may be
//!   defragmented (a second call waits for the first inside etcd); a NOSPACE recovery starts
//!   with it, and waits while it does not answer.

use super::{Purpose, SpaceRecovery, Step, WaitReason, wait};
use crate::observed::{AlarmKind, EtcdState, MemberState, Observed};
use crate::validation::Desired;

/// A member is defragmented by the policy at most this often.
pub const DEFRAG_COOLDOWN_SECS: i64 = 600;
/// A NOSPACE recovery that could not disarm is tried again when the revision moved (a delete),
/// or after this long.
pub const NOSPACE_BACKSTOP_SECS: i64 = 300;
/// How long a defragmentation that was not seen to end (its call failed or timed out) keeps
/// every other member from being defragmented: twice the operator's time limit of one call.
pub const DEFRAG_GUARD_SECS: i64 = 600;
/// The alarm is disarmed only when every member uses less than this share of the quota after
/// compaction and defragmentation (else the next writes would raise it again at once).
pub const DISARM_BELOW_PERCENT: i64 = 90;

fn pod_of(etcd: &EtcdState, member_id: u64) -> String {
    etcd.members
        .iter()
        .find(|m| m.id == member_id)
        .map(|m| m.pod.clone())
        .unwrap_or_else(|| format!("ID {}", crate::naming::hex(member_id)))
}

/// A member whose last defragmentation may still run (`DEFRAG_GUARD_SECS`), and since when.
fn unfinished(o: &Observed) -> Option<(&str, i64)> {
    o.pods
        .values()
        .filter_map(|p| p.defrag_unfinished_secs.filter(|s| *s < DEFRAG_GUARD_SECS).map(|s| (p.name.as_str(), s)))
        .min_by_key(|(_, s)| *s)
}

fn still_running_note(pod: &str, secs: i64) -> String {
    format!(
        "the defragmentation of member {pod} started {secs}s ago was not seen to end (its call failed or timed out) and may still run inside etcd: no other member is defragmented until {pod} is seen defragmented or {DEFRAG_GUARD_SECS}s passed"
    )
}

/// Members in the order they are defragmented: followers by name, the leader last.
fn followers_first<'a>(etcd: &'a EtcdState, members: impl Iterator<Item = &'a MemberState>) -> Vec<&'a MemberState> {
    let mut ms: Vec<&MemberState> = members.collect();
    ms.sort_by(|a, b| (Some(a.id) == etcd.leader).cmp(&(Some(b.id) == etcd.leader)).then(a.pod.cmp(&b.pod)));
    ms
}

/// The alarms' step, if one is raised. Called once a quorum of voters is healthy.
pub(super) fn alarms(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    if let Some(a) = etcd.alarms.iter().find(|a| a.kind == AlarmKind::Corrupt) {
        let pod = pod_of(etcd, a.member_id);
        return Some(wait(
            WaitReason::Corrupt,
            format!(
                "member {pod} raised the CORRUPT alarm: its data differs from the other members'. etcd refuses writes; the operator changes nothing until a person has looked (compare `etcdctl endpoint hashkv`, then remove the corrupt member and disarm the alarm; a new member replaces it)"
            ),
        ));
    }
    if !etcd.has_alarm(AlarmKind::NoSpace) {
        return None;
    }
    let quota = d.maintenance.quota_bytes;
    let disarm_below_bytes = quota / 100 * DISARM_BELOW_PERCENT;
    // Voters only: a learner refuses alarm, compaction and defragment calls.
    let answering: Vec<&MemberState> = etcd.voters().filter(|m| m.status.is_some()).collect();
    // Under NOSPACE only deletes move the revision: retry once the user deleted something (or,
    // as a backstop, after a while), not in a loop that rewrites full databases for nothing.
    let revision = answering.iter().filter_map(|m| m.status.as_ref()).map(|s| s.revision).max().unwrap_or(0);
    if let Some((compacted, secs)) = o.nospace_recovery.filter(|(r, s)| *r >= revision && *s < NOSPACE_BACKSTOP_SECS) {
        let in_use = answering.iter().filter_map(|m| m.status.as_ref()).map(|s| s.db_size_in_use).max().unwrap_or(0);
        return Some(wait(
            WaitReason::NoSpace,
            format!(
                "NOSPACE alarm: writes are refused. {secs}s ago the history was compacted (to revision {compacted}) and every member defragmented, and {} of the quota of {} is still in use (below {DISARM_BELOW_PERCENT}% lets the alarm be disarmed). Delete keys (deletes are allowed) or raise spec.maintenance.quotaBackendBytes; the next delete starts another recovery",
                bytes(in_use),
                bytes(quota)
            ),
        ));
    }
    let mut members: Vec<String> =
        followers_first(etcd, answering.into_iter()).into_iter().map(|m| m.pod.clone()).collect();
    if let Some((pod, secs)) = unfinished(o) {
        // Its own second call waits for the first inside etcd: it goes first, and nobody
        // goes while it does not answer.
        let Some(i) = members.iter().position(|m| m == pod) else {
            return Some(wait(WaitReason::NoSpace, format!("NOSPACE alarm: {}", still_running_note(pod, secs))));
        };
        let first = members.remove(i);
        members.insert(0, first);
    }
    Some(Step::RecoverSpace(SpaceRecovery {
        members,
        keep_revisions: d.maintenance.keep_revisions,
        alarms: etcd.alarms.iter().filter(|a| a.kind == AlarmKind::NoSpace).cloned().collect(),
        disarm_below_bytes,
    }))
}

/// The defragmentation policy's next step. Called only when the cluster is otherwise stable:
/// every voter healthy, no learner, membership, versions and pods as the spec says.
pub(super) fn defragment(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let cooled = |m: &&MemberState| {
        o.pods.get(&m.pod).is_some_and(|p| p.defragmented_secs.is_none_or(|s| s >= DEFRAG_COOLDOWN_SECS))
    };
    let in_use = least_in_use(etcd);
    // Due by the policy, or asked for once (`asked_not_done`: no cool-down, the request is the
    // person's call).
    let by_policy = |m: &&MemberState| {
        d.maintenance.defrag.is_some_and(|rule| {
            m.status.as_ref().is_some_and(|s| rule.is_due(s.db_size, s.db_size_in_use.min(in_use))) && cooled(m)
        })
    };
    let asked = asked_not_done(o, etcd);
    let due: Vec<&MemberState> = etcd.voters().filter(|m| by_policy(m) || asked.contains(&m.pod.as_str())).collect();
    let mut first = *followers_first(etcd, due.iter().copied()).first()?;
    if let Some((pod, secs)) = unfinished(o) {
        match due.iter().find(|m| m.pod == pod) {
            Some(m) => first = m,
            None => return Some(wait(WaitReason::MaintenanceDeferred, still_running_note(pod, secs))),
        }
    }
    if let Some(pod) = &o.backup_running {
        return Some(wait(
            WaitReason::MaintenanceDeferred,
            format!("member {} is due for defragmentation; waiting for backup pod {pod} to finish", first.pod),
        ));
    }
    let free = first.status.as_ref().map(|s| s.db_size - s.db_size_in_use.min(in_use)).unwrap_or_default();
    if Some(first.id) == etcd.leader {
        // The leader goes last and hands leadership away first: a leader busy rewriting its
        // database could miss heartbeats and cost an election (and the writes in flight).
        let to = etcd.voters().filter(|m| m.id != first.id && m.is_healthy()).min_by(|a, b| a.pod.cmp(&b.pod));
        if let Some(to) = to {
            return Some(Step::MoveLeader {
                from_pod: first.pod.clone(),
                to: to.id,
                to_pod: to.pod.clone(),
                purpose: Purpose::Defragment,
            });
        }
    }
    Some(Step::Defragment { pod: first.pod.clone(), free_bytes: free })
}

/// Voters a one-shot defragmentation (`naming::DEFRAGMENT_ANNOTATION`) asked for that have
/// not been defragmented since it was first seen, by pod. Empty when none was asked for.
pub fn asked_not_done<'a>(o: &Observed, etcd: &'a EtcdState) -> Vec<&'a str> {
    let Some(asked) = &o.defrag_asked else { return Vec::new() };
    // Nothing until the request's first sighting is on record (and not in the future): "done"
    // is measured from it, and one written again later would make a member defragmented
    // meanwhile count as not done.
    if o.defrag_asked_secs.is_none_or(|a| a < 0) {
        return Vec::new();
    }
    let done = |pod: &str| {
        let defragmented = o.pods.get(pod).and_then(|p| p.defragmented_secs);
        // Defragmented at or after the request (whole seconds: the same second counts, or a
        // member defragmented in the request's second would be defragmented again and again).
        matches!((defragmented, o.defrag_asked_secs), (Some(d), Some(a)) if a >= 0 && d <= a)
    };
    etcd.voters()
        .filter(|m| asked.as_deref().is_none_or(|p| p == m.pod))
        .map(|m| m.pod.as_str())
        .filter(|p| !done(p))
        .collect()
}

/// A one-shot defragmentation request judged against the observation.
#[derive(Clone, Debug, PartialEq)]
pub enum DefragRequest {
    NotAsked,
    /// Names no voting member: dropped.
    Refused(String),
    /// Members still to be defragmented (empty: the operator cannot see the members now).
    Pending(Vec<String>),
    /// Every member asked for was defragmented since the request.
    Done(Vec<String>),
}

pub fn judge_request(o: &Observed) -> DefragRequest {
    let Some(asked) = &o.defrag_asked else { return DefragRequest::NotAsked };
    let Some(etcd) = &o.etcd else { return DefragRequest::Pending(Vec::new()) };
    if let Some(pod) = asked
        && !etcd.voters().any(|m| m.pod == *pod)
    {
        return DefragRequest::Refused(format!("no voting member of this cluster is named {pod}"));
    }
    let all: Vec<String> =
        etcd.voters().filter(|m| asked.as_deref().is_none_or(|p| p == m.pod)).map(|m| m.pod.clone()).collect();
    if o.defrag_asked_secs.is_none_or(|a| a < 0) {
        return DefragRequest::Pending(all);
    }
    let left: Vec<String> = asked_not_done(o, etcd).into_iter().map(str::to_string).collect();
    if left.is_empty() { DefragRequest::Done(all) } else { DefragRequest::Pending(left) }
}

/// The least database space any voter reports in use. Every member holds the same keys and
/// revisions, but a member shows the pages a compaction freed only after its next write (bbolt
/// keeps them pending until then): on a quiet cluster one member's figure is current while the
/// others' still count the compacted history.
pub fn least_in_use(etcd: &EtcdState) -> i64 {
    etcd.voters().filter_map(|m| m.status.as_ref()).map(|s| s.db_size_in_use).filter(|u| *u > 0).min().unwrap_or(0)
}

/// Bytes in binary units, for messages.
pub fn bytes(n: i64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{n} B") } else { format!("{v:.1} {}", UNITS[u]) }
}

//! What each member was seen to acknowledge: the `member-progress` mark on the EtcdCluster, so
//! that a member never restarts on data older than what it already had (a volume rolled back to
//! an older snapshot, in place or as a claim re-created from a VolumeSnapshot). The data check
//! (`member_volume`) passes the marker test on such a volume (same member, same cluster); raft
//! assumes a member never forgets what it acknowledged, so the member would rejoin with holes.
//!
//! Per member the mark keeps the applied raft index it reported, *confirmed*: a reading becomes
//! `acknowledged` only when the member still answers [`CONFIRM_SECS`] later with at least as
//! much. etcd applies an entry only once it is in its log (a follower persisted it first; a
//! leader's committed entries were persisted by the Ready before), and saves that log before
//! it takes the next Ready, so a confirmed index is on the member's disk: its WAL (or a
//! snapshot) reaches it. The data check reads how far the volume's WAL and snapshots reach
//! (`data_index`) and refuses a volume that ends before the mark. The mark is written at most
//! once per [`CONFIRM_SECS`] per member, and not at all while nothing is written to etcd.
//! Pure: computed from an observation by `marks`.

use std::collections::BTreeMap;

use crate::observed::Observed;

/// How long a reading waits before it counts as acknowledged.
pub const CONFIRM_SECS: i64 = 60;

/// Per member (by pod).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Progress(pub BTreeMap<String, MemberProgress>);

#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberProgress {
    /// etcd's member ID: a member of the same name with another ID starts afresh.
    pub id: u64,
    /// The confirmed applied raft index (0: none yet): the member's data reaches it.
    pub acknowledged: u64,
    /// The latest reading not yet confirmed, and when it was taken (Unix seconds).
    pub seen: u64,
    pub seen_at: i64,
}

impl Progress {
    /// The annotation's value; an unreadable one is no record (it is rewritten).
    pub fn parse(value: Option<&String>) -> Progress {
        value.and_then(|v| serde_json::from_str(v).ok()).unwrap_or_default()
    }

    /// Member → acknowledged index, where there is one.
    pub fn acknowledged(&self) -> BTreeMap<String, u64> {
        self.0.iter().filter(|(_, p)| p.acknowledged > 0).map(|(m, p)| (m.clone(), p.acknowledged)).collect()
    }
}

/// The mark after this observation. Members that answered move their readings on; members the
/// leader's membership no longer has are dropped; without an answer nothing changes. During a
/// recovery only its new member is asked: the old members' records wait for the new membership.
pub fn next(o: &Observed, current: &Progress, now: i64) -> Progress {
    let Some(e) = &o.etcd else { return current.clone() };
    let mut p = current.clone();
    if e.leader.is_some() && o.recovery_record.is_none() {
        p.0.retain(|pod, r| e.members.iter().any(|m| m.pod == *pod && m.id == r.id));
    }
    for m in &e.members {
        let Some(s) = &m.status else { continue };
        let applied = s.raft_applied_index;
        if applied == 0 || o.pods.get(&m.pod).is_none_or(|p| p.deleting) {
            continue;
        }
        let fresh = MemberProgress { id: m.id, acknowledged: 0, seen: applied, seen_at: now };
        let r = p.0.entry(m.pod.clone()).or_insert(fresh);
        if r.id != m.id {
            *r = fresh;
        } else if applied < r.seen {
            // Below an unconfirmed reading (a member that just restarted replays its log):
            // that reading is dropped, never confirmed.
            if r.seen > r.acknowledged {
                (r.seen, r.seen_at) = (applied.max(r.acknowledged), now);
            }
        } else if r.seen > r.acknowledged && now - r.seen_at >= CONFIRM_SECS {
            r.acknowledged = r.seen;
            if applied > r.seen {
                (r.seen, r.seen_at) = (applied, now);
            }
        } else if r.seen <= r.acknowledged && applied > r.seen {
            (r.seen, r.seen_at) = (applied, now);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{EtcdState, MemberState, MemberStatus, PodState};

    fn observed(applied: u64) -> Observed {
        let mut o = Observed::default();
        o.pods.insert("ex-a".into(), PodState { name: "ex-a".into(), phase: "Running".into(), ..Default::default() });
        o.etcd = Some(EtcdState {
            leader: Some(1),
            members: vec![MemberState {
                id: 1,
                name: "ex-a".into(),
                pod: "ex-a".into(),
                status: Some(MemberStatus { leader: 1, raft_applied_index: applied, ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        });
        o
    }

    fn ack(p: &Progress) -> u64 {
        p.0.get("ex-a").map(|r| r.acknowledged).unwrap_or_default()
    }

    /// A reading is acknowledged only when the member answers again, at least as far, a
    /// confirmation period later; an idle member's mark stops changing (no write).
    #[test]
    fn a_reading_is_acknowledged_once_confirmed_a_period_later() {
        let p0 = next(&observed(100), &Progress::default(), 1000);
        assert_eq!((ack(&p0), p0.0["ex-a"].seen), (0, 100));
        let p1 = next(&observed(150), &p0, 1000 + CONFIRM_SECS - 1);
        assert_eq!(p1, p0, "not before the period: nothing to write");
        let p2 = next(&observed(150), &p1, 1000 + CONFIRM_SECS);
        assert_eq!((ack(&p2), p2.0["ex-a"].seen), (100, 150), "the earlier reading, confirmed");
        let p3 = next(&observed(150), &p2, 1000 + 2 * CONFIRM_SECS);
        assert_eq!(ack(&p3), 150);
        assert_eq!(next(&observed(150), &p3, 1000 + 9 * CONFIRM_SECS), p3, "idle: unchanged");
        let p4 = next(&observed(160), &p3, 1000 + 9 * CONFIRM_SECS);
        assert_eq!((ack(&p4), p4.0["ex-a"].seen), (150, 160), "a new reading waits its period");
    }

    /// A lower answer than an unconfirmed reading (the member restarted and replays its log)
    /// drops that reading; the acknowledged index never goes down.
    #[test]
    fn an_unconfirmed_reading_is_dropped_and_the_mark_never_goes_down() {
        let p = next(&observed(100), &Progress::default(), 0);
        let p = next(&observed(200), &p, CONFIRM_SECS);
        assert_eq!((ack(&p), p.0["ex-a"].seen), (100, 200));
        let p = next(&observed(120), &p, CONFIRM_SECS + 1);
        assert_eq!((ack(&p), p.0["ex-a"].seen), (100, 120));
        let p = next(&observed(50), &p, 5 * CONFIRM_SECS);
        assert_eq!(ack(&p), 100, "never below what was confirmed");
    }

    #[test]
    fn another_member_id_starts_afresh_and_removed_members_are_dropped() {
        let p = next(&observed(100), &Progress::default(), 0);
        let p = next(&observed(100), &p, CONFIRM_SECS);
        assert_eq!(ack(&p), 100);
        let mut o = observed(7);
        o.etcd.as_mut().unwrap().members[0].id = 2;
        assert_eq!(ack(&next(&o, &p, 10 * CONFIRM_SECS)), 0);
        let mut gone = observed(0);
        gone.etcd.as_mut().unwrap().members.clear();
        assert!(next(&gone, &p, 10 * CONFIRM_SECS).0.is_empty(), "the leader's membership has it no more");
        let mut no_leader = gone.clone();
        no_leader.etcd.as_mut().unwrap().leader = None;
        assert_eq!(next(&no_leader, &p, 10 * CONFIRM_SECS), p, "without a leader the list may lag");
    }
}

//! The survivors of a quorum loss, judged over several looks. One observation is one moment: a
//! member that timed out once, or was restarting, is no proof that it holds less than the
//! others. So while the cluster has no quorum the operator keeps, on the EtcdCluster (the
//! `survivor-looks` mark, written by `marks` from [`recorded`]), the most each member was seen
//! holding, one look every [`LOOK_SECS`] at most; it survives an operator restart. A recovery
//! waits for [`SURVIVOR_LOOKS`] looks and for every surviving member to have answered in one:
//! - `FromSurvivor` starts from the member seen with the highest applied raft index (then
//!   revision, a voter before a learner), once it answers (its snapshot is streamed from it);
//! - `FromBackup` starts only when no surviving member was seen holding a revision newer than
//!   the backup's.
//!
//! A surviving member that never answers holds that up: its data could be the newest. The
//! message says how to give it up (delete its pod and claim: then it is lost, by the user's say).

use crate::observed::{EtcdState, MemberState, Observed};
pub use crate::observed::{Looks, Seen};

/// Looks a recovery waits for.
pub const SURVIVOR_LOOKS: u32 = 3;
/// Seconds between two looks, at least.
pub const LOOK_SECS: i64 = 5;

impl Seen {
    fn merge(self, other: Seen) -> Seen {
        Seen { id: self.id, applied: self.applied.max(other.applied), revision: self.revision.max(other.revision) }
    }
}

/// Voters answering with a leader on pods that stay: a quorum of them, or not.
fn has_quorum(o: &Observed, e: &EtcdState) -> bool {
    let healthy = e
        .voters()
        .filter(|m| m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting && !p.is_dead()))
        .count();
    healthy >= EtcdState::quorum_of(e.voters().count())
}

/// The record to keep after this observation (`None`: no record): cleared once a quorum
/// answers; one more look, at most every [`LOOK_SECS`], while a formed cluster has none and some
/// member answered; kept as it is otherwise (no answer, or a recovery under way, when only its
/// new member is asked).
pub fn recorded(o: &Observed, current: Option<&Looks>, now: i64) -> Option<Looks> {
    let Some(e) = &o.etcd else { return current.cloned() };
    if !o.ever_bootstrapped || has_quorum(o, e) {
        return None;
    }
    if o.recovery_record.is_some() || current.is_some_and(|c| now - c.at < LOOK_SECS) {
        return current.cloned();
    }
    let answered: Vec<(&MemberState, Seen)> = e.members.iter().filter_map(|m| Some((m, seen_now(m)?))).collect();
    if answered.is_empty() {
        return current.cloned();
    }
    let mut r = current.cloned().unwrap_or_default();
    r.looks += 1;
    r.at = now;
    for (m, now_seen) in answered {
        let entry = r.members.entry(m.pod.clone()).or_insert(now_seen);
        *entry = if entry.id == m.id { entry.merge(now_seen) } else { now_seen };
    }
    Some(r)
}

fn seen_now(m: &MemberState) -> Option<Seen> {
    m.status.as_ref().map(|s| Seen { id: m.id, applied: s.raft_applied_index, revision: s.revision })
}

/// A member that can still come back, with the most it was seen holding (now or in a look).
pub(super) struct Survivor<'a> {
    pub member: &'a MemberState,
    pub best: Option<Seen>,
    /// It answers now, on a pod that stays and has an address: its data can be streamed.
    pub answers: bool,
}

/// Members whose data is still there (`recovery::cannot_return` does not name them) and that
/// ever started (a learner that never did holds nothing).
pub(super) fn of<'a>(o: &Observed, etcd: &'a EtcdState) -> Vec<Survivor<'a>> {
    etcd.members
        .iter()
        .filter(|m| m.started() && super::recovery::lost_why(o, m).is_none())
        .map(|m| {
            let recorded = o.survivor_looks.members.get(&m.pod).filter(|s| s.id == m.id).copied();
            let best = match (recorded, seen_now(m)) {
                (Some(a), Some(b)) => Some(a.merge(b)),
                (a, b) => a.or(b),
            };
            let answers =
                m.status.is_some() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting && !p.is_dead() && p.ip.is_some());
            Survivor { member: m, best, answers }
        })
        .collect()
}

/// Whether the looks allow a choice: enough of them, and every survivor seen in one.
pub(super) fn judged(o: &Observed, survivors: &[Survivor]) -> Result<(), String> {
    let looks = o.survivor_looks.looks;
    if looks < SURVIVOR_LOOKS {
        return Err(format!(
            "comparing what the surviving members hold over {SURVIVOR_LOOKS} looks at least {LOOK_SECS}s apart ({looks} taken)"
        ));
    }
    let unseen: Vec<&str> = survivors.iter().filter(|s| s.best.is_none()).map(|s| s.member.pod.as_str()).collect();
    if !unseen.is_empty() {
        return Err(format!(
            "surviving member {} never answered in {looks} looks, so what it holds cannot be compared; the recovery waits for it (to give its data up, delete its pod and its claim)",
            unseen.join(", ")
        ));
    }
    Ok(())
}

/// The survivor seen with the most data: the highest applied raft index (the last log index
/// can include entries never committed), then the highest revision, a voter before a learner.
pub(super) fn most_data<'a, 'b>(survivors: &'b [Survivor<'a>]) -> Option<&'b Survivor<'a>> {
    survivors.iter().filter(|s| s.best.is_some()).max_by_key(|s| {
        let b = s.best.unwrap_or_default();
        (b.applied, b.revision, !s.member.is_learner, s.answers)
    })
}

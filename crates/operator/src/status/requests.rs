//! The conditions of a person's requests on the EtcdCluster (`kubectl etcd fence`,
//! `kubectl etcd switchover`): what was done, what waits and what was refused, and why. Pure.

use etcd_operator_api::condition::{self, Condition};

use crate::fencing::Fencing;
use crate::planner::hibernation::Hibernation;
use crate::planner::maintenance::DefragRequest;
use crate::planner::switchover::Switchover;
use crate::planner::{Purpose, Step};

/// Members fenced on request (`naming::FENCED_MEMBERS_ANNOTATION`): `True` while any is, with
/// reason `FenceRefused` (a Warning) when a name asked for could not be fenced.
pub const FENCED: &str = "Fenced";
/// The last switchover asked for (`naming::SWITCHOVER_ANNOTATION`): `True` once done; `False`
/// while it waits (`Pending`) or when it was refused (`SwitchoverRefused`, a Warning). Kept as
/// the last outcome once the request is gone.
pub const SWITCHOVER: &str = "Switchover";

use super::conditions::cond;

/// Sets or removes both conditions for this reconcile's fencing, switchover and step.
pub fn update(cs: &mut Vec<Condition>, fencing: &Fencing, switchover: &Switchover, step: &Step, now: &str) {
    let fenced: Vec<&str> = fencing.fenced().map(String::as_str).collect();
    let refused: Vec<String> = fencing.refused.iter().map(|(n, why)| format!("{n}: {why}")).collect();
    let mut what = if fenced.is_empty() {
        "no member is fenced".to_string()
    } else {
        format!("{} out of the client Service on request (still voting members)", fenced.join(", "))
    };
    if !fencing.later.is_empty() {
        what.push_str(&format!("; next: {}", fencing.later.join(", ")));
    }
    if !refused.is_empty() {
        let message = format!("{what}; refused: {}", refused.join("; "));
        condition::upsert(cs, cond(FENCED, !fenced.is_empty(), "FenceRefused", message), now);
    } else if !fenced.is_empty() {
        condition::upsert(cs, cond(FENCED, true, "MembersFenced", what), now);
    } else {
        condition::remove(cs, FENCED);
    }

    let c = match switchover {
        Switchover::NotAsked => None,
        Switchover::Move { from, to_pod, .. } => Some(match step {
            Step::MoveLeader { purpose: Purpose::Switchover, .. } => {
                cond(SWITCHOVER, false, "Pending", format!("leadership moves from {from} to {to_pod}"))
            }
            _ => cond(
                SWITCHOVER,
                false,
                "Pending",
                format!("leadership moves from {from} to {to_pod} once no other change is in progress"),
            ),
        }),
        Switchover::Waiting(why) => Some(cond(SWITCHOVER, false, "Pending", format!("waiting: {why}"))),
        Switchover::Done(leader) => Some(cond(SWITCHOVER, true, "LeaderMoved", format!("{leader} leads, as asked"))),
        Switchover::Refused(why) => Some(cond(SWITCHOVER, false, "SwitchoverRefused", why.clone())),
    };
    if let Some(c) = c {
        condition::upsert(cs, c, now);
    }
}

/// Hibernation (`naming::HIBERNATION_ANNOTATION`): `True` once no member runs; `False` while
/// members stop (`Hibernating`), while it waits to begin (`Pending`), when refused
/// (`HibernationRefused`, a Warning) and once resumed (`Resumed`, kept until the next one).
pub const HIBERNATED: &str = "Hibernated";

/// Sets the `Hibernated` condition for this reconcile's judgement.
pub fn update_hibernation(cs: &mut Vec<Condition>, h: &Hibernation, now: &str) {
    let c = match h {
        Hibernation::Off => None,
        Hibernation::Refused(why) => Some(cond(HIBERNATED, false, "HibernationRefused", why.clone())),
        Hibernation::Pending(why) => Some(cond(HIBERNATED, false, "Pending", format!("waiting: {why}"))),
        Hibernation::Begin => Some(cond(
            HIBERNATED,
            false,
            "Hibernating",
            "member pods stop one at a time, the leader last; volumes and membership are kept",
        )),
        Hibernation::Stopping(left) => Some(cond(
            HIBERNATED,
            false,
            "Hibernating",
            format!("member pods stop one at a time, the leader last; {left} left; volumes and membership are kept"),
        )),
        Hibernation::Hibernated(claims) => Some(cond(
            HIBERNATED,
            true,
            "Hibernated",
            format!("no member runs; {claims} volumes and the membership are kept"),
        )),
        Hibernation::Resuming => Some(cond(HIBERNATED, false, "Resumed", "members start again on their volumes")),
    };
    if let Some(c) = c {
        condition::upsert(cs, c, now);
    }
}

/// A one-shot defragmentation (`naming::DEFRAGMENT_ANNOTATION`): `Pending` (False) while
/// members are left, `Defragmented` (True) once done, `DefragmentRefused` (a Warning) for a
/// name that is no voting member. Kept as the last outcome once the request is gone.
pub const DEFRAGMENTATION: &str = "Defragmentation";

/// Sets the `Defragmentation` condition for this reconcile's judgement.
pub fn update_defrag(cs: &mut Vec<Condition>, r: &DefragRequest, now: &str) {
    let c = match r {
        DefragRequest::NotAsked => return,
        DefragRequest::Refused(why) => cond(DEFRAGMENTATION, false, "DefragmentRefused", why.clone()),
        DefragRequest::Pending(left) if left.is_empty() => {
            cond(DEFRAGMENTATION, false, "Pending", "waiting: no member answers the operator")
        }
        DefragRequest::Pending(left) => cond(
            DEFRAGMENTATION,
            false,
            "Pending",
            format!(
                "to defragment: {} (one at a time, the leader last, once no other change is in progress)",
                left.join(", ")
            ),
        ),
        DefragRequest::Done(all) => {
            cond(DEFRAGMENTATION, true, "Defragmented", format!("defragmented as asked: {}", all.join(", ")))
        }
    };
    condition::upsert(cs, c, now);
}

/// Whether a condition of this module in this state is a Warning Event.
pub fn is_warning(c: &Condition) -> bool {
    match c.type_.as_str() {
        FENCED => c.reason == "FenceRefused",
        SWITCHOVER => c.reason == "SwitchoverRefused",
        HIBERNATED => c.reason == "HibernationRefused",
        DEFRAGMENTATION => c.reason == "DefragmentRefused",
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::planner::{WaitReason, wait};

    fn stable() -> Step {
        wait(WaitReason::Stable, "3 members healthy")
    }

    fn find<'a>(cs: &'a [Condition], t: &str) -> Option<&'a Condition> {
        cs.iter().find(|c| c.type_ == t)
    }

    #[test]
    fn a_refused_fence_is_a_warning_that_names_both_the_fenced_and_the_refused() {
        let mut cs = Vec::new();
        let f = Fencing {
            kept: vec!["ex-b".into()],
            refused: vec![("ex-c".into(), "would leave 1 of 3".into())],
            ..Default::default()
        };
        update(&mut cs, &f, &Switchover::NotAsked, &stable(), "2026-11-28T00:00:00Z");
        let c = find(&cs, FENCED).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "FenceRefused"));
        assert!(c.message.contains("ex-b out of the client Service") && c.message.contains("ex-c: would leave 1 of 3"));
        assert!(is_warning(c));
        // Unfenced: the condition goes.
        update(&mut cs, &Fencing::default(), &Switchover::NotAsked, &stable(), "2026-11-28T00:00:01Z");
        assert!(find(&cs, FENCED).is_none());
    }

    #[test]
    fn a_switchover_pends_then_is_done_and_stays_reported_once_the_request_is_gone() {
        let mut cs = Vec::new();
        let mv = Switchover::Move { from: "ex-a".into(), to: 2, to_pod: "ex-b".into() };
        let step =
            Step::MoveLeader { from_pod: "ex-a".into(), to: 2, to_pod: "ex-b".into(), purpose: Purpose::Switchover };
        update(&mut cs, &Fencing::default(), &mv, &step, "t0");
        assert_eq!(find(&cs, SWITCHOVER).unwrap().reason, "Pending");
        update(&mut cs, &Fencing::default(), &Switchover::Done("ex-b".into()), &stable(), "t1");
        let c = find(&cs, SWITCHOVER).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "LeaderMoved"));
        assert!(!is_warning(c));
        update(&mut cs, &Fencing::default(), &Switchover::NotAsked, &stable(), "t2");
        assert_eq!(find(&cs, SWITCHOVER).unwrap().reason, "LeaderMoved");
        update(&mut cs, &Fencing::default(), &Switchover::Refused("ex-z is not a member".into()), &stable(), "t3");
        assert!(is_warning(find(&cs, SWITCHOVER).unwrap()));
    }
}

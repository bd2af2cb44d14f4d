//! A person's requests on the EtcdCluster (switchover, hibernation, a one-shot defragmentation;
//! fencing is decided in `fencing`): their conditions, and the marks that record or take them
//! off. A request goes only once its answer is in the status the cluster had: a reconcile can
//! end before its status patch, and whoever asked must always find the answer. Pure.

use etcd_operator_api::{Condition, EtcdClusterStatus};

use crate::fencing::Fencing;
use crate::marks::AnnotationChanges;
use crate::observed::Observed;
use crate::planner::{self, Step};

/// Sets the requests' conditions in `status` and their marks in `marks`.
pub(super) fn answer(
    o: &Observed,
    step: &Step,
    fencing: &Fencing,
    prev: &EtcdClusterStatus,
    status: &mut Vec<Condition>,
    marks: &mut AnnotationChanges,
    now: &str,
) {
    let switchover = planner::switchover::judge(o);
    crate::status::requests::update(status, fencing, &switchover, step, now);
    match &switchover {
        // A request for any member names the one chosen, so that the next reconcile sees it done.
        planner::switchover::Switchover::Move { to_pod, .. }
            if o.switchover.as_deref() == Some("")
                && matches!(step, Step::MoveLeader { purpose: planner::Purpose::Switchover, .. }) =>
        {
            marks.insert(crate::naming::SWITCHOVER_ANNOTATION.into(), Some(to_pod.clone()));
        }
        // The request goes once its outcome is in the status the cluster had (this reconcile's
        // status patch may not happen: a reconcile can end before it), so that whoever asked
        // always finds the answer.
        planner::switchover::Switchover::Done(_) | planner::switchover::Switchover::Refused(_)
            if recorded(&prev.conditions, status, crate::status::requests::SWITCHOVER) =>
        {
            marks.insert(crate::naming::SWITCHOVER_ANNOTATION.into(), None);
        }
        _ => {}
    }
    let hibernation = o.desired.as_ref().map(|d| planner::hibernation::judge(o, d));
    if let Ok(h) = &hibernation {
        crate::status::requests::update_hibernation(status, h, now);
    }
    match &hibernation {
        // Recorded before the first pod is deleted: from then on the pods go, whatever else.
        Ok(planner::hibernation::Hibernation::Begin) => {
            marks.insert(crate::naming::HIBERNATED_AT_ANNOTATION.into(), Some(now.to_string()));
        }
        // Cleared once the status says so (as for the switchover above).
        Ok(planner::hibernation::Hibernation::Resuming)
            if recorded(&prev.conditions, status, crate::status::requests::HIBERNATED) =>
        {
            marks.insert(crate::naming::HIBERNATED_AT_ANNOTATION.into(), None);
        }
        _ => {}
    }
    let defrag = planner::maintenance::judge_request(o);
    crate::status::requests::update_defrag(status, &defrag, now);
    match &defrag {
        planner::maintenance::DefragRequest::NotAsked if o.defrag_asked_secs.is_some() => {
            marks.insert(crate::naming::DEFRAGMENT_ASKED_AT_ANNOTATION.into(), None);
        }
        // First seen: a member counts as done once defragmented after now.
        // A mark in the future (written by a clock ahead, or by hand) would keep every member
        // "not done since": written again.
        planner::maintenance::DefragRequest::Pending(_) if o.defrag_asked_secs.is_none_or(|s| s < 0) => {
            marks.insert(crate::naming::DEFRAGMENT_ASKED_AT_ANNOTATION.into(), Some(now.to_string()));
        }
        planner::maintenance::DefragRequest::Done(_) | planner::maintenance::DefragRequest::Refused(_)
            if recorded(&prev.conditions, status, crate::status::requests::DEFRAGMENTATION) =>
        {
            marks.insert(crate::naming::DEFRAGMENT_ANNOTATION.into(), None);
            marks.insert(crate::naming::DEFRAGMENT_ASKED_AT_ANNOTATION.into(), None);
        }
        _ => {}
    }
}

/// Condition `type_` is in the previous status as this reconcile computed it (status, reason
/// and message).
fn recorded(prev: &[Condition], new: &[Condition], type_: &str) -> bool {
    let find = |cs: &[Condition]| {
        cs.iter().find(|c| c.type_ == type_).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    find(new).is_some() && find(prev) == find(new)
}

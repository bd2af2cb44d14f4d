//! A switchover asked for on the EtcdCluster (`naming::SWITCHOVER_ANNOTATION`, `kubectl etcd
//! switchover`): raft leadership handed to a healthy, caught-up voter. Pure.
//!
//! It is planned only where maintenance is (`membership::resize`, after upgrades, TLS steps
//! and rollouts): every voter healthy, no learner, the size as specified, so it never runs
//! beside a membership change. A target that can never lead (no member, a learner, a fenced
//! member, the only voter) refuses the request, which is then dropped; one that is not caught
//! up yet keeps it waiting.

use crate::observed::{EtcdState, MemberState, Observed};

/// What a switchover request comes to in one observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Switchover {
    /// None asked for.
    NotAsked,
    /// Hand leadership from the leader's pod `from` to member `to` (pod `to_pod`).
    Move { from: String, to: u64, to_pod: String },
    /// Not possible yet, and why.
    Waiting(String),
    /// The leader is the member asked for.
    Done(String),
    /// Can never be done as asked, and why: the request is dropped.
    Refused(String),
}

/// The request of `o` judged against what etcd says.
pub fn judge(o: &Observed) -> Switchover {
    let Some(asked) = o.switchover.as_deref() else { return Switchover::NotAsked };
    let Some(etcd) = &o.etcd else { return Switchover::Waiting("no member answers the operator".into()) };
    let Some(leader) = etcd.leader_member() else {
        return Switchover::Waiting("the cluster has no leader now".into());
    };
    // Asked to be fenced: refused. Fenced but no longer asked (being served again): waited for
    // (`ready_to_lead`).
    let fenced = |pod: &str| o.fence_request.as_ref().is_ok_and(|r| r.iter().any(|n| n == pod));
    if asked.is_empty() {
        if etcd.voters().count() < 2 {
            return Switchover::Refused("the cluster has one voting member: no other member can lead".into());
        }
        let best = etcd
            .voters()
            .filter(|m| m.id != leader.id && !fenced(&m.pod) && ready_to_lead(o, etcd, m).is_ok())
            .max_by(|a, b| applied(a).cmp(&applied(b)).then_with(|| b.pod.cmp(&a.pod)));
        return match best {
            Some(m) => Switchover::Move { from: leader.pod.clone(), to: m.id, to_pod: m.pod.clone() },
            None => Switchover::Waiting("no other voting member is healthy, Ready and caught up".into()),
        };
    }
    let Some(target) = etcd.member_for_pod(asked) else {
        let members: Vec<&str> = etcd.members.iter().map(|m| m.pod.as_str()).collect();
        return Switchover::Refused(format!(
            "{asked} is not a member of this cluster (members: {})",
            members.join(", ")
        ));
    };
    if target.id == leader.id {
        return Switchover::Done(asked.to_string());
    }
    if target.is_learner {
        return Switchover::Refused(format!("{asked} is a learner: only a voting member can lead"));
    }
    if fenced(asked) {
        return Switchover::Refused(format!("{asked} is fenced: a member kept from clients does not lead"));
    }
    match ready_to_lead(o, etcd, target) {
        Ok(()) => Switchover::Move { from: leader.pod.clone(), to: target.id, to_pod: target.pod.clone() },
        Err(why) => Switchover::Waiting(why),
    }
}

fn applied(m: &MemberState) -> u64 {
    m.status.as_ref().map_or(0, |s| s.raft_applied_index)
}

/// Healthy, its pod Ready and staying, and its applied index within
/// `upgrade::CATCH_UP_MAX_LAG` of the leader's.
fn ready_to_lead(o: &Observed, etcd: &EtcdState, m: &MemberState) -> Result<(), String> {
    if !m.is_healthy() {
        return Err(format!("{} is not healthy", m.pod));
    }
    let Some(p) = o.pods.get(&m.pod).filter(|p| p.ready && !p.deleting) else {
        return Err(format!("pod {} is not Ready", m.pod));
    };
    // Out of the client Service (fenced, drained, or being served again) or maybe still
    // defragmenting: not now.
    if p.fenced || p.serving == Some(false) {
        return Err(format!("{} is out of the client Service", m.pod));
    }
    if p.defrag_unfinished_secs.is_some_and(|s| s < super::maintenance::DEFRAG_GUARD_SECS) {
        return Err(format!("{} may still be defragmenting", m.pod));
    }
    // No numbers in the message: a condition's, it would change (and be an Event) every time.
    let leader_index = etcd.leader_member().and_then(|l| l.status.as_ref()).map(|s| s.raft_index);
    match leader_index {
        Some(li) if applied(m) + super::upgrade::CATCH_UP_MAX_LAG >= li => Ok(()),
        Some(_) => Err(format!("{} is not caught up with the leader", m.pod)),
        None => Err("the leader's raft index is not known".into()),
    }
}

#[cfg(test)]
mod tests {
    //! `running(3, 3)`: voters ex-m1 (leader, id 1), ex-m2, ex-m3, every one at raft index 5000
    //! and applied 5000 here; through the whole planner (`plan`) where the step matters.
    use super::*;
    use crate::planner::tests::{add_learner, etcd, m, running, unhealthy};
    use crate::planner::{Purpose, Step, plan, upgrade::CATCH_UP_MAX_LAG};

    fn cluster() -> Observed {
        let mut o = running(3, 3);
        for m in &mut etcd(&mut o).members {
            let s = m.status.as_mut().unwrap();
            (s.raft_index, s.raft_applied_index) = (5000, 5000);
        }
        o
    }

    fn ask(o: &mut Observed, to: &str) {
        o.switchover = Some(to.into());
    }

    fn applied_at(o: &mut Observed, id: u64, index: u64) {
        m(o, id).status.as_mut().unwrap().raft_applied_index = index;
    }

    #[test]
    fn nothing_asked_nothing_moves() {
        let o = cluster();
        assert_eq!(judge(&o), Switchover::NotAsked);
        assert!(matches!(plan(&o), Step::Wait(_)), "{:?}", plan(&o));
    }

    #[test]
    fn a_caught_up_voter_asked_for_gets_the_leadership() {
        let mut o = cluster();
        ask(&mut o, "ex-m3");
        assert_eq!(
            plan(&o),
            Step::MoveLeader { from_pod: "ex-m1".into(), to: 3, to_pod: "ex-m3".into(), purpose: Purpose::Switchover }
        );
    }

    #[test]
    fn without_a_name_the_most_caught_up_other_voter_leads() {
        let mut o = cluster();
        applied_at(&mut o, 2, 4999);
        ask(&mut o, "");
        assert_eq!(judge(&o), Switchover::Move { from: "ex-m1".into(), to: 3, to_pod: "ex-m3".into() });
        // Equal indexes: the first by name.
        applied_at(&mut o, 2, 5000);
        assert_eq!(judge(&o), Switchover::Move { from: "ex-m1".into(), to: 2, to_pod: "ex-m2".into() });
    }

    #[test]
    fn a_member_that_lags_is_waited_for_not_moved_to() {
        let mut o = cluster();
        applied_at(&mut o, 3, 5000 - CATCH_UP_MAX_LAG - 1);
        ask(&mut o, "ex-m3");
        assert!(matches!(judge(&o), Switchover::Waiting(w) if w.contains("not caught up")), "{:?}", judge(&o));
        assert!(!matches!(plan(&o), Step::MoveLeader { .. }), "{:?}", plan(&o));
        // Within the bound it moves.
        applied_at(&mut o, 3, 5000 - CATCH_UP_MAX_LAG);
        assert!(matches!(judge(&o), Switchover::Move { to: 3, .. }));
    }

    #[test]
    fn an_unhealthy_or_unready_target_is_waited_for() {
        let mut o = cluster();
        m(&mut o, 2).status.as_mut().unwrap().errors.push("corrupt".into());
        ask(&mut o, "ex-m2");
        assert!(matches!(judge(&o), Switchover::Waiting(w) if w.contains("not healthy")));
        let mut o = cluster();
        o.pods.get_mut("ex-m2").unwrap().ready = false;
        ask(&mut o, "ex-m2");
        assert!(matches!(judge(&o), Switchover::Waiting(w) if w.contains("not Ready")));
        let mut o = cluster();
        o.pods.get_mut("ex-m2").unwrap().ready = false;
        o.pods.get_mut("ex-m3").unwrap().ready = false;
        ask(&mut o, "");
        assert!(matches!(judge(&o), Switchover::Waiting(_)));
    }

    #[test]
    fn the_leader_asked_for_is_done() {
        let mut o = cluster();
        ask(&mut o, "ex-m1");
        assert_eq!(judge(&o), Switchover::Done("ex-m1".into()));
        assert!(matches!(plan(&o), Step::Wait(_)));
    }

    #[test]
    fn a_learner_a_stranger_a_fenced_member_and_a_lone_voter_are_refused() {
        let mut o = cluster();
        add_learner(&mut o, 4, "ex-m4", 5000);
        ask(&mut o, "ex-m4");
        assert!(matches!(judge(&o), Switchover::Refused(w) if w.contains("learner")));
        let mut o = cluster();
        ask(&mut o, "ex-zz");
        assert!(matches!(judge(&o), Switchover::Refused(w) if w.contains("not a member")));
        let mut o = cluster();
        o.fence_request = Ok(vec!["ex-m2".into()]);
        ask(&mut o, "ex-m2");
        assert!(matches!(judge(&o), Switchover::Refused(w) if w.contains("fenced")));
        let mut o = running(1, 1);
        ask(&mut o, "");
        assert!(matches!(judge(&o), Switchover::Refused(w) if w.contains("one voting member")));
    }

    #[test]
    fn a_fenced_member_is_passed_over_when_no_name_is_given() {
        let mut o = cluster();
        applied_at(&mut o, 3, 4999);
        o.fence_request = Ok(vec!["ex-m2".into()]);
        ask(&mut o, "");
        assert_eq!(judge(&o), Switchover::Move { from: "ex-m1".into(), to: 3, to_pod: "ex-m3".into() });
    }

    #[test]
    fn never_beside_a_membership_change() {
        // A learner being added: the switchover waits for it.
        let mut o = cluster();
        add_learner(&mut o, 4, "ex-m4", 10);
        ask(&mut o, "ex-m2");
        assert!(!matches!(plan(&o), Step::MoveLeader { .. }), "{:?}", plan(&o));
        // A voter that is not healthy: every change waits for it, the switchover too.
        let mut o = cluster();
        unhealthy(&mut o, 3);
        ask(&mut o, "ex-m2");
        assert!(!matches!(plan(&o), Step::MoveLeader { .. }), "{:?}", plan(&o));
        // Scaling down: the removal goes first.
        let mut o = running(3, 1);
        ask(&mut o, "ex-m2");
        assert!(!matches!(plan(&o), Step::MoveLeader { purpose: Purpose::Switchover, .. }), "{:?}", plan(&o));
    }

    #[test]
    fn done_and_not_yet_taken_off_nothing_moves_leadership_away() {
        // ex-m2 leads as asked and is due for defragmentation: the leader's defragmentation
        // would hand leadership away and the switchover take it back, again and again.
        let mut o = cluster();
        etcd(&mut o).leader = Some(2);
        for m in &mut etcd(&mut o).members {
            m.status.as_mut().unwrap().leader = 2;
        }
        o.defrag_asked = Some(Some("ex-m2".into()));
        o.defrag_asked_secs = Some(0);
        ask(&mut o, "ex-m2");
        assert_eq!(judge(&o), Switchover::Done("ex-m2".into()));
        assert!(matches!(plan(&o), Step::Wait(_)), "{:?}", plan(&o));
        // Once the request is off, the defragmentation goes on (leadership handed away first).
        o.switchover = None;
        assert!(matches!(plan(&o), Step::MoveLeader { purpose: Purpose::Defragment, .. }), "{:?}", plan(&o));
    }

    #[test]
    fn a_member_out_of_the_client_service_or_still_defragmenting_is_waited_for() {
        let mut o = cluster();
        o.pods.get_mut("ex-m2").unwrap().fenced = true;
        o.pods.get_mut("ex-m2").unwrap().serving = Some(false);
        ask(&mut o, "ex-m2");
        assert!(matches!(judge(&o), Switchover::Waiting(w) if w.contains("out of the client Service")));
        let mut o = cluster();
        o.pods.get_mut("ex-m2").unwrap().defrag_unfinished_secs = Some(5);
        ask(&mut o, "ex-m2");
        assert!(matches!(judge(&o), Switchover::Waiting(w) if w.contains("defragmenting")));
    }

    #[test]
    fn no_quorum_no_move() {
        let mut o = cluster();
        unhealthy(&mut o, 2);
        unhealthy(&mut o, 3);
        ask(&mut o, "ex-m2");
        assert!(!matches!(plan(&o), Step::MoveLeader { .. }), "{:?}", plan(&o));
    }
}

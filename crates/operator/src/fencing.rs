//! Fencing (`kubectl etcd fence`): a member pod taken out of the client Service on a person's
//! request (`naming::FENCED_MEMBERS_ANNOTATION`) while it stays a voter, so that a suspect
//! member answers no client while it still votes. Pure.
//!
//! The rule: a member is fenced only while a quorum of the voters still serves clients, so
//! that fencing never makes the client Service route to fewer members than it takes to answer
//! a write. A member fenced earlier stays fenced (fencing more is what is refused); an
//! unreadable request changes nothing; a name that leaves the list is served again.

use crate::observed::{EtcdState, Observed};
use crate::planner::Step;

/// What fencing changes in one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fencing {
    /// Member pods to take out of the client Service now.
    pub fence: Vec<String>,
    /// Fenced pods whose names left the request: served again.
    pub unfence: Vec<String>,
    /// Pods that are and stay fenced.
    pub kept: Vec<String>,
    /// Names asked for and not fenced, with why.
    pub refused: Vec<(String, String)>,
    /// Names left for a later reconcile (one new fence per reconcile).
    pub later: Vec<String>,
    /// The voting members' pods and the quorum, for the executor's check against the pods as
    /// the API server has them right before it fences (the cache may lag a fence just made).
    pub voters: Vec<String>,
    pub quorum: usize,
}

impl Fencing {
    /// Pods out of the client Service on request after this reconcile.
    pub fn fenced(&self) -> impl Iterator<Item = &String> {
        self.kept.iter().chain(&self.fence)
    }
}

/// More names than any cluster has members: refused as unreadable.
pub const MAX_NAMES: usize = 64;

/// The request as the annotation says it: `None`/empty is no fencing; else a JSON list of at
/// most [`MAX_NAMES`] pod names (repeats dropped, order kept).
pub fn parse_request(value: Option<&str>) -> Result<Vec<String>, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(Vec::new()) };
    if v.len() > MAX_NAMES * 256 {
        return Err(format!(
            "annotation {} is longer than {MAX_NAMES} names can be",
            crate::naming::FENCED_MEMBERS_ANNOTATION
        ));
    }
    let names: Vec<String> = serde_json::from_str(v).map_err(|e| {
        format!(
            "annotation {} must be a JSON list of member pod names, like [\"example-abcde\"]: {e}",
            crate::naming::FENCED_MEMBERS_ANNOTATION
        )
    })?;
    if names.len() > MAX_NAMES {
        return Err(format!(
            "annotation {} names {} pods, more than {MAX_NAMES}",
            crate::naming::FENCED_MEMBERS_ANNOTATION,
            names.len()
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

/// What to fence and serve again for the observation, beside the planned `step` (a pod it
/// drains counts as not serving; the pod it acts on is not served again in the same
/// reconcile: a member leaves the client Service before it leaves).
pub fn decide(o: &Observed, step: &Step) -> Fencing {
    let fenced_now: Vec<&String> = o.pods.values().filter(|p| p.fenced && !p.deleting).map(|p| &p.name).collect();
    let (voters, quorum) = o.etcd.as_ref().map_or((Vec::new(), 0), |e| {
        (e.voters().map(|m| m.pod.clone()).collect(), EtcdState::quorum_of(e.voters().count()))
    });
    let requested = match &o.fence_request {
        Ok(r) => r,
        Err(why) => {
            // Unreadable: nothing changes, whatever is fenced stays so.
            return Fencing {
                kept: fenced_now.into_iter().cloned().collect(),
                refused: vec![(crate::naming::FENCED_MEMBERS_ANNOTATION.to_string(), why.clone())],
                ..Default::default()
            };
        }
    };
    let mut out = Fencing { voters, quorum, ..Default::default() };
    let acted_on = step.member().filter(|_| !matches!(step, Step::Wait(_)));
    for name in fenced_now {
        if requested.contains(name) || acted_on == Some(name.as_str()) {
            out.kept.push(name.clone());
        } else {
            out.unfence.push(name.clone());
        }
    }
    let drained = match step {
        Step::Drain { pod } => Some(pod.as_str()),
        _ => None,
    };
    for name in requested.iter().filter(|n| !out.kept.contains(n)) {
        // A member whose pod is gone or going (deleted, evicted, rolled): its pod is made again
        // fenced (`start_fenced`), or judged once it runs; not a refusal.
        let member = o.etcd.as_ref().and_then(|e| e.member_for_pod(name)).is_some();
        if member && o.pods.get(name).is_none_or(|p| p.deleting) {
            out.later.push(name.clone());
            continue;
        }
        // One new fence per reconcile: the next one is judged on a cache that shows it.
        if !out.fence.is_empty() {
            out.later.push(name.clone());
            continue;
        }
        match may_fence(o, name, drained) {
            Ok(()) => out.fence.push(name.clone()),
            Err(why) => out.refused.push((name.clone(), why)),
        }
    }
    if out.fence.is_empty() {
        (out.voters, out.quorum) = (Vec::new(), 0);
    }
    out
}

/// A member a person fenced whose pod the step makes again (a PVC member restarting on its
/// volume after its pod was deleted, evicted or rolled) starts out of the client Service, so it
/// never serves between its start and the next reconcile's fence. The same rule as a new
/// fence: only while a quorum of the voters serves without it; else it starts serving, and the
/// fence is judged again once it runs. A bootstrap, a recovery or a learner (a new member) is
/// never started fenced.
pub fn start_fenced(o: &Observed, step: &mut Step) {
    let Step::CreatePod(m) = step else { return };
    let Ok(requested) = &o.fence_request else { return };
    if !m.restart || !requested.contains(&m.name) {
        return;
    }
    let Some(etcd) = &o.etcd else { return };
    if etcd.member_for_pod(&m.name).is_none_or(|member| member.is_learner) {
        return;
    }
    let serving = serving_voters(o, etcd, None).iter().filter(|p| **p != m.name).count();
    m.fenced = serving >= EtcdState::quorum_of(etcd.voters().count());
}

/// Whether `name` can be fenced beside the pod the step drains.
fn may_fence(o: &Observed, name: &str, drained: Option<&str>) -> Result<(), String> {
    let Some(pod) = o.pods.get(name) else {
        return Err(format!("no member pod of cluster {} is named {name}", o.name));
    };
    if pod.deleting {
        return Err(format!("pod {name} is being deleted"));
    }
    let Some(etcd) = &o.etcd else {
        return Err("no member answers the operator: it cannot tell which members serve, so it fences none".into());
    };
    let Some(member) = etcd.member_for_pod(name) else {
        return Err(format!("pod {name} is not a member of the etcd cluster yet"));
    };
    if member.is_learner {
        // Promoted, it would be a fenced voter nobody counted.
        return Err(format!("{name} is a learner being added: fence it once it is a voting member"));
    }
    let serving = serving_voters(o, etcd, drained);
    let voters = etcd.voters().count();
    let quorum = EtcdState::quorum_of(voters);
    let after = serving.iter().filter(|p| p.as_str() != name).count();
    if after < quorum {
        return Err(format!(
            "fencing {name} would leave {after} of {voters} voting members serving clients, fewer than a quorum ({quorum}); serving now: {}",
            if serving.is_empty() { "none".to_string() } else { serving.join(", ") }
        ));
    }
    Ok(())
}

/// Voters whose pods are Ready and in the client Service (not drained, not fenced, not drained
/// by this reconcile's step).
fn serving_voters(o: &Observed, etcd: &EtcdState, drained: Option<&str>) -> Vec<String> {
    etcd.voters()
        .filter(|m| {
            o.pods.get(&m.pod).is_some_and(|p| {
                p.ready && !p.deleting && !p.fenced && p.serving != Some(false) && drained != Some(p.name.as_str())
            })
        })
        .map(|m| m.pod.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    //! Three voters a, b, c (the leader is a) unless a test says otherwise.
    use super::*;
    use crate::observed::{MemberState, MemberStatus, PodState};

    fn cluster(voters: &[&str]) -> Observed {
        let mut o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
        let mut members = Vec::new();
        for (i, n) in voters.iter().enumerate() {
            let pod = PodState { name: n.to_string(), ready: true, serving: Some(true), ..Default::default() };
            o.pods.insert(n.to_string(), pod);
            let status = MemberStatus { leader: 1, ..Default::default() };
            members.push(MemberState {
                id: i as u64 + 1,
                name: n.to_string(),
                pod: n.to_string(),
                status: Some(status),
                ..Default::default()
            });
        }
        o.etcd = Some(EtcdState { leader: Some(1), members, ..Default::default() });
        o
    }

    fn ask(o: &mut Observed, names: &[&str]) {
        o.fence_request = Ok(names.iter().map(|n| n.to_string()).collect());
    }

    fn fenced_before(o: &mut Observed, name: &str) {
        let p = o.pods.get_mut(name).unwrap();
        p.fenced = true;
        p.serving = Some(false);
    }

    fn stable() -> Step {
        crate::planner::wait(crate::planner::WaitReason::Stable, "3 members healthy")
    }

    fn refused(f: &Fencing) -> Vec<&str> {
        f.refused.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn one_of_three_is_fenced_the_second_is_refused() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["b", "c"]);
        let f = decide(&o, &stable());
        assert_eq!(f.fence, vec!["b"]);
        assert_eq!((f.voters.len(), f.quorum), (3, 2), "the executor's live check needs them");
        assert_eq!((refused(&f), f.later.clone()), (vec![], vec!["c".to_string()]));
        fenced_before(&mut o, "b");
        let f = decide(&o, &stable());
        assert_eq!(refused(&f), vec!["c"]);
        assert!(f.refused[0].1.contains("would leave 1 of 3 voting members serving"), "{}", f.refused[0].1);
    }

    #[test]
    fn a_second_fence_asked_later_is_refused_and_the_first_kept() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        ask(&mut o, &["b", "c"]);
        let f = decide(&o, &stable());
        assert_eq!(f.kept, vec!["b"]);
        assert!(f.fence.is_empty());
        assert_eq!(refused(&f), vec!["c"]);
    }

    #[test]
    fn two_of_five_are_fenced_one_per_reconcile_a_third_is_refused() {
        let mut o = cluster(&["a", "b", "c", "d", "e"]);
        ask(&mut o, &["e", "d", "c"]);
        let f = decide(&o, &stable());
        assert_eq!(f.fence, vec!["e"]);
        assert_eq!(f.later, vec!["d", "c"]);
        fenced_before(&mut o, "e");
        let f = decide(&o, &stable());
        assert_eq!((f.kept.clone(), f.fence.clone()), (vec!["e".to_string()], vec!["d".to_string()]));
        fenced_before(&mut o, "d");
        let f = decide(&o, &stable());
        assert_eq!(refused(&f), vec!["c"]);
        assert!(f.refused[0].1.contains("fewer than a quorum (3)"), "{:?}", f.refused);
    }

    #[test]
    fn a_member_the_step_drains_counts_as_not_serving() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["c"]);
        let f = decide(&o, &Step::Drain { pod: "b".into() });
        assert_eq!(refused(&f), vec!["c"]);
    }

    #[test]
    fn the_pod_the_step_removes_is_not_served_again_on_its_way_out() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        ask(&mut o, &[]);
        let step = Step::RemoveMember {
            id: 2,
            pod: "b".into(),
            why: "scaling down".into(),
            cause: crate::planner::Removal::ScaleDown,
        };
        let f = decide(&o, &step);
        assert!(f.unfence.is_empty() && f.kept == ["b"], "{f:?}");
    }

    #[test]
    fn a_member_down_counts_as_not_serving() {
        // b is down: fencing c would leave only a serving, fewer than a quorum of 3.
        let mut o = cluster(&["a", "b", "c"]);
        o.pods.get_mut("b").unwrap().ready = false;
        ask(&mut o, &["c"]);
        assert_eq!(refused(&decide(&o, &stable())), vec!["c"]);
    }

    #[test]
    fn a_member_drained_to_leave_counts_as_not_serving() {
        let mut o = cluster(&["a", "b", "c"]);
        o.pods.get_mut("b").unwrap().serving = Some(false);
        ask(&mut o, &["c"]);
        assert_eq!(refused(&decide(&o, &stable())), vec!["c"]);
    }

    #[test]
    fn a_lone_member_is_never_fenced() {
        let mut o = cluster(&["a"]);
        ask(&mut o, &["a"]);
        assert_eq!(refused(&decide(&o, &stable())), vec!["a"]);
    }

    #[test]
    fn a_learner_is_fenced_only_once_it_votes() {
        let mut o = cluster(&["a", "b", "c"]);
        o.pods
            .insert("d".into(), PodState { name: "d".into(), ready: true, serving: Some(true), ..Default::default() });
        let e = o.etcd.as_mut().unwrap();
        e.members.push(MemberState { id: 4, pod: "d".into(), is_learner: true, ..Default::default() });
        ask(&mut o, &["d"]);
        let f = decide(&o, &stable());
        assert!(f.refused[0].1.contains("learner"), "{f:?}");
    }

    #[test]
    fn without_etcd_nothing_new_is_fenced_and_nothing_fenced_is_served() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        o.etcd = None;
        ask(&mut o, &["b", "c"]);
        let f = decide(&o, &stable());
        assert_eq!(f.kept, vec!["b"]);
        assert!(f.unfence.is_empty() && f.fence.is_empty());
        assert_eq!(refused(&f), vec!["c"]);
    }

    #[test]
    fn a_name_taken_off_the_list_is_served_again() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        ask(&mut o, &[]);
        let f = decide(&o, &stable());
        assert_eq!(f.unfence, vec!["b"]);
        assert!(f.kept.is_empty() && f.fence.is_empty() && f.refused.is_empty());
    }

    #[test]
    fn an_unreadable_request_changes_nothing() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        o.fence_request = parse_request(Some("b,c"));
        let f = decide(&o, &stable());
        assert_eq!(f.kept, vec!["b"]);
        assert!(f.unfence.is_empty() && f.fence.is_empty());
        assert!(f.refused[0].1.contains("JSON list"), "{:?}", f.refused);
    }

    fn remade(name: &str) -> Step {
        let mut m = crate::planner::NewMember::joining(
            name.into(),
            vec![],
            crate::version::Version::parse("3.6.0").unwrap(),
            true,
        );
        m.restart = true;
        Step::CreatePod(m)
    }

    fn starts_fenced(step: &Step) -> bool {
        matches!(step, Step::CreatePod(m) if m.fenced)
    }

    #[test]
    fn a_fenced_member_whose_pod_is_made_again_starts_out_of_the_service() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["b"]);
        o.pods.remove("b");
        let mut step = remade("b");
        start_fenced(&o, &mut step);
        assert!(starts_fenced(&step), "{step:?}");
        // Meanwhile the request waits for the pod: not refused, nothing else fenced.
        let f = decide(&o, &step);
        assert_eq!((refused(&f), f.later.clone(), f.fence.clone()), (vec![], vec!["b".to_string()], vec![]));
    }

    #[test]
    fn a_pod_being_deleted_keeps_its_request_waiting_not_refused() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        o.pods.get_mut("b").unwrap().deleting = true;
        ask(&mut o, &["b"]);
        let f = decide(&o, &stable());
        assert!(f.refused.is_empty() && f.later == ["b"], "{f:?}");
    }

    #[test]
    fn a_remade_fenced_member_serves_when_the_others_are_fewer_than_a_quorum() {
        // c is down: a alone serves; b must serve again rather than leave one of three.
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["b"]);
        o.pods.remove("b");
        o.pods.get_mut("c").unwrap().ready = false;
        let mut step = remade("b");
        start_fenced(&o, &mut step);
        assert!(!starts_fenced(&step), "{step:?}");
    }

    #[test]
    fn only_a_restart_of_a_fenced_voter_starts_fenced() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["b", "d"]);
        o.pods.remove("b");
        // Not named in the request.
        let mut other = remade("c");
        start_fenced(&o, &mut other);
        assert!(!starts_fenced(&other));
        // A new member (not a restart) that happens to carry an asked name.
        let mut new = Step::CreatePod(crate::planner::NewMember::joining(
            "d".into(),
            vec![],
            crate::version::Version::parse("3.6.0").unwrap(),
            true,
        ));
        start_fenced(&o, &mut new);
        assert!(!starts_fenced(&new));
        // Without etcd's answer nobody can count who serves.
        o.etcd = None;
        let mut b = remade("b");
        start_fenced(&o, &mut b);
        assert!(!starts_fenced(&b));
    }

    #[test]
    fn unknown_names_are_refused_by_name() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["zz"]);
        let f = decide(&o, &stable());
        assert!(f.fence.is_empty());
        assert!(f.refused[0].1.contains("no member pod of cluster ex is named zz"));
    }

    #[test]
    fn the_request_reads_a_json_list_and_drops_repeats() {
        assert_eq!(parse_request(None), Ok(vec![]));
        assert_eq!(parse_request(Some("  ")), Ok(vec![]));
        assert_eq!(parse_request(Some(r#"["b","c","b"]"#)), Ok(vec!["b".to_string(), "c".to_string()]));
        assert!(parse_request(Some(r#"{"b":1}"#)).is_err());
        let many: Vec<String> = (0..=MAX_NAMES).map(|i| format!("p{i}")).collect();
        assert!(parse_request(Some(&serde_json::to_string(&many).unwrap())).is_err());
    }
}

//! Fencing (`kubectl etcd fence`): a member pod taken out of the client Service on a person's
//! request (`naming::FENCED_MEMBERS_ANNOTATION`) while it stays a voter, so that a suspect
//! member answers no client while it still votes. Pure.
//!
//! The rule: a member is fenced only while a quorum of the voters still serves clients, so
//! that fencing never makes the client Service route to fewer members than it takes to answer
//! a write. A member fenced earlier stays fenced (fencing more is what is refused); an
//! unreadable request changes nothing; a name that leaves the list is served again.

use crate::observed::{EtcdState, Observed};

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
}

impl Fencing {
    /// Pods out of the client Service on request after this reconcile.
    pub fn fenced(&self) -> impl Iterator<Item = &String> {
        self.kept.iter().chain(&self.fence)
    }
}

/// The request as the annotation says it: `None`/empty is no fencing; else a JSON list of pod
/// names (repeats dropped, order kept).
pub fn parse_request(value: Option<&str>) -> Result<Vec<String>, String> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else { return Ok(Vec::new()) };
    let names: Vec<String> = serde_json::from_str(v).map_err(|e| {
        format!(
            "annotation {} must be a JSON list of member pod names, like [\"example-abcde\"]: {e}",
            crate::naming::FENCED_MEMBERS_ANNOTATION
        )
    })?;
    let mut out: Vec<String> = Vec::new();
    for n in names {
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(out)
}

/// What to fence and serve again for the observation.
pub fn decide(o: &Observed) -> Fencing {
    let fenced_now: Vec<&String> = o.pods.values().filter(|p| p.fenced && !p.deleting).map(|p| &p.name).collect();
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
    let mut out = Fencing::default();
    for name in fenced_now {
        if requested.contains(name) {
            out.kept.push(name.clone());
        } else {
            out.unfence.push(name.clone());
        }
    }
    for name in requested.iter().filter(|n| !out.kept.contains(n)) {
        match may_fence(o, name, &out.fence) {
            Ok(()) => out.fence.push(name.clone()),
            Err(why) => out.refused.push((name.clone(), why)),
        }
    }
    out
}

/// Whether `name` can be fenced beside the pods fenced in this reconcile already.
fn may_fence(o: &Observed, name: &str, fencing: &[String]) -> Result<(), String> {
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
        // A learner counts toward no quorum: taking it out leaves every voter serving.
        return Ok(());
    }
    let serving = serving_voters(o, etcd, fencing);
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

/// Voters whose pods are Ready and in the client Service (not drained, not fenced, not being
/// fenced in this reconcile).
fn serving_voters(o: &Observed, etcd: &EtcdState, fencing: &[String]) -> Vec<String> {
    etcd.voters()
        .filter(|m| {
            o.pods.get(&m.pod).is_some_and(|p| {
                p.ready && !p.deleting && !p.fenced && p.serving != Some(false) && !fencing.contains(&p.name)
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

    fn refused(f: &Fencing) -> Vec<&str> {
        f.refused.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn one_of_three_is_fenced_the_second_is_refused() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["b", "c"]);
        let f = decide(&o);
        assert_eq!(f.fence, vec!["b"]);
        assert_eq!(refused(&f), vec!["c"]);
        assert!(f.refused[0].1.contains("would leave 1 of 3 voting members serving"), "{}", f.refused[0].1);
    }

    #[test]
    fn a_second_fence_asked_later_is_refused_and_the_first_kept() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        ask(&mut o, &["b", "c"]);
        let f = decide(&o);
        assert_eq!(f.kept, vec!["b"]);
        assert!(f.fence.is_empty());
        assert_eq!(refused(&f), vec!["c"]);
    }

    #[test]
    fn two_of_five_are_fenced_a_third_is_refused() {
        let mut o = cluster(&["a", "b", "c", "d", "e"]);
        ask(&mut o, &["e", "d", "c"]);
        let f = decide(&o);
        assert_eq!(f.fence, vec!["e", "d"]);
        assert_eq!(refused(&f), vec!["c"]);
    }

    #[test]
    fn a_member_down_counts_as_not_serving() {
        // b is down: fencing c would leave only a serving, fewer than a quorum of 3.
        let mut o = cluster(&["a", "b", "c"]);
        o.pods.get_mut("b").unwrap().ready = false;
        ask(&mut o, &["c"]);
        assert_eq!(refused(&decide(&o)), vec!["c"]);
    }

    #[test]
    fn a_member_drained_to_leave_counts_as_not_serving() {
        let mut o = cluster(&["a", "b", "c"]);
        o.pods.get_mut("b").unwrap().serving = Some(false);
        ask(&mut o, &["c"]);
        assert_eq!(refused(&decide(&o)), vec!["c"]);
    }

    #[test]
    fn a_lone_member_is_never_fenced() {
        let mut o = cluster(&["a"]);
        ask(&mut o, &["a"]);
        assert_eq!(refused(&decide(&o)), vec!["a"]);
    }

    #[test]
    fn a_learner_may_be_fenced_whatever_the_voters_do() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        o.pods
            .insert("d".into(), PodState { name: "d".into(), ready: true, serving: Some(true), ..Default::default() });
        let e = o.etcd.as_mut().unwrap();
        e.members.push(MemberState { id: 4, pod: "d".into(), is_learner: true, ..Default::default() });
        ask(&mut o, &["b", "d"]);
        let f = decide(&o);
        assert_eq!((f.kept, f.fence), (vec!["b".to_string()], vec!["d".to_string()]));
    }

    #[test]
    fn without_etcd_nothing_new_is_fenced_and_nothing_fenced_is_served() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        o.etcd = None;
        ask(&mut o, &["b", "c"]);
        let f = decide(&o);
        assert_eq!(f.kept, vec!["b"]);
        assert!(f.unfence.is_empty() && f.fence.is_empty());
        assert_eq!(refused(&f), vec!["c"]);
    }

    #[test]
    fn a_name_taken_off_the_list_is_served_again() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        ask(&mut o, &[]);
        let f = decide(&o);
        assert_eq!(f.unfence, vec!["b"]);
        assert!(f.kept.is_empty() && f.fence.is_empty() && f.refused.is_empty());
    }

    #[test]
    fn an_unreadable_request_changes_nothing() {
        let mut o = cluster(&["a", "b", "c"]);
        fenced_before(&mut o, "b");
        o.fence_request = parse_request(Some("b,c"));
        let f = decide(&o);
        assert_eq!(f.kept, vec!["b"]);
        assert!(f.unfence.is_empty() && f.fence.is_empty());
        assert!(f.refused[0].1.contains("JSON list"), "{:?}", f.refused);
    }

    #[test]
    fn unknown_names_are_refused_by_name() {
        let mut o = cluster(&["a", "b", "c"]);
        ask(&mut o, &["zz"]);
        let f = decide(&o);
        assert!(f.fence.is_empty());
        assert!(f.refused[0].1.contains("no member pod of cluster ex is named zz"));
    }

    #[test]
    fn the_request_reads_a_json_list_and_drops_repeats() {
        assert_eq!(parse_request(None), Ok(vec![]));
        assert_eq!(parse_request(Some("  ")), Ok(vec![]));
        assert_eq!(parse_request(Some(r#"["b","c","b"]"#)), Ok(vec!["b".to_string(), "c".to_string()]));
        assert!(parse_request(Some(r#"{"b":1}"#)).is_err());
    }
}

//! Hibernation (`naming::HIBERNATION_ANNOTATION`, `kubectl etcd hibernate`/`resume`): every
//! member pod of a PVC cluster stopped, its claims and the membership kept; resumed, each member
//! restarts on its own claim (`volumes::restart`, as after losing every pod). Pure.
//!
//! Rules: only a cluster whose every member keeps its data on a live claim hibernates (an
//! emptyDir member's data would go with its pod); it begins only with every voter healthy, no
//! learner and no recovery under way, and the beginning is recorded (`HIBERNATED_AT`) before
//! the first pod is deleted; from then on the pods go one at a time, followers first and the
//! leader last, and nothing else is planned until the cluster resumes.

use super::{Step, WaitReason, wait};
use crate::observed::Observed;
use crate::validation::Desired;

/// The annotation's value: `on`/`off` (any case), absent or empty for off.
pub fn parse(value: Option<&str>) -> Result<bool, String> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("off") => Ok(false),
        Some("on") => Ok(true),
        Some(v) => Err(format!("annotation {} is \"on\" or \"off\", not {v:?}", crate::naming::HIBERNATION_ANNOTATION)),
    }
}

/// What the request comes to in one observation.
#[derive(Clone, Debug, PartialEq)]
pub enum Hibernation {
    /// Not asked for, and not hibernated.
    Off,
    /// Asked for and not possible (the request is kept, nothing changes): why.
    Refused(String),
    /// Asked for; begins once the cluster is settled: what it waits for.
    Pending(String),
    /// Begins now (the mark is written before the step).
    Begin,
    /// Stopping the members: pods left.
    Stopping(usize),
    /// Every member pod is gone; claims kept: how many.
    Hibernated(usize),
    /// Asked off after a hibernation began: the members start again on their claims.
    Resuming,
}

/// The hibernation of `o` judged against the spec `d`.
pub fn judge(o: &Observed, d: &Desired) -> Hibernation {
    let asked = match &o.hibernation_asked {
        Ok(a) => *a,
        // Unreadable: as it was.
        Err(why) if !o.hibernation_started => return Hibernation::Refused(why.clone()),
        Err(_) => true,
    };
    let live_claims = o.pvcs.values().filter(|v| !v.deleting).count();
    match (asked, o.hibernation_started) {
        (false, false) => Hibernation::Off,
        (false, true) => Hibernation::Resuming,
        (true, true) if o.pods.is_empty() => Hibernation::Hibernated(live_claims),
        (true, true) => Hibernation::Stopping(o.pods.len()),
        (true, false) => {
            if let Err(why) = on_claims(o, d) {
                return Hibernation::Refused(why);
            }
            if o.paused {
                return Hibernation::Pending("spec.paused is true: the operator changes nothing".into());
            }
            match settled(o, d) {
                Ok(()) => Hibernation::Begin,
                Err(why) => Hibernation::Pending(why),
            }
        }
    }
}

/// Every member keeps its data on a live claim.
fn on_claims(o: &Observed, d: &Desired) -> Result<(), String> {
    if d.pod.persistent_volume_claim_spec.is_none() {
        return Err("the members keep their data on emptyDir volumes, which go with their pods: hibernating would delete the data (only a cluster with spec.pod.persistentVolumeClaimSpec hibernates)".into());
    }
    let members: Vec<&str> = match &o.etcd {
        Some(e) => e.members.iter().map(|m| m.pod.as_str()).collect(),
        None => o.pods.keys().map(String::as_str).collect(),
    };
    let without: Vec<&str> = members
        .into_iter()
        .filter(|m| o.pods.get(*m).is_some_and(|p| !p.uses_pvc) || o.pvcs.get(*m).is_none_or(|v| v.deleting))
        .collect();
    if !without.is_empty() {
        return Err(format!(
            "members {} have no volume claim of their own (made before the spec asked for claims?): hibernating would delete their data",
            without.join(", ")
        ));
    }
    Ok(())
}

/// Every voter healthy, no learner, no recovery, no pod going, and nothing else to do: no
/// upgrade, rollout, TLS step or other change half-way (a member upgraded alone would be
/// restarted at the cluster's version on resume), under a valid spec.
fn settled(o: &Observed, d: &Desired) -> Result<(), String> {
    let Some(e) = &o.etcd else { return Err("no member answers: hibernation begins with every member healthy".into()) };
    if o.recovery_record.is_some() {
        return Err("a quorum-loss recovery is under way".into());
    }
    if let Some(l) = e.learners().next() {
        return Err(format!("member {} is being added (a learner)", l.pod));
    }
    if let Some(m) = e.voters().find(|m| !m.is_healthy()) {
        return Err(format!("member {} is not healthy", m.pod));
    }
    if let Some(p) = o.pods.values().find(|p| p.deleting || !p.ready) {
        return Err(format!("pod {} is not Ready or is going", p.name));
    }
    if o.spec_refused.is_some() || o.no_valid_spec {
        return Err("the spec is refused: hibernation begins under a valid spec".into());
    }
    let rest = super::volumes::restart(o, d)
        .or_else(|| super::failing::remake_on_volume(o, d))
        .unwrap_or_else(|| super::membership::with_etcd(o, d, e));
    match rest {
        Step::Wait(w) if w.reason == WaitReason::Stable => Ok(()),
        Step::Wait(w) => Err(format!("the cluster is not settled: {}", w.message)),
        step => Err(format!("a change is in progress ({})", step.name())),
    }
}

/// The step hibernation takes over with, if any: the next pod to stop, or the wait while
/// stopped. `None`: the cluster runs as usual (off, refused, pending or resuming).
pub(super) fn next(o: &Observed, d: &Desired) -> Option<Step> {
    match judge(o, d) {
        Hibernation::Begin | Hibernation::Stopping(_) => Some(next_pod(o).map_or_else(
            || wait(WaitReason::Hibernating, "member pods are stopping for the hibernation; their volumes are kept"),
            |pod| Step::DeletePod {
                why: format!("hibernation: member {pod} stops; its volume and its membership are kept"),
                pod,
                keep_volume: true,
            },
        )),
        Hibernation::Hibernated(claims) => Some(wait(
            WaitReason::Hibernated,
            format!(
                "hibernated: no member runs; {claims} volumes and the membership are kept (resume: remove annotation {} or set it to off)",
                crate::naming::HIBERNATION_ANNOTATION
            ),
        )),
        Hibernation::Off | Hibernation::Refused(_) | Hibernation::Pending(_) | Hibernation::Resuming => None,
    }
}

/// The next pod to delete: a follower before the leader, by name.
fn next_pod(o: &Observed) -> Option<String> {
    let leader = o.etcd.as_ref().and_then(|e| e.leader_member()).map(|m| m.pod.as_str());
    let mut left: Vec<&str> = o.pods.values().filter(|p| !p.deleting).map(|p| p.name.as_str()).collect();
    left.sort_by_key(|p| (Some(*p) == leader, *p));
    left.first().map(|p| p.to_string())
}

#[cfg(test)]
mod tests {
    //! `running(3, 3)` with a claim per member (`add_pvc`) and a PVC spec: voters ex-m1 (the
    //! leader), ex-m2, ex-m3.
    use super::*;
    use crate::planner::plan;
    use crate::planner::tests::{add_learner, add_pvc, running, unhealthy};

    fn pvc_cluster() -> Observed {
        let mut o = running(3, 3);
        let spec = etcd_operator_api::EtcdClusterSpec {
            size: 3,
            version: "3.5.1".into(),
            pod: Some(etcd_operator_api::cluster::PodPolicy {
                persistent_volume_claim_spec: Some(Default::default()),
                ..Default::default()
            }),
            ..Default::default()
        };
        o.desired = crate::validation::validate("ex", &spec);
        assert!(o.desired.is_ok(), "{:?}", o.desired);
        for m in ["ex-m1", "ex-m2", "ex-m3"] {
            add_pvc(&mut o, m);
        }
        o.hibernation_asked = Ok(true);
        o
    }

    fn d(o: &Observed) -> Desired {
        o.desired.clone().unwrap()
    }

    fn deleted(s: &Step) -> Option<(&str, bool)> {
        match s {
            Step::DeletePod { pod, keep_volume, .. } => Some((pod.as_str(), *keep_volume)),
            _ => None,
        }
    }

    #[test]
    fn the_value_is_on_or_off() {
        assert_eq!(parse(None), Ok(false));
        assert_eq!(parse(Some("On")), Ok(true));
        assert_eq!(parse(Some("off")), Ok(false));
        assert!(parse(Some("yes")).is_err());
    }

    #[test]
    fn a_settled_pvc_cluster_begins_with_a_follower_keeping_its_volume() {
        let o = pvc_cluster();
        assert_eq!(judge(&o, &d(&o)), Hibernation::Begin);
        assert_eq!(deleted(&plan(&o)), Some(("ex-m2", true)));
    }

    #[test]
    fn the_leader_goes_last_and_then_the_cluster_waits_hibernated() {
        let mut o = pvc_cluster();
        o.hibernation_started = true;
        o.pods.remove("ex-m2");
        assert_eq!(deleted(&plan(&o)), Some(("ex-m3", true)));
        o.pods.remove("ex-m3");
        // The leader alone has no quorum now: still stopped, not healed or recovered.
        o.etcd.as_mut().unwrap().members.iter_mut().skip(1).for_each(|m| m.status = None);
        assert_eq!(deleted(&plan(&o)), Some(("ex-m1", true)));
        o.pods.get_mut("ex-m1").unwrap().deleting = true;
        assert!(matches!(plan(&o), Step::Wait(w) if w.reason == WaitReason::Hibernating));
        o.pods.clear();
        o.etcd = None;
        let s = plan(&o);
        assert!(
            matches!(&s, Step::Wait(w) if w.reason == WaitReason::Hibernated && w.message.contains("3 volumes")),
            "{s:?}"
        );
    }

    #[test]
    fn an_emptydir_cluster_is_refused_and_keeps_running() {
        let mut o = running(3, 3);
        o.hibernation_asked = Ok(true);
        assert!(matches!(judge(&o, &d(&o)), Hibernation::Refused(w) if w.contains("emptyDir")));
        assert!(matches!(plan(&o), Step::Wait(w) if w.reason == WaitReason::Stable));
    }

    #[test]
    fn a_member_without_its_own_claim_refuses_it() {
        let mut o = pvc_cluster();
        o.pvcs.remove("ex-m3");
        assert!(matches!(judge(&o, &d(&o)), Hibernation::Refused(w) if w.contains("ex-m3")));
        assert!(deleted(&plan(&o)).is_none());
    }

    #[test]
    fn it_waits_for_an_unhealthy_voter_a_learner_or_a_recovery() {
        let mut o = pvc_cluster();
        unhealthy(&mut o, 3);
        assert!(matches!(judge(&o, &d(&o)), Hibernation::Pending(w) if w.contains("ex-m3")));
        assert!(deleted(&plan(&o)).is_none());
        let mut o = pvc_cluster();
        add_learner(&mut o, 4, "ex-m4", 10);
        add_pvc(&mut o, "ex-m4");
        assert!(matches!(judge(&o, &d(&o)), Hibernation::Pending(w) if w.contains("learner")));
        let mut o = pvc_cluster();
        o.recovery_record = Some(Default::default());
        assert!(matches!(judge(&o, &d(&o)), Hibernation::Pending(_)));
    }

    #[test]
    fn it_never_begins_half_way_through_an_upgrade_or_under_a_refused_spec() {
        // The spec asks for a newer patch: the upgrade goes first, hibernation waits.
        let mut o = pvc_cluster();
        let mut d = d(&o);
        d.version = crate::version::Version::parse("3.5.34").unwrap();
        o.desired = Ok(d.clone());
        assert!(matches!(judge(&o, &d), Hibernation::Pending(w) if w.contains("in progress")), "{:?}", judge(&o, &d));
        assert!(deleted(&plan(&o)).is_none(), "{:?}", plan(&o));
        let mut o = pvc_cluster();
        o.spec_refused = Some(vec!["size: must be positive".into()]);
        assert!(matches!(judge(&o, &self::d(&o)), Hibernation::Pending(w) if w.contains("refused")));
    }

    #[test]
    fn resumed_every_member_restarts_on_its_own_volume() {
        let mut o = pvc_cluster();
        o.hibernation_asked = Ok(false);
        o.hibernation_started = true;
        o.pods.clear();
        o.etcd = None;
        assert_eq!(judge(&o, &d(&o)), Hibernation::Resuming);
        let Step::CreatePod(m) = plan(&o) else { panic!("{:?}", plan(&o)) };
        assert!(m.existing && m.pvc && m.claim.as_deref() == Some("ex-m1-data"), "{m:?}");
    }

    #[test]
    fn an_unreadable_value_changes_nothing_either_way() {
        let mut o = pvc_cluster();
        o.hibernation_asked = parse(Some("please"));
        assert!(matches!(judge(&o, &d(&o)), Hibernation::Refused(_)));
        assert!(deleted(&plan(&o)).is_none());
        o.hibernation_started = true;
        o.pods.clear();
        o.etcd = None;
        assert!(matches!(plan(&o), Step::Wait(w) if w.reason == WaitReason::Hibernated));
    }
}

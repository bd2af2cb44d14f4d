//! Status: what `kubectl get etcd` and `kubectl describe` show, computed from the observation
//! and the planned step. Pure; the controller writes the result with one status patch.

use etcd_operator_api::EtcdClusterStatus;
use etcd_operator_api::condition::{self, Condition};

use crate::naming::{self, CLIENT_PORT};
use crate::observed::{EtcdState, Observed};
use crate::planner::{Step, WaitReason};

pub const AVAILABLE: &str = "Available";
pub const SPEC_VALID: &str = "SpecValid";
pub const SCALING: &str = "Scaling";
pub const RECOVERING: &str = "Recovering";
pub const UPGRADING: &str = "Upgrading";
/// Set once a quorum-loss recovery brought the cluster back; says from what and what was lost.
pub const RECOVERED_FROM_QUORUM_LOSS: &str = "RecoveredFromQuorumLoss";
/// Something needs a person: no quorum, a failing member, data lost.
pub const DEGRADED: &str = "Degraded";
/// etcd's NOSPACE alarm is raised: writes are refused until the operator recovered space.
pub const NO_SPACE: &str = "NoSpace";
/// etcd's CORRUPT alarm is raised: names the member; never cleared by the operator.
pub const CORRUPT: &str = "Corrupt";

pub const PHASE_CREATING: &str = "Creating";
pub const PHASE_RUNNING: &str = "Running";
pub const PHASE_FAILED: &str = "Failed";

fn cond(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        ..Default::default()
    }
}

/// Ready members: voters whose etcd answered the operator just now, on a pod that is not going
/// away. Judged from etcd itself rather than the pod's readiness probe, which trails it by up
/// to a probe period; the probe still decides what the client Service routes to.
fn healthy_voter_pods(o: &Observed, e: &EtcdState) -> Vec<String> {
    e.voters()
        .filter(|m| m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting))
        .map(|m| m.pod.clone())
        .collect()
}

/// The new status. `prev` supplies what must persist (cluster ID, condition times, phase).
pub fn compute(
    o: &Observed,
    step: &Step,
    prev: &EtcdClusterStatus,
    generation: Option<i64>,
    now: &str,
) -> EtcdClusterStatus {
    let mut s = prev.clone();
    s.observed_generation = generation;
    s.control_paused = o.paused;
    s.service_name = naming::client_service(&o.name);
    s.client_port = CLIENT_PORT;
    let wait = match step {
        Step::Wait(w) => Some(w),
        _ => None,
    };

    // Membership as etcd reports it; without etcd, as the pods show it.
    match &o.etcd {
        Some(e) => {
            let ready = healthy_voter_pods(o, e);
            let mut learners: Vec<String> = e.learners().map(|m| m.pod.clone()).collect();
            learners.sort();
            let mut unready: Vec<String> = e.voters().map(|m| m.pod.clone()).filter(|p| !ready.contains(p)).collect();
            unready.sort();
            s.size = e.members.len() as i32;
            s.ready_members = ready.len() as i32;
            s.members.ready = ready;
            s.members.ready.sort();
            s.members.unready = unready;
            s.members.learners = learners;
            s.leader = e.leader_member().map(|m| m.pod.clone()).unwrap_or_default();
            if e.cluster_id != 0 {
                s.cluster_id = crate::etcd::hex(e.cluster_id);
            }
        }
        None => {
            s.size = o.pods.len() as i32;
            s.ready_members = 0;
            s.members.ready.clear();
            s.members.unready = o.pods.keys().cloned().collect();
            s.members.learners.clear();
            s.leader.clear();
        }
    }

    // Versions: current is what every pod runs once they agree; target is the spec's while
    // it differs.
    // Current: the version every member *reports* (not what the pods are annotated with: an
    // upgraded member counts once it runs the new version), kept as it was while they differ
    // or one does not answer.
    if let Some(e) = &o.etcd {
        let reported: Option<Vec<&str>> =
            e.members.iter().map(|m| m.status.as_ref().map(|st| st.version.as_str())).collect();
        if let Some(mut versions) = reported.filter(|v| !v.is_empty()) {
            versions.sort();
            versions.dedup();
            if versions.len() == 1 && !versions[0].is_empty() {
                s.current_version = versions[0].to_string();
            }
        }
    }
    s.target_version = match &o.desired {
        Ok(d) if d.version.to_string() != s.current_version => d.version.to_string(),
        _ => String::new(),
    };

    // Conditions.
    let mut cs = std::mem::take(&mut s.conditions);
    match (&o.desired, &o.spec_refused) {
        (Ok(_), None) => condition::upsert(&mut cs, cond(SPEC_VALID, true, "Valid", ""), now),
        (Ok(_), Some(errs)) => condition::upsert(
            &mut cs,
            cond(
                SPEC_VALID,
                false,
                "InvalidSpec",
                format!(
                    "{}; the change was refused and nothing it asks for is done; the cluster keeps running and healing under the last valid spec",
                    errs.join("; ")
                ),
            ),
            now,
        ),
        (Err(errs), _) => condition::upsert(&mut cs, cond(SPEC_VALID, false, "InvalidSpec", errs.join("; ")), now),
    }
    let available = match &o.etcd {
        Some(e) => {
            let voters = e.voters().count();
            let healthy = e.voters().filter(|m| m.is_healthy()).count();
            if healthy >= EtcdState::quorum_of(voters) {
                cond(AVAILABLE, true, "QuorumHealthy", format!("{healthy} of {voters} voting members healthy"))
            } else {
                cond(AVAILABLE, false, "NoQuorum", format!("{healthy} of {voters} voting members healthy"))
            }
        }
        None if matches!(wait, Some(w) if w.reason == WaitReason::Bootstrapping)
            || matches!(step, Step::Bootstrap(_) | Step::CreateServices) =>
        {
            cond(AVAILABLE, false, "Bootstrapping", "the members of a new cluster are starting")
        }
        None => {
            cond(AVAILABLE, false, "Unreachable", o.etcd_error.clone().unwrap_or_else(|| "no member answers".into()))
        }
    };
    condition::upsert(&mut cs, available, now);
    if let Ok(d) = &o.desired {
        let members = o.etcd.as_ref().map(|e| e.members.len()).unwrap_or(o.pods.len());
        if members != d.size && !o.paused {
            let reason = if members < d.size { "ScalingUp" } else { "ScalingDown" };
            let msg = format!("Current cluster size: {members}, desired cluster size: {}", d.size);
            condition::upsert(&mut cs, cond(SCALING, true, reason, msg), now);
        } else {
            condition::remove(&mut cs, SCALING);
        }
    }
    // The recovery that just finished (its member serves), else the last one recorded.
    let serving = |r: &&crate::planner::recovery::Record| {
        o.etcd.as_ref().and_then(|e| e.member_for_pod(&r.member)).is_some_and(|m| m.is_healthy())
    };
    if let Some(r) = o.recovery_record.as_ref().filter(serving).or(o.last_recovery.as_ref()) {
        let lost = if r.voters > 0 {
            format!("{} of {} voting members were lost", r.lost, r.voters)
        } else {
            "every member was lost".to_string()
        };
        let msg = format!(
            "recovered from quorum loss ({}): {lost}; the cluster resumed from {} at revision {}; writes acknowledged after revision {} were lost",
            r.policy, r.from, r.revision, r.revision
        );
        condition::upsert(&mut cs, cond(RECOVERED_FROM_QUORUM_LOSS, true, &r.policy, msg), now);
    }
    match step {
        Step::Recover(r) => condition::upsert(
            &mut cs,
            cond(
                RECOVERING,
                true,
                "QuorumLossRecovery",
                format!("starting member {} from {} at revision {}", r.member.name, r.from, r.revision),
            ),
            now,
        ),
        Step::Wait(w) if w.reason == WaitReason::Recovering => {
            condition::upsert(&mut cs, cond(RECOVERING, true, "QuorumLossRecovery", w.message.clone()), now)
        }
        Step::RemoveMember { pod, why, .. } if why.contains("volume") => condition::upsert(
            &mut cs,
            cond(RECOVERING, true, "ReplacingMember", format!("replacing member {pod}: {why}")),
            now,
        ),
        Step::RemoveMember { pod, why, .. } if why.contains("gone") || why.contains("ended") => condition::upsert(
            &mut cs,
            cond(RECOVERING, true, "ReplacingMember", format!("replacing member {pod}: {why}")),
            now,
        ),
        Step::CreatePod(m) if m.existing && m.pvc => condition::upsert(
            &mut cs,
            cond(RECOVERING, true, "RestartingMember", format!("restarting member {} on its volume", m.name)),
            now,
        ),
        Step::Wait(w) if w.reason == WaitReason::Stable => condition::remove(&mut cs, RECOVERING),
        _ => {}
    }
    let target = o.desired.as_ref().map(|d| d.version.to_string()).unwrap_or_default();
    match step {
        Step::UpgradeMember { pod, from, to } => condition::upsert(
            &mut cs,
            cond(UPGRADING, true, "Upgrading", format!("upgrading to {to}: member {pod} from {from}")),
            now,
        ),
        Step::MoveLeader { from_pod, to_pod, purpose: crate::planner::Purpose::Upgrade, .. } => condition::upsert(
            &mut cs,
            cond(
                UPGRADING,
                true,
                "Upgrading",
                format!("upgrading to {target}: moving leadership from {from_pod} to {to_pod}"),
            ),
            now,
        ),
        Step::Wait(w) if w.reason == WaitReason::MemberUpgrading => condition::upsert(
            &mut cs,
            cond(UPGRADING, true, "Upgrading", format!("upgrading to {target}: {}", w.message)),
            now,
        ),
        Step::Wait(w)
            if matches!(
                w.reason,
                WaitReason::UpgradeFailed | WaitReason::UpgradeRefused | WaitReason::UpgradeDeferred
            ) =>
        {
            condition::upsert(&mut cs, cond(UPGRADING, false, w.reason.as_str(), w.message.clone()), now)
        }
        Step::Wait(w) if w.reason == WaitReason::Stable => condition::remove(&mut cs, UPGRADING),
        _ => {}
    }
    // Alarms, while etcd reports them (only known while a member answers).
    if let Some(e) = &o.etcd {
        use crate::observed::AlarmKind;
        for (type_, kind, what) in [
            (
                NO_SPACE,
                AlarmKind::NoSpace,
                "the database reached its space quota: writes are refused (reads and deletes work) until space is recovered",
            ),
            (
                CORRUPT,
                AlarmKind::Corrupt,
                "its data differs from the other members': etcd refuses writes; the operator changes nothing until a person has looked",
            ),
        ] {
            let members: Vec<String> = e
                .alarms
                .iter()
                .filter(|a| a.kind == kind)
                .map(|a| {
                    e.members
                        .iter()
                        .find(|m| m.id == a.member_id)
                        .map(|m| m.pod.clone())
                        .unwrap_or_else(|| crate::etcd::hex(a.member_id))
                })
                .collect();
            if members.is_empty() {
                condition::remove(&mut cs, type_);
            } else {
                let msg = format!("{} alarm raised by {}: {what}", kind.as_str(), members.join(", "));
                condition::upsert(&mut cs, cond(type_, true, "AlarmRaised", msg), now);
            }
        }
    }
    match wait {
        Some(w) if w.reason.needs_attention() && w.reason != WaitReason::InvalidSpec => {
            condition::upsert(&mut cs, cond(DEGRADED, true, w.reason.as_str(), w.message.clone()), now)
        }
        Some(w) if w.reason == WaitReason::Stable => condition::remove(&mut cs, DEGRADED),
        _ => {}
    }
    s.conditions = cs;

    // Phase, in CoreOS' three values.
    let all_ready = o.desired.as_ref().is_ok_and(|d| s.ready_members as usize == d.size);
    s.phase = if wait.is_some_and(|w| w.reason == WaitReason::DataLost) {
        PHASE_FAILED.into()
    } else if o.desired.is_err() && s.cluster_id.is_empty() {
        PHASE_FAILED.into()
    } else if prev.phase == PHASE_RUNNING || all_ready {
        PHASE_RUNNING.into()
    } else {
        PHASE_CREATING.into()
    };
    s.reason = match wait {
        Some(w) if w.reason.needs_attention() => w.message.clone(),
        _ => String::new(),
    };
    s
}

/// Whether a condition in this state is reported as a Warning Event (something is wrong, as
/// opposed to progress such as a cluster still bootstrapping).
pub fn is_warning(c: &Condition) -> bool {
    match c.type_.as_str() {
        DEGRADED => c.status == "True",
        AVAILABLE => c.status == "False" && c.reason != "Bootstrapping",
        SPEC_VALID => c.status == "False",
        UPGRADING => c.status == "False",
        RECOVERED_FROM_QUORUM_LOSS => true,
        NO_SPACE | CORRUPT => c.status == "True",
        _ => false,
    }
}

/// Conditions whose (status, reason, message) changed, for Events.
pub fn changed<'a>(old: &'a [Condition], new: &'a [Condition]) -> Vec<&'a Condition> {
    new.iter()
        .filter(|n| {
            condition::find(old, &n.type_)
                .is_none_or(|o| o.status != n.status || o.reason != n.reason || o.message != n.message)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{MemberState, MemberStatus, PodState};
    use crate::planner::{Wait, plan};
    use crate::validation::validate;
    use etcd_operator_api::EtcdClusterSpec;

    fn obs(size: i32, healthy: &[bool]) -> Observed {
        let mut o = Observed {
            name: "ex".into(),
            namespace: "ns".into(),
            desired: validate("ex", &EtcdClusterSpec { size, version: "3.5.1".into(), ..Default::default() }),
            services_ready: true,
            ever_bootstrapped: true,
            new_member_suffix: "zzzzz".into(),
            ..Default::default()
        };
        let mut e = EtcdState { cluster_id: 0xabc, leader: Some(1), members: vec![], ..Default::default() };
        for (i, h) in healthy.iter().enumerate() {
            let name = format!("ex-m{i}");
            o.pods.insert(
                name.clone(),
                PodState {
                    name: name.clone(),
                    ready: *h,
                    version: "3.5.1".into(),
                    phase: "Running".into(),
                    ..Default::default()
                },
            );
            e.members.push(MemberState {
                id: i as u64 + 1,
                name: name.clone(),
                pod: name,
                status: h.then(|| MemberStatus { leader: 1, version: "3.5.1".into(), ..Default::default() }),
                ..Default::default()
            });
        }
        o.etcd = Some(e);
        o
    }

    #[test]
    fn healthy_cluster_reports_running_with_all_members_ready() {
        let o = obs(3, &[true, true, true]);
        let s = compute(&o, &plan(&o), &Default::default(), Some(2), "t");
        assert_eq!(s.phase, PHASE_RUNNING);
        assert_eq!(s.members.ready, ["ex-m0", "ex-m1", "ex-m2"]);
        assert_eq!(s.ready_members, 3);
        assert_eq!(s.current_version, "3.5.1");
        assert_eq!(s.target_version, "");
        assert_eq!(s.leader, "ex-m0");
        assert_eq!(s.cluster_id, "abc");
        assert_eq!(s.service_name, "ex-client");
        assert_eq!(s.client_port, 2379);
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(condition::find(&s.conditions, AVAILABLE).unwrap().status, "True");
        assert!(condition::find(&s.conditions, SCALING).is_none());
    }

    #[test]
    fn current_version_is_what_every_member_reports_not_what_pods_are_annotated_with() {
        let mut o = obs(3, &[true, true, true]);
        let prev = EtcdClusterStatus { current_version: "3.5.0".into(), ..Default::default() };
        o.etcd.as_mut().unwrap().members[2].status.as_mut().unwrap().version = "3.5.0".into();
        let s = compute(&o, &plan(&o), &prev, None, "t");
        assert_eq!(s.current_version, "3.5.0");
        o.etcd.as_mut().unwrap().members[2].status = None; // restarting on the new version
        let s = compute(&o, &plan(&o), &prev, None, "t");
        assert_eq!(s.current_version, "3.5.0");
        o.etcd.as_mut().unwrap().members[2].status =
            Some(MemberStatus { leader: 1, version: "3.5.1".into(), ..Default::default() });
        let s = compute(&o, &plan(&o), &prev, None, "t");
        assert_eq!(s.current_version, "3.5.1");
    }

    #[test]
    fn lost_quorum_is_degraded_and_unavailable() {
        let o = obs(3, &[true, false, false]);
        let s = compute(&o, &plan(&o), &Default::default(), None, "t");
        assert_eq!(condition::find(&s.conditions, AVAILABLE).unwrap().status, "False");
        let d = condition::find(&s.conditions, DEGRADED).unwrap();
        assert_eq!(d.reason, "NoQuorum");
        assert_eq!(s.members.unready, ["ex-m1", "ex-m2"]);
        assert!(!s.reason.is_empty());
    }

    #[test]
    fn invalid_spec_sets_spec_valid_false_and_keeps_a_running_phase() {
        let mut o = obs(3, &[true, true, true]);
        let prev = compute(&o, &plan(&o), &Default::default(), None, "t");
        o.desired = validate("ex", &EtcdClusterSpec { size: 0, version: "3.5.1".into(), ..Default::default() });
        let s = compute(&o, &plan(&o), &prev, None, "t2");
        let c = condition::find(&s.conditions, SPEC_VALID).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "InvalidSpec"));
        assert!(c.message.contains("spec.size 0"));
        assert_eq!(s.phase, PHASE_RUNNING);
        assert_eq!(changed(&prev.conditions, &s.conditions).len(), 1);
    }

    #[test]
    fn scaling_condition_uses_the_coreos_message() {
        let o = obs(5, &[true, true, true]);
        let s = compute(&o, &plan(&o), &Default::default(), None, "t");
        let c = condition::find(&s.conditions, SCALING).unwrap();
        assert_eq!(c.message, "Current cluster size: 3, desired cluster size: 5");
    }

    #[test]
    fn every_status_field_is_serialized_so_a_merge_patch_clears_it() {
        let v = serde_json::to_value(EtcdClusterStatus::default()).unwrap();
        assert_eq!(v["members"]["learners"], serde_json::json!([]));
        assert_eq!(v["leader"], serde_json::json!(""));
        assert_eq!(v["targetVersion"], serde_json::json!(""));
    }

    #[test]
    fn a_bootstrapping_cluster_is_unavailable_without_a_warning() {
        let mut o = obs(3, &[]);
        o.etcd = None;
        o.ever_bootstrapped = false;
        let s = compute(&o, &plan(&o), &Default::default(), None, "t");
        let a = condition::find(&s.conditions, AVAILABLE).unwrap();
        assert_eq!(a.reason, "Bootstrapping");
        assert!(!is_warning(a));
    }

    #[test]
    fn data_loss_fails_the_phase() {
        // A cluster that formed, with no pod and no volume left: planned, not hand-made.
        let mut o = obs(3, &[]);
        o.etcd = None;
        let step = plan(&o);
        assert!(matches!(&step, Step::Wait(Wait { reason: WaitReason::DataLost, .. })), "{step:?}");
        let s = compute(&o, &step, &Default::default(), None, "t");
        assert_eq!(s.phase, PHASE_FAILED);
        let d = condition::find(&s.conditions, DEGRADED).unwrap();
        assert_eq!(d.reason, "DataLost");
        assert!(!d.message.contains("delete and re-create"), "never advise deleting: {}", d.message);
    }

    /// The condition comes from the recorded last recovery every time, so a status computed
    /// from a stale cached object (without the condition) cannot drop it.
    #[test]
    fn a_finished_recovery_is_reported_from_its_record_whatever_the_previous_status() {
        let mut o = obs(3, &[true, true, true]);
        o.last_recovery = Some(crate::planner::recovery::Record {
            member: "ex-m0".into(),
            policy: "FromSurvivor".into(),
            from: "surviving member ex-old".into(),
            revision: 81,
            lost: 2,
            voters: 3,
        });
        let s = compute(&o, &plan(&o), &Default::default(), None, "t");
        let c = condition::find(&s.conditions, RECOVERED_FROM_QUORUM_LOSS).unwrap();
        assert_eq!((c.status.as_str(), c.reason.as_str()), ("True", "FromSurvivor"));
        assert!(c.message.contains("2 of 3") && c.message.contains("revision 81") && c.message.contains("were lost"));
    }

    #[test]
    fn a_refused_edit_says_the_cluster_runs_under_the_last_valid_spec() {
        let mut o = obs(3, &[true, true, true]);
        o.spec_refused = Some(vec!["spec.size 0 is out of range".into()]);
        let s = compute(&o, &plan(&o), &Default::default(), None, "t");
        let c = condition::find(&s.conditions, SPEC_VALID).unwrap();
        assert_eq!(c.status, "False");
        assert!(c.message.contains("spec.size 0") && c.message.contains("last valid spec"), "{}", c.message);
        assert_eq!(s.phase, PHASE_RUNNING);
    }
}

//! Members whose pod cannot run (an image that cannot be pulled, a crash loop, a stuck init
//! container): what is done about them, and what they hold up. A failing member holds up only
//! what needs it (an upgrade, a rollout, an authentication or TLS step, a removal that would
//! need its vote), never the healing of another member while the others hold a quorum without
//! it.
//!
//! - A failing pod made from another pod spec than the current one (the user fixed the spec)
//!   is made again from the current one, healthy or not: a PVC member restarts on its volume
//!   ([`remake_on_volume`], before the quorum gate: it changes no membership and is down
//!   already); an emptyDir member is replaced (removed while the others hold a quorum, then a
//!   learner joins). One at a time, and none while a pod made from the current spec fails too
//!   (the fix did not help).
//! - A voter crash-looping under the current spec ([`crash_looping`]: at least
//!   [`CRASH_LOOP_RESTARTS`] restarts and [`CRASH_LOOP_SECS`] not Ready; a member that crashed
//!   once is not one) is replaced when its data is in an emptyDir (the others hold everything
//!   etcd acknowledged). On a PVC it is kept and reported: a member that does not answer cannot
//!   be shown to be behind the others, the crash need not be its data's fault (a new member
//!   would crash alike), and replacing it deletes the volume. The user allows it by deleting
//!   the PVC: a failing member whose volume is being deleted is replaced like an emptyDir one.
//! - Every removal is one membership change (no learner, every other voter healthy or
//!   failing) that leaves a quorum of healthy voters.

use super::{Removal, Step, WaitReason, wait};
use crate::observed::{AlarmKind, EtcdState, MemberState, Observed, PodState};
use crate::validation::Desired;

/// Restarts of a pod's containers before it may count as crash-looping.
pub const CRASH_LOOP_RESTARTS: i32 = 3;
/// Seconds without being Ready before a pod may count as crash-looping.
pub const CRASH_LOOP_SECS: i64 = 120;

/// The pod cannot run, has restarted [`CRASH_LOOP_RESTARTS`] times and has not been Ready for
/// [`CRASH_LOOP_SECS`].
pub(crate) fn crash_looping(p: &PodState) -> bool {
    p.problem.is_some()
        && !p.ready
        && p.restarts >= CRASH_LOOP_RESTARTS
        && p.unready_secs.is_some_and(|s| s >= CRASH_LOOP_SECS)
}

/// The pod carries the hash of another pod spec than the current one (pods made before the
/// hash existed carry none and are not judged).
fn from_earlier_spec(o: &Observed, d: &Desired, p: &PodState) -> bool {
    p.spec_hash.as_ref().is_some_and(|h| *h != d.pod_hash_for(super::root_data(o, &p.name)))
}

fn from_current_spec(o: &Observed, d: &Desired, p: &PodState) -> bool {
    p.spec_hash.as_ref().is_some_and(|h| *h == d.pod_hash_for(super::root_data(o, &p.name)))
}

/// A voter whose pod cannot run and that etcd does not count as healthy.
pub(super) fn is_failing(o: &Observed, m: &MemberState) -> bool {
    !m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| p.problem.is_some() && !p.deleting)
}

/// Its data outlives the pod: a PVC that is not being deleted. A claim the pod mounts but the
/// cache does not show (no labels or owner of the cluster, or not seen yet) counts as kept.
fn keeps_data(o: &Observed, p: &PodState) -> bool {
    p.uses_pvc && o.pvcs.get(&p.name).is_none_or(|v| !v.deleting)
}

/// One failing member is made again at a time: none while another member pod is going, or
/// while a pod made from the current spec cannot run either.
fn one_at_a_time(o: &Observed, d: &Desired) -> bool {
    let member = |p: &PodState| o.etcd.as_ref().is_none_or(|e| e.member_for_pod(&p.name).is_some());
    !o.pods.values().filter(|p| member(p)).any(|p| p.deleting || (p.problem.is_some() && from_current_spec(o, d, p)))
}

/// A PVC member whose pod cannot run and was made from an earlier spec: its pod is deleted, the
/// volume kept, and `volumes::restart` makes it again from the current spec. Planned before
/// the quorum gate (a restart on its own volume is how a quorum comes back), never under a
/// CORRUPT alarm, never before the cluster formed (`membership::forming` starts such a
/// bootstrap over).
pub(super) fn remake_on_volume(o: &Observed, d: &Desired) -> Option<Step> {
    if !o.ever_bootstrapped || o.etcd.as_ref().is_some_and(|e| e.has_alarm(AlarmKind::Corrupt)) {
        return None;
    }
    // Down already: etcd knows it as a member that does not answer, or no member answers.
    let down = |pod: &str| match &o.etcd {
        None => true,
        Some(e) => e.member_for_pod(pod).is_some_and(|m| !m.is_healthy()),
    };
    let p = o.pods.values().find(|p| {
        p.problem.is_some()
            && !p.deleting
            && p.volume_refused.is_none()
            && keeps_data(o, p)
            && from_earlier_spec(o, d, p)
            && down(&p.name)
    })?;
    if !one_at_a_time(o, d) {
        return None;
    }
    let (reason, _) = p.problem.as_ref()?;
    Some(Step::DeletePod {
        pod: p.name.clone(),
        why: format!(
            "it cannot run ({reason}) and was made from an earlier spec: the member restarts on its volume with the current one"
        ),
        keep_volume: true,
    })
}

/// With a quorum: a failing learner made under a spec since changed, or started with a stale
/// `--initial-cluster`, is dropped (it holds no unique data); a failed upgrade is rolled back
/// or reported (`upgrade::failing_member`); a failing voter that holds nothing to keep is
/// replaced (removed here, a learner joins after). `None`: the failing members hold up only
/// what needs them (`beside`).
pub(super) fn act_on(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize) -> Option<Step> {
    let failing: Vec<(&MemberState, &PodState)> = etcd
        .members
        .iter()
        .filter_map(|m| Some((m, o.pods.get(&m.pod)?)))
        .filter(|(_, p)| p.problem.is_some() && !p.deleting)
        .collect();
    for (m, p) in &failing {
        let Some((reason, msg)) = p.problem.as_ref() else { continue };
        if m.is_learner {
            if let Some(step) = failing_learner(o, d, etcd, m, p, reason) {
                return Some(step);
            }
            continue;
        }
        if let Some(step) = super::upgrade::failing_member(o, d, &m.pod, reason, msg) {
            return Some(step);
        }
    }
    // One membership change at a time: no learner, every other voter healthy or failing.
    let settled =
        etcd.learners().next().is_none() && etcd.voters().all(|m| super::membership::healthy(o, m) || is_failing(o, m));
    if !settled {
        return None;
    }
    let voters = etcd.voters().count();
    // (Never the one a member still names leader: that answer is about to change.)
    let replaceable = |m: &MemberState, p: &PodState| {
        !m.is_learner && !m.is_healthy() && Some(m.id) != etcd.leader && !keeps_data(o, p)
    };
    for (m, p) in failing.iter().filter(|(m, p)| replaceable(m, p)) {
        let (reason, _) = p.problem.as_ref()?;
        // (A PVC member here is one whose volume the user is deleting: that is the reason.)
        let (why, cause) = if p.uses_pvc {
            (
                format!("it cannot run ({reason}) and its volume is being deleted; a new member replaces it"),
                Removal::VolumeLost,
            )
        } else if from_earlier_spec(o, d, p) {
            (
                format!("it cannot run ({reason}) and was made from an earlier spec; a new member replaces it"),
                Removal::CannotRun,
            )
        } else if crash_looping(p) {
            (
                format!(
                    "it has been crash-looping ({reason}, {} restarts, not ready for {}s); a new member replaces it",
                    p.restarts,
                    p.unready_secs.unwrap_or_default()
                ),
                Removal::CannotRun,
            )
        } else {
            continue;
        };
        // It does not answer: the healthy voters stay as they are, the quorum needed shrinks.
        if healthy_voters >= EtcdState::quorum_of(voters - 1) {
            return Some(Step::RemoveMember { id: m.id, pod: m.pod.clone(), why, cause });
        }
    }
    None
}

/// Every other voter is healthy, `failing` are not: only what does not need them. A member
/// missing from the spec's size joins (as a learner, promoted only while a quorum holds with
/// it); a scale-down removes a failing voter first; anything else (upgrades, rollouts,
/// authentication, TLS, defragmentation) waits.
pub(super) fn beside(
    o: &Observed,
    d: &Desired,
    etcd: &EtcdState,
    failing: &[&MemberState],
    healthy_voters: usize,
) -> Step {
    let (members, voters) = (etcd.members.len(), etcd.voters().count());
    if members < d.size && healthy_voters + 1 >= EtcdState::quorum_of(voters + 1) {
        return super::membership::new_learner(o, d, etcd);
    }
    if members > d.size
        && let Some(m) = failing.iter().find(|m| Some(m.id) != etcd.leader)
        && healthy_voters >= EtcdState::quorum_of(voters - 1)
    {
        return Step::RemoveMember {
            id: m.id,
            pod: m.pod.clone(),
            why: format!("scaling down to {} members: a member that cannot run goes first", voters - 1),
            cause: Removal::ScaleDown,
        };
    }
    report(o, failing)
}

/// `MemberFailing`, with what happens to the member next and what the user can do.
fn report(o: &Observed, failing: &[&MemberState]) -> Step {
    let Some((m, p)) = failing.first().and_then(|m| Some((m, o.pods.get(&m.pod)?))) else {
        return wait(WaitReason::MemberFailing, "a member pod cannot run");
    };
    let (reason, msg) = p.problem.clone().unwrap_or_default();
    let next = match o.pvcs.get(&m.pod).filter(|_| keeps_data(o, p)) {
        Some(v) => format!(
            "; its volume {} is kept: a fixed spec makes its pod again; if its data is broken, deleting PVC {} has a new member replace it",
            v.name, v.name
        ),
        None => format!(
            "; a new member replaces it once it has restarted {CRASH_LOOP_RESTARTS} times and not been ready for {CRASH_LOOP_SECS}s, or once the spec changes"
        ),
    };
    wait(
        WaitReason::MemberFailing,
        format!("member pod {} cannot run: {reason}: {msg}{next}; changes that need every member wait", m.pod),
    )
}

/// A learner whose pod cannot run (`reason`) is dropped when it was made under a spec that has
/// changed since, or started with an `--initial-cluster` that is not the membership any more:
/// it holds no unique data, and is added again.
fn failing_learner(
    o: &Observed,
    d: &Desired,
    etcd: &EtcdState,
    l: &MemberState,
    p: &PodState,
    reason: &str,
) -> Option<Step> {
    let image_now = crate::validation::image_for(&d.repository, &super::version_for_new_member(o, d));
    if super::membership::made_under_another_spec(o, p, &image_now, d) {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!("learner cannot start ({reason}) and the spec changed since it was added"),
            cause: Removal::CannotRun,
        });
    }
    if !l.started() && stale_initial_cluster(p, etcd) {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!(
                "learner cannot start ({reason}): its --initial-cluster no longer matches the membership; it is added again"
            ),
            cause: Removal::CannotRun,
        });
    }
    None
}

/// A learner's pod was made with an `--initial-cluster` that is not the membership any more
/// (a member was replaced in between): etcd refuses to start it.
fn stale_initial_cluster(p: &PodState, etcd: &EtcdState) -> bool {
    if p.initial_cluster.is_empty() {
        return false;
    }
    let mut now: Vec<&str> = etcd.members.iter().map(|m| m.pod.as_str()).collect();
    let mut then: Vec<&str> = p.initial_cluster.iter().map(String::as_str).collect();
    now.sort_unstable();
    then.sort_unstable();
    now != then
}

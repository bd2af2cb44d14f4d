//! Membership decisions: bootstrap, heal, learners, scale up and down.

use super::{NewMember, Step, WaitReason, initial_cluster_of, peer_of, version_for_new_member, wait};
use crate::naming;
use crate::observed::{EtcdState, MemberState, Observed, PodState};
use crate::validation::Desired;

/// How long a pod that no member claims is left alone before it is deleted. The member list is
/// not linearizable, so a member added a moment ago may be missing from it.
pub const ORPHAN_GRACE_SECS: i64 = 60;

/// A learner is promoted when its raft index is at least this share of the leader's (etcd
/// itself refuses promotion below 90%).
const LEARNER_READY_PERCENT: u64 = 90;

/// How long a bootstrap member pod may stay Pending or unable to run before the bootstrap is
/// started over (only for a bootstrap that never formed: it holds no data).
pub const BOOTSTRAP_RETRY_SECS: i64 = 120;

/// No member answered: create a new cluster, finish or repair one that is forming, or report.
/// Members with volumes were restarted already (`volumes::restart`).
pub(super) fn without_etcd(o: &Observed, d: &Desired) -> Step {
    if o.pods.is_empty() && o.pvcs.is_empty() {
        if o.ever_bootstrapped {
            return super::recovery::all_lost(o, d);
        }
        return bootstrap(o, d);
    }
    // etcd answered, refusing the login: the members run (a restored cluster, too, before its
    // cluster ID was ever recorded); nothing is repaired or started over blind.
    if let Some(step) = super::auth::refused(o) {
        return step;
    }
    if !o.ever_bootstrapped {
        return forming(o, d);
    }
    if super::recovery::nothing_left(o) {
        return super::recovery::all_lost(o, d);
    }
    if let Some((pod, (reason, msg))) = first_problem(o.pods.values()) {
        if let Some(step) = super::upgrade::failing_member(o, d, pod, reason, msg) {
            return step;
        }
        return wait(WaitReason::MemberFailing, format!("member pod {pod} cannot run: {reason}: {msg}"));
    }
    if let Some(step) = stuck_terminating(o) {
        return step;
    }
    let err = o.etcd_error.as_deref().unwrap_or("no member pod has an address");
    wait(
        WaitReason::NoQuorum,
        format!(
            "no etcd member answers ({err}); members with data are kept and restarted on their volumes; no membership change until a quorum is back"
        ),
    )
}

/// A cluster that has not formed yet (no cluster ID was ever recorded), so it holds no data:
/// its bootstrap is finished, repaired, or started over.
fn forming(o: &Observed, d: &Desired) -> Step {
    // A bootstrap member whose pod was never created (or vanished with its emptyDir): create it
    // as the bootstrap would have. (Volume members are restarted by `volumes::restart`.)
    let peers = super::volumes::bootstrap_peers(o, d);
    if let Some((name, _)) = peers.iter().find(|(n, _)| !o.pods.contains_key(n) && !o.pvcs.contains_key(n))
        && o.pods.values().all(|p| p.bootstrap)
    {
        return Step::CreatePod(bootstrap_member(name.clone(), peers.clone(), d));
    }
    // Dead bootstrap pods, and bootstrap pods that cannot run under a spec that has changed
    // since (a corrected image, resources, ...): cleared, so a fresh bootstrap can run.
    let image_now = d.image();
    let retry = |p: &&PodState| {
        p.bootstrap
            && !p.deleting
            && (p.is_dead() || (p.image != image_now && (p.problem.is_some() || p.age_secs >= BOOTSTRAP_RETRY_SECS)))
    };
    if let Some(p) = o.pods.values().find(retry) {
        let why = if p.is_dead() {
            format!("bootstrap pod ended ({}) before the cluster formed", p.phase)
        } else {
            "bootstrap pod cannot run and the spec changed since; the bootstrap starts over".to_string()
        };
        return Step::DeletePod { pod: p.name.clone(), why, keep_volume: false };
    }
    if let Some((pod, (reason, msg))) = first_problem(o.pods.values()) {
        return wait(WaitReason::MemberFailing, format!("bootstrap member pod {pod} cannot run: {reason}: {msg}"));
    }
    wait(
        WaitReason::Bootstrapping,
        format!("waiting for the {} bootstrap members to form a cluster", o.pods.len().max(peers.len())),
    )
}

fn bootstrap(o: &Observed, d: &Desired) -> Step {
    // A restore from a PVC starts one member: every restored member mounts the backup's claim,
    // and a ReadWriteOnce claim attaches to one node only (several members on several nodes
    // would wait on Multi-Attach forever). The others then join as learners and get the data
    // from the first, as in any scale-up.
    let from_claim = d.restore.as_ref().is_some_and(|r| r.location.kind == crate::backup::location::Kind::Pvc);
    let size = if from_claim { 1 } else { d.size };
    let names: Vec<String> = (0..size)
        .map(|i| naming::member_name(&o.name, &format!("{}{}", &o.new_member_suffix[..naming::SUFFIX_LEN - 1], i)))
        .collect();
    let initial: Vec<_> = names.iter().map(|n| peer_of(o, d, n)).collect();
    // The member that reads a claim marked as root's runs as root (`backup::volume_owner`).
    let root_data = from_claim && d.restore.as_ref().is_some_and(|r| r.root_volume);
    Step::Bootstrap(
        names.into_iter().map(|name| NewMember { root_data, ..bootstrap_member(name, initial.clone(), d) }).collect(),
    )
}

/// A member of a new cluster's static bootstrap.
fn bootstrap_member(name: String, initial_cluster: Vec<(String, String)>, d: &Desired) -> NewMember {
    NewMember {
        name,
        initial_cluster,
        existing: false,
        version: d.version.clone(),
        pvc: d.pod.persistent_volume_claim_spec.is_some(),
        bootstrap: true,
        restart: false,
        seed: None,
        root_data: false,
    }
}

/// A member pod that has been terminating for long (its node stopped answering): reported, with
/// what the user can do. Its volume stays attached to it until it is gone.
fn stuck_terminating(o: &Observed) -> Option<Step> {
    let p = o.pods.values().find(|p| p.deleting_secs.is_some_and(|s| s >= super::volumes::STUCK_TERMINATING_SECS))?;
    let keep = if p.uses_pvc { "its volume is kept and the member restarts on it once the pod is gone" } else { "" };
    Some(wait(
        WaitReason::PodStuckTerminating,
        format!(
            "member pod {} has been terminating for {}s (its node may be down); {keep}{}if the node is gone for good, `kubectl delete pod {} --force --grace-period=0` lets it go",
            p.name,
            p.deleting_secs.unwrap_or_default(),
            if keep.is_empty() { "" } else { "; " },
            p.name
        ),
    ))
}

/// The pod was made from another spec than the current one: another image, or other pod
/// settings (resources, env, ...; the pod-spec hash it carries). Pods made before the hash
/// existed are judged by their image alone.
fn made_under_another_spec(o: &Observed, p: &PodState, image_now: &str, d: &Desired) -> bool {
    let hash_now = d.pod_hash_for(super::root_data(o, &p.name));
    p.image != image_now || p.spec_hash.as_ref().is_some_and(|h| *h != hash_now)
}

fn first_problem<'a>(pods: impl Iterator<Item = &'a PodState>) -> Option<(&'a str, &'a (String, String))> {
    pods.filter(|p| !p.deleting).find_map(|p| p.problem.as_ref().map(|pr| (p.name.as_str(), pr)))
}

/// A voter counts as healthy when etcd says so and its pod is not on its way out.
fn healthy(o: &Observed, m: &MemberState) -> bool {
    m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting && !p.is_dead())
}

/// etcd answered: heal, then reconcile size, one step at a time.
pub(super) fn with_etcd(o: &Observed, d: &Desired, etcd: &EtcdState) -> Step {
    let voters = etcd.voters().count();
    let healthy_voters = etcd.voters().filter(|m| healthy(o, m)).count();
    let quorum = EtcdState::quorum_of(voters);
    if healthy_voters < quorum {
        return super::recovery::no_quorum(o, d, etcd, healthy_voters);
    }
    // A learner is finished first under NOSPACE (started, promoted or dropped: membership
    // changes, not writes of keys). It answers neither alarm nor defragment calls, and one that
    // replayed a history past the quota keeps raising the alarm until it votes and is
    // defragmented. One still catching up does not hold the voters' recovery back.
    if etcd.has_alarm(crate::observed::AlarmKind::NoSpace)
        && !etcd.has_alarm(crate::observed::AlarmKind::Corrupt)
        && let Some(step) = learner_step(o, d, etcd, healthy_voters, voters).filter(|s| !matches!(s, Step::Wait(_)))
    {
        return step;
    }
    // An alarm is the cluster's, not an unhealthy member: CORRUPT stops everything, NOSPACE is
    // recovered first.
    if let Some(step) = super::maintenance::alarms(o, d, etcd) {
        return step;
    }
    // A volume's peer-URL record that got ahead of the membership is set back to it, while
    // etcd answers: a member restarted without a quorum must listen as its peers dial it.
    if let Some(step) = super::tls_transition::record_of_membership(o, d, etcd).filter(|_| etcd.leader.is_some()) {
        return step;
    }

    // A member whose volume failed its data check holds no data of its own: it is replaced
    // (removed here; a learner takes its place), never restarted empty under its old ID.
    for m in &etcd.members {
        if let Some(why) = o.pods.get(&m.pod).and_then(|p| p.volume_refused.as_ref()) {
            return Step::RemoveMember {
                id: m.id,
                pod: m.pod.clone(),
                why: format!("its volume does not hold its data ({why}); a new member replaces it"),
            };
        }
    }

    // A pod that cannot run is surfaced; no other member is touched meanwhile. A learner is the
    // exception: it holds no unique data, so one that cannot start is removed to let a fixed spec
    // try again.
    // Only members' pods: a failing pod of no member is the orphan logic's to clear, never a
    // reason to stop (the old pods after a recovery, a restarted volume of a removed member).
    let member_pods = o.pods.values().filter(|p| etcd.member_for_pod(&p.name).is_some());
    if let Some((pod, (reason, msg))) = first_problem(member_pods) {
        if let Some(m) = etcd.member_for_pod(pod).filter(|m| m.is_learner) {
            let image_now = crate::validation::image_for(&d.repository, &version_for_new_member(o, d));
            if o.pods.get(pod).is_some_and(|p| made_under_another_spec(o, p, &image_now, d)) {
                return Step::RemoveMember {
                    id: m.id,
                    pod: pod.to_string(),
                    why: format!("learner cannot start ({reason}) and the spec changed since it was added"),
                };
            }
            if !m.started() && o.pods.get(pod).is_some_and(|p| stale_initial_cluster(p, etcd)) {
                return Step::RemoveMember {
                    id: m.id,
                    pod: pod.to_string(),
                    why: format!(
                        "learner cannot start ({reason}): its --initial-cluster no longer matches the membership; it is added again"
                    ),
                };
            }
        }
        if let Some(step) = super::upgrade::failing_member(o, d, pod, reason, msg) {
            return step;
        }
        return wait(WaitReason::MemberFailing, format!("member pod {pod} cannot run: {reason}: {msg}"));
    }

    if let Some(step) = heal(o, etcd) {
        return step;
    }
    if let Some(step) = learner_step(o, d, etcd, healthy_voters, voters) {
        return step;
    }
    // With a single healthy voter (right after a quorum-loss recovery) the pods of the old
    // cluster stay until a second copy of the data exists.
    if (healthy_voters >= 2 || d.size < 2)
        && let Some(step) = orphan_pods(o, etcd)
    {
        return step;
    }
    resize(o, d, etcd, healthy_voters, voters)
}

/// Members whose pod is gone or dead.
fn heal(o: &Observed, etcd: &EtcdState) -> Option<Step> {
    // A member on an emptyDir pod that is being deleted has lost its data already: replace it
    // now rather than after the pod object is gone (which can take long, or never end on a dead
    // node). A PVC-backed member is waited for: it restarts on its volume.
    for m in etcd.voters() {
        if let Some(p) = o.pods.get(&m.pod).filter(|p| p.deleting && !p.uses_pvc) {
            return Some(Step::RemoveMember {
                id: m.id,
                pod: m.pod.clone(),
                why: format!("its pod {} is being deleted and its data with it", p.name),
            });
        }
    }
    if let Some(step) = stuck_terminating(o) {
        return Some(step);
    }
    if let Some(p) = o.pods.values().find(|p| p.deleting && etcd.member_for_pod(&p.name).is_some()) {
        return Some(wait(WaitReason::PodTerminating, format!("waiting for member pod {} to terminate", p.name)));
    }
    for m in etcd.voters() {
        // Members with a volume are restarted on it by `volumes::restart`, before any of this.
        let pvc = o.pvcs.get(&m.pod).is_some_and(|v| !v.deleting);
        match o.pods.get(&m.pod) {
            None if pvc && m.started() => continue,
            None => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: "its pod is gone and its data with it".into(),
                });
            }
            Some(p) if p.is_dead() && pvc => continue,
            Some(p) if p.is_dead() => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: format!("its pod ended ({}) and its data with it", p.phase),
                });
            }
            Some(_) => {}
        }
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

/// The (at most one) learner: start it, promote it, or drop it.
fn learner_step(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Option<Step> {
    let l = etcd.learners().next()?;
    if etcd.members.len() > d.size && !super::rollout::replacing(o, d, etcd) {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!("scaling down to {} members: the learner goes first", d.size),
        });
    }
    let Some(pod) = o.pods.get(&l.pod) else {
        if l.started() {
            return Some(Step::RemoveMember {
                id: l.id,
                pod: l.pod.clone(),
                why: "learner lost its pod after it started".into(),
            });
        }
        return Some(Step::CreatePod(NewMember::joining(
            l.pod.clone(),
            initial_cluster_of(etcd),
            version_for_new_member(o, d),
            d.pod.persistent_volume_claim_spec.is_some(),
        )));
    };
    if pod.is_dead() {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!("learner pod ended ({})", pod.phase),
        });
    }
    let leader_index = etcd.leader_member().and_then(|m| m.status.as_ref()).map(|s| s.raft_index);
    let learner_index = l.status.as_ref().filter(|s| s.leader != 0).map(|s| s.raft_index);
    let caught_up = match (leader_index, learner_index) {
        (Some(li), Some(ci)) => ci * 100 >= li * LEARNER_READY_PERCENT,
        _ => false,
    };
    if !caught_up {
        let progress = match (leader_index, learner_index) {
            (Some(li), Some(ci)) => format!("raft index {ci} of the leader's {li}"),
            _ => "not answering yet".into(),
        };
        return Some(wait(WaitReason::LearnerCatchingUp, format!("learner {} is catching up ({progress})", l.pod)));
    }
    // After promotion there is one more voter, and it is healthy.
    if healthy_voters + 1 < EtcdState::quorum_of(voters + 1) {
        return Some(wait(
            WaitReason::WouldLoseQuorum,
            format!("promoting {} would leave too few healthy voters", l.pod),
        ));
    }
    Some(Step::Promote { id: l.id, pod: l.pod.clone() })
}

/// Pods that belong to no member, old enough that the member list cannot simply be lagging, or
/// whose etcd answered as a member of another cluster.
fn orphan_pods(o: &Observed, etcd: &EtcdState) -> Option<Step> {
    o.pods
        .values()
        .filter(|p| !p.deleting && etcd.member_for_pod(&p.name).is_none())
        .find(|p| p.age_secs >= ORPHAN_GRACE_SECS || p.is_dead() || etcd.foreign.contains(&p.name))
        .map(|p| Step::DeletePod {
            pod: p.name.clone(),
            why: "it belongs to no etcd member".into(),
            keep_volume: false,
        })
}

fn resize(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Step {
    let members = etcd.members.len();
    if let Some(step) = super::upgrade::in_flight(o, d, etcd) {
        return step;
    }
    // Every voter must be healthy before the next membership change.
    if let Some(m) = etcd.voters().find(|m| !healthy(o, m)) {
        let what = if m.started() { "is not healthy yet" } else { "has not started yet" };
        return wait(WaitReason::MemberStarting, format!("member {} {what}; the next change waits for it", m.pod));
    }
    // A member whose peer URL just moved listens on the other scheme: made again before
    // anything else restarts, adds or removes a member.
    if let Some(step) = super::tls_transition::made_again(o, d, etcd) {
        return step;
    }
    // Authentication before the size: a new cluster is secured before it grows.
    if let Some(step) = super::auth::next(o, d, etcd) {
        return step;
    }
    if members < d.size {
        let name = naming::member_name(&o.name, &o.new_member_suffix);
        let mut initial = initial_cluster_of(etcd);
        initial.push(peer_of(o, d, &name));
        return Step::AddLearner(NewMember::joining(
            name,
            initial,
            version_for_new_member(o, d),
            d.pod.persistent_volume_claim_spec.is_some(),
        ));
    }
    if members > d.size {
        if let Some(step) = super::rollout::surplus(o, d, etcd) {
            return step;
        }
        return scale_down(o, etcd, healthy_voters, voters);
    }
    if let Some(step) = super::upgrade::next(o, d, etcd) {
        return step;
    }
    if let Some(step) = super::tls_transition::next(o, d, etcd) {
        return step;
    }
    if let Some(step) = super::rollout::next(o, d, etcd) {
        return step;
    }
    if let Some(step) = super::maintenance::defragment(o, d, etcd) {
        return step;
    }
    wait(WaitReason::Stable, format!("{members} members healthy"))
}

/// Remove one voter: never the leader while another can go; the newest-named first, so that
/// the order is predictable.
fn scale_down(o: &Observed, etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Step {
    let victim = etcd.voters().filter(|m| Some(m.id) != etcd.leader).max_by(|a, b| a.pod.cmp(&b.pod));
    let Some(v) = victim else {
        return wait(WaitReason::WouldLoseQuorum, "the only member left to remove is the leader");
    };
    let after = healthy_voters - usize::from(v.is_healthy());
    if after < EtcdState::quorum_of(voters - 1) {
        return wait(
            WaitReason::WouldLoseQuorum,
            format!("removing {} would leave {after} healthy of {} voters", v.pod, voters - 1),
        );
    }
    if let Some(step) = super::drained_first(o, &v.pod) {
        return step;
    }
    Step::RemoveMember { id: v.id, pod: v.pod.clone(), why: format!("scaling down to {} members", voters - 1) }
}

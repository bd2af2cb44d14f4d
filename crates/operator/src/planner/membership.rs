//! Membership decisions: bootstrap, heal, learners, scale up and down.

use super::{NewMember, Removal, Step, WaitReason, initial_cluster_of, peer_of, version_for_new_member, wait};
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
    if let Some(step) = stuck_terminating(o, None) {
        return step;
    }
    // Ready members the operator's own calls did not get through to: its sight is lost.
    if let Some(step) = super::unreachable::without_etcd(o) {
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
    // since (a corrected image, etcdEnv, resources, ...: the image or the pod-spec hash):
    // cleared, so a fresh bootstrap can run.
    let image_now = d.image();
    let retry = |p: &&PodState| {
        p.bootstrap
            && !p.deleting
            && (p.is_dead()
                || (made_under_another_spec(o, p, &image_now, d)
                    && (p.problem.is_some() || p.age_secs >= BOOTSTRAP_RETRY_SECS)))
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
        claim: None,
        acknowledged_index: 0,
        fenced: false,
    }
}

/// A member pod that has been terminating for long (its node stopped answering): reported, with
/// what the user can do. Its volume stays attached to it until it is gone. With etcd's member
/// list (`etcd`), only a member's pod: the pod of a member removed already (replaced after its
/// node was lost) holds nothing up while it waits for its node.
fn stuck_terminating(o: &Observed, etcd: Option<&EtcdState>) -> Option<Step> {
    let member = |p: &PodState| etcd.is_none_or(|e| e.member_for_pod(&p.name).is_some());
    let p = o
        .pods
        .values()
        .find(|p| member(p) && p.deleting_secs.is_some_and(|s| s >= super::volumes::STUCK_TERMINATING_SECS))?;
    let keep = if p.uses_pvc { "its volume is kept and the member restarts on it once the pod is gone" } else { "" };
    Some(wait(
        WaitReason::PodStuckTerminating,
        format!(
            "member pod {} has been terminating for {}s (its node may be down); {keep}{}if the node is gone for good, taint it `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute` (Kubernetes then deletes its pods and detaches their volumes) or delete the Node; `kubectl delete pod {} --force --grace-period=0` alone does not show that it stopped",
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
pub(super) fn made_under_another_spec(o: &Observed, p: &PodState, image_now: &str, d: &Desired) -> bool {
    let hash_now = d.pod_hash_for(super::root_data(o, &p.name));
    p.image != image_now || p.spec_hash.as_ref().is_some_and(|h| *h != hash_now)
}

fn first_problem<'a>(pods: impl Iterator<Item = &'a PodState>) -> Option<(&'a str, &'a (String, String))> {
    pods.filter(|p| !p.deleting).find_map(|p| p.problem.as_ref().map(|pr| (p.name.as_str(), pr)))
}

/// A voter counts as healthy when etcd says so and its pod is not on its way out and can run
/// (a pod whose container cannot run is not one etcd's answer can be trusted for).
pub(super) fn healthy(o: &Observed, m: &MemberState) -> bool {
    m.is_healthy() && o.pods.get(&m.pod).is_some_and(|p| !p.deleting && !p.is_dead() && p.problem.is_none())
}

/// A new member joins as a learner (scaling up, or replacing one that left).
pub(super) fn new_learner(o: &Observed, d: &Desired, etcd: &EtcdState) -> Step {
    let name = naming::member_name(&o.name, &o.new_member_suffix);
    let mut initial = initial_cluster_of(etcd);
    initial.push(peer_of(o, d, &name));
    Step::AddLearner(NewMember::joining(
        name,
        initial,
        version_for_new_member(o, d),
        d.pod.persistent_volume_claim_spec.is_some(),
    ))
}

/// etcd answered: heal, then reconcile size, one step at a time.
pub(super) fn with_etcd(o: &Observed, d: &Desired, etcd: &EtcdState) -> Step {
    let voters = etcd.voters().count();
    let healthy_voters = etcd.voters().filter(|m| healthy(o, m)).count();
    let quorum = EtcdState::quorum_of(voters);
    if healthy_voters < quorum {
        // Members the operator cannot ask whose pods are Ready: its sight is lost, not the quorum.
        if let Some(step) = super::unreachable::with_etcd(o, etcd, healthy_voters) {
            return step;
        }
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
                cause: Removal::VolumeLost,
            };
        }
    }

    // Members whose pod cannot run: dropped, rolled back, replaced or made again where that is
    // safe (`failing`); otherwise they hold up only what needs them, not healing.
    if let Some(step) = super::failing::act_on(o, d, etcd, healthy_voters) {
        return step;
    }

    // Members out of reach on a node that has not been Ready for the grace period.
    if let Some(step) = super::node_loss::replace(o, d, etcd, healthy_voters) {
        return step;
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
                cause: Removal::PodDeleting,
            });
        }
    }
    if let Some(step) = stuck_terminating(o, Some(etcd)) {
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
                    cause: Removal::PodGone,
                });
            }
            Some(p) if p.is_dead() && pvc => continue,
            Some(p) if p.is_dead() => {
                return Some(Step::RemoveMember {
                    id: m.id,
                    pod: m.pod.clone(),
                    why: format!("its pod ended ({}) and its data with it", p.phase),
                    cause: Removal::PodGone,
                });
            }
            Some(_) => {}
        }
    }
    None
}

/// The (at most one) learner: start it, promote it, or drop it.
fn learner_step(o: &Observed, d: &Desired, etcd: &EtcdState, healthy_voters: usize, voters: usize) -> Option<Step> {
    let l = etcd.learners().next()?;
    if etcd.members.len() > d.size && !super::rollout::replacing(o, d, etcd) {
        return Some(Step::RemoveMember {
            id: l.id,
            pod: l.pod.clone(),
            why: format!("scaling down to {} members: the learner goes first", d.size),
            cause: Removal::ScaleDown,
        });
    }
    let Some(pod) = o.pods.get(&l.pod) else {
        if l.started() {
            return Some(Step::RemoveMember {
                id: l.id,
                pod: l.pod.clone(),
                why: "learner lost its pod after it started".into(),
                cause: Removal::LearnerLost,
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
            cause: Removal::PodGone,
        });
    }
    if let Some((reason, msg)) = pod.problem.as_ref().filter(|_| !pod.deleting) {
        return Some(wait(WaitReason::MemberFailing, format!("member pod {} cannot run: {reason}: {msg}", l.pod)));
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
    // Every voter must be healthy before the next membership change; one whose pod cannot run
    // holds up only what needs it (`failing::beside`).
    if let Some(m) = etcd.voters().find(|m| !healthy(o, m) && !super::failing::is_failing(o, m)) {
        if let Some(step) = super::node_loss::waiting_for(o, d, m) {
            return step;
        }
        let what = if m.started() { "is not healthy yet" } else { "has not started yet" };
        return wait(WaitReason::MemberStarting, format!("member {} {what}; the next change waits for it", m.pod));
    }
    let failing: Vec<&MemberState> = etcd.voters().filter(|m| super::failing::is_failing(o, m)).collect();
    if !failing.is_empty() {
        return super::failing::beside(o, d, etcd, &failing, healthy_voters);
    }
    // A member whose peer URL just moved listens on the other scheme: made again before
    // anything else restarts, adds or removes a member.
    if let Some(step) = super::tls_transition::made_again(o, d, etcd) {
        return step;
    }
    // Authentication before the size: a new cluster is secured before it grows. (Not under a
    // spec no valid one stands behind: `no_valid_spec` below.)
    if !o.no_valid_spec
        && let Some(step) = super::auth::next(o, d, etcd)
    {
        return step;
    }
    if members < d.size {
        return new_learner(o, d, etcd);
    }
    if members > d.size {
        if let Some(step) = super::rollout::surplus(o, d, etcd) {
            return step;
        }
        return scale_down(o, etcd, healthy_voters, voters, d.size);
    }
    // A refused spec with no valid one on record: members are replaced and the size kept, but
    // no running member is changed (no upgrade, TLS step, rollout or defragmentation).
    if o.no_valid_spec {
        return wait(
            WaitReason::InvalidSpec,
            format!(
                "{members} members; the spec is refused and no valid spec is on record: no running member is changed until the spec is valid"
            ),
        );
    }
    if let Some(step) = super::upgrade::next_or_rollout(o, d, etcd) {
        return step;
    }
    if let Some(step) = super::tls_transition::next(o, d, etcd) {
        return step;
    }
    if let Some(step) = super::rollout::next(o, d, etcd) {
        return step;
    }
    // A switchover asked for: only here, where nothing else is changing.
    match super::switchover::judge(o) {
        super::switchover::Switchover::Move { from, to, to_pod } => {
            return Step::MoveLeader { from_pod: from, to, to_pod, purpose: super::Purpose::Switchover };
        }
        // Done, not yet taken off: nothing moves leadership away meanwhile (a defragmentation
        // of the new leader would, and the switchover would move it back, and again).
        super::switchover::Switchover::Done(leader) => {
            return wait(WaitReason::Stable, format!("{members} members healthy; {leader} leads as asked"));
        }
        _ => {}
    }
    if let Some(step) = super::maintenance::defragment(o, d, etcd) {
        return step;
    }
    wait(WaitReason::Stable, format!("{members} members healthy"))
}

/// Remove one voter: never the leader while another can go; the newest-named first, so that
/// the order is predictable. Every voter that leaves is drained from the client Service first,
/// all of them at once: draining changes no membership (each stays a voter until its own
/// removal, one at a time), and the members that stay serve the clients meanwhile.
fn scale_down(o: &Observed, etcd: &EtcdState, healthy_voters: usize, voters: usize, size: usize) -> Step {
    let mut leaving: Vec<&MemberState> = etcd.voters().filter(|m| Some(m.id) != etcd.leader).collect();
    // Fenced members first (they serve no client), then the newest-named.
    let fenced = |m: &MemberState| o.pods.get(&m.pod).is_some_and(|p| p.fenced);
    leaving.sort_by(|a, b| fenced(b).cmp(&fenced(a)).then(b.pod.cmp(&a.pod)));
    leaving.truncate(voters.saturating_sub(size).max(1));
    let Some(&v) = leaving.first() else {
        return wait(WaitReason::WouldLoseQuorum, "the only member left to remove is the leader");
    };
    let after = healthy_voters - usize::from(v.is_healthy());
    if after < EtcdState::quorum_of(voters - 1) {
        return wait(
            WaitReason::WouldLoseQuorum,
            format!("removing {} would leave {after} healthy of {} voters", v.pod, voters - 1),
        );
    }
    if let Some(m) = leaving.iter().find(|m| matches!(super::drained_first(o, &m.pod), Some(Step::Drain { .. }))) {
        return Step::Drain { pod: m.pod.clone() };
    }
    if let Some(step) = super::drained_first(o, &v.pod) {
        return step;
    }
    // A healthy voter stopped first stays a voter until its removal: only while the others
    // hold a quorum of the current voters without it.
    let graceful = v.is_healthy() && healthy_voters > EtcdState::quorum_of(voters);
    Step::RemoveMember {
        id: v.id,
        pod: v.pod.clone(),
        why: format!("scaling down to {} members", voters - 1),
        cause: if graceful { Removal::Leave } else { Removal::ScaleDown },
    }
}

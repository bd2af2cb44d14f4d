//! The safety rules every planned step is checked against by the property tests (`proptests`,
//! `tests_tls_transition_generated`), on the Step itself and against etcd's own definition of a
//! quorum (a majority of voters), not against the planner's helpers.

use proptest::prelude::*;

use super::*;
use crate::observed::{AlarmKind, MemberState};
use crate::validation::QuorumLossPolicy;

/// Voters etcd counts as healthy: answering with a leader, on a pod that stays.
fn healthy_voters(o: &Observed) -> Vec<u64> {
    let Some(e) = &o.etcd else { return vec![] };
    e.members
        .iter()
        .filter(|m| !m.is_learner)
        .filter(|m| m.status.as_ref().is_some_and(|s| s.leader != 0 && s.errors.is_empty()))
        .filter(|m| o.pods.get(&m.pod).is_some_and(|p| !p.deleting && p.phase == "Running"))
        .map(|m| m.id)
        .collect()
}

fn voters(o: &Observed) -> Vec<u64> {
    o.etcd.as_ref().map(|e| e.members.iter().filter(|m| !m.is_learner).map(|m| m.id).collect()).unwrap_or_default()
}

/// A majority of `n` voters.
fn majority(n: usize) -> usize {
    n / 2 + 1
}

fn member_of_pod_id(o: &Observed, id: u64) -> Option<&MemberState> {
    o.etcd.as_ref()?.members.iter().find(|m| m.id == id)
}

fn member_of_pod<'a>(o: &'a Observed, pod: &str) -> Option<&'a MemberState> {
    o.etcd.as_ref()?.members.iter().find(|m| m.pod == pod)
}

/// Members whose data is still there (a pod that did not end and whose volume was not refused,
/// or a volume), with the most (applied index, revision) seen of them now or in a look.
fn surviving_data(o: &Observed) -> Vec<(String, Option<(u64, i64)>)> {
    let Some(e) = &o.etcd else { return vec![] };
    e.members
        .iter()
        .filter(|m| !m.name.is_empty())
        .filter(|m| {
            let pod = o.pods.get(&m.pod);
            let refused = pod.is_some_and(|p| p.volume_refused.is_some());
            let alive = pod.is_some_and(|p| p.phase != "Failed" && p.phase != "Succeeded");
            let volume = o.pvcs.get(&m.pod).is_some_and(|v| !v.deleting);
            !refused && (alive || volume)
        })
        .map(|m| {
            let now = m.status.as_ref().map(|s| (s.raft_applied_index, s.revision));
            let looked = o.survivor_looks.members.get(&m.pod).filter(|s| s.id == m.id).map(|s| (s.applied, s.revision));
            let best = match (now, looked) {
                (Some(a), Some(b)) => Some((a.0.max(b.0), a.1.max(b.1))),
                (a, b) => a.or(b),
            };
            (m.pod.clone(), best)
        })
        .collect()
}

pub(super) fn check(o: &Observed, step: &Step) -> Result<(), TestCaseError> {
    let healthy = healthy_voters(o);
    let voters = voters(o);
    let had_quorum = !voters.is_empty() && healthy.len() >= majority(voters.len());
    if o.paused || o.desired.is_err() {
        prop_assert!(matches!(step, Step::Wait(_)), "paused or invalid must change nothing: {step:?}");
    }
    let corrupt = o.etcd.as_ref().is_some_and(|e| e.has_alarm(AlarmKind::Corrupt));
    if corrupt && had_quorum {
        // Only restarting a member that is down on its own volume (no change to anything; as
        // root when its data is root's), or keeping a refused volume (a mark), may still
        // happen; nothing else is touched while a person must look.
        prop_assert!(
            matches!(step, Step::Wait(_) | Step::RestartAsRoot { .. } | Step::RetireVolume { .. })
                || matches!(step, Step::CreatePod(m) if m.restart)
                || matches!(step, Step::DeletePod { pod, keep_volume: true, .. } if o.pods.get(pod).is_some_and(|p| p.is_dead())),
            "acted under a CORRUPT alarm: {step:?}"
        );
    }
    // Out of the client Service long enough for every node's proxy: by the endpoints when they
    // are known (gone from them since the drain for `PROXY_SYNC_MS`, or slow past the bound),
    // else by the fixed time.
    let drained_long = |pod: &str| {
        o.pods.get(pod).is_some_and(|p| {
            let Some(secs) = p.drained_secs().filter(|s| p.serving == Some(false) && *s < DRAIN_STALE_SECS) else {
                return false;
            };
            match &o.client_endpoints {
                None => secs >= DRAIN_SECS,
                Some(ep) => {
                    let since_drain = p.drained_ms.unwrap_or_default() as u64;
                    secs >= DRAIN_MAX_SECS
                        || (!ep.listed.contains(pod)
                            && ep.unlisted_ms.get(pod).is_some_and(|ms| (PROXY_SYNC_MS..=since_drain).contains(ms)))
                }
            }
        })
    };
    match step {
        Step::Bootstrap(_) => {
            prop_assert!(!o.ever_bootstrapped, "bootstrapped a cluster that formed");
            prop_assert!(
                o.pods.is_empty() && o.pvcs.is_empty() && o.retired_pvcs.is_empty(),
                "bootstrapped over existing pods or volumes"
            );
        }
        Step::AddLearner(_) | Step::Promote { .. } | Step::MoveLeader { .. } => {
            prop_assert!(had_quorum, "membership change without a quorum: {step:?}");
            if matches!(step, Step::AddLearner(_)) {
                let learners = o.etcd.as_ref().map(|e| e.members.iter().filter(|m| m.is_learner).count()).unwrap_or(0);
                prop_assert_eq!(learners, 0, "a second learner while one exists");
            }
        }
        Step::RemoveMember { id, cause, .. } => {
            prop_assert!(had_quorum, "removed a member without a quorum: {step:?}");
            // Stopped before its removal, it is a voter that does not answer for a moment: the
            // others must hold a quorum of the voters as they are.
            if *cause == Removal::Leave {
                let others = healthy.iter().filter(|h| *h != id).count();
                prop_assert!(
                    others >= majority(voters.len()),
                    "stopped {id} first with {others} of {} voters healthy",
                    voters.len()
                );
            }
            let is_voter = voters.contains(id);
            let after_healthy = healthy.iter().filter(|h| *h != id).count();
            let after_voters = voters.len() - usize::from(is_voter);
            prop_assert!(
                after_voters == 0 || after_healthy >= majority(after_voters),
                "removal leaves {after_healthy} healthy of {after_voters} voters"
            );
            let leader = o.etcd.as_ref().and_then(|e| e.leader);
            if Some(*id) == leader {
                prop_assert!(voters.len() == 1, "removed the leader while another voter could go");
            }
            // A voter whose pod is there and running leaves only when the spec asks for fewer
            // members, or when the pod cannot run and holds nothing to keep: crash-looping past
            // the bound or made from an earlier spec (emptyDir), or its volume refused or being
            // deleted by the user. A volume that may hold data is never removed for a failure.
            let members = o.etcd.as_ref().map_or(0, |e| e.members.len());
            let size = o.desired.as_ref().map_or(0, |d| d.size);
            let pod = member_of_pod_id(o, *id).and_then(|m| o.pods.get(&m.pod));
            let running = |p: &&crate::observed::PodState| {
                is_voter && !p.deleting && !p.is_dead() && p.volume_refused.is_none() && members <= size
            };
            // Out of reach on a node that has not been Ready for the grace period (the pod not
            // Ready, etcd giving no healthy status): lost with its node.
            let grace = o.desired.as_ref().map_or(i64::MAX, |d| d.recovery.node_loss.after_secs);
            let node_lost = |p: &crate::observed::PodState| {
                !p.ready
                    && !healthy.contains(id)
                    && p.node
                        .as_ref()
                        .and_then(|n| o.nodes.get(n))
                        .is_some_and(|n| n.exists && !n.ready && n.not_ready_secs.is_some_and(|s| s >= grace))
            };
            if let Some(p) = pod.filter(running) {
                // A claim the pod mounts counts unless the cache shows it being deleted.
                let live_volume = p.uses_pvc && o.pvcs.get(&p.name).is_none_or(|v| !v.deleting);
                prop_assert!(!live_volume, "removed {} with the volume that may hold its data", p.name);
            }
            if let Some(p) = pod.filter(running).filter(|p| !node_lost(p)) {
                let current = o.desired.as_ref().is_ok_and(|d| {
                    p.spec_hash.as_ref() == Some(&d.pod_hash_for(o.pvcs.get(&p.name).is_some_and(|v| v.root_data)))
                });
                let long = p.restarts >= super::failing::CRASH_LOOP_RESTARTS
                    && p.unready_secs.is_some_and(|s| s >= super::failing::CRASH_LOOP_SECS);
                prop_assert!(p.problem.is_some(), "removed {} whose pod runs", p.name);
                prop_assert!(
                    long || !current || p.uses_pvc,
                    "replaced {}, which crashed only briefly under the current spec",
                    p.name
                );
            }
            // A healthy voter leaves on purpose only after it left the client Service.
            if healthy.contains(id) {
                let pod = member_of_pod_id(o, *id).map(|m| m.pod.clone()).unwrap_or_default();
                let serving_pod = o.pods.get(&pod).is_some_and(|p| !p.deleting && p.volume_refused.is_none());
                prop_assert!(!serving_pod || drained_long(&pod), "removed healthy voter {pod} before draining it");
            }
        }
        Step::Defragment { pod, .. } => {
            prop_assert!(had_quorum, "defragmented without a quorum");
            let e = o.etcd.as_ref().expect("etcd answered");
            prop_assert!(healthy.len() == voters.len(), "defragmented beside an unhealthy voter");
            prop_assert!(e.members.iter().all(|m| !m.is_learner), "defragmented beside a learner");
            prop_assert!(o.backup_running.is_none(), "defragmented while a backup runs");
            let m = member_of_pod(o, pod).expect("a member");
            prop_assert!(
                Some(m.id) != e.leader || voters.len() == 1,
                "defragmented the leader before handing leadership away"
            );
        }
        Step::RecoverSpace(_) => {
            prop_assert!(had_quorum, "NOSPACE recovery without a quorum");
            prop_assert!(
                o.etcd.as_ref().is_some_and(|e| e.has_alarm(AlarmKind::NoSpace)),
                "space recovery without NOSPACE"
            );
        }
        Step::Drain { pod } => {
            prop_assert!(o.pods.get(pod).is_some_and(|p| !p.deleting), "drained a pod that is going anyway");
        }
        Step::UpgradeMember { pod, .. } => {
            // Restarting a healthy voter must leave a quorum among the others. Clusters of one or
            // two voters cannot have that (a majority of 2 is 2): their upgrade is a short outage
            // by etcd's arithmetic, which docs/src/migrating-from-coreos.md states.
            if let Some(m) = member_of_pod(o, pod).filter(|m| healthy.contains(&m.id) && voters.len() > 2) {
                let others = healthy.iter().filter(|h| **h != m.id).count();
                prop_assert!(others >= majority(voters.len()), "upgrade restart of {pod} drops the quorum");
            }
            // Out of the client Service first (and not stale) when a Ready member serves
            // there, unless its container cannot run anyway (a failed upgrade rolled back).
            let others_serving =
                o.pods.values().any(|p| p.name != *pod && p.ready && !p.deleting && p.serving != Some(false));
            let running = o.pods.get(pod).is_some_and(|p| p.ready);
            prop_assert!(
                !others_serving || !running || drained_long(pod),
                "restarted {pod} in place before draining it"
            );
        }
        Step::DeletePod { pod, keep_volume, .. } => {
            if let Some(m) = member_of_pod(o, pod).filter(|m| healthy.contains(&m.id)) {
                // Only a rollout restarts a healthy voter: on its volume, drained first, with a
                // quorum among the others (clusters of one or two voters excepted, as upgrades).
                prop_assert!(*keep_volume && o.pvcs.contains_key(pod), "deleted healthy voter {pod} and its data");
                prop_assert!(drained_long(pod), "deleted healthy voter {pod} before draining it");
                if voters.len() > 2 {
                    let others = healthy.iter().filter(|h| **h != m.id).count();
                    prop_assert!(others >= majority(voters.len()), "restart of {pod} drops the quorum");
                }
            }
            let live_volume = o.pvcs.get(pod).is_some_and(|v| !v.deleting);
            if live_volume && !keep_volume {
                // A volume goes only with a member that is not one (any more), or before the
                // cluster formed.
                prop_assert!(
                    !o.ever_bootstrapped || member_of_pod(o, pod).is_none() && o.etcd.is_some(),
                    "deleted the volume of {pod}, which may hold the only copy of its data"
                );
            }
        }
        Step::CreatePod(m) if m.restart => {
            prop_assert!(
                o.pvcs.get(&m.name).is_some_and(|v| !v.deleting),
                "restarted {} on a volume that is not there",
                m.name
            );
        }
        Step::RetireVolume { pod, claim, .. } => {
            // Refused by its data check, or its member lost with its node under
            // `volumeMembers: Replace` (with a quorum: it is then replaced): a node not Ready
            // for volumeAfterSeconds, or a deleted Node its pod, made again, has waited
            // unscheduled for that long.
            let p = o.pods.get(pod);
            let d = o.desired.as_ref().expect("valid");
            let after = d.recovery.node_loss.volume_after_secs;
            let node_lost = p.is_some_and(|p| {
                let not_ready = p
                    .node
                    .as_ref()
                    .and_then(|n| o.nodes.get(n))
                    .is_some_and(|n| !n.ready && after.is_some_and(|a| n.not_ready_secs.is_some_and(|s| s >= a)));
                let deleted = p.node.is_none()
                    && o.member_nodes.get(pod).and_then(|n| o.nodes.get(n)).is_some_and(|n| !n.exists)
                    && after.is_some_and(|a| p.unready_secs.unwrap_or(p.age_secs) >= a);
                !p.ready && (not_ready || deleted)
            });
            prop_assert!(
                p.is_some_and(|p| p.volume_refused.is_some()) || node_lost && had_quorum,
                "retired {pod}'s volume, not refused nor lost with its node under a quorum"
            );
            prop_assert!(o.pvcs.get(pod).is_some_and(|v| v.name == *claim), "retired a claim not {pod}'s");
        }
        Step::RestartAsRoot { pod, .. } => {
            let p = o.pods.get(pod);
            prop_assert!(
                p.is_some_and(|p| p.data_inaccessible.is_some() && !p.deleting),
                "{pod}: nothing inaccessible"
            );
            prop_assert!(o.pvcs.get(pod).is_some_and(|v| !v.deleting), "{pod} restarted as root without its volume");
            let default_hash = o.desired.as_ref().map(|d| d.pod_hash()).ok();
            prop_assert!(p.unwrap().spec_hash == default_hash, "{pod} was not made with the default profile");
        }
        Step::UpdatePeerUrls { urls, .. } => {
            prop_assert!(had_quorum && healthy.len() == voters.len(), "a peer URL moved beside an unhealthy voter");
            if urls.iter().any(|u| u.starts_with("https://")) {
                prop_assert!(
                    o.pods.values().all(|p| p.tls.peer_secret.is_some()),
                    "an https peer URL while a pod has no peer certificate to dial it"
                );
            }
        }
        Step::RecordPeerUrl { pod, url } => {
            // Only etcd's own member list, with a quorum answering, overrides a volume's record.
            let leader = o.etcd.as_ref().and_then(|e| e.leader);
            prop_assert!(had_quorum || leader.is_some(), "a peer-URL record rewritten without a leader's member list");
            let m = member_of_pod(o, pod).expect("a member");
            prop_assert_eq!(m.peer_urls.first(), Some(url), "the record is not the membership's");
        }
        Step::Recover(r) => {
            prop_assert!(!had_quorum, "disaster recovery with a healthy quorum");
            // Never while the voters that may still be alive could hold a quorum (a partition's
            // majority side): those whose pod object is gone while its node, not Ready and not
            // declared out of service, may still run it, and those whose pod runs.
            let voters: Vec<_> = o.etcd.iter().flat_map(|e| e.members.iter()).filter(|m| !m.is_learner).collect();
            let may_be_alive: Vec<&str> = voters
                .iter()
                .filter(|m| match o.pods.get(&m.pod) {
                    Some(p) => !p.is_dead() && p.volume_refused.is_none(),
                    None => o
                        .member_nodes
                        .get(&m.pod)
                        .and_then(|n| o.nodes.get(n))
                        .is_some_and(|n| n.exists && !n.ready && !n.out_of_service),
                })
                .map(|m| m.pod.as_str())
                .collect();
            prop_assert!(
                may_be_alive.len() < voters.len() / 2 + 1,
                "recovered while {may_be_alive:?} of {} voters may be alive, a quorum",
                voters.len()
            );
            for m in voters.iter().filter(|m| !o.pods.contains_key(&m.pod)) {
                let node = o.member_nodes.get(&m.pod).and_then(|n| o.nodes.get(n));
                // A Node that is Ready may not have been told yet that its kubelet went silent:
                // it stays Ready for kube-controller-manager's node-monitor grace (50 s).
                prop_assert!(
                    !node.is_some_and(|n| n.exists && n.ready && !n.out_of_service)
                        || o.quorum_lost_secs.unwrap_or(0) > 50,
                    "recovered {}s after the loss, counting {} as stopped because its Node is Ready",
                    o.quorum_lost_secs.unwrap_or(0),
                    m.pod
                );
            }
            let d = o.desired.as_ref().expect("valid");
            prop_assert!(d.recovery.quorum_loss != QuorumLossPolicy::Wait, "recovered without the user opting in");
            prop_assert!(o.quorum_lost_secs.unwrap_or(0) >= d.recovery.after_secs, "recovered before afterSeconds");
            // Never the data of one look, never less than a survivor holds.
            let survivors = surviving_data(o);
            if !survivors.is_empty() {
                prop_assert!(o.survivor_looks.looks >= super::survivors::SURVIVOR_LOOKS, "recovered from one look");
                prop_assert!(survivors.iter().all(|s| s.1.is_some()), "recovered beside a survivor never seen");
            }
            match &r.member.seed {
                Some(Seed::Member { pod, .. }) => {
                    let seed = survivors.iter().find(|s| s.0 == *pod).and_then(|s| s.1).unwrap_or_default();
                    for (other, seen) in &survivors {
                        let applied = seen.map(|s| s.0).unwrap_or_default();
                        prop_assert!(applied <= seed.0, "started from {pod} ({}), {other} holds {applied}", seed.0);
                    }
                }
                Some(Seed::Backup(_)) => {
                    let backup = o.recovery_backup.as_ref().and_then(|b| b.as_ref().ok()).map(|b| b.revision);
                    for (other, seen) in &survivors {
                        let revision = seen.map(|s| s.1).unwrap_or_default();
                        prop_assert!(Some(revision) <= backup, "started from a backup older than {other}'s data");
                    }
                }
                None => prop_assert!(false, "a recovery without data to start from"),
            }
        }
        _ => {}
    }
    // Data the non-root user cannot use is answered first, whatever else is going on: by
    // restarting that member as root on its volume (never by a membership change).
    let as_root_due = o.desired.as_ref().is_ok_and(|d| {
        o.pods.values().any(|p| {
            !p.deleting
                && p.data_inaccessible.is_some()
                && p.spec_hash.as_ref() == Some(&d.pod_hash())
                && o.pvcs.get(&p.name).is_some_and(|v| !v.deleting)
        })
    });
    if as_root_due && !o.paused {
        prop_assert!(matches!(step, Step::RestartAsRoot { .. }), "inaccessible data answered by {step:?}");
    }
    // Members on volumes marked as root's run as root, the others as the default.
    if let Step::CreatePod(m) | Step::AddLearner(m) = step {
        prop_assert_eq!(m.root_data, o.pvcs.get(&m.name).is_some_and(|v| v.root_data), "{}", m.name);
    }
    // A new member's https peer URL is dialable by every pod.
    if let Step::AddLearner(m) = step {
        let own = m.initial_cluster.iter().find(|(n, _)| *n == m.name).map(|(_, u)| u.as_str()).unwrap_or("");
        if own.starts_with("https://") {
            prop_assert!(o.pods.values().all(|p| p.tls.peer_secret.is_some()), "an https learner some pod cannot dial");
        }
    }
    // A refused volume never restarts its member.
    if let Step::CreatePod(m) = step {
        prop_assert!(!o.pods.contains_key(&m.name), "created a pod that exists: {}", m.name);
    }
    Ok(())
}

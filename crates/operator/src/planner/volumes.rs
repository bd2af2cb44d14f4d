//! Members whose data survives on a PersistentVolumeClaim come back on it: with or without a
//! quorum, with or without any pod left. Restarting a member on its own data changes no
//! membership; it is how a quorum comes back after pods were lost, so no quorum gate applies.
//! The volume itself must prove it holds the member's data (the pod's data check, see
//! `member_volume`); a refused volume makes the member one that cannot come back, and is kept:
//! retired first (`RetireVolume`, before any membership step, quorum or not), so that neither the
//! member's replacement nor a recovery deletes what may be the last copy of some data (right
//! after a member that must restart as root, below). A volume
//! whose data the default non-root user cannot use is marked as root's and its member restarts
//! as root (`pod_security`): the data is there, only its owner differs.

use super::{NewMember, Step, peer_of, upgrade::running_version};
use crate::observed::{Observed, PvcState};
use crate::validation::Desired;

/// How long a member pod may stay terminating before it is reported (its node stopped
/// answering, a finalizer hangs): its volume stays attached to it meanwhile.
pub const STUCK_TERMINATING_SECS: i64 = 120;

/// The next restart of a member on its volume, if one is due.
pub(super) fn restart(o: &Observed, d: &Desired) -> Option<Step> {
    let live_pvc = |member: &str| o.pvcs.get(member).filter(|v| !v.deleting);
    if let Some(step) = as_root(o, d).or_else(|| retire(o)) {
        return Some(step);
    }
    // A PVC member's pod that ended: delete it (not the volume) so that the member restarts.
    for p in o.pods.values().filter(|p| p.is_dead() && !p.deleting && live_pvc(&p.name).is_some()) {
        if is_member_or_unknown(o, &p.name) {
            return Some(Step::DeletePod {
                pod: p.name.clone(),
                why: format!("pod {} ended ({}); the member restarts on its volume", p.name, p.phase),
                keep_volume: true,
            });
        }
    }
    for v in o.pvcs.values().filter(|v| !v.deleting && !o.pods.contains_key(&v.member)) {
        match &o.etcd {
            // etcd knows the membership: only a member that has started (has data) restarts.
            // A learner that never started is the learner logic's; a PVC of no member is left
            // alone (its member was removed: nothing to restart).
            Some(e) if e.member_for_pod(&v.member).is_some_and(|m| m.started()) => {
                let mut peers = super::initial_cluster_of(e);
                if e.leader.is_some() {
                    // The leader's member list is the truth: records that differ are set back
                    // first (the TLS stage pods are made at reads them), then the member
                    // restarts with its URL.
                    if let Some(step) = super::tls_transition::record_of_membership(o, d, e) {
                        return Some(step);
                    }
                } else {
                    // Without a leader the list answered may lag: members are named with the
                    // URLs their volumes record (which the TLS stage is derived from), as when
                    // no member answers.
                    for (n, u) in &mut peers {
                        if let Some(r) = o.pvcs.get(n.as_str()).and_then(|v| v.peer_url.as_ref()) {
                            *u = r.clone();
                        }
                    }
                }
                return Some(Step::CreatePod(on_volume(o, d, v, peers)));
            }
            Some(_) => {}
            // No member answers, and the cluster once formed: every member with a volume comes
            // back, whatever is left of the rest.
            None if o.ever_bootstrapped => {
                return Some(Step::CreatePod(on_volume(o, d, v, surviving_peers(o, d))));
            }
            // A bootstrap that has not formed yet lost a pod: start that member again exactly
            // as the bootstrap did (its volume may or may not have data yet; etcd keeps it).
            None if v.bootstrap => {
                let peers = bootstrap_peers(o, d);
                if peers.iter().any(|(n, _)| *n == v.member) {
                    return Some(Step::CreatePod(NewMember {
                        name: v.member.clone(),
                        initial_cluster: peers,
                        existing: false,
                        version: d.version.clone(),
                        pvc: true,
                        bootstrap: true,
                        restart: false,
                        seed: None,
                        root_data: false,
                        claim: None,
                        acknowledged_index: 0,
                        fenced: false,
                    }));
                }
            }
            None => {}
        }
    }
    None
}

/// A member pod whose data check refused its volume (another member's or cluster's, emptied,
/// rolled back): the claim is marked retired and kept. It may still hold data a person wants;
/// the operator never uses nor deletes it again (observation sets it apart).
fn retire(o: &Observed) -> Option<Step> {
    o.pods.values().find_map(|p| {
        let why = p.volume_refused.as_ref()?;
        let v = o.pvcs.get(&p.name).filter(|v| !v.deleting)?;
        Some(Step::RetireVolume {
            pod: p.name.clone(),
            claim: v.name.clone(),
            why: format!("its data check refused it: {why}"),
        })
    })
}

/// A pod made with the default non-root profile whose data check found data on its volume that
/// this user cannot read or write: data an earlier version wrote as root, on a volume type the
/// kubelet does not apply `fsGroup` to. The member is neither replaced nor left failing: its
/// volume is marked as root's and it restarts on it as root, as it ran before. (Under a
/// securityContext of the user's, nothing is changed: the failure is reported.)
fn as_root(o: &Observed, d: &Desired) -> Option<Step> {
    if d.pod.security_context.is_some() {
        return None;
    }
    let default_hash = d.pod_hash_for(false);
    let p = o.pods.values().find(|p| {
        !p.deleting
            && p.data_inaccessible.is_some()
            && p.spec_hash.as_ref() == Some(&default_hash)
            && o.pvcs.get(&p.name).is_some_and(|v| !v.deleting)
    })?;
    Some(Step::RestartAsRoot {
        pod: p.name.clone(),
        why: format!(
            "its data check as uid {} found data it cannot use ({}): the volume's data was written as root and its volume type does not apply the pod's fsGroup; the member runs as root, as before",
            crate::pod_security::NONROOT,
            p.data_inaccessible.as_deref().unwrap_or_default()
        ),
    })
}

fn is_member_or_unknown(o: &Observed, pod: &str) -> bool {
    o.etcd.as_ref().is_none_or(|e| e.member_for_pod(pod).is_some())
}

fn on_volume(o: &Observed, d: &Desired, v: &PvcState, initial_cluster: Vec<(String, String)>) -> NewMember {
    NewMember {
        name: v.member.clone(),
        initial_cluster,
        existing: true,
        // A member restarts at the version the cluster runs: never older than the cluster
        // version, never a jump the upgrade logic has not checked.
        version: running_version(o).unwrap_or_else(|| d.version.clone()),
        pvc: true,
        bootstrap: false,
        restart: true,
        seed: None,
        root_data: false,
        claim: None,
        acknowledged_index: 0,
        fenced: false,
    }
}

/// Without an answer from etcd: every member a pod or a volume still stands for, with the peer
/// URL recorded on its volume or derived from its name. etcd takes its membership from the data
/// on the volume; this list only has to name the member itself correctly.
fn surviving_peers(o: &Observed, d: &Desired) -> Vec<(String, String)> {
    let mut peers: std::collections::BTreeMap<String, String> = o
        .pvcs
        .values()
        .map(|v| (v.member.clone(), v.peer_url.clone().unwrap_or_else(|| peer_of(o, d, &v.member).1)))
        .collect();
    for p in o.pods.keys() {
        peers.entry(p.clone()).or_insert_with(|| peer_of(o, d, p).1);
    }
    peers.into_iter().collect()
}

/// The members of the bootstrap under way: as a bootstrap pod's `--initial-cluster` names them,
/// else every bootstrap volume.
pub(super) fn bootstrap_peers(o: &Observed, d: &Desired) -> Vec<(String, String)> {
    let names: Vec<String> = match o.pods.values().find(|p| p.bootstrap && !p.initial_cluster.is_empty()) {
        Some(p) => p.initial_cluster.clone(),
        None => o.pvcs.values().filter(|v| v.bootstrap).map(|v| v.member.clone()).collect(),
    };
    names
        .iter()
        .map(|n| match o.pvcs.get(n).and_then(|v| v.peer_url.clone()) {
            Some(url) => (n.clone(), url),
            None => peer_of(o, d, n),
        })
        .collect()
}

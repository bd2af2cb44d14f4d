//! Refused TLS material the cluster runs with (an expired or not yet valid certificate, a
//! deleted Secret, a certificate its peers' CA did not issue; `observe::tls` decides which
//! refusals are these) holds up only what needs the material: what would start a member that
//! is running now, or a member that never ran. A member whose pod is gone or ended restarts on
//! its volume exactly as before (its pod mounts the same Secrets the others do), members that
//! are gone may be removed, and what changes no pod goes on (services, promotion of a learner
//! that runs, defragmentation, space recovery, authentication, a volume's peer-URL record).
//!
//! Why that is safe: each step allowed either restarts a member that is not running (it
//! contributes nothing to the quorum now, and the material it starts with is what running
//! members already use: etcd re-reads certificate files at each handshake, the kubelet keeps
//! mounted Secrets current) or makes no pod at all. Nothing allowed stops a running member:
//! rollouts, upgrades, TLS moves, scale-downs (a running member's drain first) and replacements
//! wait, as does every new member (bootstrap, learner, recovery), which could not work with the
//! material. The quorum and one-change rules of the step itself still hold: this only turns
//! steps into waits.

use super::{Step, WaitReason, wait};
use crate::observed::Observed;

/// `step`, or a wait when it needs TLS material that is refused.
pub(super) fn gate(o: &Observed, step: Step) -> Step {
    let refused = &o.tls_material.refused;
    if refused.is_empty() || o.desired.is_err() {
        return step;
    }
    let held = match &step {
        Step::Wait(w) if w.reason == WaitReason::Stable => String::new(),
        _ if allowed(o, &step) => return step,
        Step::Wait(_) => return step,
        s => match s.member() {
            Some(m) => format!(" (waiting: {} of {m})", s.name()),
            None => format!(" (waiting: {})", s.name()),
        },
    };
    wait(WaitReason::TlsMaterialRefused, format!("{}{held}", crate::tls::material::refused_message(refused)))
}

/// Whether `step` needs no TLS material beyond what running members use.
fn allowed(o: &Observed, step: &Step) -> bool {
    let gone = |pod: &str| o.pods.get(pod).is_none_or(|p| p.is_dead() || p.deleting);
    match step {
        Step::Wait(_)
        | Step::CreateServices
        | Step::Promote { .. }
        | Step::MoveLeader { .. }
        | Step::Defragment { .. }
        | Step::RecoverSpace(_)
        | Step::RecordPeerUrl { .. }
        | Step::Auth(_) => true,
        // A member back on its own volume, its pod gone: no membership change, the Secrets its
        // pod mounted before.
        Step::CreatePod(m) => {
            m.pvc && o.pvcs.get(&m.name).is_some_and(|v| !v.deleting) && !o.pods.contains_key(&m.name)
        }
        Step::DeletePod { pod, keep_volume, .. } => *keep_volume && o.pods.get(pod).is_some_and(|p| p.is_dead()),
        // The data check found data the pod's user cannot use, or refused the volume: the
        // member is not running.
        Step::RestartAsRoot { .. } | Step::RetireVolume { .. } => true,
        Step::RemoveMember { pod, .. } => gone(pod),
        Step::Drain { .. }
        | Step::Bootstrap(_)
        | Step::AddLearner(_)
        | Step::Recover(_)
        | Step::UpgradeMember { .. }
        | Step::UpdatePeerUrls { .. } => false,
    }
}

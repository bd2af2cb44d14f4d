//! Turning TLS on or off for a running cluster: the steps. The stages pods are made at are
//! data in `tls::transition` (derived from the pods each reconcile); this decides what moves
//! next. Reached from `membership::resize` only once every voter is healthy (step 1 below),
//! and steps 2 and 3 only once membership matches the spec and no upgrade is under way, so
//! every step is gated on a healthy quorum and there is one at a time.
//!
//! The order etcd needs (see `tls::transition` for what etcd allows):
//! 1. a member whose pod listens on another peer scheme than its URL (its URL was just moved)
//!    is made again first, before any upgrade, authentication change or membership change
//!    ([`made_again`], right after `resize`'s every-voter-healthy gate): restarted on its
//!    volume, drained first, the leader after handing leadership away (`rollout::roll`);
//! 2. else the next member on a volume whose peer URL has the other scheme than `spec.TLS`
//!    asks is moved with `member update`, followers first, the leader last; to https only once
//!    every pod has the peer certificate (every member can dial https then);
//! 3. else pods made at an earlier stage are rolled by `rollout`, which asks [`outdated`].
//!
//! A member on an emptyDir holds its data only in its pod: instead of being moved it is
//! replaced (learner first) by a member made at the stage, whose URL has the stage's scheme.
//! Everything here is derived from the pods' command lines and etcd's member list, so an
//! operator restarted half-way goes on from where the cluster is.

use super::{Step, WaitReason, rollout, wait};
use crate::observed::{EtcdState, MemberState, Observed, PodState};
use crate::tls::transition::Serves;
use crate::validation::Desired;

/// The member's peer URL is https.
pub fn url_https(m: &MemberState) -> bool {
    m.peer_urls.first().is_some_and(|u| u.starts_with("https://"))
}

fn with_scheme(url: &str, https: bool) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    format!("{}://{rest}", crate::tls::scheme(https))
}

/// The member's pod was made at another TLS stage than the current one: other certificates,
/// another client port, a peer listener on the other scheme than its URL, or (emptyDir, which
/// is replaced rather than moved) a URL of the other scheme than new members get.
pub(super) fn outdated(d: &Desired, m: &MemberState, p: &PodState) -> bool {
    let https = url_https(m);
    p.tls != d.tls_stage.pod(https) || (!p.uses_pvc && https != d.tls_stage.peer_https)
}

/// Step 1 above: a member whose pod listens on another peer scheme than its URL is made again
/// before anything else that restarts, adds, removes or upgrades a member (or changes
/// authentication): planned by `membership::resize` right after its every-voter-healthy gate.
pub(super) fn made_again(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let mut voters: Vec<&MemberState> = etcd.voters().collect();
    rollout::followers_first(etcd, &mut voters);
    let m = voters
        .iter()
        .find(|m| o.pods.get(&m.pod).filter(|p| !p.deleting).is_some_and(|p| p.tls.peer_https != url_https(m)))?;
    Some(rollout::roll(o, d, etcd, m).unwrap_or_else(|| {
        wait(
            WaitReason::MemberStarting,
            format!("member {}'s peer URL moved; its pod is made again once its volume shows", m.pod),
        )
    }))
}

/// Step 2 above: the next member's peer URL to move, if any (after [`made_again`], upgrades and
/// membership changes).
pub(super) fn next(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let mut voters: Vec<&MemberState> = etcd.voters().collect();
    rollout::followers_first(etcd, &mut voters);
    let pod = |m: &MemberState| o.pods.get(&m.pod).filter(|p| !p.deleting);
    let https = d.tls.peer_secret.is_some();
    if https && !d.tls_stage.peer_https {
        // Certificates first: `rollout` gives every pod the peer certificate.
        return None;
    }
    let m = voters.iter().find(|m| {
        url_https(m) != https && pod(m).is_some_and(|p| p.uses_pvc) && o.pvcs.get(&m.pod).is_some_and(|v| !v.deleting)
    })?;
    Some(Step::UpdatePeerUrls {
        id: m.id,
        pod: m.pod.clone(),
        urls: m.peer_urls.iter().map(|u| with_scheme(u, https)).collect(),
    })
}

/// A member's volume records another peer URL than the membership has, and no move of that
/// member is under way: the record is rewritten to the membership's. etcd's member list (the
/// leader's) is the truth once it answers; the record only stands for it while no member does
/// (a member restarted then listens on the record's scheme, `volumes::restart`, and the TLS
/// stage keeps the peer certificate while a record is https). A record ahead of the membership
/// towards the scheme `spec.TLS` asks, for a member whose pod runs, is a move under way
/// (`UpdatePeerUrls` writes the record first, then `member update`, and is planned again): left
/// as it is. Called with a leader answering.
fn stale_record(o: &Observed, d: &Desired, m: &MemberState) -> Option<Step> {
    let url = m.peer_urls.first()?;
    let recorded = o.pvcs.get(&m.pod).filter(|v| !v.deleting)?.peer_url.as_ref()?;
    let target_https = d.tls.peer_secret.is_some();
    let runs = o.pods.get(&m.pod).is_some_and(|p| !p.deleting);
    let moving = runs && url_https(m) != target_https && *recorded == with_scheme(url, target_https);
    (recorded != url && !moving).then(|| Step::RecordPeerUrl { pod: m.pod.clone(), url: url.clone() })
}

/// The first member whose volume's record is stale ([`stale_record`]).
pub(super) fn record_of_membership(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    etcd.members.iter().find_map(|m| stale_record(o, d, m))
}

/// Where a cluster turning TLS on or off is, for the `TLSTransition` condition: the phase (its
/// reason) and a message naming the member moved now and what clients see. `None` when
/// nothing moves.
pub fn progress(o: &Observed, step: &Step) -> Option<(&'static str, String)> {
    let d = o.desired.as_ref().ok()?;
    let e = o.etcd.as_ref()?;
    let s = &d.tls_stage;
    let members: Vec<(&MemberState, &PodState)> =
        e.voters().filter_map(|m| o.pods.get(&m.pod).filter(|p| !p.deleting).map(|p| (m, p))).collect();
    // A voter whose pod is being made again counts as not done in the phase under way.
    let n = e.voters().count();
    let restarting = n - members.len();
    let peer_on = d.tls.peer_secret.is_some();
    let client_on = d.tls.client.is_some();
    let count = |f: &dyn Fn(&MemberState, &PodState) -> bool| members.iter().filter(|(m, p)| f(m, p)).count();
    let lacking_certs =
        count(&|_, p| (peer_on && p.tls.peer_secret != d.tls.peer_secret) || (client_on && !p.tls.client.https()));
    let https_only_left = count(&|_, p| !client_on && p.tls.client == Serves::Https);
    let urls_left = count(&|m, p| url_https(m) != peer_on || p.tls.peer_https != peer_on);
    let plaintext_left = count(&|_, p| client_on && p.tls.client.http());
    // Whatever keeps pods made with it for now (a leaving pod still listening on https), a
    // member that holds the peer certificate still has to be made without it.
    let peer_certs_left = count(&|_, p| !peer_on && p.tls.peer_secret.is_some());
    let certs_left =
        count(&|_, p| (!peer_on && p.tls.peer_secret.is_some()) || (!client_on && p.tls.server_secret.is_some()));
    // The member in focus: the one the step acts on, else one that is restarting, drained or
    // moved and not made again yet.
    let focus = step.member().map(str::to_string).filter(|_| !matches!(step, Step::Wait(_))).or_else(|| {
        members
            .iter()
            .find(|(m, p)| !p.ready || !m.is_healthy() || p.serving == Some(false) || p.tls.peer_https != url_https(m))
            .map(|(m, _)| m.pod.clone())
    });
    let (reason, what, left) = if lacking_certs > 0 {
        (
            "AddingCertificates",
            "members get the certificates (peer URLs stay http; the client port serves http and https)".to_string(),
            lacking_certs,
        )
    } else if urls_left > 0 {
        let to = crate::tls::scheme(peer_on);
        let reason = if peer_on { "MovingPeerURLsToHttps" } else { "MovingPeerURLsToHttp" };
        (reason, format!("peer URLs move to {to} one member at a time (member update, then a restart)"), urls_left)
    } else if https_only_left > 0 {
        ("AddingPlaintextClients", "the client port serves http again beside https".to_string(), https_only_left)
    } else if s.serves() == Serves::Both && members.iter().all(|(_, p)| p.tls.client == Serves::Both) {
        if peer_certs_left > 0 {
            // Held at both schemes, peers done moving but still holding the certificate: made
            // without it first; the hold is not shown while members still move.
            ("RemovingCertificates", "members are made without the peer certificate".to_string(), peer_certs_left)
        } else {
            // Only the user's `tls-serve-both` annotation keeps every member here.
            let what = format!(
                "members serve clients over http and https until the {} annotation is removed",
                crate::naming::TLS_SERVE_BOTH_ANNOTATION
            );
            ("ServingBoth", what, 0)
        }
    } else if plaintext_left > 0 {
        ("DroppingPlaintextClients", "the client port stops serving http".to_string(), plaintext_left)
    } else if certs_left > 0 {
        ("RemovingCertificates", "members are made without the certificates".to_string(), certs_left)
    } else {
        return None;
    };
    let focus = focus.map(|m| format!("member {m} now; ")).unwrap_or_default();
    Some((
        reason,
        format!(
            "{what}: {} of {n} members done; {focus}new pods' client port serves {}; the operator connects over {}",
            n.saturating_sub(left + restarting),
            s.serves().as_str(),
            s.operator_scheme()
        ),
    ))
}

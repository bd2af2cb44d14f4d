//! Rolling upgrades: one member at a time, followers first and the leader last (leadership
//! is moved away first), each member only after the previous one is healthy, caught up and
//! reports the new server version. A member that does not come back stops the upgrade; setting
//! the version back rolls that member back.

use super::{Step, WaitReason, wait};
use crate::observed::{EtcdState, MemberState, Observed, PodState};
use crate::validation::Desired;
use crate::version::{Version, check_change};

/// How long an upgraded member may take to become healthy at its new version before the
/// upgrade is declared failed.
pub const UPGRADE_DEADLINE_SECS: i64 = 120;

/// An upgraded member counts as caught up when it has applied all but this many of the
/// leader's raft entries.
pub const CATCH_UP_MAX_LAG: u64 = 1000;

/// The version the cluster really runs: the lowest server version its members report; without
/// answers, what status last recorded; else the lowest version a pod is annotated with.
pub fn running_version(o: &Observed) -> Option<Version> {
    known_version(o).or_else(|| o.pods.values().filter_map(|p| Version::parse(&p.version).ok()).min())
}

/// What members report (the lowest), else what status recorded: versions etcd itself confirmed.
fn known_version(o: &Observed) -> Option<Version> {
    o.etcd
        .iter()
        .flat_map(|e| e.members.iter())
        .filter_map(|m| m.status.as_ref())
        .filter_map(|s| Version::parse(&s.version).ok())
        .min()
        .or_else(|| o.recorded_version.as_deref().and_then(|v| Version::parse(v).ok()))
}

/// `spec.version` left empty means "the default of the operator that created the cluster": a
/// cluster that runs keeps the version it runs, so an operator release with a newer default never
/// upgrades etcd by itself (users upgrade by setting `spec.version`). Only versions etcd confirmed
/// count ([`known_version`]): a bootstrap that never formed is not pinned to its pods' image. A
/// new cluster gets the default.
pub fn keep_running_version(o: &mut Observed) {
    let Some(running) = known_version(o).filter(Version::is_supported) else { return };
    if let Ok(d) = o.desired.as_mut() {
        d.version = running;
    }
}

/// A pod that cannot run (`pod` has a stuck container). If its version is not the desired one
/// and moving it there is allowed, change its image: this rolls a failed upgrade back (or
/// forward to a corrected version). A member that is down already cannot lose anything by it.
/// If it runs the desired version and the cluster does not, the upgrade of it failed.
pub(super) fn failing_member(o: &Observed, d: &Desired, pod: &str, reason: &str, msg: &str) -> Option<Step> {
    let p = o.pods.get(pod)?;
    let running = running_version(o)?;
    let pod_version = Version::parse(&p.version).ok()?;
    if pod_version != d.version {
        // Into 3.6 or 3.7 only with a snapshot of the member's known to be past what it cannot
        // replay (`replay`): a member that cannot run shows none, so it stays as it is.
        let into_new_minor = pod_version.minor_line() < d.version.minor_line() && d.version.minor_line() >= (3, 6);
        if check_change(&running, &d.version).is_ok()
            && !into_new_minor
            && o.etcd.as_ref().is_none_or(|e| e.member_for_pod(pod).is_some())
        {
            return Some(Step::UpgradeMember { pod: pod.to_string(), from: pod_version, to: d.version.clone() });
        }
        return None;
    }
    (pod_version != running).then(|| {
        wait(
            WaitReason::UpgradeFailed,
            format!(
                "upgrade of member {pod} to {} failed: {reason}: {msg}; the upgrade is stopped. Set spec.version back to {running} to roll it back",
                d.version
            ),
        )
    })
}

/// [`next`]; but an upgrade that waits for raft snapshots (`replay`) before its first member
/// lets a rollout through: a lower snapshot count in etcdEnv, which the members get this way, is
/// how a user hurries it (the pods are made again at the version they run).
pub(super) fn next_or_rollout(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let step = next(o, d, etcd)?;
    let deferred = matches!(&step, Step::Wait(w) if w.reason == WaitReason::UpgradeDeferred);
    let not_started = o.pods.values().all(|p| Version::parse(&p.version).ok().as_ref() != Some(&d.version));
    if deferred
        && not_started
        && let Some(roll) = super::rollout::next(o, d, etcd)
    {
        return Some(roll);
    }
    Some(step)
}

fn behind<'a>(o: &Observed, etcd: &'a EtcdState, target: &Version) -> Vec<&'a str> {
    etcd.voters()
        .filter(|m| o.pods.get(&m.pod).is_some_and(|p| Version::parse(&p.version).ok().as_ref() != Some(target)))
        .map(|m| m.pod.as_str())
        .collect()
}

/// How far a node's clock may lag the operator's before a restarted container's start looks
/// older than the move that restarted it (`ready_since_the_move`).
const CLOCK_SLACK_SECS: i64 = 5;

/// The member pod is Ready with the etcd container started by its move to another version: a
/// Ready container from before the restart can still be in the watch cache while etcd already
/// answers from the new one, and a member confirmed on it lets the next member restart before
/// this one is back in the client Service (seen: two members restarting within a second, and
/// clients refused by a Service with no endpoint). The kubelet reports the new container
/// ready with the new image, or (an image named otherwise by the runtime) started since the
/// move, give or take `CLOCK_SLACK_SECS`. Pods never moved only need to be Ready.
pub fn ready_since_the_move(p: &PodState) -> bool {
    let Some(age) = p.version_age_secs else { return p.ready };
    let new_image = p.etcd_ready_image.as_deref().is_some_and(|i| same_image(i, &p.image));
    let started_since = p.etcd_ready_run_secs.is_some_and(|run| run <= age + CLOCK_SLACK_SECS);
    p.ready && (new_image || started_since)
}

/// A member moved to its pod's version is back at it: healthy, reporting that version, caught
/// up with the leader (`leader_index`), its pod Ready with the container the move started. One
/// answer for the gate (`in_flight`) and for the mark (`marks::upgrades_confirmed`): when they
/// differed, the mark went first and the gate stopped looking.
pub fn back_at_its_version(m: &MemberState, p: &PodState, leader_index: Option<u64>) -> bool {
    let Some(s) = m.status.as_ref().filter(|_| m.is_healthy()) else { return false };
    let caught_up = leader_index.is_some_and(|li| s.raft_applied_index + CATCH_UP_MAX_LAG >= li);
    let reports = Version::parse(&s.version).ok();
    reports.is_some() && reports == Version::parse(&p.version).ok() && caught_up && ready_since_the_move(p)
}

/// The image the kubelet reports names the one in the pod spec (the runtime may add Docker
/// Hub's default registry and repository).
fn same_image(reported: &str, spec: &str) -> bool {
    let bare = |i: &str| i.strip_prefix("docker.io/").map(|r| r.strip_prefix("library/").unwrap_or(r).to_string());
    reported == spec || bare(reported).is_some_and(|r| r == spec || bare(spec).is_some_and(|s| s == r))
}

/// A member already moved to the desired version must be healthy and report that version
/// before anything else happens; past the deadline the upgrade is declared failed.
pub(super) fn in_flight(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let target = &d.version;
    let behind = behind(o, etcd, target);
    if behind.is_empty()
        && etcd.voters().all(|m| m.status.as_ref().map(|s| s.version.as_str()) == Some(&target.to_string()[..]))
    {
        return None;
    }
    for m in etcd.voters().filter(|m| !behind.contains(&m.pod.as_str())) {
        let Some(p) = o.pods.get(&m.pod) else { continue };
        if p.version_age_secs.is_none() {
            continue; // created at this version, or back at it since: healing and scaling handle it
        }
        let reports = m.status.as_ref().and_then(|s| Version::parse(&s.version).ok());
        let leader_index = etcd.leader_member().and_then(|l| l.status.as_ref()).map(|s| s.raft_index);
        // Its pod Ready too: back in the client Service before the next member restarts, or
        // members restarting faster than their readiness probes leave the Service with no
        // endpoint (seen: clients refused for a second during a 3.5 → 3.6 upgrade).
        if !back_at_its_version(m, p, leader_index) {
            if p.version_age_secs.unwrap_or(0) > UPGRADE_DEADLINE_SECS {
                return Some(wait(
                    WaitReason::UpgradeFailed,
                    format!(
                        "member {} did not become healthy at version {target} within {UPGRADE_DEADLINE_SECS}s (it reports {}); the upgrade is stopped. Set spec.version back to roll it back",
                        m.pod,
                        reports.map(|v| v.to_string()).unwrap_or_else(|| "nothing".into())
                    ),
                ));
            }
            return Some(wait(WaitReason::MemberUpgrading, format!("waiting for member {} to run {target}", m.pod)));
        }
        // Back, and drained for its restart: it serves again (`marks::pods_to_label`, beside
        // this step) before the next member leaves the client Service.
        if p.serving == Some(false) && !p.fenced {
            return Some(wait(
                WaitReason::MemberUpgrading,
                format!(
                    "member {} runs {target}; it returns to the client Service before the next member restarts",
                    m.pod
                ),
            ));
        }
    }
    None
}

/// Members of 3.7 get no experimental setting (etcd 3.7 removed every `--experimental-*` flag,
/// etcd#19959): before the first one starts, settings without a 3.7 equivalent refuse the
/// upgrade, and pods that still carry experimental settings (made or upgraded in place before
/// 3.6, an adopted pod's command line) are made again, with `etcd_flags::member_env`'s
/// translation, one at a time (`rollout`).
fn before_three_seven(o: &Observed, d: &Desired, etcd: &EtcdState, running: &Version) -> Option<Step> {
    if d.version.minor_line() < (3, 7) {
        return None;
    }
    let refused = crate::etcd_flags::untranslatable(&d.pod.etcd_env);
    if !refused.is_empty() && running.minor_line() < (3, 7) {
        return Some(wait(
            WaitReason::UpgradeRefused,
            format!(
                "spec.version refused, nothing was changed: etcd {} has no --experimental-* flags (etcd#19959) and these settings of spec.pod.etcdEnv have no equivalent the operator can write: {}; remove them or write them under their 3.6 names (upgrade guide 3.6 → 3.7) before upgrading from {running}",
                d.version,
                refused.join("; ")
            ),
        ));
    }
    let outdated = super::rollout::outdated(o, d, etcd);
    let first = *outdated.iter().find(|m| o.pods.get(&m.pod).is_some_and(|p| remade_for_three_seven(d, p)))?;
    Some(super::rollout::roll(o, d, etcd, first).unwrap_or_else(|| {
        wait(
            WaitReason::UpgradeDeferred,
            format!(
                "member {} carries experimental settings etcd {} does not have: it is made again first, once its volume is in sight",
                first.pod, d.version
            ),
        )
    }))
}

/// A pod that must be made again before the cluster runs etcd 3.7: it carries experimental
/// settings, and a pod made now would not.
pub(super) fn remade_for_three_seven(d: &Desired, p: &PodState) -> bool {
    d.version.minor_line() >= (3, 7)
        && !p.experimental_flags().is_empty()
        && crate::etcd_flags::untranslatable(&d.pod.etcd_env).is_empty()
}

/// The next upgrade step, if the pods do not all run the desired version. Called only when every
/// voter is healthy, no upgraded member is still coming back, and the membership matches the spec.
pub(super) fn next(o: &Observed, d: &Desired, etcd: &EtcdState) -> Option<Step> {
    let target = &d.version;
    let behind = behind(o, etcd, target);
    if behind.is_empty() {
        return None;
    }
    let running = running_version(o)?;
    if let Err(why) = check_change(&running, target) {
        return Some(wait(WaitReason::UpgradeRefused, format!("spec.version refused, nothing was changed: {why}")));
    }
    if target.minor_line() == (3, 6) && running.minor_line() < (3, 6) {
        let v2: Vec<&str> = o.pods.values().filter(|p| super::replay::serves_v2(p)).map(|p| p.name.as_str()).collect();
        if !v2.is_empty() {
            return Some(wait(
                WaitReason::UpgradeRefused,
                format!(
                    "spec.version refused, nothing was changed: etcd 3.6 has no v2 API and {} serve it (--enable-v2): remove ETCD_ENABLE_V2 from spec.pod.etcdEnv (the members restart without it) and make sure no v2 data is left (etcdutl check v2store, upgrade guide 3.5 → 3.6) before upgrading to {target}",
                    v2.join(", ")
                ),
            ));
        }
    }
    if let Some(step) = before_three_seven(o, d, etcd, &running) {
        return Some(step);
    }
    let leader = etcd.leader_member().map(|m| m.pod.as_str());
    let from =
        |pod: &str| o.pods.get(pod).and_then(|p| Version::parse(&p.version).ok()).unwrap_or_else(|| running.clone());
    // Followers first, in name order; each only once its restart replays nothing its new
    // version cannot apply (`replay`).
    if let Some(pod) = behind.iter().copied().filter(|p| Some(*p) != leader).min() {
        if let Some(step) = super::replay::before_restart(o, etcd, pod, &from(pod), target) {
            return Some(step);
        }
        if let Some(step) = drained_for_restart(o, pod) {
            return Some(step);
        }
        return Some(Step::UpgradeMember { pod: pod.to_string(), from: from(pod), to: target.clone() });
    }
    // Only the leader is left: hand leadership to an upgraded member first.
    let leader_pod = leader?;
    if let Some(step) = super::replay::before_restart(o, etcd, leader_pod, &from(leader_pod), target) {
        return Some(step);
    }
    if let Some(to) = etcd.voters().filter(|m| m.pod != leader_pod && m.is_healthy()).min_by(|a, b| a.pod.cmp(&b.pod)) {
        return Some(Step::MoveLeader {
            from_pod: leader_pod.to_string(),
            to: to.id,
            to_pod: to.pod.clone(),
            purpose: super::Purpose::Upgrade,
        });
    }
    // A one-member cluster has nobody to hand over to.
    Some(Step::UpgradeMember { pod: leader_pod.to_string(), from: from(leader_pod), to: target.clone() })
}

/// Before its in-place restart a member leaves the client Service while another member serves
/// there (`drained_first`): the restarted container's endpoint would leave the Service only
/// once its readiness probe failed, and connections routed to it meanwhile are refused. As a
/// step of its own, the drain and its wait survive an operator restart.
fn drained_for_restart(o: &Observed, pod: &str) -> Option<Step> {
    let others_serving = o.pods.values().any(|p| p.name != pod && p.ready && !p.deleting && p.serving != Some(false));
    others_serving.then(|| super::drained_first(o, pod)).flatten()
}

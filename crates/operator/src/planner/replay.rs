//! What a member replays when it restarts into a new minor, and when that is safe.
//!
//! etcd restarts from its newest raft snapshot (`member/snap/*.snap`) and applies every WAL
//! entry after it again. Two releases cannot apply what older members wrote:
//! - etcd 3.6 panics on every v2 request but the member-attribute and cluster-version PUTs
//!   ("detected disallowed v2 WAL for stage --v2-deprecation=write-only", `server/etcdserver/
//!   apply_v2.go`; etcd#20809, #20870, #21849). etcd 3.4 sends a v2 `QGET` through raft for every
//!   `/health` request (`etcdhttp` `checkHealth`: one entry per readiness probe of every member,
//!   every second), as 3.5 does with `--enable-v2` (`checkV2Health`);
//! - etcd 3.7 (v2 requests removed, etcd#21263) cannot apply entries 3.5 members wrote.
//!
//! So a member restarts into 3.6 (3.7) only once its newest snapshot is past the last entry a
//! 3.4 or v2-serving 3.5 (a 3.5) member may have written: the raft index at which every member
//! ran the current minor, from the minor-since mark (`marks`); a log this operator began at the
//! minor has none; anything unknown counts as written up to the leader's index now (fail closed).
//!
//! etcd has no RPC that takes a snapshot or tells where the last one is. After applying each
//! batch of committed entries (one raft `Ready`) it takes one if its applied index is more than
//! `--snapshot-count` past its last snapshot (`triggerSnapshot`), so afterwards its last snapshot
//! is at least `applied - count`. A member that has applied everything committed (its status'
//! applied index equals its raft index: no batch half-applied) and is at `boundary + count` or
//! more has a snapshot at or past the boundary; one that is still applying, once it is
//! `SNAPSHOT_SLACK` entries further. Each member is judged by its own applied index and its own
//! pod's count, right before it restarts. (`--snapshot-catchup-entries`, 3.6, sets how many entries
//! the leader keeps in memory for slow followers, not where a restart begins: no help here.)

use super::{Step, WaitReason, wait};
use crate::observed::{EtcdState, Observed, PodState, Since};
use crate::version::Version;

/// Entries a member that is still applying may have applied past its last snapshot check when
/// its status is read: the batch in progress (one raft `Ready`, at most 1 MiB of entries; in
/// practice a few, hundreds under heavy load).
pub const SNAPSHOT_SLACK: u64 = 1_000;

/// etcd's default `--snapshot-count`: 100000 up to 3.5, 10000 from 3.6 (3.6 upgrade guide,
/// "Flags with new defaults").
pub fn default_snapshot_count(v: &Version) -> u64 {
    if v.minor_line() < (3, 6) { 100_000 } else { 10_000 }
}

/// The `--snapshot-count` a member's pod runs with, and where it comes from; `Err` with the
/// setting when the pod sets one that cannot be read (a reference, no number).
pub fn snapshot_count(p: &PodState) -> Result<(u64, String), String> {
    match p.etcd_flag("snapshot-count") {
        None => {
            let v = Version::parse(&p.version).map_err(|e| format!("its version: {e}"))?;
            Ok((default_snapshot_count(&v), format!("etcd {}.{}'s default", v.major, v.minor)))
        }
        Some(Some(n)) => n.trim().parse().map(|n| (n, "its --snapshot-count".into())).map_err(|_| format!("{n:?}")),
        Some(None) => Err("a value the pod spec does not show".into()),
    }
}

/// Whether a pod serves etcd's v2 API (`--enable-v2`, a boolean flag: bare, or a true value).
pub fn serves_v2(p: &PodState) -> bool {
    match p.etcd_flag("enable-v2") {
        None => false,
        Some(None) => true,
        Some(Some(v)) => matches!(v, "1" | "t" | "T" | "TRUE" | "true" | "True"),
    }
}

/// The minor whose members wrote what `target` cannot replay, and what that is.
fn hazard(target: &Version) -> Option<(&'static str, &'static str)> {
    match target.minor_line() {
        (3, 6) => Some((
            "3.4",
            "etcd 3.6 panics replaying the v2 QGET entries etcd 3.4 (and 3.5 with --enable-v2) writes for every /health probe (etcd#20809)",
        )),
        (3, 7) => Some(("3.5", "etcd 3.7 cannot replay entries 3.5 members wrote (v2 requests are gone, etcd#21263)")),
        _ => None,
    }
}

/// Before `pod` (now at `from`) restarts at `target`: a wait (`UpgradeDeferred`) unless its
/// newest raft snapshot is known to be past every entry `target` cannot replay. Nothing to wait
/// for within a minor, or into a minor that replays everything.
pub(super) fn before_restart(
    o: &Observed,
    etcd: &EtcdState,
    pod: &str,
    from: &Version,
    target: &Version,
) -> Option<Step> {
    if from.minor_line() >= target.minor_line() {
        return None;
    }
    let (earlier, what) = hazard(target)?;
    let current = format!("{}.{}", from.major, from.minor);
    let now = etcd.members.iter().filter_map(|m| m.status.as_ref()).map(|s| s.raft_index).max().unwrap_or(0);
    let boundary = match &o.minor_since {
        Some(m) if m.minor == current => match m.since {
            Since::LogStart => return None,
            Since::Index(i) => i,
            Since::Unknown => now,
        },
        _ => now,
    };
    let status = etcd.member_for_pod(pod).and_then(|m| m.status.as_ref());
    let applied = status.map(|s| s.raft_applied_index);
    let idle = status.is_some_and(|s| s.raft_applied_index >= s.raft_index);
    let defer = |why: String| {
        Some(wait(
            WaitReason::UpgradeDeferred,
            format!(
                "the upgrade of member {pod} to {target} waits for a raft snapshot of it past index {boundary}, the last entry members of {earlier} may have written: {what}. {why}"
            ),
        ))
    };
    let Some(applied) = applied else { return defer("It does not answer.".into()) };
    let (count, source) = match o.pods.get(pod).map(snapshot_count) {
        Some(Ok(c)) => c,
        Some(Err(setting)) => return defer(format!("Its snapshot count ({setting}) cannot be read.")),
        None => return defer("Its pod is not in sight.".into()),
    };
    let (exact, busy) = (boundary.saturating_add(count), boundary.saturating_add(count).saturating_add(SNAPSHOT_SLACK));
    let proven = if idle { applied >= exact } else { applied >= busy };
    (!proven).then(|| {
        defer(format!(
            "etcd takes one every {count} applied entries ({source}); {pod} has applied {applied} and goes at {exact} with nothing left to apply ({busy} while applying). Writes bring it closer; a lower ETCD_SNAPSHOT_COUNT in spec.pod.etcdEnv restarts the members with it first"
        ))
    })?
}

//! The EtcdCluster's conditions (`kubectl describe`): their types, how each is set from the
//! observation and the planned step, and which changes are warnings. Pure.

use etcd_operator_api::condition::{self, Condition};

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
/// A member runs an etcd release with a known data-safety defect: which, what it risks, what to
/// upgrade to. Warning only: the operator does not act on it (an upgrade is the user's call).
pub const ETCD_ADVISORY: &str = "EtcdAdvisory";
/// Members of etcd 3.6 and later get `spec.pod.etcdEnv`'s experimental settings under their 3.6
/// names (etcd 3.7 has no `--experimental-*` flags): each translation, named (`etcd_flags`).
pub const ETCD_FLAGS_TRANSLATED: &str = "EtcdFlagsTranslated";
/// A running cluster turns TLS on or off (`planner::tls_transition::progress`): the phase as
/// reason, the member being moved and what clients see in the message.
pub const TLS_TRANSITION: &str = "TLSTransition";
/// Claims the operator retired (kept, never used or deleted again: their data check refused
/// them, or their member was replaced after its node was lost): each named, with why. True
/// while one exists; a person deletes them.
pub const VOLUMES_RETIRED: &str = "VolumesRetired";

pub(super) fn cond(type_: &str, ok: bool, reason: &str, message: impl Into<String>) -> Condition {
    Condition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        ..Default::default()
    }
}

/// A condition whose state the operator cannot tell (Kubernetes' `Unknown`).
fn unknown(type_: &str, reason: &str, message: &str) -> Condition {
    Condition { status: "Unknown".into(), ..cond(type_, false, reason, message) }
}

/// Sets, updates or removes each condition in `cs` for this observation and step.
pub(super) fn update(
    cs: &mut Vec<Condition>,
    o: &Observed,
    step: &Step,
    certificates: &crate::tls::auto::decision::Decision,
    now: &str,
) {
    let wait = match step {
        Step::Wait(w) => Some(w),
        _ => None,
    };
    match (&o.desired, &o.spec_refused) {
        (Ok(_), None) => condition::upsert(cs, cond(SPEC_VALID, true, "Valid", ""), now),
        (Ok(_), Some(errs)) if o.no_valid_spec => condition::upsert(
            cs,
            cond(
                SPEC_VALID,
                false,
                "InvalidSpec",
                format!(
                    "{}; no valid spec is on record: nothing refused is applied, no running member is changed (no rollout, upgrade, TLS or authentication step), and the cluster keeps healing with new members made without the refused settings",
                    errs.join("; ")
                ),
            ),
            now,
        ),
        (Ok(_), Some(errs)) => condition::upsert(
            cs,
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
        (Err(errs), _) => condition::upsert(cs, cond(SPEC_VALID, false, "InvalidSpec", errs.join("; ")), now),
    }
    // The operator cannot reach members whose pods are Ready: whether clients are served is
    // not known to it (Unknown), and no quorum loss is claimed.
    let unreachable = wait.filter(|w| w.reason == WaitReason::MembersUnreachable);
    let counts = o.etcd.as_ref().map(|e| (e.voters().filter(|m| m.is_healthy()).count(), e.voters().count()));
    // Hibernating or hibernated: no quorum on purpose, not a loss.
    let hibernating = o.hibernation_started && o.hibernation_asked != Ok(false);
    let available = match (counts, unreachable) {
        _ if hibernating => cond(
            AVAILABLE,
            false,
            "Hibernated",
            wait.map_or("member pods are stopping for the hibernation".to_string(), |w| w.message.clone()),
        ),
        (Some((healthy, voters)), _) if healthy >= EtcdState::quorum_of(voters) => {
            cond(AVAILABLE, true, "QuorumHealthy", format!("{healthy} of {voters} voting members healthy"))
        }
        (_, Some(w)) => unknown(AVAILABLE, w.reason.as_str(), &w.message),
        // A cluster that just formed whose other bootstrap members are still starting (the
        // planner's judgement): not a lost quorum.
        (Some((healthy, voters)), None) if matches!(wait, Some(w) if w.reason == WaitReason::Bootstrapping) => cond(
            AVAILABLE,
            false,
            "Bootstrapping",
            format!("the members of a new cluster are starting: {healthy} of {voters} voting members healthy so far"),
        ),
        (Some((healthy, voters)), None) => {
            cond(AVAILABLE, false, "NoQuorum", format!("{healthy} of {voters} voting members healthy"))
        }
        (None, None)
            if matches!(wait, Some(w) if w.reason == WaitReason::Bootstrapping)
                || matches!(step, Step::Bootstrap(_) | Step::CreateServices) =>
        {
            cond(AVAILABLE, false, "Bootstrapping", "the members of a new cluster are starting")
        }
        (None, None) => {
            cond(AVAILABLE, false, "Unreachable", o.etcd_error.clone().unwrap_or_else(|| "no member answers".into()))
        }
    };
    condition::upsert(cs, available, now);
    if let Ok(d) = &o.desired {
        crate::auth::update_condition(cs, &d.auth, &o.auth, o.etcd.as_ref().map(|e| &e.auth), now);
    }
    if let Ok(d) = &o.desired {
        let members = o.etcd.as_ref().map(|e| e.members.len()).unwrap_or(o.pods.len());
        if members != d.size && !o.paused {
            let reason = if members < d.size { "ScalingUp" } else { "ScalingDown" };
            let msg = format!("Current cluster size: {members}, desired cluster size: {}", d.size);
            condition::upsert(cs, cond(SCALING, true, reason, msg), now);
        } else {
            condition::remove(cs, SCALING);
        }
    }
    // The recovery that just finished (its member serves), else the last one recorded.
    let serving = |r: &&crate::observed::RecoveryRecord| {
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
        condition::upsert(cs, cond(RECOVERED_FROM_QUORUM_LOSS, true, &r.policy, msg), now);
    }
    match step {
        Step::Recover(r) => condition::upsert(
            cs,
            cond(
                RECOVERING,
                true,
                "QuorumLossRecovery",
                format!("starting member {} from {} at revision {}", r.member.name, r.from, r.revision),
            ),
            now,
        ),
        Step::Wait(w) if w.reason == WaitReason::Recovering => {
            condition::upsert(cs, cond(RECOVERING, true, "QuorumLossRecovery", w.message.clone()), now)
        }
        Step::RemoveMember { pod, why, cause, .. } if cause.replaces_a_loss() => condition::upsert(
            cs,
            cond(RECOVERING, true, "ReplacingMember", format!("replacing member {pod}: {why}")),
            now,
        ),
        Step::RetireVolume { pod, claim, why } => condition::upsert(
            cs,
            cond(
                RECOVERING,
                true,
                "RetiringVolume",
                format!("volume {claim} of member {pod} is kept but no longer used ({why}); the member is replaced"),
            ),
            now,
        ),
        Step::CreatePod(m) if m.existing && m.pvc => condition::upsert(
            cs,
            cond(RECOVERING, true, "RestartingMember", format!("restarting member {} on its volume", m.name)),
            now,
        ),
        Step::Wait(w) if w.reason == WaitReason::Stable => condition::remove(cs, RECOVERING),
        _ => {}
    }
    let target = o.desired.as_ref().map(|d| d.version.to_string()).unwrap_or_default();
    match step {
        Step::UpgradeMember { pod, from, to } => condition::upsert(
            cs,
            cond(UPGRADING, true, "Upgrading", format!("upgrading to {to}: member {pod} from {from}")),
            now,
        ),
        Step::MoveLeader { from_pod, to_pod, purpose: crate::planner::Purpose::Upgrade, .. } => condition::upsert(
            cs,
            cond(
                UPGRADING,
                true,
                "Upgrading",
                format!("upgrading to {target}: moving leadership from {from_pod} to {to_pod}"),
            ),
            now,
        ),
        Step::Wait(w) if w.reason == WaitReason::MemberUpgrading => condition::upsert(
            cs,
            cond(UPGRADING, true, "Upgrading", format!("upgrading to {target}: {}", w.message)),
            now,
        ),
        Step::Wait(w)
            if matches!(
                w.reason,
                WaitReason::UpgradeFailed | WaitReason::UpgradeRefused | WaitReason::UpgradeDeferred
            ) =>
        {
            condition::upsert(cs, cond(UPGRADING, false, w.reason.as_str(), w.message.clone()), now)
        }
        Step::Wait(w) if w.reason == WaitReason::Stable => condition::remove(cs, UPGRADING),
        _ => {}
    }
    // A TLS transition, while etcd answers (the member URLs are etcd's).
    if o.etcd.is_some() {
        match crate::planner::tls_transition::progress(o, step) {
            Some((reason, msg)) => condition::upsert(cs, cond(TLS_TRANSITION, true, reason, msg), now),
            None => condition::remove(cs, TLS_TRANSITION),
        }
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
            // Sorted: etcd lists alarms in no stable order, and a message that changes with it
            // would make a new Event at every reconcile (found by hack/chaos.sh: 13 in 10 s).
            let members: Vec<String> = e
                .alarms
                .iter()
                .filter(|a| a.kind == kind)
                .map(|a| {
                    e.members
                        .iter()
                        .find(|m| m.id == a.member_id)
                        .map(|m| m.pod.clone())
                        .unwrap_or_else(|| crate::naming::hex(a.member_id))
                })
                .collect::<std::collections::BTreeSet<String>>()
                .into_iter()
                .collect();
            if members.is_empty() {
                condition::remove(cs, type_);
            } else {
                let msg = format!("{} alarm raised by {}: {what}", kind.as_str(), members.join(", "));
                condition::upsert(cs, cond(type_, true, "AlarmRaised", msg), now);
            }
        }
    }
    // spec.TLS.auto: CertificatesReady.
    crate::status::tls_auto::update(cs, certificates, now);
    match advisory(o) {
        Some((reason, msg)) => condition::upsert(cs, cond(ETCD_ADVISORY, true, reason, msg), now),
        None => condition::remove(cs, ETCD_ADVISORY),
    }
    match retired_volumes(o) {
        Some(msg) => condition::upsert(cs, cond(VOLUMES_RETIRED, true, "ClaimsKept", msg), now),
        None => condition::remove(cs, VOLUMES_RETIRED),
    }
    match translated_flags(o) {
        Some(msg) => condition::upsert(cs, cond(ETCD_FLAGS_TRANSLATED, true, "ExperimentalFlagsRenamed", msg), now),
        None => condition::remove(cs, ETCD_FLAGS_TRANSLATED),
    }
    // Refused TLS material the cluster runs with: said while members keep healing with it, and
    // in place of the planner's own wait on it (a message that names no step: one Event).
    let tls_refused = (o.desired.is_ok() && !o.tls_material.refused.is_empty())
        .then(|| crate::tls::material::refused_message(&o.tls_material.refused));
    match wait {
        Some(w)
            if w.reason.needs_attention()
                && w.reason != WaitReason::InvalidSpec
                && (w.reason != WaitReason::TlsMaterialRefused || tls_refused.is_none()) =>
        {
            condition::upsert(cs, cond(DEGRADED, true, w.reason.as_str(), w.message.clone()), now)
        }
        _ if tls_refused.is_some() => {
            let msg = tls_refused.unwrap_or_default();
            condition::upsert(cs, cond(DEGRADED, true, WaitReason::TlsMaterialRefused.as_str(), msg), now)
        }
        Some(w) if w.reason == WaitReason::Stable => condition::remove(cs, DEGRADED),
        _ => {}
    }
    crate::status::tls_expiry::update_condition(cs, o, now);
    crate::status::tls_trust::update_condition(cs, o, now);
}

/// etcd 3.5.0–3.5.2 can come back from a kill (SIGKILL, OOM, node crash) under load without
/// entries it had applied, and then answer from a state that differs from the other members'
/// (etcd#13766, fixed in 3.5.3; etcd calls these releases unfit for production). Found by
/// `hack/chaos.sh`: a 3.5.1 member SIGKILLed under writes served its own lineage of a key.
/// Reported while a member pod runs such a release (pod versions: what runs, not the spec).
fn advisory(o: &Observed) -> Option<(&'static str, String)> {
    let mut affected: Vec<(&str, &str)> = o
        .pods
        .values()
        .filter(|p| !p.deleting)
        .filter_map(|p| {
            let v = crate::version::Version::parse(&p.version).ok()?;
            (v.minor_line() == (3, 5) && v.patch <= 2).then_some((p.name.as_str(), p.version.as_str()))
        })
        .collect();
    if affected.is_empty() {
        return None;
    }
    affected.sort();
    let list: Vec<String> = affected.iter().map(|(n, v)| format!("{n} ({v})")).collect();
    Some((
        "DataInconsistencyRisk",
        format!(
            "{} run etcd 3.5.0-3.5.2: a member killed under load can come back without writes it had applied and serve stale or divergent data (etcd#13766, fixed in 3.5.3); set spec.version to 3.5.3 or later",
            list.join(", ")
        ),
    ))
}

/// The retired claims, each with its member and why.
fn retired_volumes(o: &Observed) -> Option<String> {
    if o.retired_pvcs.is_empty() {
        return None;
    }
    let each: Vec<String> = o
        .retired_pvcs
        .values()
        .map(|v| format!("{} (member {}: {})", v.name, v.member, v.retired.as_deref().unwrap_or("retired")))
        .collect();
    Some(format!(
        "claims kept but no longer used, never deleted by the operator: {}; delete each once its data is no longer needed",
        each.join("; ")
    ))
}

/// What members of 3.6 and later get instead of `etcdEnv`'s experimental settings, while the
/// spec asks for 3.6 or later.
fn translated_flags(o: &Observed) -> Option<String> {
    let d = o.desired.as_ref().ok().filter(|d| d.version.minor_line() >= (3, 6))?;
    let (_, notes) = crate::etcd_flags::member_env(&d.pod.etcd_env, &d.version);
    (!notes.is_empty()).then(|| {
        format!(
            "members of etcd 3.6 and later get spec.pod.etcdEnv's experimental settings under their 3.6 names (etcd 3.7 has no --experimental-* flags): {}",
            notes.join("; ")
        )
    })
}

/// Whether a condition in this state is reported as a Warning Event (something is wrong, as
/// opposed to progress such as a cluster still bootstrapping).
pub fn is_warning(c: &Condition) -> bool {
    match c.type_.as_str() {
        DEGRADED => c.status == "True",
        AVAILABLE => c.status == "False" && c.reason != "Bootstrapping" && c.reason != "Hibernated",
        SPEC_VALID => c.status == "False",
        UPGRADING => c.status == "False",
        RECOVERED_FROM_QUORUM_LOSS => true,
        NO_SPACE | CORRUPT | ETCD_ADVISORY => c.status == "True",
        crate::status::tls_auto::CERTIFICATES_READY => crate::status::tls_auto::is_warning(c),
        crate::status::tls_expiry::CERTIFICATES_EXPIRING => crate::status::tls_expiry::is_warning(c),
        crate::status::requests::FENCED
        | crate::status::requests::SWITCHOVER
        | crate::status::requests::HIBERNATED
        | crate::status::requests::DEFRAGMENTATION => crate::status::requests::is_warning(c),
        _ => crate::auth::is_warning(c),
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

//! `spec.recovery` checked and defaulted: the quorum-loss policy and how long to wait. Pure.

/// Longest wait before a quorum-loss recovery.
pub const MAX_RECOVERY_AFTER_SECS: i64 = 86_400;
/// Default wait before a quorum-loss recovery.
pub const DEFAULT_RECOVERY_AFTER_SECS: i64 = 60;

/// `spec.recovery` as the planner reads it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecoverySettings {
    pub quorum_loss: QuorumLossPolicy,
    /// How long a quorum must have been unrecoverable before acting.
    pub after_secs: i64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum QuorumLossPolicy {
    /// Report and wait for a person (the default).
    #[default]
    Wait,
    /// Start a new cluster from the surviving member with the most data.
    FromSurvivor,
    /// Start a new cluster from the newest verified backup of this EtcdBackup.
    FromBackup { backup: String },
}

pub(super) fn recovery_policy(
    r: Option<&etcd_operator_api::cluster::RecoveryPolicy>,
    errs: &mut Vec<String>,
) -> RecoverySettings {
    let Some(r) = r else { return RecoverySettings { after_secs: DEFAULT_RECOVERY_AFTER_SECS, ..Default::default() } };
    let after_secs = r.after_seconds.unwrap_or(DEFAULT_RECOVERY_AFTER_SECS);
    if !(0..=MAX_RECOVERY_AFTER_SECS).contains(&after_secs) {
        errs.push(format!(
            "spec.recovery.afterSeconds {after_secs} is out of range: it must be between 0 and {MAX_RECOVERY_AFTER_SECS}"
        ));
    }
    let quorum_loss = match r.quorum_loss.as_str() {
        "" | "Wait" => QuorumLossPolicy::Wait,
        "FromSurvivor" => QuorumLossPolicy::FromSurvivor,
        "FromBackup" if r.backup.is_empty() => {
            errs.push("spec.recovery.quorumLoss FromBackup needs spec.recovery.backup (an EtcdBackup name)".into());
            QuorumLossPolicy::Wait
        }
        "FromBackup" => QuorumLossPolicy::FromBackup { backup: r.backup.clone() },
        other => {
            errs.push(format!("spec.recovery.quorumLoss {other:?} is not one of Wait, FromSurvivor, FromBackup"));
            QuorumLossPolicy::Wait
        }
    };
    RecoverySettings { quorum_loss, after_secs }
}

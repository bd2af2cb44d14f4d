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
    /// What happens to a member whose node is not Ready (`spec.recovery.nodeLoss`).
    pub node_loss: NodeLossSettings,
}

/// Default grace before a member without a volume on a node that is not Ready is replaced.
pub const DEFAULT_NODE_LOSS_AFTER_SECS: i64 = 60;
/// Default grace before a member with a volume is replaced, with `volumeMembers: Replace`.
pub const DEFAULT_VOLUME_NODE_LOSS_AFTER_SECS: i64 = 600;
const MAX_VOLUME_NODE_LOSS_AFTER_SECS: i64 = 604_800;

/// `spec.recovery.nodeLoss` as the planner reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeLossSettings {
    /// Seconds a member without a volume waits on a node that is not Ready.
    pub after_secs: i64,
    /// `Some(seconds)`: a member with a volume is replaced after that long (`Replace`);
    /// `None`: it waits for its node (`Wait`, the default).
    pub volume_after_secs: Option<i64>,
}

impl Default for NodeLossSettings {
    fn default() -> Self {
        NodeLossSettings { after_secs: DEFAULT_NODE_LOSS_AFTER_SECS, volume_after_secs: None }
    }
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
    let node_loss = node_loss(r.node_loss.as_ref(), errs);
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
    RecoverySettings { quorum_loss, after_secs, node_loss }
}

fn node_loss(n: Option<&etcd_operator_api::cluster::NodeLossPolicy>, errs: &mut Vec<String>) -> NodeLossSettings {
    let Some(n) = n else { return NodeLossSettings::default() };
    let after_secs = n.after_seconds.unwrap_or(DEFAULT_NODE_LOSS_AFTER_SECS);
    if !(0..=MAX_RECOVERY_AFTER_SECS).contains(&after_secs) {
        errs.push(format!(
            "spec.recovery.nodeLoss.afterSeconds {after_secs} is out of range: it must be between 0 and {MAX_RECOVERY_AFTER_SECS}"
        ));
    }
    let volume_after = n.volume_after_seconds.unwrap_or(DEFAULT_VOLUME_NODE_LOSS_AFTER_SECS);
    if !(0..=MAX_VOLUME_NODE_LOSS_AFTER_SECS).contains(&volume_after) {
        errs.push(format!(
            "spec.recovery.nodeLoss.volumeAfterSeconds {volume_after} is out of range: it must be between 0 and {MAX_VOLUME_NODE_LOSS_AFTER_SECS}"
        ));
    }
    let volume_after_secs = match n.volume_members.as_str() {
        "" | "Wait" => {
            if n.volume_after_seconds.is_some() {
                errs.push("spec.recovery.nodeLoss.volumeAfterSeconds applies only with volumeMembers: Replace".into());
            }
            None
        }
        "Replace" => Some(volume_after),
        other => {
            errs.push(format!("spec.recovery.nodeLoss.volumeMembers {other:?} is not one of Wait, Replace"));
            None
        }
    };
    NodeLossSettings { after_secs, volume_after_secs }
}

//! Who backup and verify pods run as on a PVC location. Pure.
//!
//! They run as the non-root user ([`NONROOT`], as member pods) with the pod's `fsGroup`, and so
//! pass Pod Security `restricted`. A claim whose files that user cannot use (a hostPath volume,
//! to which the kubelet applies no `fsGroup`, holding root's directories or backups from earlier
//! operator versions) makes the pod fail at once with [`PodError::AccessDenied`]
//! (`volume_access`). The planners then mark the claim as root's with the member volumes' mark
//! (`naming::DATA_OWNER_ANNOTATION` `= "0"`) and start the next pod at once, as root; pods to a
//! marked claim run as root from then on (every capability still dropped), which `restricted`
//! refuses: the `RunsAsRoot` condition and a Warning Event say so. A restored cluster's member
//! that reads such a claim runs as root too (`planner`, `NewMember::root_data`). The operator
//! never removes the mark; a person who gave the files to [`NONROOT`] may.

use std::collections::BTreeMap;

use etcd_operator_api::Condition;
use etcd_operator_api::condition;

use super::contract::PodError;
use crate::naming::{DATA_OWNER_ANNOTATION, ROOT_DATA_OWNER};
use crate::pod_security::NONROOT;

/// Condition type on an EtcdBackup or EtcdRestore whose pods run as root.
pub const RUNS_AS_ROOT: &str = "RunsAsRoot";

/// Whether a claim's annotations mark it as root's.
pub fn marked_root(annotations: Option<&BTreeMap<String, String>>) -> bool {
    annotations.and_then(|a| a.get(DATA_OWNER_ANNOTATION)).is_some_and(|o| o == ROOT_DATA_OWNER)
}

/// A pod's failure message that says a non-root user was denied access: the uid and what.
pub fn denied_to_non_root(message: &str) -> Option<(u32, String)> {
    match PodError::from_message(message) {
        PodError::AccessDenied { uid, what } if uid != 0 => Some((uid, what)),
        _ => None,
    }
}

/// What the pods do on the claim: the backup writes it, the restore reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Use {
    Backup,
    Restore,
}

impl Use {
    fn verb(self) -> &'static str {
        match self {
            Use::Backup => "writable",
            Use::Restore => "readable",
        }
    }

    fn pods(self) -> &'static str {
        match self {
            Use::Backup => "this backup's pods run",
            Use::Restore => "the verify pod and the restored member that reads the backup run",
        }
    }
}

const REFUSED_WHERE: &str = "such a pod is refused where Pod Security restricted is enforced";

/// The Event and condition message when the claim is marked now, after `uid` was denied `what`.
pub fn marked_now(u: Use, pvc: &str, uid: u32, what: &str) -> String {
    format!(
        "volume {pvc} is not {} by uid {uid} ({what}); marked {DATA_OWNER_ANNOTATION}={ROOT_DATA_OWNER}: {} as root from now on (every capability dropped); {REFUSED_WHERE}. To run as non-root again, give the volume's files to uid {NONROOT} and remove the annotation",
        u.verb(),
        u.pods()
    )
}

/// The condition message for a claim found marked (by an earlier attempt, or another object).
pub fn marked_before(u: Use, pvc: &str) -> String {
    format!(
        "volume {pvc} is marked {DATA_OWNER_ANNOTATION}={ROOT_DATA_OWNER} (files on it only root can use): {} as root (every capability dropped); {REFUSED_WHERE}",
        u.pods()
    )
}

/// The `RunsAsRoot` condition: `Some(message)` while pods run as root (a condition already
/// there keeps its message, which may say more), removed otherwise.
pub fn set_condition(conditions: &mut Vec<Condition>, root: Option<String>, fresh: bool, now: &str) {
    match root {
        Some(message) if fresh || condition::find(conditions, RUNS_AS_ROOT).is_none() => {
            let c = Condition {
                type_: RUNS_AS_ROOT.into(),
                status: "True".into(),
                reason: "VolumeMarkedRoot".into(),
                message,
                ..Default::default()
            };
            condition::upsert(conditions, c, now);
        }
        Some(_) => {}
        None => condition::remove(conditions, RUNS_AS_ROOT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_root_mark_counts_and_only_a_non_root_denial_marks() {
        let a = |v: &str| BTreeMap::from([(DATA_OWNER_ANNOTATION.to_string(), v.to_string())]);
        assert!(marked_root(Some(&a("0"))));
        assert!(!marked_root(Some(&a("65532"))) && !marked_root(None) && !marked_root(Some(&BTreeMap::new())));
        assert_eq!(denied_to_non_root("access denied to uid 65532: x"), Some((65532, "x".into())));
        assert_eq!(denied_to_non_root("access denied to uid 0: x"), None, "root denied: nothing to mark");
        assert_eq!(denied_to_non_root("connection refused"), None);
    }

    #[test]
    fn the_messages_say_who_why_and_what_restricted_does_with_it() {
        let m = marked_now(Use::Backup, "backups", 65532, "cannot create ... in /backup/ex (owner 0:0, mode 755)");
        for want in [
            "volume backups is not writable by uid 65532",
            "mode 755",
            "etcd.database.coreos.com/data-owner=0",
            "run as root",
            "refused where Pod Security restricted is enforced",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
        assert!(marked_now(Use::Restore, "b", 65532, "x").contains("not readable by uid 65532"));
        let mut cs = vec![];
        set_condition(&mut cs, Some(m.clone()), true, "t0");
        set_condition(&mut cs, Some(marked_before(Use::Backup, "backups")), false, "t1");
        assert_eq!(cs[0].message, m, "the first, fuller message stays");
        set_condition(&mut cs, None, false, "t2");
        assert!(cs.is_empty(), "the mark removed: no condition");
        set_condition(&mut cs, Some(marked_before(Use::Backup, "backups")), false, "t3");
        assert!(cs[0].message.contains("is marked"), "{:?}", cs[0]);
    }
}

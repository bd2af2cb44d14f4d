//! Which etcd cluster a backup is of. Each backup's sidecar records the etcd cluster ID of the
//! member it came from (`BackupMeta::cluster_id`): an EtcdCluster deleted and re-created under
//! its name, or restored, is another etcd cluster, and its EtcdBackup then backs up that one.
//! Retention deletes only backups of the cluster backed up now (`location::to_delete`), so the
//! last good backups of the one before are never lost to the new (maybe empty) cluster's; this
//! module says so to the user: a Warning Event at the first backup of another cluster, and a
//! condition while backups of other clusters are kept beside this EtcdBackup's. Pure.

use etcd_operator_api::backup::EtcdBackupStatus;
use etcd_operator_api::{Condition, condition};
use kube::runtime::events::EventType;

/// An Event to emit: type, reason, message.
pub type Note = (EventType, &'static str, String);
use super::contract::SaveReport;

/// Condition type: this EtcdBackup's backups of other etcd clusters are kept by retention.
pub const OTHER_CLUSTERS: &str = "BackupsOfOtherClustersKept";

fn counted(n: Option<&usize>) -> String {
    match n {
        Some(1) => "the 1 periodic backup".into(),
        Some(n) => format!("the {n} periodic backups"),
        None => "the backups".into(),
    }
}

/// The Warning for a successful backup of another etcd cluster than the last one (`st`, the
/// status before this result is recorded): the first backup after the EtcdCluster was deleted
/// and re-created, or restored. `None` for a backup of the same cluster, or when either side is
/// not known (status written before backups recorded clusters and no other cluster's backup
/// seen).
pub fn cluster_changed(st: &EtcdBackupStatus, r: &SaveReport) -> Option<Note> {
    let new = &r.backup.cluster_id;
    if new.is_empty() {
        return None;
    }
    let before = if st.cluster_id.is_empty() {
        // Status from before (or lost): another cluster's backups beside this one still tell.
        r.other_clusters.keys().find(|id| !id.is_empty())?.clone()
    } else if &st.cluster_id != new {
        st.cluster_id.clone()
    } else {
        return None;
    };
    Some((
        EventType::Warning,
        "BackupClusterChanged",
        format!(
            "this backup is of etcd cluster {new}, the last one was of etcd cluster {before}: the cluster was deleted and re-created, or restored. Retention deletes only backups of {new}; {} of {before} are kept (delete them by hand once they are not needed)",
            counted(r.other_clusters.get(&before))
        ),
    ))
}

/// The condition after a successful backup: True while this EtcdBackup's backups of other
/// clusters are kept beside the current cluster's (periodic backups list them), removed
/// otherwise.
pub fn set_condition(conditions: &mut Vec<Condition>, r: &SaveReport, now: &str) {
    if r.other_clusters.is_empty() {
        condition::remove(conditions, OTHER_CLUSTERS);
        return;
    }
    let kept: Vec<String> = r
        .other_clusters
        .iter()
        .map(|(id, n)| match id.as_str() {
            "" => format!("{n} written before backups recorded their cluster"),
            id => format!("{n} of etcd cluster {id}"),
        })
        .collect();
    let c = Condition {
        type_: OTHER_CLUSTERS.into(),
        status: "True".into(),
        reason: "OtherClustersKept".into(),
        message: format!(
            "retention keeps this backup's periodic backups of other clusters ({}) and deletes only those of etcd cluster {}, backed up now; delete the others by hand once they are not needed",
            kept.join(", "),
            r.backup.cluster_id
        ),
        ..Default::default()
    };
    condition::upsert(conditions, c, now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::location::BackupMeta;

    fn report(cluster_id: &str, others: &[(&str, usize)]) -> SaveReport {
        SaveReport {
            backup: BackupMeta { cluster_id: cluster_id.into(), ..Default::default() },
            other_clusters: others.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
            ..Default::default()
        }
    }

    fn status(cluster_id: &str) -> EtcdBackupStatus {
        EtcdBackupStatus { cluster_id: cluster_id.into(), ..Default::default() }
    }

    #[test]
    fn the_first_backup_of_another_cluster_is_a_warning_naming_both() {
        let (t, reason, note) = cluster_changed(&status("aa"), &report("bb", &[("aa", 3)])).unwrap();
        assert_eq!((t, reason), (EventType::Warning, "BackupClusterChanged"));
        assert!(
            note.contains("of etcd cluster bb") && note.contains("the 3 periodic backups of aa are kept"),
            "{note}"
        );
        assert_eq!(cluster_changed(&status("bb"), &report("bb", &[("aa", 3)])), None, "said once");
        assert_eq!(cluster_changed(&status("aa"), &report("", &[])), None, "the new cluster not known");
        // Status from before backups recorded clusters: another cluster's backups tell.
        assert!(cluster_changed(&status(""), &report("bb", &[("aa", 1)])).is_some());
        assert_eq!(cluster_changed(&status(""), &report("bb", &[("", 2)])), None, "only unrecorded ones");
        assert_eq!(cluster_changed(&status(""), &report("bb", &[])), None);
        // One-shot backups list no series: the change is still said.
        let (_, _, note) = cluster_changed(&status("aa"), &report("bb", &[])).unwrap();
        assert!(note.contains("the backups of aa are kept"), "{note}");
    }

    #[test]
    fn the_condition_lists_what_retention_keeps_and_goes_when_nothing_is_kept() {
        let mut cs = vec![];
        set_condition(&mut cs, &report("bb", &[("aa", 2), ("", 1)]), "t");
        let c = condition::find(&cs, OTHER_CLUSTERS).unwrap();
        assert_eq!(c.status, "True");
        assert!(
            c.message.contains("1 written before backups recorded their cluster, 2 of etcd cluster aa"),
            "{}",
            c.message
        );
        assert!(c.message.contains("only those of etcd cluster bb"), "{}", c.message);
        set_condition(&mut cs, &report("bb", &[]), "t");
        assert!(cs.is_empty());
    }
}

//! The per-EtcdBackup series: the last successful backup and the interval, the continuous
//! archive (durable time and revision, lag, gaps), the newest restorable revision and moment,
//! the last restore drill; dropped when the EtcdBackup is gone. No I/O: only the in-memory
//! registry.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;

impl Metrics {
    /// Record one EtcdBackup from its status: when its last backup succeeded (none: never, no
    /// series) and its interval (`None`: a one-shot backup, reported as 0).
    pub fn observe_backup(
        &self,
        namespace: &str,
        name: &str,
        last_success_unix: Option<i64>,
        interval: Option<Duration>,
    ) {
        let l = cluster(namespace, name);
        match last_success_unix {
            Some(t) => {
                self.backup_last_success.get_or_create(&l).set(t);
            }
            None => {
                self.backup_last_success.remove(&l);
            }
        }
        let secs = interval.map(|i| i.as_secs()).unwrap_or(0);
        self.backup_interval.get_or_create(&l).set(i64::try_from(secs).unwrap_or(i64::MAX));
        self.known.lock().unwrap_or_else(PoisonError::into_inner).backups.insert(l);
    }

    /// Record an EtcdBackup's continuous archive from its status (`None`: no archive, no series).
    pub fn observe_archive(
        &self,
        namespace: &str,
        name: &str,
        archive: Option<&etcd_operator_api::backup::ArchiveStatus>,
    ) {
        let l = cluster(namespace, name);
        let durable = archive
            .and_then(|a| a.durable_time.as_deref())
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        match durable {
            Some(t) => {
                self.archive_durable.get_or_create(&l).set(t.as_second());
            }
            None => {
                self.archive_durable.remove(&l);
            }
        }
        match archive {
            Some(a) => {
                self.archive_gaps.get_or_create(&l).set(i64::try_from(a.gaps.len()).unwrap_or(i64::MAX));
                self.archive_durable_revision.get_or_create(&l).set(a.durable_revision);
            }
            None => {
                self.archive_gaps.remove(&l);
                self.archive_durable_revision.remove(&l);
            }
        }
    }

    /// Record how far behind an EtcdBackup's archive is (`restorable::lag_secs`; `None`: no
    /// archive, or nothing durable to measure from yet: no series).
    pub fn observe_archive_lag(&self, namespace: &str, name: &str, lag_secs: Option<i64>) {
        let l = cluster(namespace, name);
        match lag_secs {
            Some(s) => {
                self.archive_lag.get_or_create(&l).set(s);
            }
            None => {
                self.archive_lag.remove(&l);
            }
        }
    }

    /// Record the newest restorable revision and moment of an EtcdBackup (`status.restorableRanges`:
    /// the range reaching furthest; none: no series).
    pub fn observe_restorable(
        &self,
        namespace: &str,
        name: &str,
        ranges: &[etcd_operator_api::backup::RestorableRange],
    ) {
        let l = cluster(namespace, name);
        let newest = ranges.iter().max_by(|a, b| (&a.to_time, a.to_revision).cmp(&(&b.to_time, b.to_revision)));
        let at = newest.and_then(|r| r.to_time.parse::<k8s_openapi::jiff::Timestamp>().ok());
        match (newest, at) {
            (Some(r), Some(t)) => {
                self.restorable_revision.get_or_create(&l).set(r.to_revision);
                self.restorable_time.get_or_create(&l).set(t.as_second());
            }
            _ => {
                self.restorable_revision.remove(&l);
                self.restorable_time.remove(&l);
            }
        }
    }

    /// Record an EtcdBackup's last restore drill from its status (`None`: none yet, no series).
    pub fn observe_drill(&self, namespace: &str, name: &str, drill: Option<&etcd_operator_api::backup::DrillResult>) {
        let l = cluster(namespace, name);
        let Some(d) = drill else {
            self.drill_success.remove(&l);
            self.drill_duration.remove(&l);
            self.drill_time.remove(&l);
            return;
        };
        self.drill_success.get_or_create(&l).set(i64::from(d.succeeded));
        self.drill_duration.get_or_create(&l).set(d.duration_seconds);
        match d.time.parse::<k8s_openapi::jiff::Timestamp>() {
            Ok(t) => {
                self.drill_time.get_or_create(&l).set(t.as_second());
            }
            Err(_) => {
                self.drill_time.remove(&l);
            }
        }
        self.known.lock().unwrap_or_else(PoisonError::into_inner).backups.insert(l);
    }

    /// Drop the series of EtcdBackups that no longer exist.
    pub fn retain_backups(&self, live: &BTreeSet<ClusterLabels>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<ClusterLabels> = known.backups.iter().filter(|k| !live.contains(*k)).cloned().collect();
        for l in gone {
            known.backups.remove(&l);
            self.backup_last_success.remove(&l);
            self.backup_interval.remove(&l);
            self.archive_durable.remove(&l);
            self.archive_gaps.remove(&l);
            self.archive_durable_revision.remove(&l);
            self.archive_lag.remove(&l);
            self.restorable_revision.remove(&l);
            self.restorable_time.remove(&l);
            self.drill_success.remove(&l);
            self.drill_duration.remove(&l);
            self.drill_time.remove(&l);
        }
    }
}

//! Prometheus metrics: reconcile counts, errors and durations per controller; per EtcdCluster
//! gauges (desired size, ready members, leader present, learners, db size, version, what the
//! planner waits for, when the first static TLS certificate expires), defragmentation and alarm series; per EtcdBackup the last success and the
//! interval, the continuous archive and the last restore drill. Series of deleted clusters and backups are dropped at scrape time. No I/O: `http`
//! serves `encode`. Here: the label sets, the families and their registration; the recording is
//! in `clusters` and `backups`.

mod backups;
mod clusters;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::observed::Observed;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    pub namespace: String,
    pub name: String,
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLabels {
    pub namespace: String,
    pub name: String,
    pub member: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlarmLabels {
    pub namespace: String,
    pub name: String,
    pub alarm: String,
}

/// The etcd alarms `etcd_operator_alarms` reports (etcd's `AlarmType` names).
pub const ALARMS: [&str; 2] = ["NOSPACE", "CORRUPT"];

fn duration_histogram() -> Histogram {
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
}

pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabels, Counter>,
    errors: Family<ControllerLabels, Counter>,
    duration: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    managed: Family<ClusterLabels, Gauge>,
    desired_size: Family<ClusterLabels, Gauge>,
    ready_members: Family<ClusterLabels, Gauge>,
    leader_present: Family<ClusterLabels, Gauge>,
    learners: Family<ClusterLabels, Gauge>,
    db_size: Family<ClusterLabels, Gauge>,
    version: Family<VersionLabels, Gauge>,
    waiting: Family<ReasonLabels, Gauge>,
    defrags: Family<MemberLabels, Counter>,
    defrag_reclaimed: Family<ClusterLabels, Counter>,
    alarms: Family<AlarmLabels, Gauge>,
    alarm_recoveries: Family<ClusterLabels, Counter>,
    certificate_expiry: Family<ClusterLabels, Gauge>,
    certificate_renewal_overdue: Family<ClusterLabels, Gauge>,
    backup_last_success: Family<ClusterLabels, Gauge>,
    backup_interval: Family<ClusterLabels, Gauge>,
    archive_durable: Family<ClusterLabels, Gauge>,
    archive_gaps: Family<ClusterLabels, Gauge>,
    archive_durable_revision: Family<ClusterLabels, Gauge>,
    archive_lag: Family<ClusterLabels, Gauge>,
    restorable_revision: Family<ClusterLabels, Gauge>,
    restorable_time: Family<ClusterLabels, Gauge>,
    drill_success: Family<ClusterLabels, Gauge>,
    drill_duration: Family<ClusterLabels, Gauge<f64, AtomicU64>>,
    drill_time: Family<ClusterLabels, Gauge>,
    /// Which series exist, to remove them when a label changes or the object is gone.
    known: Mutex<Known>,
    /// The clusters that exist now (the controller's cache), consulted at scrape time.
    live: Mutex<Option<LiveClusters>>,
    /// The EtcdBackups that exist now (the backup controller's cache), consulted at scrape time.
    live_backups: Mutex<Option<LiveClusters>>,
}

/// Lists the EtcdClusters (or EtcdBackups) that exist now, by namespace and name.
pub type LiveClusters = Box<dyn Fn() -> BTreeSet<ClusterLabels> + Send + Sync>;

/// The label values behind the series of each object, so that they can be removed.
#[derive(Default)]
struct Known {
    /// Clusters with any per-cluster series.
    clusters: BTreeSet<ClusterLabels>,
    /// Version label last set per cluster.
    versions: BTreeMap<ClusterLabels, String>,
    /// Wait reason last set per cluster (none while a step is acted on).
    waits: BTreeMap<ClusterLabels, String>,
    /// Members with a defrag series, per cluster.
    defragged: BTreeMap<ClusterLabels, BTreeSet<String>>,
    /// EtcdBackups with series.
    backups: BTreeSet<ClusterLabels>,
}

fn cluster(namespace: &str, name: &str) -> ClusterLabels {
    ClusterLabels { namespace: namespace.into(), name: name.into() }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("etcd_operator");
        let m = Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
            managed: Family::default(),
            desired_size: Family::default(),
            ready_members: Family::default(),
            leader_present: Family::default(),
            learners: Family::default(),
            db_size: Family::default(),
            version: Family::default(),
            waiting: Family::default(),
            defrags: Family::default(),
            defrag_reclaimed: Family::default(),
            alarms: Family::default(),
            alarm_recoveries: Family::default(),
            certificate_expiry: Family::default(),
            certificate_renewal_overdue: Family::default(),
            backup_last_success: Family::default(),
            backup_interval: Family::default(),
            archive_durable: Family::default(),
            archive_gaps: Family::default(),
            archive_durable_revision: Family::default(),
            archive_lag: Family::default(),
            restorable_revision: Family::default(),
            restorable_time: Family::default(),
            drill_success: Family::default(),
            drill_duration: Family::default(),
            drill_time: Family::default(),
            known: Mutex::default(),
            live: Mutex::default(),
            live_backups: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register("reconcile", "Reconciles run", m.reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed", m.errors.clone());
        registry.register("reconcile_duration_seconds", "Time per reconcile", m.duration.clone());
        registry.register(
            "cluster_managed",
            "1 for every EtcdCluster this operator handles (set at the start of each reconcile)",
            m.managed.clone(),
        );
        registry.register("cluster_desired_size", "spec.size of the EtcdCluster", m.desired_size.clone());
        registry.register("cluster_ready_members", "Healthy, ready voting members", m.ready_members.clone());
        registry.register("cluster_leader_present", "1 when a member reports a leader", m.leader_present.clone());
        registry.register("cluster_learners", "Members that are learners", m.learners.clone());
        registry.register("cluster_db_size_bytes", "Largest backend db size of any member", m.db_size.clone());
        registry.register("cluster_version_info", "1 for the version every member runs", m.version.clone());
        registry.register(
            "cluster_waiting",
            "1 for what the planner waits for (Stable: nothing to do); no series while it acts",
            m.waiting.clone(),
        );
        registry.register("defrag", "Defragmentations of a member", m.defrags.clone());
        registry.register("defrag_reclaimed_bytes", "Bytes defragmentation gave back", m.defrag_reclaimed.clone());
        registry.register("alarms", "1 while etcd reports this alarm (NOSPACE, CORRUPT)", m.alarms.clone());
        registry.register("alarm_recoveries", "Alarms the operator cleared", m.alarm_recoveries.clone());
        registry.register(
            "cluster_certificate_expiry_timestamp_seconds",
            "Unix time at which the first certificate of the cluster's static TLS Secrets (or a CA that issued one) expires",
            m.certificate_expiry.clone(),
        );
        registry.register(
            "cluster_certificate_renewal_overdue",
            "1 while a certificate renewed for the cluster (spec.TLS.auto, spec.TLS.certManager) is still in use past its renewal time and a grace",
            m.certificate_renewal_overdue.clone(),
        );
        registry.register(
            "backup_last_success_timestamp_seconds",
            "Unix time of the EtcdBackup's last successful backup",
            m.backup_last_success.clone(),
        );
        registry.register(
            "backup_interval_seconds",
            "backupIntervalInSecond of the EtcdBackup; 0 for a one-shot backup",
            m.backup_interval.clone(),
        );
        registry.register(
            "archive_durable_timestamp_seconds",
            "Unix time the EtcdBackup's continuous archive last wrote a segment: every change received before is in the store",
            m.archive_durable.clone(),
        );
        registry.register(
            "archive_gaps",
            "Revision ranges the EtcdBackup's continuous archive lost to compaction since its archiver started",
            m.archive_gaps.clone(),
        );
        registry.register(
            "archive_durable_revision",
            "Every change of the etcd cluster up to this revision is in the EtcdBackup's continuous archive",
            m.archive_durable_revision.clone(),
        );
        registry.register(
            "archive_lag_seconds",
            "0 while every change the EtcdBackup's archiver received is in the store; while writes fail or its pod does not answer, the age of the newest durable change",
            m.archive_lag.clone(),
        );
        registry.register(
            "backup_restorable_revision",
            "The newest revision the EtcdBackup's snapshots and archive can restore (status.restorableRanges)",
            m.restorable_revision.clone(),
        );
        registry.register(
            "backup_restorable_timestamp_seconds",
            "Unix time of the newest moment the EtcdBackup's snapshots and archive can restore (status.restorableRanges)",
            m.restorable_time.clone(),
        );
        registry.register(
            "backup_drill_last_success",
            "1 when the EtcdBackup's last restore drill passed (its restore equals the live cluster), 0 when it failed",
            m.drill_success.clone(),
        );
        registry.register(
            "backup_drill_duration_seconds",
            "How long the EtcdBackup's last restore drill took",
            m.drill_duration.clone(),
        );
        registry.register(
            "backup_drill_last_timestamp_seconds",
            "Unix time the EtcdBackup's last restore drill started",
            m.drill_time.clone(),
        );
        Metrics { registry, ..m }
    }
}

impl Metrics {
    pub fn reconciled(&self, controller: &str, took: Duration, failed: bool) {
        let l = ControllerLabels { controller: controller.into() };
        self.reconciles.get_or_create(&l).inc();
        if failed {
            self.errors.get_or_create(&l).inc();
        }
        self.duration.get_or_create(&l).observe(took.as_secs_f64());
    }

    /// Where `encode` learns which clusters still exist.
    pub fn set_live_clusters(&self, f: LiveClusters) {
        *self.live.lock().unwrap_or_else(PoisonError::into_inner) = Some(f);
    }

    /// Where `encode` learns which EtcdBackups still exist.
    pub fn set_live_backups(&self, f: LiveClusters) {
        *self.live_backups.lock().unwrap_or_else(PoisonError::into_inner) = Some(f);
    }

    /// A registry with one series in every family (an empty family is not encoded at all), for
    /// tests that read the exported names.
    #[cfg(test)]
    pub(crate) fn with_every_series() -> Metrics {
        let m = Metrics::default();
        let mut o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
        o.desired =
            crate::validation::validate("ex", &etcd_operator_api::EtcdClusterSpec { size: 1, ..Default::default() });
        o.tls_material.expiries.push(crate::tls::material::Expiry {
            secret: "s".into(),
            key: "server.crt".into(),
            subject: "CN=s".into(),
            not_after: 1,
        });
        let status = etcd_operator_api::EtcdClusterStatus { current_version: "3.5.1".into(), ..Default::default() };
        m.mark_managed("ns", "ex");
        m.reconciled("etcdcluster", Duration::from_millis(1), true);
        m.observe_cluster(&o, &status);
        m.certificate_renewal_overdue
            .get_or_create(&ClusterLabels { namespace: "ns".into(), name: "ex".into() })
            .set(0);
        let stable = crate::planner::Wait { reason: crate::planner::WaitReason::Stable, message: String::new() };
        m.observe_step(&o, &crate::planner::Step::Wait(stable));
        m.record_defrag("ns", "ex", "ex-abcde", 1);
        m.set_alarms("ns", "ex", false, false);
        m.record_alarm_recovery("ns", "ex");
        m.observe_backup("ns", "b", Some(1), None);
        let archive = etcd_operator_api::backup::ArchiveStatus {
            durable_time: Some("2026-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        m.observe_archive("ns", "b", Some(&archive));
        m.observe_archive_lag("ns", "b", Some(0));
        let range =
            etcd_operator_api::backup::RestorableRange { to_time: "2026-01-01T00:00:00Z".into(), ..Default::default() };
        m.observe_restorable("ns", "b", &[range]);
        let drill =
            etcd_operator_api::backup::DrillResult { time: "2026-01-01T00:00:00Z".into(), ..Default::default() };
        m.observe_drill("ns", "b", Some(&drill));
        m
    }

    /// Prometheus text format, without series of deleted clusters and backups.
    pub fn encode(&self) -> String {
        if let Some(live) = self.live.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            self.retain_clusters(&live());
        }
        if let Some(live) = self.live_backups.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            self.retain_backups(&live());
        }
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry).expect("writing to a String");
        s
    }
}

//! Prometheus metrics: reconcile counts, errors and durations per controller; per EtcdCluster
//! gauges (desired size, ready members, leader present, learners, db size, version, what the
//! planner waits for), defragmentation and alarm series; per EtcdBackup the last success and the
//! interval. Series of deleted clusters and backups are dropped at scrape time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
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
    backup_last_success: Family<ClusterLabels, Gauge>,
    backup_interval: Family<ClusterLabels, Gauge>,
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
            backup_last_success: Family::default(),
            backup_interval: Family::default(),
            known: Mutex::default(),
            live: Mutex::default(),
            live_backups: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register("reconcile", "Reconciles run", m.reconciles.clone());
        registry.register("reconcile_errors", "Reconciles that failed", m.errors.clone());
        registry.register("reconcile_duration_seconds", "Time per reconcile", m.duration.clone());
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
            "backup_last_success_timestamp_seconds",
            "Unix time of the EtcdBackup's last successful backup",
            m.backup_last_success.clone(),
        );
        registry.register(
            "backup_interval_seconds",
            "backupIntervalInSecond of the EtcdBackup; 0 for a one-shot backup",
            m.backup_interval.clone(),
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

    /// Record the gauges of one cluster from its observation and new status.
    pub fn observe_cluster(&self, o: &Observed, status: &etcd_operator_api::EtcdClusterStatus) {
        let l = ClusterLabels { namespace: o.namespace.clone(), name: o.name.clone() };
        let desired = o.desired.as_ref().map(|d| d.size as i64).unwrap_or(0);
        self.desired_size.get_or_create(&l).set(desired);
        self.ready_members.get_or_create(&l).set(status.ready_members as i64);
        let e = o.etcd.as_ref();
        self.leader_present.get_or_create(&l).set(e.and_then(|e| e.leader).is_some() as i64);
        self.learners.get_or_create(&l).set(e.map(|e| e.learners().count()).unwrap_or(0) as i64);
        let db =
            e.into_iter().flat_map(|e| e.members.iter()).filter_map(|m| m.status.as_ref()).map(|s| s.db_size).max();
        self.db_size.get_or_create(&l).set(db.unwrap_or(0));
        let mut known = self.known.lock().unwrap();
        known.clusters.insert(l.clone());
        let old = known.versions.get(&l).cloned();
        if old.as_deref() != Some(status.current_version.as_str()) {
            if let Some(old) = old {
                self.version.remove(&VersionLabels {
                    namespace: l.namespace.clone(),
                    name: l.name.clone(),
                    version: old,
                });
            }
            if !status.current_version.is_empty() {
                self.version
                    .get_or_create(&VersionLabels {
                        namespace: l.namespace.clone(),
                        name: l.name.clone(),
                        version: status.current_version.clone(),
                    })
                    .set(1);
            }
            known.versions.insert(l, status.current_version.clone());
        }
    }

    /// Record what the planner decided for one cluster: the reason it waits, or none while it
    /// acts. The series of an earlier reason is removed.
    pub fn observe_step(&self, o: &Observed, step: &crate::planner::Step) {
        let reason = match step {
            crate::planner::Step::Wait(w) => Some(w.reason.as_str()),
            _ => None,
        };
        self.set_waiting(&o.namespace, &o.name, reason);
    }

    fn set_waiting(&self, namespace: &str, name: &str, reason: Option<&str>) {
        let l = cluster(namespace, name);
        let mut known = self.known.lock().unwrap();
        known.clusters.insert(l.clone());
        let old = known.waits.get(&l).map(String::as_str);
        if old == reason {
            return;
        }
        if let Some(old) = known.waits.remove(&l) {
            self.waiting.remove(&ReasonLabels { namespace: l.namespace.clone(), name: l.name.clone(), reason: old });
        }
        if let Some(r) = reason {
            let labels = ReasonLabels { namespace: l.namespace.clone(), name: l.name.clone(), reason: r.into() };
            self.waiting.get_or_create(&labels).set(1);
            known.waits.insert(l, r.into());
        }
    }

    /// One defragmentation of `member` that gave back `reclaimed_bytes`.
    pub fn record_defrag(&self, namespace: &str, name: &str, member: &str, reclaimed_bytes: u64) {
        let l = cluster(namespace, name);
        let labels = MemberLabels { namespace: namespace.into(), name: name.into(), member: member.into() };
        self.defrags.get_or_create(&labels).inc();
        self.defrag_reclaimed.get_or_create(&l).inc_by(reclaimed_bytes);
        let mut known = self.known.lock().unwrap();
        known.defragged.entry(l.clone()).or_default().insert(member.into());
        known.clusters.insert(l);
    }

    /// The alarms etcd reports for the cluster now.
    pub fn set_alarms(&self, namespace: &str, name: &str, nospace: bool, corrupt: bool) {
        for (alarm, on) in ALARMS.into_iter().zip([nospace, corrupt]) {
            let labels = AlarmLabels { namespace: namespace.into(), name: name.into(), alarm: alarm.into() };
            self.alarms.get_or_create(&labels).set(on as i64);
        }
        self.known.lock().unwrap().clusters.insert(cluster(namespace, name));
    }

    /// The operator cleared an alarm of the cluster.
    pub fn record_alarm_recovery(&self, namespace: &str, name: &str) {
        let l = cluster(namespace, name);
        self.alarm_recoveries.get_or_create(&l).inc();
        self.known.lock().unwrap().clusters.insert(l);
    }

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
        self.known.lock().unwrap().backups.insert(l);
    }

    /// Drop the series of clusters that no longer exist.
    pub fn retain_clusters(&self, live: &BTreeSet<ClusterLabels>) {
        let mut known = self.known.lock().unwrap();
        let gone: Vec<ClusterLabels> = known.clusters.iter().filter(|k| !live.contains(*k)).cloned().collect();
        for l in gone {
            known.clusters.remove(&l);
            for f in [&self.desired_size, &self.ready_members, &self.leader_present, &self.learners, &self.db_size] {
                f.remove(&l);
            }
            self.defrag_reclaimed.remove(&l);
            self.alarm_recoveries.remove(&l);
            let (namespace, name) = (l.namespace.clone(), l.name.clone());
            for alarm in ALARMS {
                self.alarms.remove(&AlarmLabels {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    alarm: alarm.into(),
                });
            }
            if let Some(version) = known.versions.remove(&l) {
                self.version.remove(&VersionLabels { namespace: namespace.clone(), name: name.clone(), version });
            }
            if let Some(reason) = known.waits.remove(&l) {
                self.waiting.remove(&ReasonLabels { namespace: namespace.clone(), name: name.clone(), reason });
            }
            for member in known.defragged.remove(&l).unwrap_or_default() {
                self.defrags.remove(&MemberLabels { namespace: namespace.clone(), name: name.clone(), member });
            }
        }
    }

    /// Drop the series of EtcdBackups that no longer exist.
    pub fn retain_backups(&self, live: &BTreeSet<ClusterLabels>) {
        let mut known = self.known.lock().unwrap();
        let gone: Vec<ClusterLabels> = known.backups.iter().filter(|k| !live.contains(*k)).cloned().collect();
        for l in gone {
            known.backups.remove(&l);
            self.backup_last_success.remove(&l);
            self.backup_interval.remove(&l);
        }
    }

    /// Where `encode` learns which clusters still exist.
    pub fn set_live_clusters(&self, f: LiveClusters) {
        *self.live.lock().unwrap() = Some(f);
    }

    /// Where `encode` learns which EtcdBackups still exist.
    pub fn set_live_backups(&self, f: LiveClusters) {
        *self.live_backups.lock().unwrap() = Some(f);
    }

    /// A registry with one series in every family (an empty family is not encoded at all), for
    /// tests that read the exported names.
    #[cfg(test)]
    pub(crate) fn with_every_series() -> Metrics {
        let m = Metrics::default();
        let o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
        let status = etcd_operator_api::EtcdClusterStatus { current_version: "3.5.1".into(), ..Default::default() };
        m.reconciled("etcdcluster", Duration::from_millis(1), true);
        m.observe_cluster(&o, &status);
        let stable = crate::planner::Wait { reason: crate::planner::WaitReason::Stable, message: String::new() };
        m.observe_step(&o, &crate::planner::Step::Wait(stable));
        m.record_defrag("ns", "ex", "ex-abcde", 1);
        m.set_alarms("ns", "ex", false, false);
        m.record_alarm_recovery("ns", "ex");
        m.observe_backup("ns", "b", Some(1), None);
        m
    }

    /// Prometheus text format, without series of deleted clusters and backups.
    pub fn encode(&self) -> String {
        if let Some(live) = self.live.lock().unwrap().as_ref() {
            self.retain_clusters(&live());
        }
        if let Some(live) = self.live_backups.lock().unwrap().as_ref() {
            self.retain_backups(&live());
        }
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, &self.registry).expect("writing to a String");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{EtcdState, MemberState, MemberStatus};

    #[test]
    fn cluster_gauges_follow_status_and_disappear_with_the_cluster() {
        let m = Metrics::default();
        let mut o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
        o.desired = crate::validation::validate(
            "ex",
            &etcd_operator_api::EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() },
        );
        o.etcd = Some(EtcdState {
            cluster_id: 1,
            leader: Some(1),
            members: vec![MemberState {
                id: 1,
                status: Some(MemberStatus { db_size: 4096, leader: 1, ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        });
        let st = etcd_operator_api::EtcdClusterStatus {
            ready_members: 3,
            current_version: "3.5.1".into(),
            ..Default::default()
        };
        m.observe_cluster(&o, &st);
        m.reconciled("etcdcluster", Duration::from_millis(20), false);
        let text = m.encode();
        assert!(text.contains(r#"etcd_operator_cluster_desired_size{namespace="ns",name="ex"} 3"#), "{text}");
        assert!(text.contains(r#"etcd_operator_cluster_ready_members{namespace="ns",name="ex"} 3"#));
        assert!(text.contains(r#"etcd_operator_cluster_leader_present{namespace="ns",name="ex"} 1"#));
        assert!(text.contains(r#"etcd_operator_cluster_db_size_bytes{namespace="ns",name="ex"} 4096"#));
        assert!(text.contains(r#"etcd_operator_cluster_version_info{namespace="ns",name="ex",version="3.5.1"} 1"#));
        assert!(text.contains(r#"etcd_operator_reconcile_total{controller="etcdcluster"} 1"#), "{text}");
        m.retain_clusters(&BTreeSet::new());
        let text = m.encode();
        assert!(!text.contains(r#"name="ex""#), "{text}");
    }

    fn step_waiting(reason: crate::planner::WaitReason) -> crate::planner::Step {
        crate::planner::Step::Wait(crate::planner::Wait { reason, message: String::new() })
    }

    #[test]
    fn the_wait_reason_has_one_series_that_follows_the_planner() {
        use crate::planner::WaitReason;
        let m = Metrics::default();
        let o = Observed { name: "ex".into(), namespace: "ns".into(), ..Default::default() };
        m.observe_step(&o, &step_waiting(WaitReason::MemberUpgrading));
        let text = m.encode();
        assert!(
            text.contains(r#"etcd_operator_cluster_waiting{namespace="ns",name="ex",reason="MemberUpgrading"} 1"#),
            "{text}"
        );
        m.observe_step(&o, &step_waiting(WaitReason::UpgradeFailed));
        let text = m.encode();
        assert!(
            text.contains(r#"etcd_operator_cluster_waiting{namespace="ns",name="ex",reason="UpgradeFailed"} 1"#),
            "{text}"
        );
        assert!(!text.contains("MemberUpgrading"), "the old reason is gone: {text}");
        m.observe_step(&o, &crate::planner::Step::CreateServices);
        assert!(!m.encode().contains(r#"etcd_operator_cluster_waiting{"#), "no reason while acting");
        m.observe_step(&o, &step_waiting(WaitReason::Stable));
        m.retain_clusters(&BTreeSet::new());
        assert!(!m.encode().contains(r#"name="ex""#));
    }

    #[test]
    fn defrag_and_alarm_series_appear_and_disappear_with_the_cluster() {
        let m = Metrics::default();
        let live = std::sync::Arc::new(Mutex::new(BTreeSet::from([cluster("ns", "ex"), cluster("ns", "other")])));
        let l = live.clone();
        m.set_live_clusters(Box::new(move || l.lock().unwrap().clone()));
        m.record_defrag("ns", "ex", "ex-abcde", 1000);
        m.record_defrag("ns", "ex", "ex-abcde", 24);
        m.record_defrag("ns", "ex", "ex-fghij", 0);
        m.set_alarms("ns", "ex", true, false);
        m.record_alarm_recovery("ns", "ex");
        m.set_alarms("ns", "other", false, false);
        let text = m.encode();
        for line in [
            r#"etcd_operator_defrag_total{namespace="ns",name="ex",member="ex-abcde"} 2"#,
            r#"etcd_operator_defrag_total{namespace="ns",name="ex",member="ex-fghij"} 1"#,
            r#"etcd_operator_defrag_reclaimed_bytes_total{namespace="ns",name="ex"} 1024"#,
            r#"etcd_operator_alarms{namespace="ns",name="ex",alarm="NOSPACE"} 1"#,
            r#"etcd_operator_alarms{namespace="ns",name="ex",alarm="CORRUPT"} 0"#,
            r#"etcd_operator_alarm_recoveries_total{namespace="ns",name="ex"} 1"#,
            r#"etcd_operator_alarms{namespace="ns",name="other",alarm="NOSPACE"} 0"#,
            "# TYPE etcd_operator_defrag counter",
            "# TYPE etcd_operator_alarms gauge",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.set_alarms("ns", "ex", false, false);
        assert!(m.encode().contains(r#"etcd_operator_alarms{namespace="ns",name="ex",alarm="NOSPACE"} 0"#));
        // Deleted: dropped at the next scrape; the other cluster keeps its series.
        live.lock().unwrap().remove(&cluster("ns", "ex"));
        let text = m.encode();
        assert!(!text.contains(r#"name="ex""#), "{text}");
        assert!(text.contains(r#"etcd_operator_alarms{namespace="ns",name="other",alarm="NOSPACE"} 0"#), "{text}");
    }

    #[test]
    fn backup_series_follow_status_and_disappear_with_the_backup() {
        let m = Metrics::default();
        let live = std::sync::Arc::new(Mutex::new(BTreeSet::from([cluster("ns", "nightly"), cluster("ns", "once")])));
        let l = live.clone();
        m.set_live_backups(Box::new(move || l.lock().unwrap().clone()));
        m.observe_backup("ns", "nightly", None, Some(Duration::from_secs(3600)));
        let text = m.encode();
        assert!(
            text.contains(r#"etcd_operator_backup_interval_seconds{namespace="ns",name="nightly"} 3600"#),
            "{text}"
        );
        assert!(!text.contains("etcd_operator_backup_last_success_timestamp_seconds{"), "never succeeded: {text}");
        m.observe_backup("ns", "nightly", Some(1_767_225_600), Some(Duration::from_secs(3600)));
        m.observe_backup("ns", "once", Some(1_767_225_000), None);
        let text = m.encode();
        for line in [
            r#"etcd_operator_backup_last_success_timestamp_seconds{namespace="ns",name="nightly"} 1767225600"#,
            r#"etcd_operator_backup_last_success_timestamp_seconds{namespace="ns",name="once"} 1767225000"#,
            r#"etcd_operator_backup_interval_seconds{namespace="ns",name="once"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        live.lock().unwrap().remove(&cluster("ns", "nightly"));
        let text = m.encode();
        assert!(!text.contains(r#"name="nightly""#), "{text}");
        assert!(text.contains(r#"name="once""#), "{text}");
    }
}

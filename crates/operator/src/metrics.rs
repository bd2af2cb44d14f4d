//! Prometheus metrics: reconcile counts, errors and durations per controller, and per
//! EtcdCluster gauges (desired size, ready members, leader present, learners, db size, version).

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
    /// Version label last set per cluster, to remove the old series when it changes.
    versions: Mutex<BTreeMap<ClusterLabels, String>>,
    /// The clusters that exist now (the controller's cache), consulted at scrape time.
    live: Mutex<Option<LiveClusters>>,
}

/// Lists the EtcdClusters that exist now.
pub type LiveClusters = Box<dyn Fn() -> BTreeSet<ClusterLabels> + Send + Sync>;

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
            versions: Mutex::default(),
            live: Mutex::default(),
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
        let mut versions = self.versions.lock().unwrap();
        let old = versions.get(&l).cloned();
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
            versions.insert(l, status.current_version.clone());
        }
    }

    /// Drop the series of clusters that no longer exist.
    pub fn retain_clusters(&self, live: &BTreeSet<ClusterLabels>) {
        let mut versions = self.versions.lock().unwrap();
        let gone: Vec<ClusterLabels> = versions.keys().filter(|k| !live.contains(*k)).cloned().collect();
        for l in gone {
            for f in [&self.desired_size, &self.ready_members, &self.leader_present, &self.learners, &self.db_size] {
                f.remove(&l);
            }
            if let Some(v) = versions.remove(&l) {
                self.version.remove(&VersionLabels { namespace: l.namespace, name: l.name, version: v });
            }
        }
    }

    /// Where `encode` learns which clusters still exist.
    pub fn set_live_clusters(&self, f: LiveClusters) {
        *self.live.lock().unwrap() = Some(f);
    }

    /// Prometheus text format, without series of deleted clusters.
    pub fn encode(&self) -> String {
        if let Some(live) = self.live.lock().unwrap().as_ref() {
            self.retain_clusters(&live());
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
}

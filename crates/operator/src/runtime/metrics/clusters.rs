//! The per-EtcdCluster series: gauges from the observation and status, the planner's wait
//! reason, defragmentation and alarm series; and dropping them all when the cluster is gone.
//! No I/O: only the in-memory registry.

use std::collections::BTreeSet;

use super::*;

impl Metrics {
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
        match crate::status::tls_expiry::earliest(o) {
            Some(t) => {
                self.certificate_expiry.get_or_create(&l).set(t);
            }
            None => {
                self.certificate_expiry.remove(&l);
            }
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        match crate::status::tls_expiry::renewal_overdue(o, now) {
            Some(late) => {
                self.certificate_renewal_overdue.get_or_create(&l).set(late as i64);
            }
            None => {
                self.certificate_renewal_overdue.remove(&l);
            }
        }
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
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
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
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
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        known.defragged.entry(l.clone()).or_default().insert(member.into());
        known.clusters.insert(l);
    }

    /// This operator handles the cluster: said at the start of every reconcile of a cluster in
    /// its scope, before anything that can fail (an unreadable spec, a failed write), so that
    /// `EtcdOperatorDown` tells an operator that is down from one that is busy or refusing.
    pub fn mark_managed(&self, namespace: &str, name: &str) {
        let l = cluster(namespace, name);
        self.managed.get_or_create(&l).set(1);
        self.known.lock().unwrap_or_else(PoisonError::into_inner).clusters.insert(l);
    }

    /// The alarm list could not be read (etcd not reached): the cluster's alarm series go, so
    /// that the alerts fall back on etcd's own gauge instead of a stale answer.
    pub fn forget_alarms(&self, namespace: &str, name: &str) {
        for alarm in ALARMS {
            self.alarms.remove(&AlarmLabels { namespace: namespace.into(), name: name.into(), alarm: alarm.into() });
        }
    }

    /// The alarms etcd reports for the cluster now.
    pub fn set_alarms(&self, namespace: &str, name: &str, nospace: bool, corrupt: bool) {
        for (alarm, on) in ALARMS.into_iter().zip([nospace, corrupt]) {
            let labels = AlarmLabels { namespace: namespace.into(), name: name.into(), alarm: alarm.into() };
            self.alarms.get_or_create(&labels).set(on as i64);
        }
        self.known.lock().unwrap_or_else(PoisonError::into_inner).clusters.insert(cluster(namespace, name));
    }

    /// The operator cleared an alarm of the cluster.
    pub fn record_alarm_recovery(&self, namespace: &str, name: &str) {
        let l = cluster(namespace, name);
        self.alarm_recoveries.get_or_create(&l).inc();
        self.known.lock().unwrap_or_else(PoisonError::into_inner).clusters.insert(l);
    }

    /// Drop the series of clusters that no longer exist.
    pub fn retain_clusters(&self, live: &BTreeSet<ClusterLabels>) {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let gone: Vec<ClusterLabels> = known.clusters.iter().filter(|k| !live.contains(*k)).cloned().collect();
        for l in gone {
            known.clusters.remove(&l);
            let families =
                [&self.managed, &self.desired_size, &self.ready_members, &self.leader_present, &self.learners];
            for f in families.into_iter().chain([&self.db_size]) {
                f.remove(&l);
            }
            self.defrag_reclaimed.remove(&l);
            self.certificate_expiry.remove(&l);
            self.certificate_renewal_overdue.remove(&l);
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
}

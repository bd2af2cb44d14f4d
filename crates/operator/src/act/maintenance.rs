//! Maintenance steps: defragment a member; recover from NOSPACE (compact, defragment every
//! member, disarm once far enough below the quota). I/O: Kubernetes API and etcd.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use super::{Done, Error, Target, done, ignore_404};
use crate::etcd;
use crate::naming;
use crate::planner::maintenance::bytes;

impl Target<'_> {
    /// Defragment one member and mark its pod with the time; returns the database file size
    /// before and after.
    pub(super) async fn defragment(&self, pod: &str) -> Result<(i64, i64, std::time::Duration), Error> {
        let ep = self.endpoints.get(pod).ok_or_else(|| Error::Refused(format!("member {pod} has no address")))?;
        let sizes = etcd::defragment(ep, self.endpoints.tls()).await?;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let patch = serde_json::json!({"metadata": {"annotations": {naming::DEFRAGMENTED_AT_ANNOTATION: now}}});
        ignore_404(
            Api::<Pod>::namespaced(self.client.clone(), &self.ns())
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await,
        )?;
        Ok(sizes)
    }

    /// NOSPACE: compact (keeping the revision-mode retention), defragment every member that
    /// answers in the planned order, then disarm if every member is far enough below the quota.
    pub(super) async fn recover_space(&self, r: &crate::planner::SpaceRecovery) -> Result<Done, Error> {
        let endpoints: Vec<String> = r.members.iter().filter_map(|p| self.endpoints.get(p).cloned()).collect();
        let revision = etcd::revision(&endpoints, self.endpoints.tls()).await?;
        let compact_to = (revision - r.keep_revisions.unwrap_or(0)).max(1);
        etcd::compact(&endpoints, self.endpoints.tls(), compact_to).await?;
        // etcd refuses writes while its database *file* is at the quota: the space compaction
        // freed returns to the disk only by defragmenting. (Every member: what a member reports
        // in use lags its compaction until its next commit.)
        let mut sizes = vec![];
        let mut defragmented = vec![];
        for pod in &r.members {
            match self.defragment(pod).await {
                Ok((before, after, took)) => {
                    sizes.push(format!("{pod} {} → {} in {:.2}s", bytes(before), bytes(after), took.as_secs_f64()));
                    defragmented.push((pod.clone(), (before - after).max(0) as u64));
                }
                Err(e) => sizes.push(format!("{pod} not defragmented ({e})")),
            }
        }
        let mut in_use = 0;
        for ep in &endpoints {
            in_use = in_use.max(etcd::db_size(ep, self.endpoints.tls()).await?.1);
        }
        let what = format!("compacted to revision {compact_to}; defragmented {}", sizes.join(", "));
        if in_use >= r.disarm_below_bytes {
            // Marked only once the attempt ran to the end: an attempt that failed half-way
            // (an error above) is retried, not taken for "the keys do not fit".
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let mark = format!("{revision} {now}");
            let patch = serde_json::json!({"metadata": {"annotations": {naming::NOSPACE_RECOVERY_ANNOTATION: mark}}});
            Api::<EtcdCluster>::namespaced(self.client.clone(), &self.ns())
                .patch(&self.cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(Done {
                defragmented,
                ..done(
                    "NoSpaceNotRecovered",
                    format!(
                        "NOSPACE: {what}; still {} in use, at or above {} ({}% of the quota): the alarm stays until keys are deleted or the quota is raised",
                        bytes(in_use),
                        bytes(r.disarm_below_bytes),
                        crate::planner::maintenance::DISARM_BELOW_PERCENT
                    ),
                )
            });
        }
        // Every NOSPACE alarm raised by now, not only those planned from: members reach the quota
        // one after another, and one left raised keeps refusing writes.
        let mut raised: Vec<crate::observed::Alarm> = etcd::alarms_of(&endpoints, self.endpoints.tls())
            .await?
            .into_iter()
            .filter(|a| a.kind == crate::observed::AlarmKind::NoSpace)
            .collect();
        for a in &r.alarms {
            if !raised.contains(a) {
                raised.push(a.clone());
            }
        }
        for a in &raised {
            etcd::disarm(&endpoints, self.endpoints.tls(), a).await?;
        }
        // Done: the next NOSPACE episode starts afresh.
        let patch = serde_json::json!({"metadata": {"annotations": {naming::NOSPACE_RECOVERY_ANNOTATION: null}}});
        Api::<EtcdCluster>::namespaced(self.client.clone(), &self.ns())
            .patch(&self.cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let note = format!("NOSPACE alarm disarmed: {what}; {} in use now", bytes(in_use));
        Ok(Done { defragmented, alarm_recovered: true, ..done("NoSpaceRecovered", note) })
    }
}

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

/// How a defragmentation call went.
pub(super) enum Defragmented {
    /// File size before and after, how long the call took, and the time written on the pod
    /// (`DEFRAGMENTED_AT`), which the controller waits to see in its cache.
    Done((i64, i64, std::time::Duration), String),
    /// The member did not answer before: nothing was started.
    NotStarted(Error),
}

impl Target<'_> {
    async fn pod_annotation(&self, pod: &str, key: &str, value: String) -> Result<(), Error> {
        let patch = serde_json::json!({"metadata": {"annotations": {key: value}}});
        let api = Api::<Pod>::namespaced(self.client.clone(), &self.ns());
        Ok(ignore_404(api.patch(pod, &PatchParams::default(), &Patch::Merge(&patch)).await)?)
    }

    /// Defragment one member and mark its pod with the time; returns the database file size
    /// before and after. Its start is recorded on the pod first, once the member answered: a
    /// call that fails or times out after that may leave the defragmentation running inside
    /// etcd (`planner::maintenance` then defragments no other member for a while).
    pub(super) async fn defragment(&self, pod: &str) -> Result<Defragmented, Error> {
        let ep = self.endpoints.get(pod).ok_or_else(|| Error::Refused(format!("member {pod} has no address")))?;
        if let Err(e) = etcd::db_size(ep, self.endpoints.access()).await {
            return Ok(Defragmented::NotStarted(e.into()));
        }
        let now = || k8s_openapi::jiff::Timestamp::now().to_string();
        self.pod_annotation(pod, naming::DEFRAG_STARTED_ANNOTATION, now()).await?;
        let sizes = etcd::defragment(ep, self.endpoints.access()).await?;
        let at = now();
        self.pod_annotation(pod, naming::DEFRAGMENTED_AT_ANNOTATION, at.clone()).await?;
        Ok(Defragmented::Done(sizes, at))
    }

    /// NOSPACE: compact (keeping the revision-mode retention), defragment every member that
    /// answers in the planned order, then disarm if every member is far enough below the quota.
    pub(super) async fn recover_space(&self, r: &crate::planner::SpaceRecovery) -> Result<Done, Error> {
        let endpoints: Vec<String> = r.members.iter().filter_map(|p| self.endpoints.get(p).cloned()).collect();
        let revision = etcd::revision(&endpoints, self.endpoints.access()).await?;
        let compact_to = (revision - r.keep_revisions.unwrap_or(0)).max(1);
        etcd::compact(&endpoints, self.endpoints.access(), compact_to).await?;
        // etcd refuses writes while its database *file* is at the quota: the space compaction
        // freed returns to the disk only by defragmenting. (Every member: what a member reports
        // in use lags its compaction until its next commit.)
        let mut sizes = vec![];
        let mut defragmented = vec![];
        for pod in &r.members {
            match self.defragment(pod).await {
                Ok(Defragmented::Done((before, after, took), _)) => {
                    sizes.push(format!("{pod} {} → {} in {:.2}s", bytes(before), bytes(after), took.as_secs_f64()));
                    defragmented.push((pod.clone(), (before - after).max(0) as u64));
                }
                Ok(Defragmented::NotStarted(e)) => sizes.push(format!("{pod} not defragmented ({e})")),
                // It may still run inside etcd: no other member starts beside it.
                Err(e) => {
                    return Err(Error::Refused(format!(
                        "NOSPACE: compacted to revision {compact_to}; defragmented {}; the defragmentation of {pod} did not finish ({e}) and may still run: no other member is defragmented until it ends",
                        if sizes.is_empty() { "none".to_string() } else { sizes.join(", ") }
                    )));
                }
            }
        }
        let mut in_use = 0;
        for ep in &endpoints {
            in_use = in_use.max(etcd::db_size(ep, self.endpoints.access()).await?.1);
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
        let mut raised: Vec<crate::observed::Alarm> = etcd::alarms_of(&endpoints, self.endpoints.access())
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
            etcd::disarm(&endpoints, self.endpoints.access(), a).await?;
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

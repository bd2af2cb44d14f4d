//! An EtcdRestore whose EtcdCluster name is taken by a cluster it did not create waits for that
//! cluster to be deleted (a restore never replaces one), but only for [`CLUSTER_WAIT_SECS`] from
//! when it found it: the `WaitingForCluster` condition's `lastTransitionTime` says since when
//! (status: it survives operator restarts). A cluster still there then, or seen gone only later
//! (deleted weeks after, or while the operator was down), calls the restore off, so a cluster
//! deleted long after never comes back from an old backup on its own. Pure.

use etcd_operator_api::{Condition, condition};
use k8s_openapi::jiff::Timestamp;

/// Condition type: since when the restore waits for an EtcdCluster of its name to go (True), or
/// that it went in time (False).
pub const WAITING_CONDITION: &str = "WaitingForCluster";
/// How long a restore waits for an existing EtcdCluster of its name to be deleted.
pub const CLUSTER_WAIT_SECS: i64 = 30 * 60;

/// Since when the restore waits (None: it never found the name taken, for this spec).
pub fn since(conditions: &[Condition]) -> Option<Timestamp> {
    condition::find(conditions, WAITING_CONDITION)
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time.parse::<Timestamp>().ok())
}

/// The wait that began `since` is over at `now`.
pub fn expired(since: Option<Timestamp>, now: Timestamp) -> bool {
    since.is_some_and(|s| now.duration_since(s).as_secs() >= CLUSTER_WAIT_SECS)
}

/// The cluster is there: the condition says so from now on (its time is kept while it stays
/// True). `Ok(why)` while waiting, `Err(why)` once the wait is over (the restore is called off).
pub fn found(conditions: &mut Vec<Condition>, cluster: &str, now: Timestamp) -> Result<String, String> {
    let since = since(conditions);
    let why = format!(
        "EtcdCluster {cluster} already exists and was not created by this restore: a restore never replaces a running cluster; delete it first (the restore proceeds once it is gone, if within {} minutes)",
        CLUSTER_WAIT_SECS / 60
    );
    let c = Condition {
        type_: WAITING_CONDITION.into(),
        status: "True".into(),
        reason: "ClusterExists".into(),
        message: why.clone(),
        ..Default::default()
    };
    condition::upsert(conditions, c, &super::rfc3339(now));
    if expired(since, now) {
        return Err(format!(
            "EtcdCluster {cluster} still exists {} minutes after this restore found it: the restore is called off (it never replaces a cluster, and never fires on its own when the cluster is deleted later); delete the cluster, then change this EtcdRestore's spec or create it again",
            CLUSTER_WAIT_SECS / 60
        ));
    }
    Ok(why)
}

/// The cluster is gone. `Err(why)` when that was seen only after the wait (the restore is
/// called off); else the restore goes on, and a condition of an earlier wait says it ended.
pub fn gone(conditions: &mut Vec<Condition>, cluster: &str, now: Timestamp) -> Result<(), String> {
    let since = since(conditions);
    if expired(since, now) {
        return Err(format!(
            "EtcdCluster {cluster} was seen gone more than {} minutes after this restore found it in place: the restore is called off, so a cluster deleted long after never comes back from this backup on its own; to restore now, change this EtcdRestore's spec or create it again",
            CLUSTER_WAIT_SECS / 60
        ));
    }
    if since.is_some() {
        let c = Condition {
            type_: WAITING_CONDITION.into(),
            status: "False".into(),
            reason: "ClusterGone".into(),
            message: format!("EtcdCluster {cluster} was deleted in time; restoring"),
            ..Default::default()
        };
        condition::upsert(conditions, c, &super::rfc3339(now));
    }
    Ok(())
}

//! Durable marks the operator keeps in the EtcdCluster's own metadata, computed purely from an
//! observation. They make the safety rules independent of status (which a user, a migration
//! or a lost write can reset) and of the operator's memory (which a restart loses):
//! - the etcd cluster ID once the cluster formed: it is never bootstrapped again;
//! - the last valid spec: an invalid edit is refused while the cluster heals under this one;
//! - since when a quorum cannot come back: the clock of `spec.recovery.afterSeconds`;
//! - a recovery under way, removed once its first member serves.

use std::collections::BTreeMap;

use crate::naming::{
    CLUSTER_ID_ANNOTATION, LAST_VALID_SPEC_ANNOTATION, QUORUM_LOST_AT_ANNOTATION, RECOVERY_ANNOTATION,
};
use crate::observed::Observed;
use crate::planner::recovery;

/// Annotation changes: `Some(v)` sets, `None` removes. Empty when nothing changes.
pub type AnnotationChanges = BTreeMap<String, Option<String>>;

/// What to change in the EtcdCluster's annotations. `spec_json` is the current spec as JSON;
/// `now` an RFC 3339 time.
pub fn cluster_annotations(
    o: &Observed,
    current: &BTreeMap<String, String>,
    spec_json: &str,
    now: &str,
) -> AnnotationChanges {
    let mut out = AnnotationChanges::new();
    let mut set = |k: &str, v: Option<String>| {
        if current.get(k) != v.as_ref() {
            out.insert(k.to_string(), v);
        }
    };
    let recovered = o
        .recovery_record
        .as_ref()
        .is_some_and(|r| o.etcd.as_ref().and_then(|e| e.member_for_pod(&r.member)).is_some_and(|m| m.is_healthy()));
    if let Some(e) = o.etcd.as_ref().filter(|e| e.cluster_id != 0) {
        // During a recovery only the new cluster's ID is recorded, once it serves.
        if o.recovery_record.is_none() || recovered {
            set(CLUSTER_ID_ANNOTATION, Some(crate::etcd::hex(e.cluster_id)));
        }
    }
    if recovered {
        set(RECOVERY_ANNOTATION, None);
    }
    if o.desired.is_ok() && o.spec_refused.is_none() {
        set(LAST_VALID_SPEC_ANNOTATION, Some(spec_json.to_string()));
    }
    match (recovery::quorum_unrecoverable(o), current.contains_key(QUORUM_LOST_AT_ANNOTATION)) {
        (true, false) => set(QUORUM_LOST_AT_ANNOTATION, Some(now.to_string())),
        (false, true) => set(QUORUM_LOST_AT_ANNOTATION, None),
        _ => {}
    }
    out
}

/// Member pods still missing the cluster-UID label (made by an earlier operator version).
pub fn pods_to_label(o: &Observed) -> Vec<String> {
    o.pods.values().filter(|p| !p.labelled && !p.deleting).map(|p| p.name.clone()).collect()
}

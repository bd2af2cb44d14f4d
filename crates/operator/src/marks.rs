//! Durable marks the operator keeps in the EtcdCluster's own metadata, computed purely from an
//! observation. They make the safety rules independent of status (which a user, a migration
//! or a lost write can reset) and of the operator's memory (which a restart loses):
//! - the etcd cluster ID once the cluster formed: it is never bootstrapped again;
//! - the last valid spec: an invalid edit is refused while the cluster heals under this one;
//! - since when a quorum cannot come back: the clock of `spec.recovery.afterSeconds`;
//! - a recovery under way, removed once its first member serves;
//! - the raft index at which the cluster finished its last minor upgrade: 3.6 → 3.7 waits for a
//!   raft snapshot past it (`planner::upgrade`);
//! - the Secrets of a TLS side being turned off while members still use them
//!   (`tls::transition::Leaving`).

use std::collections::BTreeMap;

use crate::naming::{
    CLUSTER_ID_ANNOTATION, LAST_RECOVERY_ANNOTATION, LAST_VALID_SPEC_ANNOTATION, MINOR_SINCE_ANNOTATION,
    QUORUM_LOST_AT_ANNOTATION, RECOVERY_ANNOTATION, TLS_LEAVING_ANNOTATION,
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
            set(CLUSTER_ID_ANNOTATION, Some(crate::naming::hex(e.cluster_id)));
        }
    }
    if recovered {
        // Kept as the last recovery: status reports it from there on every reconcile (a status
        // written from a stale cache must not be able to drop what was lost).
        let done = o.recovery_record.as_ref().and_then(|r| serde_json::to_string(r).ok());
        set(LAST_RECOVERY_ANNOTATION, done);
        set(RECOVERY_ANNOTATION, None);
    }
    if o.desired.is_ok() && o.spec_refused.is_none() {
        set(LAST_VALID_SPEC_ANNOTATION, Some(spec_json.to_string()));
    }
    // The Secrets of a TLS side being turned off, while pods are still made with them (written
    // in the same patch as the last valid spec that stops naming them).
    if let Ok(d) = &o.desired {
        let leaving = crate::tls::transition::leaving_of(&d.tls, &d.tls_stage);
        set(TLS_LEAVING_ANNOTATION, (!leaving.is_empty()).then(|| serde_json::to_string(&leaving).unwrap_or_default()));
    }
    // The minor every member runs: first seen → index 0; changed → the leader's index now (the
    // entries up to it were written by members of the earlier minor). A recovered cluster
    // started afresh from a snapshot: no entry of an earlier minor is in its log.
    if let Some((minor, index)) = uniform_minor(o) {
        let recorded = current.get(MINOR_SINCE_ANNOTATION).and_then(|v| v.split_once(' ').map(|(m, _)| m.to_string()));
        let value = match recorded {
            Some(m) if m == minor && !recovered => None,
            Some(_) if !recovered => Some(format!("{minor} {index}")),
            _ => Some(format!("{minor} 0")),
        };
        if value.is_some() {
            set(MINOR_SINCE_ANNOTATION, value);
        }
    }
    match (recovery::quorum_unrecoverable(o), current.contains_key(QUORUM_LOST_AT_ANNOTATION)) {
        (true, false) => set(QUORUM_LOST_AT_ANNOTATION, Some(now.to_string())),
        (false, true) => set(QUORUM_LOST_AT_ANNOTATION, None),
        _ => {}
    }
    out
}

/// `major.minor` when every member answered with the same minor version, with the leader's
/// raft index.
fn uniform_minor(o: &Observed) -> Option<(String, u64)> {
    let e = o.etcd.as_ref()?;
    let statuses: Option<Vec<&crate::observed::MemberStatus>> = e.members.iter().map(|m| m.status.as_ref()).collect();
    let mut minors = statuses?
        .into_iter()
        .map(|s| crate::version::Version::parse(&s.version).ok().map(|v| format!("{}.{}", v.major, v.minor)));
    let first = minors.next()??;
    if !minors.all(|m| m.as_deref() == Some(first.as_str())) {
        return None;
    }
    let index = e.leader_member().and_then(|m| m.status.as_ref()).map(|s| s.raft_index)?;
    Some((first, index))
}

/// Member pods missing a label the Services select on (the cluster UID, the serving label: made
/// by an earlier operator version), and pods drained for a change that was called off.
pub fn pods_to_label(o: &Observed) -> Vec<String> {
    let stale_drain = |p: &crate::observed::PodState| {
        p.serving == Some(false) && p.drained_secs.is_none_or(|s| s >= crate::planner::DRAIN_STALE_SECS)
    };
    o.pods
        .values()
        .filter(|p| (!p.labelled || p.serving.is_none() || stale_drain(p)) && !p.deleting)
        .map(|p| p.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::{EtcdState, MemberState, MemberStatus};
    use crate::planner::recovery::Record;

    fn formed(cluster_id: u64) -> Observed {
        let spec = etcd_operator_api::EtcdClusterSpec { size: 1, version: "3.5.1".into(), ..Default::default() };
        let mut o = Observed {
            desired: crate::validation::validate("ex", &spec),
            ever_bootstrapped: true,
            ..Default::default()
        };
        o.pods.insert(
            "ex-a".into(),
            crate::observed::PodState { name: "ex-a".into(), phase: "Running".into(), ..Default::default() },
        );
        o.etcd = Some(EtcdState {
            cluster_id,
            leader: Some(1),
            members: vec![MemberState {
                id: 1,
                name: "ex-a".into(),
                pod: "ex-a".into(),
                status: Some(MemberStatus { leader: 1, ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        });
        o
    }

    #[test]
    fn the_cluster_id_is_recorded_once_and_the_spec_when_valid() {
        let o = formed(0xabc);
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{}", "t");
        assert_eq!(ch[CLUSTER_ID_ANNOTATION].as_deref(), Some("abc"));
        assert_eq!(ch[LAST_VALID_SPEC_ANNOTATION].as_deref(), Some("{}"));
        let current = BTreeMap::from([
            (CLUSTER_ID_ANNOTATION.to_string(), "abc".to_string()),
            (LAST_VALID_SPEC_ANNOTATION.to_string(), "{}".to_string()),
        ]);
        assert!(cluster_annotations(&o, &current, "{}", "t").is_empty(), "nothing to write twice");
    }

    #[test]
    fn a_refused_spec_is_not_recorded_as_valid() {
        let mut o = formed(0xabc);
        o.spec_refused = Some(vec!["bad".into()]);
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{\"size\":0}", "t");
        assert!(!ch.contains_key(LAST_VALID_SPEC_ANNOTATION));
    }

    #[test]
    fn a_finished_recovery_becomes_the_last_recovery_and_the_new_cluster_id_is_recorded() {
        let mut o = formed(5);
        o.recovery_record = Some(Record { member: "ex-a".into(), policy: "FromSurvivor".into(), ..Default::default() });
        let current = BTreeMap::from([
            (CLUSTER_ID_ANNOTATION.to_string(), "old".to_string()),
            (RECOVERY_ANNOTATION.to_string(), "{}".to_string()),
        ]);
        let ch = cluster_annotations(&o, &current, "{}", "t");
        assert_eq!(ch[RECOVERY_ANNOTATION], None, "the record is removed");
        assert!(ch[LAST_RECOVERY_ANNOTATION].as_deref().is_some_and(|j| j.contains("FromSurvivor")));
        assert_eq!(ch[CLUSTER_ID_ANNOTATION].as_deref(), Some("5"));
        // While the new member does not serve yet, nothing of this is written.
        o.etcd.as_mut().unwrap().members[0].status = None;
        let ch = cluster_annotations(&o, &current, "{}", "t");
        assert!(!ch.contains_key(RECOVERY_ANNOTATION) && !ch.contains_key(CLUSTER_ID_ANNOTATION), "{ch:?}");
    }

    #[test]
    fn the_quorum_loss_clock_starts_and_stops() {
        let mut o = formed(0xabc);
        o.pods.clear();
        o.etcd = None; // nothing left at all: unrecoverable
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{}", "2026-01-01T00:00:00Z");
        assert_eq!(ch[QUORUM_LOST_AT_ANNOTATION].as_deref(), Some("2026-01-01T00:00:00Z"));
        let healthy = formed(0xabc);
        let current = BTreeMap::from([(QUORUM_LOST_AT_ANNOTATION.to_string(), "t".to_string())]);
        assert_eq!(cluster_annotations(&healthy, &current, "{}", "t")[QUORUM_LOST_AT_ANNOTATION], None);
    }

    #[test]
    fn pods_get_the_labels_services_select_on_and_a_called_off_drain_is_undone() {
        let mut o = formed(7);
        let p = o.pods.get_mut("ex-a").unwrap();
        p.labelled = true;
        p.serving = Some(true);
        assert!(pods_to_label(&o).is_empty());
        // Made before the serving label existed: labelled (before the client Service selects on it).
        o.pods.get_mut("ex-a").unwrap().serving = None;
        assert_eq!(pods_to_label(&o), ["ex-a"]);
        // Drained for a removal that is under way: left alone.
        let p = o.pods.get_mut("ex-a").unwrap();
        p.serving = Some(false);
        p.drained_secs = Some(2);
        assert!(pods_to_label(&o).is_empty());
        // Drained long ago and still here (the change was called off): serves again.
        o.pods.get_mut("ex-a").unwrap().drained_secs = Some(crate::planner::DRAIN_STALE_SECS);
        assert_eq!(pods_to_label(&o), ["ex-a"]);
    }

    #[test]
    fn the_index_of_the_last_minor_upgrade_is_recorded_when_every_member_reports_it() {
        use crate::naming::MINOR_SINCE_ANNOTATION;
        let mut o = formed(7);
        let st = o.etcd.as_mut().unwrap().members[0].status.as_mut().unwrap();
        st.version = "3.5.34".into();
        st.raft_index = 900;
        let at = |o: &Observed, current: &BTreeMap<String, String>| {
            cluster_annotations(o, current, "{}", "t").get(MINOR_SINCE_ANNOTATION).cloned()
        };
        // First seen: started there as far as anyone knows.
        assert_eq!(at(&o, &BTreeMap::new()), Some(Some("3.5 0".into())));
        let mut current = BTreeMap::from([(MINOR_SINCE_ANNOTATION.to_string(), "3.5 0".to_string())]);
        assert_eq!(at(&o, &current), None, "unchanged");
        // Every member reports 3.6 now: the leader's index is the boundary.
        let st = o.etcd.as_mut().unwrap().members[0].status.as_mut().unwrap();
        st.version = "3.6.15".into();
        st.raft_index = 1200;
        assert_eq!(at(&o, &current), Some(Some("3.6 1200".into())));
        current.insert(MINOR_SINCE_ANNOTATION.into(), "3.6 1200".into());
        assert_eq!(at(&o, &current), None, "kept while the minor stays");
    }
}

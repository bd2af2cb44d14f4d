//! Durable marks the operator keeps in the EtcdCluster's own metadata, computed purely from an
//! observation. They make the safety rules independent of status (which a user, a migration
//! or a lost write can reset) and of the operator's memory (which a restart loses):
//! - the etcd cluster ID once the cluster formed (a member answered with a leader: a lone
//!   bootstrap member knows its cluster ID before anything formed): never bootstrapped again;
//! - failing that, evidence that it formed (`formed`: a member pod was Ready, which takes a
//!   leader) while the operator could not reach etcd: never bootstrapped again either;
//! - what each member was seen holding over several looks while the quorum is lost
//!   (`planner::survivors`), and what each member acknowledged (`progress`);
//! - the last valid spec: an invalid edit is refused while the cluster heals under this one;
//! - since when a quorum cannot come back: the clock of `spec.recovery.afterSeconds`;
//! - a recovery under way, removed once its first member serves;
//! - the minor every member runs and since which raft index (`<minor> <index>`, `<minor> fresh`
//!   for a log that began there): a member restarting into 3.6 or 3.7 waits for a raft snapshot
//!   past it (`planner::replay`);
//! - the Secrets of a TLS side being turned off while members still use them
//!   (`tls::transition::Leaving`);
//! - the node each member pod was last seen on (`nodes`), kept after its object is gone while it
//!   may be a member: only that node can show its process stopped;
//! - who the NetworkPolicy admits while `spec.networkPolicy.clients` is unset, set once when the
//!   operator first sees the cluster (`network_policy::DefaultClients::first`).

use std::collections::BTreeMap;

use crate::naming::{
    CLUSTER_ID_ANNOTATION, FORMED_ANNOTATION, LAST_RECOVERY_ANNOTATION, LAST_VALID_SPEC_ANNOTATION,
    MEMBER_NODES_ANNOTATION, MEMBER_PROGRESS_ANNOTATION, MINOR_SINCE_ANNOTATION, QUORUM_LOST_AT_ANNOTATION,
    RECOVERY_ANNOTATION, SURVIVOR_LOOKS_ANNOTATION, TLS_LEAVING_ANNOTATION,
};
use crate::network_policy;
use crate::observed::{MinorSince, Observed, Since};
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
    // A cluster formed once a member answers with a leader (a quorum elected it).
    let mut id_recorded = current.contains_key(CLUSTER_ID_ANNOTATION);
    if let Some(e) = o.etcd.as_ref().filter(|e| e.cluster_id != 0 && e.leader.is_some()) {
        // During a recovery only the new cluster's ID is recorded, once it serves.
        if o.recovery_record.is_none() || recovered {
            set(CLUSTER_ID_ANNOTATION, Some(crate::naming::hex(e.cluster_id)));
            id_recorded = true;
        }
    }
    // The operator may never reach etcd (a network policy, TLS, a login refused) while the
    // cluster forms and takes writes: a Ready member pod (its probe needs a leader) is the
    // evidence, kept so that the cluster is never bootstrapped again.
    if !id_recorded
        && !current.contains_key(FORMED_ANNOTATION)
        && let Some(p) = o.pods.values().find(|p| p.ready && !p.deleting)
    {
        set(FORMED_ANNOTATION, Some(format!("member pod {} was Ready at {now}", p.name)));
    }
    if recovered {
        // Kept as the last recovery: status reports it from there on every reconcile (a status
        // written from a stale cache must not be able to drop what was lost).
        let done = o.recovery_record.as_ref().and_then(|r| serde_json::to_string(r).ok());
        set(LAST_RECOVERY_ANNOTATION, done);
        set(RECOVERY_ANNOTATION, None);
    }
    if o.desired.is_ok() && o.spec_refused.is_none() && o.tls_material.refused.is_empty() {
        set(LAST_VALID_SPEC_ANNOTATION, Some(spec_json.to_string()));
    }
    // The Secrets of a TLS side being turned off, while pods are still made with them (written
    // in the same patch as the last valid spec that stops naming them).
    if let Ok(d) = &o.desired {
        let leaving = crate::tls::transition::leaving_of(&d.tls, &d.tls_stage);
        set(TLS_LEAVING_ANNOTATION, (!leaving.is_empty()).then(|| serde_json::to_string(&leaving).unwrap_or_default()));
    }
    // The minor every member runs, and since when. Changed → the leader's index now (the
    // entries up to it may be the earlier minor's). First seen, or a value of an earlier
    // operator version (`Since::Unknown`) → `fresh` only when this operator made every member's
    // log at this minor (its bootstrap, never upgraded; a recovery), else the leader's index:
    // unknown history counts as written up to now.
    if let Some((minor, index)) = uniform_minor(o) {
        let recorded = current.get(MINOR_SINCE_ANNOTATION).and_then(|v| parse_minor_since(v));
        let fresh = || recovered || log_began_here(o, &minor);
        let value = match recorded {
            Some(r) if r.minor == minor && r.since != Since::Unknown && !recovered => None,
            Some(r) if r.minor != minor && !recovered => Some(format!("{minor} {index}")),
            _ if fresh() => Some(format!("{minor} {FRESH}")),
            _ => Some(format!("{minor} {index}")),
        };
        if value.is_some() {
            set(MINOR_SINCE_ANNOTATION, value);
        }
    }
    // Set once, never rewritten: an operator restart or a later state must not change who may
    // reach the cluster.
    if !current.contains_key(network_policy::DEFAULT_ANNOTATION) {
        set(network_policy::DEFAULT_ANNOTATION, Some(network_policy::DefaultClients::first(o).as_str().to_string()));
    }
    match (recovery::quorum_unrecoverable(o), current.contains_key(QUORUM_LOST_AT_ANNOTATION)) {
        (true, false) => set(QUORUM_LOST_AT_ANNOTATION, Some(now.to_string())),
        (false, true) => set(QUORUM_LOST_AT_ANNOTATION, None),
        _ => {}
    }
    let now_secs = now.parse::<k8s_openapi::jiff::Timestamp>().map(|t| t.as_second()).unwrap_or(0);
    let looks = current.get(SURVIVOR_LOOKS_ANNOTATION).and_then(|j| serde_json::from_str(j).ok());
    let looks = crate::planner::survivors::recorded(o, looks.as_ref(), now_secs);
    set(SURVIVOR_LOOKS_ANNOTATION, looks.and_then(|l| serde_json::to_string(&l).ok()));
    let progress = crate::progress::Progress::parse(current.get(MEMBER_PROGRESS_ANNOTATION));
    let next = crate::progress::next(o, &progress, now_secs);
    if next != progress {
        set(MEMBER_PROGRESS_ANNOTATION, (!next.0.is_empty()).then(|| serde_json::to_string(&next).unwrap_or_default()));
    }
    let nodes = member_nodes(o);
    if nodes != o.member_nodes {
        set(MEMBER_NODES_ANNOTATION, (!nodes.is_empty()).then(|| serde_json::to_string(&nodes).unwrap_or_default()));
    }
    out
}

/// The node of every member pod, kept after its object is gone while it may be a member.
fn member_nodes(o: &Observed) -> crate::nodes::MemberNodes {
    let placed = o.pods.values().filter_map(|p| Some((p.name.as_str(), p.node.as_deref()?)));
    let present = |pod: &str| o.pods.contains_key(pod);
    let member = |pod: &str| o.etcd.as_ref().is_some_and(|e| e.member_for_pod(pod).is_some());
    // Only a leader's member list is the membership: a lagging member answering alone may not
    // list a member added later, whose mark must not go.
    let members: Option<&dyn Fn(&str) -> bool> =
        o.etcd.as_ref().is_some_and(|e| e.leader.is_some()).then_some(&member as &dyn Fn(&str) -> bool);
    crate::nodes::next_member_nodes(&o.member_nodes, placed, &present, members)
}

/// The value annotation `key` has once `changes` are written over `current`.
pub fn after<'a>(current: &'a BTreeMap<String, String>, changes: &'a AnnotationChanges, key: &str) -> Option<&'a str> {
    match changes.get(key) {
        Some(v) => v.as_deref(),
        None => current.get(key).map(String::as_str),
    }
}

/// The minor-since value of a raft log that began at its minor.
const FRESH: &str = "fresh";

/// The minor-since annotation's value; `<minor> 0` (earlier operator versions) is `Unknown`.
pub fn parse_minor_since(v: &str) -> Option<MinorSince> {
    let (minor, since) = v.split_once(' ')?;
    let since = match since {
        FRESH => Since::LogStart,
        "0" => Since::Unknown,
        i => Since::Index(i.parse().ok()?),
    };
    Some(MinorSince { minor: minor.to_string(), since })
}

/// `major.minor` when every member answered with the same minor version (`+v2` when a pod of a
/// 3.5 member has etcd's v2 API on: its `/health` writes v2 `QGET` entries, as 3.4 does), with
/// the leader's raft index.
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
    let v2 = first == "3.5" && o.pods.values().any(crate::planner::replay::serves_v2);
    Some((if v2 { format!("{first}+v2") } else { first }, index))
}

/// Every member's raft log began at `minor` under this operator: every pod is one of its
/// bootstrap pods (a bootstrap or a restore starts a new log), none was ever moved to another
/// version, and all run `minor`. Members added later got the leader's log, which may be older.
fn log_began_here(o: &Observed, minor: &str) -> bool {
    !o.pods.is_empty()
        && o.pods.values().all(|p| {
            p.bootstrap
                && p.version_age_secs.is_none()
                && crate::version::Version::parse(&p.version).is_ok_and(|v| format!("{}.{}", v.major, v.minor) == minor)
        })
}

/// Pods the operator moved to another version whose member has come back at it (healthy,
/// reporting the pod's version, caught up with the leader, its pod Ready with the container the
/// move started: `planner::upgrade::ready_since_the_move`): their version-changed-at mark is
/// removed, so that the member counts as any other from then on (a restart long after is no
/// failed upgrade; `planner::upgrade::in_flight`).
pub fn upgrades_confirmed(o: &Observed) -> Vec<String> {
    let Some(e) = o.etcd.as_ref() else { return vec![] };
    let leader_index = e.leader_member().and_then(|m| m.status.as_ref()).map(|s| s.raft_index);
    e.voters()
        .filter_map(|m| {
            let p = o.pods.get(&m.pod).filter(|p| p.version_age_secs.is_some() && !p.deleting)?;
            crate::planner::upgrade::back_at_its_version(m, p, leader_index).then(|| p.name.clone())
        })
        .collect()
}

/// Member pods missing a label the Services select on (the cluster UID, the serving label: made
/// by an earlier operator version), pods drained for a change that was called off, and members
/// drained for their upgrade's restart that are back at their new version (the image patch
/// leaves them out of the client Service: their old container stays Ready a moment longer).
pub fn pods_to_label(o: &Observed) -> Vec<String> {
    // Not while the pod's upgrade may still come back (it returns once back, below).
    let upgrading = |p: &crate::observed::PodState| {
        p.version_age_secs.is_some_and(|a| a < crate::planner::upgrade::UPGRADE_DEADLINE_SECS)
    };
    let stale_drain = |p: &crate::observed::PodState| {
        p.serving == Some(false)
            && p.drained_secs().is_none_or(|s| s >= crate::planner::DRAIN_STALE_SECS)
            && !upgrading(p)
    };
    let back = upgrades_confirmed(o);
    let back_drained = |p: &crate::observed::PodState| p.serving == Some(false) && !p.fenced && back.contains(&p.name);
    o.pods
        .values()
        .filter(|p| (!p.labelled || p.serving.is_none() || stale_drain(p) || back_drained(p)) && !p.deleting)
        .map(|p| p.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::naming::MINOR_SINCE_ANNOTATION;
    use crate::observed::RecoveryRecord;
    use crate::observed::{EtcdState, MemberState, MemberStatus};

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
        assert_eq!(ch[network_policy::DEFAULT_ANNOTATION].as_deref(), Some("any"), "formed before it was first seen");
        let current = BTreeMap::from([
            (CLUSTER_ID_ANNOTATION.to_string(), "abc".to_string()),
            (LAST_VALID_SPEC_ANNOTATION.to_string(), "{}".to_string()),
            (network_policy::DEFAULT_ANNOTATION.to_string(), "any".to_string()),
        ]);
        assert!(cluster_annotations(&o, &current, "{}", "t").is_empty(), "nothing to write twice");
    }

    /// Who a cluster's NetworkPolicy admits by default is decided once, the first time the
    /// operator sees it: a cluster about to be created opts in to the namespace default; one that
    /// existed before (formed: a cluster ID or CoreOS' status; or with pods or volumes) keeps its
    /// client port open. A mark once written is never rewritten (restarts, later states).
    #[test]
    fn the_network_policy_default_is_marked_once_by_whether_the_cluster_existed() {
        const MARK: &str = "etcd.database.coreos.com/network-policy-default";
        let spec = etcd_operator_api::EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() };
        let new = Observed { desired: crate::validation::validate("ex", &spec), ..Default::default() };
        let mark = |o: &Observed, current: &BTreeMap<String, String>| {
            cluster_annotations(o, current, "{}", "t").get(MARK).cloned().flatten()
        };
        let none = BTreeMap::new();
        assert_eq!(mark(&new, &none).as_deref(), Some("namespace"), "about to be created");
        assert_eq!(mark(&formed(7), &none).as_deref(), Some("any"), "formed before the policy");
        let adopted = Observed { ever_bootstrapped: true, ..new.clone() };
        assert_eq!(mark(&adopted, &none).as_deref(), Some("any"), "CoreOS' status: it ran");
        let mut with_pod = new.clone();
        with_pod.pods.insert("ex-a".into(), crate::observed::PodState { name: "ex-a".into(), ..Default::default() });
        assert_eq!(mark(&with_pod, &none).as_deref(), Some("any"), "members already there");
        let mut with_volume = new.clone();
        with_volume.pvcs.insert("ex-a".into(), Default::default());
        assert_eq!(mark(&with_volume, &none).as_deref(), Some("any"), "a volume already there");
        for v in ["namespace", "any", "something-else"] {
            let current = BTreeMap::from([(MARK.to_string(), v.to_string())]);
            assert_eq!(mark(&formed(7), &current), None, "{v}: never rewritten");
            assert_eq!(mark(&new, &current), None, "{v}: never rewritten");
        }
    }

    /// A bootstrap member answers with the cluster ID it computed at start before any other
    /// member runs: without a leader (a quorum) nothing formed yet, and nothing is recorded.
    #[test]
    fn a_lone_member_without_a_leader_is_not_recorded_as_formed() {
        let mut o = formed(0xabc);
        o.ever_bootstrapped = false;
        let e = o.etcd.as_mut().unwrap();
        e.leader = None;
        e.members[0].status.as_mut().unwrap().leader = 0;
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{}", "t");
        assert!(!ch.contains_key(CLUSTER_ID_ANNOTATION), "{ch:?}");
    }

    /// A member pod is Ready only with a leader: the cluster formed, and may hold data, even
    /// if the operator never reached etcd (no cluster ID). That is recorded, once.
    #[test]
    fn a_ready_member_pod_is_recorded_as_evidence_that_the_cluster_formed() {
        use crate::naming::FORMED_ANNOTATION;
        let mut o = formed(0xabc);
        o.ever_bootstrapped = false;
        o.etcd = None;
        o.pods.get_mut("ex-a").unwrap().ready = true;
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{}", "2026-01-01T00:00:00Z");
        assert_eq!(ch[FORMED_ANNOTATION].as_deref(), Some("member pod ex-a was Ready at 2026-01-01T00:00:00Z"));
        let current = BTreeMap::from([(FORMED_ANNOTATION.to_string(), "x".to_string())]);
        assert!(!cluster_annotations(&o, &current, "{}", "t").contains_key(FORMED_ANNOTATION), "kept as it is");
        // Pods that never were Ready prove nothing: the bootstrap may start over.
        o.pods.get_mut("ex-a").unwrap().ready = false;
        assert!(!cluster_annotations(&o, &BTreeMap::new(), "{}", "t").contains_key(FORMED_ANNOTATION));
        // With the cluster ID recorded (now or before), that is the proof.
        o.pods.get_mut("ex-a").unwrap().ready = true;
        let current = BTreeMap::from([(CLUSTER_ID_ANNOTATION.to_string(), "abc".to_string())]);
        assert!(!cluster_annotations(&o, &current, "{}", "t").contains_key(FORMED_ANNOTATION));
        let with_etcd = formed(0xabc);
        let mut with_etcd = with_etcd;
        with_etcd.pods.get_mut("ex-a").unwrap().ready = true;
        assert!(!cluster_annotations(&with_etcd, &BTreeMap::new(), "{}", "t").contains_key(FORMED_ANNOTATION));
    }

    /// The looks of a quorum loss and the members' progress are kept on the EtcdCluster.
    #[test]
    fn survivor_looks_and_member_progress_are_recorded() {
        use crate::naming::{MEMBER_PROGRESS_ANNOTATION, SURVIVOR_LOOKS_ANNOTATION};
        let mut o = formed(7);
        o.etcd.as_mut().unwrap().members[0].status.as_mut().unwrap().raft_applied_index = 40;
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{}", "2026-01-01T00:00:00Z");
        assert!(ch[MEMBER_PROGRESS_ANNOTATION].as_deref().is_some_and(|j| j.contains("\"seen\":40")), "{ch:?}");
        assert!(!ch.contains_key(SURVIVOR_LOOKS_ANNOTATION), "a quorum: no looks");
        let e = o.etcd.as_mut().unwrap();
        e.leader = None;
        e.members[0].status.as_mut().unwrap().leader = 0;
        let ch = cluster_annotations(&o, &BTreeMap::new(), "{}", "2026-01-01T00:00:00Z");
        let looks: crate::observed::Looks =
            serde_json::from_str(ch[SURVIVOR_LOOKS_ANNOTATION].as_deref().unwrap()).unwrap();
        assert_eq!((looks.looks, looks.members["ex-a"].applied), (1, 40));
        let current = BTreeMap::from([(SURVIVOR_LOOKS_ANNOTATION.to_string(), "{}".to_string())]);
        assert_eq!(cluster_annotations(&formed(7), &current, "{}", "t")[SURVIVOR_LOOKS_ANNOTATION], None);
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
        o.recovery_record =
            Some(RecoveryRecord { member: "ex-a".into(), policy: "FromSurvivor".into(), ..Default::default() });
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
        p.drained_ms = Some(2_000);
        assert!(pods_to_label(&o).is_empty());
        // Drained long ago and still here (the change was called off): serves again.
        o.pods.get_mut("ex-a").unwrap().drained_ms = Some(crate::planner::DRAIN_STALE_SECS * 1000);
        assert_eq!(pods_to_label(&o), ["ex-a"]);
    }

    fn minor_since_of(o: &Observed, current: &BTreeMap<String, String>) -> Option<Option<String>> {
        cluster_annotations(o, current, "{}", "t").get(MINOR_SINCE_ANNOTATION).cloned()
    }

    fn at_version(o: &mut Observed, version: &str, raft_index: u64) {
        let st = o.etcd.as_mut().unwrap().members[0].status.as_mut().unwrap();
        st.version = version.into();
        st.raft_index = raft_index;
        for p in o.pods.values_mut() {
            p.version = version.into();
        }
    }

    fn mark(v: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(MINOR_SINCE_ANNOTATION.to_string(), v.to_string())])
    }

    #[test]
    fn the_index_of_the_last_minor_upgrade_is_recorded_when_every_member_reports_it() {
        let mut o = formed(7);
        at_version(&mut o, "3.5.34", 900);
        // Not this operator's bootstrap (adopted, or made by an earlier version): what the log
        // holds is unknown, so it counts as written by earlier minors up to the index now.
        assert_eq!(minor_since_of(&o, &BTreeMap::new()), Some(Some("3.5 900".into())));
        let mut current = mark("3.5 900");
        assert_eq!(minor_since_of(&o, &current), None, "unchanged");
        // Every member reports 3.6 now: the leader's index is the boundary.
        at_version(&mut o, "3.6.15", 1200);
        assert_eq!(minor_since_of(&o, &current), Some(Some("3.6 1200".into())));
        current = mark("3.6 1200");
        assert_eq!(minor_since_of(&o, &current), None, "kept while the minor stays");
    }

    /// The fail-open cases: an adopted cluster, an earlier operator version's `0`, a
    /// lost annotation. Only a log this operator began at the minor (its bootstrap pods, never
    /// upgraded; a recovery) is `fresh`.
    #[test]
    fn a_log_of_unknown_history_is_never_taken_for_a_fresh_one() {
        let mut o = formed(7);
        at_version(&mut o, "3.5.34", 900);
        // The value earlier operator versions wrote on first sight (adopted or not).
        assert_eq!(parse_minor_since("3.5 0").unwrap().since, Since::Unknown);
        assert_eq!(minor_since_of(&o, &mark("3.5 0")), Some(Some("3.5 900".into())));
        // This operator's bootstrap pods, never moved to another version: the log began here.
        o.pods.get_mut("ex-a").unwrap().bootstrap = true;
        assert_eq!(minor_since_of(&o, &BTreeMap::new()), Some(Some("3.5 fresh".into())));
        assert_eq!(minor_since_of(&o, &mark("3.5 0")), Some(Some("3.5 fresh".into())));
        assert_eq!(minor_since_of(&o, &mark("3.5 fresh")), None);
        // ... but a bootstrap pod that was upgraded ran an earlier minor.
        o.pods.get_mut("ex-a").unwrap().version_age_secs = Some(30);
        assert_eq!(minor_since_of(&o, &BTreeMap::new()), Some(Some("3.5 900".into())));
        // A finished recovery started a new log from a snapshot.
        o.recovery_record = Some(crate::observed::RecoveryRecord { member: "ex-a".into(), ..Default::default() });
        assert_eq!(minor_since_of(&o, &mark("3.4 500")), Some(Some("3.5 fresh".into())));
    }

    /// A 3.5 member with etcd's v2 API on writes v2 `QGET` entries for `/health`, as 3.4 does:
    /// turning it off is a change of era, like a minor upgrade.
    #[test]
    fn a_three_five_member_serving_v2_counts_as_an_earlier_era() {
        let mut o = formed(7);
        at_version(&mut o, "3.5.34", 900);
        o.pods.get_mut("ex-a").unwrap().etcd_flags = vec![("enable-v2".into(), Some("true".into()))];
        assert_eq!(minor_since_of(&o, &BTreeMap::new()), Some(Some("3.5+v2 900".into())));
        o.pods.get_mut("ex-a").unwrap().etcd_flags.clear();
        at_version(&mut o, "3.5.34", 950);
        assert_eq!(minor_since_of(&o, &mark("3.5+v2 900")), Some(Some("3.5 950".into())));
    }

    /// A member moved to another version loses its version-changed-at mark once it is back:
    /// healthy, reporting that version, caught up, its pod Ready with the container the move
    /// started; not before.
    #[test]
    fn an_upgraded_member_is_confirmed_once_back_at_its_version() {
        let mut o = formed(7);
        at_version(&mut o, "3.5.34", 900);
        assert!(upgrades_confirmed(&o).is_empty(), "never moved: nothing to confirm");
        o.pods.get_mut("ex-a").unwrap().version_age_secs = Some(20);
        o.etcd.as_mut().unwrap().members[0].status.as_mut().unwrap().raft_applied_index = 900;
        // etcd answers from the new container before Kubernetes reports it Ready: the cache
        // still shows the container that ran before the move, or none ready.
        o.pods.get_mut("ex-a").unwrap().etcd_ready_run_secs = Some(600);
        assert!(upgrades_confirmed(&o).is_empty(), "the Ready container is the one from before the move");
        o.pods.get_mut("ex-a").unwrap().etcd_ready_run_secs = None;
        assert!(upgrades_confirmed(&o).is_empty(), "no ready etcd container");
        o.pods.get_mut("ex-a").unwrap().etcd_ready_run_secs = Some(5);
        assert!(upgrades_confirmed(&o).is_empty(), "the pod is not Ready");
        o.pods.get_mut("ex-a").unwrap().ready = true;
        assert_eq!(upgrades_confirmed(&o), ["ex-a"]);
        o.etcd.as_mut().unwrap().members[0].status.as_mut().unwrap().version = "3.5.33".into();
        assert!(upgrades_confirmed(&o).is_empty(), "still reports the old version");
        o.etcd.as_mut().unwrap().members[0].status = None;
        assert!(upgrades_confirmed(&o).is_empty(), "not answering");
    }
}

#[cfg(test)]
mod member_nodes_tests {
    use super::*;
    use crate::observed::{EtcdState, MemberState, PodState};

    /// A member list without a leader (one lagging member answering) does not prune the mark.
    #[test]
    fn only_a_leaders_member_list_forgets_a_gone_pods_node() {
        let m = |pod: &str| MemberState { pod: pod.into(), ..Default::default() };
        let mut o = Observed {
            pods: BTreeMap::from([(
                "a".to_string(),
                PodState { name: "a".into(), node: Some("n1".into()), ..Default::default() },
            )]),
            member_nodes: BTreeMap::from([("a".into(), "n1".into()), ("b".into(), "n2".into())]),
            etcd: Some(EtcdState { members: vec![m("a")], leader: None, ..Default::default() }),
            ..Default::default()
        };
        assert_eq!(member_nodes(&o), o.member_nodes, "b stays: the list may be stale");
        o.etcd.as_mut().unwrap().leader = Some(1);
        assert_eq!(member_nodes(&o), BTreeMap::from([("a".to_string(), "n1".to_string())]));
    }
}

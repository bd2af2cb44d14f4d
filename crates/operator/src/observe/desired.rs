//! The spec to plan from: this one if valid, else the last valid one recorded (a TLS side that
//! stays on keeps its Secrets; authentication on is not dropped), and the TLS stage member pods
//! are made at now.

use std::collections::{BTreeMap, BTreeSet};

use etcd_operator_api::EtcdCluster;
use kube::ResourceExt;

use crate::naming::{self, LAST_VALID_SPEC_ANNOTATION};
use crate::observed::PvcState;
use crate::tls::transition::PodTls;
use crate::validation::{Desired, validate};

/// The spec to plan from, as [`desired_of`] chose it.
pub(super) struct Planned {
    pub desired: Result<Desired, Vec<String>>,
    /// Why this spec was refused, when `desired` is another one (`Observed::spec_refused`).
    pub refused: Option<Vec<String>>,
    /// The spec planned from left `version` empty (the default applies).
    pub version_defaulted: bool,
    /// No valid spec is on record: `desired` is the refused spec as earlier rules read it,
    /// without what today's rules refuse (`Observed::no_valid_spec`).
    pub no_valid_spec: bool,
}

/// The spec to plan from: this one if valid; else the last valid one the operator recorded
/// (the cluster keeps healing under it), with the reasons this one was refused. A cluster that
/// formed with no valid spec on record (adopted from the CoreOS operator, or the mark lost) is
/// judged by today's rules too; what they refuse is reported and never applied: it heals under
/// the spec as earlier rules read it without the refused `etcdEnv` entries
/// (`validation::validate_legacy`), and no running member is changed. `pods`: how the member
/// pods speak TLS.
pub(super) fn desired_of(cluster: &EtcdCluster, name: &str, formed: bool, pods: &[&PodTls]) -> Planned {
    let planned = |desired, refused, version_defaulted, no_valid_spec| Planned {
        desired,
        refused,
        version_defaulted,
        no_valid_spec,
    };
    match validate(name, &cluster.spec)
        .and_then(|d| tls_change_allowed(cluster, name, formed, pods, d))
        .and_then(|d| auth_kept(cluster, name, d))
    {
        Ok(d) => planned(Ok(d), None, cluster.spec.version.is_empty(), false),
        Err(errs) => match cluster.annotations().get(LAST_VALID_SPEC_ANNOTATION) {
            Some(_) => match last_valid(cluster, name) {
                Some((d, empty)) => planned(Ok(d), Some(errs), empty, false),
                None => planned(Err(errs), None, false, false),
            },
            // The same TLS and auth rules as any change: a swapped Secret is refused here too.
            None if formed => match crate::validation::validate_legacy(name, &cluster.spec)
                .and_then(|d| tls_change_allowed(cluster, name, formed, pods, d))
                .and_then(|d| auth_kept(cluster, name, d))
            {
                Ok(d) => planned(Ok(d), Some(errs), cluster.spec.version.is_empty(), true),
                Err(_) => planned(Err(errs), None, false, false),
            },
            None => planned(Err(errs), None, false, false),
        },
    }
}

/// The last valid spec the operator recorded, checked, and whether it left `version` empty.
pub(super) fn last_valid(cluster: &EtcdCluster, name: &str) -> Option<(Desired, bool)> {
    let recorded = cluster.annotations().get(LAST_VALID_SPEC_ANNOTATION)?;
    let spec = serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(recorded).ok()?;
    validate(name, &spec).ok().map(|d| (d, spec.version.is_empty()))
}

/// The TLS Secrets the cluster runs with now: mounted by a member pod, named by the last valid
/// spec, or being left (the `tls-leaving` mark). Material refused in these does not stop the
/// cluster from healing with what its pods mount; refused material in any other Secret is a
/// refused change.
pub(super) fn secrets_in_use(cluster: &EtcdCluster, name: &str, pods: &[&PodTls]) -> BTreeSet<String> {
    use crate::tls::transition::Leaving;
    let mut sources: Vec<Leaving> = pods.iter().map(|p| Leaving::of_pods(std::iter::once(*p))).collect();
    if let Some(p) = last_valid_tls(cluster, name) {
        sources.push(Leaving::of_policy(&p));
    }
    if let Some(l) =
        cluster.annotations().get(naming::TLS_LEAVING_ANNOTATION).and_then(|j| serde_json::from_str::<Leaving>(j).ok())
    {
        sources.push(l);
    }
    sources.into_iter().flat_map(|l| [l.peer_secret, l.server_secret, l.operator_secret]).flatten().collect()
}

/// The policy of the last valid spec the operator recorded, if any.
fn last_valid_tls(cluster: &EtcdCluster, name: &str) -> Option<crate::tls::Policy> {
    let recorded = cluster.annotations().get(LAST_VALID_SPEC_ANNOTATION)?;
    let spec = serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(recorded).ok()?;
    validate(name, &spec).ok().map(|d| d.tls)
}

/// A formed cluster may turn TLS on or off, not swap the Secrets of a side that stays on
/// (`tls::transition::check_change`, against the last valid spec and the pods).
fn tls_change_allowed(
    cluster: &EtcdCluster,
    name: &str,
    formed: bool,
    pods: &[&PodTls],
    d: Desired,
) -> Result<Desired, Vec<String>> {
    if !formed {
        return Ok(d);
    }
    let before = last_valid_tls(cluster, name).unwrap_or_default();
    crate::tls::transition::check_change(&before, &d.tls, pods).map(|_| d).map_err(|e| vec![e])
}

/// The stage member pods are made at now (`tls::transition::stage`): the Secrets of a side
/// `spec.TLS` turns off come from the `tls-leaving` mark, else the last valid spec, else the
/// pods' volumes.
pub(super) fn tls_stage(
    cluster: &EtcdCluster,
    name: &str,
    d: &Desired,
    pods: &[&PodTls],
    pvcs: &BTreeMap<String, PvcState>,
) -> Result<crate::tls::transition::Stage, Vec<String>> {
    use crate::tls::transition::{Leaving, stage};
    let mut sources = vec![];
    if let Some(l) =
        cluster.annotations().get(naming::TLS_LEAVING_ANNOTATION).and_then(|j| serde_json::from_str(j).ok())
    {
        sources.push(l);
    }
    if let Some(p) = last_valid_tls(cluster, name) {
        sources.push(Leaving::of_policy(&p));
    }
    sources.push(Leaving::of_pods(pods.iter().copied()));
    let https_url_on_volume =
        pvcs.values().any(|v| !v.deleting && v.peer_url.as_deref().is_some_and(|u| u.starts_with("https://")));
    let serve_both = cluster.annotations().get(naming::TLS_SERVE_BOTH_ANNOTATION).is_some_and(|v| v == "true");
    let on_volumes = pvcs.values().any(|v| !v.deleting);
    stage(&d.tls, &Leaving::find(&d.tls, &sources), pods, https_url_on_volume, on_volumes, serve_both)
        .map_err(|e| vec![e])
}

/// `spec.auth` with authentication on is not dropped (the last valid spec's; `auth::check_change`).
fn auth_kept(cluster: &EtcdCluster, name: &str, d: Desired) -> Result<Desired, Vec<String>> {
    let before = cluster
        .annotations()
        .get(LAST_VALID_SPEC_ANNOTATION)
        .and_then(|j| serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(j).ok())
        .and_then(|spec| validate(name, &spec).ok());
    match before {
        Some(b) => crate::auth::check_change(&b.auth, &d.auth).map(|_| d).map_err(|e| vec![e]),
        None => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(spec: etcd_operator_api::EtcdClusterSpec, last_valid: Option<&str>) -> EtcdCluster {
        let mut c = EtcdCluster::new("ex", spec);
        if let Some(j) = last_valid {
            c.metadata.annotations = Some([(LAST_VALID_SPEC_ANNOTATION.to_string(), j.to_string())].into());
        }
        c
    }

    /// Whether the default version applies is a property of the spec planned from: a refused
    /// edit of a cluster whose last valid spec left the version empty must not turn into an
    /// upgrade to a newer default.
    #[test]
    fn the_version_default_follows_the_spec_planned_from() {
        use etcd_operator_api::EtcdClusterSpec;
        let p = desired_of(&cluster(EtcdClusterSpec { size: 3, ..Default::default() }, None), "ex", true, &[]);
        assert!(p.desired.is_ok() && p.refused.is_none() && p.version_defaulted);
        let pinned = EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() };
        assert!(!desired_of(&cluster(pinned, None), "ex", true, &[]).version_defaulted);
        // An invalid edit (size 0) of a cluster last valid with an empty version.
        let edit = EtcdClusterSpec { size: 0, version: "3.5.1".into(), ..Default::default() };
        let p = desired_of(&cluster(edit.clone(), Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(p.desired.is_ok() && p.refused.is_some());
        assert!(p.version_defaulted, "the last valid spec left the version empty");
        let p = desired_of(&cluster(edit, Some(r#"{"size":3,"version":"3.5.1"}"#)), "ex", true, &[]);
        assert!(!p.version_defaulted);
    }

    /// The Secrets a cluster runs with: those its member pods mount, its last valid spec's, the
    /// ones being left; never the operator Secret of an edit not yet valid.
    #[test]
    fn the_secrets_in_use_are_the_pods_the_last_valid_spec_s_and_the_ones_being_left() {
        use crate::tls::transition::PodTls;
        let spec = |peer: &str, op: &str| -> etcd_operator_api::EtcdClusterSpec {
            serde_json::from_str(&format!(
                r#"{{"size":3,"TLS":{{"static":{{"member":{{"peerSecret":"{peer}","serverSecret":"s"}},"operatorSecret":"{op}"}}}}}}"#
            ))
            .unwrap()
        };
        let last = serde_json::to_string(&spec("p", "o")).unwrap();
        let mut c = cluster(spec("p", "o2"), Some(&last));
        let pod = PodTls { peer_secret: Some("mounted".into()), ..Default::default() };
        let in_use = secrets_in_use(&c, "ex", &[&pod]);
        assert_eq!(in_use, ["mounted", "o", "p", "s"].map(String::from).into(), "not o2: the edit's");
        c.metadata.annotations.get_or_insert_default().insert(
            naming::TLS_LEAVING_ANNOTATION.into(),
            r#"{"serverSecret":"old-s","operatorSecret":"old-o"}"#.into(),
        );
        let in_use = secrets_in_use(&c, "ex", &[]);
        assert!(in_use.contains("old-s") && in_use.contains("old-o"), "{in_use:?}");
    }

    /// A formed cluster may turn TLS on (its members move one at a time), not swap the Secret of
    /// a side that stays on: such an edit is refused and it plans under the last valid spec.
    #[test]
    fn a_formed_cluster_turns_tls_on_but_keeps_its_secrets() {
        let with_tls = |peer: &str| -> etcd_operator_api::EtcdClusterSpec {
            serde_json::from_str(&format!(
                r#"{{"size":3,"TLS":{{"static":{{"member":{{"peerSecret":"{peer}","serverSecret":"s"}},"operatorSecret":"o"}}}}}}"#
            ))
            .unwrap()
        };
        let p = desired_of(&cluster(with_tls("p"), Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(p.desired.unwrap().tls.peer_secret.is_some() && p.refused.is_none(), "turning TLS on is accepted");
        let last = serde_json::to_string(&with_tls("p")).unwrap();
        let p = desired_of(&cluster(with_tls("q"), Some(&last)), "ex", true, &[]);
        assert_eq!(p.desired.unwrap().tls.peer_secret.as_deref(), Some("p"), "planned under the last valid spec");
        assert!(p.refused.unwrap()[0].contains("cannot switch to Secret q"));
        let p = desired_of(&cluster(with_tls("q"), Some(&last)), "ex", false, &[]);
        assert!(
            p.desired.unwrap().tls.peer_secret.as_deref() == Some("q") && p.refused.is_none(),
            "not formed yet: no history to keep"
        );
    }

    /// A formed cluster with no valid spec on record (adopted, or the mark lost) whose spec asks
    /// for what today's rules refuse: refused and reported, planned from the spec without the
    /// refused entries, with running members left as they are (`no_valid_spec`). Before it
    /// formed, such a spec is simply invalid.
    #[test]
    fn a_formed_cluster_without_a_valid_spec_on_record_is_judged_by_todays_rules() {
        let spec: etcd_operator_api::EtcdClusterSpec = serde_json::from_str(
            r#"{"size":3,"pod":{"resources":{"requests":{"cpu":"20m"}},"etcdEnv":[
                {"name":"ETCD_FORCE_NEW_CLUSTER","value":"true"},
                {"name":"ETCD_WAL_DIR","value":"/var/etcd/wal"},
                {"name":"ETCD_AUTH_TOKEN","valueFrom":{"secretKeyRef":{"name":"s","key":"k"}}},
                {"name":"ETCD_SNAPSHOT_COUNT","value":"5000"}]}}"#,
        )
        .unwrap();
        let p = desired_of(&cluster(spec.clone(), None), "ex", true, &[]);
        let refused = p.refused.expect("refused");
        for name in ["ETCD_FORCE_NEW_CLUSTER", "ETCD_WAL_DIR", "ETCD_AUTH_TOKEN"] {
            assert!(refused.iter().any(|e| e.contains(name)), "{name} not named: {refused:?}");
        }
        assert!(p.no_valid_spec);
        let d = p.desired.expect("keeps healing");
        let env: Vec<&str> = d.pod.etcd_env.iter().map(|e| e.name.as_str()).collect();
        // The WAL directory is where each member's log is: a member remade without it would
        // start with an empty log on a volume that holds its data. Reported, and kept.
        assert_eq!(env, ["ETCD_WAL_DIR", "ETCD_SNAPSHOT_COUNT"], "no pod is made with another refused setting");
        // A TLS side that stays on swapped to another Secret with no mark: refused as with one
        // (members remade with `q` could not talk to the ones on `p`); nothing is planned.
        let swapped: etcd_operator_api::EtcdClusterSpec = serde_json::from_str(
            r#"{"size":3,"pod":{"etcdEnv":[{"name":"ETCD_FORCE_NEW_CLUSTER","value":"true"}]},
                "TLS":{"static":{"member":{"peerSecret":"q","serverSecret":"s"},"operatorSecret":"o"}}}"#,
        )
        .unwrap();
        let pod = crate::tls::transition::PodTls {
            peer_secret: Some("p".into()),
            server_secret: Some("s".into()),
            peer_https: true,
            ..Default::default()
        };
        let p = desired_of(&cluster(swapped, None), "ex", true, &[&pod]);
        assert!(p.desired.is_err(), "planned with the swapped Secret");
        // Not formed: invalid, nothing is done.
        let p = desired_of(&cluster(spec.clone(), None), "ex", false, &[]);
        assert!(p.desired.is_err() && !p.no_valid_spec);
        // With a valid spec on record: planned from that one, as for any refused edit.
        let p = desired_of(&cluster(spec, Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(p.desired.unwrap().pod.etcd_env.is_empty() && p.refused.is_some() && !p.no_valid_spec);
    }
}

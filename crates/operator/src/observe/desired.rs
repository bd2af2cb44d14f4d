//! The spec to plan from: this one if valid, else the last valid one recorded (a TLS side that
//! stays on keeps its Secrets; authentication on is not dropped), and the TLS stage member pods
//! are made at now.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use kube::ResourceExt;

use crate::naming::{self, LAST_VALID_SPEC_ANNOTATION};
use crate::observed::PvcState;
use crate::tls::transition::PodTls;
use crate::validation::{Desired, validate};

/// The spec to plan from: this one if valid; else the last valid one the operator recorded
/// (the cluster keeps healing under it), with the reasons this one was refused. A cluster that
/// formed under an operator version that recorded no last valid spec keeps its spec if that
/// version's rules accepted it. The last value says whether the spec planned from left
/// `version` empty (the default applies). `pods`: how the member pods speak TLS.
pub(super) fn desired_of(
    cluster: &EtcdCluster,
    name: &str,
    formed: bool,
    pods: &[&PodTls],
) -> (Result<Desired, Vec<String>>, Option<Vec<String>>, bool) {
    match validate(name, &cluster.spec)
        .and_then(|d| tls_change_allowed(cluster, name, formed, pods, d))
        .and_then(|d| auth_kept(cluster, name, d))
    {
        Ok(d) => (Ok(d), None, cluster.spec.version.is_empty()),
        Err(errs) => {
            let recorded = cluster.annotations().get(LAST_VALID_SPEC_ANNOTATION);
            let last = match recorded {
                Some(j) => serde_json::from_str::<etcd_operator_api::EtcdClusterSpec>(j)
                    .ok()
                    .and_then(|spec| validate(name, &spec).ok().map(|d| (d, spec.version.is_empty()))),
                None if formed => crate::validation::validate_legacy(name, &cluster.spec)
                    .ok()
                    .map(|d| (d, cluster.spec.version.is_empty())),
                None => None,
            };
            match last {
                Some((d, empty)) => (Ok(d), Some(errs), empty),
                None => (Err(errs), None, false),
            }
        }
    }
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
        let (d, refused, empty) =
            desired_of(&cluster(EtcdClusterSpec { size: 3, ..Default::default() }, None), "ex", true, &[]);
        assert!(d.is_ok() && refused.is_none() && empty);
        let pinned = EtcdClusterSpec { size: 3, version: "3.5.1".into(), ..Default::default() };
        assert!(!desired_of(&cluster(pinned, None), "ex", true, &[]).2);
        // An invalid edit (size 0) of a cluster last valid with an empty version.
        let edit = EtcdClusterSpec { size: 0, version: "3.5.1".into(), ..Default::default() };
        let (d, refused, empty) = desired_of(&cluster(edit.clone(), Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(d.is_ok() && refused.is_some());
        assert!(empty, "the last valid spec left the version empty");
        let (_, _, empty) = desired_of(&cluster(edit, Some(r#"{"size":3,"version":"3.5.1"}"#)), "ex", true, &[]);
        assert!(!empty);
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
        let (d, refused, _) = desired_of(&cluster(with_tls("p"), Some(r#"{"size":3}"#)), "ex", true, &[]);
        assert!(d.unwrap().tls.peer_secret.is_some() && refused.is_none(), "turning TLS on is accepted");
        let last = serde_json::to_string(&with_tls("p")).unwrap();
        let (d, refused, _) = desired_of(&cluster(with_tls("q"), Some(&last)), "ex", true, &[]);
        assert_eq!(d.unwrap().tls.peer_secret.as_deref(), Some("p"), "planned under the last valid spec");
        assert!(refused.unwrap()[0].contains("cannot switch to Secret q"));
        let (d, refused, _) = desired_of(&cluster(with_tls("q"), Some(&last)), "ex", false, &[]);
        assert!(
            d.unwrap().tls.peer_secret.as_deref() == Some("q") && refused.is_none(),
            "not formed yet: no history to keep"
        );
    }
}

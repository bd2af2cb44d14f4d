//! Start-up permission check: asks the apiserver (SelfSubjectAccessReview) for every verb in
//! `rbac::PERMISSIONS`, so that a Role missing a verb is reported by name before anything runs,
//! instead of surfacing later as a failed step.

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kube::api::{Api, PostParams};

use crate::install::rbac::{METRICS_AUTH_PERMISSIONS, PERMISSIONS, Scope};

/// One permission the apiserver denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Missing {
    pub verb: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub why: &'static str,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot {} {}", self.verb, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}")?,
            None => write!(f, " cluster-wide")?,
        }
        write!(f, " (needed to {})", self.why)
    }
}

/// Split `etcdclusters/status` into resource and subresource.
fn split(resource: &str) -> (String, Option<String>) {
    match resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (resource.to_string(), None),
    }
}

/// Every permission the operator lacks. `namespace`: the managed namespace (`None` when
/// cluster-wide); `lease_namespace`: where leader election writes its Lease; `with_crds`: whether
/// the operator installs its CRDs; `metrics_auth`: whether it reviews the tokens of `/metrics`
/// requests (`--metrics-auth=kubernetes`).
pub async fn missing(
    client: &kube::Client,
    namespace: Option<&str>,
    lease_namespace: &str,
    with_crds: bool,
    metrics_auth: bool,
) -> Result<Vec<Missing>, kube::Error> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let mut out = vec![];
    let reviews = if metrics_auth { METRICS_AUTH_PERMISSIONS } else { &[] };
    for p in PERMISSIONS.iter().chain(reviews) {
        if p.scope == Scope::Cluster && p.resource == "customresourcedefinitions" && !with_crds {
            continue;
        }
        let ns = match (p.scope, p.resource) {
            (Scope::Cluster, _) => None,
            (_, "leases") => Some(lease_namespace.to_string()),
            _ => namespace.map(str::to_string),
        };
        let (resource, subresource) = split(p.resource);
        // A rule limited to named objects is checked on each name.
        let names: Vec<Option<String>> =
            if p.names.is_empty() { vec![None] } else { p.names.iter().map(|n| Some(n.to_string())).collect() };
        for (verb, name) in p.verbs.iter().flat_map(|v| names.iter().map(move |n| (v, n))) {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(p.group.to_string()),
                        resource: Some(resource.clone()),
                        subresource: subresource.clone(),
                        verb: Some(verb.to_string()),
                        namespace: ns.clone(),
                        name: name.clone(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let answer = api.create(&PostParams::default(), &review).await?;
            if !answer.status.is_some_and(|s| s.allowed) {
                let group = if p.group.is_empty() { String::new() } else { format!(".{}", p.group) };
                out.push(Missing {
                    verb: verb.to_string(),
                    resource: format!("{}{group}", p.resource),
                    namespace: ns.clone(),
                    why: p.why,
                });
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_permission_names_verb_resource_namespace_and_purpose() {
        let m = Missing {
            verb: "delete".into(),
            resource: "pods".into(),
            namespace: Some("ns".into()),
            why: "run etcd members",
        };
        assert_eq!(m.to_string(), "cannot delete pods in namespace ns (needed to run etcd members)");
        assert_eq!(split("etcdclusters/status"), ("etcdclusters".to_string(), Some("status".to_string())));
    }
}

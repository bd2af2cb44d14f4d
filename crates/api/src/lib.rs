//! The `etcd.database.coreos.com/v1beta2` API, field for field compatible with the archived
//! CoreOS etcd-operator so that existing manifests apply verbatim. Fields this project adds are
//! marked "additive" in their docs; none of the CoreOS fields changed meaning or shape.
//!
//! This crate holds types only: no I/O, no defaults that need a cluster.

pub mod backup;
pub mod cluster;
pub mod condition;
pub mod restore;
pub mod validation_rules;

pub use backup::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
pub use cluster::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus};
pub use condition::Condition;
pub use restore::{EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus};

/// API group of every kind in this crate.
pub const GROUP: &str = "etcd.database.coreos.com";
/// The one served and stored version.
pub const VERSION: &str = "v1beta2";
/// Annotation that makes a namespaced operator started with `-cluster-wide` manage the object.
pub const SCOPE_ANNOTATION: &str = "etcd.database.coreos.com/scope";
/// Value of [`SCOPE_ANNOTATION`] for cluster-wide management.
pub const SCOPE_CLUSTERWIDE: &str = "clusterwide";
/// EtcdCluster annotation, set by a person or `kubectl etcd fence`: the member pods to take out
/// of the client Service while they stay members (a JSON list of pod names, as CloudNativePG's
/// `cnpg.io/fencedInstances`). The operator fences no more than leaves a quorum of voters
/// serving; removing a name serves the member again.
/// Member pod label the client Service selects on: `true` while the member takes client
/// traffic, `false` while it is drained before it leaves (removal, a restart by a rollout) or
/// fenced ([`FENCED_MEMBERS_ANNOTATION`]).
pub const SERVING_LABEL: &str = "etcd.database.coreos.com/serving";
pub const FENCED_MEMBERS_ANNOTATION: &str = "etcd.database.coreos.com/fenced-members";
/// EtcdCluster annotation, set by a person or `kubectl etcd switchover`: move raft leadership
/// to this member pod, or to the most caught-up healthy voter when empty. One-shot: the
/// operator removes it once the leader is that member, or when it can never be (a learner, a
/// fenced member, no member by that name).
pub const SWITCHOVER_ANNOTATION: &str = "etcd.database.coreos.com/switchover";
/// EtcdCluster annotation, set by a person or `kubectl etcd hibernate`/`resume`: `on` stops
/// every member pod of a cluster whose members all keep their data on PersistentVolumeClaims,
/// keeping the claims and the membership; `off` (or no annotation) starts them again on their
/// claims. Refused for members on emptyDir, whose data would go with their pods.
pub const HIBERNATION_ANNOTATION: &str = "etcd.database.coreos.com/hibernation";
/// EtcdCluster annotation, set by a person or `kubectl etcd defrag`: defragment one member
/// (its pod name) or every member (`all`) once, one at a time with the leader last, where the
/// defragmentation policy would run. One-shot: removed once each has been defragmented.
pub const DEFRAGMENT_ANNOTATION: &str = "etcd.database.coreos.com/defragment";
/// EtcdCluster or EtcdRestore annotation: how far a member restored from a snapshot (a restore,
/// a quorum-loss recovery) moves the revision forward (etcd's `snapshot restore --bump-revision`,
/// with `--mark-compacted`, etcd 3.5.10 and later), so that revisions never go backwards for
/// clients that used the cluster and their watches are told to re-list. Absent: 1000000000;
/// `false` or `0`: no bump. An EtcdRestore passes it on to the cluster it creates.
pub const RESTORE_BUMP_REVISION_ANNOTATION: &str = "etcd.database.coreos.com/restore-bump-revision";

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};

/// Every CustomResourceDefinition this API defines, in installation order, with the CEL
/// validation rules of [`validation_rules`] (Kubernetes 1.25+).
///
/// Schema `default`s are removed: the operator validates and defaults specs itself and reports
/// what it refused, and the generated `default`s (serde's) are rejected by the apiserver for
/// some fields.
pub fn crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    let mut crds = vec![EtcdCluster::crd(), EtcdBackup::crd(), EtcdRestore::crd()];
    for_each_schema(&mut crds, &mut |s| {
        s.default = None;
        s.description = s.description.take().map(|d| unwrap_lines(&d));
    });
    validation_rules::add(&mut crds);
    crds
}

/// A description with the line breaks of its doc comment's wrapping removed, so that `kubectl
/// explain` wraps it as one paragraph. Blank lines and lines starting with a space, `-` or `*`
/// (paragraphs and lists, as in the Kubernetes types' descriptions) keep their breaks.
fn unwrap_lines(d: &str) -> String {
    let mut out = String::with_capacity(d.len());
    let mut chars = d.chars().peekable();
    while let Some(c) = chars.next() {
        let keep = |next: Option<&char>| matches!(next, None | Some('\n' | ' ' | '-' | '*'));
        if c == '\n' && !out.ends_with('\n') && !keep(chars.peek()) {
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// [`crds`] without validation rules, for apiservers that have no CEL (before 1.25; 1.20
/// refuses the `x-kubernetes-validations` field).
pub fn crds_without_validation_rules() -> Vec<CustomResourceDefinition> {
    let mut crds = crds();
    validation_rules::strip(&mut crds);
    crds
}

/// Calls `f` on every schema of every version of `crds`: the roots and everything nested in them
/// (properties, items, additionalProperties, allOf/anyOf/oneOf).
pub(crate) fn for_each_schema(crds: &mut [CustomResourceDefinition], f: &mut impl FnMut(&mut JSONSchemaProps)) {
    fn walk(s: &mut JSONSchemaProps, f: &mut impl FnMut(&mut JSONSchemaProps)) {
        f(s);
        for p in s.properties.iter_mut().flat_map(|m| m.values_mut()) {
            walk(p, f);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(i)) = s.items.as_mut() {
            walk(i, f);
        }
        if let Some(JSONSchemaPropsOrBool::Schema(a)) = s.additional_properties.as_mut() {
            walk(a, f);
        }
        for sub in [&mut s.all_of, &mut s.any_of, &mut s.one_of].into_iter().flatten().flat_map(|v| v.iter_mut()) {
            walk(sub, f);
        }
    }
    for v in crds.iter_mut().flat_map(|c| c.spec.versions.iter_mut()) {
        if let Some(root) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            walk(root, f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every property path of every CRD with its description (`[]` steps into array items,
    /// `{}` into map values).
    fn described_properties() -> Vec<(String, Option<String>)> {
        fn walk(s: &JSONSchemaProps, path: &str, out: &mut Vec<(String, Option<String>)>) {
            for (name, p) in s.properties.iter().flatten() {
                let at = format!("{path}.{name}");
                out.push((at.clone(), p.description.clone()));
                walk(p, &at, out);
            }
            if let Some(JSONSchemaPropsOrArray::Schema(i)) = &s.items {
                walk(i, &format!("{path}[]"), out);
            }
            if let Some(JSONSchemaPropsOrBool::Schema(a)) = &s.additional_properties {
                walk(a, &format!("{path}{{}}"), out);
            }
            for sub in [&s.all_of, &s.any_of, &s.one_of].into_iter().flatten().flatten() {
                walk(sub, path, out);
            }
        }
        let mut out = vec![];
        for crd in crds() {
            for v in &crd.spec.versions {
                let root = v.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).expect("a schema");
                out.push((crd.spec.names.kind.clone(), root.description.clone()));
                walk(root, &crd.spec.names.kind, &mut out);
            }
        }
        out
    }

    /// `kubectl explain` prints these descriptions: every field of the three kinds has one
    /// (ours from doc comments, the Kubernetes types' from k8s-openapi).
    #[test]
    fn every_property_is_described() {
        let all = described_properties();
        assert!(all.len() > 500, "the walk reached nested Kubernetes types: {}", all.len());
        let missing: Vec<&String> =
            all.iter().filter(|(_, d)| d.as_deref().is_none_or(|d| d.trim().is_empty())).map(|(p, _)| p).collect();
        assert!(missing.is_empty(), "properties without a description: {missing:#?}");
    }

    #[test]
    fn wrapped_doc_lines_become_one_paragraph_and_lists_stay() {
        assert_eq!(unwrap_lines("one\ntwo.\n\nnext"), "one two.\n\nnext");
        assert_eq!(unwrap_lines("values:\n - `a`\n - `b`"), "values:\n - `a`\n - `b`");
    }

    /// The descriptions users read most say what the field mirrors and its limits.
    #[test]
    fn key_descriptions_name_range_default_and_coreos_field() {
        let all: std::collections::BTreeMap<String, String> =
            described_properties().into_iter().map(|(p, d)| (p, d.unwrap_or_default())).collect();
        let size = &all["EtcdCluster.spec.size"];
        assert!(size.contains("1 to 7") && size.contains("CoreOS `spec.size`"), "{size}");
        let version = &all["EtcdCluster.spec.version"];
        assert!(version.contains(cluster::DEFAULT_VERSION), "the default is named: {version}");
        let pvc = &all["EtcdCluster.spec.pod.persistentVolumeClaimSpec"];
        assert!(pvc.contains("emptyDir") && pvc.contains("CoreOS"), "{pvc}");
        let timeout = &all["EtcdBackup.spec.backupPolicy.timeoutInSecond"];
        assert!(timeout.contains("seconds") && timeout.contains("86400"), "{timeout}");
    }
}

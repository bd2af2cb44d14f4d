//! CRD validation rules (CEL, `x-kubernetes-validations`): the cross-field and transition rules
//! that `kubectl apply` can refuse before the operator sees an object, with the operator's own
//! words. They repeat checks the operator makes anyway (objects may predate the rules, and
//! servers before 1.25 do not run them); the one rule the operator cannot make itself is a
//! transition rule: an EtcdRestore's spec cannot change (a restore runs once, a changed spec
//! would silently do nothing).
//!
//! One table, [`rules`], says where each rule sits in which CRD. Servers without CEL support
//! (Kubernetes 1.20 refuses the field under server-side apply) get the CRDs from
//! [`strip`]; the operator feature-detects which one to install (`crds::install`).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, ValidationRule,
};

/// etcd settings the operator derives from membership, data location and recovery; users must
/// not set them through `spec.pod.etcdEnv` (the operator's validation uses the same lists).
pub const OPERATOR_OWNED_ETCD_ENV: &[&str] = &[
    "ETCD_NAME",
    "ETCD_DATA_DIR",
    "ETCD_INITIAL_CLUSTER",
    "ETCD_INITIAL_CLUSTER_STATE",
    "ETCD_INITIAL_CLUSTER_TOKEN",
    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
    "ETCD_ADVERTISE_CLIENT_URLS",
    "ETCD_LISTEN_PEER_URLS",
    "ETCD_LISTEN_CLIENT_URLS",
];
/// Owned since the operator recovers quorum loss and checks member volumes itself; a cluster
/// that formed before is only told (the operator's legacy validation), never stopped.
pub const OPERATOR_OWNED_ETCD_ENV_SINCE_0_2: &[&str] =
    &["ETCD_WAL_DIR", "ETCD_FORCE_NEW_CLUSTER", "ETCD_STRICT_RECONFIG_CHECK"];
/// `ETCD_DISCOVERY*`: discovery would bootstrap the cluster a second way.
pub const OPERATOR_OWNED_ETCD_ENV_PREFIX: &str = "ETCD_DISCOVERY";
/// Bound on `spec.pod.etcdEnv` (also what keeps the rule's CEL cost estimate bounded).
pub const MAX_ETCD_ENV: i64 = 128;
/// Bound on `spec.networkPolicy.clients` (also what keeps the rule's CEL cost estimate bounded).
pub const MAX_NETWORK_CLIENTS: i64 = 32;
/// Longest cluster name: the client Service `<name>-client` must be a 63-character label.
pub const MAX_CLUSTER_NAME: usize = 63 - "-client".len();

/// A rule at `path` (property names from the root schema; `[]` steps into array items) of the
/// CRD whose kind is `kind`.
#[derive(Clone, Debug)]
pub struct Rule {
    pub kind: &'static str,
    pub path: &'static [&'static str],
    pub rule: String,
    pub message: String,
}

fn rule(
    kind: &'static str,
    path: &'static [&'static str],
    rule: impl Into<String>,
    message: impl Into<String>,
) -> Rule {
    Rule { kind, path, rule: rule.into(), message: message.into() }
}

/// The storage block a storage type needs, as the operator's `Location::of` reads it.
fn storage_block_rule(field: &str) -> String {
    format!(
        "!has(self.{field}) || !(self.{field} in ['S3', 'ABS', 'GCS', 'PVC']) || \
         (self.{field} == 'S3' && has(self.s3)) || (self.{field} == 'ABS' && has(self.abs)) || \
         (self.{field} == 'GCS' && has(self.gcs)) || (self.{field} == 'PVC' && has(self.pvc))"
    )
}

/// Every rule, in one place.
///
/// Only what the operator refuses for *every* object goes here: the apiserver evaluates these
/// rules on every write of the object, status updates and metadata patches included, and does not
/// ratchet items of atomic lists. A rule that also refused what an older operator accepted (the
/// `etcdEnv` names owned since 0.2, `ETCD_DISCOVERY*`) would block the status and marks of a
/// cluster that formed under it, and with them its healing; those names stay the operator's own
/// refusal (a condition and an Event).
pub fn rules() -> Vec<Rule> {
    let owned: Vec<String> = OPERATOR_OWNED_ETCD_ENV.iter().map(|n| format!("'{n}'")).collect();
    vec![
        rule(
            "EtcdCluster",
            &[],
            format!("size(self.metadata.name) <= {MAX_CLUSTER_NAME}"),
            format!(
                "metadata.name: at most {MAX_CLUSTER_NAME} characters fit, because the client Service `<name>-client` must be a 63-character DNS label"
            ),
        ),
        rule(
            "EtcdCluster",
            &["spec", "pod", "etcdEnv", "[]"],
            format!("!(self.name in [{}])", owned.join(", ")),
            format!(
                "spec.pod.etcdEnv: this name is owned by the operator (membership and data location are its job) and cannot be set: {}",
                OPERATOR_OWNED_ETCD_ENV.join(", ")
            ),
        ),
        rule(
            "EtcdCluster",
            &["spec", "recovery"],
            "!has(self.quorumLoss) || self.quorumLoss != 'FromBackup' || (has(self.backup) && self.backup != '')",
            "spec.recovery.quorumLoss FromBackup needs spec.recovery.backup (an EtcdBackup name)",
        ),
        rule(
            "EtcdCluster",
            &["spec", "TLS", "static"],
            "(has(self.operatorSecret) && self.operatorSecret != '') == \
             (has(self.member) && has(self.member.serverSecret) && self.member.serverSecret != '')",
            "spec.TLS.static: operatorSecret and member.serverSecret are set together (clients need the server's CA and a client certificate)",
        ),
        rule(
            "EtcdCluster",
            &["spec", "TLS"],
            "!has(self.static) || !has(self.auto)",
            "spec.TLS: set either static (your certificates) or auto (the operator's), not both",
        ),
        rule(
            "EtcdCluster",
            &["spec", "networkPolicy", "clients", "[]"],
            "has(self.ipBlock) ? !has(self.podSelector) && !has(self.namespaceSelector) : (has(self.podSelector) || has(self.namespaceSelector))",
            "spec.networkPolicy.clients: each entry is either an ipBlock alone, or a podSelector and/or a namespaceSelector",
        ),
        rule(
            "EtcdBackup",
            &["spec"],
            storage_block_rule("storageType"),
            "spec.storageType needs its block: S3 → s3, ABS → abs, GCS → gcs, PVC → pvc",
        ),
        rule(
            "EtcdBackup",
            &["spec"],
            "(has(self.etcdEndpoints) && size(self.etcdEndpoints) > 0) != (has(self.clusterName) && self.clusterName != '')",
            "spec: set either etcdEndpoints or clusterName (exactly one names the cluster to back up)",
        ),
        rule(
            "EtcdRestore",
            &["spec"],
            storage_block_rule("backupStorageType"),
            "spec.backupStorageType needs its block: S3 → s3, ABS → abs, GCS → gcs, PVC → pvc",
        ),
        rule(
            "EtcdRestore",
            &["spec"],
            "self == oldSelf",
            "spec is immutable: a restore runs once; create a new EtcdRestore to restore again",
        ),
    ]
}

/// The schema at `path` below `root`, if the CRD has it.
fn at<'a>(root: &'a mut JSONSchemaProps, path: &[&str]) -> Option<&'a mut JSONSchemaProps> {
    let mut s = root;
    for step in path {
        s = if *step == "[]" {
            match s.items.as_mut()? {
                JSONSchemaPropsOrArray::Schema(i) => i.as_mut(),
                JSONSchemaPropsOrArray::Schemas(_) => return None,
            }
        } else {
            s.properties.as_mut()?.get_mut(*step)?
        };
    }
    Some(s)
}

/// Adds [`rules`] (and the bounds they need) to the CRDs. Panics when a rule's path is not in
/// its CRD: that is a programming error caught by the unit tests, never by users.
pub fn add(crds: &mut [CustomResourceDefinition]) {
    let rules = rules();
    for crd in crds.iter_mut() {
        let kind = crd.spec.names.kind.clone();
        for v in crd.spec.versions.iter_mut() {
            let Some(root) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) else { continue };
            if kind == "EtcdCluster" {
                if let Some(env) = at(root, &["spec", "pod", "etcdEnv"]) {
                    env.max_items = Some(MAX_ETCD_ENV);
                }
                if let Some(name) = at(root, &["spec", "pod", "etcdEnv", "[]", "name"]) {
                    name.max_length = Some(253);
                }
                if let Some(clients) = at(root, &["spec", "networkPolicy", "clients"]) {
                    clients.max_items = Some(MAX_NETWORK_CLIENTS);
                }
            }
            for r in rules.iter().filter(|r| r.kind == kind) {
                let s = at(root, r.path).unwrap_or_else(|| panic!("{kind} has no schema at {:?}", r.path));
                s.x_kubernetes_validations.get_or_insert_with(Vec::new).push(ValidationRule {
                    rule: r.rule.clone(),
                    message: Some(r.message.clone()),
                    ..Default::default()
                });
            }
        }
    }
}

/// The same CRDs without any validation rule, for servers that have no CEL.
pub fn strip(crds: &mut [CustomResourceDefinition]) {
    crate::for_each_schema(crds, &mut |s| s.x_kubernetes_validations = None);
}

/// Number of validation rules in a CRD (for tests and the start-up log line).
pub fn count(crd: &CustomResourceDefinition) -> usize {
    let mut n = 0;
    crate::for_each_schema(&mut [crd.clone()], &mut |s| n += s.x_kubernetes_validations.as_ref().map_or(0, Vec::len));
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_lands_in_its_crd() {
        let crds = crate::crds();
        let total: usize = crds.iter().map(count).sum();
        assert_eq!(total, rules().len());
        let mut bare = crds.clone();
        strip(&mut bare);
        assert_eq!(bare.iter().map(count).sum::<usize>(), 0);
    }

    #[test]
    fn the_etcd_env_rule_names_every_variable_always_owned_and_no_newer_one() {
        let r = rules().into_iter().find(|r| r.path.ends_with(&["etcdEnv", "[]"])).unwrap();
        for n in OPERATOR_OWNED_ETCD_ENV {
            assert!(r.rule.contains(&format!("'{n}'")), "{n} missing from {}", r.rule);
            assert!(r.message.contains(n), "{n} missing from the message");
        }
        // Clusters formed under older operators may carry these: only the operator refuses them.
        for n in OPERATOR_OWNED_ETCD_ENV_SINCE_0_2.iter().chain([&OPERATOR_OWNED_ETCD_ENV_PREFIX]) {
            assert!(!r.rule.contains(n), "{n} in {}", r.rule);
        }
    }
}

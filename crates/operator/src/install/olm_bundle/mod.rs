//! `etcd-operator bundle`: the OLM bundle (registry+v1 format) in `bundle/`: a
//! ClusterServiceVersion, the three CRDs and `metadata/annotations.yaml`. Everything comes from
//! the code the other install paths use, so the bundle cannot drift from them: the Deployment
//! from `manifests::deployment`, the permissions from `rbac.rs`, the CRDs from the API crate and
//! the descriptors' texts from the CRDs' own descriptions. The checked-in `bundle/` is compared
//! with this output by `tests::checked_in_bundle_is_the_generated_one`.
//!
//! Under OLM the operator reads its scope from the `olm.targetNamespaces` annotation OLM puts
//! on its pod ([`TARGET_NAMESPACES_ENV`], see [`watch_scope`]): one namespace (OwnNamespace,
//! SingleNamespace) or all of them (AllNamespaces, the operator's `-cluster-wide`). The CRDs
//! are OLM's, so the operator runs with `-create-crd=false` and asks for no cluster-scoped
//! permission.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector};
use serde_json::{Value, json};

use crate::OPERATOR_NAME;
use crate::install::rbac::Scope;

#[cfg(test)]
mod tests;

/// OLM package and its one channel.
pub const PACKAGE: &str = OPERATOR_NAME;
pub const CHANNEL: &str = "alpha";
/// The capability level claimed, on the Operator Framework's maturity model
/// (`docs/src/install/olm.md` says why this one).
pub const CAPABILITIES: &str = "Deep Insights";
/// `createdAt` of this version's CSV: a fixed date, so that the bundle is reproducible (bump it
/// with the version).
pub const CREATED_AT: &str = "2026-11-24T00:00:00Z";
/// Where the source lives (the CSV's `repository` annotation and link).
pub const REPOSITORY_URL: &str = "https://github.com/etcd-operator-rs/etcd-operator";
/// The oldest Kubernetes the bundle's CRDs install on: they carry CEL validation rules (1.25+).
pub const MIN_KUBE_VERSION: &str = "1.25.0";
/// Environment variable the CSV's Deployment fills from the `olm.targetNamespaces` annotation.
pub const TARGET_NAMESPACES_ENV: &str = "OLM_TARGET_NAMESPACES";

/// What to render.
#[derive(Clone, Debug)]
pub struct Options {
    /// The operator image (also the members' init-container image).
    pub image: String,
}

/// The namespace an OLM install watches, from the `olm.targetNamespaces` value: `Ok(None)` for
/// every namespace (AllNamespaces: the operator runs as with `-cluster-wide`), `Ok(Some(ns))`
/// for one (OwnNamespace, SingleNamespace). Several namespaces (MultiNamespace, which the CSV
/// does not offer) are refused.
pub fn watch_scope(target_namespaces: &str) -> Result<Option<String>, String> {
    let namespaces: Vec<&str> = target_namespaces.split(',').map(str::trim).filter(|n| !n.is_empty()).collect();
    match namespaces.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.to_string())),
        many => Err(format!(
            "{TARGET_NAMESPACES_ENV}={target_namespaces:?} names {} namespaces: this operator watches one namespace or all of them (the MultiNamespace install mode is not supported)",
            many.len()
        )),
    }
}

/// The Deployment spec of the install strategy: `manifests`' Deployment, with the CRDs left to
/// OLM and the scope read from OLM's annotation.
fn deployment_spec(o: &Options) -> anyhow::Result<Value> {
    let mut d = crate::install::manifests::deployment(&crate::install::manifests::Options {
        namespace: "olm".into(), // not part of the spec: OLM installs into the CSV's namespace
        image: o.image.clone(),
        cluster_wide: false,
        replicas: 1,
        with_crds: false,
        validation_rules: true,
        monitoring: false,
        metrics_auth: false,
    });
    let spec = d.spec.as_mut().ok_or_else(|| anyhow::anyhow!("the Deployment has no spec"))?;
    let pod = spec.template.spec.as_mut().ok_or_else(|| anyhow::anyhow!("the Deployment has no pod spec"))?;
    let c = pod.containers.first_mut().ok_or_else(|| anyhow::anyhow!("the Deployment has no container"))?;
    c.args = Some(vec!["-create-crd=false".into()]);
    c.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: TARGET_NAMESPACES_ENV.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.annotations['olm.targetNamespaces']".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    Ok(serde_json::to_value(d.spec)?)
}

/// `permissions` (namespaced; OLM grants them in the watched namespace, or cluster-wide for
/// AllNamespaces) and `clusterPermissions` (what `rbac.rs` needs cluster-scoped when the
/// operator does not install CRDs: nothing today, so the field is left out while empty).
fn permissions() -> anyhow::Result<(Value, Option<Value>)> {
    let entry = |rules| json!([{"serviceAccountName": OPERATOR_NAME, "rules": rules}]);
    let namespaced = crate::install::manifests::rules(|p| p.scope == Scope::Namespaced);
    // Cluster-scoped permissions are only for the start-up CRD install (`-create-crd`).
    let cluster =
        crate::install::manifests::rules(|p| p.scope == Scope::Cluster && p.resource != "customresourcedefinitions");
    Ok((
        entry(serde_json::to_value(namespaced)?),
        (!cluster.is_empty()).then(|| entry(serde_json::to_value(&cluster).unwrap_or_default())),
    ))
}

/// The `description` of the CRD property at `path` (dot-separated, from the root), for the
/// descriptors: the same text `kubectl explain` prints.
fn schema_description(crd: &Value, path: &str) -> String {
    let mut s = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    for step in path.split('.').filter(|s| !s.is_empty()) {
        s = &s["properties"][step];
    }
    s["description"].as_str().unwrap_or_default().replace('\n', " ")
}

/// `(path under spec/status, display name, x-descriptors)`.
type Descriptor = (&'static str, &'static str, &'static [&'static str]);

/// Spec and status descriptors of each kind: the fields a console shows and edits.
fn descriptors(kind: &str) -> (Vec<Descriptor>, Vec<Descriptor>) {
    match kind {
        "EtcdCluster" => (
            vec![
                ("size", "Size", &["urn:alm:descriptor:com.tectonic.ui:podCount"]),
                ("version", "Version", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                ("repository", "Image repository", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                ("paused", "Paused", &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"]),
                ("pod.resources", "Resources", &["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"]),
                ("pod.persistentVolumeClaimSpec", "Member volumes", &["urn:alm:descriptor:com.tectonic.ui:advanced"]),
                (
                    "recovery.quorumLoss",
                    "Quorum-loss recovery",
                    &[
                        "urn:alm:descriptor:com.tectonic.ui:select:Wait",
                        "urn:alm:descriptor:com.tectonic.ui:select:FromSurvivor",
                        "urn:alm:descriptor:com.tectonic.ui:select:FromBackup",
                    ],
                ),
                (
                    "maintenance.quotaBackendBytes",
                    "Space quota (bytes)",
                    &["urn:alm:descriptor:com.tectonic.ui:number"],
                ),
            ],
            vec![
                ("phase", "Phase", &["urn:alm:descriptor:io.kubernetes.phase"]),
                ("readyMembers", "Ready members", &["urn:alm:descriptor:text"]),
                ("members", "Members", &["urn:alm:descriptor:com.tectonic.ui:podStatuses"]),
                ("serviceName", "Client Service", &["urn:alm:descriptor:io.kubernetes:Service"]),
                ("clientPort", "Client port", &["urn:alm:descriptor:text"]),
                ("currentVersion", "Current version", &["urn:alm:descriptor:text"]),
                ("targetVersion", "Target version", &["urn:alm:descriptor:text"]),
                ("leader", "Leader", &["urn:alm:descriptor:io.kubernetes:Pod"]),
                ("conditions", "Conditions", &["urn:alm:descriptor:io.kubernetes.conditions"]),
            ],
        ),
        "EtcdBackup" => (
            vec![
                ("clusterName", "EtcdCluster", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                ("storageType", "Storage type", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                (
                    "backupPolicy.backupIntervalInSecond",
                    "Interval (seconds)",
                    &["urn:alm:descriptor:com.tectonic.ui:number"],
                ),
                ("backupPolicy.maxBackups", "Backups kept", &["urn:alm:descriptor:com.tectonic.ui:number"]),
            ],
            vec![
                ("succeeded", "Succeeded", &["urn:alm:descriptor:text"]),
                ("lastSuccessDate", "Last success", &["urn:alm:descriptor:timestamp"]),
                ("path", "Last backup", &["urn:alm:descriptor:text"]),
                ("sha256", "sha256", &["urn:alm:descriptor:text"]),
                ("reason", "Reason", &["urn:alm:descriptor:text"]),
                ("conditions", "Conditions", &["urn:alm:descriptor:io.kubernetes.conditions"]),
            ],
        ),
        _ => (
            vec![
                ("etcdCluster.name", "EtcdCluster to create", &["urn:alm:descriptor:com.tectonic.ui:text"]),
                ("backupStorageType", "Storage type", &["urn:alm:descriptor:com.tectonic.ui:text"]),
            ],
            vec![
                ("phase", "Phase", &["urn:alm:descriptor:io.kubernetes.phase"]),
                ("succeeded", "Succeeded", &["urn:alm:descriptor:text"]),
                ("reason", "Reason", &["urn:alm:descriptor:text"]),
                ("conditions", "Conditions", &["urn:alm:descriptor:io.kubernetes.conditions"]),
            ],
        ),
    }
}

/// One `spec.customresourcedefinitions.owned` entry.
fn owned(crd: &Value, display: &str) -> Value {
    let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
    let (spec, status) = descriptors(kind);
    let describe = |root: &str, ds: Vec<Descriptor>| -> Vec<Value> {
        ds.into_iter()
            .map(|(path, name, x)| {
                json!({"path": path, "displayName": name,
                       "description": schema_description(crd, &format!("{root}.{path}")), "x-descriptors": x})
            })
            .collect()
    };
    let uses = |kind: &str, name: &str, version: &str| json!({"kind": kind, "name": name, "version": version});
    let resources = match kind {
        "EtcdCluster" => vec![
            uses("Pod", "pods", "v1"),
            uses("Service", "services", "v1"),
            uses("PersistentVolumeClaim", "persistentvolumeclaims", "v1"),
            uses("PodDisruptionBudget", "poddisruptionbudgets", "v1"),
        ],
        // Backup, verify and restore pods; a restore creates an EtcdCluster.
        _ => vec![uses("Pod", "pods", "v1"), uses("EtcdCluster", "etcdclusters", etcd_operator_api::VERSION)],
    };
    json!({
        "name": crd["metadata"]["name"],
        "version": etcd_operator_api::VERSION,
        "kind": kind,
        "displayName": display,
        "description": schema_description(crd, "").trim_end_matches('.').to_string() + ".",
        "resources": resources,
        "specDescriptors": describe("spec", spec),
        "statusDescriptors": describe("status", status),
    })
}

/// `alm-examples`: one object of each kind, as a user would start (the EtcdCluster is
/// `examples/example-etcd-cluster.yaml`'s).
pub fn examples() -> Value {
    json!([
        {
            "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdCluster",
            "metadata": {"name": "example-etcd-cluster"},
            "spec": {"size": 3, "version": "3.6.15"}
        },
        {
            "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdBackup",
            "metadata": {"name": "example-etcd-cluster-backup"},
            "spec": {
                "clusterName": "example-etcd-cluster",
                "storageType": "S3",
                "backupPolicy": {"backupIntervalInSecond": 86400, "maxBackups": 7, "timeoutInSecond": 600},
                "s3": {"path": "my-bucket/etcd/example-etcd-cluster", "awsSecret": "aws-credentials"}
            }
        },
        {
            "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdRestore",
            "metadata": {"name": "example-etcd-cluster-restore"},
            "spec": {
                "etcdCluster": {"name": "example-etcd-cluster-restored"},
                "backupStorageType": "S3",
                "s3": {"path": "my-bucket/etcd/example-etcd-cluster", "awsSecret": "aws-credentials"}
            }
        }
    ])
}

const DESCRIPTION: &str = "\
Runs etcd clusters on Kubernetes, API-compatible with the archived CoreOS etcd-operator \
(`etcd.database.coreos.com/v1beta2`): existing EtcdCluster, EtcdBackup and EtcdRestore manifests \
apply verbatim, and clusters made by the CoreOS operator are adopted in place.

* **Create and resize** one member at a time; new members join as learners and are promoted \
once caught up.
* **Heal**: a lost member restarts on its volume or is replaced, never without a quorum; \
quorum loss is reported, and recovered from a survivor or a backup when you opt in.
* **Upgrade** etcd 3.4 to 3.7 one member at a time, the leader last, along the upstream \
upgrade path.
* **Backup and restore** to S3, Azure Blob Storage, GCS or a PVC, checked with sha256.
* **Day 2**: space quota, compaction, defragmentation, NOSPACE recovery, PodDisruptionBudgets.
* **Insights**: Prometheus metrics of the operator and etcd, alert rules and a Grafana \
dashboard (`etcd-operator manifests --monitoring`), conditions and Events for every action.

Install modes: OwnNamespace and SingleNamespace manage the EtcdClusters of that namespace; \
AllNamespaces runs the operator cluster-wide, where it manages the EtcdClusters annotated \
`etcd.database.coreos.com/scope: clusterwide` (the CoreOS operator's `-cluster-wide` rule).
";

/// The ClusterServiceVersion.
pub fn csv(o: &Options) -> anyhow::Result<Value> {
    let version = env!("CARGO_PKG_VERSION");
    let crds: Vec<Value> =
        crate::install::crds::crds(true).into_iter().map(serde_json::to_value).collect::<Result<_, _>>()?;
    let display = ["etcd Cluster", "etcd Backup", "etcd Restore"];
    let (permissions, cluster_permissions) = permissions()?;
    let mut strategy = json!({
        "deployments": [{
            "name": OPERATOR_NAME,
            "label": crate::naming::operator_labels(),
            "spec": deployment_spec(o)?,
        }],
        "permissions": permissions,
    });
    if let Some(c) = cluster_permissions {
        strategy["clusterPermissions"] = c;
    }
    let mode = |t: &str, supported: bool| json!({"type": t, "supported": supported});
    Ok(json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{PACKAGE}.v{version}"),
            "annotations": {
                "alm-examples": serde_json::to_string_pretty(&examples())?,
                "capabilities": CAPABILITIES,
                "categories": "Database",
                "containerImage": o.image,
                "createdAt": CREATED_AT,
                "repository": REPOSITORY_URL,
                "description": "Creates, resizes, heals, upgrades, backs up and restores etcd clusters (CoreOS etcd-operator API).",
                "support": "etcd-operator-rs",
                "operators.operatorframework.io/suggested-namespace": OPERATOR_NAME,
            },
        },
        "spec": {
            "displayName": "etcd",
            "version": version,
            "maturity": CHANNEL,
            "minKubeVersion": MIN_KUBE_VERSION,
            "description": DESCRIPTION,
            "keywords": ["etcd", "key value", "database", "coreos", "backup"],
            "provider": {"name": "etcd-operator-rs"},
            "links": [
                {"name": "Source", "url": REPOSITORY_URL},
                {"name": "etcd", "url": "https://etcd.io"},
            ],
            "installModes": [
                mode("OwnNamespace", true),
                mode("SingleNamespace", true),
                mode("MultiNamespace", false),
                mode("AllNamespaces", true),
            ],
            "install": {"strategy": "deployment", "spec": strategy},
            "customresourcedefinitions": {
                "owned": crds.iter().zip(display).map(|(c, d)| owned(c, d)).collect::<Vec<_>>(),
            },
            "relatedImages": [
                {"name": "etcd-operator", "image": o.image},
                {"name": "etcd", "image": format!("{}:v{}", etcd_operator_api::cluster::DEFAULT_REPOSITORY,
                                                    etcd_operator_api::cluster::DEFAULT_VERSION)},
            ],
        },
    }))
}

/// `metadata/annotations.yaml`: the bundle's format and where OLM finds its parts.
fn annotations() -> Value {
    json!({"annotations": {
        "operators.operatorframework.io.bundle.mediatype.v1": "registry+v1",
        "operators.operatorframework.io.bundle.manifests.v1": "manifests/",
        "operators.operatorframework.io.bundle.metadata.v1": "metadata/",
        "operators.operatorframework.io.bundle.package.v1": PACKAGE,
        "operators.operatorframework.io.bundle.channels.v1": CHANNEL,
        "operators.operatorframework.io.bundle.channel.default.v1": CHANNEL,
    }})
}

/// Every file of the bundle: path relative to the bundle directory, and its YAML.
pub fn files(o: &Options) -> anyhow::Result<Vec<(String, String)>> {
    let header = "# Generated by `etcd-operator bundle`; do not edit (a test compares it with the output).\n";
    let yaml = |v: &Value| -> anyhow::Result<String> { Ok(format!("{header}{}", serde_yaml::to_string(v)?)) };
    // Quoted: a plain date-time is a YAML timestamp to some readers, and OLM wants a string.
    let csv = yaml(&csv(o)?)?.replace(&format!("createdAt: {CREATED_AT}\n"), &format!("createdAt: '{CREATED_AT}'\n"));
    let mut out = vec![(format!("manifests/{PACKAGE}.clusterserviceversion.yaml"), csv)];
    for crd in crate::install::crds::crds(true) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        out.push((format!("manifests/{name}.crd.yaml"), yaml(&serde_json::to_value(&crd)?)?));
    }
    out.push(("metadata/annotations.yaml".into(), yaml(&annotations())?));
    Ok(out)
}

/// Write the bundle into `dir` (`manifests/`, `metadata/`), removing files there that the
/// bundle no longer has. Returns the paths written.
pub fn write(dir: &Path, o: &Options) -> anyhow::Result<Vec<PathBuf>> {
    let files = files(o)?;
    for sub in ["manifests", "metadata"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d)?;
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            let rel = format!("{sub}/{}", p.file_name().unwrap_or_default().to_string_lossy());
            if !files.iter().any(|(f, _)| *f == rel) {
                std::fs::remove_file(&p)?;
            }
        }
    }
    let mut written = vec![];
    for (rel, text) in files {
        let p = dir.join(&rel);
        std::fs::write(&p, text)?;
        written.push(p);
    }
    Ok(written)
}

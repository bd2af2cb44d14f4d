//! The bundle against the `operators.coreos.com/v1alpha1` ClusterServiceVersion fields (typed
//! structs of the fields this bundle uses, named as in operator-framework/api's
//! `clusterserviceversion_types.go`, refusing unknown fields), and the checked-in `bundle/`
//! against the generator.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::rbac::v1::PolicyRule;
use serde::Deserialize;

use super::*;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ClusterServiceVersion {
    api_version: String,
    kind: String,
    metadata: CsvMetadata,
    spec: CsvSpec,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct CsvMetadata {
    name: String,
    annotations: CsvAnnotations,
}

/// The annotations OperatorHub and consoles read.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct CsvAnnotations {
    #[serde(rename = "alm-examples")]
    alm_examples: String,
    capabilities: String,
    categories: String,
    #[serde(rename = "containerImage")]
    container_image: String,
    #[serde(rename = "createdAt")]
    created_at: String,
    repository: String,
    description: String,
    support: String,
    #[serde(rename = "operators.operatorframework.io/suggested-namespace")]
    suggested_namespace: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CsvSpec {
    display_name: String,
    version: String,
    maturity: String,
    min_kube_version: String,
    description: String,
    keywords: Vec<String>,
    provider: AppLink,
    links: Vec<AppLink>,
    install_modes: Vec<InstallMode>,
    install: NamedInstallStrategy,
    #[serde(rename = "customresourcedefinitions")]
    custom_resource_definitions: CustomResourceDefinitions,
    related_images: Vec<RelatedImage>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct AppLink {
    name: String,
    #[serde(default)]
    url: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct InstallMode {
    #[serde(rename = "type")]
    type_: String,
    supported: bool,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct NamedInstallStrategy {
    strategy: String,
    spec: StrategyDetailsDeployment,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StrategyDetailsDeployment {
    deployments: Vec<StrategyDeploymentSpec>,
    #[serde(default)]
    permissions: Vec<StrategyDeploymentPermissions>,
    #[serde(default)]
    cluster_permissions: Vec<StrategyDeploymentPermissions>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct StrategyDeploymentSpec {
    name: String,
    spec: DeploymentSpec,
    #[serde(default)]
    label: BTreeMap<String, String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StrategyDeploymentPermissions {
    service_account_name: String,
    rules: Vec<PolicyRule>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct CustomResourceDefinitions {
    owned: Vec<CrdDescription>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CrdDescription {
    name: String,
    version: String,
    kind: String,
    display_name: String,
    description: String,
    resources: Vec<ApiResourceReference>,
    spec_descriptors: Vec<Descriptor>,
    status_descriptors: Vec<Descriptor>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ApiResourceReference {
    name: String,
    kind: String,
    version: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Descriptor {
    path: String,
    display_name: String,
    description: String,
    #[serde(rename = "x-descriptors")]
    x_descriptors: Vec<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RelatedImage {
    name: String,
    image: String,
}

/// `metadata/annotations.yaml` (operator-framework/api `manifests.AnnotationsFile`, plus the
/// format keys).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct AnnotationsFile {
    annotations: BundleAnnotations,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct BundleAnnotations {
    #[serde(rename = "operators.operatorframework.io.bundle.mediatype.v1")]
    mediatype: String,
    #[serde(rename = "operators.operatorframework.io.bundle.manifests.v1")]
    manifests: String,
    #[serde(rename = "operators.operatorframework.io.bundle.metadata.v1")]
    metadata: String,
    #[serde(rename = "operators.operatorframework.io.bundle.package.v1")]
    package: String,
    #[serde(rename = "operators.operatorframework.io.bundle.channels.v1")]
    channels: String,
    #[serde(rename = "operators.operatorframework.io.bundle.channel.default.v1")]
    default_channel: String,
}

fn bundle_dir() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../bundle")
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(bundle_dir().join(rel)).unwrap_or_else(|e| panic!("bundle/{rel}: {e}"))
}

fn default_options() -> Options {
    Options { image: crate::default_image() }
}

/// The checked-in bundle is exactly `etcd-operator bundle`'s output: regenerate it with
/// `cargo run -p etcd-operator -- bundle` after changing the CRDs, RBAC or the Deployment.
#[test]
fn checked_in_bundle_is_the_generated_one() {
    let generated = files(&default_options()).unwrap();
    let mut on_disk = BTreeSet::new();
    for sub in ["manifests", "metadata"] {
        for e in std::fs::read_dir(bundle_dir().join(sub)).expect("bundle/ is checked in") {
            on_disk.insert(format!("{sub}/{}", e.unwrap().file_name().to_string_lossy()));
        }
    }
    let names: BTreeSet<String> = generated.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(on_disk, names, "bundle/ has other files than the generator writes");
    for (rel, text) in &generated {
        assert!(
            read(rel) == *text,
            "bundle/{rel} differs from the generated one: run `cargo run -p etcd-operator -- bundle`"
        );
    }
}

fn checked_in_csv() -> ClusterServiceVersion {
    let rel = format!("manifests/{PACKAGE}.clusterserviceversion.yaml");
    serde_yaml::from_str(&read(&rel)).unwrap_or_else(|e| panic!("the CSV does not fit the v1alpha1 fields: {e}"))
}

#[test]
fn the_csv_has_the_v1alpha1_structure_and_says_what_it_must() {
    let csv = checked_in_csv();
    assert_eq!(
        (csv.api_version.as_str(), csv.kind.as_str()),
        ("operators.coreos.com/v1alpha1", "ClusterServiceVersion")
    );
    assert_eq!(csv.metadata.name, format!("{PACKAGE}.v{}", csv.spec.version));
    assert!(crate::validation::is_dns1123_label(&csv.metadata.name.replace('.', "-")), "{}", csv.metadata.name);
    let a = &csv.metadata.annotations;
    // The maturity model's levels, as OLM's capability validator knows them.
    let levels = ["Basic Install", "Seamless Upgrades", "Full Lifecycle", "Deep Insights", "Auto Pilot"];
    assert!(levels.contains(&a.capabilities.as_str()), "{}", a.capabilities);
    assert!(a.categories.split(',').all(|c| ["Database", "Storage", "Monitoring"].contains(&c.trim())));
    assert!(a.created_at.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{}", a.created_at);
    assert!(a.repository.starts_with("https://") && !a.description.is_empty() && !a.support.is_empty());
    assert_eq!(a.suggested_namespace, OPERATOR_NAME);
    let s = &csv.spec;
    assert!(!s.display_name.is_empty() && s.description.len() > 200 && !s.keywords.is_empty());
    assert!(!s.provider.name.is_empty() && s.links.iter().all(|l| l.url.starts_with("https://")));
    assert_eq!(s.maturity, CHANNEL);
    assert!(s.min_kube_version.split('.').count() == 3);
    // Install modes: each once; AllNamespaces is the operator's -cluster-wide.
    let modes: BTreeMap<&str, bool> = s.install_modes.iter().map(|m| (m.type_.as_str(), m.supported)).collect();
    assert_eq!(modes.len(), s.install_modes.len(), "an install mode is listed twice");
    assert_eq!(
        modes,
        BTreeMap::from([
            ("AllNamespaces", true),
            ("MultiNamespace", false),
            ("OwnNamespace", true),
            ("SingleNamespace", true)
        ])
    );
    // Related images: the operator and the default etcd.
    assert!(s.related_images.iter().any(|i| i.name == "etcd-operator" && i.image == a.container_image));
    assert!(
        s.related_images
            .iter()
            .any(|i| i.name == "etcd" && i.image.ends_with(etcd_operator_api::cluster::DEFAULT_VERSION))
    );
}

#[test]
fn the_install_strategy_is_the_manifests_deployment_and_rbac() {
    let csv = checked_in_csv();
    let st = &csv.spec.install;
    assert_eq!(st.strategy, "deployment");
    let [d] = &st.spec.deployments[..] else { panic!("one Deployment") };
    assert_eq!(d.name, OPERATOR_NAME);
    assert_eq!(d.label, crate::naming::operator_labels());
    let pod = d.spec.template.spec.clone().unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(csv.metadata.annotations.container_image.as_str()));
    assert_eq!(pod.service_account_name.as_deref(), Some(OPERATOR_NAME));
    assert_eq!(c.args.as_deref(), Some(&["-create-crd=false".to_string()][..]), "OLM owns the CRDs");
    let target = c.env.iter().flatten().find(|e| e.name == TARGET_NAMESPACES_ENV).expect("the scope comes from OLM");
    let field = target.value_from.as_ref().and_then(|v| v.field_ref.as_ref()).map(|f| f.field_path.as_str());
    assert_eq!(field, Some("metadata.annotations['olm.targetNamespaces']"));
    // Everything else is `manifests`' Deployment.
    let mut ours = crate::install::manifests::deployment(&crate::install::manifests::Options {
        namespace: "x".into(),
        image: crate::default_image(),
        cluster_wide: false,
        replicas: 1,
        with_crds: false,
        validation_rules: true,
        monitoring: false,
        metrics_auth: false,
    })
    .spec
    .unwrap();
    let mut theirs = d.spec.clone();
    for s in [&mut ours, &mut theirs] {
        let c = &mut s.template.spec.as_mut().unwrap().containers[0];
        c.args = None;
        c.env.as_mut().unwrap().retain(|e| e.name != TARGET_NAMESPACES_ENV);
    }
    assert_eq!(ours, theirs);
    // Permissions: rbac.rs's namespaced table for the operator's ServiceAccount; no
    // cluster-scoped permission without the CRD install but reading Nodes by name.
    let [p] = &st.spec.permissions[..] else { panic!("one permissions entry") };
    assert_eq!(p.service_account_name, OPERATOR_NAME);
    assert_eq!(p.rules, crate::install::manifests::rules(|p| p.scope == Scope::Namespaced));
    let [c] = &st.spec.cluster_permissions[..] else { panic!("one clusterPermissions entry") };
    assert_eq!(
        c.rules,
        crate::install::manifests::rules(|p| p.scope == Scope::Cluster && p.resource == "nodes"),
        "{c:?}"
    );
    // The namespaced verbs the start-up check asks for when `-create-crd=false` are all there.
    for perm in crate::install::rbac::PERMISSIONS.iter().filter(|p| p.scope == Scope::Namespaced) {
        assert!(p.rules.iter().any(|r| r.resources.as_deref() == Some(&[perm.resource.to_string()][..])), "{perm:?}");
    }
}

#[test]
fn owned_crds_examples_and_descriptors_match_the_crds_in_the_bundle() {
    let csv = checked_in_csv();
    let owned = &csv.spec.custom_resource_definitions.owned;
    assert_eq!(owned.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), crate::install::rbac::CRD_NAMES);
    for o in owned {
        let crd: serde_json::Value = serde_yaml::from_str(&read(&format!("manifests/{}.crd.yaml", o.name))).unwrap();
        assert_eq!(crd["spec"]["names"]["kind"], o.kind.as_str());
        assert_eq!(crd["spec"]["versions"][0]["name"], o.version.as_str());
        assert!(!o.display_name.is_empty() && o.description.len() > 20, "{o:?}");
        assert!(
            !o.resources.is_empty()
                && o.resources.iter().all(|r| !r.name.is_empty() && !r.kind.is_empty() && !r.version.is_empty())
        );
        for (root, ds) in [("spec", &o.spec_descriptors), ("status", &o.status_descriptors)] {
            assert!(!ds.is_empty(), "{} has no {root} descriptors", o.kind);
            for d in ds.iter() {
                let path = format!("{root}.{}", d.path);
                assert!(
                    schema_description(&crd, &path) == d.description && !d.description.is_empty(),
                    "{}: {path} is not a described field of the CRD",
                    o.kind
                );
                assert!(
                    !d.display_name.is_empty() && d.x_descriptors.iter().all(|x| x.starts_with("urn:alm:descriptor:"))
                );
            }
        }
    }
    // alm-examples: one valid object of every owned kind.
    let examples: Vec<serde_json::Value> = serde_json::from_str(&csv.metadata.annotations.alm_examples).unwrap();
    let kinds: Vec<&str> = examples.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, owned.iter().map(|o| o.kind.as_str()).collect::<Vec<_>>());
    for e in &examples {
        assert_eq!(e["apiVersion"], "etcd.database.coreos.com/v1beta2");
        match e["kind"].as_str().unwrap() {
            "EtcdCluster" => {
                let c: etcd_operator_api::EtcdCluster = serde_json::from_value(e.clone()).unwrap();
                crate::validation::validate("example-etcd-cluster", &c.spec).expect("a supported, valid spec");
                // The spec of examples/example-etcd-cluster.yaml, which the e2e tests run and
                // which raises no warning (an old release would get the operator's EtcdAdvisory).
                let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/example-etcd-cluster.yaml");
                let file: serde_json::Value = serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
                assert_eq!(e["spec"], file["spec"], "the alm-example differs from {path}");
            }
            "EtcdBackup" => {
                let b: etcd_operator_api::EtcdBackup = serde_json::from_value(e.clone()).unwrap();
                crate::backup::backup_planner::check_spec(&b.spec, "ns").expect("a valid backup");
            }
            _ => {
                let r: etcd_operator_api::EtcdRestore = serde_json::from_value(e.clone()).unwrap();
                crate::backup::restore_planner::check_spec(&r.spec).expect("a valid restore");
            }
        }
    }
}

#[test]
fn bundle_annotations_name_the_format_the_parts_and_the_package() {
    let a: AnnotationsFile = serde_yaml::from_str(&read("metadata/annotations.yaml")).unwrap();
    let a = a.annotations;
    assert_eq!(a.mediatype, "registry+v1");
    for dir in [&a.manifests, &a.metadata] {
        assert!(dir.ends_with('/') && bundle_dir().join(dir).is_dir(), "{dir}");
    }
    assert!(checked_in_csv().metadata.name.starts_with(&format!("{}.v", a.package)));
    assert_eq!((a.channels.as_str(), a.default_channel.as_str()), (CHANNEL, CHANNEL));
}

#[test]
fn olm_target_namespaces_give_one_namespace_or_all() {
    assert_eq!(watch_scope(""), Ok(None), "AllNamespaces");
    assert_eq!(watch_scope("team-a"), Ok(Some("team-a".into())));
    assert_eq!(watch_scope(" team-a ,"), Ok(Some("team-a".into())));
    let err = watch_scope("a,b").unwrap_err();
    assert!(err.contains("MultiNamespace"), "{err}");
}

/// `write` leaves exactly the bundle's files behind (an older file name is removed).
#[test]
fn write_replaces_what_was_there() {
    let dir = std::env::temp_dir().join(format!("olm-bundle-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("manifests")).unwrap();
    std::fs::write(dir.join("manifests/stale.yaml"), "x").unwrap();
    let written = write(&dir, &default_options()).unwrap();
    assert_eq!(written.len(), 5);
    assert!(!dir.join("manifests/stale.yaml").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

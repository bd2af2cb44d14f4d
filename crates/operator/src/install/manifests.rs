//! Everything a user applies to install the operator: CRDs, ServiceAccount, RBAC, Deployment
//! (and, when asked, the monitoring objects of `monitoring/`). Pure builders from options to
//! objects; `render` turns them into one YAML stream.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, Namespace, ObjectFieldSelector,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecurityContext,
    ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

use crate::OPERATOR_NAME;
use crate::install::rbac::{METRICS_AUTH_PERMISSIONS, PERMISSIONS, Permission, Scope};

/// Port of `/healthz`, `/readyz` and `/metrics`.
pub const HTTP_PORT: i32 = 8080;

pub use super::Options;

use crate::naming::operator_labels as labels;

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: namespace.map(str::to_string),
        labels: Some(labels()),
        ..Default::default()
    }
}

/// Policy rules for the permissions of `scope`, one rule per resource.
pub fn rules(scope: impl Fn(&Permission) -> bool) -> Vec<PolicyRule> {
    rules_of(PERMISSIONS, scope)
}

/// Policy rules for the permissions of `perms` in `scope`, one rule per entry.
pub fn rules_of(perms: &[Permission], scope: impl Fn(&Permission) -> bool) -> Vec<PolicyRule> {
    perms
        .iter()
        .filter(|p| scope(p))
        .map(|p| PolicyRule {
            api_groups: Some(vec![p.group.to_string()]),
            resources: Some(vec![p.resource.to_string()]),
            verbs: p.verbs.iter().map(|v| v.to_string()).collect(),
            resource_names: (!p.names.is_empty()).then(|| p.names.iter().map(|n| n.to_string()).collect()),
            ..Default::default()
        })
        .collect()
}

fn subject(o: &Options) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: OPERATOR_NAME.into(),
        namespace: Some(o.namespace.clone()),
        ..Default::default()
    }
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef { api_group: "rbac.authorization.k8s.io".into(), kind: kind.into(), name: name.into() }
}

/// Name of the cluster-scoped RBAC objects; namespaced so two installs do not collide.
fn cluster_rbac_name(o: &Options) -> String {
    format!("{OPERATOR_NAME}-{}", o.namespace)
}

/// The operator Deployment in the CoreOS shape: command `etcd-operator`, the downward-API
/// env, `-cluster-wide` when asked, and a locked-down security context.
pub fn deployment(o: &Options) -> Deployment {
    let field_env = |name: &str, path: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: path.into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        period_seconds: Some(10),
        ..Default::default()
    };
    let mut args = vec![];
    if o.cluster_wide {
        args.push("-cluster-wide".to_string());
    }
    if o.metrics_auth {
        args.push("--metrics-auth=kubernetes".to_string());
    }
    let container = Container {
        name: OPERATOR_NAME.into(),
        image: Some(o.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![OPERATOR_NAME.into()]),
        args: (!args.is_empty()).then_some(args),
        env: Some(vec![
            field_env("MY_POD_NAMESPACE", "metadata.namespace"),
            field_env("MY_POD_NAME", "metadata.name"),
            // The members' init container runs this same image, which the nodes can already pull
            // (without this, `--image` would not reach it and members would use the default).
            EnvVar { name: "ETCD_OPERATOR_INIT_IMAGE".into(), value: Some(o.image.clone()), ..Default::default() },
        ]),
        ports: Some(vec![ContainerPort { name: Some("http".into()), container_port: HTTP_PORT, ..Default::default() }]),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(Probe { initial_delay_seconds: Some(10), ..probe("/healthz") }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("20m".into())),
                ("memory".into(), Quantity("32Mi".into())),
            ])),
            limits: Some(BTreeMap::from([("memory".into(), Quantity("256Mi".into()))])),
            ..Default::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Deployment {
        metadata: meta(OPERATOR_NAME, Some(&o.namespace)),
        spec: Some(DeploymentSpec {
            replicas: Some(o.replicas),
            selector: LabelSelector { match_labels: Some(labels()), ..Default::default() },
            // Recreate: never two operator versions side by side; leader election covers replicas.
            strategy: Some(DeploymentStrategy { type_: Some("Recreate".into()), ..Default::default() }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels()), ..Default::default() }),
                spec: Some(PodSpec {
                    service_account_name: Some(OPERATOR_NAME.into()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(65532),
                        run_as_group: Some(65532),
                        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() }),
                        ..Default::default()
                    }),
                    termination_grace_period_seconds: Some(30),
                    containers: vec![container],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every object of the install, in apply order, as JSON values.
pub fn objects(o: &Options) -> anyhow::Result<Vec<serde_json::Value>> {
    fn v<T: Serialize>(kind_api: (&str, &str), obj: T) -> anyhow::Result<serde_json::Value> {
        let mut val = serde_json::to_value(obj)?;
        val["apiVersion"] = kind_api.1.into();
        val["kind"] = kind_api.0.into();
        // Put apiVersion/kind first for readers: rebuild the map in that order.
        let map = val.as_object().cloned().unwrap_or_default();
        let mut ordered = serde_json::Map::new();
        for k in ["apiVersion", "kind", "metadata"] {
            if let Some(x) = map.get(k) {
                ordered.insert(k.into(), x.clone());
            }
        }
        for (k, x) in map {
            ordered.entry(k).or_insert(x);
        }
        Ok(serde_json::Value::Object(ordered))
    }
    let mut out = vec![];
    if o.with_crds {
        for crd in crate::install::crds::crds(o.validation_rules) {
            out.push(serde_json::to_value(crd)?);
        }
    }
    if o.namespace != "default" {
        out.push(v(("Namespace", "v1"), Namespace { metadata: meta(&o.namespace, None), ..Default::default() })?);
    }
    out.push(v(
        ("ServiceAccount", "v1"),
        ServiceAccount { metadata: meta(OPERATOR_NAME, Some(&o.namespace)), ..Default::default() },
    )?);
    let rbac = "rbac.authorization.k8s.io/v1";
    let cluster_name = cluster_rbac_name(o);
    // Namespaced: a Role for the namespace, and a ClusterRole only for cluster-scoped objects.
    // Cluster-wide: one ClusterRole with everything.
    if !o.cluster_wide {
        out.push(v(
            ("Role", rbac),
            Role {
                metadata: meta(OPERATOR_NAME, Some(&o.namespace)),
                rules: Some(rules(|p| p.scope == Scope::Namespaced)),
            },
        )?);
        out.push(v(
            ("RoleBinding", rbac),
            RoleBinding {
                metadata: meta(OPERATOR_NAME, Some(&o.namespace)),
                role_ref: role_ref("Role", OPERATOR_NAME),
                subjects: Some(vec![subject(o)]),
            },
        )?);
    }
    out.push(v(
        ("ClusterRole", rbac),
        ClusterRole {
            metadata: meta(&cluster_name, None),
            rules: Some({
                let mut r = rules(|p| o.cluster_wide || p.scope == Scope::Cluster);
                if o.metrics_auth {
                    r.extend(rules_of(METRICS_AUTH_PERMISSIONS, |_| true));
                }
                r
            }),
            ..Default::default()
        },
    )?);
    out.push(v(
        ("ClusterRoleBinding", rbac),
        ClusterRoleBinding {
            metadata: meta(&cluster_name, None),
            role_ref: role_ref("ClusterRole", &cluster_name),
            subjects: Some(vec![subject(o)]),
        },
    )?);
    out.push(v(("Deployment", "apps/v1"), deployment(o))?);
    if o.monitoring {
        out.extend(crate::install::monitoring::objects(o));
    }
    Ok(out)
}

/// The install as one multi-document YAML stream.
pub fn render(o: &Options) -> anyhow::Result<String> {
    let mut s = String::new();
    for obj in objects(o)? {
        s.push_str("---\n");
        s.push_str(&serde_yaml::to_string(&obj)?);
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(cluster_wide: bool) -> Options {
        Options {
            namespace: "etcd".into(),
            image: "img:1".into(),
            cluster_wide,
            replicas: 1,
            with_crds: true,
            validation_rules: true,
            monitoring: false,
            metrics_auth: true,
        }
    }

    fn kinds(o: &Options) -> Vec<String> {
        objects(o).unwrap().iter().map(|v| v["kind"].as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn namespaced_install_uses_a_role_and_a_crd_only_clusterrole() {
        assert_eq!(
            kinds(&opts(false)),
            [
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "CustomResourceDefinition",
                "Namespace",
                "ServiceAccount",
                "Role",
                "RoleBinding",
                "ClusterRole",
                "ClusterRoleBinding",
                "Deployment"
            ]
        );
        let objs = objects(&opts(false)).unwrap();
        let cr = objs.iter().find(|v| v["kind"] == "ClusterRole").unwrap();
        let groups: Vec<_> = cr["rules"].as_array().unwrap().iter().map(|r| r["apiGroups"][0].clone()).collect();
        let cluster_scoped = ["apiextensions.k8s.io", "authentication.k8s.io", "authorization.k8s.io"];
        // The core group only for Nodes, and only read by name.
        for r in cr["rules"].as_array().unwrap().iter().filter(|r| r["apiGroups"][0] == "") {
            assert_eq!(
                (&r["resources"], &r["verbs"]),
                (&serde_json::json!(["nodes"]), &serde_json::json!(["get"])),
                "{r}"
            );
        }
        assert!(groups.iter().all(|g| g == "" || cluster_scoped.iter().any(|c| g == c)), "{groups:?}");
        // CRDs may be read and created, but changed only by name: the operator's own three.
        for r in cr["rules"].as_array().unwrap() {
            let verbs = r["verbs"].as_array().unwrap();
            if verbs.iter().any(|v| v == "patch" || v == "update") {
                assert_eq!(r["resourceNames"], serde_json::json!(crate::install::rbac::CRD_NAMES), "{r}");
            } else {
                assert!(r.get("resourceNames").is_none_or(|n| n.is_null()), "{r}");
            }
        }
    }

    #[test]
    fn cluster_wide_install_passes_the_flag() {
        assert!(!kinds(&opts(true)).contains(&"Role".to_string()));
        let d = deployment(&opts(true));
        let c = &d.spec.unwrap().template.spec.unwrap().containers[0];
        let args = ["-cluster-wide".to_string(), "--metrics-auth=kubernetes".to_string()];
        assert_eq!(c.args.as_deref(), Some(&args[..]));
        assert_eq!(c.command.as_deref(), Some(&["etcd-operator".to_string()][..]));
    }

    /// `/metrics` needs a token by default; `--metrics-auth none` renders the install of before
    /// (no flag, no review permissions).
    #[test]
    fn metrics_auth_is_on_by_default_and_can_be_left_off() {
        let objs = objects(&opts(false)).unwrap();
        let cr = objs.iter().find(|v| v["kind"] == "ClusterRole").unwrap();
        let resources: Vec<_> = cr["rules"].as_array().unwrap().iter().map(|r| r["resources"][0].clone()).collect();
        assert!(resources.contains(&"tokenreviews".into()) && resources.contains(&"subjectaccessreviews".into()));
        let off = Options { metrics_auth: false, ..opts(false) };
        let c = deployment(&off).spec.unwrap().template.spec.unwrap().containers[0].clone();
        assert_eq!(c.args, None);
        let objs = objects(&off).unwrap();
        let cr = objs.iter().find(|v| v["kind"] == "ClusterRole").unwrap();
        assert!(!cr.to_string().contains("tokenreviews"), "{cr}");
    }

    #[test]
    fn member_init_containers_use_the_installed_image() {
        let d = deployment(&opts(false));
        let env = d.spec.unwrap().template.spec.unwrap().containers[0].env.clone().unwrap();
        let init = env.iter().find(|e| e.name == "ETCD_OPERATOR_INIT_IMAGE").unwrap();
        assert_eq!(init.value.as_deref(), Some("img:1"));
    }

    #[test]
    fn deployment_is_locked_down() {
        let d = deployment(&opts(false));
        let pod = d.spec.unwrap().template.spec.unwrap();
        let sc = pod.containers[0].security_context.clone().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        let psc = pod.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let env: Vec<_> = pod.containers[0].env.clone().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(env, ["MY_POD_NAMESPACE", "MY_POD_NAME", "ETCD_OPERATOR_INIT_IMAGE"]);
    }
}

//! The CustomResourceDefinitions, rendered (pure); `crd_install` installs them at start-up.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// The CRDs to install: with the CEL validation rules, or without them for servers that have
/// no CEL (`etcd-operator crds --no-validation-rules`, `manifests --no-validation-rules`).
pub fn crds(validation_rules: bool) -> Vec<CustomResourceDefinition> {
    if validation_rules { etcd_operator_api::crds() } else { etcd_operator_api::crds_without_validation_rules() }
}

/// All CRDs as one multi-document YAML stream, the output of `etcd-operator crds`.
pub fn render_yaml(validation_rules: bool) -> anyhow::Result<String> {
    let mut out = String::new();
    for crd in crds(validation_rules) {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crds_have_the_coreos_names_and_a_status_subresource() {
        let crds = etcd_operator_api::crds();
        let names: Vec<_> = crds.iter().map(|c| c.metadata.name.clone().unwrap()).collect();
        assert_eq!(
            names,
            [
                "etcdclusters.etcd.database.coreos.com",
                "etcdbackups.etcd.database.coreos.com",
                "etcdrestores.etcd.database.coreos.com"
            ]
        );
        for crd in &crds {
            assert_eq!(crd.spec.scope, "Namespaced");
            let v = &crd.spec.versions[0];
            assert_eq!(v.name, "v1beta2");
            assert!(v.subresources.as_ref().unwrap().status.is_some(), "{:?} lacks /status", crd.metadata.name);
        }
        assert_eq!(crds[0].spec.names.short_names.as_deref(), Some(&["etcd".to_string()][..]));
    }

    #[test]
    fn rendered_yaml_is_three_documents() {
        let y = render_yaml(true).unwrap();
        assert_eq!(y.matches("kind: CustomResourceDefinition").count(), 3);
    }

    /// The apiserver rejects a schema that is not structural: every node needs a type (or
    /// x-kubernetes-int-or-string / preserve-unknown-fields), and no $ref may remain.
    #[test]
    fn schemas_are_structural() {
        fn walk(path: &str, v: &serde_json::Value, errs: &mut Vec<String>) {
            let Some(o) = v.as_object() else { return };
            if o.contains_key("$ref") {
                errs.push(format!("{path}: $ref"));
            }
            let typed = o.contains_key("type")
                || o.contains_key("x-kubernetes-int-or-string")
                || o.contains_key("x-kubernetes-preserve-unknown-fields");
            if !typed && !o.contains_key("anyOf") && !o.contains_key("allOf") && !o.contains_key("oneOf") {
                errs.push(format!("{path}: no type"));
            }
            if let Some(p) = o.get("properties").and_then(|p| p.as_object()) {
                for (k, c) in p {
                    walk(&format!("{path}.{k}"), c, errs);
                }
            }
            if let Some(i) = o.get("items") {
                walk(&format!("{path}[]"), i, errs);
            }
            if let Some(a) = o.get("additionalProperties").filter(|a| a.is_object()) {
                walk(&format!("{path}{{}}"), a, errs);
            }
        }
        for crd in etcd_operator_api::crds() {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            let mut errs = vec![];
            walk("", &schema["openAPIV3Schema"], &mut errs);
            assert!(errs.is_empty(), "{}: {errs:?}", crd.metadata.name.unwrap());
        }
    }
}

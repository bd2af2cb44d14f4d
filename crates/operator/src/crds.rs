//! The CustomResourceDefinitions: rendering them as YAML and installing them at start-up.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use etcd_operator_api::validation_rules;

use crate::OPERATOR_NAME;

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

/// Whether this apiserver runs CRD validation rules, found through discovery: its OpenAPI v3
/// document of `apiextensions.k8s.io/v1` (1.24+; 404 before) names `x-kubernetes-validations`
/// among the schema fields. (Kubernetes 1.20 has neither; server-side apply there refuses the
/// field as "not declared in schema".) The install reads the CRDs back as well, because a
/// server with the field but the feature gate off (1.23, 1.24) drops the rules silently.
pub async fn server_has_validation_rules(client: &kube::Client) -> anyhow::Result<bool> {
    const DOC: &str = "/openapi/v3/apis/apiextensions.k8s.io/v1";
    let req = axum::http::Request::get(DOC).body(kube::client::Body::empty())?;
    let res = client.send(req).await.map_err(|e| anyhow::anyhow!("cannot read {DOC} from the apiserver: {e}"))?;
    let status = res.status();
    // No OpenAPI v3 (before 1.24): the answer is a 404 whose body is not always a JSON Status.
    if status == axum::http::StatusCode::NOT_FOUND {
        return Ok(false);
    }
    let body = res.into_body().collect_bytes().await?;
    anyhow::ensure!(
        status.is_success(),
        "cannot read {DOC} from the apiserver: HTTP {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(String::from_utf8_lossy(&body).contains("\"x-kubernetes-validations\""))
}

/// Create or update every CRD with server-side apply and wait until each is Established. The CEL
/// validation rules go in where the server supports them; where it does not, one log line says
/// so (the operator validates every object itself either way).
pub async fn install(client: kube::Client, timeout: Duration) -> anyhow::Result<()> {
    // Discovery that fails (a 403 under hardened RBAC, a 503) is no reason not to start: try the
    // rules, and fall back to none if the apiserver refuses them.
    let with_rules = server_has_validation_rules(&client).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot tell whether this apiserver has CRD validation rules; trying them");
        true
    });
    if !with_rules {
        tracing::warn!(
            "this apiserver has no CRD validation rules (CEL, Kubernetes 1.25+): invalid objects are refused by the operator's own validation (a condition and an Event), not at apply time"
        );
    }
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let pp = PatchParams::apply(OPERATOR_NAME).force();
    for (crd, bare) in crds(with_rules).into_iter().zip(crds(false)) {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let stored = match api.patch(&name, &pp, &Patch::Apply(&crd)).await {
            Ok(s) => s,
            Err(kube::Error::Api(e)) if with_rules && (e.code == 400 || e.code == 422) => {
                tracing::warn!(crd = %name, error = %e.message, "the apiserver refused the CRD validation rules; installing it without them (the operator's own validation still applies)");
                api.patch(&name, &pp, &Patch::Apply(&bare))
                    .await
                    .map_err(|e| anyhow::anyhow!("cannot apply CustomResourceDefinition {name}: {e}"))?
            }
            Err(e) => return Err(anyhow::anyhow!("cannot apply CustomResourceDefinition {name}: {e}")),
        };
        let (want, have) = (validation_rules::count(&crd), validation_rules::count(&stored));
        if have < want {
            tracing::warn!(
                crd = %name,
                "the apiserver dropped {} of {want} CRD validation rules (is the CustomResourceValidationExpressions feature gate off?); the operator's own validation still refuses those objects",
                want - have
            );
        }
        let established = await_condition(api.clone(), &name, conditions::is_crd_established());
        tokio::time::timeout(timeout, established)
            .await
            .map_err(|_| anyhow::anyhow!("CustomResourceDefinition {name} not Established after {timeout:?}"))??;
        tracing::info!(crd = %name, validation_rules = have, "CustomResourceDefinition established");
    }
    Ok(())
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

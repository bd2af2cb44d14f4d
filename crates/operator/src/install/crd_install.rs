//! Installing the CRDs at start-up (server-side apply, wait for Established), with or without
//! their CEL validation rules as the apiserver supports them (I/O; `crds` renders them).

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use etcd_operator_api::validation_rules;

use crate::OPERATOR_NAME;
use crate::install::crds::crds;

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

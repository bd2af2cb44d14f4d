//! Reading the two Secrets of `spec.auth` (GET by name): the root Secret and the operator's
//! record of the password etcd has; what they mean is `auth::secrets` (pure). I/O: Kubernetes
//! API.

use std::sync::Arc;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::auth::secrets::{Record, data_of, observed, record_of};
use crate::auth::{AuthObserved, Credentials, Policy, applied_secret};

/// The applied record of this cluster (`uid`): `Ok(None)` when there is none (or an earlier
/// cluster's). `Err`: the API server did not answer, which says nothing about what it holds.
async fn record(api: &Api<Secret>, cluster: &str, uid: &str) -> Result<Option<Record>, kube::Error> {
    Ok(api.get_opt(&applied_secret(cluster)).await?.and_then(|s| record_of(s, cluster, uid)))
}

/// Reads the root Secret and the applied record of cluster `cluster`: what status reports, and
/// the credentials to log in with (`auth::secrets::observed`).
pub async fn load(
    client: &Client,
    namespace: &str,
    cluster: &str,
    uid: &str,
    policy: &Policy,
) -> (AuthObserved, Option<Arc<Credentials>>) {
    let Some(name) = policy.root_secret() else { return (AuthObserved::default(), None) };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api.get_opt(name).await.map(|s| s.map(data_of)).map_err(|e| e.to_string());
    let applied = record(&api, cluster, uid).await.map_err(|e| e.to_string());
    observed(name, secret, applied, cluster)
}

/// The password to re-create a deleted root Secret with: the one recorded as applied, else
/// one being set when the record was written (read again). `Err`: the record could not be read.
pub async fn recorded_password(client: &Client, cluster: &EtcdCluster) -> Result<Option<String>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    let r = record(&api, &cluster.name_any(), &cluster.metadata.uid.clone().unwrap_or_default()).await?;
    Ok(r.and_then(|r| r.password.or(r.pending)))
}

//! Writing the two Secrets of `spec.auth` (`auth::secrets` makes them): creating a missing root
//! Secret, and recording the password etcd has (and, right before setting one, the one being
//! set). I/O: Kubernetes API.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use crate::auth::applied_secret;
use crate::auth::secrets::{record_body, root_secret};

/// Creates the root Secret `name` (owned by the cluster) with `password`. One that appeared
/// meanwhile is left alone.
pub async fn create_root_secret(
    client: &Client,
    cluster: &EtcdCluster,
    name: &str,
    password: &str,
) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    match api.create(&PostParams::default(), &root_secret(cluster, name, password)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Records `password` as the root password etcd has (the applied record, owned by the cluster;
/// a pending one is dropped).
pub async fn record_applied(client: &Client, cluster: &EtcdCluster, password: &str) -> Result<(), kube::Error> {
    apply_record(client, cluster, Some(password), None).await
}

/// Records `pending` as a password being set in etcd now, beside the one recorded as applied
/// (`recorded`, kept): written before the change, so that an operator stopped between the
/// change and [`record_applied`] logs in with either.
pub async fn record_pending(
    client: &Client,
    cluster: &EtcdCluster,
    recorded: Option<&str>,
    pending: &str,
) -> Result<(), kube::Error> {
    apply_record(client, cluster, recorded, Some(pending)).await
}

/// The record as given, applied (server-side, the operator's field manager: a key left out is
/// removed).
async fn apply_record(
    client: &Client,
    cluster: &EtcdCluster,
    password: Option<&str>,
    pending: Option<&str>,
) -> Result<(), kube::Error> {
    let name = applied_secret(&cluster.name_any());
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    let body = record_body(cluster, password, pending);
    api.patch(&name, &PatchParams::apply(crate::OPERATOR_NAME).force(), &Patch::Apply(&body)).await.map(|_| ())
}

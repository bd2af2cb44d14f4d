//! The two Secrets of `spec.auth` (I/O: GET, create, apply): reading the root Secret and the
//! operator's record of the password it set, creating a missing root Secret, and recording the
//! password etcd has. What to do is decided by [`super::upkeep`] (pure).

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::{
    AuthObserved, Credentials, GENERATED_PASSWORD_LEN, PASSWORD_KEY, Policy, ROOT, SecretState, USERNAME_KEY,
    applied_secret, root_password,
};

type Data = BTreeMap<String, Vec<u8>>;

fn data_of(s: Secret) -> Data {
    s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
}

async fn get(api: &Api<Secret>, name: &str) -> Result<Option<Data>, kube::Error> {
    Ok(api.get_opt(name).await?.map(data_of))
}

/// The applied record of this cluster (`uid`): one left by an earlier cluster of the same name
/// (its owner is gone, the garbage collector has not caught up) holds another cluster's
/// password and is ignored.
async fn record(api: &Api<Secret>, cluster: &str, uid: &str) -> Option<String> {
    let s = api.get_opt(&applied_secret(cluster)).await.ok().flatten()?;
    if !s.metadata.owner_references.iter().flatten().any(|o| o.uid == uid) {
        return None;
    }
    root_password(&applied_secret(cluster), &data_of(s)).ok()
}

/// Reads the root Secret and the applied record of cluster `cluster`: what status reports, and
/// the credentials to log in with (the Secret's password, then the recorded one if it differs).
pub async fn load(
    client: &Client,
    namespace: &str,
    cluster: &str,
    uid: &str,
    policy: &Policy,
) -> (AuthObserved, Option<Arc<Credentials>>) {
    let Some(name) = policy.root_secret() else { return (AuthObserved::default(), None) };
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let (secret, password) = match get(&api, name).await {
        Ok(None) => (SecretState::Missing, None),
        Err(e) => (SecretState::Unreadable(e.to_string()), None),
        Ok(Some(data)) => match root_password(name, &data) {
            Ok(p) => (SecretState::Valid, Some(p)),
            Err(errs) => (SecretState::Invalid(errs), None),
        },
    };
    // The record is the operator's own: one it cannot read is as good as none.
    let applied = record(&api, cluster, uid).await;
    let observed =
        AuthObserved { secret, applied_matches: applied.as_ref().map(|a| Some(a) == password.as_ref()), refused: None };
    (observed, Credentials::new(ROOT, password.as_deref(), applied.as_deref()).map(Arc::new))
}

fn meta(cluster: &EtcdCluster, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: cluster.namespace(),
        labels: Some(crate::pod_spec::selector_labels(&cluster.name_any())),
        owner_references: Some(vec![crate::pod_spec::owner_ref(cluster)]),
        ..Default::default()
    }
}

fn data(password: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (USERNAME_KEY.to_string(), ByteString(ROOT.as_bytes().to_vec())),
        (PASSWORD_KEY.to_string(), ByteString(password.as_bytes().to_vec())),
    ])
}

/// A random alphanumeric password.
pub fn generate_password() -> String {
    use rand::Rng;
    rand::rng().sample_iter(&rand::distr::Alphanumeric).take(GENERATED_PASSWORD_LEN).map(char::from).collect()
}

/// Creates the root Secret `name` (owned by the cluster) with `password`. One that appeared
/// meanwhile is left alone.
pub async fn create_root_secret(
    client: &Client,
    cluster: &EtcdCluster,
    name: &str,
    password: &str,
) -> Result<(), kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    let s = Secret {
        metadata: meta(cluster, name),
        data: Some(data(password)),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    match api.create(&PostParams::default(), &s).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Records `password` as the root password etcd has (the applied record, owned by the cluster).
pub async fn record_applied(client: &Client, cluster: &EtcdCluster, password: &str) -> Result<(), kube::Error> {
    let name = applied_secret(&cluster.name_any());
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    let s = Secret {
        metadata: meta(cluster, &name),
        data: Some(data(password)),
        type_: Some("Opaque".into()),
        ..Default::default()
    };
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": s.metadata,
        "type": s.type_,
        "data": s.data,
    });
    api.patch(&name, &PatchParams::apply(crate::OPERATOR_NAME).force(), &Patch::Apply(&body)).await.map(|_| ())
}

/// The password recorded as applied, read again (to re-create a deleted root Secret with the
/// password etcd has).
pub async fn recorded_password(client: &Client, cluster: &EtcdCluster) -> Option<String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    record(&api, &cluster.name_any(), &cluster.metadata.uid.clone().unwrap_or_default()).await
}

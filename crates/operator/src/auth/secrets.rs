//! The two Secrets of `spec.auth` (I/O: GET, create, apply): reading the root Secret and the
//! operator's record of the password it set, creating a missing root Secret, and recording the
//! password etcd has (and, right before setting one, the one being set). What to do is decided by [`super::upkeep`] (pure).

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

use super::{
    AuthObserved, Credentials, GENERATED_PASSWORD_LEN, PASSWORD_KEY, PENDING_PASSWORD_KEY, Policy, ROOT, SecretState,
    USERNAME_KEY, applied_secret, root_password,
};

type Data = BTreeMap<String, Vec<u8>>;

fn data_of(s: Secret) -> Data {
    s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
}

async fn get(api: &Api<Secret>, name: &str) -> Result<Option<Data>, kube::Error> {
    Ok(api.get_opt(name).await?.map(data_of))
}

/// What the applied record holds: the password etcd has, and one being set (its outcome
/// unknown) while the operator changes it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub password: Option<String>,
    pub pending: Option<String>,
}

/// The applied record of this cluster (`uid`): `Ok(None)` when there is none; one left by an
/// earlier cluster of the same name (its owner is gone, the garbage collector has not caught
/// up) holds another cluster's password and counts as none. `Err`: the API server did not
/// answer, which says nothing about what the record holds.
async fn record(api: &Api<Secret>, cluster: &str, uid: &str) -> Result<Option<Record>, kube::Error> {
    let name = applied_secret(cluster);
    let Some(s) = api.get_opt(&name).await? else { return Ok(None) };
    if !s.metadata.owner_references.iter().flatten().any(|o| o.uid == uid) {
        return Ok(None);
    }
    let data = data_of(s);
    let key = |k: &str| data.get(k).and_then(|raw| super::check_password(&format!("Secret {name} key {k}"), raw).ok());
    let r = Record { password: key(PASSWORD_KEY), pending: key(PENDING_PASSWORD_KEY) };
    Ok((r != Record::default()).then_some(r))
}

/// Reads the root Secret and the applied record of cluster `cluster`: what status reports, and
/// the credentials to log in with (the Secret's password, then the recorded one, then a pending
/// one, each once).
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
    let (applied, record_unreadable) = match record(&api, cluster, uid).await {
        Ok(r) => (r, None),
        Err(e) => (
            None,
            Some(format!(
                "Secret {} (the operator's record of the root password etcd has) could not be read: {e}",
                applied_secret(cluster)
            )),
        ),
    };
    let observed = AuthObserved {
        secret,
        applied_matches: applied.as_ref().map(|a| a.password == password && a.pending.is_none()),
        record_unreadable,
        refused: None,
    };
    let (recorded, pending) = applied.map(|a| (a.password, a.pending)).unwrap_or_default();
    let creds = Credentials::with_pending(ROOT, password.as_deref(), recorded.as_deref(), pending.as_deref());
    (observed, creds.map(Arc::new))
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
    let mut data = BTreeMap::from([(USERNAME_KEY.to_string(), ByteString(ROOT.as_bytes().to_vec()))]);
    for (k, v) in [(PASSWORD_KEY, password), (PENDING_PASSWORD_KEY, pending)] {
        if let Some(v) = v {
            data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
        }
    }
    let body = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, &name),
        "type": "Opaque",
        "data": data,
    });
    api.patch(&name, &PatchParams::apply(crate::OPERATOR_NAME).force(), &Patch::Apply(&body)).await.map(|_| ())
}

/// The password to re-create a deleted root Secret with: the one recorded as applied, else
/// one being set when the record was written (read again). `Err`: the record could not be read.
pub async fn recorded_password(client: &Client, cluster: &EtcdCluster) -> Result<Option<String>, kube::Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    let r = record(&api, &cluster.name_any(), &cluster.metadata.uid.clone().unwrap_or_default()).await?;
    Ok(r.and_then(|r| r.password.or(r.pending)))
}

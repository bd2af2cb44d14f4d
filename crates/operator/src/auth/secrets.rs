//! The two Secrets of `spec.auth`, as data: the root Secret and the operator's record of the
//! password it set (and, right before setting one, the one being set). Pure: what a read means
//! ([`record_of`], [`observed`]) and what a write sends ([`root_secret`], [`record_body`]); the
//! GETs are `observe::auth_secrets`, the writes `act::auth_secrets`. What to do is decided by
//! [`super::upkeep`].

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{
    AuthObserved, Credentials, GENERATED_PASSWORD_LEN, PASSWORD_KEY, PENDING_PASSWORD_KEY, ROOT, SecretState,
    USERNAME_KEY, applied_secret, root_password,
};

/// A Secret's data.
pub type Data = BTreeMap<String, Vec<u8>>;

pub fn data_of(s: Secret) -> Data {
    s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
}

/// What the applied record holds: the password etcd has, and one being set (its outcome
/// unknown) while the operator changes it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Record {
    pub password: Option<String>,
    pub pending: Option<String>,
}

/// The applied record `s` of this cluster (`uid`), as read: `None` when it holds none; one left
/// by an earlier cluster of the same name (its owner is gone, the garbage collector has not
/// caught up) holds another cluster's password and counts as none.
pub fn record_of(s: Secret, cluster: &str, uid: &str) -> Option<Record> {
    let name = applied_secret(cluster);
    if !s.metadata.owner_references.iter().flatten().any(|o| o.uid == uid) {
        return None;
    }
    let data = data_of(s);
    let key = |k: &str| data.get(k).and_then(|raw| super::check_password(&format!("Secret {name} key {k}"), raw).ok());
    let r = Record { password: key(PASSWORD_KEY), pending: key(PENDING_PASSWORD_KEY) };
    (r != Record::default()).then_some(r)
}

/// What the reads of the root Secret `name` (`secret`) and of the applied record of `cluster`
/// (`applied`; `Err`: the API server did not answer) mean: what status reports, and the
/// credentials to log in with (the Secret's password, then the recorded one, then a pending
/// one, each once).
pub fn observed(
    name: &str,
    secret: Result<Option<Data>, String>,
    applied: Result<Option<Record>, String>,
    cluster: &str,
) -> (AuthObserved, Option<Arc<Credentials>>) {
    let (secret, password) = match secret {
        Ok(None) => (SecretState::Missing, None),
        Err(e) => (SecretState::Unreadable(e), None),
        Ok(Some(data)) => match root_password(name, &data) {
            Ok(p) => (SecretState::Valid, Some(p)),
            Err(errs) => (SecretState::Invalid(errs), None),
        },
    };
    let (applied, record_unreadable) = match applied {
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
        labels: Some(crate::naming::selector_labels(&cluster.name_any())),
        owner_references: Some(vec![crate::naming::owner_ref(cluster)]),
        ..Default::default()
    }
}

/// A random alphanumeric password.
pub fn generate_password() -> String {
    use rand::Rng;
    rand::rng().sample_iter(&rand::distr::Alphanumeric).take(GENERATED_PASSWORD_LEN).map(char::from).collect()
}

/// The root Secret `name` (owned by the cluster) with `password`.
pub fn root_secret(cluster: &EtcdCluster, name: &str, password: &str) -> Secret {
    let data = BTreeMap::from([
        (USERNAME_KEY.to_string(), ByteString(ROOT.as_bytes().to_vec())),
        (PASSWORD_KEY.to_string(), ByteString(password.as_bytes().to_vec())),
    ]);
    Secret { metadata: meta(cluster, name), data: Some(data), type_: Some("Opaque".into()), ..Default::default() }
}

/// The applied record holding `password` and `pending` as given (applied server-side: a key
/// left out is removed).
pub fn record_body(cluster: &EtcdCluster, password: Option<&str>, pending: Option<&str>) -> serde_json::Value {
    let name = applied_secret(&cluster.name_any());
    let mut data = BTreeMap::from([(USERNAME_KEY.to_string(), ByteString(ROOT.as_bytes().to_vec()))]);
    for (k, v) in [(PASSWORD_KEY, password), (PENDING_PASSWORD_KEY, pending)] {
        if let Some(v) = v {
            data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
        }
    }
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, &name),
        "type": "Opaque",
        "data": data,
    })
}

//! Reading a cluster's `spec.TLS.auto` Secrets: GET by name only (the operator neither lists
//! nor watches Secrets), into the `tls::auto` observation (`tls::auto::read::observation`
//! decides from what was read). I/O: Kubernetes API.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use crate::tls::auto::read::observation;
use crate::tls::auto::state::Observation;
use crate::tls::auto::{InUse, Leaf, Settings, ca_secret};

/// Reads the CA Secret and the four certificate Secrets of `cluster`, used as `in_use` says.
pub async fn read(client: &kube::Client, cluster: &EtcdCluster, in_use: InUse, domain: &str) -> Observation {
    let name = cluster.name_any();
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &cluster.namespace().unwrap_or_default());
    let mut fetched = BTreeMap::new();
    let names = std::iter::once(ca_secret(&name)).chain(Leaf::ALL.iter().map(|l| l.secret(&name)));
    for n in names {
        let r = api.get_opt(&n).await.map_err(|e| format!("Secret {n} could not be read: {e}"));
        fetched.insert(n, r);
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    match in_use {
        InUse::Spec(settings) => observation(cluster, settings, domain, now, &fetched),
        InUse::Leaving => observation(cluster, Settings::default(), domain, now, &fetched).leaving(),
    }
}

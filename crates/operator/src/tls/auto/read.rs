//! A cluster's TLS Secrets as read (`observe::tls_auto`: GET by name only, the operator
//! neither lists nor watches Secrets) into an [`Observation`]: [`observation`], pure.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;

use super::state::{Data, Found, Names, Observation, parse_ca, parse_leaf};
use super::{Leaf, ROTATE_CA_ANNOTATION, Settings, ca_secret};

/// What a GET of one Secret gave: `Ok(None)` it does not exist, `Err` it could not be read.
pub type Fetched = Result<Option<Secret>, String>;

fn owned(s: &Secret, cluster: &EtcdCluster) -> bool {
    let uid = cluster.metadata.uid.as_deref();
    s.owner_references().iter().any(|o| Some(o.uid.as_str()) == uid)
}

fn data_of(s: &Secret) -> Data {
    s.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()
}

/// The observation from what the GETs gave (`fetched` by Secret name).
pub fn observation(
    cluster: &EtcdCluster,
    settings: Settings,
    domain: &str,
    now: i64,
    fetched: &BTreeMap<String, Fetched>,
) -> Observation {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let mut o = Observation {
        settings,
        cluster: name.clone(),
        namespace: namespace.clone(),
        cluster_domain: domain.to_string(),
        now,
        ca: Found::Missing,
        leaves: BTreeMap::new(),
        rotate_ca: cluster.annotations().get(ROTATE_CA_ANNOTATION).cloned().filter(|v| !v.is_empty()),
        served: BTreeMap::new(),
        read_error: None,
        leaving: false,
        cert_manager: None,
    };
    let errors: Vec<String> = fetched.values().filter_map(|r| r.as_ref().err().cloned()).collect();
    if !errors.is_empty() {
        o.read_error = Some(errors.join("; "));
        return o;
    }
    let get = |n: &str| fetched.get(n).and_then(|r| r.as_ref().ok()).and_then(|s| s.as_ref());
    let not_ours = |n: &str| format!("Secret {n} exists and is not owned by EtcdCluster {name}");
    let ca_name = ca_secret(&name);
    o.ca = match get(&ca_name) {
        None => Found::Missing,
        Some(s) if !owned(s, cluster) => Found::NotOurs(not_ours(&ca_name)),
        Some(s) => match parse_ca(&data_of(s), s.annotations(), s.metadata.resource_version.clone(), &ca_name) {
            Ok(ca) => Found::Present(ca),
            Err(e) => Found::Invalid(e),
        },
    };
    let cas: Vec<_> = o.ca.present().map(|c| c.trusted().into_iter().cloned().collect()).unwrap_or_default();
    let cas: Vec<&_> = cas.iter().collect();
    let names = Names { cluster: &name, namespace: &namespace, domain };
    for leaf in Leaf::ALL {
        let n = leaf.secret(&name);
        let found = match get(&n) {
            None => Found::Missing,
            Some(s) if !owned(s, cluster) => Found::NotOurs(not_ours(&n)),
            Some(s) => {
                Found::Present(parse_leaf(leaf, &data_of(s), names, now, &cas, s.metadata.resource_version.clone()))
            }
        };
        o.leaves.insert(leaf, found);
    }
    o
}

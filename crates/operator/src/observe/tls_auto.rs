//! Reading a cluster's `spec.TLS.auto` Secrets: GET by name only (the operator neither lists
//! nor watches Secrets), into the `tls::auto` observation (`tls::auto::read::observation`
//! decides from what was read). With `spec.TLS.certManager` also cert-manager's side: whether
//! the API server serves its Certificates (discovery), the four Certificates and the Secrets
//! cert-manager issued into (`tls::cert_manager::observed`). I/O: Kubernetes API.

use std::collections::BTreeMap;

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};

use crate::tls::auto::read::observation;
use crate::tls::auto::state::{Names, Observation};
use crate::tls::auto::{InUse, Leaf, Settings, ca_secret};
use crate::tls::cert_manager::{self, Request};

/// Reads the CA Secret and the four certificate Secrets of `cluster`, used as `in_use` says,
/// and with `cert_manager` what cert-manager holds for it.
pub async fn read(
    client: &kube::Client,
    cluster: &EtcdCluster,
    in_use: InUse,
    domain: &str,
    cert_manager: Option<&Request>,
) -> Observation {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &namespace);
    let mut fetched = BTreeMap::new();
    let names = std::iter::once(ca_secret(&name)).chain(Leaf::ALL.iter().map(|l| l.secret(&name)));
    for n in names {
        let r = api.get_opt(&n).await.map_err(|e| format!("Secret {n} could not be read: {e}"));
        fetched.insert(n, r);
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let mut o = match in_use {
        InUse::Spec(settings) => observation(cluster, settings, domain, now, &fetched),
        InUse::Leaving => observation(cluster, Settings::default(), domain, now, &fetched).leaving(),
    };
    if let Some(r) = cert_manager.filter(|_| !o.leaving) {
        match read_cert_manager(client, cluster, r, domain, now).await {
            Ok(cm) => o.cert_manager = Some(cm),
            Err(e) => o.read_error = Some(o.read_error.map_or(e.clone(), |x| format!("{x}; {e}"))),
        }
    }
    o
}

/// cert-manager's Certificate resource, as the executor writes it (no discovery needed there:
/// reading found it served first).
pub fn certificate_resource() -> ApiResource {
    use cert_manager::{GROUP, KIND, PLURAL, VERSION};
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.into(),
        plural: PLURAL.into(),
    }
}

async fn read_cert_manager(
    client: &kube::Client,
    cluster: &EtcdCluster,
    r: &Request,
    domain: &str,
    now: i64,
) -> Result<cert_manager::Observed, String> {
    let (name, namespace) = (cluster.name_any(), cluster.namespace().unwrap_or_default());
    let n = Names { cluster: &name, namespace: &namespace, domain };
    let uid = cluster.metadata.uid.clone().unwrap_or_default();
    let gvk = kube::api::GroupVersionKind::gvk(cert_manager::GROUP, cert_manager::VERSION, cert_manager::KIND);
    let api = match kube::discovery::oneshot::pinned_kind(client, &gvk).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Err(format!(
            "the API server serves no {}/{} {} (cert-manager is not installed)",
            gvk.group, gvk.version, gvk.kind
        )),
        Err(kube::Error::Discovery(e)) => Err(format!(
            "the API server serves no {}/{} {} ({e}; cert-manager is not installed)",
            gvk.group, gvk.version, gvk.kind
        )),
        Err(e) => return Err(format!("discovery of {}/{} failed: {e}", gvk.group, gvk.version)),
    };
    let (mut certificates, mut secrets, mut unowned) = (BTreeMap::new(), BTreeMap::new(), vec![]);
    if api.is_ok() {
        let certs: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(client.clone(), &namespace, &certificate_resource());
        let sec: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &namespace);
        for l in Leaf::ALL {
            let cn = cert_manager::name(&name, l);
            let c = certs.get_opt(&cn).await.map_err(|e| format!("Certificate {cn} could not be read: {e}"))?;
            let json = c.map(|c| serde_json::to_value(c).unwrap_or_default());
            certificates.insert(l, json);
            let s = sec.get_opt(&cn).await.map_err(|e| format!("Secret {cn} could not be read: {e}"))?;
            if s.as_ref().is_some_and(|s| !s.owner_references().iter().any(|o| o.uid == uid)) {
                unowned.push(l);
            }
            let data = s.map(|s| s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect());
            secrets.insert(l, data);
        }
    }
    Ok(cert_manager::observed(r, api, &certificates, &secrets, unowned, n, now, &uid))
}

//! `CABundlesLoaded` for static TLS (`tls::trust` says how bundles rotate): which member pods
//! still run an earlier pod spec, and the condition. Pure.

use etcd_operator_api::condition::{self, Condition};

use crate::observed::Observed;

pub const CA_BUNDLES_LOADED: &str = "CABundlesLoaded";

/// Member pods to restart for the current pod spec (a CA bundle, or any other change), and
/// pods made by an operator that kept no pod-spec hash (the bundle they loaded is unknown).
pub fn outdated_pods(o: &Observed) -> (Vec<String>, Vec<String>) {
    let Ok(d) = &o.desired else { return (vec![], vec![]) };
    let (mut outdated, mut unknown) = (vec![], vec![]);
    for p in o.pods.values().filter(|p| !p.deleting && !p.is_dead()) {
        match &p.spec_hash {
            Some(h) if *h != d.pod_hash_for(crate::planner::root_data(o, &p.name)) => outdated.push(p.name.clone()),
            Some(_) => {}
            None => unknown.push(p.name.clone()),
        }
    }
    (outdated, unknown)
}

/// `CABundlesLoaded` for a cluster with static TLS (`None` otherwise): `True` once every
/// member runs with the CA bundles its Secrets hold now.
pub fn condition(o: &Observed) -> Option<Condition> {
    let d = o.desired.as_ref().ok()?;
    if o.certificates.is_some() || d.tls_trust.is_none() {
        return None;
    }
    let (outdated, unknown) = outdated_pods(o);
    let (ok, reason, message) = if !outdated.is_empty() {
        (
            false,
            "Restarting",
            format!(
                "members {} run with an earlier CA bundle or pod spec; they restart one at a time",
                outdated.join(", ")
            ),
        )
    } else if !unknown.is_empty() {
        (
            false,
            "Unknown",
            format!(
                "members {} were made by an operator that recorded no pod-spec hash: the CA bundles they loaded are unknown (delete their pods one at a time, waiting for each to be ready, before a CA rotation)",
                unknown.join(", ")
            ),
        )
    } else {
        (true, "Loaded", "every member runs with the CA bundles its Secrets hold".to_string())
    };
    Some(Condition {
        type_: CA_BUNDLES_LOADED.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
        ..Default::default()
    })
}

/// Sets or removes `CABundlesLoaded`.
pub fn update_condition(cs: &mut Vec<Condition>, o: &Observed, now: &str) {
    match condition(o) {
        Some(c) => condition::upsert(cs, c, now),
        None => condition::remove(cs, CA_BUNDLES_LOADED),
    }
}

//! The TLS material a cluster's spec names, read and checked (`tls::material`) before anything
//! uses it, and what a refusal means for the spec to plan from:
//! - the material passed: plan from the spec; member names take the form the certificates
//!   cover (`Verdict::member_domain`), the members' CA bundles are part of the pod-spec hash;
//! - refused material in Secrets the cluster runs with (mounted by a member pod, named by the
//!   last valid spec, being left): plan from the spec, and the planner does only what needs no
//!   new material (`planner::tls_material`): members restart on their volumes with what their
//!   pods mount, nothing new is made or rolled;
//! - refused material in a Secret the cluster does not run with yet (a change: TLS turned on, an
//!   operator Secret swapped): the change is refused and the cluster plans from its last valid
//!   spec, as with any refused edit; with none recorded, nothing is done;
//! - a Secret the API server failed to return: nothing is known, nothing is planned this time.

use std::collections::{BTreeMap, BTreeSet};

use etcd_operator_api::EtcdCluster;

use super::desired;
use crate::observed::Observed;
use crate::tls::material::{self, Verdict};
use crate::tls::transition::PodTls;
use crate::tls::trust;
use crate::validation::Desired;

/// The spec to plan from after the material check.
pub(super) struct Checked {
    pub desired: Result<Desired, Vec<String>>,
    pub spec_refused: Option<Vec<String>>,
    pub version_defaulted: bool,
    pub verdict: Verdict,
}

/// Reads and checks the material of `desired` (made ready by `prepare`: cluster domain and TLS
/// stage), falling back to the last valid spec when a change's new Secrets are refused.
#[allow(clippy::too_many_arguments)]
pub(super) async fn checked(
    client: &kube::Client,
    cluster: &EtcdCluster,
    name: &str,
    namespace: &str,
    planned: (Result<Desired, Vec<String>>, Option<Vec<String>>, bool),
    prepare: impl Fn(Desired) -> Result<Desired, Vec<String>>,
    pods: &[&PodTls],
) -> Checked {
    let (desired, spec_refused, version_defaulted) = planned;
    let d = match desired {
        Ok(d) => d,
        Err(e) => return Checked { desired: Err(e), spec_refused, version_defaulted, verdict: Verdict::default() },
    };
    let verdict = Box::pin(load(client, name, namespace, &d)).await;
    let in_use = desired::secrets_in_use(cluster, name, pods);
    let last = desired::last_valid(cluster, name).filter(|(l, _)| spec_refused.is_none() && l.tls != d.tls);
    match (outcome(&verdict, &in_use, last.is_some()), last) {
        (Outcome::Plan, _) => {
            return Checked { desired: Ok(with_verdict(d, name, &verdict)), spec_refused, version_defaulted, verdict };
        }
        // A change's new Secrets are refused: the change is, as a refused edit is.
        (Outcome::FallBack, Some((last, empty))) => {
            if let Ok(last) = prepare(last) {
                let kept = Box::pin(load(client, name, namespace, &last)).await;
                return Checked {
                    desired: Ok(with_verdict(last, name, &kept)),
                    spec_refused: Some(verdict.refused.clone()),
                    version_defaulted: empty,
                    verdict: kept,
                };
            }
        }
        _ => {}
    }
    Checked { desired: Err(verdict.refused.clone()), spec_refused: None, version_defaulted: false, verdict }
}

/// What a verdict means for the spec it checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Plan from it: the material passed, or is refused only in Secrets the cluster runs with
    /// (the planner holds what needs them).
    Plan,
    /// A change's new Secrets are refused: plan from the last valid spec.
    FallBack,
    /// Nothing to plan from: a new cluster's material is refused, or a Secret could not be read.
    Refuse,
}

/// `in_use`: the Secrets the cluster runs with; `last_valid_differs`: a last valid spec with
/// other TLS Secrets is recorded.
pub(super) fn outcome(v: &Verdict, in_use: &BTreeSet<String>, last_valid_differs: bool) -> Outcome {
    if v.unreadable {
        Outcome::Refuse
    } else if v.refused.is_empty() || v.refused_secrets.is_subset(in_use) {
        Outcome::Plan
    } else if last_valid_differs {
        Outcome::FallBack
    } else {
        Outcome::Refuse
    }
}

async fn load(client: &kube::Client, name: &str, namespace: &str, d: &Desired) -> Verdict {
    let auto = crate::validation::tls_auto_in_use(d, name).is_some();
    load_material(client, namespace, name, &d.pod.cluster_domain, &d.tls_stage.secrets, auto).await
}

/// Reads the Secrets `p` names in `namespace` and checks them (`tls::material::checked`). `auto`: the
/// operator made them (`spec.TLS.auto`) for the cluster domain's names.
async fn load_material(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    cluster_domain: &str,
    p: &crate::tls::Policy,
    auto: bool,
) -> Verdict {
    if p.is_off() {
        return Verdict { member_domain: cluster_domain.to_string(), ..Verdict::default() };
    }
    let api: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client.clone(), namespace);
    let mut fetched = BTreeMap::new();
    for (name, _, _) in p.secrets() {
        let data = match api.get_opt(name).await {
            Ok(s) => s.map(|s| s.data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect()),
            Err(e) => {
                let mut v = Verdict { member_domain: cluster_domain.to_string(), ..Verdict::default() };
                v.refused.push(format!("Secret {name} could not be read: {e}"));
                v.refused_secrets.insert(name.to_string());
                v.unreadable = true;
                return v;
            }
        };
        fetched.insert(name.to_string(), data);
    }
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let domains: Vec<&str> = if auto { vec![cluster_domain] } else { vec![cluster_domain, ""] };
    material::checked(p, &fetched, cluster, namespace, &domains, now)
}

/// Member names in the form the certificates cover; the static CA bundles' digest in the
/// pod-spec hash (`spec.TLS.auto` sets its own from the CA Secret, `observe`).
fn with_verdict(mut d: Desired, name: &str, v: &Verdict) -> Desired {
    d.pod.cluster_domain = v.member_domain.clone();
    if crate::validation::tls_auto_in_use(&d, name).is_none() {
        d.tls_trust = v.trust.clone();
    }
    d
}

/// While members are to restart for another pod spec (a changed CA bundle among others), every
/// running member with an https peer listener is asked which peer certificate it serves; one
/// the peer bundle being loaded does not trust is refused material (`tls::trust`).
pub(super) async fn guard_trust(o: &mut Observed) {
    let Ok(d) = &o.desired else { return };
    let Some(peer_secret) = d.tls_stage.secrets.peer_secret.clone() else { return };
    if o.certificates.is_some()
        || o.tls_material.peer_bundle.is_empty()
        || crate::status::tls_trust::outdated_pods(o).0.is_empty()
    {
        return;
    }
    let domain = d.pod.cluster_domain.clone();
    let mut tasks = vec![];
    for p in o.pods.values().filter(|p| p.phase == "Running" && !p.deleting && p.tls.peer_https) {
        let Some(ip) = p.ip.as_ref().and_then(|ip| ip.parse::<std::net::IpAddr>().ok()) else { continue };
        let (pod, host) = (p.name.clone(), crate::naming::member_host(&p.name, &o.name, &o.namespace, &domain));
        tasks.push(tokio::task::spawn_blocking(move || {
            let addr = std::net::SocketAddr::new(ip, crate::naming::PEER_PORT as u16);
            (pod, crate::observe::tls_probe::served_der(addr, &host, None))
        }));
    }
    let read: Vec<(String, Result<Vec<u8>, String>)> = futures::future::join_all(tasks)
        .await
        .into_iter()
        .flatten()
        .map(|(pod, der)| (pod, der.map_err(|e| e.to_string())))
        .collect();
    // Fails closed for members that answer etcd: an unread certificate may be a distrusted one.
    let answering: std::collections::BTreeSet<String> = o
        .etcd
        .as_ref()
        .map(|e| e.members.iter().filter(|m| m.status.is_some()).map(|m| m.pod.clone()).collect())
        .unwrap_or_default();
    for (_, why) in trust::judge_served(read, &answering, &o.tls_material.peer_bundle, &peer_secret) {
        o.tls_material.refused.push(why);
        o.tls_material.refused_secrets.insert(peer_secret.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(refused_in: &[&str]) -> Verdict {
        Verdict {
            refused: refused_in.iter().map(|s| format!("Secret {s}: expired")).collect(),
            refused_secrets: refused_in.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// One row per situation: what the refusal means for the spec to plan from.
    #[test]
    fn refused_material_the_cluster_runs_with_is_planned_from_a_change_s_is_not() {
        let in_use: BTreeSet<String> = ["peer".to_string(), "server".into(), "op".into()].into();
        let rows = [
            ("material passed", verdict(&[]), false, Outcome::Plan),
            ("an expired certificate the pods mount", verdict(&["peer"]), false, Outcome::Plan),
            ("the operator's Secret deleted", verdict(&["op"]), true, Outcome::Plan),
            ("a new operator Secret refused", verdict(&["op2"]), true, Outcome::FallBack),
            ("peers turned on with a refused Secret", verdict(&["peer2", "peer"]), true, Outcome::FallBack),
            ("a new cluster's material refused", verdict(&["peer2"]), false, Outcome::Refuse),
            (
                "a Secret the API server did not return",
                Verdict { unreadable: true, ..verdict(&["peer"]) },
                true,
                Outcome::Refuse,
            ),
        ];
        for (what, v, last_valid_differs, want) in rows {
            assert_eq!(outcome(&v, &in_use, last_valid_differs), want, "{what}");
        }
    }
}

//! The certificates of `spec.TLS.auto`, written first: what the plan's certificate decision
//! (`decide`, from `planner::certificates::plan`) says is issued (`tls::auto::issuer`) and
//! written (`tls::auto::secrets`), with an Event per write. Several writes may follow each
//! other in one reconcile (a new cluster's CA, then its certificates); each one is decided
//! again from the Secrets as read back after the previous one. Secrets are created or replaced
//! at the version read (a concurrent change makes the write fail and the next reconcile plans
//! again). I/O: Kubernetes API.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::events::EventType;

use super::{Context, key_of, publish};
use crate::decide::Plan;
use crate::observed::Observed;
use crate::tls::auto::Leaf;
use crate::tls::auto::decision::{Decision, LeafWrite};
use crate::tls::auto::secrets::for_decision;
use crate::tls::auto::state::Names;
use crate::tls::auto::state::Observation;

/// At most this many writes per reconcile (a CA and the four certificates, with room; with
/// cert-manager its Certificates and the ownership of its Secrets before those).
const MAX_WRITES: usize = 6;
/// With cert-manager: how long one reconcile waits for cert-manager to issue the Certificates
/// it just wrote (it takes about a second with a CA issuer), so that the material check does
/// not meet the cluster's Secrets missing and refuse a new cluster's spec meanwhile. A slower
/// issuer is waited for across reconciles, with `CertificatesReady` saying what it waits for.
const ISSUE_WAIT: std::time::Duration = std::time::Duration::from_secs(6);
const ISSUE_POLL: std::time::Duration = std::time::Duration::from_millis(300);

/// Writes the certificates `plan` says; after each write the Secrets are read back into `o`
/// and `plan` is decided again (`redecide`) for the next one. `true` when a Secret was written
/// (the caller observes again: the material and the pod-spec hash depend on them).
pub(super) async fn keep_certificates(
    ctx: &Context,
    cluster: &EtcdCluster,
    o: &mut Observed,
    plan: &mut Plan,
    redecide: impl Fn(&Observed) -> Plan,
    reference: &ObjectReference,
) -> bool {
    let mut wrote = false;
    let mut asked_cert_manager: Option<std::time::Instant> = None;
    let mut writes = 0;
    while writes < MAX_WRITES {
        let decision = &plan.certificates;
        if !decision.writes()
            && asked_cert_manager.is_some_and(|t| t.elapsed() < ISSUE_WAIT)
            && matches!(decision, Decision::Wait { reason: "Issuing", .. })
            && let Some(c) = o.certificates.as_ref()
        {
            // cert-manager has not issued what was just asked of it: look again shortly.
            tokio::time::sleep(ISSUE_POLL).await;
            refresh(ctx, cluster, o, c.clone()).await;
            *plan = redecide(o);
            continue;
        }
        let Some(c) = o.certificates.as_ref().filter(|_| decision.writes()) else { break };
        writes += 1;
        if matches!(decision, Decision::ApplyCertificates(_)) {
            asked_cert_manager = Some(std::time::Instant::now());
        }
        match execute(ctx, cluster, c, decision).await {
            Ok((reason, note)) => {
                wrote = true;
                tracing::info!(cluster = %key_of(cluster), reason, "{note}");
                let type_ =
                    if reason == "CertificateAuthorityReplaced" { EventType::Warning } else { EventType::Normal };
                publish(ctx, reference, None, type_, reason, note, "Certificates").await;
            }
            Err(Failure::Conflict(e)) => {
                tracing::info!(cluster = %key_of(cluster), error = %e, "a TLS Secret changed meanwhile; planning again");
                break;
            }
            Err(Failure::Other(e)) => {
                tracing::warn!(cluster = %key_of(cluster), error = %e, "certificates could not be written");
                publish(ctx, reference, None, EventType::Warning, "CertificatesFailed", e, "Certificates").await;
                break;
            }
        }
        refresh(ctx, cluster, o, c.clone()).await;
        *plan = redecide(o);
    }
    wrote
}

/// Reads the cluster's certificate Secrets (and cert-manager's side) again into `o`.
async fn refresh(ctx: &Context, cluster: &EtcdCluster, o: &mut Observed, c: Observation) {
    let (in_use, domain, served) = (c.in_use(), c.cluster_domain.clone(), c.served);
    let cm = c.cert_manager.as_ref().map(|m| m.request.clone());
    let mut fresh = crate::observe::tls_auto::read(&ctx.client, cluster, in_use, &domain, cm.as_ref()).await;
    fresh.served = served;
    o.certificates = Some(fresh);
}

enum Failure {
    /// Someone else wrote the Secret since it was read.
    Conflict(String),
    Other(String),
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Other(s)
    }
}

async fn write(api: &Api<Secret>, s: Secret) -> Result<(), Failure> {
    let name = s.name_any();
    let r = match s.metadata.resource_version.is_some() {
        true => api.replace(&name, &PostParams::default(), &s).await,
        false => api.create(&PostParams::default(), &s).await,
    };
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Failure::Conflict(format!("Secret {name}: {}", e.message))),
        Err(e) => Err(Failure::Other(format!("Secret {name} could not be written: {e}"))),
    }
}

/// Carries out one writing decision: the Secrets `tls::auto::secrets::for_decision` made, in
/// order; the Event's reason and note.
async fn execute(
    ctx: &Context,
    cluster: &EtcdCluster,
    c: &Observation,
    d: &Decision,
) -> Result<(&'static str, String), Failure> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &c.namespace);
    if let (Decision::ApplyCertificates(leaves), Some(cm)) = (d, &c.cert_manager) {
        return apply_certificates(ctx, cluster, c, cm, leaves).await;
    }
    if let Decision::OwnIssuedSecrets(leaves) = d {
        return own_issued_secrets(&api, cluster, c, leaves).await;
    }
    let mut renewed = vec![];
    if let (Decision::WriteLeaves(ws), Some(_)) = (d, &c.cert_manager) {
        for w in ws {
            if let LeafWrite::Renew { leaf } = w {
                renew(ctx, c, *leaf).await?;
                renewed.push(crate::tls::cert_manager::name(&c.cluster, *leaf));
            }
        }
        if ws.iter().all(|w| matches!(w, LeafWrite::Renew { .. })) {
            return Ok((
                "CertificateRenewalRequested",
                format!(
                    "asked cert-manager to issue again from the new CA: Certificate {} (it held one of the old CA)",
                    renewed.join(", ")
                ),
            ));
        }
    }
    if *d == Decision::CreateCa {
        no_member_trusts_a_ca(ctx, cluster, &c.namespace).await?;
    }
    let w = for_decision(cluster, c, d)?;
    for s in w.secrets {
        write(&api, s).await?;
    }
    if renewed.is_empty() {
        Ok((w.reason, w.note))
    } else {
        Ok((w.reason, format!("{}; asked cert-manager to issue again: Certificate {}", w.note, renewed.join(", "))))
    }
}

/// Creates the Certificates `leaves`, or replaces their spec with what `spec.TLS.certManager`
/// asks now (at the version read: a concurrent change fails the write).
async fn apply_certificates(
    ctx: &Context,
    cluster: &EtcdCluster,
    c: &Observation,
    cm: &crate::tls::cert_manager::Observed,
    leaves: &[Leaf],
) -> Result<(&'static str, String), Failure> {
    use crate::tls::cert_manager::{certificate_spec, name};
    use kube::api::{DynamicObject, ObjectMeta};
    let ar = crate::observe::tls_auto::certificate_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &c.namespace, &ar);
    let names = Names { cluster: &c.cluster, namespace: &c.namespace, domain: &c.cluster_domain };
    let mut done = vec![];
    for &leaf in leaves {
        let n = name(&c.cluster, leaf);
        let rv = cm.certificates.get(&leaf).and_then(Option::as_ref).and_then(|s| s.resource_version.clone());
        let labels = std::collections::BTreeMap::from([
            (crate::naming::APP_LABEL.0.to_string(), crate::naming::APP_LABEL.1.to_string()),
            (crate::naming::CLUSTER_LABEL.to_string(), c.cluster.clone()),
        ]);
        let mut obj = DynamicObject::new(&n, &ar).within(&c.namespace);
        obj.metadata = ObjectMeta {
            labels: Some(labels),
            owner_references: Some(vec![crate::naming::owner_ref(cluster)]),
            resource_version: rv.clone(),
            ..obj.metadata
        };
        obj.data = serde_json::json!({ "spec": certificate_spec(leaf, &cm.request, names) });
        let r = match rv {
            Some(_) => api.replace(&n, &PostParams::default(), &obj).await,
            None => api.create(&PostParams::default(), &obj).await,
        };
        match r {
            Ok(_) => done.push(n),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                return Err(Failure::Conflict(format!("Certificate {n}: {}", e.message)));
            }
            Err(e) => return Err(Failure::Other(format!("Certificate {n} could not be written: {e}"))),
        }
    }
    let i = &cm.request.issuer;
    Ok((
        "CertificatesRequested",
        format!("cert-manager Certificates {} written (issuer {} {}/{})", done.join(", "), i.kind, i.group, i.name),
    ))
}

/// Adds the EtcdCluster's owner reference to cert-manager's Secrets (a strategic merge: an
/// owner reference cert-manager set is kept).
async fn own_issued_secrets(
    api: &Api<Secret>,
    cluster: &EtcdCluster,
    c: &Observation,
    leaves: &[Leaf],
) -> Result<(&'static str, String), Failure> {
    use kube::api::{Patch, PatchParams};
    let owner = crate::tls::cert_manager::issued_secret_owner(cluster);
    let mut done = vec![];
    for &leaf in leaves {
        let n = crate::tls::cert_manager::name(&c.cluster, leaf);
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        api.patch(&n, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map_err(|e| Failure::Other(format!("Secret {n}: adding the cluster's owner reference failed: {e}")))?;
        done.push(n);
    }
    Ok((
        "CertificateSecretsOwned",
        format!("cert-manager's Secrets {} are deleted with the cluster from now on", done.join(", ")),
    ))
}

/// Asks cert-manager to issue a Certificate again, as `cmctl renew` does: its status
/// condition `Issuing` set to `True` (reason `ManuallyTriggered`), the other conditions kept,
/// written at the version read.
async fn renew(ctx: &Context, c: &Observation, leaf: Leaf) -> Result<(), Failure> {
    use kube::api::DynamicObject;
    let n = crate::tls::cert_manager::name(&c.cluster, leaf);
    let ar = crate::observe::tls_auto::certificate_resource();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &c.namespace, &ar);
    let failed = |e: kube::Error| Failure::Other(format!("asking cert-manager to renew Certificate {n} failed: {e}"));
    let mut obj = api.get(&n).await.map_err(failed)?;
    let now = k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let generation = obj.metadata.generation;
    let issuing = serde_json::json!({
        "type": "Issuing",
        "status": "True",
        "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance requested by the etcd operator: it holds a certificate of a CA the cluster is leaving",
        "lastTransitionTime": now,
        "observedGeneration": generation,
    });
    let status = obj.data.as_object_mut().map(|d| d.entry("status").or_insert_with(|| serde_json::json!({})));
    let Some(status) = status.and_then(|s| s.as_object_mut()) else {
        return Err(Failure::Other(format!("Certificate {n}: unreadable status")));
    };
    let conditions = status.entry("conditions").or_insert_with(|| serde_json::json!([]));
    if let Some(cs) = conditions.as_array_mut() {
        cs.retain(|c| c.get("type").and_then(|t| t.as_str()) != Some("Issuing"));
        cs.push(issuing);
    }
    match api.replace_status(&n, &PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Failure::Conflict(format!("Certificate {n}: {}", e.message))),
        Err(e) => Err(failed(e)),
    }
}

/// Right before a new CA is made: the API server's own list of the cluster's pods (the watch
/// cache may lag) shows none that mounts a certificate Secret; such a member trusts another CA.
async fn no_member_trusts_a_ca(ctx: &Context, cluster: &EtcdCluster, namespace: &str) -> Result<(), Failure> {
    use crate::planner::certificates::nothing_trusts_a_ca;
    use k8s_openapi::api::core::v1::Pod;
    let name = cluster.name_any();
    let lp = kube::api::ListParams::default().labels(&format!("{}={name}", crate::naming::CLUSTER_LABEL));
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), namespace)
        .list(&lp)
        .await
        .map_err(|e| Failure::Other(format!("listing the member pods before creating a CA failed: {e}")))?;
    let uid = cluster.metadata.uid.as_deref();
    let tls: Vec<_> = pods
        .items
        .iter()
        .filter(|p| p.owner_references().iter().any(|o| Some(o.uid.as_str()) == uid))
        .map(|p| crate::observe::pod_state(p, k8s_openapi::jiff::Timestamp::now()).tls)
        .collect();
    if nothing_trusts_a_ca(&tls) {
        return Ok(());
    }
    Err(Failure::Other(format!(
        "refusing to create a new CA: the API server shows member pods of {name} that mount certificate Secrets (the watch cache was stale); they trust another CA"
    )))
}

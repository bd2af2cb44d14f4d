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
use crate::tls::auto::decision::Decision;
use crate::tls::auto::secrets::for_decision;
use crate::tls::auto::state::Observation;

/// At most this many writes per reconcile (a CA and the four certificates, with room).
const MAX_WRITES: usize = 4;

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
    for _ in 0..MAX_WRITES {
        let decision = &plan.certificates;
        let Some(c) = o.certificates.as_ref().filter(|_| decision.writes()) else { break };
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
        let (in_use, domain, served) = (c.in_use(), c.cluster_domain.clone(), c.served.clone());
        let mut fresh = crate::observe::tls_auto::read(&ctx.client, cluster, in_use, &domain).await;
        fresh.served = served;
        o.certificates = Some(fresh);
        *plan = redecide(o);
    }
    wrote
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
    if *d == Decision::CreateCa {
        no_member_trusts_a_ca(ctx, cluster, &c.namespace).await?;
    }
    let w = for_decision(cluster, c, d)?;
    for s in w.secrets {
        write(&api, s).await?;
    }
    Ok((w.reason, w.note))
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

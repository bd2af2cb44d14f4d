//! One reconcile of an EtcdCluster: observe → decide (`decide::decide`, one `Plan`) → execute
//! the plan in a fixed order (below), Events for what was done and for condition changes. An
//! object that cannot be parsed is reported on itself. I/O: Kubernetes API and etcd (through `observe` and `act`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_operator_api::{EtcdCluster, EtcdClusterStatus};
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use super::certificates::keep_certificates;
use super::upkeep::{ensure_auth_secrets, ensure_disruption_budget, ensure_network_policy, grow_volumes};
use super::{Context, Error, PROGRESS_PERIOD, key_of, publish};
use crate::act::{self, Target};
use crate::decide::decide;
use crate::observe;
use crate::planner::Step;
use crate::status;

async fn patch_status(ctx: &Context, obj: &DynamicObject, status: &EtcdClusterStatus) -> Result<(), Error> {
    let ar = ApiResource::erase::<EtcdCluster>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &obj.namespace().unwrap_or_default(), &ar);
    let body = serde_json::json!({ "status": status });
    api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&body)).await?;
    Ok(())
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now())
        .to_string()
}

/// An object whose spec cannot even be read as an EtcdCluster (stored before the schema, or
/// edited around it): say why on the object itself and leave its cluster alone.
async fn report_unreadable(obj: &DynamicObject, err: &serde_json::Error, ctx: &Context) -> Result<Action, Error> {
    let reference = obj.object_ref(&ApiResource::erase::<EtcdCluster>(&()));
    let prev: EtcdClusterStatus =
        obj.data.get("status").cloned().and_then(|s| serde_json::from_value(s).ok()).unwrap_or_default();
    let mut st = prev.clone();
    let msg = format!("spec cannot be read, nothing was changed: {err}");
    let c = etcd_operator_api::Condition {
        type_: status::SPEC_VALID.into(),
        status: "False".into(),
        reason: "InvalidSpec".into(),
        message: msg.clone(),
        ..Default::default()
    };
    etcd_operator_api::condition::upsert(&mut st.conditions, c, &now_rfc3339());
    if st != prev {
        publish(ctx, &reference, None, EventType::Warning, "InvalidSpec", msg, "Validate").await;
        patch_status(ctx, obj, &st).await?;
    }
    Ok(Action::await_change())
}

pub(super) async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ar = ApiResource::erase::<EtcdCluster>(&());
    let fut = reconcile_one(obj.clone(), ctx.clone());
    crate::runtime::panic_guard::guard("etcdcluster", &ar, &obj, &ctx.recorder, &ctx.metrics, fut).await
}

async fn reconcile_one(obj: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) {
        return Ok(Action::await_change());
    }
    // First, before anything that can fail: this operator handles the cluster (the alert that an
    // operator is down reads it).
    ctx.metrics.mark_managed(&obj.namespace().unwrap_or_default(), &obj.name_any());
    if obj.metadata.deletion_timestamp.is_some() {
        // Deletion: owner references let the garbage collector remove pods, Services, PVCs.
        return Ok(Action::await_change());
    }
    let cluster: EtcdCluster = match serde_json::from_value(serde_json::to_value(obj.as_ref())?) {
        Ok(c) => c,
        Err(e) => return report_unreadable(&obj, &e, &ctx).await,
    };
    let key = key_of(&cluster);
    // Plans read the caches: none may run before every cache holds its first full list, or an
    // empty pod cache would look like a cluster with no members.
    if !ctx.caches_synced.load(std::sync::atomic::Ordering::Acquire) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    if !ctx.expectations.satisfied(&key, &ctx.caches.pods.state()) {
        return Ok(Action::requeue(Duration::from_millis(500)));
    }
    let started = Instant::now();
    let (mut observed, mut endpoints) = observe::observe(
        &ctx.client,
        &cluster,
        &ctx.caches,
        &ctx.etcd_clients,
        &ctx.cluster_domain,
        ctx.operator_namespace.as_deref(),
    )
    .await;
    let reference = cluster.object_ref(&());
    // Decide: everything this reconcile does, from the observation alone (`decide`).
    let spec_json = serde_json::to_string(&cluster.spec)?;
    let now = now_rfc3339();
    let redecide = |o: &crate::observed::Observed| decide(o, &cluster, &spec_json, &now);
    let mut plan = redecide(&observed);
    // 0. spec.TLS.auto: certificates are written before everything else (a new cluster's
    // members need them), each write decided from the Secrets read back after the previous one;
    // after a write, everything that depends on them is observed and decided again.
    let certificates_written = keep_certificates(&ctx, &cluster, &mut observed, &mut plan, &redecide, &reference).await;
    if certificates_written {
        (observed, endpoints) = observe::observe(
            &ctx.client,
            &cluster,
            &ctx.caches,
            &ctx.etcd_clients,
            &ctx.cluster_domain,
            ctx.operator_namespace.as_deref(),
        )
        .await;
        plan = decide(&observed, &cluster, &spec_json, &now_rfc3339());
    }
    let step = &plan.step;
    tracing::debug!(cluster = %key, ?step, "planned");

    // Execute, in this order (0., the certificates, above):
    // 1. durable marks (cluster formed, last valid spec, quorum-loss clock, recovery done; pod
    //    labels the Services select on; upgraded members that are back), so that the step acts
    //    on what is recorded; nothing is acted on without them (a stale mark must not drive it);
    // 2. the PodDisruptionBudget, which counts the pods the step creates before they exist (a
    //    drain meanwhile must not take a quorum): a step it could not be raised for waits;
    // 3. beside the step, never holding it up: NetworkPolicy, volume sizes, auth Secrets;
    // 4. the step; its Events and metrics;
    // 5. status (condition changes become Events), metrics, the status patch;
    // 6. the requeue: soon after a failed step or a certificate write, else the plan's.
    if let Err(e) =
        act::record_marks(&ctx.client, &cluster, &plan.marks, &plan.unlabelled, &plan.confirmed, &plan.fencing).await
    {
        tracing::warn!(cluster = %key, error = %e, "could not record marks; retrying");
        return Ok(Action::requeue(PROGRESS_PERIOD));
    }
    let budget_in_place = ensure_disruption_budget(&ctx, &cluster, &observed, plan.min_available, &reference).await;
    ensure_network_policy(&ctx, &cluster, &plan.network_policy, &reference).await;
    grow_volumes(&ctx, &cluster, &plan.volumes, &reference).await;
    ensure_auth_secrets(&ctx, &cluster, plan.auth.as_ref(), &endpoints, &reference).await;
    if !budget_in_place {
        return Ok(Action::requeue(PROGRESS_PERIOD));
    }
    let target = Target {
        client: &ctx.client,
        cluster: &cluster,
        observed: &observed,
        endpoints: &endpoints,
        init_image: &ctx.init_image,
    };
    let outcome = act::execute(&target, step).await;
    match &outcome {
        Ok(Some(done)) => {
            tracing::info!(cluster = %key, reason = done.reason, "{}", done.note);
            ctx.expectations.expect(&key, &done.created, &done.deleted, &done.annotated);
            let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
            for (member, reclaimed) in &done.defragmented {
                ctx.metrics.record_defrag(&ns, &name, member, *reclaimed);
            }
            if done.alarm_recovered {
                ctx.metrics.record_alarm_recovery(&ns, &name);
            }
            if matches!(step, Step::Auth(_)) {
                // The members' cached clients logged in (or not) under the old state.
                ctx.etcd_clients.forget_all(&endpoints);
            }
            let type_ = if done.is_warning() { EventType::Warning } else { EventType::Normal };
            publish(&ctx, &reference, step.member(), type_, done.reason, done.note.clone(), done.reason).await;
        }
        Ok(None) => {}
        Err(e) if e.is_transient() => {
            // etcd refuses membership changes for a few seconds after one (its peers must have
            // been connected for 5 s): expected, retried shortly, not worth an Event.
            tracing::info!(cluster = %key, error = %e, step = step.name(), "step refused for now; retrying");
        }
        Err(e) => {
            tracing::warn!(cluster = %key, error = %e, ?step, "step failed");
            let note = format!("{}: {e}", step.name());
            publish(&ctx, &reference, step.member(), EventType::Warning, "StepFailed", note, step.name()).await;
        }
    }

    let prev = cluster.status.clone().unwrap_or_default();
    let new = &plan.status;
    for c in status::changed(&prev.conditions, &new.conditions) {
        let type_ = if status::is_warning(c) { EventType::Warning } else { EventType::Normal };
        let note = if c.message.is_empty() { format!("{} is {}", c.type_, c.status) } else { c.message.clone() };
        publish(&ctx, &reference, None, type_, &c.reason, note, &c.type_).await;
    }
    ctx.metrics.observe_cluster(&observed, new);
    let (ns, name) = (cluster.namespace().unwrap_or_default(), cluster.name_any());
    match &observed.etcd {
        Some(e) => {
            use crate::observed::AlarmKind;
            ctx.metrics.set_alarms(&ns, &name, e.has_alarm(AlarmKind::NoSpace), e.has_alarm(AlarmKind::Corrupt));
        }
        None => ctx.metrics.forget_alarms(&ns, &name),
    }
    ctx.metrics.observe_step(&observed, step);
    ctx.metrics.reconciled("etcdcluster", started.elapsed(), outcome.is_err());
    if *new != prev {
        patch_status(&ctx, &obj, new).await?;
    }
    tracing::debug!(cluster = %key, elapsed_ms = started.elapsed().as_millis() as u64, "reconciled");
    if outcome.is_err() {
        // Reported above; plan again soon from a fresh observation.
        return Ok(Action::requeue(PROGRESS_PERIOD));
    }
    if certificates_written {
        // The next certificate step (or its check) soon, whatever the cluster's step was.
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    Ok(Action::requeue(plan.requeue))
}

pub(super) fn error_policy(obj: Arc<DynamicObject>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(cluster = %key_of(obj.as_ref()), error = %err, "reconcile failed; retrying in 5s");
    Action::requeue(Duration::from_secs(5))
}

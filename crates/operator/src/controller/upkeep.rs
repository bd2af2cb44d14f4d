//! What is kept up beside the planned step, never holding it up: the cluster's
//! PodDisruptionBudget, its NetworkPolicy and member PVCs' storage requests (volume
//! expansion). Failures are reported as Events. I/O: Kubernetes API.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector;

use super::{Context, key_of, publish};

/// Keep the cluster's PodDisruptionBudget at the plan's `minAvailable` (`want`, from
/// `disruption_budget` for the observation and the planned step), before the step. Returns
/// whether the step may go on: `false` only when the step adds a pod that the budget must count
/// first and applying it failed (reported). Any other failure is reported and holds nothing up
/// (healing must not wait for it).
pub(super) async fn ensure_disruption_budget(
    ctx: &Context,
    cluster: &EtcdCluster,
    o: &crate::observed::Observed,
    want: Option<i32>,
    reference: &ObjectReference,
) -> bool {
    use crate::disruption_budget::min_available;
    let Some((ar, store)) = &ctx.caches.budgets else { return true };
    let Some(want) = want else { return true };
    let key = reflector::ObjectRef::<DynamicObject>::new_with(&cluster.name_any(), ar.clone())
        .within(&cluster.namespace().unwrap_or_default());
    let have = store.get(&key).and_then(|b| crate::disruption_budget::min_available_of(&b));
    let Some(want) = crate::disruption_budget::to_apply(want, have, o.etcd.is_some()) else { return true };
    match crate::disruption_budget::apply(&ctx.client, cluster, ar, want).await {
        Ok(()) => {
            tracing::info!(cluster = %key_of(cluster), min_available = want, "PodDisruptionBudget applied");
            true
        }
        Err(e) => {
            let idle = crate::planner::wait(crate::planner::WaitReason::Stable, "");
            let raised_for_step = min_available(o, &idle).is_some_and(|without| want > without);
            let held = if raised_for_step { "; the step that adds a member pod waits for it" } else { "" };
            let note = format!(
                "PodDisruptionBudget {} ({}) could not be applied: {e}{held}",
                cluster.name_any(),
                ar.api_version
            );
            tracing::warn!(cluster = %key_of(cluster), "{note}");
            publish(ctx, reference, None, EventType::Warning, "DisruptionBudgetFailed", note, "DisruptionBudget").await;
            !raised_for_step
        }
    }
}

/// Carry out the plan's NetworkPolicy decision (`network_policy::decide`, in `decide`), beside
/// the planned step: a failure is reported and never holds up the step.
pub(super) async fn ensure_network_policy(
    ctx: &Context,
    cluster: &EtcdCluster,
    action: &crate::network_policy::Action,
    reference: &ObjectReference,
) {
    use crate::network_policy::Action;
    let (name, ns) = (cluster.name_any(), cluster.namespace().unwrap_or_default());
    let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &ns);
    let (result, done, verb) = match action {
        Action::Nothing => return,
        Action::Apply(np) => {
            let r = api.patch(&name, &PatchParams::apply(crate::OPERATOR_NAME).force(), &Patch::Apply(&**np)).await;
            (r.map(|_| ()), "NetworkPolicyApplied", "applied")
        }
        Action::Delete => (api.delete(&name, &Default::default()).await.map(|_| ()), "NetworkPolicyDeleted", "deleted"),
    };
    match result {
        Ok(()) => {
            let note = format!("NetworkPolicy {name} {verb} (spec.networkPolicy)");
            tracing::info!(cluster = %key_of(cluster), "{note}");
            publish(ctx, reference, None, EventType::Normal, done, note, "NetworkPolicy").await;
        }
        // Already gone: the cache was behind.
        Err(kube::Error::Api(s)) if verb == "deleted" && s.code == 404 => {}
        Err(e) => {
            let note = format!("NetworkPolicy {name} could not be {verb}: {e}");
            tracing::warn!(cluster = %key_of(cluster), "{note}");
            publish(ctx, reference, None, EventType::Warning, "NetworkPolicyFailed", note, "NetworkPolicy").await;
        }
    }
}

/// Raise member PVCs' storage requests to the sizes the plan asks (`volume_size`), beside the
/// planned step; a refusal is reported once per PVC and size and never holds anything up.
pub(super) async fn grow_volumes(
    ctx: &Context,
    cluster: &EtcdCluster,
    volumes: &[(String, String)],
    reference: &ObjectReference,
) {
    let ns = cluster.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    for (pvc, size) in volumes.iter().cloned() {
        let key = (format!("{ns}/{pvc}"), size.clone());
        if ctx.refused_volume_sizes.contains(&key) {
            continue;
        }
        let patch = serde_json::json!({"spec": {"resources": {"requests": {"storage": size}}}});
        match api.patch(&pvc, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {
                let note = format!("volume {pvc} asked to grow to {size} (spec.pod.persistentVolumeClaimSpec)");
                tracing::info!(cluster = %key_of(cluster), "{note}");
                publish(ctx, reference, None, EventType::Normal, "VolumeExpansionRequested", note, "GrowVolume").await;
            }
            Err(e) => {
                let why = match &e {
                    kube::Error::Api(s) => s.message.clone(),
                    other => other.to_string(),
                };
                let class = ctx
                    .caches
                    .pvcs
                    .state()
                    .iter()
                    .find(|v| v.name_any() == pvc && v.namespace().as_deref() == Some(ns.as_str()))
                    .and_then(|v| v.spec.as_ref()?.storage_class_name.clone())
                    .unwrap_or_else(|| "(default)".into());
                let note = format!(
                    "volume {pvc} cannot grow to {size}: {why}. Its StorageClass {class} must allow volume expansion (allowVolumeExpansion: true) and its provisioner support it; the member keeps its current volume, new members get {size}"
                );
                tracing::warn!(cluster = %key_of(cluster), "{note}");
                publish(ctx, reference, None, EventType::Warning, "VolumeExpansionRefused", note, "GrowVolume").await;
                ctx.refused_volume_sizes.insert(key);
            }
        }
    }
}

/// `spec.auth`'s Secrets, as the plan says (`planner::auth::upkeep`): a missing root Secret is
/// created, the password etcd accepted is recorded. Beside the planned step; a failure is
/// reported and retried.
pub(super) async fn ensure_auth_secrets(
    ctx: &Context,
    cluster: &EtcdCluster,
    todo: Option<&crate::auth::Upkeep>,
    endpoints: &crate::etcd::Endpoints,
    reference: &ObjectReference,
) {
    use crate::act::auth_secrets::{create_root_secret, record_applied};
    use crate::auth::Upkeep;
    use crate::auth::secrets::generate_password;
    use crate::observe::auth_secrets::recorded_password;
    let Some(todo) = todo else { return };
    let name = cluster.name_any();
    let (result, reason, note) = match &todo {
        Upkeep::CreateRootSecret { name: secret, use_recorded } => {
            // With a record, only its password: a record that cannot be read now (or is gone
            // since it was read) makes no Secret with a random one, which etcd would then get.
            let recorded = match *use_recorded {
                true => recorded_password(&ctx.client, cluster)
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|p| p.map(Some).ok_or_else(|| "the record is gone since it was read".to_string())),
                false => Ok(None),
            };
            let note = |how: &str| format!("Secret {secret} created with {how} (spec.auth.rootSecret)");
            match recorded {
                Err(e) => {
                    let note = format!(
                        "Secret {secret} is not created yet: the record of the root password etcd has ({}) could not be read: {e}",
                        crate::auth::applied_secret(&name)
                    );
                    tracing::warn!(cluster = %key_of(cluster), "{note}");
                    publish(ctx, reference, None, EventType::Warning, "AuthSecretFailed", note, "Auth").await;
                    return;
                }
                Ok(Some(p)) => (
                    create_root_secret(&ctx.client, cluster, secret, &p).await,
                    "RootSecretCreated",
                    note("the root password etcd has"),
                ),
                Ok(None) => (
                    create_root_secret(&ctx.client, cluster, secret, &generate_password()).await,
                    "RootSecretCreated",
                    note("a random root password"),
                ),
            }
        }
        Upkeep::RecordApplied => {
            let Some(password) = endpoints.root.as_ref().and_then(|r| r.secret_password()) else { return };
            let r = record_applied(&ctx.client, cluster, password).await;
            (
                r,
                "RootPasswordRecorded",
                format!("Secret {} records the root password etcd has", crate::auth::applied_secret(&name)),
            )
        }
    };
    match result {
        Ok(()) => {
            tracing::info!(cluster = %key_of(cluster), "{note}");
            publish(ctx, reference, None, EventType::Normal, reason, note, "Auth").await;
        }
        Err(e) => {
            let note = format!("{note} failed: {e}");
            tracing::warn!(cluster = %key_of(cluster), "{note}");
            publish(ctx, reference, None, EventType::Warning, "AuthSecretFailed", note, "Auth").await;
        }
    }
}

//! The EtcdBackup controller (I/O): observe the object (fresh from the API) and its pods (from the
//! cache) into a [`BackupObserved`], let `backup_planner` decide, then execute: write status,
//! start the backup pod, publish Events, delete finished pods — in that order, so a result is in
//! status before its pod goes.

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_operator_api::backup::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::backup_planner::{self, BackupObserved, BackupStep, BackupTarget, POD_START_SLACK_SECS};
use super::contract::{BACKUP_LABEL, BACKUP_OF_LABEL, SaveReport};
use super::jobs::{self, Error, JobContext, Options};
use super::pods::{self, JobPod};

fn backup_ar() -> ApiResource {
    ApiResource::erase::<EtcdBackup>(&())
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<JobContext>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ar = backup_ar();
    let Some(obj) = jobs::fresh(&ctx, &obj, &ar).await? else { return Ok(Action::await_change()) };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let started = std::time::Instant::now();
    let ns = obj.namespace().unwrap_or_default();
    let spec = jobs::spec_of::<EtcdBackupSpec>(&obj);
    let volume_root = match spec.as_ref().ok().and_then(pvc_of) {
        Some(claim) => jobs::volume_marked_root(&ctx, &ns, &claim).await?,
        None => false,
    };
    let o = BackupObserved {
        name: obj.name_any(),
        namespace: ns.clone(),
        generation: obj.metadata.generation.unwrap_or_default(),
        spec,
        status: jobs::status_of::<EtcdBackupStatus>(&obj),
        pods: jobs::job_pods(&ctx, BACKUP_LABEL, &obj)
            .iter()
            .map(|p| super::job_pods::observe::<SaveReport>(p))
            .collect(),
        volume_root,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    let mut plan = backup_planner::plan(&o);
    if let Some(claim) = &plan.mark_root_volume {
        // Before the pod: the mark is what runs the next pods as root.
        jobs::mark_root_volume(&ctx, &ns, claim).await?;
    }
    if let BackupStep::StartBackup { pod, target, as_root } = &plan.step {
        let (pod, target, as_root) = (pod.clone(), target.clone(), *as_root);
        let auth = match &o.spec {
            Ok(spec) => auth_secret(&ctx, &ns, spec).await,
            Err(_) => None,
        };
        let made = backup_pod(&obj, &target, &ctx.init_image, &pod, auth.as_deref(), as_root)?;
        if let Err(e) = jobs::create_pod(&ctx, &made).await {
            backup_planner::start_failed(&mut plan, &pod, e.to_string());
        }
    }
    // From status, not only from a result just recorded: after an operator restart the series
    // come back at the first reconcile.
    if let Some(target) = o.spec.as_ref().ok().and_then(|s| backup_planner::check_spec(s, &ns).ok()) {
        {
            let last_success = backup_planner::parse_time(&plan.status.last_success_date).map(|t| t.as_second());
            ctx.metrics.observe_backup(&ns, &o.name, last_success, target.interval);
        }
    }
    jobs::write_back(&ctx, &obj, &ar, (&o.status, &plan.status), &plan.events, &plan.delete_pods).await?;
    ctx.metrics.reconciled("etcdbackup", started.elapsed(), false);
    Ok(plan.requeue.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// The Secret the backup pod logs in to etcd with: `authSecret`, else the root Secret of the
/// EtcdCluster `clusterName` names when it has `spec.auth` (read now: a cluster that cannot be
/// read gives none, and the backup pod says what etcd answered).
async fn auth_secret(ctx: &JobContext, ns: &str, spec: &EtcdBackupSpec) -> Option<String> {
    if !spec.auth_secret.is_empty() {
        return Some(spec.auth_secret.clone());
    }
    if spec.cluster_name.is_empty() {
        return None;
    }
    let api: kube::Api<etcd_operator_api::EtcdCluster> = kube::Api::namespaced(ctx.client.clone(), ns);
    let cluster = api.get_opt(&spec.cluster_name).await.ok().flatten()?;
    let policy = crate::auth::Policy::of(&spec.cluster_name, cluster.spec.auth.as_ref(), None).ok()?;
    policy.root_secret().map(str::to_string)
}

/// The claim a PVC destination names.
fn pvc_of(spec: &EtcdBackupSpec) -> Option<String> {
    let loc = super::location::Location::of(&spec.storage_type, &spec.source).ok()?;
    (loc.kind == super::location::Kind::Pvc).then_some(loc.bucket)
}

/// The backup pod for `target`, owned by the EtcdBackup; `auth`: the login Secret, if any;
/// `as_root`: to a PVC marked as root's.
fn backup_pod(
    obj: &DynamicObject,
    target: &BackupTarget,
    image: &str,
    name: &str,
    auth: Option<&str>,
    as_root: bool,
) -> Result<Pod, Error> {
    let backup: EtcdBackup = serde_json::from_value(serde_json::to_value(obj)?)?;
    let owner = backup.controller_owner_ref(&()).expect("EtcdBackup from the API has a name and uid");
    let mut command = vec![crate::OPERATOR_NAME.to_string(), "backup-save".into()];
    command.extend(pods::storage_args(&target.location, &backup.spec.source));
    command.push(format!("--endpoints={}", target.endpoints.join(",")));
    command.push(format!("--timeout-secs={}", target.timeout_secs));
    command.push(format!("--owner-uid={}", owner.uid));
    command.extend(super::contract::ClientTlsArgs::of(&backup.spec.client_tls_secret).to_args());
    command.extend(super::contract::AuthArgs::of(auth).to_args());
    if target.interval.is_some() {
        command.push("--periodic".into());
        command.push(format!("--max-backups={}", target.max_backups));
    }
    let mut labels = BTreeMap::from([(BACKUP_LABEL.to_string(), obj.name_any())]);
    if !backup.spec.cluster_name.is_empty() {
        labels.insert(BACKUP_OF_LABEL.to_string(), backup.spec.cluster_name.clone());
    }
    let mut pod = pods::job_pod(JobPod {
        name: name.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        labels,
        owner,
        image,
        command,
        loc: &target.location,
        source: &backup.spec.source,
        deadline_secs: target.timeout_secs + POD_START_SLACK_SECS,
        writes: true,
        as_root,
    });
    pods::mount_client_tls(&mut pod, &backup.spec.client_tls_secret);
    if let Some(secret) = auth {
        pods::mount_auth(&mut pod, secret);
    }
    Ok(pod)
}

/// Run the EtcdBackup controller until `shutdown` resolves.
pub async fn run(opts: Options, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let on_store = |store: kube::runtime::reflector::Store<DynamicObject>, ctx: &JobContext| {
        ctx.metrics.set_live_backups(Box::new(move || {
            store
                .state()
                .iter()
                .map(|b| crate::metrics::ClusterLabels {
                    namespace: b.namespace().unwrap_or_default(),
                    name: b.name_any(),
                })
                .collect()
        }));
    };
    jobs::run(opts, "etcdbackup", backup_ar(), BACKUP_LABEL, shutdown, on_store, reconcile).await;
}

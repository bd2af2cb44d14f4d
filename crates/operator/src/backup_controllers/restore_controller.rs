//! The EtcdRestore controller (I/O): observe the object (fresh from the API), its verify pods
//! (from the cache) and the EtcdCluster of the name it restores into a [`RestoreObserved`], let
//! `restore_planner` decide, then execute: start the verify pod or create the cluster, write
//! status, publish Events, delete the pods that are done with.

use std::collections::BTreeMap;
use std::sync::Arc;

use etcd_operator_api::backup::EtcdBackupStatus;
use etcd_operator_api::restore::{EtcdRestore, EtcdRestoreSpec, EtcdRestoreStatus};
use etcd_operator_api::{EtcdBackup, EtcdCluster, EtcdClusterStatus, SCOPE_ANNOTATION};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::jobs::{self, Error, JobContext, Options};
use crate::backup::contract::{AuthArgs, RESTORE_LABEL};
use crate::backup::location::{BackupMeta, Location};
use crate::backup::pods::{self, JobPod};
use crate::backup::restore_planner::{
    self, ClusterSeen, RESTORED_BY_ANNOTATION, RestoreObserved, RestoreStep, RestoreTarget,
};
use crate::backup::verify_policy;

fn restore_ar() -> ApiResource {
    ApiResource::erase::<EtcdRestore>(&())
}

/// The EtcdCluster `name` in `ns`, as the planner needs it.
async fn cluster_seen(ctx: &JobContext, ns: &str, name: &str) -> Result<Option<ClusterSeen>, Error> {
    if name.is_empty() {
        return Ok(None);
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ApiResource::erase::<EtcdCluster>(&()));
    let Some(c) = api.get_opt(name).await? else { return Ok(None) };
    let status: EtcdClusterStatus = jobs::status_of(&c);
    Ok(Some(ClusterSeen {
        restored_by: c.annotations().get(RESTORED_BY_ANNOTATION).cloned(),
        size: c.data.pointer("/spec/size").and_then(|v| v.as_i64()).unwrap_or_default(),
        ready_members: status.ready_members as i64,
        restore_sha256: c.data.pointer("/spec/restore/sha256").and_then(|v| v.as_str()).map(str::to_string),
    }))
}

/// The size of the backup `spec` names, as the namespace's EtcdBackups record it (for the verify
/// pod's time limit). Read only while a verify pod may still start; a failed read is no size
/// (the limit of a small backup), never a failed reconcile.
async fn backup_size(
    ctx: &JobContext,
    ns: &str,
    spec: &Result<EtcdRestoreSpec, String>,
    status: &EtcdRestoreStatus,
    generation: i64,
) -> Option<i64> {
    let done =
        status.observed_generation == generation && (status.succeeded || status.phase == restore_planner::PHASE_FAILED);
    let spec = spec.as_ref().ok().filter(|_| !done && status.phase != restore_planner::PHASE_RESTORING)?;
    let url = Location::of(&spec.backup_storage_type, &spec.source).ok()?.url();
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &ApiResource::erase::<EtcdBackup>(&()));
    match api.list(&ListParams::default()).await {
        Ok(list) => {
            let statuses: Vec<EtcdBackupStatus> = list.items.iter().map(jobs::status_of::<EtcdBackupStatus>).collect();
            verify_policy::recorded_size(&url, &statuses)
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not list EtcdBackups for the backup's size; verifying with the limit of a small backup");
            None
        }
    }
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<JobContext>) -> Result<Action, Error> {
    if !ctx.scope.manages(obj.as_ref()) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ar = restore_ar();
    let Some(obj) = jobs::fresh(&ctx, &obj, &ar).await? else { return Ok(Action::await_change()) };
    if obj.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = obj.namespace().unwrap_or_default();
    let spec = jobs::spec_of::<EtcdRestoreSpec>(&obj);
    let cluster_name = spec.as_ref().map(|s| s.etcd_cluster.name.clone()).unwrap_or_default();
    let status = jobs::status_of::<EtcdRestoreStatus>(&obj);
    let generation = obj.metadata.generation.unwrap_or_default();
    let backup_size = backup_size(&ctx, &ns, &spec, &status, generation).await;
    let claim = spec
        .as_ref()
        .ok()
        .and_then(|s| Location::of(&s.backup_storage_type, &s.source).ok())
        .filter(|l| l.kind == crate::backup::location::Kind::Pvc);
    let volume_root = match claim {
        Some(l) => jobs::volume_marked_root(&ctx, &ns, &l.bucket).await?,
        None => false,
    };
    let o = RestoreObserved {
        name: obj.name_any(),
        namespace: ns.clone(),
        uid: obj.uid().unwrap_or_default(),
        generation,
        scope: obj.annotations().get(SCOPE_ANNOTATION).cloned(),
        bump_revision: obj.annotations().get(crate::naming::RESTORE_BUMP_REVISION_ANNOTATION).cloned(),
        spec,
        status,
        cluster: cluster_seen(&ctx, &ns, &cluster_name).await?,
        pods: jobs::job_pods(&ctx, RESTORE_LABEL, &obj)
            .iter()
            .map(|p| crate::backup::job_pods::observe::<BackupMeta>(p))
            .collect(),
        backup_size,
        volume_root,
        now: k8s_openapi::jiff::Timestamp::now(),
    };
    let plan = restore_planner::plan(&o);
    if let Some(claim) = &plan.mark_root_volume {
        // Before the pod: the mark is what runs the next pods (and the restored member) as root.
        jobs::mark_root_volume(&ctx, &ns, claim).await?;
    }
    match &plan.step {
        RestoreStep::Nothing => {}
        RestoreStep::StartVerify { pod, deadline_secs, target, as_root, output, .. } => {
            let made = verify_pod(&obj, target, output.as_ref(), &ctx.init_image, pod, *deadline_secs, *as_root)?;
            jobs::create_pod(&ctx, &made).await?;
        }
        RestoreStep::CreateCluster(cluster) => {
            let api: Api<EtcdCluster> = Api::namespaced(ctx.client.clone(), &ns);
            match api.create(&PostParams::default(), cluster).await {
                Ok(_) => {}
                // Created by an earlier reconcile whose status write was lost: the next
                // reconcile finds it marked as this restore's.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    jobs::write_back(&ctx, &obj, &ar, (&o.status, &plan.status), &plan.events, &plan.delete_pods).await?;
    Ok(plan.requeue.map(Action::requeue).unwrap_or_else(Action::await_change))
}

/// The verify pod: `backup-verify` of one backup, or (a point-in-time restore, `output` set)
/// `restore-point`, which replays the archive with the etcd image's tools and writes `output`.
fn verify_pod(
    obj: &DynamicObject,
    target: &RestoreTarget,
    output: Option<&Location>,
    image: &str,
    name: &str,
    deadline_secs: i64,
    as_root: bool,
) -> Result<k8s_openapi::api::core::v1::Pod, Error> {
    let restore: EtcdRestore = serde_json::from_value(serde_json::to_value(obj)?)?;
    let owner = restore.controller_owner_ref(&()).expect("EtcdRestore from the API has a name and uid");
    let replay = target.replay.as_ref().zip(output);
    let mut command = vec![crate::OPERATOR_NAME.to_string()];
    command.push(if replay.is_some() { "restore-point" } else { "backup-verify" }.into());
    command.extend(pods::storage_args(&target.location, &restore.spec.source));
    let (mut tools, mut login) = (None, None);
    if let Some((r, out)) = replay {
        let version = &r.version;
        command.push(match r.target {
            crate::backup::archive::point_in_time::Target::Revision(rev) => format!("--revision={rev}"),
            crate::backup::archive::point_in_time::Target::Time(ms) => format!("--time-ms={ms}"),
        });
        command.extend(r.cluster_id.iter().map(|c| format!("--cluster-id={c}")));
        command.extend([
            format!("--output-key={}", out.key),
            format!("--owner-uid={}", obj.uid().unwrap_or_default()),
            format!("--etcd-version={version}"),
            format!("--work-dir={}", pods::REPLAY_WORK_DIR),
        ]);
        tools = Some((crate::validation::image_for(&r.repository, version), version.minor_line() >= (3, 5)));
        login = replay_login(&restore.spec);
        command.extend(AuthArgs::of(login.as_deref()).to_args());
    }
    let mut pod = pods::job_pod(JobPod {
        name: name.to_string(),
        namespace: obj.namespace().unwrap_or_default(),
        labels: BTreeMap::from([(RESTORE_LABEL.to_string(), obj.name_any())]),
        owner,
        image,
        command,
        loc: &target.location,
        source: &restore.spec.source,
        deadline_secs,
        writes: replay.is_some(),
        as_root,
    });
    if let Some((etcd_image, etcdutl)) = tools {
        pods::with_replay_tools(&mut pod, image, &etcd_image, etcdutl);
    }
    if let Some(secret) = &login {
        pods::mount_optional_auth(&mut pod, secret);
    }
    Ok(pod)
}

/// The login a point-in-time replay uses when its snapshot has authentication on: the root
/// Secret of the cluster the restore creates (`etcdCluster.spec.auth`), which has to hold the
/// snapshot's root password for the restored cluster to be usable at all. None without
/// `spec.auth` (a snapshot with authentication on is then refused, saying so).
fn replay_login(spec: &EtcdRestoreSpec) -> Option<String> {
    let cluster = spec.etcd_cluster.spec.as_ref()?;
    let policy = crate::auth::Policy::of(&spec.etcd_cluster.name, cluster.auth.as_ref(), None).ok()?;
    policy.root_secret().map(str::to_string)
}

/// Run the EtcdRestore controller until `shutdown` resolves.
pub async fn run(opts: Options, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    jobs::run(opts, "etcdrestore", restore_ar(), RESTORE_LABEL, shutdown, |_, _| {}, reconcile).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::archive::point_in_time::Target as PointTarget;
    use crate::backup::location::Kind;
    use crate::backup::restore_planner::Replay;

    /// A point-in-time EtcdRestore into cluster `restored`, with `auth` as its cluster's spec.auth.
    fn restore(auth: Option<serde_json::Value>) -> DynamicObject {
        let mut spec = serde_json::json!({"size": 3, "version": "3.6.15"});
        if let Some(a) = auth {
            spec["auth"] = a;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdRestore",
            "metadata": {"name": "r", "namespace": "ns", "uid": "u-1"},
            "spec": {"backupStorageType": "S3", "s3": {"path": "bucket/series", "awsSecret": "aws"},
                     "etcdCluster": {"name": "restored", "spec": spec},
                     "pointInTime": {"revision": 42}}
        }))
        .unwrap()
    }

    fn pitr_pod(obj: &DynamicObject) -> k8s_openapi::api::core::v1::Pod {
        let series = Location { kind: Kind::S3, bucket: "bucket".into(), key: "series".into() };
        let target = RestoreTarget {
            location: series.clone(),
            cluster: "restored".into(),
            replay: Some(Replay {
                target: PointTarget::Revision(42),
                cluster_id: None,
                version: crate::version::Version::parse("3.6.15").unwrap(),
                repository: "gcr.io/etcd-development/etcd".into(),
            }),
        };
        let out = series.with_key("series.restores/u-1-g1.db".into());
        verify_pod(obj, &target, Some(&out), "op:dev", "r-verify", 600, false).unwrap()
    }

    /// A point-in-time replay of a cluster with spec.auth logs in with that cluster's root Secret
    /// (mounted optional: a missing Secret is a refusal saying so, not a pod waiting for it);
    /// without spec.auth it gets no login and no Secret.
    #[test]
    fn a_replay_logs_in_with_the_restored_clusters_root_secret() {
        for (auth, secret) in [
            (Some(serde_json::json!({"enabled": true, "rootSecret": "old-root"})), Some("old-root")),
            (Some(serde_json::json!({"enabled": true})), Some("restored-etcd-root")),
            (None, None),
        ] {
            let pod = pitr_pod(&restore(auth));
            let spec = pod.spec.unwrap();
            let main = &spec.containers[0];
            let command = main.command.clone().unwrap();
            assert_eq!(command[1], "restore-point");
            let auth_dir = command.iter().any(|a| a == "--auth-dir=/etc/etcd-operator/etcd-auth");
            let volume = spec.volumes.unwrap_or_default().into_iter().find(|v| v.name == pods::AUTH_VOLUME);
            let mounted = main.volume_mounts.iter().flatten().any(|m| m.name == pods::AUTH_VOLUME);
            match secret {
                Some(name) => {
                    let s = volume.and_then(|v| v.secret).expect("the root Secret is a volume");
                    assert_eq!((s.secret_name.as_deref(), s.optional), (Some(name), Some(true)));
                    assert!(auth_dir && mounted, "{command:?}");
                }
                None => assert!(volume.is_none() && !auth_dir && !mounted, "{command:?}"),
            }
        }
    }
}

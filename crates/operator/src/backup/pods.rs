//! Pure builders of the pods that move backup data: the backup pod (`backup-save`) and the
//! restore verify pod (`backup-verify`), both the operator's own image, and the volumes that give
//! a pod (or a restored member's init containers, `restore_init`) access to a backup location.

use std::collections::BTreeMap;

use etcd_operator_api::backup::BackupSource;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

pub use super::contract::{BACKUP_LABEL, BACKUP_OF_LABEL, RESTORE_LABEL};
use super::contract::{CREDENTIALS_MOUNT, PVC_MOUNT, StorageArgs};
use super::location::{Kind, Location};

const NONROOT: i64 = crate::pod_security::NONROOT;

/// The Secret holding credentials for `kind`, if the spec names one.
pub fn credentials_secret(kind: Kind, source: &BackupSource) -> Option<String> {
    let s = match kind {
        Kind::S3 => source.s3.as_ref().map(|s| s.aws_secret.clone()),
        Kind::Abs => source.abs.as_ref().map(|s| s.abs_secret.clone()),
        Kind::Gcs => source.gcs.as_ref().map(|s| s.gcp_secret.clone()),
        Kind::Pvc => None,
    };
    s.filter(|s| !s.is_empty())
}

/// `--storage-type … --bucket … --key …` for the pod commands.
pub fn storage_args(loc: &Location, source: &BackupSource) -> Vec<String> {
    StorageArgs::of(loc, source).to_args()
}

/// Volumes and mounts that give a pod access to `loc`: the credentials Secret, or the claim.
/// `optional_secret` for the members of a restored cluster: their restore init containers need
/// the credentials once, but the volume stays in the pod spec for the member's life; a Secret
/// deleted or rotated later must not keep a member from starting again (on a pod that has its
/// data, the init containers do not read the backup).
pub fn storage_volumes(
    loc: &Location,
    source: &BackupSource,
    read_only: bool,
    optional_secret: bool,
) -> (Vec<Volume>, Vec<VolumeMount>) {
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some(secret) = credentials_secret(loc.kind, source) {
        volumes.push(Volume {
            name: "backup-credentials".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                optional: optional_secret.then_some(true),
                ..Default::default()
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "backup-credentials".into(),
            mount_path: CREDENTIALS_MOUNT.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if loc.kind == Kind::Pvc {
        volumes.push(Volume {
            name: "backup-volume".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: loc.bucket.clone(),
                read_only: Some(read_only),
            }),
            ..Default::default()
        });
        mounts.push(VolumeMount {
            name: "backup-volume".into(),
            mount_path: PVC_MOUNT.into(),
            read_only: Some(read_only),
            ..Default::default()
        });
    }
    (volumes, mounts)
}

pub(super) fn locked_down(user: Option<i64>) -> SecurityContext {
    SecurityContext {
        run_as_user: user,
        run_as_non_root: user.map(|u| u != 0),
        read_only_root_filesystem: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
        ..Default::default()
    }
}

/// Resources of backup and verify pods: they stream (a few upload parts of
/// `save::PART_SIZE` in flight, a hash), so their memory does not grow with the backup's size.
/// Requests let the scheduler place them where they fit; the memory limit keeps a runaway from
/// taking the node's memory from etcd.
pub fn job_resources() -> ResourceRequirements {
    let q = |s: &str| Quantity(s.to_string());
    ResourceRequirements {
        requests: Some([("cpu".to_string(), q("100m")), ("memory".to_string(), q("64Mi"))].into()),
        limits: Some([("memory".to_string(), q("512Mi"))].into()),
        ..Default::default()
    }
}

/// What a one-container job pod needs.
pub struct JobPod<'a> {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub owner: OwnerReference,
    pub image: &'a str,
    pub command: Vec<String>,
    pub loc: &'a Location,
    pub source: &'a BackupSource,
    pub deadline_secs: i64,
    /// The volume is written (backup) rather than read (verify).
    pub writes: bool,
    /// Run as root: only to a PVC marked as root's (`volume_owner`; the planners decide).
    pub as_root: bool,
}

/// A pod that runs one operator command to completion and reports through its termination
/// message. It passes Pod Security `restricted`: the non-root user [`NONROOT`] (as member
/// pods), seccomp `RuntimeDefault`, every capability dropped, a read-only root filesystem. On a
/// PVC the pod's `fsGroup` is the same id, so that the kubelet makes the volume group-writable
/// (most volume types; `OnRootMismatch`: a volume already the group's is not walked again).
/// Only on a PVC marked as root's (`as_root`) does it run as root, still without capabilities.
pub fn job_pod(j: JobPod) -> Pod {
    let (volumes, mounts) = storage_volumes(j.loc, j.source, !j.writes, false);
    let as_root = j.as_root && j.loc.kind == Kind::Pvc;
    let user = if as_root { 0 } else { NONROOT };
    let on_volume = (j.loc.kind == Kind::Pvc && !as_root).then_some(NONROOT);
    let seccomp =
        Some(k8s_openapi::api::core::v1::SeccompProfile { type_: "RuntimeDefault".into(), ..Default::default() });
    let pod_security = if as_root {
        PodSecurityContext { seccomp_profile: seccomp, ..Default::default() }
    } else {
        PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(NONROOT),
            run_as_group: Some(NONROOT),
            fs_group: on_volume,
            fs_group_change_policy: on_volume.map(|_| "OnRootMismatch".into()),
            seccomp_profile: seccomp,
            ..Default::default()
        }
    };
    Pod {
        metadata: ObjectMeta {
            name: Some(j.name),
            namespace: Some(j.namespace),
            labels: Some(j.labels),
            owner_references: Some(vec![j.owner]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            active_deadline_seconds: Some(j.deadline_secs),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(pod_security),
            containers: vec![Container {
                name: "backup".into(),
                image: Some(j.image.into()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(j.command),
                volume_mounts: (!mounts.is_empty()).then_some(mounts),
                termination_message_policy: Some("FallbackToLogsOnError".into()),
                security_context: Some(locked_down(Some(user))),
                resources: Some(job_resources()),
                env: Some(crate::failpoints::pod_env()).filter(|e| !e.is_empty()),
                ..Default::default()
            }],
            volumes: (!volumes.is_empty()).then_some(volumes),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Where a point-in-time restore's verify pod replays (an emptyDir).
pub const REPLAY_WORK_DIR: &str = "/replay";
/// What the replaying container may use: it runs a one-member etcd besides itself.
const REPLAY_MEMORY_LIMIT: &str = "2Gi";

/// Makes a verify pod replay an archive (`restore-point`): a scratch emptyDir at
/// [`REPLAY_WORK_DIR`], and two init containers that put the etcd image's own `etcd` and
/// `etcdutl` (`etcdctl` before 3.5, `etcdutl` false) there: the operator image stages the
/// static restore step, the etcd image (which has no shell) runs it to copy its binaries. Every
/// container runs as the pod's job container does.
pub fn with_replay_tools(pod: &mut Pod, init_image: &str, etcd_image: &str, etcdutl: bool) {
    let Some(spec) = pod.spec.as_mut() else { return };
    let Some(main) = spec.containers.first_mut() else { return };
    let mount = VolumeMount { name: "replay-work".into(), mount_path: REPLAY_WORK_DIR.into(), ..Default::default() };
    main.volume_mounts.get_or_insert_with(Vec::new).push(mount.clone());
    let limits = main.resources.get_or_insert_with(Default::default).limits.get_or_insert_with(Default::default);
    limits.insert("memory".into(), Quantity(REPLAY_MEMORY_LIMIT.into()));
    let security = main.security_context.clone();
    let container = |name: &str, image: &str, command: Vec<String>| Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command),
        volume_mounts: Some(vec![mount.clone()]),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: security.clone(),
        resources: Some(job_resources()),
        ..Default::default()
    };
    let step = format!("{REPLAY_WORK_DIR}/{}", super::contract::STEP_BINARY);
    let tool = if etcdutl { "/usr/local/bin/etcdutl" } else { "/usr/local/bin/etcdctl" };
    spec.init_containers = Some(vec![
        container(
            "stage-step",
            init_image,
            vec![crate::OPERATOR_NAME.into(), "stage-restore-step".into(), format!("--work-dir={REPLAY_WORK_DIR}")],
        ),
        container(
            "etcd-tools",
            etcd_image,
            vec![step, format!("--copy-into={REPLAY_WORK_DIR}"), "/usr/local/bin/etcd".into(), tool.into()],
        ),
    ]);
    spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: "replay-work".into(),
        empty_dir: Some(Default::default()),
        ..Default::default()
    });
}

/// Mounts the client TLS Secret (`clientTLSSecret`) where [`super::contract::ClientTlsArgs`]
/// reads it; nothing for an empty name. The files are readable by the owner and the group: a
/// non-root pod reads them through its `fsGroup`.
pub fn mount_client_tls(pod: &mut Pod, secret: &str) {
    if secret.is_empty() {
        return;
    }
    let Some(spec) = pod.spec.as_mut() else { return };
    spec.volumes.get_or_insert_with(Vec::new).push(crate::tls::secret_volume(crate::tls::CLIENT_VOLUME, secret));
    let mut user = None;
    for c in &mut spec.containers {
        user = user.or(c.security_context.as_ref().and_then(|s| s.run_as_user));
        c.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
            name: crate::tls::CLIENT_VOLUME.into(),
            mount_path: crate::tls::CLIENT_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(u) = user.filter(|u| *u != 0) {
        spec.security_context.get_or_insert_with(Default::default).fs_group = Some(u);
    }
}

/// [`mount_auth`] of a Secret that may not exist: the pod starts without it and its command
/// finds no login (a point-in-time replay then says that the snapshot needs one) instead of
/// waiting for the Secret until its deadline.
pub fn mount_optional_auth(pod: &mut Pod, secret: &str) {
    mount_auth(pod, secret);
    let volume =
        pod.spec.as_mut().and_then(|s| s.volumes.as_mut()).and_then(|v| v.iter_mut().find(|v| v.name == AUTH_VOLUME));
    if let Some(s) = volume.and_then(|v| v.secret.as_mut()) {
        s.optional = Some(true);
    }
}

/// The volume of the login Secret (`spec.auth`, `authSecret`).
pub const AUTH_VOLUME: &str = "etcd-auth";

/// Mounts the login Secret `secret` into every container where [`super::contract::AuthArgs`]
/// reads it: owner- and group-readable, the pod's `fsGroup` set to a non-root user's group.
pub fn mount_auth(pod: &mut Pod, secret: &str) {
    let Some(spec) = pod.spec.as_mut() else { return };
    spec.volumes.get_or_insert_with(Vec::new).push(crate::tls::secret_volume(AUTH_VOLUME, secret));
    let mut user = None;
    for c in &mut spec.containers {
        user = user.or(c.security_context.as_ref().and_then(|s| s.run_as_user));
        c.volume_mounts.get_or_insert_with(Vec::new).push(VolumeMount {
            name: AUTH_VOLUME.into(),
            mount_path: super::contract::AUTH_DIR.into(),
            read_only: Some(true),
            ..Default::default()
        });
    }
    if let Some(u) = user.filter(|u| *u != 0) {
        spec.security_context.get_or_insert_with(Default::default).fs_group = Some(u);
    }
}

/// The name of an EtcdBackup or EtcdRestore becomes the label value that finds its pods, and a
/// label value holds at most 63 characters: a longer name is refused up front (it used to fail
/// pod creation with no status and no Event).
pub fn check_job_owner_name(name: &str) -> Result<(), String> {
    if name.len() > 63 {
        return Err(format!(
            "metadata.name is {} characters; at most 63 fit, because it labels this object's pods",
            name.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::backup::{PvcSource, S3Source};

    fn s3() -> (Location, BackupSource) {
        let source = BackupSource {
            s3: Some(S3Source {
                path: "b/k".into(),
                aws_secret: "aws".into(),
                endpoint: "http://10.0.0.1:5000".into(),
                force_path_style: true,
            }),
            ..Default::default()
        };
        (Location::of("S3", &source).unwrap(), source)
    }

    #[test]
    fn s3_args_carry_endpoint_and_path_style_and_mount_the_secret() {
        let (loc, source) = s3();
        assert_eq!(
            storage_args(&loc, &source),
            [
                "--storage-type=S3",
                "--bucket=b",
                "--key=k",
                "--s3-endpoint=http://10.0.0.1:5000",
                "--s3-force-path-style"
            ]
        );
        let (v, m) = storage_volumes(&loc, &source, true, false);
        assert_eq!(v[0].secret.as_ref().unwrap().secret_name.as_deref(), Some("aws"));
        assert_eq!(v[0].secret.as_ref().unwrap().optional, None, "backup pods fail fast without their Secret");
        assert_eq!(m[0].mount_path, CREDENTIALS_MOUNT);
    }

    #[test]
    fn backup_and_verify_pods_request_resources_and_bound_memory() {
        let (loc, source) = s3();
        let owner = OwnerReference { name: "b".into(), uid: "u".into(), ..Default::default() };
        let p = job_pod(JobPod {
            name: "b-1".into(),
            namespace: "ns".into(),
            labels: BTreeMap::new(),
            owner,
            image: "op:1",
            command: vec!["etcd-operator".into(), "backup-save".into()],
            loc: &loc,
            source: &source,
            deadline_secs: 60,
            writes: true,
            as_root: false,
        });
        let r = p.spec.unwrap().containers[0].resources.clone().expect("resources");
        let requests = r.requests.unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        // The upload keeps up to 4 parts of 16 MiB in flight: the limit leaves room for them.
        let limit = crate::volume_size::parse_quantity(&r.limits.unwrap()["memory"].0).unwrap();
        assert!(limit >= 4 * (16 << 20) * 2, "memory limit {limit} too tight for the upload");
    }

    /// The replay's tools come from the etcd image, copied by the static step that the operator
    /// image staged; every container is as locked down as the job container.
    #[test]
    fn a_replaying_verify_pod_gets_the_etcd_images_tools_on_its_scratch_volume() {
        let (loc, source) = s3();
        let owner = OwnerReference { name: "r".into(), uid: "u".into(), ..Default::default() };
        let mut p = job_pod(JobPod {
            name: "r-verify-1".into(),
            namespace: "ns".into(),
            labels: BTreeMap::new(),
            owner,
            image: "op:1",
            command: vec!["etcd-operator".into(), "restore-point".into()],
            loc: &loc,
            source: &source,
            deadline_secs: 60,
            writes: true,
            as_root: false,
        });
        with_replay_tools(&mut p, "op:1", "quay.io/coreos/etcd:v3.6.15", true);
        let spec = p.spec.unwrap();
        let init = spec.init_containers.unwrap();
        assert_eq!(
            init.iter().map(|c| c.image.as_deref().unwrap()).collect::<Vec<_>>(),
            ["op:1", "quay.io/coreos/etcd:v3.6.15"]
        );
        let copy = init[1].command.clone().unwrap();
        assert_eq!(copy[0], "/replay/etcd-restore-step", "the etcd image has no shell");
        assert!(copy.ends_with(&["/usr/local/bin/etcd".to_string(), "/usr/local/bin/etcdutl".to_string()]), "{copy:?}");
        let mounted = |c: &Container| c.volume_mounts.iter().flatten().any(|m| m.mount_path == REPLAY_WORK_DIR);
        assert!(init.iter().all(mounted) && mounted(&spec.containers[0]));
        assert!(spec.volumes.unwrap().iter().any(|v| v.name == "replay-work" && v.empty_dir.is_some()));
        for c in init.iter().chain(&spec.containers) {
            assert_eq!(c.security_context, spec.containers[0].security_context, "{}", c.name);
        }
        let limit = &spec.containers[0].resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"];
        assert_eq!(limit.0, "2Gi", "room for the replay's etcd");
    }

    fn pvc() -> (Location, BackupSource) {
        let source = BackupSource {
            pvc: Some(PvcSource { claim_name: "backups".into(), path: "e.db".into() }),
            ..Default::default()
        };
        (Location::of("PVC", &source).unwrap(), source)
    }

    fn pod_to(loc: &Location, source: &BackupSource, writes: bool, as_root: bool) -> Pod {
        job_pod(JobPod {
            name: "b-1".into(),
            namespace: "ns".into(),
            labels: BTreeMap::new(),
            owner: OwnerReference::default(),
            image: "op:1",
            command: vec!["etcd-operator".into()],
            loc,
            source,
            deadline_secs: 60,
            writes,
            as_root,
        })
    }

    /// Backup and verify pods pass the Pod Security Standard `restricted`, to an object store
    /// (with a clientTLSSecret too) and to a PVC; only a pod to a PVC marked as root's does not,
    /// which `volume_owner` says in status.
    #[test]
    fn job_pods_pass_restricted_except_on_a_volume_marked_as_roots() {
        for (loc, source) in [s3(), pvc()] {
            for writes in [true, false] {
                // `as_root` is only for a PVC: an object store pod ignores it.
                let mut p = pod_to(&loc, &source, writes, loc.kind != Kind::Pvc);
                let v = crate::pod_security::restricted::violations(p.spec.as_ref().unwrap());
                assert!(v.is_empty(), "{:?} {writes}: {v:?}", loc.kind);
                mount_client_tls(&mut p, "op-tls");
                let spec = p.spec.unwrap();
                assert!(crate::pod_security::restricted::violations(&spec).is_empty());
                assert_eq!(spec.security_context.unwrap().fs_group, Some(NONROOT), "reads the 0440 Secret");
            }
        }
        let (loc, source) = pvc();
        let p = pod_to(&loc, &source, true, true);
        let v = crate::pod_security::restricted::violations(p.spec.as_ref().unwrap());
        assert!(v.iter().any(|v| v.starts_with("Running as Non-root")), "{v:?}");
    }

    /// A backup pod of a cluster with authentication reads the password from a mounted file:
    /// the command line (shown by `kubectl get pod -o yaml`) names only the directory.
    #[test]
    fn the_login_secret_is_mounted_never_passed_on_the_command_line() {
        let (loc, source) = s3();
        let mut command = vec!["etcd-operator".to_string(), "backup-save".into()];
        command.extend(super::super::contract::AuthArgs::of(Some("ex-etcd-root")).to_args());
        let mut p = job_pod(JobPod {
            name: "b-1".into(),
            namespace: "ns".into(),
            labels: BTreeMap::new(),
            owner: OwnerReference::default(),
            image: "op:1",
            command,
            loc: &loc,
            source: &source,
            deadline_secs: 60,
            writes: true,
            as_root: false,
        });
        mount_auth(&mut p, "ex-etcd-root");
        let spec = p.spec.unwrap();
        assert!(crate::pod_security::restricted::violations(&spec).is_empty());
        let v = spec.volumes.unwrap().into_iter().find(|v| v.name == AUTH_VOLUME).unwrap();
        let secret = v.secret.unwrap();
        assert_eq!((secret.secret_name.as_deref(), secret.default_mode), (Some("ex-etcd-root"), Some(0o440)));
        let c = &spec.containers[0];
        let m = c.volume_mounts.as_ref().unwrap().iter().find(|m| m.name == AUTH_VOLUME).unwrap();
        assert_eq!((m.mount_path.as_str(), m.read_only), ("/etc/etcd-operator/etcd-auth", Some(true)));
        assert_eq!(spec.security_context.unwrap().fs_group, Some(NONROOT), "the non-root user reads it by group");
        assert!(c.env.iter().flatten().all(|e| e.value_from.is_none()), "not in the environment either");
        assert_eq!(c.command.as_ref().unwrap()[2], "--auth-dir=/etc/etcd-operator/etcd-auth");
    }

    #[test]
    fn names_longer_than_a_label_value_are_refused() {
        assert!(check_job_owner_name(&"r".repeat(63)).is_ok());
        let e = check_job_owner_name(&"r".repeat(64)).unwrap_err();
        assert!(e.contains("64 characters") && e.contains("at most 63"), "{e}");
    }

    /// On a PVC: the non-root user with the pod's fsGroup (the kubelet makes the volume the
    /// group's, walking it only when its root is not yet), never root unless the claim is
    /// marked; as root still without capabilities and with a read-only root filesystem.
    #[test]
    fn pvc_job_pods_run_as_non_root_with_fs_group_and_as_root_only_when_marked() {
        let (loc, source) = pvc();
        let spec = pod_to(&loc, &source, true, false).spec.unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let vol = spec.volumes.unwrap()[0].persistent_volume_claim.clone().unwrap();
        assert_eq!((vol.claim_name.as_str(), vol.read_only), ("backups", Some(false)));
        let pod = spec.security_context.unwrap();
        assert_eq!(
            (pod.run_as_user, pod.run_as_group, pod.run_as_non_root),
            (Some(NONROOT), Some(NONROOT), Some(true))
        );
        assert_eq!((pod.fs_group, pod.fs_group_change_policy.as_deref()), (Some(NONROOT), Some("OnRootMismatch")));
        assert_eq!(pod.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let sc = spec.containers[0].security_context.clone().unwrap();
        assert_eq!((sc.run_as_user, sc.run_as_non_root), (Some(NONROOT), Some(true)));
        assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        assert_eq!((sc.read_only_root_filesystem, sc.allow_privilege_escalation), (Some(true), Some(false)));
        // The verify pod mounts the claim read-only, as the same user.
        let spec = pod_to(&loc, &source, false, false).spec.unwrap();
        assert_eq!(spec.volumes.unwrap()[0].persistent_volume_claim.as_ref().unwrap().read_only, Some(true));
        assert_eq!(spec.security_context.unwrap().fs_group, Some(NONROOT));

        let spec = pod_to(&loc, &source, true, true).spec.unwrap();
        let pod = spec.security_context.unwrap();
        assert_eq!((pod.run_as_user, pod.fs_group, pod.run_as_non_root), (None, None, None), "{pod:?}");
        let sc = spec.containers[0].security_context.clone().unwrap();
        assert_eq!((sc.run_as_user, sc.run_as_non_root), (Some(0), Some(false)));
        assert_eq!(sc.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        // Object stores have no fsGroup to apply (their Secrets' mounts add it).
        let (loc, source) = s3();
        let pod = pod_to(&loc, &source, true, false).spec.unwrap().security_context.unwrap();
        assert_eq!((pod.run_as_user, pod.fs_group), (Some(NONROOT), None));
    }
}

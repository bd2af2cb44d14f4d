//! Init containers that restore a bootstrap member before etcd starts (pure builders), from a
//! verified backup or, in a quorum-loss recovery, from a surviving member:
//!
//! 1. `restore-fetch` (operator image): fetch the snapshot and check its sha256 (or stream it from
//!    the survivor and check etcd's integrity hash), and copy the static `etcd-restore-step` into
//!    the scratch directory on the member's volume;
//! 2. `restore-snapshot` (the member's etcd image: `etcdutl` from 3.5, `etcdctl` before, whose
//!    version writes the data directory etcd reads): `etcd-restore-step` clears what an earlier
//!    attempt left, then runs `snapshot restore` into the scratch directory;
//! 3. `restore-finish` (operator image): move the result into place.
//!
//! Each is idempotent (the kubelet re-runs only a failed init container; a new pod sandbox
//! re-runs all three): on a member that already has data, nothing is fetched, restored or moved.
//! They run as the etcd container's user (`pod_security`: the default non-root user, root for
//! a member whose volume holds root's data or that restores from a backup claim marked as
//! root's (`volume_owner`), or as the user's securityContext says) so that etcd owns its files.
//! `restore-fetch` checks first that this user may read the backup on a claim
//! (`volume_access`); the verify pod, made as the same user, checked it before the cluster was
//! created.

use etcd_operator_api::backup::BackupSource;
use k8s_openapi::api::core::v1::{Container, EnvVar, Volume, VolumeMount};

use super::contract::{MemberRestore, RESTORE_WORK_DIR, RESTORED_DIR, SNAPSHOT_FILE, STEP_BINARY};
use super::location::Location;
use super::pods::{locked_down, storage_args, storage_volumes};
use crate::pod_security::Profile;
use crate::version::Version;

/// Where a restored member's snapshot comes from.
#[derive(Clone, Copy, Debug)]
pub enum SnapshotSource<'a> {
    /// A verified backup, checked again against its sha256.
    Backup { loc: &'a Location, source: &'a BackupSource, sha256: &'a str },
    /// A live member of another (broken) cluster, streamed over its client URL and checked
    /// against etcd's own integrity hash (quorum-loss recovery).
    /// `client_tls`: the operator's Secret and the name to check the member's certificate
    /// against, when the cluster's clients speak TLS. `auth_secret`: the Secret with the root
    /// password etcd has (`spec.auth`), mounted optionally: without it the seed logs in as no
    /// one, as it must while authentication is off.
    Member {
        client_url: &'a str,
        cluster_id: u64,
        member_id: u64,
        client_tls: Option<(&'a str, &'a str)>,
        auth_secret: Option<&'a str>,
    },
}

/// What the init containers need besides the snapshot's source.
pub struct RestoreInit<'a> {
    pub init_image: &'a str,
    pub etcd_image: &'a str,
    pub version: &'a Version,
    pub member: &'a MemberRestore,
    pub data_mount: &'a VolumeMount,
    pub data_dir: &'a str,
    /// The member pod's security profile.
    pub profile: Profile<'a>,
}

pub fn restore_init_containers(from: SnapshotSource<'_>, r: &RestoreInit<'_>) -> (Vec<Container>, Vec<Volume>) {
    // Read-only root filesystems in every profile: `etcdutl`/`etcdctl snapshot restore` and the
    // operator's steps write only under the data volume.
    let security = locked_down(r.profile.data_writer());
    let snapshot = format!("{RESTORE_WORK_DIR}/{SNAPSHOT_FILE}");
    let output = format!("{RESTORE_WORK_DIR}/{RESTORED_DIR}");
    let (volumes, mounts, mut prepare) = match from {
        SnapshotSource::Backup { loc, source, sha256 } => {
            let (volumes, mut mounts) = storage_volumes(loc, source, true, true);
            mounts.insert(0, r.data_mount.clone());
            let mut prepare = vec![crate::OPERATOR_NAME.to_string(), "restore-prepare".into()];
            prepare.extend(storage_args(loc, source));
            prepare.push(format!("--sha256={sha256}"));
            (volumes, mounts, prepare)
        }
        SnapshotSource::Member { client_url, cluster_id, member_id, client_tls, auth_secret } => {
            let mut seed = vec![
                crate::OPERATOR_NAME.to_string(),
                "seed-from-member".into(),
                format!("--member-url={client_url}"),
                format!("--cluster-id={cluster_id:x}"),
                format!("--member-id={member_id:x}"),
            ];
            let (mut volumes, mut mounts) = (vec![], vec![r.data_mount.clone()]);
            if let Some((secret, server_name)) = client_tls {
                let args = super::contract::ClientTlsArgs {
                    client_tls_server_name: server_name.to_string(),
                    ..super::contract::ClientTlsArgs::of(secret)
                };
                seed.extend(args.to_args());
                volumes.push(crate::tls::secret_volume_with_mode(
                    crate::tls::CLIENT_VOLUME,
                    secret,
                    r.profile.secret_mode(),
                ));
                mounts.push(VolumeMount {
                    name: crate::tls::CLIENT_VOLUME.into(),
                    mount_path: crate::tls::CLIENT_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                });
            }
            if let Some(secret) = auth_secret {
                seed.extend(super::contract::AuthArgs::of(Some(secret)).to_args());
                let mut v =
                    crate::tls::secret_volume_with_mode(super::pods::AUTH_VOLUME, secret, r.profile.secret_mode());
                if let Some(s) = v.secret.as_mut() {
                    s.optional = Some(true);
                }
                volumes.push(v);
                mounts.push(VolumeMount {
                    name: super::pods::AUTH_VOLUME.into(),
                    mount_path: super::contract::AUTH_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                });
            }
            (volumes, mounts, seed)
        }
    };
    prepare.extend([format!("--data-dir={}", r.data_dir), format!("--work-dir={RESTORE_WORK_DIR}")]);
    let (tool, mut env) = if r.version.minor_line() >= (3, 5) {
        ("/usr/local/bin/etcdutl", vec![])
    } else {
        (
            "/usr/local/bin/etcdctl",
            vec![EnvVar { name: "ETCDCTL_API".into(), value: Some("3".into()), ..Default::default() }],
        )
    };
    if crate::failpoints::armed(crate::failpoints::RESTORE_SNAPSHOT_KILL_ONCE) {
        env.push(EnvVar {
            name: "ETCD_RESTORE_STEP_FAILPOINT".into(),
            value: Some("kill-once".into()),
            ..Default::default()
        });
    }
    let mut restore = vec![
        format!("{RESTORE_WORK_DIR}/{STEP_BINARY}"),
        format!("--data-dir={}", r.data_dir),
        format!("--output-dir={output}"),
        "--".into(),
        tool.to_string(),
        "snapshot".into(),
        "restore".into(),
        snapshot,
        // The sha256 of the whole backup was checked by restore-fetch (a survivor's snapshot:
        // etcd's own hash, checked while it streamed).
        "--skip-hash-check".into(),
        format!("--data-dir={output}"),
    ];
    restore.extend(r.member.flags());
    let finish = vec![
        crate::OPERATOR_NAME.to_string(),
        "restore-finish".into(),
        format!("--data-dir={}", r.data_dir),
        format!("--work-dir={RESTORE_WORK_DIR}"),
    ];
    let container = |name: &str, image: &str, command: Vec<String>, mounts: Vec<VolumeMount>| Container {
        name: name.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(security.clone()),
        ..Default::default()
    };
    let mut etcd_restore = container("restore-snapshot", r.etcd_image, restore, vec![r.data_mount.clone()]);
    etcd_restore.env = (!env.is_empty()).then_some(env);
    (
        vec![
            container("restore-fetch", r.init_image, prepare, mounts),
            etcd_restore,
            container("restore-finish", r.init_image, finish, vec![r.data_mount.clone()]),
        ],
        volumes,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::backup::S3Source;
    use k8s_openapi::api::core::v1::PodSecurityContext;

    fn s3() -> (Location, BackupSource) {
        let source = BackupSource {
            s3: Some(S3Source { path: "b/k".into(), aws_secret: "aws".into(), ..Default::default() }),
            ..Default::default()
        };
        (Location::of("S3", &source).unwrap(), source)
    }

    fn member() -> MemberRestore {
        MemberRestore {
            name: "ex-a".into(),
            initial_cluster: vec![("ex-a".into(), "http://ex-a.ex.ns.svc:2380".into())],
            token: "uid".into(),
            peer_url: "http://ex-a.ex.ns.svc:2380".into(),
            bump_revision: None,
        }
    }

    #[test]
    fn restore_runs_fetch_then_the_step_in_the_etcd_image_then_finish() {
        let (loc, source) = s3();
        let data_mount = VolumeMount { name: "etcd-data".into(), mount_path: "/var/etcd".into(), ..Default::default() };
        let v35 = Version::parse("3.5.1").unwrap();
        let m = member();
        let init = RestoreInit {
            init_image: "op:1",
            etcd_image: "etcd:v3.5.1",
            version: &v35,
            member: &m,
            data_mount: &data_mount,
            data_dir: "/var/etcd/data",
            profile: Profile::Root,
        };
        let (c, vols) =
            restore_init_containers(SnapshotSource::Backup { loc: &loc, source: &source, sha256: "abc" }, &init);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["restore-fetch", "restore-snapshot", "restore-finish"]);
        assert!(c[0].command.as_ref().unwrap().contains(&"--sha256=abc".to_string()));
        let restore = c[1].command.as_ref().unwrap();
        // The etcd image has no shell: the static step from the work directory runs the tool.
        assert_eq!(restore[0], "/var/etcd/restore/etcd-restore-step");
        assert!(restore.contains(&"--data-dir=/var/etcd/data".to_string()), "the step looks for the member's data");
        let tool = restore.iter().position(|a| a == "--").unwrap() + 1;
        assert_eq!(restore[tool], "/usr/local/bin/etcdutl");
        assert!(restore[tool..].contains(&"--data-dir=/var/etcd/restore/data".to_string()));
        assert!(restore.contains(&"--name=ex-a".to_string()));
        assert!(restore.contains(&"--initial-cluster-token=uid".to_string()));
        assert_eq!(c[1].image.as_deref(), Some("etcd:v3.5.1"));
        assert_eq!(vols.len(), 1, "the credentials Secret");
        assert_eq!(vols[0].secret.as_ref().unwrap().optional, Some(true), "a member must start again without it");
        assert_eq!(c[0].security_context.as_ref().unwrap().run_as_user, Some(0), "etcd's user: root");
        let restricted = RestoreInit { profile: Profile::Restricted, ..init };
        let (c, _) =
            restore_init_containers(SnapshotSource::Backup { loc: &loc, source: &source, sha256: "abc" }, &restricted);
        for c in &c {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!((sc.run_as_user, sc.read_only_root_filesystem), (None, Some(true)), "the pod's non-root user");
        }

        let v34 = Version::parse("3.4.23").unwrap();
        let sc = PodSecurityContext { run_as_user: Some(1000), ..Default::default() };
        let init = RestoreInit { etcd_image: "etcd:v3.4.23", version: &v34, profile: Profile::Users(&sc), ..init };
        let (c, _) =
            restore_init_containers(SnapshotSource::Backup { loc: &loc, source: &source, sha256: "abc" }, &init);
        let restore = c[1].command.as_ref().unwrap();
        assert_eq!(restore[restore.iter().position(|a| a == "--").unwrap() + 1], "/usr/local/bin/etcdctl");
        assert_eq!(c[1].env.as_ref().unwrap()[0].value.as_deref(), Some("3"));
        assert_eq!(c[0].security_context.as_ref().unwrap().run_as_user, None, "the pod's user applies");
    }

    #[test]
    fn a_seed_over_tls_mounts_the_operator_secret_into_the_fetch_container_only() {
        let data_mount = VolumeMount { name: "etcd-data".into(), mount_path: "/var/etcd".into(), ..Default::default() };
        let v = Version::parse("3.5.1").unwrap();
        let m = member();
        let init = RestoreInit {
            init_image: "op:1",
            etcd_image: "etcd:v3.5.1",
            version: &v,
            member: &m,
            data_mount: &data_mount,
            data_dir: "/var/etcd/data",
            profile: Profile::Root,
        };
        let seed = |client_tls| SnapshotSource::Member {
            client_url: "https://10.0.0.1:2379",
            cluster_id: 1,
            member_id: 2,
            client_tls,
            auth_secret: None,
        };
        let (c, vols) = restore_init_containers(seed(Some(("op-tls", "ex-client.ns.svc"))), &init);
        let cmd = c[0].command.as_ref().unwrap();
        assert!(cmd.contains(&"--client-tls-dir=/etc/etcdtls/operator/etcd-tls".to_string()), "{cmd:?}");
        assert!(cmd.contains(&"--client-tls-server-name=ex-client.ns.svc".to_string()), "{cmd:?}");
        assert_eq!(vols[0].secret.as_ref().unwrap().secret_name.as_deref(), Some("op-tls"));
        assert_eq!(c[0].volume_mounts.as_ref().unwrap().len(), 2);
        assert_eq!(c[1].volume_mounts.as_ref().unwrap().len(), 1, "the etcd image never sees the key");
        let (c, vols) = restore_init_containers(seed(None), &init);
        assert!(vols.is_empty() && !c[0].command.as_ref().unwrap().iter().any(|a| a.contains("tls")));
        // With spec.auth: the record of the root password, optional (no record: no login).
        let with_auth = SnapshotSource::Member {
            client_url: "http://10.0.0.1:2379",
            cluster_id: 1,
            member_id: 2,
            client_tls: None,
            auth_secret: Some("ex-etcd-root-applied"),
        };
        let (c, vols) = restore_init_containers(with_auth, &init);
        let cmd = c[0].command.as_ref().unwrap();
        assert!(cmd.contains(&"--auth-dir=/etc/etcd-operator/etcd-auth".to_string()), "{cmd:?}");
        let secret = vols[0].secret.as_ref().unwrap();
        assert_eq!((secret.secret_name.as_deref(), secret.optional), (Some("ex-etcd-root-applied"), Some(true)));
        assert!(
            c[1].volume_mounts.as_ref().unwrap().iter().all(|m| m.name != "etcd-auth"),
            "the etcd image never sees it"
        );
    }
}

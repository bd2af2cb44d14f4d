//! The pod of one member: etcd's command line (URLs by TLS stage, space flags), the readiness
//! probe, the init containers (the data check, a restore or recovery seed, the DNS wait), the
//! security profile (`pod_security`), its volumes and placement.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, PersistentVolumeClaimVolumeSource, Pod, PodSpec,
    Probe, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Resource;

use super::{DATA_DIR, DATA_MOUNT, cluster_name, meta, serving_labels};
use crate::naming::{self, BOOTSTRAP_ANNOTATION, CLIENT_PORT, PEER_PORT, VERSION_ANNOTATION};
use crate::planner::{NewMember, Seed};
use crate::validation::{Desired, image_for};

/// The readiness probe's path: etcd's `/health` without the NOSPACE alarm.
pub const HEALTH_PATH: &str = "/health?exclude=NOSPACE";

/// etcd before 3.4.16 ignores `exclude` (etcd#12880 came with 3.4.16: every alarm fails
/// `/health`); 3.5.0 and 3.5.1 exclude a NOSPACE alarm only when one member raised it
/// (etcd#13467, fixed in 3.5.2). Either way, under NOSPACE every member reads unready and the
/// client Service empties while the cluster still serves reads and deletes (found by
/// hack/chaos.sh for 3.5.1).
pub fn health_exclude_is_broken(v: &crate::version::Version) -> bool {
    let (line, fixed) = (v.minor_line(), |patch| crate::version::Version { patch, suffix: String::new(), ..v.clone() });
    (line == (3, 4) && *v < fixed(16)) || (line == (3, 5) && *v < fixed(2))
}

/// The readiness probe for those versions: a linearizable read through etcdctl (of the member's
/// own image), which fails without a leader and on a learner, as `/health` does, and works
/// under a NOSPACE alarm.
fn read_probe() -> Probe {
    Probe {
        exec: Some(k8s_openapi::api::core::v1::ExecAction {
            command: Some(
                [
                    "/usr/local/bin/etcdctl",
                    "--endpoints=http://127.0.0.1:2379",
                    "--dial-timeout=1s",
                    "--command-timeout=2s",
                    "get",
                    "health",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ),
        }),
        period_seconds: Some(1),
        timeout_seconds: Some(3),
        failure_threshold: Some(3),
        ..Default::default()
    }
}

/// The etcd command line of a member.
pub fn etcd_command(c: &EtcdCluster, d: &Desired, m: &NewMember) -> Vec<String> {
    let name = cluster_name(c);
    let ns = c.meta().namespace.clone().unwrap_or_default();
    let host = naming::member_host(&m.name, &name, &ns, &d.pod.cluster_domain);
    let initial: Vec<String> = m.initial_cluster.iter().map(|(n, u)| format!("{n}={u}")).collect();
    let uid = c.meta().uid.clone().unwrap_or_default();
    let mut flags = vec!["/usr/local/bin/etcd".into(), format!("--name={}", m.name), format!("--data-dir={DATA_DIR}")];
    // Listen and advertise URLs: the peer listener takes the scheme of the member's own URL, the
    // client port serves what the TLS stage says (`tls::transition`).
    flags.extend(d.tls_stage.url_flags(&own_peer_url(d, m, &host), &host));
    flags.extend([
        format!("--initial-cluster={}", initial.join(",")),
        format!("--initial-cluster-state={}", if m.existing { "existing" } else { "new" }),
        // The EtcdCluster's UID: two clusters of the same name never cross-talk.
        format!("--initial-cluster-token={uid}"),
    ]);
    flags.extend(crate::tls::member_flags(&d.tls_stage.secrets));
    // Space: the quota and history compaction (unless `etcdEnv` sets them: etcd refuses a
    // setting given both ways).
    if let Some(q) = d.maintenance.quota_flag {
        flags.push(format!("--quota-backend-bytes={q}"));
    }
    if let Some((mode, retention)) = &d.maintenance.compaction_flags {
        flags.push(format!("--auto-compaction-mode={}", mode.as_flag()));
        flags.push(format!("--auto-compaction-retention={retention}"));
    }
    flags
}

/// The member's own peer URL: as the membership (or its volume) names it, else a new one.
fn own_peer_url(d: &Desired, m: &NewMember, host: &str) -> String {
    m.initial_cluster
        .iter()
        .find(|(n, _)| *n == m.name)
        .map(|(_, u)| u.clone())
        .unwrap_or_else(|| naming::peer_url(d.tls_stage.peer_scheme(), host))
}

/// The pod of one member.
pub fn member_pod(c: &EtcdCluster, d: &Desired, m: &NewMember, init_image: &str) -> Pod {
    let name = cluster_name(c);
    let ns = c.meta().namespace.clone().unwrap_or_default();
    let host = naming::member_host(&m.name, &name, &ns, &d.pod.cluster_domain);
    let mut labels = d.pod.labels.clone();
    labels.extend(serving_labels(c));
    if m.fenced {
        // Fenced by a person before this pod was made again: out of the client Service from
        // the start (`fencing::start_fenced`); `act` adds the fence's marks.
        labels.insert(naming::SERVING_LABEL.into(), "false".into());
    }
    let mut annotations = d.pod.annotations.clone();
    annotations.insert(VERSION_ANNOTATION.into(), m.version.to_string());
    annotations.insert(naming::POD_SPEC_HASH_ANNOTATION.into(), d.pod_hash_for(m.root_data));
    if m.bootstrap {
        annotations.insert(BOOTSTRAP_ANNOTATION.into(), "true".into());
    }
    // Who the pod runs as (`pod_security`): by default non-root and `restricted`; as root where
    // the member's volume holds data only root can use; as `spec.pod.securityContext` says.
    let profile = crate::pod_security::profile(d.pod.security_context.as_ref(), m.root_data);
    let pod_security = profile.pod_context();
    let locked_down = profile.container_context();
    // etcd resolves its own peer name at start and gives up after 30 s. With the cluster domain
    // in the name, the kubelet's /etc/hosts of the pod answers at once. Without it the name
    // needs cluster DNS, which publishes it only after the pod has an IP: an init container
    // waits for it first (the operator's own image: real etcd images have no shell).
    let needs_dns_wait = d.pod.cluster_domain.trim_matches('.').is_empty();
    let wait_dns = Container {
        name: "wait-dns".into(),
        image: Some(init_image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(vec![
            crate::OPERATOR_NAME.into(),
            "wait-dns".into(),
            format!("--host={host}"),
            format!("--timeout-secs={}", d.pod.dns_timeout_in_second),
        ]),
        security_context: Some(SecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(crate::pod_security::NONROOT),
            read_only_root_filesystem: Some(true),
            ..locked_down.clone()
        }),
        ..Default::default()
    };
    let data_mount =
        VolumeMount { name: super::DATA_VOLUME.into(), mount_path: DATA_MOUNT.into(), ..Default::default() };
    let etcd = Container {
        name: "etcd".into(),
        image: Some(image_for(&d.repository, &m.version)),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(etcd_command(c, d, m)),
        ports: Some(vec![
            ContainerPort { name: Some("client".into()), container_port: CLIENT_PORT, ..Default::default() },
            ContainerPort { name: Some("peer".into()), container_port: PEER_PORT, ..Default::default() },
        ]),
        // From 3.6 on, experimental settings under their 3.6 names (`etcd_flags`).
        env: Some(crate::etcd_flags::member_env(&d.pod.etcd_env, &m.version).0).filter(|e| !e.is_empty()),
        resources: d.pod.resources.clone(),
        volume_mounts: Some(vec![data_mount.clone()]),
        // /health fails without a leader and on a learner (linearizable read), so the client
        // Service only sends clients to voting members of a working cluster. A NOSPACE alarm is
        // excluded (3.4.23+ read `exclude`): the cluster still serves reads and deletes, and
        // emptying the Service would keep clients from freeing space.
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(HEALTH_PATH.into()),
                port: IntOrString::Int(CLIENT_PORT),
                ..Default::default()
            }),
            // Every second: status (and the client Service) follow a member within a second.
            // /health is one cheap read; three misses in a row mark the member unready.
            period_seconds: Some(1),
            timeout_seconds: Some(2),
            failure_threshold: Some(3),
            ..Default::default()
        }),
        security_context: Some(locked_down.clone()),
        ..Default::default()
    };
    let mut init_containers = Vec::new();
    let mut volumes = Vec::new();
    // A volume must prove it holds this member's data before the member (re)starts on it.
    if m.pvc {
        init_containers.push(check_data(c, m, init_image, &data_mount, profile));
    }
    // A recovered cluster's first member starts from its seed; a restored cluster's bootstrap
    // members from the backup; later members join.
    use crate::backup::restore_init::{RestoreInit, SnapshotSource};
    let seed_tls = crate::tls::seed_tls(&d.tls_stage.secrets, &name, &ns).filter(|_| d.tls_stage.operator_https);
    let seed_auth = d.auth.root_secret().map(|_| crate::auth::applied_secret(&name));
    let from = match (&m.seed, &d.restore) {
        (Some(Seed::Member { client_url, cluster_id, member_id, .. }), _) => Some(SnapshotSource::Member {
            client_url,
            cluster_id: *cluster_id,
            member_id: *member_id,
            client_tls: seed_tls.as_ref().map(|(s, n)| (s.as_str(), n.as_str())),
            auth_secret: seed_auth.as_deref(),
        }),
        (Some(Seed::Backup(r)), _) => {
            Some(SnapshotSource::Backup { loc: &r.location, source: &r.source, sha256: &r.sha256 })
        }
        (None, Some(r)) if m.bootstrap && !m.existing => {
            Some(SnapshotSource::Backup { loc: &r.location, source: &r.source, sha256: &r.sha256 })
        }
        _ => None,
    };
    if let Some(from) = from {
        let member = crate::backup::contract::MemberRestore {
            name: m.name.clone(),
            initial_cluster: m.initial_cluster.clone(),
            // As etcd's own --initial-cluster-token: the EtcdCluster's UID.
            token: c.meta().uid.clone().unwrap_or_default(),
            peer_url: own_peer_url(d, m, &host),
            bump_revision: crate::backup::contract::bump_revision(
                c.meta()
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(naming::RESTORE_BUMP_REVISION_ANNOTATION))
                    .map(String::as_str),
                &m.version,
            ),
        };
        let etcd_image = image_for(&d.repository, &m.version);
        let (containers, vols) = crate::backup::restore_init::restore_init_containers(
            from,
            &RestoreInit {
                init_image,
                etcd_image: &etcd_image,
                version: &m.version,
                member: &member,
                data_mount: &data_mount,
                data_dir: DATA_DIR,
                profile,
            },
        );
        init_containers.extend(containers);
        volumes.extend(vols);
    }
    if needs_dns_wait {
        init_containers.push(wait_dns);
    }
    let mut etcd = etcd;
    // Authentication refuses the read (validation refuses it with 3.5.0/3.5.1): with it, members
    // before 3.4.16 keep `/health`, and go unready under NOSPACE.
    if health_exclude_is_broken(&m.version) && d.tls_stage.serves().http() && !d.auth.enabled() {
        etcd.readiness_probe = Some(read_probe());
    }
    crate::tls::secure_member(&d.tls_stage.secrets, profile.secret_mode(), &mut etcd, &mut volumes);
    let data = if m.pvc {
        Volume {
            name: super::DATA_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: m.claim.clone().unwrap_or_else(|| naming::pvc_name(&m.name)),
                ..Default::default()
            }),
            ..Default::default()
        }
    } else {
        Volume {
            name: super::DATA_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }
    };
    let (affinity, spread) = super::placement::of(d, &name);
    Pod {
        metadata: ObjectMeta { annotations: Some(annotations), ..meta(c, &m.name, labels) },
        spec: Some(PodSpec {
            hostname: Some(m.name.clone()),
            subdomain: Some(name),
            // A crashed etcd restarts in place on its data (emptyDir survives container
            // restarts); only a pod that is gone or Failed is treated as a lost member.
            restart_policy: Some("Always".into()),
            // Service links would inject ETCD_* variables for a Service named "etcd...", which
            // etcd reads as flags and rejects.
            enable_service_links: Some(false),
            automount_service_account_token: Some(false),
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            containers: vec![etcd],
            volumes: Some(std::iter::once(data).chain(volumes).collect()),
            node_selector: (!d.pod.node_selector.is_empty()).then(|| d.pod.node_selector.clone()),
            affinity,
            topology_spread_constraints: spread,
            tolerations: (!d.pod.tolerations.is_empty()).then(|| d.pod.tolerations.clone()),
            security_context: pod_security,
            termination_grace_period_seconds: Some(30),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The member data check (see `member_volume`), as the etcd container's user so that it may
/// write the marker where etcd writes its data, and so that what it finds accessible is what
/// etcd will find accessible.
fn check_data(
    c: &EtcdCluster,
    m: &NewMember,
    init_image: &str,
    data_mount: &VolumeMount,
    profile: crate::pod_security::Profile<'_>,
) -> Container {
    let mut command = vec![
        crate::OPERATOR_NAME.to_string(),
        "check-data".into(),
        format!("--member={}", m.name),
        format!("--cluster-uid={}", c.meta().uid.clone().unwrap_or_default()),
        format!("--data-dir={DATA_DIR}"),
    ];
    if m.restart {
        command.push("--expect-data".into());
        if m.acknowledged_index > 0 {
            command.push(format!("--acknowledged-index={}", m.acknowledged_index));
        }
    }
    Container {
        name: crate::pod::member_volume::CHECK_CONTAINER.into(),
        image: Some(init_image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        command: Some(command),
        volume_mounts: Some(vec![data_mount.clone()]),
        security_context: Some(SecurityContext { run_as_user: profile.data_writer(), ..profile.container_context() }),
        ..Default::default()
    }
}

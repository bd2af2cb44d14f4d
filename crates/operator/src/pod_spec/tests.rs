//! Tests of the pure builders of member pods, PVCs and Services.

use super::*;
use crate::naming::{CLUSTER_LABEL, CLUSTER_UID_LABEL};
use crate::planner::Seed;
use crate::validation::validate;
use crate::version::Version;
use etcd_operator_api::EtcdClusterSpec;
use k8s_openapi::api::core::v1::Pod;

fn cluster(yaml_spec: &str) -> (EtcdCluster, Desired) {
    let spec: EtcdClusterSpec = serde_yaml::from_str(yaml_spec).unwrap();
    let mut c = EtcdCluster::new("ex", spec.clone());
    c.metadata.namespace = Some("ns".into());
    c.metadata.uid = Some("uid-1".into());
    let d = validate("ex", &spec).unwrap();
    (c, d)
}

fn member(existing: bool, pvc: bool) -> NewMember {
    NewMember {
        name: "ex-abcde".into(),
        initial_cluster: vec![
            ("ex-a".into(), "http://ex-a.ex.ns.svc:2380".into()),
            ("ex-abcde".into(), "http://ex-abcde.ex.ns.svc:2380".into()),
        ],
        existing,
        version: Version::parse("3.5.1").unwrap(),
        pvc,
        bootstrap: !existing,
        restart: false,
        seed: None,
        root_data: false,
        claim: None,
        acknowledged_index: 0,
        fenced: false,
    }
}

#[test]
fn a_member_fenced_before_its_pod_is_made_again_starts_out_of_the_client_service() {
    let (c, d) = cluster("size: 3\nversion: 3.5.1");
    let serving =
        |m: &NewMember| member_pod(&c, &d, m, "op:1").metadata.labels.unwrap()[crate::naming::SERVING_LABEL].clone();
    let mut m = member(true, true);
    assert_eq!(serving(&m), "true");
    m.fenced = true;
    assert_eq!(serving(&m), "false");
    // The client Service selects the serving label (`pod_spec::services`).
    let sel = crate::pod_spec::client_service(&c).spec.and_then(|s| s.selector).unwrap_or_default();
    assert_eq!(sel.get(crate::naming::SERVING_LABEL).map(String::as_str), Some("true"));
}

#[test]
fn member_pod_has_coreos_labels_stable_dns_and_owner() {
    let (c, d) = cluster("size: 3\nversion: 3.5.1\npod: {labels: {team: a}}");
    let p = member_pod(&c, &d, &member(true, false), "op:1");
    let labels = p.metadata.labels.clone().unwrap();
    assert_eq!(labels["app"], "etcd");
    assert_eq!(labels["etcd_cluster"], "ex");
    assert_eq!(labels["team"], "a");
    assert_eq!(p.metadata.annotations.as_ref().unwrap()["etcd.version"], "3.5.1");
    let spec = p.spec.unwrap();
    assert_eq!(spec.hostname.as_deref(), Some("ex-abcde"));
    assert_eq!(spec.subdomain.as_deref(), Some("ex"));
    assert_eq!(spec.enable_service_links, Some(false));
    assert_eq!(spec.containers[0].image.as_deref(), Some("quay.io/coreos/etcd:v3.5.1"));
    assert_eq!(p.metadata.owner_references.unwrap()[0].kind, "EtcdCluster");
    assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
    let init = &spec.init_containers.unwrap()[0];
    assert!(init.command.as_ref().unwrap().contains(&"--host=ex-abcde.ex.ns.svc".to_string()));
}

#[test]
fn etcd_flags_join_an_existing_cluster() {
    let (c, d) = cluster("size: 3\nversion: 3.5.1");
    let cmd = etcd_command(&c, &d, &member(true, false));
    assert!(cmd.contains(&"--initial-cluster-state=existing".to_string()));
    assert!(cmd.contains(
        &"--initial-cluster=ex-a=http://ex-a.ex.ns.svc:2380,ex-abcde=http://ex-abcde.ex.ns.svc:2380".to_string()
    ));
    assert!(cmd.contains(&"--initial-advertise-peer-urls=http://ex-abcde.ex.ns.svc:2380".to_string()));
    assert!(cmd.contains(&"--initial-cluster-token=uid-1".to_string()));
    let boot = etcd_command(&c, &d, &member(false, false));
    assert!(boot.contains(&"--initial-cluster-state=new".to_string()));
}

#[test]
fn cluster_domain_ends_member_urls() {
    let (c, d) = cluster("size: 1\nversion: 3.5.1\npod: {ClusterDomain: cluster.local}");
    let cmd = etcd_command(&c, &d, &member(false, false));
    assert!(
        cmd.contains(&"--advertise-client-urls=http://ex-abcde.ex.ns.svc.cluster.local:2379".to_string()),
        "{cmd:?}"
    );
    // The kubelet's /etc/hosts carries the full name: etcd needs no DNS wait at start.
    let p = member_pod(&c, &d, &member(false, false), "op:1");
    assert!(p.spec.unwrap().init_containers.is_none());
}

#[test]
fn pvc_members_mount_their_claim() {
    let (c, d) = cluster(
        "size: 1\nversion: 3.5.1\npod:\n  persistentVolumeClaimSpec:\n    accessModes: [ReadWriteOnce]\n    resources: {requests: {storage: 1Gi}}",
    );
    let p = member_pod(&c, &d, &member(false, true), "op:1");
    let v = &p.spec.unwrap().volumes.unwrap()[0];
    assert_eq!(v.persistent_volume_claim.as_ref().unwrap().claim_name, "ex-abcde-data");
    let pvc = member_pvc(&c, &d, &member(false, true)).unwrap();
    assert_eq!(pvc.metadata.name.as_deref(), Some("ex-abcde-data"));
    // Enough to restart the member on it when nothing else is left.
    let a = pvc.metadata.annotations.unwrap();
    assert_eq!(a[MEMBER_ANNOTATION], "ex-abcde");
    assert_eq!(a[PEER_URL_ANNOTATION], "http://ex-abcde.ex.ns.svc:2380");
    assert_eq!(a[BOOTSTRAP_ANNOTATION], "true");
    assert_eq!(pvc.metadata.labels.unwrap()[CLUSTER_UID_LABEL], "uid-1");
    assert!(!a.contains_key(naming::DATA_OWNER_ANNOTATION), "a new member's data is the non-root user's");
    // A member made as root (it restores from a backup volume marked as root's) writes root's
    // data: its volume is marked from the start, so that it restarts as root.
    let mut root = member(false, true);
    root.root_data = true;
    let a = member_pvc(&c, &d, &root).unwrap().metadata.annotations.unwrap();
    assert_eq!(a[naming::DATA_OWNER_ANNOTATION], naming::ROOT_DATA_OWNER);
}

fn init_commands(p: &Pod) -> Vec<(String, Vec<String>)> {
    let spec = p.spec.clone().unwrap();
    spec.init_containers.unwrap_or_default().into_iter().map(|c| (c.name, c.command.unwrap_or_default())).collect()
}

#[test]
fn a_pvc_member_checks_its_volume_first_and_a_restart_demands_its_data() {
    let (c, d) = cluster(
        "size: 1\nversion: 3.5.1\npod:\n  persistentVolumeClaimSpec:\n    accessModes: [ReadWriteOnce]\n    resources: {requests: {storage: 1Gi}}",
    );
    let first = init_commands(&member_pod(&c, &d, &member(false, true), "op:1"));
    assert_eq!(first[0].0, crate::pod::member_volume::CHECK_CONTAINER);
    assert!(
        first[0].1.contains(&"--member=ex-abcde".to_string())
            && first[0].1.contains(&"--cluster-uid=uid-1".to_string())
    );
    assert!(!first[0].1.contains(&"--expect-data".to_string()), "a new member has no data yet");
    let mut m = member(true, true);
    m.restart = true;
    let again = init_commands(&member_pod(&c, &d, &m, "op:1"));
    assert!(again[0].1.contains(&"--expect-data".to_string()));
    assert!(!again[0].1.iter().any(|a| a.starts_with("--acknowledged-index")), "none recorded");
    // What the member acknowledged, when recorded: its data must reach it.
    m.acknowledged_index = 4711;
    let again = init_commands(&member_pod(&c, &d, &m, "op:1"));
    assert!(again[0].1.contains(&"--acknowledged-index=4711".to_string()), "{again:?}");
    // A restart mounts the claim it restarts on, whoever named it (CoreOS: after the member).
    m.claim = Some("ex-abcde".into());
    let p = member_pod(&c, &d, &m, "op:1");
    assert_eq!(p.spec.unwrap().volumes.unwrap()[0].persistent_volume_claim.as_ref().unwrap().claim_name, "ex-abcde");
    // emptyDir members have nothing to check.
    let plain = init_commands(&member_pod(&c, &d, &member(false, false), "op:1"));
    assert!(plain.iter().all(|(n, _)| n != crate::pod::member_volume::CHECK_CONTAINER));
}

#[test]
fn a_recovery_seed_member_restores_a_survivors_snapshot_as_a_new_cluster() {
    let (c, d) = cluster("size: 3\nversion: 3.5.1");
    let mut m = member(false, false);
    m.initial_cluster = vec![("ex-abcde".into(), "http://ex-abcde.ex.ns.svc:2380".into())];
    m.seed = Some(Seed::Member {
        pod: "ex-a".into(),
        client_url: "http://10.0.0.5:2379".into(),
        cluster_id: 0xabc,
        member_id: 0x12,
    });
    let inits = init_commands(&member_pod(&c, &d, &m, "op:1"));
    let names: Vec<&str> = inits.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(&names[..3], ["restore-fetch", "restore-snapshot", "restore-finish"]);
    assert!(inits[0].1.contains(&"seed-from-member".to_string()));
    assert!(inits[0].1.contains(&"--member-url=http://10.0.0.5:2379".to_string()));
    assert!(inits[0].1.contains(&"--cluster-id=abc".to_string()) && inits[0].1.contains(&"--member-id=12".to_string()));
    assert!(inits[1].1.contains(&"--initial-cluster=ex-abcde=http://ex-abcde.ex.ns.svc:2380".to_string()));
    // The restore writes the membership etcd then starts with: the same name, cluster, token
    // and peer URL as etcd's own command line.
    let pod = member_pod(&c, &d, &m, "op:1");
    let etcd = pod.spec.unwrap().containers[0].command.clone().unwrap();
    for flag in ["--name=", "--initial-cluster=", "--initial-cluster-token=", "--initial-advertise-peer-urls="] {
        let of = |cmd: &[String]| cmd.iter().find(|a| a.starts_with(flag)).cloned();
        assert_eq!(of(&inits[1].1), of(&etcd), "{flag}");
        assert!(of(&etcd).is_some(), "{flag}");
    }
}

#[test]
fn services_select_only_members_of_this_cluster_object() {
    let (c, _) = cluster("size: 3\nversion: 3.5.1");
    for svc in [client_service(&c), peer_service(&c)] {
        let sel = svc.spec.unwrap().selector.unwrap();
        assert_eq!(sel[CLUSTER_UID_LABEL], "uid-1", "an orphaned pod of an earlier cluster named ex must not match");
    }
    let p = member_pod(&c, &d_of(&c), &member(true, false), "op:1");
    assert_eq!(p.metadata.labels.unwrap()[CLUSTER_UID_LABEL], "uid-1");
}

fn d_of(c: &EtcdCluster) -> Desired {
    validate("ex", &c.spec).unwrap()
}

#[test]
fn deprecated_anti_affinity_becomes_required_pod_anti_affinity() {
    let (c, d) = cluster("size: 3\nversion: 3.5.1\npod: {antiAffinity: true}");
    let p = member_pod(&c, &d, &member(true, false), "op:1");
    let aff = p.spec.unwrap().affinity.unwrap().pod_anti_affinity.unwrap();
    assert_eq!(
        aff.required_during_scheduling_ignored_during_execution.unwrap()[0].topology_key,
        "kubernetes.io/hostname"
    );
}

#[test]
fn members_are_spread_by_default_and_a_users_affinity_replaces_the_default() {
    let (c, d) = cluster("size: 3\nversion: 3.5.1");
    let spec = member_pod(&c, &d, &member(true, false), "op:1").spec.unwrap();
    let preferred =
        spec.affinity.unwrap().pod_anti_affinity.unwrap().preferred_during_scheduling_ignored_during_execution.unwrap();
    assert_eq!(preferred[0].pod_affinity_term.topology_key, "kubernetes.io/hostname");
    let sel = preferred[0].pod_affinity_term.label_selector.clone().unwrap().match_labels.unwrap();
    assert_eq!(sel[CLUSTER_LABEL], "ex", "only this cluster's members repel each other");
    let tsc = spec.topology_spread_constraints.unwrap();
    assert_eq!(
        (tsc[0].topology_key.as_str(), tsc[0].when_unsatisfiable.as_str()),
        ("topology.kubernetes.io/zone", "ScheduleAnyway")
    );
    // A user's affinity is taken as given; nothing is added to it.
    let (c, d) = cluster(
        "size: 3\nversion: 3.5.1\npod:\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms: [{matchExpressions: [{key: disk, operator: In, values: [ssd]}]}]",
    );
    let spec = member_pod(&c, &d, &member(true, false), "op:1").spec.unwrap();
    assert!(spec.affinity.unwrap().pod_anti_affinity.is_none());
    assert!(spec.topology_spread_constraints.is_none());
}

#[test]
fn space_settings_become_flags_unless_etcd_env_sets_them() {
    let (c, d) = cluster("size: 3\nversion: 3.6.15");
    let cmd = etcd_command(&c, &d, &member(true, false));
    for f in ["--quota-backend-bytes=2147483648", "--auto-compaction-mode=periodic", "--auto-compaction-retention=1h"] {
        assert!(cmd.contains(&f.to_string()), "{f} missing from {cmd:?}");
    }
    let (c, d) = cluster(
        "size: 3\nversion: 3.6.15\npod:\n  etcdEnv: [{name: ETCD_QUOTA_BACKEND_BYTES, value: '4294967296'}, {name: ETCD_AUTO_COMPACTION_RETENTION, value: '2h'}]",
    );
    let cmd = etcd_command(&c, &d, &member(true, false));
    assert!(
        !cmd.iter().any(|a| a.starts_with("--quota-backend-bytes") || a.starts_with("--auto-compaction")),
        "{cmd:?}"
    );
}

#[test]
fn readiness_ignores_the_nospace_alarm() {
    let (c, d) = cluster("size: 3\nversion: 3.6.15");
    let mut m = member(true, false);
    m.version = Version::parse("3.6.15").unwrap();
    let p = member_pod(&c, &d, &m, "op:1");
    let probe = p.spec.unwrap().containers[0].readiness_probe.clone().unwrap();
    assert_eq!(probe.http_get.unwrap().path.as_deref(), Some("/health?exclude=NOSPACE"));
}

#[test]
fn services_select_the_cluster_and_the_peer_one_is_headless() {
    let (c, _) = cluster("size: 3\nversion: 3.5.1");
    let peer = peer_service(&c);
    assert_eq!(peer.metadata.name.as_deref(), Some("ex"));
    let s = peer.spec.unwrap();
    assert_eq!(s.cluster_ip.as_deref(), Some("None"));
    assert_eq!(s.publish_not_ready_addresses, Some(true));
    let client = client_service(&c);
    assert_eq!(client.metadata.name.as_deref(), Some("ex-client"));
    assert_eq!(client.spec.unwrap().ports.unwrap()[0].port, 2379);
}

/// etcd 3.5.0/3.5.1 do not exclude a NOSPACE alarm raised by several members from `/health`
/// (etcd#13467): their members read through etcdctl for readiness instead, so a full cluster
/// keeps serving reads and deletes through its client Service (found by hack/chaos.sh,
/// `--kinds quota-fill --seed 1`).
#[test]
fn members_of_etcd_with_the_broken_health_exclude_probe_readiness_with_a_read() {
    for (version, exec) in [
        ("3.5.0", true),
        ("3.5.1", true),
        ("3.5.34", false),
        ("3.4.23", false),
        ("3.4.16", false),
        ("3.6.15", false),
        // Before 3.4.16 etcd ignores `exclude` altogether (etcd#12880).
        ("3.4.15", true),
        ("3.4.3", true),
    ] {
        let (c, d) = cluster(&format!("size: 3\nversion: {version}"));
        let mut m = member(false, false);
        m.version = Version::parse(version).unwrap();
        let pod = member_pod(&c, &d, &m, "op:1");
        let probe = pod.spec.unwrap().containers[0].readiness_probe.clone().unwrap();
        assert_eq!(probe.exec.is_some(), exec, "{version}");
        assert_eq!(probe.http_get.is_none(), exec, "{version}");
        if exec {
            let cmd = probe.exec.unwrap().command.unwrap();
            assert_eq!(cmd[0], "/usr/local/bin/etcdctl");
            assert!(cmd.contains(&"get".to_string()), "a linearizable read: {cmd:?}");
        } else {
            assert_eq!(probe.http_get.unwrap().path.as_deref(), Some(HEALTH_PATH));
        }
    }
}

/// With authentication the read would be refused (and 3.5.0/3.5.1 are refused with it): a member
/// before 3.4.16 keeps `/health`.
#[test]
fn with_authentication_members_before_three_four_sixteen_keep_the_health_endpoint() {
    let (c, d) = cluster("size: 3\nversion: 3.4.15\nauth: {enabled: true}");
    let mut m = member(false, false);
    m.version = Version::parse("3.4.15").unwrap();
    let probe = member_pod(&c, &d, &m, "op:1").spec.unwrap().containers[0].readiness_probe.clone().unwrap();
    assert_eq!(probe.http_get.unwrap().path.as_deref(), Some(HEALTH_PATH));
}

/// etcd 3.7 has no `--experimental-*` flags: members of 3.6 and later get `etcdEnv`'s
/// experimental settings under their 3.6 names (`etcd_flags`), members before 3.6 as written.
#[test]
fn members_of_three_six_and_later_get_experimental_settings_under_their_new_names() {
    let spec = "size: 3\nversion: 3.6.15\npod: {etcdEnv: [{name: ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK, value: 'true'}, {name: ETCD_SNAPSHOT_COUNT, value: '5000'}]}";
    let (c, d) = cluster(spec);
    let env_of = |version: &str| {
        let mut m = member(false, false);
        m.version = Version::parse(version).unwrap();
        let env = member_pod(&c, &d, &m, "op:1").spec.unwrap().containers[0].env.clone().unwrap();
        env.into_iter().map(|e| format!("{}={}", e.name, e.value.unwrap_or_default())).collect::<Vec<_>>()
    };
    assert_eq!(env_of("3.5.34"), ["ETCD_EXPERIMENTAL_INITIAL_CORRUPT_CHECK=true", "ETCD_SNAPSHOT_COUNT=5000"]);
    for v in ["3.6.15", "3.7.2"] {
        assert_eq!(env_of(v), ["ETCD_SNAPSHOT_COUNT=5000", "ETCD_FEATURE_GATES=InitialCorruptCheck=true"], "{v}");
    }
}

/// Every kind of member pod the operator makes, under `spec`: emptyDir and PVC, first start and
/// restart on the volume, with the DNS wait, restored from a backup, seeded from a survivor.
fn every_kind_of_member_pod(yaml_spec: &str, root_data: bool) -> Vec<(String, Pod)> {
    let (c, d) = cluster(yaml_spec);
    let mut pods = vec![];
    for pvc in [false, true] {
        let mut m = member(true, pvc);
        m.root_data = root_data;
        pods.push((format!("pvc={pvc}"), member_pod(&c, &d, &m, "op:1")));
        m.restart = true;
        pods.push((format!("pvc={pvc}, restart"), member_pod(&c, &d, &m, "op:1")));
        m.restart = false;
        m.seed = Some(Seed::Member {
            pod: "ex-a".into(),
            client_url: "http://10.0.0.5:2379".into(),
            cluster_id: 0xabc,
            member_id: 0x12,
        });
        pods.push((format!("pvc={pvc}, seeded"), member_pod(&c, &d, &m, "op:1")));
    }
    let restore = "\nrestore: {backupStorageType: S3, s3: {path: b/k, awsSecret: aws}, sha256: \
        abababababababababababababababababababababababababababababababab}";
    let (c, d) = cluster(&format!("{yaml_spec}{restore}"));
    let mut m = member(false, d.pod.persistent_volume_claim_spec.is_some());
    m.root_data = root_data;
    pods.push(("restored".into(), member_pod(&c, &d, &m, "op:1")));
    pods
}

const PVC_SPEC: &str = "size: 3\nversion: 3.5.1\npod:\n  persistentVolumeClaimSpec:\n    accessModes: [ReadWriteOnce]\n    resources: {requests: {storage: 1Gi}}";
const TLS: &str = "\nTLS: {static: {member: {peerSecret: p, serverSecret: s}, operatorSecret: o}}";

/// Without a securityContext, every member pod passes the Pod Security Standard `restricted`:
/// every container, init containers included (the data check, the restore steps in the
/// operator's and in etcd's image, the DNS wait), runs as the non-root user with no privilege
/// escalation, no capability, RuntimeDefault seccomp and a read-only root filesystem.
#[test]
fn without_a_security_context_every_member_pod_passes_restricted() {
    for spec in ["size: 3\nversion: 3.5.1", PVC_SPEC, &format!("{PVC_SPEC}{TLS}")] {
        for (kind, pod) in every_kind_of_member_pod(spec, false) {
            let s = pod.spec.clone().unwrap();
            let v = crate::pod_security::restricted::violations(&s);
            assert!(v.is_empty(), "{kind} ({spec}): {v:?}");
            let sc = s.security_context.clone().unwrap();
            assert_eq!((sc.run_as_user, sc.fs_group), (Some(65532), Some(65532)), "{kind}");
            let containers = s.init_containers.iter().flatten().chain(s.containers.iter());
            let mut names = vec![];
            for c in containers {
                let csc = c.security_context.clone().unwrap();
                assert_eq!(csc.read_only_root_filesystem, Some(true), "{kind}: {}", c.name);
                assert_ne!(csc.run_as_user, Some(0), "{kind}: {}", c.name);
                names.push(c.name.clone());
            }
            if kind.contains("pvc=true") {
                assert!(names.contains(&crate::pod::member_volume::CHECK_CONTAINER.to_string()), "{kind}: {names:?}");
            }
            if kind.contains("seeded") || kind == "restored" {
                assert!(names.contains(&"restore-snapshot".to_string()), "{kind}: {names:?}");
            }
            let hash = &pod.metadata.annotations.as_ref().unwrap()[naming::POD_SPEC_HASH_ANNOTATION];
            let (_, d) = cluster(spec);
            assert_eq!(*hash, d.pod_hash(), "{kind}");
        }
    }
}

/// A member whose volume is marked as holding root's data gets the pod of earlier versions:
/// no pod securityContext (etcd runs as its image's user, root), the data containers as root,
/// every capability still dropped; and the hash of earlier versions, so it is not rolled.
/// `restricted` refuses it (said here, so that nobody believes otherwise).
#[test]
fn a_member_on_roots_data_runs_as_root_as_before() {
    for (kind, pod) in every_kind_of_member_pod(PVC_SPEC, true) {
        let s = pod.spec.clone().unwrap();
        assert_eq!(s.security_context, None, "{kind}");
        for c in s.init_containers.iter().flatten().filter(|c| c.name != "wait-dns") {
            assert_eq!(c.security_context.as_ref().unwrap().run_as_user, Some(0), "{kind}: {}", c.name);
        }
        let etcd = s.containers[0].security_context.clone().unwrap();
        assert_eq!(etcd.run_as_user, None);
        assert_eq!(etcd.capabilities.unwrap().drop.unwrap(), ["ALL"]);
        assert_eq!(etcd.allow_privilege_escalation, Some(false));
        let v = crate::pod_security::restricted::violations(&s);
        assert!(v.iter().any(|v| v.starts_with("Running as Non-root")), "{kind}: {v:?}");
        let (_, d) = cluster(PVC_SPEC);
        assert_eq!(pod.metadata.annotations.as_ref().unwrap()[naming::POD_SPEC_HASH_ANNOTATION], d.pod_hash_for(true));
    }
}

/// A securityContext of the user's is the pod's, as given (CoreOS); the containers keep the
/// shape of earlier versions (the data check and restore steps as the pod's user when it names
/// one), and the root-data mark changes nothing. One that follows `restricted` passes it.
#[test]
fn a_users_security_context_is_the_pods_as_given() {
    let given = "\n  securityContext: {runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000, fsGroup: 1000, seccompProfile: {type: RuntimeDefault}}";
    let spec = format!("{PVC_SPEC}{given}");
    let (_, d) = cluster(&spec);
    for root_data in [false, true] {
        for (kind, pod) in every_kind_of_member_pod(&spec, root_data) {
            let s = pod.spec.clone().unwrap();
            assert_eq!(s.security_context.as_ref(), d.pod.security_context.as_ref(), "{kind}");
            for c in s.init_containers.iter().flatten().filter(|c| c.name != "wait-dns") {
                assert_eq!(c.security_context.as_ref().unwrap().run_as_user, None, "{kind}: {}", c.name);
            }
            let v = crate::pod_security::restricted::violations(&s);
            assert!(v.is_empty(), "{kind}: {v:?}");
        }
    }
    // Only a user: the containers still drop everything; etcd's root filesystem stays writable
    // (as before: the user chose the settings).
    let (c, d) = cluster(&format!("{PVC_SPEC}\n  securityContext: {{runAsUser: 0}}"));
    let s = member_pod(&c, &d, &member(true, true), "op:1").spec.unwrap();
    assert_eq!(s.security_context.unwrap().run_as_user, Some(0));
    assert_eq!(s.containers[0].security_context.clone().unwrap().read_only_root_filesystem, None);
}

/// A securityContext of the user's with a non-root user and no `fsGroup`: the Secret files
/// belong to root, so `0440` would keep etcd from its certificates; they are mounted `0444`.
/// With `fsGroup` (or as root) they stay `0440`. And `runAsNonRoot: true` without a user: no
/// container is made to run as root (the kubelet would refuse it): the data steps run as the
/// restricted non-root user.
#[test]
fn secret_files_are_readable_by_the_user_a_users_security_context_names() {
    let modes = |sc: &str| -> Vec<i32> {
        let (c, d) = cluster(&format!("{PVC_SPEC}\n  securityContext: {sc}{TLS}"));
        let s = member_pod(&c, &d, &member(true, true), "op:1").spec.unwrap();
        s.volumes.iter().flatten().filter_map(|v| v.secret.as_ref()?.default_mode).collect()
    };
    assert_eq!(modes("{runAsUser: 1000}"), [0o444, 0o444]);
    assert_eq!(modes("{runAsNonRoot: true}"), [0o444, 0o444]);
    assert_eq!(modes("{runAsUser: 1000, fsGroup: 1000}"), [0o440, 0o440]);
    assert_eq!(modes("{runAsUser: 0}"), [0o440, 0o440]);
    let spec = format!("{PVC_SPEC}\n  securityContext: {{runAsNonRoot: true}}{TLS}");
    for (kind, pod) in every_kind_of_member_pod(&spec, false) {
        let s = pod.spec.unwrap();
        for c in s.init_containers.iter().flatten().chain(&s.containers) {
            let user = c.security_context.as_ref().and_then(|sc| sc.run_as_user);
            assert_ne!(user, Some(0), "{kind}: {} runs as root under runAsNonRoot", c.name);
        }
        let check = s.init_containers.iter().flatten().find(|c| c.name == crate::pod::member_volume::CHECK_CONTAINER);
        if let Some(check) = check {
            assert_eq!(
                check.security_context.as_ref().unwrap().run_as_user,
                Some(crate::pod_security::NONROOT),
                "{kind}"
            );
        }
        // A seed's Secrets (the operator's client certificate) are readable too (a restore's
        // storage credentials keep Kubernetes' default mode).
        for v in s.volumes.iter().flatten().filter_map(|v| v.secret.as_ref()).filter(|v| v.default_mode.is_some()) {
            assert_eq!(v.default_mode, Some(0o444), "{kind}: {:?}", v.secret_name);
        }
    }
}

//! Which profile a member gets, and what the pod-spec hash makes of it.

use super::*;
use crate::validation::{Desired, validate};
use etcd_operator_api::EtcdClusterSpec;

fn desired(yaml_spec: &str) -> Desired {
    let spec: EtcdClusterSpec = serde_yaml::from_str(yaml_spec).unwrap();
    validate("ex", &spec).unwrap()
}

/// The hash every pod carried before the restricted default existed (operator versions up to
/// this one): `sha256(json(repository, spec.pod))`, first 8 bytes.
fn hash_before_the_default(d: &Desired) -> String {
    use sha2::Digest;
    let json = serde_json::to_vec(&(&d.repository, &d.pod)).unwrap();
    hex::encode(&sha2::Sha256::digest(json)[..8])
}

#[test]
fn without_a_security_context_members_are_restricted_unless_their_volume_holds_roots_data() {
    let d = desired("size: 3\nversion: 3.5.1");
    assert_eq!(profile(d.pod.security_context.as_ref(), false), Profile::Restricted);
    assert_eq!(profile(d.pod.security_context.as_ref(), true), Profile::Root);
    let pod = Profile::Restricted.pod_context().unwrap();
    assert_eq!(pod.run_as_non_root, Some(true));
    assert_eq!((pod.run_as_user, pod.run_as_group, pod.fs_group), (Some(NONROOT), Some(NONROOT), Some(NONROOT)));
    assert_eq!(pod.fs_group_change_policy.as_deref(), Some("OnRootMismatch"));
    assert_eq!(pod.seccomp_profile.unwrap().type_, "RuntimeDefault");
    assert_eq!(Profile::Restricted.data_writer(), None, "the data containers run as the pod's user");
    // Root: the pod of earlier versions.
    assert_eq!(Profile::Root.pod_context(), None);
    assert_eq!(Profile::Root.data_writer(), Some(0));
    assert_eq!(Profile::Root.container_context().read_only_root_filesystem, None);
}

#[test]
fn a_users_security_context_is_used_as_given_even_on_roots_data() {
    let d = desired("size: 3\nversion: 3.5.1\npod:\n  securityContext: {runAsUser: 1000, fsGroup: 2000}");
    let users = d.pod.security_context.as_ref().unwrap();
    for root_data in [false, true] {
        assert_eq!(profile(d.pod.security_context.as_ref(), root_data), Profile::Users(users));
        assert_eq!(profile(d.pod.security_context.as_ref(), root_data).pod_context().as_ref(), Some(users));
    }
    assert_eq!(Profile::Users(users).data_writer(), None, "its user writes the data");
    let only_fs_group = k8s_openapi::api::core::v1::PodSecurityContext { fs_group: Some(2000), ..Default::default() };
    assert_eq!(Profile::Users(&only_fs_group).data_writer(), Some(0), "no user named: etcd's image user, root");
    // No user named but non-root demanded: the kubelet refuses root containers; the data steps
    // run as the restricted default's user.
    let non_root = k8s_openapi::api::core::v1::PodSecurityContext { run_as_non_root: Some(true), ..Default::default() };
    assert_eq!(Profile::Users(&non_root).data_writer(), Some(NONROOT));
    // Secret files: 0440 where etcd reads them by group or as root, 0444 for a non-root user
    // without fsGroup (the files then belong to root).
    let user = |u: Option<i64>, fs: Option<i64>, nr: Option<bool>| k8s_openapi::api::core::v1::PodSecurityContext {
        run_as_user: u,
        fs_group: fs,
        run_as_non_root: nr,
        ..Default::default()
    };
    for (sc, mode) in [
        (user(Some(1000), None, None), 0o444),
        (user(None, None, Some(true)), 0o444),
        (user(Some(1000), Some(1000), None), 0o440),
        (user(Some(0), None, None), 0o440),
        (user(None, None, None), 0o440),
    ] {
        assert_eq!(Profile::Users(&sc).secret_mode(), mode, "{sc:?}");
    }
    assert_eq!((Profile::Restricted.secret_mode(), Profile::Root.secret_mode()), (0o440, 0o440));
}

/// An operator upgrade rolls members of specs without a securityContext (their pods carry the
/// hash of before), and nothing else: members kept as root for their data, and specs with a
/// securityContext, hash exactly as before.
#[test]
fn only_the_default_profile_changes_the_pod_spec_hash() {
    let plain = desired("size: 3\nversion: 3.5.1");
    assert_ne!(plain.pod_hash(), hash_before_the_default(&plain), "members made before the default roll");
    assert_eq!(plain.pod_hash_for(true), hash_before_the_default(&plain), "root's data: not rolled");
    let users = desired("size: 3\nversion: 3.5.1\npod:\n  securityContext: {runAsUser: 1000}");
    assert_eq!(users.pod_hash(), hash_before_the_default(&users));
    assert_eq!(users.pod_hash_for(true), users.pod_hash());
}

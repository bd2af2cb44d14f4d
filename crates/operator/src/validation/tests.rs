//! Tests of spec validation: defaults, bounds, reserved names, maintenance, legacy rules.

use super::*;
use k8s_openapi::api::core::v1::EnvVar;

fn spec(size: i32, version: &str) -> EtcdClusterSpec {
    EtcdClusterSpec { size, version: version.into(), ..Default::default() }
}

#[test]
fn seeds_example_is_valid() {
    let d = validate("example-etcd-cluster", &spec(3, "3.5.1")).unwrap();
    assert_eq!(d.size, 3);
    assert_eq!(d.image(), "quay.io/coreos/etcd:v3.5.1");
}

#[test]
fn defaults_fill_in() {
    let d = validate("a", &spec(1, "")).unwrap();
    assert_eq!(d.version.to_string(), DEFAULT_VERSION);
    assert_eq!(d.repository, DEFAULT_REPOSITORY);
}

#[test]
fn coreos_default_version_3_2_13_is_refused_naming_the_supported_range() {
    let e = validate("a", &spec(3, "3.2.13")).unwrap_err();
    assert_eq!(e.len(), 1);
    assert!(e[0].contains("3.2.13") && e[0].contains("3.4.x to 3.7.x"), "{e:?}");
}

#[test]
fn size_below_one_and_garbage_version_are_both_reported() {
    let e = validate("a", &spec(0, "latest")).unwrap_err();
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("spec.size 0"));
    assert!(e[1].contains("MAJOR.MINOR.PATCH"));
}

#[test]
fn too_long_names_are_refused() {
    let e = validate(&"a".repeat(57), &spec(3, "3.5.1")).unwrap_err();
    assert!(e[0].contains("57 characters"), "{e:?}");
    assert!(validate(&"a".repeat(56), &spec(3, "3.5.1")).is_ok());
}

#[test]
fn names_that_cannot_name_a_service_are_refused() {
    for bad in ["my.cluster", "Ex", "ex-", "9ex", "e_x", ""] {
        assert!(validate(bad, &spec(3, "3.5.1")).is_err(), "{bad:?}");
    }
    assert!(validate("ex-1", &spec(3, "3.5.1")).is_ok());
}

#[test]
fn pod_fields_are_bounded() {
    let mut s = spec(3, "3.5.1");
    s.pod = Some(PodPolicy {
        dns_timeout_in_second: -1,
        labels: [("team/x y".to_string(), "v".to_string()), ("ok".to_string(), "bad value!".to_string())].into(),
        annotations: [("/x".to_string(), String::new())].into(),
        etcd_env: vec![
            EnvVar { name: "ETCD_FORCE_NEW_CLUSTER".into(), value: Some("true".into()), ..Default::default() },
            EnvVar { name: "ETCD_DISCOVERY_SRV".into(), ..Default::default() },
            EnvVar { name: "ETCD_QUOTA_BACKEND_BYTES".into(), value: Some("1".into()), ..Default::default() },
        ],
        cluster_domain: "cluster..local".into(),
        ..Default::default()
    });
    let e = validate("a", &s).unwrap_err().join("\n");
    for want in [
        "DNSTimeoutInSecond -1",
        "\"team/x y\"",
        "bad value!",
        "\"/x\"",
        "ETCD_FORCE_NEW_CLUSTER is owned by the operator",
        "ETCD_DISCOVERY_SRV",
        "ClusterDomain",
    ] {
        assert!(e.contains(want), "missing {want:?} in:\n{e}");
    }
    assert!(!e.contains("ETCD_QUOTA_BACKEND_BYTES"), "users may tune etcd: {e}");
}

/// A spec an earlier version accepted still yields a `Desired` under the earlier rules (the
/// cluster keeps healing; SpecValid says what the current rules refuse), without the `etcdEnv`
/// entries the current rules refuse: no pod is made with them (but `ETCD_WAL_DIR`, where the
/// members' logs are).
#[test]
fn legacy_rules_accept_what_earlier_versions_did_without_what_is_refused_now() {
    let env = |name: &str, value: &str| EnvVar { name: name.into(), value: Some(value.into()), ..Default::default() };
    let mut s = spec(3, "3.5.1");
    s.pod = Some(PodPolicy {
        dns_timeout_in_second: -1,
        etcd_env: vec![
            env("ETCD_WAL_DIR", "/wal"),
            env("ETCD_FORCE_NEW_CLUSTER", "true"),
            env("ETCD_STRICT_RECONFIG_CHECK", "false"),
            env("ETCD_DISCOVERY_SRV", "example.com"),
            env("ETCD_SNAPSHOT_COUNT", "5000"),
        ],
        ..Default::default()
    });
    assert!(validate("a", &s).is_err());
    let d = validate_legacy("a", &s).unwrap();
    let names: Vec<&str> = d.pod.etcd_env.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        names,
        ["ETCD_WAL_DIR", "ETCD_SNAPSHOT_COUNT"],
        "today's rules, and the WAL directory: the logs are there"
    );
    assert_eq!(d.pod.dns_timeout_in_second, -1, "what only the newer bounds refuse is kept");
    // What earlier versions refused stays refused.
    s.size = 0;
    assert!(validate_legacy("a", &s).is_err());
}

#[test]
fn reserved_labels_and_env_are_refused() {
    let mut s = spec(3, "3.5.1");
    s.pod = Some(PodPolicy {
        labels: [("app".to_string(), "x".to_string())].into(),
        etcd_env: vec![EnvVar { name: "ETCD_INITIAL_CLUSTER".into(), ..Default::default() }],
        ..Default::default()
    });
    let e = validate("a", &s).unwrap_err();
    assert_eq!(e.len(), 2, "{e:?}");
}

#[test]
fn maintenance_defaults_become_etcd_flags() {
    let d = validate("ex", &spec(3, "3.6.15")).unwrap();
    let m = &d.maintenance;
    assert_eq!(m.quota_flag, Some(2 << 30), "etcd's own default, said explicitly");
    assert_eq!(m.compaction_flags, Some((CompactionMode::Periodic, "1h".to_string())));
    assert_eq!(m.defrag, Some(DefragRule { min_free_percent: 50, min_free_bytes: 64 << 20 }));
    assert!(m.specified.is_none());
}

#[test]
fn maintenance_is_checked_and_etcd_env_for_the_same_setting_is_refused_with_it() {
    use etcd_operator_api::cluster::{DefragmentationPolicy, MaintenancePolicy};
    let with = |mp: MaintenancePolicy, env: &[(&str, &str)]| {
        let mut s = spec(3, "3.6.15");
        s.maintenance = Some(mp);
        let etcd_env = env
            .iter()
            .map(|(n, v)| k8s_openapi::api::core::v1::EnvVar {
                name: n.to_string(),
                value: Some(v.to_string()),
                ..Default::default()
            })
            .collect();
        s.pod = Some(PodPolicy { etcd_env, ..Default::default() });
        validate("ex", &s)
    };
    let errs = with(
        MaintenancePolicy {
            quota_backend_bytes: Some(1024),
            auto_compaction_mode: "hourly".into(),
            auto_compaction_retention: "an hour".into(),
            defragmentation: Some(DefragmentationPolicy {
                mode: "Sometimes".into(),
                min_free_percent: Some(0),
                min_free_bytes: Some(-1),
            }),
        },
        &[],
    )
    .unwrap_err()
    .join("\n");
    for what in ["quotaBackendBytes 1024", "hourly", "an hour", "Sometimes", "minFreePercent 0", "minFreeBytes -1"] {
        assert!(errs.contains(what), "{what} not reported in:\n{errs}");
    }
    let retention = |mode: &str, r: &str| {
        with(
            MaintenancePolicy {
                auto_compaction_mode: mode.into(),
                auto_compaction_retention: r.into(),
                ..Default::default()
            },
            &[],
        )
        .is_ok()
    };
    assert!(retention("periodic", "30m") && retention("periodic", "1h30m") && retention("periodic", "2"));
    assert!(retention("revision", "10000") && retention("", "0"));
    assert!(!retention("revision", "1h") && !retention("periodic", "m") && !retention("periodic", "1d"));
    // Set twice: refused, naming both.
    let errs = with(
        MaintenancePolicy { quota_backend_bytes: Some(16 << 20), ..Default::default() },
        &[("ETCD_QUOTA_BACKEND_BYTES", "4294967296")],
    )
    .unwrap_err()
    .join("\n");
    assert!(errs.contains("quotaBackendBytes") && errs.contains("ETCD_QUOTA_BACKEND_BYTES"), "{errs}");
    // Set once through etcdEnv (the CoreOS way): no flag (etcd exits when both are given),
    // and the planner still knows the quota.
    let d = with(MaintenancePolicy::default(), &[("ETCD_QUOTA_BACKEND_BYTES", "4294967296")]).unwrap();
    assert_eq!((d.maintenance.quota_flag, d.maintenance.quota_bytes), (None, 4 << 30));
    let d = with(
        MaintenancePolicy::default(),
        &[("ETCD_AUTO_COMPACTION_MODE", "revision"), ("ETCD_AUTO_COMPACTION_RETENTION", "700")],
    )
    .unwrap();
    assert_eq!((d.maintenance.compaction_flags.clone(), d.maintenance.keep_revisions), (None, Some(700)));
}

#[test]
fn the_pod_hash_changes_with_maintenance_only_once_it_is_set() {
    let plain = validate("ex", &spec(3, "3.6.15")).unwrap();
    let mut s = spec(3, "3.6.15");
    s.maintenance = Some(Default::default());
    let empty_block = validate("ex", &s).unwrap();
    s.maintenance = Some(etcd_operator_api::cluster::MaintenancePolicy {
        quota_backend_bytes: Some(4 << 30),
        ..Default::default()
    });
    let quota = validate("ex", &s).unwrap();
    assert_ne!(plain.pod_hash(), quota.pod_hash(), "a new quota is rolled out");
    assert_ne!(empty_block.pod_hash(), quota.pod_hash());
    // A cluster without the block keeps the hash it had before the block existed, so adding
    // the block to the operator rolled nothing (the restricted default does roll: see
    // `pod_security::tests`; a member kept as root for its data hashes as before).
    let before = {
        use sha2::Digest;
        let json = serde_json::to_vec(&(&plain.repository, &plain.pod)).unwrap();
        hex::encode(&sha2::Sha256::digest(json)[..8])
    };
    assert_eq!(plain.pod_hash_for(true), before);
}

#[test]
fn etcd_env_is_bounded_like_the_crd_schema() {
    let env = |n: usize, len: usize| {
        let mut s = spec(3, "3.5.1");
        s.pod = Some(PodPolicy {
            etcd_env: (0..n)
                .map(|i| EnvVar { name: format!("X{i}{}", "Y".repeat(len)), ..Default::default() })
                .collect(),
            ..Default::default()
        });
        validate("a", &s)
    };
    let max = etcd_operator_api::validation_rules::MAX_ETCD_ENV as usize;
    assert!(env(max, 1).is_ok());
    let e = env(max + 1, 1).unwrap_err();
    assert!(e[0].contains(&format!("{} entries; at most {max}", max + 1)), "{e:?}");
    let e = env(1, 300).unwrap_err();
    assert!(e[0].contains("too long (at most 253)"), "{e:?}");
}

/// etcd logs the value of every `ETCD_*` variable at start-up (known ones as "recognized and
/// used environment variable", unknown ones as "unrecognized environment variable" with the
/// whole `NAME=value`): a Secret there would be in the pod's log.
#[test]
fn secrets_are_refused_only_where_etcd_would_log_them() {
    use k8s_openapi::api::core::v1::{ConfigMapKeySelector, EnvVarSource, ObjectFieldSelector, SecretKeySelector};
    let secret = |name: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector { name: "creds".into(), key: "k".into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let with_env = |env: Vec<EnvVar>| {
        let mut s = spec(3, "3.6.15");
        s.pod = Some(PodPolicy { etcd_env: env, ..Default::default() });
        s
    };
    for name in ["ETCD_QUOTA_BACKEND_BYTES", "ETCD_LOG_LEVEL", "ETCD_NOT_A_FLAG"] {
        let e = validate("a", &with_env(vec![secret(name)])).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains(name) && e[0].contains("\"creds\"") && e[0].contains("start-up log"), "{e:?}");
        // A cluster formed under an earlier version keeps healing and is told; no pod gets it.
        assert!(validate_legacy("a", &with_env(vec![secret(name)])).unwrap().pod.etcd_env.is_empty());
    }
    // etcd neither reads nor logs other variables; values from ConfigMaps or fields are no secret.
    let config_map = EnvVar {
        name: "ETCD_LOG_LEVEL".into(),
        value_from: Some(EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector { name: "cm".into(), key: "k".into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let field = EnvVar {
        name: "ETCD_HEARTBEAT_INTERVAL".into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), ..Default::default() }),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert!(validate("a", &with_env(vec![secret("MY_TOKEN"), config_map, field])).is_ok());
}

#[test]
fn coreos_static_tls_is_accepted_and_half_a_client_pair_refused() {
    use etcd_operator_api::cluster::{MemberSecret, StaticTls, TlsPolicy};
    let tls = |server: &str, operator: &str| TlsPolicy {
        r#static: Some(StaticTls {
            member: Some(MemberSecret { peer_secret: "p".into(), server_secret: server.into() }),
            operator_secret: operator.into(),
        }),
        ..Default::default()
    };
    let s = EtcdClusterSpec { tls: Some(tls("s", "o")), ..spec(3, "3.5.1") };
    let d = validate("ex", &s).unwrap();
    assert_eq!((d.tls.peer_scheme(), d.tls.client_scheme()), ("https", "https"));
    assert!(validate("ex", &spec(3, "3.5.1")).unwrap().tls.is_off());
    let s = EtcdClusterSpec { tls: Some(tls("s", "")), ..spec(3, "3.5.1") };
    assert!(validate("ex", &s).unwrap_err().iter().any(|e| e.contains("operatorSecret is not")));
}

#[test]
fn auto_tls_names_the_operators_secrets_and_is_never_beside_static() {
    use etcd_operator_api::cluster::{AutoTls, MemberSecret, StaticTls, TlsPolicy};
    let auto = |validity: &str| TlsPolicy {
        auto: Some(AutoTls { validity: validity.into(), ..Default::default() }),
        ..Default::default()
    };
    let s = EtcdClusterSpec { tls: Some(auto("")), ..spec(3, "3.5.1") };
    let d = validate("ex", &s).unwrap();
    assert_eq!((d.tls.peer_scheme(), d.tls.client_scheme()), ("https", "https"));
    assert_eq!(d.tls.peer_secret.as_deref(), Some("ex-tls-peer"));
    assert_eq!(d.tls_auto, Some(crate::tls::auto::Settings::default()));
    let s = EtcdClusterSpec { tls: Some(auto("2d")), ..spec(3, "3.5.1") };
    assert!(validate("ex", &s).unwrap_err()[0].contains("spec.TLS.auto.validity \"2d\" is not a duration"));
    let both = TlsPolicy {
        r#static: Some(StaticTls {
            member: Some(MemberSecret { peer_secret: "p".into(), server_secret: "s".into() }),
            operator_secret: "o".into(),
        }),
        auto: Some(AutoTls::default()),
        cert_manager: None,
    };
    let s = EtcdClusterSpec { tls: Some(both.clone()), ..spec(3, "3.5.1") };
    assert_eq!(
        validate("ex", &s).unwrap_err(),
        [
            "spec.TLS: set one of static (your certificates), auto (the operator's) or certManager (cert-manager's), not static and auto"
        ]
    );
    let cm = etcd_operator_api::cluster::CertManagerTls {
        issuer_ref: etcd_operator_api::cluster::IssuerRef { name: "ca".into(), ..Default::default() },
        ..Default::default()
    };
    let auto_and_cm = TlsPolicy { r#static: None, cert_manager: Some(cm.clone()), ..both };
    let s = EtcdClusterSpec { tls: Some(auto_and_cm), ..spec(3, "3.5.1") };
    assert!(validate("ex", &s).unwrap_err()[0].ends_with("not auto and certManager"));
    // certManager alone: the operator's Secrets, auto's settings from the request.
    let s =
        EtcdClusterSpec { tls: Some(TlsPolicy { cert_manager: Some(cm), ..Default::default() }), ..spec(3, "3.5.1") };
    let d = validate("ex", &s).unwrap();
    assert_eq!(d.tls.peer_secret.as_deref(), Some("ex-tls-peer"));
    assert_eq!(d.tls_auto.map(|s| s.validity), Some(crate::tls::cert_manager::DEFAULT_DURATION_SECS));
    assert_eq!(d.tls_cert_manager.map(|r| r.issuer.name), Some("ca".to_string()));
}

/// The CA bundle members load is part of the pod-spec hash (a new one restarts them); a
/// cluster without auto TLS keeps the hash it had.
#[test]
fn the_trust_bundle_is_part_of_the_pod_hash_only_with_auto_tls() {
    let mut d = validate("ex", &spec(3, "3.5.1")).unwrap();
    let plain = d.pod_hash();
    assert_eq!(plain, validate("ex", &spec(3, "3.5.1")).unwrap().pod_hash());
    d.tls_trust = Some("aaaa".into());
    let a = d.pod_hash();
    d.tls_trust = Some("bbbb".into());
    assert!(a != plain && a != d.pod_hash());
}

#[test]
fn node_loss_defaults_to_a_minute_for_members_without_a_volume_and_waiting_for_the_others() {
    let d = validate("a", &spec(3, "")).unwrap();
    assert_eq!(d.recovery.node_loss, NodeLossSettings { after_secs: 60, volume_after_secs: None });
    let mut s = spec(3, "");
    s.recovery = Some(etcd_operator_api::cluster::RecoveryPolicy {
        node_loss: Some(etcd_operator_api::cluster::NodeLossPolicy {
            volume_members: "Replace".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let d = validate("a", &s).unwrap();
    assert_eq!(d.recovery.node_loss, NodeLossSettings { after_secs: 60, volume_after_secs: Some(600) });
}

#[test]
fn node_loss_settings_out_of_range_or_unknown_are_refused() {
    let with = |n: etcd_operator_api::cluster::NodeLossPolicy| {
        let mut s = spec(3, "");
        s.recovery = Some(etcd_operator_api::cluster::RecoveryPolicy { node_loss: Some(n), ..Default::default() });
        validate("a", &s)
    };
    use etcd_operator_api::cluster::NodeLossPolicy as N;
    let e = with(N { after_seconds: Some(-1), ..Default::default() }).unwrap_err();
    assert!(e[0].contains("nodeLoss.afterSeconds -1"), "{e:?}");
    let e = with(N { volume_members: "Delete".into(), ..Default::default() }).unwrap_err();
    assert!(e[0].contains("\"Delete\" is not one of Wait, Replace"), "{e:?}");
    // A time for volume members that would never be used is a mistake worth saying.
    let e = with(N { volume_after_seconds: Some(30), ..Default::default() }).unwrap_err();
    assert!(e[0].contains("only with volumeMembers: Replace"), "{e:?}");
    let e = with(N { volume_members: "Replace".into(), volume_after_seconds: Some(604_801), ..Default::default() })
        .unwrap_err();
    assert!(e[0].contains("volumeAfterSeconds 604801"), "{e:?}");
    let d = with(N { volume_members: "Replace".into(), volume_after_seconds: Some(0), ..Default::default() }).unwrap();
    assert_eq!(d.recovery.node_loss.volume_after_secs, Some(0));
}

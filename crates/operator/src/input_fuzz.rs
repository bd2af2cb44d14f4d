//! Property tests over arbitrary input: JSON shaped like the three resources (their real field
//! names, with values of any type and size, nested at random) goes through deserialisation and
//! everything the operator computes from a spec (validation, the backup and restore plans, the
//! backup due time, the member pod and Services). None of it may panic; a spec that parses is
//! either refused with reasons or yields objects Kubernetes can accept (names within 63).
//! `PROPTEST_CASES=N` as in `planner::proptests`.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Map, Value, json};

const KEYS: &[&str] = &[
    "size",
    "version",
    "repository",
    "paused",
    "pod",
    "TLS",
    "restore",
    "recovery",
    "quorumLoss",
    "afterSeconds",
    "backup",
    "labels",
    "annotations",
    "nodeSelector",
    "antiAffinity",
    "resources",
    "tolerations",
    "etcdEnv",
    "persistentVolumeClaimSpec",
    "busyboxImage",
    "securityContext",
    "DNSTimeoutInSecond",
    "ClusterDomain",
    "name",
    "value",
    "etcdEndpoints",
    "clusterName",
    "storageType",
    "backupPolicy",
    "timeoutInSecond",
    "backupIntervalInSecond",
    "maxBackups",
    "s3",
    "abs",
    "gcs",
    "pvc",
    "path",
    "awsSecret",
    "endpoint",
    "forcePathStyle",
    "claimName",
    "backupStorageType",
    "etcdCluster",
    "spec",
    "sha256",
    "static",
    "member",
    "operatorSecret",
    "accessModes",
    "requests",
    "storage",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![Just(0i64), Just(-1), Just(1), Just(3), Just(7), Just(i64::MAX), Just(i64::MIN), Just(1 << 53)]
            .prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-zA-Z0-9./:_-]{0,80}".prop_map(Value::from),
        prop_oneof![
            Just("3.5.1"),
            Just("3.4.23"),
            Just("v3.6.0"),
            Just("S3"),
            Just("PVC"),
            Just("FromSurvivor"),
            Just("FromBackup"),
            Just("b/k"),
            Just("ETCD_FORCE_NEW_CLUSTER"),
        ]
        .prop_map(Value::from),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>())
            }),
        ]
    })
}

/// A resource-shaped object: a map of the real field names.
fn spec_value() -> impl Strategy<Value = Value> {
    proptest::collection::vec((proptest::sample::select(KEYS), json_value()), 0..10)
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Map<_, _>>()))
}

/// A valid EtcdCluster spec with a few fields overwritten by arbitrary values (so that both
/// sides of validation are reached).
fn cluster_value() -> impl Strategy<Value = Value> {
    let base = json!({"size": 3, "version": "3.5.1",
        "pod": {"persistentVolumeClaimSpec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}});
    (
        proptest::collection::vec((proptest::sample::select(KEYS), json_value()), 0..3),
        proptest::collection::vec((proptest::sample::select(KEYS), json_value()), 0..3),
        any::<bool>(),
    )
        .prop_map(move |(top, pod, keep_pvc)| {
            let mut v = base.clone();
            if !keep_pvc {
                v["pod"] = json!({});
            }
            for (k, x) in pod {
                v["pod"][k] = x;
            }
            for (k, x) in top {
                v[k] = x;
            }
            v
        })
}

/// EtcdRestore specs that often plan: a real storage block and cluster name, the rest generated.
fn restore_value() -> impl Strategy<Value = Value> {
    (name(), prop::option::of(cluster_value()), prop_oneof![Just("S3"), Just("PVC"), Just("NFS")]).prop_map(
        |(cluster, spec, kind)| {
            let mut ec = serde_json::json!({ "name": cluster });
            if let Some(s) = spec {
                ec["spec"] = s;
            }
            serde_json::json!({
                "backupStorageType": kind,
                "s3": { "path": "bucket/key", "awsSecret": "aws" },
                "pvc": { "claimName": "backups" },
                "etcdCluster": ec,
            })
        },
    )
}

/// The etcd version a backup says it was taken with: supported, unsupported, odd.
fn backup_version() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("3.5.1".to_string()),
        Just("3.4.23".to_string()),
        Just("3.6.6".to_string()),
        Just("3.2.13".to_string()),
        Just("".to_string()),
        "[0-9v.a-z-]{0,12}",
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-z][a-z0-9-]{0,70}", "[a-zA-Z0-9.-]{1,80}"]
}

fn runner() -> TestRunner {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    TestRunner::new_with_rng(
        Config { cases, failure_persistence: None, ..Config::default() },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    )
}

#[test]
fn arbitrary_specs_never_panic_and_valid_ones_build_acceptable_objects() {
    let mut runner = runner();
    let parsed = std::cell::Cell::new(0usize);
    let valid = std::cell::Cell::new(0usize);
    let planned_restores = std::cell::Cell::new(0usize);
    runner
        .run(
            &(
                name(),
                prop_oneof![spec_value(), cluster_value()],
                spec_value(),
                prop_oneof![spec_value(), restore_value()],
                backup_version(),
            ),
            |(name, cluster, backup, restore, backup_version)| {
                // EtcdCluster: validation, and for a valid spec the objects built from it.
                if let Ok(spec) = serde_json::from_value::<etcd_operator_api::EtcdClusterSpec>(cluster) {
                    parsed.set(parsed.get() + 1);
                    if let Ok(d) = crate::validation::validate(&name, &spec) {
                        valid.set(valid.get() + 1);
                        let mut c = etcd_operator_api::EtcdCluster::new(&name, spec);
                        c.metadata.namespace = Some("ns".into());
                        c.metadata.uid = Some("uid".into());
                        let m = crate::planner::NewMember::joining(
                            crate::naming::member_name(&name, "abcde"),
                            vec![],
                            d.version.clone(),
                            d.pod.persistent_volume_claim_spec.is_some(),
                        );
                        let pod = crate::pod_spec::member_pod(&c, &d, &m, "op:1");
                        let pod_name = pod.metadata.name.clone().unwrap_or_default();
                        prop_assert!(pod_name.len() <= 63, "pod name {pod_name:?}");
                        for svc in [crate::pod_spec::peer_service(&c), crate::pod_spec::client_service(&c)] {
                            let n = svc.metadata.name.unwrap_or_default();
                            prop_assert!(crate::validation::is_dns1035_label(&n), "Service name {n:?}");
                        }
                        let _ = d.pod_hash();
                    }
                }
                // EtcdBackup: plan and due time.
                if let Ok(spec) = serde_json::from_value::<etcd_operator_api::EtcdBackupSpec>(backup)
                    && let Ok(p) = crate::backup::backup_planner::check_spec(&spec, "ns")
                {
                    let st = etcd_operator_api::EtcdBackupStatus {
                        last_attempt_date: Some("2026-01-01T00:00:00Z".into()),
                        consecutive_failures: 3,
                        ..Default::default()
                    };
                    let _ = crate::backup::backup_planner::next_due(&p, &st, 1, k8s_openapi::jiff::Timestamp::now());
                }
                // EtcdRestore: plan, then the cluster it creates from a backup of any version:
                // whatever passes both must be a cluster the operator accepts (a restore never
                // creates an EtcdCluster that is then refused).
                if let Ok(spec) = serde_json::from_value::<etcd_operator_api::EtcdRestoreSpec>(restore)
                    && let Ok(p) = crate::backup::restore_planner::check_spec(&spec)
                {
                    planned_restores.set(planned_restores.get() + 1);
                    let meta = crate::backup::location::BackupMeta {
                        etcd_version: backup_version.clone(),
                        ..Default::default()
                    };
                    if let Ok(c) = crate::backup::restore_planner::cluster_spec(&spec, &meta, &"0".repeat(64)) {
                        let v = crate::validation::validate(&p.cluster, &c);
                        prop_assert!(
                            v.is_ok(),
                            "restore of a {backup_version} backup creates a refused cluster: {v:?}"
                        );
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    println!(
        "input properties: {} cases passed; EtcdCluster specs that parsed: {}, of them valid: {}; EtcdRestores planned: {}",
        runner.config().cases,
        parsed.get(),
        valid.get(),
        planned_restores.get()
    );
}

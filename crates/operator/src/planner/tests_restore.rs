//! A cluster created by a restore: how it bootstraps.

use super::*;

/// A restore from a PVC bootstraps one member from the claim (a ReadWriteOnce claim attaches to
/// one node); the others join it as learners. From an object store, all start from the backup.
#[test]
fn a_restore_from_a_pvc_bootstraps_one_member_and_grows() {
    let restored = |storage: &str, source: etcd_operator_api::backup::BackupSource, root_volume: bool| {
        let spec = etcd_operator_api::EtcdClusterSpec {
            size: 3,
            version: "3.5.1".into(),
            restore: Some(etcd_operator_api::backup::RestoreFrom {
                backup_storage_type: storage.into(),
                source,
                sha256: "ab".repeat(32),
            }),
            ..Default::default()
        };
        let mut desired = crate::validation::validate("ex", &spec);
        if let Ok(r) = desired.as_mut().map(|d| d.restore.as_mut().unwrap()) {
            r.root_volume = root_volume;
        }
        let o = Observed {
            name: "ex".into(),
            namespace: "ns".into(),
            desired,
            services_ready: true,
            new_member_suffix: "abcde".into(),
            ..Default::default()
        };
        let Step::Bootstrap(ms) = plan(&o) else { panic!("expected Bootstrap: {:?}", plan(&o)) };
        ms
    };
    let pvc = etcd_operator_api::backup::BackupSource {
        pvc: Some(etcd_operator_api::backup::PvcSource { claim_name: "backups".into(), path: "e.db".into() }),
        ..Default::default()
    };
    let ms = restored("PVC", pvc.clone(), false);
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0].initial_cluster.len(), 1, "a one-member cluster, grown afterwards");
    assert!(!ms[0].root_data, "the non-root user reads the claim");
    let s3 = etcd_operator_api::backup::BackupSource {
        s3: Some(etcd_operator_api::backup::S3Source {
            path: "b/k".into(),
            aws_secret: "aws".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(restored("S3", s3.clone(), false).len(), 3);
    // The claim is marked as root's (its verify pod was denied as non-root): the member that
    // reads it runs as root, its own volume marked likewise (`pod_spec::member_pvc`).
    let ms = restored("PVC", pvc, true);
    assert!(ms.len() == 1 && ms[0].root_data, "{ms:?}");
    assert!(restored("S3", s3, false).iter().all(|m| !m.root_data));
}

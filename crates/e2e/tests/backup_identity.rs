//! Backups carry the identity of the etcd cluster they were taken from (its cluster ID, in each
//! backup's sidecar): an EtcdCluster deleted and re-created under the same name is another etcd
//! cluster, and its EtcdBackup's retention never deletes the backups of the one before. On the
//! real local cluster with a real S3 server (moto).

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::wait_until;

/// The periodic backups (not their sidecars) stored under `prefix`.
fn backups(moto: &MotoServer, prefix: &str) -> Result<BTreeSet<String>> {
    Ok(moto.list_objects(BUCKET, prefix)?.into_iter().map(|o| o.key).filter(|k| !k.ends_with(".meta.json")).collect())
}

/// Delete and re-create the EtcdCluster an EtcdBackup (every 8 s, `maxBackups: 2`) names: the
/// backups of the first cluster all stay (they may be its last good ones), the new cluster is
/// backed up and its own backups are pruned to 2, the first backup of the new cluster says in a
/// Warning Event that backups of another cluster are kept, and status names the new cluster ID.
#[test]
fn a_re_created_cluster_never_costs_the_backups_of_the_one_before() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-backup-identity", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.5.1", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let first_id = cluster(ns, "ex")?["status"]["clusterId"].as_str().unwrap_or_default().to_string();
        write_keys(&client_endpoint(ns, "ex")?, "first", 10)?;
        let storage = storage_block(&moto, "identity/ex", "creds");
        let policy = "  backupPolicy: {backupIntervalInSecond: 8, maxBackups: 2, timeoutInSecond: 8}\n";
        ns.apply(&backup_manifest(&ns.name, "every8s", "ex", "S3", &storage, policy))?;
        wait_until(BACKUP, "2 backups of the first cluster", || {
            Ok((backups(&moto, "identity/ex_v")?.len() >= 2).then_some(()))
        })?;

        delete_cluster(ns, "ex")?;
        wait_until(Duration::from_secs(60), "the EtcdCluster to be gone", || {
            Ok(ns
                .run(&["get", "etcdcluster", "ex", "--ignore-not-found", "-o", "name"])?
                .trim()
                .is_empty()
                .then_some(()))
        })?;
        // What the first cluster left: no backup of it can be taken any more.
        let first = backups(&moto, "identity/ex_v")?;
        ensure!(first.len() >= 2, "{first:?}");
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.5.1", ""))?;
        let c = wait_healthy(ns, "ex", 1, CREATE)?;
        let second_id = c["status"]["clusterId"].as_str().unwrap_or_default().to_string();
        ensure!(!second_id.is_empty() && second_id != first_id, "cluster IDs {first_id} and {second_id}");

        // Until the new cluster's own retention has deleted one of its backups, none of the
        // first cluster's may go.
        wait_until(Duration::from_secs(180), "retention of the new cluster's backups", || {
            let now = backups(&moto, "identity/ex_v")?;
            if let Some(gone) = first.iter().find(|k| !now.contains(*k)) {
                bail!("retention deleted {gone}, a backup of the cluster before");
            }
            let evs = e2e_events(ns, "EtcdBackup", "every8s")?;
            let pruned_new = evs.iter().any(|(r, n)| {
                r == "BackupSucceeded"
                    && n.split("retention deleted ")
                        .nth(1)
                        .is_some_and(|d| !first.iter().any(|k| d.contains(k.as_str())))
            });
            Ok(pruned_new.then_some(()))
        })?;
        let evs = e2e_events(ns, "EtcdBackup", "every8s")?;
        ensure!(
            evs.iter().any(|(r, n)| r == "BackupClusterChanged" && n.contains(&first_id) && n.contains(&second_id)),
            "no Warning naming both clusters: {evs:?}"
        );
        let st = get(ns, "etcdbackup", "every8s")?["status"].clone();
        if st.get("clusterId").is_none() {
            // The API server prunes fields its CRD does not know: on a cluster shared with other
            // operator versions, the last one started installed its CRDs. Say so.
            let crd = ns.kubectl.json(&["get", "crd", "etcdbackups.etcd.database.coreos.com"])?;
            let known = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
            ensure!(known.get("clusterId").is_some(), "the EtcdBackup CRD on the server lacks status.clusterId");
        }
        ensure!(st["clusterId"] == second_id.as_str(), "status: {st}");
        ns.run(&["delete", "etcdbackup", "every8s"])?;
        Ok(())
    })
}

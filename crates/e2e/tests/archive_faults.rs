//! The continuous archive under faults (issue 29), on the real local cluster with the real
//! operator, real etcd and a real S3 server (moto): while a writer runs puts, deletes and
//! transactions through the client Service, the archiver pod is killed, the operator is killed
//! (SIGKILL) and started again, and the store hangs for 60 s (moto's processes SIGSTOPped, so
//! connections are accepted and never answered, as with a store that stops responding). After
//! that there is no gap, or every gap is reported and a full snapshot after it exists; the
//! archive becomes durable up to the last acknowledged write; and point-in-time restores to a
//! revision acknowledged while the store hung, and to the last one, give exactly etcd's own
//! MVCC state at those revisions.
//!
//! (The archiver's store client retries a write for up to three minutes, so a 60 s hang is one
//! slow segment write; the changes etcd sends meanwhile wait in the watch stream. A restore to a
//! revision from the middle of the hang needs every one of them in a segment.)

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::backups::*;
use common::*;
use e2e::harness::Operator;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, wait_until};
use etcd_client::{Client, GetOptions, Txn, TxnOp};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const BASE_KEY: &str = "faults/ex";
const PREFIX: &str = "f/";
const STORE_HUNG: Duration = Duration::from_secs(60);

/// Every key and value at `revision` (etcd's own MVCC history).
async fn state_at(c: &mut Client, revision: i64) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let r = c.get("", Some(GetOptions::new().with_all_keys().with_revision(revision))).await?;
    Ok(r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect())
}

/// Puts, deletes and two-key transactions over 30 keys until `stop`; every acknowledged
/// revision with the moment it was acknowledged. A write that fails (a member restarting under
/// the Service) is retried on a new connection; only acknowledged ones count.
fn writer(ep: String, stop: Arc<AtomicBool>, acked: Arc<Mutex<Vec<(Instant, i64)>>>) -> Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let mut c = Client::connect([ep.as_str()], None).await?;
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let key = format!("{PREFIX}k{:02}", i % 30);
            let value = format!("v{i}");
            let r = if i % 7 == 3 {
                c.delete(key, None).await.map(|r| r.header().cloned())
            } else if i % 11 == 5 {
                let ops = vec![
                    TxnOp::put(key, value.clone(), None),
                    TxnOp::put(format!("{PREFIX}t{:02}", i % 13), value, None),
                ];
                c.txn(Txn::new().and_then(ops)).await.map(|r| r.header().cloned())
            } else {
                c.put(key, value, None).await.map(|r| r.header().cloned())
            };
            match r {
                Ok(h) => {
                    let rev = h.context("no header")?.revision();
                    acked.lock().unwrap_or_else(|e| e.into_inner()).push((Instant::now(), rev));
                }
                Err(e) => {
                    eprintln!("write {i} failed (retried): {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    c = Client::connect([ep.as_str()], None).await?;
                }
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    })
}

fn last_acked(acked: &Mutex<Vec<(Instant, i64)>>) -> i64 {
    acked.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(_, r)| *r).max().unwrap_or(0)
}

fn archive_status(ns: &TestNamespace) -> Result<Value> {
    Ok(get(ns, "etcdbackup", "series")?["status"]["archive"].clone())
}

fn restore_manifest(ns: &str, name: &str, storage: &str, revision: i64) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  etcdCluster: {{name: {name}, spec: {{size: 1, version: \"{VERSION}\"}}}}\n  backupStorageType: S3\n  {storage}\n  pointInTime: {{revision: {revision}}}\n"
    )
}

/// The whole key space of restored cluster `name`, read through its client Service.
fn restored(ns: &TestNamespace, rt: &tokio::runtime::Runtime, name: &str) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    wait_until(Duration::from_secs(400), &format!("EtcdRestore {name} to finish"), || {
        let r = get(ns, "etcdrestore", name)?;
        ensure!(r["status"]["phase"] != "Failed", "restore failed: {}", r["status"]["reason"]);
        Ok((r["status"]["succeeded"] == true).then_some(()))
    })?;
    wait_healthy(ns, name, 1, CREATE)?;
    let ep = client_endpoint(ns, name)?;
    // The new client Service may refuse connections for a moment after its member is ready.
    wait_until(Duration::from_secs(60), &format!("a read of {name}"), || {
        Ok(rt
            .block_on(async {
                let mut c = Client::connect([ep.as_str()], None).await?;
                let r = c.get("", Some(GetOptions::new().with_all_keys())).await?;
                anyhow::Ok(r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect())
            })
            .ok())
    })
}

#[test]
fn the_archive_survives_its_pod_the_operator_and_a_hung_store_under_writes() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-archive-faults", |ns, op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        let storage = storage_block(&moto, BASE_KEY, "creds");
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let policy =
            "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 2}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        wait_backup_succeeded(ns, "series")?;
        wait_until(Duration::from_secs(120), "the archiver durable past the snapshot", || {
            Ok((archive_status(ns)?["durableRevision"].as_i64().unwrap_or(0) > 0).then_some(()))
        })?;

        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<Vec<(Instant, i64)>>> = Arc::default();
        let w = {
            let (ep, stop, acked) = (ep.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || writer(ep, stop, acked))
        };
        let result = (|| -> Result<(i64, i64)> {
            std::thread::sleep(Duration::from_secs(5));
            // 1. The archiver pod, killed at once.
            eprintln!("killing the archiver pod at revision {}", last_acked(&acked));
            ns.run(&["delete", "pod", "series-archiver", "--grace-period=0", "--force"])?;
            std::thread::sleep(Duration::from_secs(10));
            // 2. The operator, SIGKILLed and started again.
            eprintln!("killing the operator at revision {}", last_acked(&acked));
            if let Some(pid) = op.pid() {
                e2e::process::kill_group(pid, libc::SIGKILL)?;
            }
            op.stop();
            std::thread::sleep(Duration::from_secs(5));
            *op = Operator::start(ns)?;
            std::thread::sleep(Duration::from_secs(10));
            // 3. The store hangs for a minute.
            let moto_pid = moto.process().pid();
            eprintln!("store hung at revision {}", last_acked(&acked));
            e2e::process::kill_group(moto_pid, libc::SIGSTOP)?;
            std::thread::sleep(STORE_HUNG / 2);
            let during = last_acked(&acked);
            std::thread::sleep(STORE_HUNG / 2);
            e2e::process::kill_group(moto_pid, libc::SIGCONT)?;
            eprintln!("store back at revision {}", last_acked(&acked));
            std::thread::sleep(Duration::from_secs(10));
            Ok((during, last_acked(&acked)))
        })();
        stop.store(true, Ordering::Relaxed);
        // Never leave moto stopped, whatever failed above.
        let _ = e2e::process::kill_group(moto.process().pid(), libc::SIGCONT);
        w.join().map_err(|_| anyhow::anyhow!("the writer panicked"))??;
        let (during, _) = result?;
        let last = last_acked(&acked);
        let count = acked.lock().unwrap_or_else(|e| e.into_inner()).len();
        eprintln!("{count} writes acknowledged, the last at revision {last}; {during} while the store hung");
        ensure!(during > 0 && last > during, "the writer made no progress: {during} → {last}");

        let status = wait_until(Duration::from_secs(180), "the archive durable to the last write", || {
            let a = archive_status(ns)?;
            Ok((a["durableRevision"].as_i64().unwrap_or(0) >= last).then_some(a))
        })?;
        eprintln!("archive status: {status}");
        // A gap is allowed only when reported with a full snapshot after it.
        let snapshots: Vec<i64> = moto
            .list_objects(BUCKET, BASE_KEY)?
            .iter()
            .filter_map(|o| o.key.strip_prefix(&format!("{BASE_KEY}_v")))
            .filter_map(|rest| rest.split('_').next()?.parse().ok())
            .collect();
        for gap in status["gaps"].as_array().into_iter().flatten() {
            let to = gap["toRevision"].as_i64().context("gap without toRevision")?;
            ensure!(snapshots.iter().any(|s| *s > to), "gap {gap} without a snapshot after it: {snapshots:?}");
        }

        let rt = tokio::runtime::Runtime::new()?;
        let mut live = rt.block_on(Client::connect([ep.as_str()], None))?;
        for (name, revision) in [("while-hung", during), ("last", last)] {
            let want = rt.block_on(state_at(&mut live, revision))?;
            ns.apply(&restore_manifest(&ns.name, name, &storage, revision))?;
            let got = restored(ns, &rt, name)?;
            ensure!(
                got == want,
                "restore to {revision} ({name}) differs from etcd's history: {} keys vs {}",
                got.len(),
                want.len()
            );
            let r = get(ns, "etcdrestore", name)?;
            ensure!(r["status"]["etcdRevision"] == revision, "{name} restored to {}", r["status"]["etcdRevision"]);
        }
        Ok(())
    })
}

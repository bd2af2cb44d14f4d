//! Restores verify the backup before they create anything, on the real local cluster with a
//! real S3 server (moto): a restore onto a running cluster's name and a backup whose checksum
//! does not match are refused with nothing created, and a verification that fails because the
//! object store is down is retried until the store answers.

mod common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::wait_until;

#[test]
fn a_corrupt_backup_is_refused_and_nothing_is_created() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-corrupt", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.5.1", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        write_keys(&client_endpoint(ns, "ex")?, "c", 10)?;
        let storage = storage_block(&moto, "corrupt/etcd.backup", "creds");
        ns.apply(&backup_manifest(&ns.name, "once", "ex", "S3", &storage, ""))?;
        wait_backup_succeeded(ns, "once")?;

        // A restore onto the running cluster's name is refused: nothing is replaced.
        ns.apply(&restore_manifest(&ns.name, "onto-running", "ex", "S3", &storage))?;
        wait_until(Duration::from_secs(60), "the restore to refuse the existing cluster", || {
            let r = get(ns, "etcdrestore", "onto-running")?;
            Ok(r["status"]["reason"].as_str().is_some_and(|s| s.contains("already exists")).then_some(()))
        })?;
        ns.run(&["delete", "etcdrestore", "onto-running"])?;

        moto.corrupt_object(BUCKET, "corrupt/etcd.backup")?;
        ns.apply(&restore_manifest(&ns.name, "bad", "other", "S3", &storage))?;
        let r = wait_until(Duration::from_secs(120), "the restore to be refused", || {
            let r = get(ns, "etcdrestore", "bad")?;
            Ok((r["status"]["phase"] == "Failed").then_some(r))
        })?;
        let reason = r["status"]["reason"].as_str().unwrap_or_default();
        ensure!(reason.contains("checksum mismatch"), "reason: {reason}");
        ensure!(r["status"]["succeeded"] == false, "{}", r["status"]);
        let evs = e2e_events(ns, "EtcdRestore", "bad")?;
        ensure!(evs.iter().any(|(r, n)| r == "BackupRejected" && n.contains("checksum mismatch")), "{evs:?}");
        let created = ns.run(&["get", "etcdcluster", "other", "--ignore-not-found", "-o", "name"])?;
        ensure!(created.trim().is_empty(), "a cluster was created from a corrupt backup: {created}");
        let pods = ns.run(&["get", "pods", "-l", "etcd_cluster=other", "-o", "name"])?;
        ensure!(pods.trim().is_empty(), "{pods}");
        Ok(())
    })
}

/// A TCP relay to `target` on `host:port` that starts listening only when `open` is called: until
/// then a client gets "connection refused", as from an object store that is down for a while.
struct LateRelay {
    addr: String,
    target: String,
}

impl LateRelay {
    fn reserve(host: &str, target: String) -> Result<LateRelay> {
        let port = std::net::TcpListener::bind((host, 0))?.local_addr()?.port();
        Ok(LateRelay { addr: format!("{host}:{port}"), target })
    }

    fn open(&self) -> Result<()> {
        let listener = std::net::TcpListener::bind(&self.addr)?;
        let target = self.target.clone();
        std::thread::spawn(move || {
            for inbound in listener.incoming().flatten() {
                let Ok(outbound) = std::net::TcpStream::connect(&target) else { continue };
                for (mut from, mut to) in
                    [(inbound.try_clone().expect("clone"), outbound.try_clone().expect("clone")), (outbound, inbound)]
                {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        Ok(())
    }
}

/// The object store is down when a restore starts: the verify pod's failure is not the backup's
/// fault, so it is retried (Warning `VerifyRetrying`), and once the store answers the restore
/// goes on and brings back every key.
#[test]
fn a_restore_retries_verification_while_the_store_is_down() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-verify-retry", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        write_keys(&client_endpoint(ns, "ex")?, "r", KEYS)?;
        let storage = storage_block(&moto, "retry/etcd.backup", "creds");
        ns.apply(&backup_manifest(&ns.name, "once", "ex", "S3", &storage, ""))?;
        wait_backup_succeeded(ns, "once")?;

        let host = e2e::objstore::host_address()?;
        let relay = LateRelay::reserve(&host, format!("{host}:{}", moto.port()))?;
        let late = format!(
            "s3: {{path: \"{BUCKET}/retry/etcd.backup\", awsSecret: creds, endpoint: \"http://{}\", forcePathStyle: true}}",
            relay.addr
        );
        ns.apply(&restore_manifest(&ns.name, "late", "copy", "S3", &late))?;
        let (_, note) = wait_until(Duration::from_secs(120), "a VerifyRetrying Warning", || {
            Ok(e2e_events(ns, "EtcdRestore", "late")?.into_iter().find(|(r, _)| r == "VerifyRetrying"))
        })?;
        eprintln!("{note}");
        ensure!(note.contains("attempt 1 of"), "{note}");
        let r = get(ns, "etcdrestore", "late")?;
        ensure!(r["status"]["phase"] != "Failed", "a store that is down failed the restore: {}", r["status"]);
        relay.open()?;
        let r = wait_until(Duration::from_secs(240), "the restore to finish", || {
            let r = get(ns, "etcdrestore", "late")?;
            if r["status"]["phase"] == "Failed" {
                anyhow::bail!("restore failed: {}", r["status"]);
            }
            Ok((r["status"]["phase"] == "Restored").then_some(r))
        })?;
        ensure!(r["status"]["succeeded"] == true, "{}", r["status"]);
        check_keys(&client_endpoint(ns, "copy")?, "r", KEYS)?;
        Ok(())
    })
}

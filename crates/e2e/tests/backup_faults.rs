//! Backups and restores under faults, on the real local cluster with a real S3 server (moto):
//! a restore whose `etcdutl snapshot restore` is killed half-way, and a one-shot backup replaced
//! while a reader watches the stored objects. Both arm a failpoint of the operator (passed on to
//! the pods it starts) that widens the window the fault needs; the code paths are the real ones.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::wait_until;
use serde_json::Value;

/// `restore-snapshot-kill-once`: in every restored member the restore step kills etcdutl as soon
/// as it has written part of its output, the first time. The kubelet re-runs only that init
/// container; etcdutl refuses a non-empty target, so before the restore step cleared it the
/// members crash-looped for ever. Now each member restores on the second run.
#[test]
fn a_restore_killed_half_way_through_etcdutl_still_restores_every_member() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_failpoints("e2e-restore-kill", "restore-snapshot-kill-once", |ns| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        write_keys(&client_endpoint(ns, "ex")?, "k", KEYS)?;
        let storage = storage_block(&moto, "kill/etcd.backup", "creds");
        ns.apply(&backup_manifest(&ns.name, "once", "ex", "S3", &storage, ""))?;
        wait_backup_succeeded(ns, "once")?;

        ns.apply(&restore_manifest(&ns.name, "back", "copy", "S3", &storage))?;
        wait_until(RESTORE, "EtcdRestore to succeed", || {
            let r = get(ns, "etcdrestore", "back")?;
            ensure!(r["status"]["phase"] != "Failed", "restore failed: {}", r["status"]);
            Ok((r["status"]["succeeded"] == true).then_some(()))
        })?;
        wait_healthy(ns, "copy", 3, CREATE)?;
        check_members_restored(ns, "copy", 3, 3)?;
        // The fault happened: every member's restore-snapshot ran more than once.
        for p in member_pods(ns, "copy")? {
            let restarts = p["status"]["initContainerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["name"] == "restore-snapshot")
                .and_then(|c| c["restartCount"].as_i64())
                .unwrap_or(0);
            ensure!(
                restarts >= 1,
                "pod {}: restore-snapshot was not killed (restarts {restarts})",
                p["metadata"]["name"]
            );
        }
        check_keys(&client_endpoint(ns, "copy")?, "k", KEYS)?;
        Ok(())
    })
}

/// What a reader finds at one moment: the backup at the key matches its sidecar, or the previous
/// backup, kept aside while a one-shot backup replaces it, does.
#[derive(Debug, PartialEq)]
enum Seen {
    /// The key and its sidecar agree.
    Key,
    /// They disagree (or one is missing), and the previous pair is complete.
    Previous,
    Neither(String),
}

fn pair(server: &dyn ObjectServer, key: &str) -> Result<std::result::Result<String, String>> {
    let sidecar = server.get_object_with_metadata(BUCKET, &format!("{key}.meta.json"))?;
    let data = server.get_object_with_metadata(BUCKET, key)?;
    let again = server.get_object_with_metadata(BUCKET, &format!("{key}.meta.json"))?;
    let (Some(sidecar), Some(data), Some(again)) = (sidecar, data, again) else {
        return Ok(Err(format!("{key}: object or sidecar missing")));
    };
    if sidecar.data != again.data {
        return Ok(Err(format!("{key}: the sidecar changed while reading")));
    }
    let meta: Value = serde_json::from_slice(&sidecar.data)?;
    let sha = sha256_hex(&data.data)?;
    Ok(if meta["sha256"] == sha.as_str() {
        Ok(sha)
    } else {
        Err(format!("{key}: sha256 {sha}, sidecar {}", meta["sha256"]))
    })
}

/// One look, as a restore would take it (the key first, then the previous one), retried twice at
/// once: a look is not atomic, and the state may move on between its reads.
fn look(server: &dyn ObjectServer, key: &str) -> Result<Seen> {
    let mut why = String::new();
    for _ in 0..3 {
        match pair(server, key)? {
            Ok(_) => return Ok(Seen::Key),
            Err(e) => why = e,
        }
        if pair(server, &format!("{key}.previous"))?.is_ok() {
            return Ok(Seen::Previous);
        }
    }
    Ok(Seen::Neither(why))
}

/// `backup-publish-pause`: 3 s between the steps of writing a one-shot backup. A reader polls the
/// bucket while the backup is taken again over the previous one: at every look a complete backup
/// with a matching sidecar is there. Before staging, the new object replaced the old one before
/// its sidecar was written, and for that window (here 3 s) no restorable backup existed.
#[test]
fn a_one_shot_backup_taken_again_leaves_a_complete_backup_readable_at_every_moment() -> Result<()> {
    let moto = Arc::new(MotoServer::start()?);
    moto.create_bucket(BUCKET)?;
    with_failpoints("e2e-one-shot", "backup-publish-pause", |ns| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.5.1", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        write_keys(&ep, "a", KEYS)?;
        let key = "once/etcd.backup";
        let storage = storage_block(moto.as_ref(), key, "creds");
        ns.apply(&backup_manifest(&ns.name, "once", "ex", "S3", &storage, ""))?;
        let first = wait_backup_succeeded(ns, "once")?;
        let first_sha = first["status"]["sha256"].as_str().unwrap_or_default().to_string();
        write_keys(&ep, "b", KEYS)?;

        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (moto, stop) = (moto.clone(), stop.clone());
            std::thread::spawn(move || -> Result<(usize, usize, Vec<String>, Vec<&'static str>)> {
                let (mut looks, mut previous, mut bad) = (0, 0, Vec::new());
                // What the looks found, each run of equal looks once: "key", "previous".
                let mut runs: Vec<&'static str> = vec![];
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let found = match look(moto.as_ref(), key)? {
                        Seen::Key => "key",
                        Seen::Previous => {
                            previous += 1;
                            "previous"
                        }
                        Seen::Neither(why) => {
                            bad.push(format!("{:.1}s: {why}", started.elapsed().as_secs_f64()));
                            "neither"
                        }
                    };
                    if runs.last() != Some(&found) {
                        runs.push(found);
                    }
                    looks += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok((looks, previous, bad, runs))
            })
        };
        // A changed spec takes the one-shot backup again.
        ns.run(&[
            "patch",
            "etcdbackup",
            "once",
            "--type=merge",
            "-p",
            r#"{"spec":{"backupPolicy":{"timeoutInSecond":90}}}"#,
        ])?;
        let second = wait_until(BACKUP, "the second backup to succeed", || {
            let b = get(ns, "etcdbackup", "once")?;
            let sha = b["status"]["sha256"].as_str().unwrap_or_default();
            Ok((b["status"]["succeeded"] == true && !sha.is_empty() && sha != first_sha).then_some(b))
        })?;
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        let (looks, previous, bad, runs) = reader.join().map_err(|_| anyhow::anyhow!("reader panicked"))??;
        eprintln!(
            "{looks} looks ({runs:?}), {previous} found the previous backup kept aside, {} found nothing complete",
            bad.len()
        );
        ensure!(bad.is_empty(), "no complete backup at some moments: {bad:?}");
        ensure!(previous > 0, "the reader never saw the replacement window ({looks} looks): the test proves nothing");
        // The reader looked before, during and after the replacement: the old backup at the key,
        // then the one kept aside, then the new one at the key.
        ensure!(runs == ["key", "previous", "key"], "the looks did not span the replacement: {runs:?}");
        // The end state: the new backup at the key, nothing kept aside any more.
        ensure!(look(moto.as_ref(), key)? == Seen::Key);
        ensure!(pair(moto.as_ref(), key)?.ok().as_deref() == second["status"]["sha256"].as_str());
        ensure!(moto.get_object_with_metadata(BUCKET, &format!("{key}.previous"))?.is_none(), "previous object left");
        Ok(())
    })
}

//! What an EtcdBackup says can be restored, and retention by a time window (issue 29), on the
//! real local cluster with the real operator, real etcd and a real S3 server (moto):
//!
//! - `status.restorableRanges` appears with the first snapshot and grows with the continuous
//!   archive (the `ArchiveCurrent` condition names the newest range); an EtcdRestore to a
//!   revision inside the newest reported range gives exactly etcd's own state at it.
//! - `backupPolicy.retention: 30s` with a backup every 10 s: the oldest snapshots and their
//!   segments go from the store, the floor snapshot (the newest taken at or before the
//!   window's start) and everything after it stay and restore without a hole, and status'
//!   first range starts at or before now − 30 s.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, wait_until};
use etcd_client::{Client, GetOptions};
use serde_json::Value;

const VERSION: &str = "3.6.15";

/// Puts over 20 keys for `secs`; the next index and the last revision acked.
async fn write_for(c: &mut Client, secs: u64, i0: usize) -> Result<(usize, i64)> {
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut i, mut last) = (i0, 0);
    while Instant::now() < end {
        let r = c.put(format!("r/k{:02}", i % 20), format!("v{i}"), None).await?;
        last = last.max(r.header().context("no header")?.revision());
        i += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((i, last))
}

type KeySpace = BTreeMap<Vec<u8>, Vec<u8>>;

async fn state_at(c: &mut Client, revision: Option<i64>) -> Result<(KeySpace, i64)> {
    let mut o = GetOptions::new().with_all_keys();
    if let Some(r) = revision {
        o = o.with_revision(r);
    }
    let r = c.get("", Some(o)).await?;
    let rev = r.header().context("no header")?.revision();
    Ok((r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect(), rev))
}

/// `status.restorableRanges` as (cluster, from, to, fromTime, toTime, snapshot).
fn ranges(b: &Value) -> Vec<(String, i64, i64, String, String, String)> {
    b["status"]["restorableRanges"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let s = |f: &str| r[f].as_str().unwrap_or_default().to_string();
            (
                s("clusterId"),
                r["fromRevision"].as_i64().unwrap_or(0),
                r["toRevision"].as_i64().unwrap_or(0),
                s("fromTime"),
                s("toTime"),
                s("snapshot"),
            )
        })
        .collect()
}

fn condition(b: &Value, ty: &str) -> Option<Value> {
    b["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == ty).cloned()
}

/// The snapshots in the store: (revision, time in the name, key), oldest first.
fn snapshots(moto: &MotoServer, base_key: &str) -> Result<Vec<(i64, String, String)>> {
    let mut out: Vec<(i64, String, String)> = moto
        .list_objects(BUCKET, &format!("{base_key}_v"))?
        .into_iter()
        .map(|o| o.key)
        .filter(|k| !k.ends_with(".meta.json"))
        .filter_map(|k| {
            let (rev, time) = k[base_key.len() + 2..].split_once('_')?;
            Some((rev.parse().ok()?, time.to_string(), k.clone()))
        })
        .collect();
    out.sort_by(|a, b| (&a.1, a.0).cmp(&(&b.1, b.0)));
    Ok(out)
}

/// The segments in the store, by their names: (from, to).
fn segments(moto: &MotoServer, base_key: &str) -> Result<Vec<(i64, i64)>> {
    let mut out = Vec::new();
    for o in moto.list_objects(BUCKET, &format!("{base_key}.archive/"))? {
        let name = o.key.rsplit('/').next().unwrap_or_default().trim_end_matches(".seg").to_string();
        let (f, t) = name.split_once('-').with_context(|| format!("segment name {}", o.key))?;
        out.push((f.parse()?, t.parse()?));
    }
    out.sort();
    Ok(out)
}

/// A name's time (`YYYY-MM-DD-HHMMSS`) as a Unix second.
fn name_time(t: &str) -> Result<i64> {
    let iso = format!("{}-{}-{}T{}:{}:{}Z", &t[0..4], &t[5..7], &t[8..10], &t[11..13], &t[13..15], &t[15..17]);
    Ok(iso.parse::<jiff::Timestamp>()?.as_second())
}

fn wait_restore(ns: &TestNamespace, name: &str) -> Result<Value> {
    wait_until(Duration::from_secs(400), &format!("EtcdRestore {name} to finish"), || {
        let r = get(ns, "etcdrestore", name)?;
        ensure!(r["status"]["phase"] != "Failed", "restore failed: {}", r["status"]["reason"]);
        Ok((r["status"]["succeeded"] == true).then_some(r))
    })
}

#[test]
fn restorable_ranges_grow_with_the_archive_and_a_revision_inside_the_newest_restores() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-ranges", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, VERSION, ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut c = rt.block_on(Client::connect([ep.as_str()], None))?;
        let (i, _) = rt.block_on(write_for(&mut c, 1, 0))?;
        let base_key = "ranges/ex";
        let storage = storage_block(&moto, base_key, "creds");
        let policy =
            "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 1}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        let b = wait_backup_succeeded(ns, "series")?;
        let snapshot = b["status"]["etcdRevision"].as_i64().context("revision")?;
        let cluster = b["status"]["clusterId"].as_str().context("clusterId")?.to_string();
        // The first backup's listing: its own snapshot, nothing archived after it yet.
        let first = ranges(&b);
        ensure!(first.len() == 1, "ranges after the first backup: {first:?}");
        let (c0, from, _, from_time, _, snap) = &first[0];
        ensure!(c0 == &cluster && *from == snapshot, "{first:?}: snapshot at {snapshot} of {cluster}");
        ensure!(snap == b["status"]["path"].as_str().unwrap_or_default(), "{snap} is not the backup just taken");
        ensure!(Some(from_time.as_str()) == b["status"]["lastSuccessDate"].as_str(), "fromTime {from_time}");

        // The archive follows writes, and status with it.
        let mut grown = Vec::new();
        let mut i = i;
        for round in 0..2 {
            let (next, last) = rt.block_on(write_for(&mut c, 3, i))?;
            i = next;
            let b = wait_until(
                Duration::from_secs(90),
                &format!("round {round}: the newest range to reach {last}"),
                || {
                    let b = get(ns, "etcdbackup", "series")?;
                    let rs = ranges(&b);
                    Ok(rs.last().is_some_and(|r| r.2 >= last).then_some(b))
                },
            )?;
            let rs = ranges(&b);
            ensure!(rs.len() == 1, "one unbroken history, one range: {rs:?}");
            ensure!(rs[0].1 == snapshot, "it still starts at the snapshot: {rs:?}");
            ensure!(rs[0].4 >= rs[0].3, "toTime before fromTime: {rs:?}");
            let cond = wait_until(Duration::from_secs(60), "ArchiveCurrent True", || {
                let b = get(ns, "etcdbackup", "series")?;
                Ok(condition(&b, "ArchiveCurrent").filter(|c| c["status"] == "True"))
            })?;
            let msg = cond["message"].as_str().unwrap_or_default();
            ensure!(msg.contains(&format!("newest restorable: revisions {snapshot}..=")), "{msg}");
            grown.push(rs[0].2);
        }
        ensure!(grown[1] > grown[0], "the range did not grow: {grown:?}");

        // A revision inside the newest range, a little after the snapshot.
        let newest = ranges(&get(ns, "etcdbackup", "series")?).pop().context("no range")?;
        let target = (newest.1 + newest.2) / 2;
        ensure!(target > snapshot, "target {target} is the snapshot itself");
        let (want, _) = rt.block_on(state_at(&mut c, Some(target)))?;
        ns.apply(&format!(
            "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: back, namespace: {}}}\nspec:\n  etcdCluster: {{name: back, spec: {{size: 1, version: \"{VERSION}\"}}}}\n  backupStorageType: S3\n  {storage}\n  pointInTime: {{revision: {target}}}\n",
            ns.name
        ))?;
        let r = wait_restore(ns, "back")?;
        ensure!(r["status"]["etcdRevision"] == target, "restored to {}", r["status"]["etcdRevision"]);
        wait_healthy(ns, "back", 1, CREATE)?;
        let ep = client_endpoint(ns, "back")?;
        let got = wait_until(Duration::from_secs(60), "a read of the restored cluster", || {
            Ok(rt.block_on(async {
                let mut c = Client::connect([ep.as_str()], None).await.ok()?;
                state_at(&mut c, None).await.ok()
            }))
        })?;
        ensure!(
            got.0 == want,
            "restored state differs from etcd's at {target}: {} keys vs {}",
            got.0.len(),
            want.len()
        );
        Ok(())
    })
}

#[test]
fn a_retention_window_keeps_its_floor_snapshot_and_everything_after() -> Result<()> {
    const WINDOW: i64 = 30;
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-window", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, VERSION, ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut c = rt.block_on(Client::connect([ep.as_str()], None))?;
        let base_key = "window/ex";
        let storage = storage_block(&moto, base_key, "creds");
        let policy = format!(
            "  backupPolicy: {{backupIntervalInSecond: 10, timeoutInSecond: 30, retention: {WINDOW}s}}\n  continuous: {{enabled: true, flushIntervalInSecond: 1}}\n"
        );
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, &policy))?;
        wait_backup_succeeded(ns, "series")?;
        let mut seen = std::collections::BTreeSet::new();
        let (mut i, mut last) = (0, 0);
        let mut why = String::new();
        // Once the window applies, writing stops until the archive catches up with the last write:
        // a check right after a write always finds the archive a flush behind.
        let mut catching_up = false;
        let checked = wait_until(Duration::from_secs(150), "the window to apply", || {
            if !catching_up {
                let (next, l) = rt.block_on(write_for(&mut c, 2, i))?;
                (i, last) = (next, l);
            }
            let kept = snapshots(&moto, base_key)?;
            seen.extend(kept.iter().map(|s| s.2.clone()));
            // Only once some went, and checked against the newest snapshot's retention run.
            if seen.len() <= kept.len() + 1 {
                why = format!("nothing deleted yet: {kept:?}");
                return Ok(None);
            }
            let newest = name_time(&kept.last().context("no snapshot")?.1)?;
            let start = newest - WINDOW;
            let before: Vec<&(i64, String, String)> =
                kept.iter().filter(|s| name_time(&s.1).is_ok_and(|t| t <= start)).collect();
            if before.len() != 1 {
                // Another backup may be between its upload and its retention run: look again.
                why = format!("{} snapshots at or before the window's start {start}: {kept:?}", before.len());
                return Ok(None);
            }
            let floor = before[0].0;
            ensure!(kept[0].0 == floor, "the oldest kept {kept:?} is not the floor {floor}");
            let segs = segments(&moto, base_key)?;
            // Every revision from the floor to the last write is restorable: no hole.
            let reach = chain_reach(floor, &segs)?;
            if reach < last {
                why = format!("the archive reaches {reach}, the last write is {last}");
                catching_up = true;
                return Ok(None);
            }
            Ok(Some((floor, kept)))
        });
        let (floor, kept) = checked.with_context(|| why.clone())?;
        ensure!(seen.len() > kept.len(), "no snapshot was deleted: {seen:?}");
        // Status: starts at or before now − window, with the floor.
        let b = wait_until(Duration::from_secs(30), "status.restorableRanges to start at the floor or before", || {
            let b = get(ns, "etcdbackup", "series")?;
            Ok(ranges(&b).first().is_some_and(|r| r.1 <= floor).then_some(b))
        })?;
        let rs = ranges(&b);
        let from = rs[0].3.parse::<jiff::Timestamp>()?.as_second();
        let now = jiff::Timestamp::now().as_second();
        ensure!(
            from <= now - WINDOW,
            "the first range starts at {} ({}s ago), inside the window: {rs:?}",
            rs[0].3,
            now - from
        );
        // The listing can show the deletion before the operator has read the result of the
        // backup pod that made it (and recorded its Event): wait for the Event.
        let mut evs = vec![];
        wait_until(Duration::from_secs(30), "a BackupSucceeded Event saying what retention deleted", || {
            evs = e2e_events(ns, "EtcdBackup", "series")?;
            Ok(evs.iter().any(|(r, n)| r == "BackupSucceeded" && n.contains("retention deleted")).then_some(()))
        })
        .with_context(|| format!("{evs:?}"))?;
        Ok(())
    })
}

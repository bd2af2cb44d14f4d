//! The continuous archiver (`etcd-operator archive-follow`, issue 29) against a real 3-member
//! cluster and a real S3 server (moto): puts, deletes, transactions and a `del --prefix` while
//! the archiver is SIGKILLed and started again; then the segments, read here by their
//! documented format (not by the operator's decoder), must hold every acknowledged change at its
//! revision, invent none, cover every revision from the snapshot on, and — replayed over etcd's
//! own state at the snapshot's revision — give exactly the state etcd's MVCC history had at the
//! revision just before the delete and at the end.
//!
//! The first test runs the command as its pod would; the second has the operator run it for an
//! EtcdBackup with `continuous.enabled`, and turn it off again.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use base64::Engine as _;
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer, S3_ACCESS_KEY_ID, S3_REGION, S3_SECRET_ACCESS_KEY};
use e2e::process::Supervised;
use e2e::wait_until;
use etcd_client::{Client, DeleteOptions, GetOptions, Txn, TxnOp};
use serde_json::Value;

const BASE_KEY: &str = "archive/ex";
const PREFIX: &str = "pit/";

#[derive(Clone, Debug, PartialEq, Eq)]
struct Change {
    revision: i64,
    put: bool,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn archiver(moto: &MotoServer, creds: &std::path::Path, endpoints: &str) -> Result<Supervised> {
    archiver_on(moto, creds, endpoints, BASE_KEY, 0)
}

fn archiver_on(
    moto: &MotoServer,
    creds: &std::path::Path,
    endpoints: &str,
    base_key: &str,
    status_port: u16,
) -> Result<Supervised> {
    let mut cmd = Command::new(operator_bin());
    cmd.args([
        "archive-follow",
        "--storage-type=S3",
        &format!("--bucket={BUCKET}"),
        &format!("--key={base_key}"),
        &format!("--s3-endpoint={}", moto.endpoint()),
        "--s3-force-path-style",
        &format!("--credentials-dir={}", creds.display()),
        &format!("--endpoints={endpoints}"),
        "--flush-interval-secs=1",
        &format!("--status-port={status_port}"),
    ]);
    Supervised::spawn(cmd, "etcd-operator archive-follow", Duration::ZERO)
}

/// Puts, deletes and two-key transactions over 40 keys for `secs`, every acknowledged change
/// with the revision etcd answered.
async fn write_for(c: &mut Client, secs: u64, i0: usize, out: &mut Vec<Change>) -> Result<usize> {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut i = i0;
    while Instant::now() < end {
        let key = format!("{PREFIX}k{:02}", i % 40);
        let value = format!("v{i}");
        if i % 7 == 3 {
            let r = c.delete(key.clone(), Some(DeleteOptions::new().with_prev_key())).await?;
            if r.deleted() > 0 {
                let rev = r.header().context("no header")?.revision();
                out.push(Change { revision: rev, put: false, key: key.into_bytes(), value: vec![] });
            }
        } else if i % 11 == 5 {
            let other = format!("{PREFIX}t{:02}", i % 13);
            let ops =
                vec![TxnOp::put(key.clone(), value.clone(), None), TxnOp::put(other.clone(), value.clone(), None)];
            let r = c.txn(Txn::new().and_then(ops)).await?;
            let rev = r.header().context("no header")?.revision();
            for k in [key, other] {
                out.push(Change { revision: rev, put: true, key: k.into_bytes(), value: value.clone().into_bytes() });
            }
        } else {
            let r = c.put(key.clone(), value.clone(), None).await?;
            let rev = r.header().context("no header")?.revision();
            out.push(Change { revision: rev, put: true, key: key.into_bytes(), value: value.into_bytes() });
        }
        i += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(i)
}

/// Every key and value at `revision` (etcd's own MVCC history).
async fn state_at(c: &mut Client, revision: i64) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let r = c.get("", Some(GetOptions::new().with_all_keys().with_revision(revision))).await?;
    Ok(r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect())
}

/// The segments under the archive prefix, each checked against its header by the documented
/// format: (header, events as (revision, put, key, value)).
fn read_segments(moto: &MotoServer, base_key: &str) -> Result<Vec<(Value, Vec<Change>)>> {
    let mut out = Vec::new();
    for o in moto.list_objects(BUCKET, &format!("{base_key}.archive/"))? {
        ensure!(o.key.ends_with(".seg"), "unexpected object {} in the archive", o.key);
        let bytes = moto.get_object(BUCKET, &o.key)?;
        let nl = bytes.iter().position(|b| *b == b'\n').context("no header line")?;
        let header: Value = serde_json::from_slice(&bytes[..nl])?;
        let body = &bytes[nl + 1..];
        ensure!(header["format"] == "etcd-operator-rs/segment/v1", "{}: header {header}", o.key);
        ensure!(
            Some(sha256_hex(body)?.as_str()) == header["sha256"].as_str(),
            "{}: sha256 differs from its header",
            o.key
        );
        let mut events = Vec::new();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let e: Value = serde_json::from_slice(line)?;
            let b64 = |f: &str| base64::engine::general_purpose::STANDARD.decode(e[f].as_str().unwrap_or_default());
            events.push(Change {
                revision: e["rev"].as_i64().context("rev")?,
                put: e["op"] == "put",
                key: b64("key")?,
                value: b64("value")?,
            });
        }
        ensure!(header["events"].as_u64() == Some(events.len() as u64), "{}: count differs", o.key);
        out.push((header, events));
    }
    Ok(out)
}

#[test]
fn the_archive_holds_every_acked_change_and_replays_to_etcds_own_history() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-archive", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut c = rt.block_on(Client::connect([ep.as_str()], None))?;
        let mut changes = Vec::new();
        let i = rt.block_on(write_for(&mut c, 2, 0, &mut changes))?;

        // The archive continues the newest full snapshot of the series.
        let storage = storage_block(&moto, BASE_KEY, "creds");
        let policy = "  backupPolicy: {backupIntervalInSecond: 3600, timeoutInSecond: 60}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        let snapshot = wait_backup_succeeded(ns, "series")?["status"]["etcdRevision"].as_i64().context("revision")?;

        let creds = tempdir(&ns.name)?;
        std::fs::write(
            creds.join("credentials"),
            format!(
                "[default]\naws_access_key_id = {S3_ACCESS_KEY_ID}\naws_secret_access_key = {S3_SECRET_ACCESS_KEY}\n"
            ),
        )?;
        std::fs::write(creds.join("config"), format!("[default]\nregion = {S3_REGION}\n"))?;
        let mut arch = archiver(&moto, &creds, &ep)?;
        let i = rt.block_on(write_for(&mut c, 6, i, &mut changes))?;
        arch.stop(); // SIGKILL: whatever was not flushed is lost from memory
        let i = rt.block_on(write_for(&mut c, 2, i, &mut changes))?;
        let mut arch = archiver(&moto, &creds, &ep)?;
        rt.block_on(write_for(&mut c, 6, i, &mut changes))?;
        let before_delete = changes.iter().map(|c| c.revision).max().context("no writes")?;
        // The bad write a point-in-time restore exists for.
        let r =
            rt.block_on(c.delete(format!("{PREFIX}k1"), Some(DeleteOptions::new().with_prefix().with_prev_key())))?;
        let rev = r.header().context("no header")?.revision();
        for kv in r.prev_kvs() {
            changes.push(Change { revision: rev, put: false, key: kv.key().to_vec(), value: vec![] });
        }
        ensure!(r.deleted() > 0, "the prefix delete deleted nothing");
        let last = rev;

        let segments = wait_until(Duration::from_secs(60), "the archive to reach the last revision", || {
            ensure!(arch.running(), "the archiver exited");
            let segs = read_segments(&moto, BASE_KEY)?;
            let to = segs.iter().filter_map(|(h, _)| h["to"].as_i64()).max().unwrap_or(0);
            Ok((to >= last).then_some(segs))
        })?;
        arch.stop();

        // Every revision from the snapshot on is covered; overlapping segments agree.
        let mut by_rev: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
        let mut spans: Vec<(i64, i64)> = Vec::new();
        for (h, events) in &segments {
            ensure!(
                h["baseRevision"].as_i64() == Some(snapshot),
                "segment continues {} not the snapshot {snapshot}",
                h["baseRevision"]
            );
            spans.push((h["from"].as_i64().context("from")?, h["to"].as_i64().context("to")?));
            let mut here: BTreeMap<i64, Vec<Change>> = BTreeMap::new();
            for e in events {
                here.entry(e.revision).or_default().push(e.clone());
            }
            for (rev, evs) in here {
                if let Some(seen) = by_rev.get(&rev) {
                    ensure!(*seen == evs, "two segments disagree about revision {rev}");
                } else {
                    by_rev.insert(rev, evs);
                }
            }
        }
        spans.sort();
        let mut reach = snapshot;
        for (from, to) in &spans {
            ensure!(*from <= reach + 1, "revisions {}..{} are in no segment: {spans:?}", reach + 1, from - 1);
            reach = reach.max(*to);
        }
        ensure!(reach >= last, "the archive ends at {reach}, the last write was {last}");
        for rev in snapshot + 1..=last {
            ensure!(by_rev.contains_key(&rev), "revision {rev} has no event");
        }
        // Every acknowledged change is there at its revision; none is invented.
        for ch in changes.iter().filter(|c| c.revision > snapshot) {
            ensure!(
                by_rev.get(&ch.revision).is_some_and(|evs| evs.contains(ch)),
                "acked change missing from the archive: {ch:?}"
            );
        }
        for (rev, evs) in by_rev.iter().filter(|(r, _)| **r <= last) {
            for e in evs.iter().filter(|e| e.key.starts_with(PREFIX.as_bytes())) {
                ensure!(changes.contains(e), "revision {rev}: a change nobody made: {e:?}");
            }
        }
        // Replayed over the state at the snapshot: etcd's own state at both targets.
        let base = rt.block_on(state_at(&mut c, snapshot))?;
        for target in [before_delete, last] {
            let mut kv = base.clone();
            for e in by_rev.range(snapshot + 1..=target).flat_map(|(_, evs)| evs) {
                if e.put {
                    kv.insert(e.key.clone(), e.value.clone());
                } else {
                    kv.remove(&e.key);
                }
            }
            let want = rt.block_on(state_at(&mut c, target))?;
            if kv != want {
                bail!("replay to revision {target} gives {} keys, etcd had {} at that revision", kv.len(), want.len());
            }
        }
        std::fs::remove_dir_all(&creds).ok();
        Ok(())
    })
}

/// `continuous.enabled` on a periodic EtcdBackup: after the first snapshot the operator starts
/// the archiver pod (condition `Archiving` True), whose segments then hold every acknowledged
/// change; turned off, the pod goes and so does the condition.
#[test]
fn an_etcdbackup_with_continuous_gets_an_archiver_pod_that_follows_every_change() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-archiver-pod", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut c = rt.block_on(Client::connect([ep.as_str()], None))?;
        let base_key = "pod-archive/ex";
        let storage = storage_block(&moto, base_key, "creds");
        let policy =
            "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 2}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        let snapshot = wait_backup_succeeded(ns, "series")?["status"]["etcdRevision"].as_i64().context("revision")?;
        wait_until(Duration::from_secs(120), "condition Archiving True", || {
            let b = get(ns, "etcdbackup", "series")?;
            let conds = b["status"]["conditions"].as_array().cloned().unwrap_or_default();
            Ok(conds.iter().any(|c| c["type"] == "Archiving" && c["status"] == "True").then_some(()))
        })?;
        let mut changes = Vec::new();
        rt.block_on(write_for(&mut c, 5, 0, &mut changes))?;
        let last = changes.iter().map(|c| c.revision).max().context("no writes")?;
        let segments = wait_until(Duration::from_secs(60), "the archive to reach the last write", || {
            let segs = read_segments(&moto, base_key)?;
            let to = segs.iter().filter_map(|(h, _)| h["to"].as_i64()).max().unwrap_or(0);
            Ok((to >= last).then_some(segs))
        })?;
        let events: Vec<&Change> = segments.iter().flat_map(|(_, evs)| evs).collect();
        // Status follows the archiver: durable up to the last write, of this cluster, no gap.
        wait_until(Duration::from_secs(60), "status.archive to reach the last write", || {
            let st = get(ns, "etcdbackup", "series")?["status"].clone();
            let a = &st["archive"];
            ensure!(
                a["clusterId"] == st["clusterId"],
                "archive of cluster {} backups of {}",
                a["clusterId"],
                st["clusterId"]
            );
            ensure!(a["gaps"].is_null(), "gaps reported: {a}");
            Ok((a["durableRevision"].as_i64().unwrap_or(0) >= last && a["durableTime"].is_string()).then_some(()))
        })?;
        for ch in changes.iter().filter(|c| c.revision > snapshot) {
            ensure!(events.contains(&ch), "acked change missing from the archive: {ch:?}");
        }
        ns.run(&[
            "patch",
            "etcdbackup",
            "series",
            "--type=merge",
            "-p",
            r#"{"spec":{"continuous":{"enabled":false}}}"#,
        ])?;
        wait_until(Duration::from_secs(60), "the archiver pod and the condition to go", || {
            let pods = ns.run(&["get", "pods", "-l", "etcd_backup_role=archiver", "-o", "name"])?;
            let b = get(ns, "etcdbackup", "series")?;
            let conds = b["status"]["conditions"].as_array().cloned().unwrap_or_default();
            Ok((pods.trim().is_empty() && !conds.iter().any(|c| c["type"] == "Archiving")).then_some(()))
        })?;
        Ok(())
    })
}

/// A continuous archive has its series to itself: a later EtcdBackup with periodic backups to
/// the same claim and path is refused (the reason names the series and the first EtcdBackup,
/// an `InvalidSpec` Event, no pod), and starts on its own once the first one is gone.
#[test]
fn a_later_backup_in_an_archived_series_is_refused_until_the_archive_goes() -> Result<()> {
    with_operator("e2e-series-owner", |ns, _op| {
        ns.apply(&claim_manifest(&ns.name, "backups"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let storage = "pvc: {claimName: backups, path: shared/ex}";
        let archived =
            "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 2}\n";
        ns.apply(&backup_manifest(&ns.name, "archived", "ex", "PVC", storage, archived))?;
        wait_backup_succeeded(ns, "archived")?;
        let periodic = "  backupPolicy: {backupIntervalInSecond: 3600}\n";
        ns.apply(&backup_manifest(&ns.name, "nightly", "ex", "PVC", storage, periodic))?;
        let why = wait_until(Duration::from_secs(60), "the later EtcdBackup to be refused", || {
            let st = get(ns, "etcdbackup", "nightly")?["status"].clone();
            ensure!(st["succeeded"] != true, "the later EtcdBackup took a backup into the archived series: {st}");
            Ok(st["reason"].as_str().filter(|r| r.contains("EtcdBackup archived")).map(str::to_string))
        })?;
        ensure!(why.contains("pvc://backups/shared/ex") && why.contains("continuous archive"), "{why}");
        let events = e2e_events(ns, "EtcdBackup", "nightly")?;
        ensure!(events.iter().any(|(r, m)| r == "InvalidSpec" && m.contains("EtcdBackup archived")), "{events:?}");
        let pods = ns.run(&["get", "pods", "-l", "etcd_backup=nightly", "-o", "name"])?;
        ensure!(pods.trim().is_empty(), "the refused EtcdBackup started pods: {pods}");
        // The first one goes: the later one starts within its minute of recheck.
        ns.run(&["delete", "etcdbackup", "archived", "--wait=true", "--timeout=60s"])?;
        wait_until(Duration::from_secs(180), "the later EtcdBackup to succeed once the series is free", || {
            Ok((get(ns, "etcdbackup", "nightly")?["status"]["succeeded"] == true).then_some(()))
        })?;
        Ok(())
    })
}

/// Compaction overtakes the archive while its archiver is off: turned on again, it does not
/// skip the lost revisions silently. It reports the gap (`status.archive.gaps`), takes a full
/// snapshot at once and continues from it: segments after the gap continue the new snapshot,
/// none pretends to hold the gap, and every change acknowledged after it is archived.
#[test]
fn compaction_past_the_archive_is_a_reported_gap_and_a_fresh_snapshot() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-archive-gap", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut c = rt.block_on(Client::connect([ep.as_str()], None))?;
        let base_key = "gap/ex";
        let storage = storage_block(&moto, base_key, "creds");
        let with = |on: bool| {
            format!(
                "  backupPolicy: {{backupIntervalInSecond: 3600}}\n  continuous: {{enabled: {on}, flushIntervalInSecond: 1}}\n"
            )
        };
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, &with(true)))?;
        let first = wait_backup_succeeded(ns, "series")?["status"]["etcdRevision"].as_i64().context("revision")?;
        let mut changes = Vec::new();
        let i = rt.block_on(write_for(&mut c, 3, 0, &mut changes))?;
        let before = changes.iter().map(|c| c.revision).max().context("no writes")?;
        wait_until(Duration::from_secs(90), "the archive to reach the first writes", || {
            let to = read_segments(&moto, base_key)?.iter().filter_map(|(h, _)| h["to"].as_i64()).max().unwrap_or(0);
            Ok((to >= before).then_some(()))
        })?;
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, &with(false)))?;
        wait_until(Duration::from_secs(60), "the archiver pod to go", || {
            Ok(ns
                .run(&["get", "pods", "-l", "etcd_backup_role=archiver", "-o", "name"])?
                .trim()
                .is_empty()
                .then_some(()))
        })?;
        // While it is off: more writes, then a compaction past all of them.
        rt.block_on(write_for(&mut c, 2, i, &mut changes))?;
        let compacted = changes.iter().map(|c| c.revision).max().context("no writes")?;
        rt.block_on(c.compact(compacted, None))?;
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, &with(true)))?;
        let gap = wait_until(Duration::from_secs(120), "status.archive to report a gap", || {
            let st = get(ns, "etcdbackup", "series")?["status"].clone();
            Ok(st["archive"]["gaps"].as_array().and_then(|g| g.first()).cloned())
        })?;
        let (from, to) = (gap["fromRevision"].as_i64().context("from")?, gap["toRevision"].as_i64().context("to")?);
        // Not silent: the archive is not current until the next periodic backup, and the gap is
        // a Warning Event, said once however often status is written.
        wait_until(Duration::from_secs(60), "ArchiveCurrent False with GapFound", || {
            let b = get(ns, "etcdbackup", "series")?;
            let conds = b["status"]["conditions"].as_array().cloned().unwrap_or_default();
            Ok(conds
                .iter()
                .find(|c| c["type"] == "ArchiveCurrent" && c["status"] == "False" && c["reason"] == "GapFound")
                .cloned())
        })?;
        ensure!(
            from > before && from <= compacted && to >= compacted,
            "gap {from}..={to}: archived up to {before}, compacted at {compacted}"
        );
        // A fresh snapshot at the gap's end, and segments continue it.
        let snapshots: Vec<String> = moto
            .list_objects(BUCKET, &format!("{base_key}_v"))?
            .into_iter()
            .map(|o| o.key)
            .filter(|k| !k.ends_with(".meta.json"))
            .collect();
        ensure!(
            snapshots.iter().any(|k| k.starts_with(&format!("{base_key}_v{to}_"))),
            "no snapshot at revision {to}: {snapshots:?}"
        );
        let mut after = Vec::new();
        rt.block_on(write_for(&mut c, 2, i + 1000, &mut after))?;
        let last = after.iter().map(|c| c.revision).max().context("no writes")?;
        let segments = wait_until(Duration::from_secs(60), "the archive to reach the writes after the gap", || {
            let segs = read_segments(&moto, base_key)?;
            let reach =
                segs.iter().filter(|(h, _)| h["baseRevision"] == to).filter_map(|(h, _)| h["to"].as_i64()).max();
            Ok((reach.unwrap_or(0) >= last).then_some(segs))
        })?;
        let events: Vec<&Change> = segments.iter().flat_map(|(_, evs)| evs).collect();
        for ch in &after {
            ensure!(events.contains(&ch), "acked change after the gap missing: {ch:?}");
        }
        for (h, _) in &segments {
            let (f, t) = (h["from"].as_i64().unwrap_or(0), h["to"].as_i64().unwrap_or(0));
            ensure!(t < from || f > to, "segment {f}..={t} overlaps the gap {from}..={to}");
        }
        ensure!(first < from, "the first snapshot {first} is not before the gap");
        // Repeats of one Event are folded into one object with a count: count those too.
        let events = ns.json(&["get", "events", "-o", "json"])?;
        let said: Vec<&Value> = events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["involvedObject"]["name"] == "series" && e["reason"] == "ArchiveGap")
            .collect();
        let times: i64 =
            said.iter().map(|e| e["series"]["count"].as_i64().or(e["count"].as_i64()).unwrap_or(1).max(1)).sum();
        ensure!(times == 1, "the gap said {times} times: {said:?}");
        let note = said[0]["message"].as_str().unwrap_or_default();
        ensure!(note.contains(&format!("revisions {from}..={to}")), "{note}");
        Ok(())
    })
}

/// `maxBackups` retention takes the archive's old segments with the snapshots they continued:
/// with one snapshot kept, no segment ends at or before it, and the ones after it still reach
/// the last write without a hole (it restores every revision since).
#[test]
fn retention_deletes_the_segments_no_kept_snapshot_continues() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-archive-retention", |ns, _op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, "3.6.15", ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut c = rt.block_on(Client::connect([ep.as_str()], None))?;
        let base_key = "kept/ex";
        let storage = storage_block(&moto, base_key, "creds");
        let policy = "  backupPolicy: {backupIntervalInSecond: 6, maxBackups: 1, timeoutInSecond: 30}\n  continuous: {enabled: true, flushIntervalInSecond: 1}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        wait_backup_succeeded(ns, "series")?;
        let snapshots = |moto: &MotoServer| -> Result<Vec<i64>> {
            Ok(moto
                .list_objects(BUCKET, &format!("{base_key}_v"))?
                .into_iter()
                .map(|o| o.key)
                .filter(|k| !k.ends_with(".meta.json"))
                .filter_map(|k| k[base_key.len() + 2..].split('_').next().and_then(|r| r.parse().ok()))
                .collect())
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut i = 0;
        let mut last = 0;
        wait_until(Duration::from_secs(180), "three snapshots taken after the archive started", || {
            let mut changes = Vec::new();
            i = rt.block_on(write_for(&mut c, 2, i, &mut changes))?;
            last = changes.iter().map(|c| c.revision).max().unwrap_or(last);
            seen.extend(snapshots(&moto)?);
            Ok((seen.len() >= 4).then_some(()))
        })?;
        wait_until(
            Duration::from_secs(60),
            "one snapshot kept, no segment before it, the rest reaching the last write",
            || {
                let kept = snapshots(&moto)?;
                ensure!(kept.len() == 1, "snapshots kept: {kept:?}");
                let oldest = kept[0];
                let segs = read_segments(&moto, base_key)?;
                let mut spans: Vec<(i64, i64)> =
                    segs.iter().filter_map(|(h, _)| Some((h["from"].as_i64()?, h["to"].as_i64()?))).collect();
                spans.sort();
                let reach = chain_reach(oldest, &spans)?;
                Ok((reach >= last).then_some(()))
            },
        )?;
        let evs = e2e_events(ns, "EtcdBackup", "series")?;
        ensure!(
            evs.iter().any(|(r, n)| r == "BackupSucceeded" && n.contains("archive segments up to revision")),
            "{evs:?}"
        );
        Ok(())
    })
}

fn tempdir(name: &str) -> Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("{name}-archive-creds"));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

//! Restore drills (issue 29) on the real local cluster, with the real operator, real etcd and
//! a real S3 server (moto): an EtcdBackup with a continuous archive and `restoreDrill` follows a
//! 3-member cluster while a writer runs puts, deletes, transactions and puts on a lease. Drills
//! must pass on the healthy archive (under writes, with segments replayed after the snapshot,
//! leases in the live cluster and none in the restore), and fail — with a Warning Event, the
//! metric at 0 and the reason in `status.lastDrill` — on a damaged one:
//!
//! - one flipped byte in a segment: the drill names the segment;
//! - a segment rewritten with one changed value and a valid checksum (only this test's own
//!   reading of the documented format can make one): the restore replays fine, and only the
//!   comparison with the live cluster finds it — proof that the comparison compares.
//!
//! With the archive put back, the next drill passes again. Drills read and never write: the
//! live cluster's keys and revision and the store's objects are the same after them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, wait_until};
use etcd_client::{Client, GetOptions, PutOptions, Txn, TxnOp};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const BASE_KEY: &str = "drill/ex";
const PREFIX: &str = "dr/";
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// One key as a range returns it: (value, create_revision, mod_revision, version, lease).
type Kv = (Vec<u8>, i64, i64, i64, i64);

/// Every key of the live cluster with its revisions and lease, and the revision read at.
async fn live_state(c: &mut Client) -> Result<(i64, BTreeMap<Vec<u8>, Kv>)> {
    let r = c.get("", Some(GetOptions::new().with_all_keys())).await?;
    let rev = r.header().context("no header")?.revision();
    let kvs = r
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key().to_vec(),
                (kv.value().to_vec(), kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease()),
            )
        })
        .collect();
    Ok((rev, kvs))
}

/// Writes until `stop`: puts, deletes and two-key transactions over 40 keys, and every tenth
/// write a put on `lease`. Returns the last revision acknowledged.
fn writer(
    ep: String,
    lease: i64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Result<i64>> {
    std::thread::spawn(move || -> Result<i64> {
        let rt = tokio::runtime::Runtime::new()?;
        rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            let (mut i, mut last) = (0usize, 0i64);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let key = format!("{PREFIX}k{:02}", i % 40);
                let value = format!("v{i}");
                let header = if i % 7 == 3 {
                    c.delete(key, None).await?.header().cloned()
                } else if i % 11 == 5 {
                    let ops = vec![
                        TxnOp::put(key, value.clone(), None),
                        TxnOp::put(format!("{PREFIX}t{:02}", i % 13), value, None),
                    ];
                    c.txn(Txn::new().and_then(ops)).await?.header().cloned()
                } else if i % 10 == 9 {
                    let on_lease = PutOptions::new().with_lease(lease);
                    c.put(format!("{PREFIX}leased/{:02}", i % 17), value, Some(on_lease)).await?.header().cloned()
                } else {
                    c.put(key, value, None).await?.header().cloned()
                };
                last = last.max(header.context("no header")?.revision());
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok(last)
        })
    })
}

fn last_drill(ns: &TestNamespace) -> Result<Value> {
    Ok(get(ns, "etcdbackup", "series")?["status"]["lastDrill"].clone())
}

fn started(d: &Value) -> Option<jiff::Timestamp> {
    d["time"].as_str()?.parse().ok()
}

/// The first drill that started after `after` and ended (`status.lastDrill` then says so).
fn drill_after(ns: &TestNamespace, after: jiff::Timestamp, what: &str) -> Result<Value> {
    let d = wait_until(Duration::from_secs(240), &format!("a drill started after {after} ({what})"), || {
        let d = last_drill(ns)?;
        Ok(started(&d).is_some_and(|t| t > after).then_some(d))
    })?;
    eprintln!("drill ({what}): {d}");
    Ok(d)
}

/// The operator's `/metrics`, from the address its log says it listens on (a process
/// operator; None in-cluster, whose port this test does not reach).
fn metrics(op: &Operator) -> Result<Option<String>> {
    if op.pid().is_none() {
        return Ok(None);
    }
    let log = op.log_text();
    let line = log.lines().find(|l| l.contains("serving /healthz")).context("the operator logged no address")?;
    let addr = line.split("addr=").nth(1).and_then(|r| r.split_whitespace().next()).context("no addr= in the log")?;
    let body = ureq::get(&format!("http://{addr}/metrics")).call()?.body_mut().read_to_string()?;
    Ok(Some(body))
}

/// The value of the series `name{namespace="<ns>",name="series"}`.
fn series(text: &str, ns: &TestNamespace, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{namespace=\"{}\",name=\"series\"}} ", ns.name);
    text.lines().find_map(|l| l.strip_prefix(&prefix)).and_then(|v| v.trim().parse().ok())
}

fn check_metric(op: &Operator, ns: &TestNamespace, passed: bool) -> Result<()> {
    let Some(text) = metrics(op)? else {
        eprintln!("the operator runs in-cluster: its drill metrics are not read here");
        return Ok(());
    };
    let want = if passed { 1.0 } else { 0.0 };
    let got = series(&text, ns, "etcd_operator_backup_drill_last_success");
    ensure!(got == Some(want), "etcd_operator_backup_drill_last_success is {got:?}, not {want}");
    let took = series(&text, ns, "etcd_operator_backup_drill_duration_seconds");
    ensure!(took.is_some_and(|s| s > 0.0), "etcd_operator_backup_drill_duration_seconds is {took:?}");
    ensure!(series(&text, ns, "etcd_operator_backup_drill_last_timestamp_seconds").is_some(), "no drill timestamp");
    Ok(())
}

/// A segment as stored: its header and its event lines, read by the documented format.
struct Seg {
    key: String,
    bytes: Vec<u8>,
    header: Value,
    lines: Vec<Value>,
}

fn segments(moto: &MotoServer) -> Result<Vec<Seg>> {
    let mut out = Vec::new();
    for o in moto.list_objects(BUCKET, &format!("{BASE_KEY}.archive/"))? {
        let bytes = moto.get_object(BUCKET, &o.key)?;
        let nl = bytes.iter().position(|b| *b == b'\n').context("no header line")?;
        let header: Value = serde_json::from_slice(&bytes[..nl])?;
        ensure!(header["format"] == "etcd-operator-rs/segment/v1", "{}: header {header}", o.key);
        let lines = bytes[nl + 1..]
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(serde_json::from_slice)
            .collect::<Result<_, _>>()?;
        out.push(Seg { key: o.key, bytes, header, lines });
    }
    Ok(out)
}

/// The bytes of a segment with these lines: the header's checksum computed again, so that it
/// passes every check a restore makes.
fn encode(header: &Value, lines: &[Value]) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    for l in lines {
        body.extend(serde_json::to_vec(l)?);
        body.push(b'\n');
    }
    let mut header = header.clone();
    header["sha256"] = Value::from(sha256_hex(&body)?);
    let mut out = serde_json::to_vec(&header)?;
    out.push(b'\n');
    out.extend(body);
    Ok(out)
}

/// Every object of the bucket with its size: what the store holds.
fn bucket(moto: &MotoServer) -> Result<Vec<(String, u64)>> {
    Ok(moto.list_objects(BUCKET, "")?.into_iter().map(|o| (o.key, o.size)).collect())
}

#[test]
fn a_drill_passes_on_a_healthy_archive_and_fails_on_a_damaged_one() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-drill", |ns, op| {
        let t0 = Instant::now();
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut client = rt.block_on(Client::connect([ep.as_str()], None))?;
        // Keys on a lease that outlives the test: the live cluster has them with their lease, a
        // restore without (it writes no leases), and drills must pass all the same.
        let lease = rt.block_on(client.lease_grant(3600, None))?.id();
        rt.block_on(async {
            for n in 0..5 {
                client.put(format!("{PREFIX}leased/{n:02}"), "l", Some(PutOptions::new().with_lease(lease))).await?;
            }
            anyhow::Ok(())
        })?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writes = writer(ep.clone(), lease, stop.clone());

        let storage = storage_block(&moto, BASE_KEY, "creds");
        let policy = "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 1}\n  restoreDrill: {intervalInSecond: 20, timeoutInSecond: 180}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        let under_writes = wait_backup_succeeded(ns, "series").and_then(|b| {
            let snapshot = b["status"]["etcdRevision"].as_i64().context("no etcdRevision")?;
            // Every drill on the healthy archive passes; wait for one that replayed segments.
            let d = wait_until(Duration::from_secs(300), "a passing drill past the snapshot, under writes", || {
                let d = last_drill(ns)?;
                ensure!(d["succeeded"] != false, "a drill failed on a healthy archive: {d}");
                let past = d["revision"].as_i64().unwrap_or(0) > snapshot && d["segments"].as_i64().unwrap_or(0) > 0;
                Ok((d["succeeded"] == true && past).then_some(d))
            })?;
            anyhow::Ok((snapshot, d))
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let last = writes.join().map_err(|_| anyhow::anyhow!("the writer panicked"))??;
        let (snapshot, d) = under_writes?;
        eprintln!("[{:?}] drill under writes: {d}", t0.elapsed());
        let revision = d["revision"].as_i64().unwrap_or(0);
        let events = e2e_events(ns, "EtcdBackup", "series")?;
        ensure!(
            events.iter().any(|(r, m)| r == "DrillSucceeded" && m.contains(&format!("revision {revision}"))),
            "no DrillSucceeded Event for revision {revision}: {events:?}"
        );
        check_metric(op, ns, true)?;

        // Writes stopped: the archive becomes durable to the last one, and a drill then restores
        // exactly that revision. Nothing a drill does changes the store or the live cluster.
        wait_archive_durable(ns, "series", last)?;
        let (live_rev, before) = rt.block_on(live_state(&mut client))?;
        ensure!(live_rev == last, "the live cluster is at revision {live_rev}, the writer's last was {last}");
        ensure!(before.values().any(|kv| kv.4 == lease), "no key on the lease");
        let stored = bucket(&moto)?;
        let d = drill_after(ns, jiff::Timestamp::now(), "at the last write")?;
        ensure!(d["succeeded"] == true, "the drill at rest failed: {d}");
        ensure!(d["revision"] == last, "the drill restored revision {}, not the last write {last}", d["revision"]);
        ensure!(d["snapshot"].as_str().is_some_and(|s| s.contains(&format!("{BASE_KEY}_v{snapshot}_"))), "{d}");
        ensure!(bucket(&moto)? == stored, "the store changed during a drill");

        // (a) One flipped byte in a segment: the drill fails naming it.
        let segs = segments(&moto)?;
        ensure!(!segs.is_empty(), "no segments");
        let seg = &segs[segs.len() / 2];
        let mut flipped = seg.bytes.clone();
        let at = flipped.len() - 3;
        flipped[at] ^= 0x01;
        moto.put_object(BUCKET, &seg.key, &flipped)?;
        let d = drill_after(ns, jiff::Timestamp::now(), "a flipped byte")?;
        let why = d["message"].as_str().unwrap_or_default();
        ensure!(d["succeeded"] == false, "a drill passed on a damaged segment: {d}");
        ensure!(why.contains(&seg.key) && why.contains("damaged"), "the failure does not name {}: {why}", seg.key);
        let events = e2e_events(ns, "EtcdBackup", "series")?;
        ensure!(
            events.iter().any(|(r, m)| r == "DrillFailed" && m.contains(&seg.key)),
            "no DrillFailed Event naming {}: {events:?}",
            seg.key
        );
        let warning = ns.json(&["get", "events", "--field-selector", "reason=DrillFailed", "-o", "json"])?;
        ensure!(warning["items"].as_array().into_iter().flatten().all(|e| e["type"] == "Warning"), "{warning}");
        check_metric(op, ns, false)?;
        moto.put_object(BUCKET, &seg.key, &seg.bytes)?;

        // (b) One changed value in a segment rewritten with a valid checksum: replayed without a
        // complaint, found only by the comparison. The changed put is the last change of its key.
        let mut final_change: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for (i, s) in segs.iter().enumerate() {
            for (j, l) in s.lines.iter().enumerate() {
                final_change.insert(l["key"].as_str().unwrap_or_default().to_string(), (i, j));
            }
        }
        let (i, j) = final_change
            .iter()
            .filter(|(k, _)| B64.decode(k).is_ok_and(|k| k.starts_with(format!("{PREFIX}k").as_bytes())))
            .map(|(_, at)| *at)
            .find(|(i, j)| segs[*i].lines[*j]["op"] == "put")
            .context("no key whose last change is a put")?;
        let target = &segs[i];
        let mut lines = target.lines.clone();
        let key = String::from_utf8(B64.decode(lines[j]["key"].as_str().unwrap_or_default())?)?;
        lines[j]["value"] = Value::from(B64.encode("tampered"));
        moto.put_object(BUCKET, &target.key, &encode(&target.header, &lines)?)?;
        let d = drill_after(ns, jiff::Timestamp::now(), "a changed value with a valid checksum")?;
        let why = d["message"].as_str().unwrap_or_default();
        ensure!(d["succeeded"] == false, "a drill passed on a changed value of {key}: {d}");
        ensure!(why.contains("differs from the live cluster") && d["revision"] == last, "{d}");
        ensure!(
            e2e_events(ns, "EtcdBackup", "series")?.iter().any(|(r, m)| r == "DrillFailed" && m.contains("differs")),
            "no DrillFailed Event for the difference"
        );
        check_metric(op, ns, false)?;
        moto.put_object(BUCKET, &target.key, &target.bytes)?;

        // The archive put back: drills pass again.
        let d = drill_after(ns, jiff::Timestamp::now(), "the archive put back")?;
        ensure!(d["succeeded"] == true, "the drill on the repaired archive failed: {d}");
        check_metric(op, ns, true)?;

        // Nothing of the live cluster changed: every key, its revisions and lease, and the
        // revision itself (a drill that wrote anything would have raised it).
        let (rev_after, after) = rt.block_on(live_state(&mut client))?;
        ensure!(rev_after == live_rev, "the live cluster moved from revision {live_rev} to {rev_after}");
        ensure!(after == before, "the live cluster's keys changed during the drills");
        let left = ns.run(&["get", "pods", "-l", "etcd_backup_role=drill", "-o", "name"])?;
        let left: Vec<&str> = left.lines().collect();
        ensure!(left.len() <= 1, "finished drill pods are not deleted: {left:?}");
        eprintln!("[{:?}] done", t0.elapsed());
        Ok(())
    })
}

/// Without a continuous archive the newest restorable point is the newest snapshot: a drill
/// restores it and compares at its revision. Once the live cluster has compacted past that
/// revision nothing can be compared, and a drill that verified nothing is a failed drill, not a
/// pass.
#[test]
fn a_drill_of_snapshots_alone_passes_then_cannot_verify_past_compaction() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-drill-compacted", |ns, op| {
        ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
        ns.apply(&cluster_manifest(&ns.name, "ex", 1, VERSION, ""))?;
        wait_healthy(ns, "ex", 1, CREATE)?;
        let ep = client_endpoint(ns, "ex")?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut client = rt.block_on(Client::connect([ep.as_str()], None))?;
        rt.block_on(async {
            for n in 0..50 {
                client.put(format!("{PREFIX}s{n:02}"), format!("v{n}"), None).await?;
            }
            anyhow::Ok(())
        })?;
        let storage = storage_block(&moto, BASE_KEY, "creds");
        let policy = "  backupPolicy: {backupIntervalInSecond: 3600}\n  restoreDrill: {intervalInSecond: 15}\n";
        ns.apply(&backup_manifest(&ns.name, "series", "ex", "S3", &storage, policy))?;
        let b = wait_backup_succeeded(ns, "series")?;
        let snapshot = b["status"]["etcdRevision"].as_i64().context("no etcdRevision")?;
        let d = wait_until(Duration::from_secs(180), "a drill of the snapshot", || {
            let d = last_drill(ns)?;
            Ok(started(&d).is_some().then_some(d))
        })?;
        eprintln!("drill (the snapshot alone): {d}");
        ensure!(d["succeeded"] == true, "the drill of a healthy snapshot failed: {d}");
        ensure!(d["revision"] == snapshot && d["segments"] == 0, "{d}");
        check_metric(op, ns, true)?;

        // Writes after the snapshot, then a compaction of everything before them.
        let head = rt.block_on(async {
            let mut head = 0;
            for n in 0..10 {
                head =
                    client.put(format!("{PREFIX}later{n}"), "x", None).await?.header().context("no header")?.revision();
            }
            client.compact(head, None).await?;
            anyhow::Ok(head)
        })?;
        ensure!(head > snapshot, "no write after the snapshot");
        let d = drill_after(ns, jiff::Timestamp::now(), "after a compaction past the snapshot")?;
        let why = d["message"].as_str().unwrap_or_default();
        ensure!(d["succeeded"] == false, "a drill that could not compare passed: {d}");
        ensure!(
            why.contains(&format!("compacted past revision {snapshot}")) && why.contains("nothing was verified"),
            "{why}"
        );
        check_metric(op, ns, false)?;
        Ok(())
    })
}

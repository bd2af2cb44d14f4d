//! Point-in-time restores (issue 29) on the real local cluster, with the real operator, real etcd
//! and a real S3 server (moto): an EtcdBackup with a continuous archive follows a 3-member
//! cluster while a writer runs puts, deletes and transactions, then `del --prefix` wipes the
//! prefix. EtcdRestores with `pointInTime` must give exactly the state etcd's own MVCC history
//! had at the revision just before the delete, and at a moment taken in a pause of the writer
//! (the revision reached then is known): every key and value, nothing more. A target the archive
//! does not cover, and a segment with one flipped byte, are refused with what is restorable or
//! the segment named, and nothing is created. A cluster with authentication is drilled and
//! restored to a point logged in as its root.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::backups::*;
use common::*;
use e2e::objstore::{MotoServer, ObjectServer};
use e2e::{TestNamespace, wait_until};
use etcd_client::{Client, DeleteOptions, GetOptions, Txn, TxnOp};
use serde_json::Value;

const VERSION: &str = "3.6.15";
const BASE_KEY: &str = "pitr/ex";
const PREFIX: &str = "pit/";

/// Puts, deletes and two-key transactions over 30 keys for `secs`; the last revision acked.
async fn write_for(c: &mut Client, secs: u64, i0: usize) -> Result<(usize, i64)> {
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut i, mut last) = (i0, 0);
    while Instant::now() < end {
        let key = format!("{PREFIX}k{:02}", i % 30);
        let value = format!("v{i}");
        let header = if i % 7 == 3 {
            c.delete(key, None).await?.header().cloned()
        } else if i % 11 == 5 {
            let ops =
                vec![TxnOp::put(key, value.clone(), None), TxnOp::put(format!("{PREFIX}t{:02}", i % 13), value, None)];
            c.txn(Txn::new().and_then(ops)).await?.header().cloned()
        } else {
            c.put(key, value, None).await?.header().cloned()
        };
        last = last.max(header.context("no header")?.revision());
        i += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((i, last))
}

/// Every key and its value.
type KeySpace = BTreeMap<Vec<u8>, Vec<u8>>;

/// Every key and value at `revision` (etcd's own MVCC history).
async fn state_at(c: &mut Client, revision: i64) -> Result<KeySpace> {
    let r = c.get("", Some(GetOptions::new().with_all_keys().with_revision(revision))).await?;
    Ok(r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect())
}

/// Runs `kubectl etcd` (the workspace's plugin binary) in the test's namespace.
fn kubectl_etcd(ns: &TestNamespace, args: &[&str]) -> Result<String> {
    let bin = plugin_bin();
    ensure!(bin.exists(), "{} is missing: cargo build -p kubectl-etcd", bin.display());
    e2e::run(std::process::Command::new(&bin).env("KUBECONFIG", kubeconfig()).args(["-n", &ns.name]).args(args))
}

fn pitr_manifest(ns: &str, name: &str, a: &Archived, point: &str) -> String {
    let (kind, storage) = (a.storage_type, &a.storage);
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  etcdCluster: {{name: {name}, spec: {{size: 1, version: \"{VERSION}\"}}}}\n  backupStorageType: {kind}\n  {storage}\n  pointInTime: {point}\n"
    )
}

/// The series on a PersistentVolumeClaim.
const PVC_STORAGE: &str = "pvc: {claimName: backups, path: pitr/ex}";

/// The archived cluster, written to and then wiped, with its archive durable to the end.
struct Archived {
    rt: tokio::runtime::Runtime,
    client: Client,
    storage_type: &'static str,
    storage: String,
    /// The last revision before the writer's pause, and the moment in the middle of it.
    paused_at: (i64, String),
    /// The revision of `del --prefix`.
    deleted_at: i64,
    last: i64,
}

/// On S3 (moto), or with `moto` None on a claim.
fn archive_a_cluster(moto: Option<&MotoServer>, ns: &TestNamespace) -> Result<Archived> {
    let (storage_type, storage) = match moto {
        Some(moto) => {
            ns.apply(&moto.secret_manifest(&ns.name, "creds"))?;
            ("S3", storage_block(moto, BASE_KEY, "creds"))
        }
        None => {
            ns.apply(&claim_manifest(&ns.name, "backups"))?;
            ("PVC", PVC_STORAGE.to_string())
        }
    };
    ns.apply(&cluster_manifest(&ns.name, "ex", 3, VERSION, ""))?;
    wait_healthy(ns, "ex", 3, CREATE)?;
    let ep = client_endpoint(ns, "ex")?;
    let rt = tokio::runtime::Runtime::new()?;
    let mut client = rt.block_on(Client::connect([ep.as_str()], None))?;
    let policy =
        "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 1}\n";
    // Writes while the first snapshot streams: it may then hold a later revision than its
    // sidecar records, which the replay must take in its stride.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let background = {
        let (stop, ep) = (stop.clone(), ep.clone());
        std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Runtime::new()?;
            rt.block_on(async {
                let mut c = Client::connect([ep.as_str()], None).await?;
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    c.put(format!("{PREFIX}bg{:02}", i % 20), format!("b{i}"), None).await?;
                    i += 1;
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                Ok(())
            })
        })
    };
    ns.apply(&backup_manifest(&ns.name, "series", "ex", storage_type, &storage, policy))?;
    let archiving = wait_backup_succeeded(ns, "series").and_then(|_| {
        wait_until(Duration::from_secs(120), "condition Archiving True", || {
            let b = get(ns, "etcdbackup", "series")?;
            let conds = b["status"]["conditions"].as_array().cloned().unwrap_or_default();
            Ok(conds.iter().any(|c| c["type"] == "Archiving" && c["status"] == "True").then_some(()))
        })
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    background.join().map_err(|_| anyhow::anyhow!("the background writer panicked"))??;
    archiving?;
    let (i, before_pause) = rt.block_on(write_for(&mut client, 8, 0))?;
    // A pause of 3 s: the moment in its middle names exactly the revision reached before it.
    std::thread::sleep(Duration::from_millis(1500));
    let moment = jiff::Timestamp::now().to_string();
    std::thread::sleep(Duration::from_millis(1500));
    let (_, _) = rt.block_on(write_for(&mut client, 4, i))?;
    // More keys under the prefix than etcd lets one transaction touch (128 by default): the
    // delete below is one revision the replay must apply as one transaction all the same.
    rt.block_on(async {
        for n in 0..200 {
            client.put(format!("{PREFIX}bulk/{n:03}"), "x", None).await?;
        }
        anyhow::Ok(())
    })?;
    let deleted_at = rt
        .block_on(client.delete(PREFIX, Some(DeleteOptions::new().with_prefix())))?
        .header()
        .context("no header")?
        .revision();
    let (_, last) = rt.block_on(write_for(&mut client, 2, 10_000))?;
    wait_archive_durable(ns, "series", last)?;
    Ok(Archived { rt, client, storage_type, storage, paused_at: (before_pause, moment), deleted_at, last })
}

fn wait_restore(ns: &TestNamespace, name: &str) -> Result<Value> {
    wait_until(Duration::from_secs(400), &format!("EtcdRestore {name} to finish"), || {
        let r = get(ns, "etcdrestore", name)?;
        ensure!(r["status"]["phase"] != "Failed", "restore failed: {}", r["status"]["reason"]);
        Ok((r["status"]["succeeded"] == true).then_some(r))
    })
}

/// The restored cluster's whole key space.
fn restored_state(a: &Archived, ns: &TestNamespace, name: &str) -> Result<(KeySpace, i64)> {
    wait_healthy(ns, name, 1, CREATE)?;
    let ep = client_endpoint(ns, name)?;
    let read = || -> Result<(KeySpace, i64)> {
        a.rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            let r = c.get("", Some(GetOptions::new().with_all_keys())).await?;
            let rev = r.header().context("no header")?.revision();
            Ok((r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect(), rev))
        })
    };
    // The new client Service may refuse connections for a moment after its member is ready
    // (kube-proxy programs its endpoints a little later).
    let mut last = None;
    let got =
        wait_until(Duration::from_secs(60), &format!("a read of {name} through its client Service"), || match read() {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                last = Some(format!("{e:#}"));
                Ok(None)
            }
        });
    got.with_context(|| format!("last error: {}", last.unwrap_or_default()))
}

#[test]
fn a_restore_to_a_revision_or_a_moment_gives_exactly_the_state_history_had() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-pitr", |ns, _op| {
        let mut a = archive_a_cluster(Some(&moto), ns)?;
        let before_delete = a.deleted_at - 1;
        let want = a.rt.block_on(state_at(&mut a.client, before_delete))?;
        ensure!(want.keys().any(|k| k.starts_with(PREFIX.as_bytes())), "the prefix was empty before its delete");

        ns.apply(&pitr_manifest(&ns.name, "at-rev", &a, &format!("{{revision: {before_delete}}}")))?;
        let r = wait_restore(ns, "at-rev")?;
        ensure!(r["status"]["etcdRevision"] == before_delete, "restored to {}", r["status"]["etcdRevision"]);
        let from = r["status"]["restoredFrom"].as_str().unwrap_or_default().to_string();
        ensure!(from.starts_with(&format!("s3://{BUCKET}/{BASE_KEY}.restores/")), "restoredFrom {from}");
        let (got, rev) = restored_state(&a, ns, "at-rev")?;
        ensure!(
            got == want,
            "state differs from etcd's history at {before_delete}: {} keys vs {}",
            got.len(),
            want.len()
        );
        ensure!(rev >= before_delete, "the restored cluster is at revision {rev}, before {before_delete}");

        // The moment through the plugin, as a person would ask for it.
        let (paused, moment) = a.paused_at.clone();
        let want = a.rt.block_on(state_at(&mut a.client, paused))?;
        kubectl_etcd(
            ns,
            &[
                "restore",
                "at-time",
                &format!("--from=s3:{BUCKET}/{BASE_KEY}"),
                &format!("--time={moment}"),
                "--credentials-secret=creds",
                &format!("--endpoint={}", moto.endpoint()),
                "--force-path-style",
                "--size=1",
                &format!("--version={VERSION}"),
            ],
        )?;
        let r = wait_restore(ns, "at-time")?;
        ensure!(
            r["status"]["etcdRevision"] == paused,
            "the moment {moment} in the writer's pause restored revision {}, not {paused}",
            r["status"]["etcdRevision"]
        );
        let (got, _) = restored_state(&a, ns, "at-time")?;
        ensure!(got == want, "state differs from etcd's history at {paused}");
        let events = e2e_events(ns, "EtcdRestore", "at-time")?;
        ensure!(events.iter().any(|(reason, _)| reason == "PointInTimeReplayed"), "{events:?}");
        Ok(())
    })
}

#[test]
fn a_point_outside_the_archive_or_a_damaged_segment_is_refused_and_nothing_is_created() -> Result<()> {
    let moto = MotoServer::start()?;
    moto.create_bucket(BUCKET)?;
    with_operator("e2e-pitr-refused", |ns, _op| {
        let a = archive_a_cluster(Some(&moto), ns)?;
        let failed = |name: &str| -> Result<String> {
            let r = wait_until(Duration::from_secs(300), &format!("EtcdRestore {name} to be refused"), || {
                let r = get(ns, "etcdrestore", name)?;
                ensure!(r["status"]["succeeded"] != true, "restored: {}", r["status"]);
                Ok((r["status"]["phase"] == "Failed").then_some(r))
            })?;
            ensure!(ns.run(&["get", "etcdcluster", name]).is_err(), "a refused restore created EtcdCluster {name}");
            Ok(r["status"]["reason"].as_str().unwrap_or_default().to_string())
        };

        let beyond = a.last + 100_000;
        ns.apply(&pitr_manifest(&ns.name, "beyond", &a, &format!("{{revision: {beyond}}}")))?;
        let why = failed("beyond")?;
        ensure!(why.contains("after the last durable change") && why.contains("restorable: revisions"), "{why}");
        let events = e2e_events(ns, "EtcdRestore", "beyond")?;
        ensure!(events.iter().any(|(reason, _)| reason == "PointInTimeRefused"), "{events:?}");

        // One flipped byte in the segment that holds the delete.
        let segs = moto.list_objects(BUCKET, &format!("{BASE_KEY}.archive/"))?;
        let seg = segs
            .iter()
            .find(|o| {
                let name = o.key.rsplit('/').next().unwrap_or_default().trim_end_matches(".seg");
                let (from, to) = name.split_once('-').unwrap_or(("0", "0"));
                (from.parse().unwrap_or(0)..=to.parse().unwrap_or(0)).contains(&a.deleted_at)
            })
            .context("no segment holds the delete")?;
        let mut bytes = moto.get_object(BUCKET, &seg.key)?;
        let at = bytes.len() - 3;
        bytes[at] ^= 0x01;
        moto.put_object(BUCKET, &seg.key, &bytes)?;
        ns.apply(&pitr_manifest(&ns.name, "damaged", &a, &format!("{{revision: {}}}", a.deleted_at)))?;
        let why = failed("damaged")?;
        ensure!(why.contains(&seg.key) && why.contains("damaged"), "{why}");

        // Nothing running was touched.
        wait_healthy(ns, "ex", 3, Duration::from_secs(60))?;
        Ok(())
    })
}

/// The same on a claim: the archiver, the replaying verify pod and the restored member's init
/// containers all use the volume. Restored to the last write, after the delete: the replay
/// applies the delete of more than 200 keys as the one transaction it was, and the state at
/// the end comes back exactly.
#[test]
fn a_series_on_a_volume_restores_to_the_last_write_after_the_delete() -> Result<()> {
    with_operator("e2e-pitr-pvc", |ns, _op| {
        let mut a = archive_a_cluster(None, ns)?;
        let last = a.last;
        let want = a.rt.block_on(state_at(&mut a.client, last))?;
        ensure!(!want.keys().any(|k| k.starts_with(format!("{PREFIX}bulk/").as_bytes())), "the bulk keys survived");
        ns.apply(&pitr_manifest(&ns.name, "on-volume", &a, &format!("{{revision: {last}}}")))?;
        let r = wait_restore(ns, "on-volume")?;
        ensure!(r["status"]["etcdRevision"] == last, "restored to {}", r["status"]["etcdRevision"]);
        let from = r["status"]["restoredFrom"].as_str().unwrap_or_default();
        ensure!(from.starts_with("pvc://backups/pitr/ex.restores/"), "restoredFrom {from}");
        let (got, _) = restored_state(&a, ns, "on-volume")?;
        ensure!(got == want, "state differs from etcd's history at {last}");
        Ok(())
    })
}

/// A cluster with `spec.auth` (issue 29: the archive follows the cluster through auth): the
/// archiver and the drill pods log in with the cluster's root Secret, a drill passes, and a
/// restore to the revision before a `del --prefix` replays the archive logged in as the
/// snapshot's root. The restored cluster keeps authentication on and the keys of that revision
/// exactly. A restore whose cluster has no `spec.auth` (no root login to give the replay) is
/// refused saying so, and creates nothing.
#[test]
fn a_cluster_with_authentication_is_drilled_and_restored_to_a_point() -> Result<()> {
    with_operator("e2e-pitr-auth", |ns, _op| {
        let n = ns.name.clone();
        let password = "pitr-root-password-4e2e";
        ns.apply(&format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: ex-root, namespace: {n}}}\nstringData: {{username: root, password: {password}}}\n"
        ))?;
        ns.apply(&claim_manifest(&n, "backups"))?;
        ns.apply(&cluster_manifest(&n, "ex", 3, VERSION, "  auth: {enabled: true, rootSecret: ex-root}\n"))?;
        wait_healthy(ns, "ex", 3, CREATE)?;
        wait_until(CREATE, "condition Authentication Enabled", || {
            let c = cluster(ns, "ex")?;
            Ok(condition(&c, "Authentication").filter(|x| x["reason"] == "Enabled").map(drop))
        })?;
        let rt = tokio::runtime::Runtime::new()?;
        let login = etcd_client::ConnectOptions::new()
            .with_user("root", password)
            .with_connect_timeout(Duration::from_secs(3))
            .with_timeout(Duration::from_secs(10));
        let logged_in = |cluster: &str| -> Result<Client> {
            let ep = client_endpoint(ns, cluster)?;
            wait_until(Duration::from_secs(60), &format!("a client of {cluster} logged in as root"), || {
                Ok(rt
                    .block_on(async {
                        let mut c = Client::connect([ep.as_str()], Some(login.clone())).await?;
                        c.get("probe", None).await?;
                        anyhow::Ok(c)
                    })
                    .ok())
            })
        };
        let mut client = logged_in("ex")?;

        let policy = "  backupPolicy: {backupIntervalInSecond: 3600}\n  continuous: {enabled: true, flushIntervalInSecond: 1}\n  restoreDrill: {intervalInSecond: 20, timeoutInSecond: 180}\n";
        ns.apply(&backup_manifest(&n, "series", "ex", "PVC", PVC_STORAGE, policy))?;
        let snapshot =
            wait_backup_succeeded(ns, "series")?["status"]["etcdRevision"].as_i64().context("no etcdRevision")?;
        let (_, _) = rt.block_on(write_for(&mut client, 6, 0))?;
        let deleted_at = rt
            .block_on(client.delete(PREFIX, Some(DeleteOptions::new().with_prefix())))?
            .header()
            .context("no header")?
            .revision();
        let (_, last) = rt.block_on(write_for(&mut client, 2, 10_000))?;
        wait_archive_durable(ns, "series", last)?;
        let d = wait_until(Duration::from_secs(300), "a passing drill that replayed past the snapshot", || {
            let d = get(ns, "etcdbackup", "series")?["status"]["lastDrill"].clone();
            ensure!(d["succeeded"] != false, "a drill of the cluster with authentication failed: {d}");
            let past = d["revision"].as_i64().unwrap_or(0) > snapshot && d["segments"].as_i64().unwrap_or(0) > 0;
            Ok((d["succeeded"] == true && past).then_some(d))
        })?;
        eprintln!("drill: {d}");

        let before_delete = deleted_at - 1;
        let want = rt.block_on(state_at(&mut client, before_delete))?;
        ensure!(want.keys().any(|k| k.starts_with(PREFIX.as_bytes())), "the prefix was empty before its delete");
        let restore = |name: &str, auth: &str| {
            format!(
                "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: {name}, namespace: {n}}}\nspec:\n  etcdCluster: {{name: {name}, spec: {{size: 1, version: \"{VERSION}\"{auth}}}}}\n  backupStorageType: PVC\n  {PVC_STORAGE}\n  pointInTime: {{revision: {before_delete}}}\n"
            )
        };

        // No root login for the replay: refused, saying what to give, and nothing created.
        ns.apply(&restore("no-login", ""))?;
        let r = wait_until(Duration::from_secs(300), "EtcdRestore no-login to be refused", || {
            let r = get(ns, "etcdrestore", "no-login")?;
            ensure!(r["status"]["succeeded"] != true, "restored without a login: {}", r["status"]);
            Ok((r["status"]["phase"] == "Failed").then_some(r))
        })?;
        let why = r["status"]["reason"].as_str().unwrap_or_default();
        ensure!(why.contains("authentication enabled") && why.contains("rootSecret"), "{why}");
        ensure!(ns.run(&["get", "etcdcluster", "no-login"]).is_err(), "a refused restore created its cluster");

        // With the root Secret: exactly the state before the delete, authentication still on.
        ns.apply(&restore("back", ", auth: {enabled: true, rootSecret: ex-root}"))?;
        let r = wait_restore(ns, "back")?;
        ensure!(r["status"]["etcdRevision"] == before_delete, "restored to {}", r["status"]["etcdRevision"]);
        wait_healthy(ns, "back", 1, CREATE)?;
        let mut back = logged_in("back")?;
        let got = rt.block_on(async {
            let r = back.get("", Some(GetOptions::new().with_all_keys())).await?;
            anyhow::Ok(r.kvs().iter().map(|kv| (kv.key().to_vec(), kv.value().to_vec())).collect::<KeySpace>())
        })?;
        ensure!(
            got == want,
            "state differs from etcd's history at {before_delete}: {} keys vs {}",
            got.len(),
            want.len()
        );
        let ep = client_endpoint(ns, "back")?;
        let anonymous = rt.block_on(async {
            let mut c = Client::connect([ep.as_str()], None).await?;
            c.get("probe", None).await.map(drop)
        });
        let refused = anonymous.as_ref().err().map(|e| e.to_string()).unwrap_or_default();
        ensure!(
            refused.contains("user name is empty"),
            "the restored cluster served a client without a login: {anonymous:?}"
        );
        Ok(())
    })
}

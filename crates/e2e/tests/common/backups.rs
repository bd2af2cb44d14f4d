//! Helpers of the backup and restore tests: manifests, storage blocks, waits.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::objstore::ObjectServer;
use e2e::{TestNamespace, wait_until};
use serde_json::Value;

use super::member_pods;

pub const CREATE: Duration = Duration::from_secs(120);
pub const BACKUP: Duration = Duration::from_secs(120);
pub const RESTORE: Duration = Duration::from_secs(240);
pub const KEYS: usize = 100;
pub const BUCKET: &str = "etcd-backups";

pub fn get(ns: &TestNamespace, kind: &str, name: &str) -> Result<Value> {
    ns.json(&["get", kind, name, "-o", "json"])
}

pub fn sha256_hex(data: &[u8]) -> Result<String> {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    child.stdin.take().context("stdin")?.write_all(data)?;
    let out = child.wait_with_output()?;
    Ok(String::from_utf8(out.stdout)?.split_whitespace().next().unwrap_or_default().to_string())
}

/// The storage block of a spec for `server`: `s3: {...}` or `abs: {...}`.
pub fn storage_block(server: &dyn ObjectServer, path: &str, secret: &str) -> String {
    match server.storage_type() {
        "S3" => format!(
            "s3: {{path: \"{BUCKET}/{path}\", awsSecret: {secret}, endpoint: \"{}\", forcePathStyle: true}}",
            server.endpoint()
        ),
        _ => format!("abs: {{path: \"{BUCKET}/{path}\", absSecret: {secret}}}"),
    }
}

pub fn backup_manifest(ns: &str, name: &str, cluster: &str, storage_type: &str, storage: &str, policy: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdBackup\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  clusterName: {cluster}\n  storageType: {storage_type}\n  {storage}\n{policy}"
    )
}

pub fn restore_manifest(ns: &str, name: &str, cluster: &str, storage_type: &str, storage: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdRestore\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  etcdCluster: {{name: {cluster}}}\n  backupStorageType: {storage_type}\n  {storage}\n"
    )
}

pub fn wait_backup_succeeded(ns: &TestNamespace, name: &str) -> Result<Value> {
    wait_until(BACKUP, &format!("EtcdBackup {name} to succeed"), || {
        let b = get(ns, "etcdbackup", name)?;
        let st = &b["status"];
        ensure!(st["consecutiveFailures"].as_i64().unwrap_or(0) < 3, "backup keeps failing: {}", st["reason"]);
        Ok((st["succeeded"] == true).then_some(b))
    })
}

pub fn delete_cluster(ns: &TestNamespace, name: &str) -> Result<()> {
    ns.run(&["delete", "etcdcluster", name])?;
    wait_until(Duration::from_secs(120), "the cluster's pods to be gone", || {
        let left = ns.run(&["get", "pods", "-l", &format!("etcd_cluster={name}"), "-o", "name"])?;
        Ok(left.trim().is_empty().then_some(()))
    })
}

/// `restored` member pods ran the three restore init containers to success (the others joined
/// the restored ones). Polled: the operator reports members ready from etcd's answers, and the
/// kubelet may publish the init containers' final states a little after etcd is already serving.
pub fn check_members_restored(ns: &TestNamespace, name: &str, size: usize, restored: usize) -> Result<()> {
    wait_until(Duration::from_secs(60), "the restored members' init containers to be reported done", || {
        let pods = member_pods(ns, name)?;
        ensure!(pods.len() == size, "{} member pods", pods.len());
        let mut all_done = true;
        let mut with_restore = 0;
        for p in &pods {
            let inits: Vec<(String, Option<i64>)> = p["status"]["initContainerStatuses"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            (
                                c["name"].as_str().unwrap_or_default().to_string(),
                                c["state"]["terminated"]["exitCode"].as_i64(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !inits.iter().any(|(n, _)| n == "restore-fetch") {
                continue;
            }
            with_restore += 1;
            for want in ["restore-fetch", "restore-snapshot", "restore-finish"] {
                match inits.iter().find(|(n, _)| n == want) {
                    Some((_, Some(0))) => {}
                    Some((_, Some(code))) => {
                        anyhow::bail!("pod {} ran {want} with exit code {code}: {inits:?}", p["metadata"]["name"])
                    }
                    Some((_, None)) => all_done = false,
                    None => anyhow::bail!("pod {} has no {want} init container: {inits:?}", p["metadata"]["name"]),
                }
            }
        }
        ensure!(with_restore == restored, "{with_restore} members restored from the backup, expected {restored}");
        Ok(all_done.then_some(()))
    })
}
/// A 1 GiB ReadWriteOnce claim `name` of the default StorageClass (the local cluster's
/// provisioner: a 0777 host directory as a hostPath volume, to which the kubelet applies no
/// `fsGroup`).
pub fn claim_manifest(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

/// The host directory of a bound claim's hostPath volume (the tests run on the node).
pub fn claim_dir(ns: &TestNamespace, claim: &str) -> Result<std::path::PathBuf> {
    let pvc = ns.json(&["get", "pvc", claim])?;
    let pv = pvc["spec"]["volumeName"].as_str().context("claim not bound")?;
    let v = ns.kubectl.json(&["get", "pv", pv])?;
    Ok(v["spec"]["hostPath"]["path"].as_str().context("not a hostPath volume")?.into())
}

/// Owner uid and permission bits of `path`.
pub fn owner_and_mode(path: &std::path::Path) -> Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).with_context(|| path.display().to_string())?;
    Ok((m.uid(), m.mode() & 0o7777))
}

/// `(reason, note)` of the Events about one object of `kind`.
pub fn e2e_events(ns: &TestNamespace, kind: &str, name: &str) -> Result<Vec<(String, String)>> {
    // The backup and restore controllers write a result into status first, then publish its
    // Event: a read right after a status wait can fall between the two (a direct GET answers in
    // a millisecond; kubectl's 100 ms hid it). Read until two reads half a second apart agree.
    let mut last = events_now(ns, kind, name)?;
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        let now = events_now(ns, kind, name)?;
        if now == last {
            break;
        }
        last = now;
    }
    Ok(last)
}

fn events_now(ns: &TestNamespace, kind: &str, name: &str) -> Result<Vec<(String, String)>> {
    let list = ns.json(&["get", "events", "-o", "json"])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .map(|e| {
            (
                e["reason"].as_str().unwrap_or_default().to_string(),
                e["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

/// [`super::with_operator`] with the operator as a process armed with `failpoints` (which it
/// passes on to the backup and restore pods it starts).
pub fn with_failpoints(prefix: &str, failpoints: &str, body: impl FnOnce(&TestNamespace) -> Result<()>) -> Result<()> {
    let ns = TestNamespace::create(prefix)?;
    let op = super::Operator::start_process_with_env(&ns, &[("ETCD_OPERATOR_FAILPOINTS", failpoints)])?;
    body(&ns).map_err(|e| {
        let log = op.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let events = ns.run(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
        let pods = ns.run(&["get", "pods", "-o", "wide"]).unwrap_or_default();
        e.context(format!(
            "operator log (newest first):\n{}\n--- pods:\n{pods}\n--- events:\n{events}",
            tail.join("\n")
        ))
    })
}

/// How far an archive restores from the snapshot at `snapshot`: `spans` are its segments'
/// revision ranges, sorted. An error when a segment ends at or before the snapshot (retention
/// should have taken it) or revisions are missing between the snapshot and a later segment.
pub fn chain_reach(snapshot: i64, spans: &[(i64, i64)]) -> Result<i64> {
    if let Some(s) = spans.iter().find(|(_, to)| *to <= snapshot) {
        anyhow::bail!("segment {}..={} ends at or before the snapshot {snapshot}: {spans:?}", s.0, s.1);
    }
    let mut reach = snapshot;
    for (from, to) in spans {
        anyhow::ensure!(
            *from <= reach + 1,
            "revisions {}..{} missing after the snapshot {snapshot}: {spans:?}",
            reach + 1,
            from - 1
        );
        reach = reach.max(*to);
    }
    Ok(reach)
}

/// Waits (90 s at most) until EtcdBackup `name`'s archive is durable to revision `rev`.
pub fn wait_archive_durable(ns: &TestNamespace, name: &str, rev: i64) -> Result<()> {
    wait_until(Duration::from_secs(90), &format!("the archive of {name} to be durable to revision {rev}"), || {
        let a = get(ns, "etcdbackup", name)?["status"]["archive"].clone();
        Ok((a["durableRevision"].as_i64().unwrap_or(0) >= rev).then_some(()))
    })
}

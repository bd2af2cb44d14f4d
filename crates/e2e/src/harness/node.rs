//! The node the tests run on (the local cluster is this machine): a member's containers
//! signalled through containerd's `ctr`, its data directory on the host, and data broken there
//! as a failing disk or a bad write would leave it.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use crate::TestNamespace;

const WORKSPACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// `(ctr, containerd socket, kubelet root directory)` of node `node` of the local cluster
/// (`node_env` in `hack/cluster-env.sh`: on one node the host's, on several the node's own).
fn local_cluster(node: &str) -> Result<(String, String, String)> {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {WORKSPACE}/hack/common.sh && source {WORKSPACE}/hack/cluster-env.sh && node_env \"$1\" && echo \"$RUNTIME_BIN/ctr\" && echo \"$N_CONTAINERD_SOCK\" && echo \"$N_KUBELET_ROOT\""
        ))
        .arg("node_env")
        .arg(node)
        .output()?;
    ensure!(out.status.success(), "hack/cluster-env.sh: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout)?;
    let mut l = text.lines().map(str::to_string);
    Ok((l.next().context("ctr")?, l.next().context("socket")?, l.next().context("kubelet root")?))
}

fn node_of(pod: &Value) -> Result<&str> {
    pod["spec"]["nodeName"].as_str().with_context(|| format!("pod {} is not scheduled", pod["metadata"]["name"]))
}

/// Sends `signal` (`SIGSTOP`, `SIGKILL`, ...) to the running container `container` of `pod`.
pub fn signal_container(pod: &Value, container: &str, signal: &str) -> Result<()> {
    let id = pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == container)
        .and_then(|s| s["containerID"].as_str())
        .and_then(|id| id.split_once("://").map(|(_, id)| id.to_string()))
        .with_context(|| format!("no {container} container ID in {}", pod["metadata"]["name"]))?;
    let (ctr, sock, _) = local_cluster(node_of(pod)?)?;
    let out =
        Command::new(ctr).args(["--address", &sock, "-n", "k8s.io", "tasks", "kill", "-s", signal, &id]).output()?;
    ensure!(out.status.success(), "ctr tasks kill -s {signal} {id}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// The host directory holding the member's `--data-dir` (`/var/etcd/data` in the pod): its
/// claim's hostPath volume, or its emptyDir under the kubelet's root.
pub fn member_data_dir(ns: &TestNamespace, pod: &Value) -> Result<PathBuf> {
    let volume = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "etcd-data")
        .context("no etcd-data volume")?;
    let root = if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() {
        let pvc = ns.json(&["get", "pvc", claim])?;
        let pv = pvc["spec"]["volumeName"].as_str().context("claim not bound")?;
        let v = ns.json(&["get", "pv", pv])?;
        PathBuf::from(v["spec"]["hostPath"]["path"].as_str().context("not a hostPath volume")?)
    } else {
        let uid = pod["metadata"]["uid"].as_str().context("pod uid")?;
        let (_, _, kubelet) = local_cluster(node_of(pod)?)?;
        PathBuf::from(kubelet).join(format!("pods/{uid}/volumes/kubernetes.io~empty-dir/etcd-data"))
    };
    let dir = root.join("data");
    ensure!(dir.join("member").is_dir(), "{} holds no member directory", dir.display());
    Ok(dir)
}

/// Breaks member `pod`'s data so that etcd can no longer start on it: etcd is stopped
/// (SIGSTOP: nothing more is written), the first 16 KiB of its database file and of every WAL
/// segment are zeroed (both bbolt meta pages and the WAL's first records), then it is killed;
/// the kubelet starts it again on the broken data.
pub fn break_member_data(ns: &TestNamespace, pod: &str) -> Result<()> {
    let p = ns.pod(pod)?;
    let dir = member_data_dir(ns, &p)?;
    signal_container(&p, "etcd", "SIGSTOP")?;
    let mut files = vec![dir.join("member/snap/db")];
    for e in std::fs::read_dir(dir.join("member/wal"))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "wal") {
            files.push(path);
        }
    }
    for f in &files {
        use std::io::{Seek, SeekFrom, Write};
        let mut file = std::fs::OpenOptions::new().write(true).open(f).with_context(|| f.display().to_string())?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&[0u8; 16 << 10])?;
        file.sync_all()?;
    }
    if files.len() < 2 {
        bail!("no WAL segment in {}", dir.display());
    }
    signal_container(&p, "etcd", "SIGKILL")
}

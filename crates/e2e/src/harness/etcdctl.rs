//! The etcd cluster under test through the real etcdctl of this host.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{run, wait_until};

/// etcdctl (v3 API) on the host itself: `$E2E_HOST_ETCDCTL` or Debian's `/usr/bin/etcdctl`.
pub fn host_etcdctl(endpoint: &str, args: &[&str]) -> Result<String> {
    let bin = std::env::var("E2E_HOST_ETCDCTL").unwrap_or_else(|_| "/usr/bin/etcdctl".into());
    run(Command::new(bin)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--dial-timeout=3s", "--command-timeout=5s"])
        .args(args))
}

/// Put `n` keys `<prefix>/<i>` = `value-<i>`.
pub fn write_keys(endpoint: &str, prefix: &str, n: usize) -> Result<()> {
    for i in 0..n {
        let (k, v) = (format!("{prefix}/{i}"), format!("value-{i}"));
        // A fresh cluster may need a moment before the client Service routes: retry briefly.
        wait_until(Duration::from_secs(30), &format!("put {k}"), || {
            Ok(host_etcdctl(endpoint, &["put", &k, &v]).map(drop).ok())
        })?;
    }
    Ok(())
}

/// Every key written by `write_keys` is there with its value.
pub fn check_keys(endpoint: &str, prefix: &str, n: usize) -> Result<()> {
    let out = wait_until(Duration::from_secs(30), "a range read", || {
        Ok(host_etcdctl(endpoint, &["get", "--prefix", &format!("{prefix}/")]).ok())
    })?;
    let lines: Vec<&str> = out.lines().collect();
    for i in 0..n {
        let k = format!("{prefix}/{i}");
        let pos = lines.iter().position(|l| *l == k);
        match pos.and_then(|p| lines.get(p + 1)) {
            Some(v) if *v == format!("value-{i}") => {}
            other => bail!("key {k}: expected value-{i}, got {other:?}"),
        }
    }
    Ok(())
}

/// The etcd member list as etcdctl prints it (`id, status, name, peer, client, learner`).
/// Like `check_keys`, the call is retried for a while: through the client Service it can land
/// on a member that was just removed (kube-proxy drops it from the Service a moment later).
pub fn member_list(endpoint: &str) -> Result<Vec<Vec<String>>> {
    let out =
        wait_until(Duration::from_secs(30), "a member list", || Ok(host_etcdctl(endpoint, &["member", "list"]).ok()))?;
    Ok(out.lines().map(|l| l.split(", ").map(str::to_string).collect()).collect())
}

/// The server version one member reports (`etcdctl endpoint status` against that member alone).
pub fn server_version(endpoint: &str) -> Result<String> {
    let out = host_etcdctl(endpoint, &["endpoint", "status", "-w", "json"])?;
    let v: Value = serde_json::from_str(&out).with_context(|| format!("endpoint status of {endpoint}: {out}"))?;
    v[0]["Status"]["version"].as_str().map(str::to_string).with_context(|| format!("no version in {out}"))
}

//! What the e2e tests share: the library's harness (`e2e::harness`, also used by the bench),
//! re-exported so that a test file says `use common::*`, and the test-only continuous writer.

#![allow(dead_code, unused_imports)]

pub mod backups;
pub mod day2;
pub mod tls;
pub mod tls_clients;
pub mod upgrade;
pub mod writer;

pub use e2e::harness::*;
pub use e2e::manifests::cluster_manifest;

/// The `kubectl etcd` plugin under test: `$KUBECTL_ETCD_BIN`, else the workspace's debug build.
pub fn plugin_bin() -> std::path::PathBuf {
    std::env::var_os("KUBECTL_ETCD_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/debug/kubectl-etcd"))
}

/// The kubeconfig the tests use.
pub fn kubeconfig() -> String {
    std::env::var("KUBECONFIG").unwrap_or_else(|_| e2e::DEFAULT_KUBECONFIG.to_string())
}

/// A Secret's data, decoded (values as UTF-8 text).
pub fn secret_data(ns: &e2e::TestNamespace, name: &str) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    use anyhow::Context;
    use base64::Engine;
    let s = ns.json(&["get", "secret", name])?;
    let mut out = std::collections::BTreeMap::new();
    for (k, v) in s["data"].as_object().context("a Secret without data")? {
        let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str().unwrap_or(""))?;
        out.insert(k.clone(), String::from_utf8(bytes)?);
    }
    Ok(out)
}

/// Puts `puts` at `url` with `opts` (TLS, a login, or neither), then reads every key under
/// `prefix` as (key, value) pairs.
pub fn put_then_list(
    url: &str,
    opts: etcd_client::ConnectOptions,
    puts: &[(String, String)],
    prefix: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    use etcd_client::{Client, GetOptions};
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async {
        let mut c = Client::connect([url], Some(opts)).await?;
        for (k, v) in puts {
            c.put(k.as_str(), v.as_str(), None).await?;
        }
        let r = c.get(prefix, Some(GetOptions::new().with_prefix())).await?;
        Ok(r.kvs()
            .iter()
            .map(|kv| (kv.key_str().unwrap_or("").to_string(), kv.value_str().unwrap_or("").to_string()))
            .collect())
    })
}

/// Puts `key` = `value` through `endpoint` until one is acknowledged (within `timeout`), and
/// returns how many attempts failed first: a put that lands on a member the Service still lists
/// but that cannot answer (lost, cut off) is tried again, counted, never given up on.
pub fn put_retrying(
    endpoint: &str,
    key: &str,
    value: &str,
    timeout: std::time::Duration,
    what: &str,
) -> anyhow::Result<u64> {
    let mut failed = 0;
    e2e::wait_until(timeout, &format!("put {key} {what}"), || match host_etcdctl(endpoint, &["put", key, value]) {
        Ok(_) => Ok(Some(())),
        Err(_) => {
            failed += 1;
            Ok(None)
        }
    })?;
    Ok(failed)
}

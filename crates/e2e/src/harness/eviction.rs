//! The Eviction API, as `kubectl drain` calls it: `policy/v1` from Kubernetes 1.22,
//! `policy/v1beta1` before (the legacy 1.20 leg).

use anyhow::Result;

use crate::TestNamespace;

/// Asks to evict `pod`: `true` when the eviction was allowed, `false` when a
/// PodDisruptionBudget refused it (429).
pub fn evict(ns: &TestNamespace, pod: &str) -> Result<bool> {
    let minor = crate::Kubectl::from_env()?.server_minor()?;
    let version = if minor >= 22 { "policy/v1" } else { "policy/v1beta1" };
    let body = serde_json::json!({
        "apiVersion": version,
        "kind": "Eviction",
        "metadata": {"name": pod, "namespace": ns.name},
    });
    let file = std::env::temp_dir().join(format!("evict-{}-{pod}.json", ns.name));
    std::fs::write(&file, body.to_string())?;
    let path = format!("/api/v1/namespaces/{}/pods/{pod}/eviction", ns.name);
    let r = ns.run(&["create", "--raw", &path, "-f", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(&file);
    match r {
        Ok(_) => Ok(true),
        Err(e) if format!("{e:#}").contains("disruption budget") || format!("{e:#}").contains("429") => Ok(false),
        Err(e) => Err(e),
    }
}

//! Helpers of the upgrade tests (`upgrade`, `upgrade_failures`): their time limits and what
//! "the whole cluster runs a version" means, in the status and as each member answers.

use std::time::Duration;

use anyhow::Result;
use e2e::TestNamespace;
use serde_json::Value;

use super::{cond_str, member_endpoints, server_version};

pub const CREATE: Duration = Duration::from_secs(180);
/// One upgrade step of three members: each restarts on its new image and must report the new
/// version before the next one goes (the operator's own per-member deadline is 120 s).
pub const UPGRADE: Duration = Duration::from_secs(360);
/// How long "nothing else happens" is watched: three of the operator's 5 s re-checks and more.
pub const HOLD: Duration = Duration::from_secs(20);
pub const KEYS: usize = 50;
pub const REPOSITORY: &str = "quay.io/coreos/etcd";

/// Every member answers `endpoint status` with `version`.
pub fn all_report(ns: &TestNamespace, name: &str, version: &str) -> Result<bool> {
    for (_, ep) in member_endpoints(ns, name)? {
        match server_version(&ep) {
            Ok(v) if v == version => {}
            _ => return Ok(false),
        }
    }
    Ok(true)
}

/// status says the whole cluster runs `version`: current == it, no target, `size` ready
/// members, no Upgrading condition left True and nothing Degraded.
pub fn settled_at(c: &Value, version: &str, size: usize) -> bool {
    let st = &c["status"];
    st["currentVersion"] == version
        && st["targetVersion"] == ""
        && st["members"]["ready"].as_array().is_some_and(|a| a.len() == size)
        && cond_str(c, "Upgrading", "status") != "True"
        && cond_str(c, "Degraded", "status") != "True"
}

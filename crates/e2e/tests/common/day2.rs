//! Helpers of the day-2 tests (`day2`, `day2_alarms`): their time limits, values bbolt cannot
//! shrink, and a member's database size as etcd reports it.

use std::time::Duration;

use anyhow::{Context, Result};
use e2e::host_etcdctl;
use serde_json::Value;

pub const CREATE: Duration = Duration::from_secs(180);
pub const KEYS: usize = 50;
pub const MIB: i64 = 1 << 20;

pub fn rt() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A value bbolt cannot shrink: random bytes, hex-encoded.
pub fn blob(bytes: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..bytes / 2)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("{:02x}", x as u8)
        })
        .collect()
}

/// `(dbSize, dbSizeInUse, is leader)` of the member behind `endpoint`.
pub fn db_status(endpoint: &str) -> Result<(i64, i64, bool)> {
    let out = host_etcdctl(endpoint, &["endpoint", "status", "-w", "json"])?;
    let v: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
    let st = &v[0]["Status"];
    let leader = st["leader"].as_u64().is_some_and(|l| Some(l) == st["header"]["member_id"].as_u64());
    Ok((st["dbSize"].as_i64().unwrap_or(0), st["dbSizeInUse"].as_i64().unwrap_or(0), leader))
}

//! `spec.maintenance` checked and defaulted: the space quota, auto-compaction (flags unless
//! `etcdEnv` sets them) and the defragmentation rule. Pure.

use etcd_operator_api::cluster::PodPolicy;

/// etcd's default `--quota-backend-bytes` (2 GiB), used when nothing sets it.
pub const DEFAULT_QUOTA_BYTES: i64 = 2 << 30;
pub const MIN_QUOTA_BYTES: i64 = 16 << 20;
pub const MAX_QUOTA_BYTES: i64 = 64 << 30;
pub const DEFAULT_PERIODIC_RETENTION: &str = "1h";
pub const DEFAULT_REVISION_RETENTION: &str = "10000";
pub const DEFAULT_DEFRAG_FREE_PERCENT: i32 = 50;
pub const DEFAULT_DEFRAG_FREE_BYTES: i64 = 64 << 20;

/// A validated `spec.maintenance`.
#[derive(Clone, Debug, PartialEq)]
pub struct Maintenance {
    /// The space quota members run with (from `spec.maintenance`, an `etcdEnv` entry, or
    /// etcd's default).
    pub quota_bytes: i64,
    /// `--quota-backend-bytes` to pass, unless `etcdEnv` sets it.
    pub quota_flag: Option<i64>,
    /// `--auto-compaction-mode` and `-retention` to pass, unless `etcdEnv` sets either.
    pub compaction_flags: Option<(CompactionMode, String)>,
    /// With revision-mode compaction: how many revisions are kept (a NOSPACE recovery keeps them
    /// too).
    pub keep_revisions: Option<i64>,
    /// When the policy defragments; `None`: only a NOSPACE recovery does.
    pub defrag: Option<DefragRule>,
    /// What the user wrote (part of the pod hash only when set, so an operator with new
    /// defaults never restarts members by itself).
    pub specified: Option<etcd_operator_api::cluster::MaintenancePolicy>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompactionMode {
    Periodic,
    Revision,
}

impl CompactionMode {
    pub fn as_flag(self) -> &'static str {
        match self {
            CompactionMode::Periodic => "periodic",
            CompactionMode::Revision => "revision",
        }
    }
}

/// Defragment a member once this much of its database file is unused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DefragRule {
    pub min_free_percent: i32,
    pub min_free_bytes: i64,
}

impl DefragRule {
    /// Whether a member with this database file size and in-use size is due.
    pub fn is_due(&self, db_size: i64, in_use: i64) -> bool {
        let free = db_size.saturating_sub(in_use);
        free > 0
            && free >= self.min_free_bytes
            && (free as i128) * 100 >= (db_size as i128) * i128::from(self.min_free_percent)
    }
}

/// etcd's settings that `spec.maintenance` passes as flags, by the environment variable etcd
/// also reads them from (an `etcdEnv` entry and a flag for the same setting make etcd exit).
const QUOTA_ENV: &str = "ETCD_QUOTA_BACKEND_BYTES";
const COMPACTION_ENV: [&str; 2] = ["ETCD_AUTO_COMPACTION_MODE", "ETCD_AUTO_COMPACTION_RETENTION"];

pub(super) fn maintenance_policy(
    m: Option<&etcd_operator_api::cluster::MaintenancePolicy>,
    pod: &PodPolicy,
    errs: &mut Vec<String>,
) -> Maintenance {
    let env = |name: &str| pod.etcd_env.iter().find(|e| e.name == name).map(|e| e.value.clone().unwrap_or_default());
    let spec = m.cloned().unwrap_or_default();
    // Quota.
    let env_quota = env(QUOTA_ENV);
    if let Some(q) = spec.quota_backend_bytes {
        if !(MIN_QUOTA_BYTES..=MAX_QUOTA_BYTES).contains(&q) {
            errs.push(format!(
                "spec.maintenance.quotaBackendBytes {q} is out of range: it must be between {MIN_QUOTA_BYTES} (16 MiB) and {MAX_QUOTA_BYTES} (64 GiB)"
            ));
        }
        if env_quota.is_some() {
            errs.push(format!(
                "spec.maintenance.quotaBackendBytes and spec.pod.etcdEnv {QUOTA_ENV} both set the quota: keep one"
            ));
        }
    }
    let quota_bytes = spec
        .quota_backend_bytes
        .or_else(|| env_quota.as_deref().and_then(|v| v.trim().parse::<i64>().ok()).filter(|q| *q > 0))
        .unwrap_or(DEFAULT_QUOTA_BYTES);
    let quota_flag = env_quota.is_none().then_some(spec.quota_backend_bytes.unwrap_or(DEFAULT_QUOTA_BYTES));
    // Compaction.
    let mode = match spec.auto_compaction_mode.as_str() {
        "" | "periodic" => CompactionMode::Periodic,
        "revision" => CompactionMode::Revision,
        other => {
            errs.push(format!("spec.maintenance.autoCompactionMode {other:?} is not one of periodic, revision"));
            CompactionMode::Periodic
        }
    };
    let retention = match (spec.auto_compaction_retention.as_str(), mode) {
        ("", CompactionMode::Periodic) => DEFAULT_PERIODIC_RETENTION.to_string(),
        ("", CompactionMode::Revision) => DEFAULT_REVISION_RETENTION.to_string(),
        (r, _) => r.to_string(),
    };
    let retention_ok = match mode {
        CompactionMode::Periodic => is_go_duration(&retention) || retention.parse::<u32>().is_ok(),
        CompactionMode::Revision => retention.parse::<u64>().is_ok(),
    };
    if !retention_ok {
        errs.push(format!(
            "spec.maintenance.autoCompactionRetention {retention:?} does not fit autoCompactionMode {}: use a duration such as 1h or 30m for periodic, a number of revisions for revision",
            mode.as_flag()
        ));
    }
    let env_compaction = COMPACTION_ENV.iter().find(|n| env(n).is_some());
    let specified_compaction = !spec.auto_compaction_mode.is_empty() || !spec.auto_compaction_retention.is_empty();
    if let (Some(n), true) = (env_compaction, specified_compaction) {
        errs.push(format!("spec.maintenance.autoCompaction* and spec.pod.etcdEnv {n} both set compaction: keep one"));
    }
    let compaction_flags = env_compaction.is_none().then(|| (mode, retention.clone()));
    let keep_revisions = match compaction_flags.as_ref() {
        Some((CompactionMode::Revision, r)) => r.parse::<i64>().ok(),
        Some(_) => None,
        None => (env("ETCD_AUTO_COMPACTION_MODE").as_deref() == Some("revision"))
            .then(|| env("ETCD_AUTO_COMPACTION_RETENTION").and_then(|r| r.parse::<i64>().ok()))
            .flatten(),
    };
    // Defragmentation.
    let dp = spec.defragmentation.clone().unwrap_or_default();
    let percent = dp.min_free_percent.unwrap_or(DEFAULT_DEFRAG_FREE_PERCENT);
    if !(1..=99).contains(&percent) {
        errs.push(format!(
            "spec.maintenance.defragmentation.minFreePercent {percent} is out of range: it must be between 1 and 99"
        ));
    }
    let bytes = dp.min_free_bytes.unwrap_or(DEFAULT_DEFRAG_FREE_BYTES);
    if !(0..=MAX_QUOTA_BYTES).contains(&bytes) {
        errs.push(format!(
            "spec.maintenance.defragmentation.minFreeBytes {bytes} is out of range: it must be between 0 and {MAX_QUOTA_BYTES}"
        ));
    }
    let defrag = match dp.mode.as_str() {
        "" | "Auto" => Some(DefragRule { min_free_percent: percent, min_free_bytes: bytes }),
        "Off" => None,
        other => {
            errs.push(format!("spec.maintenance.defragmentation.mode {other:?} is not one of Auto, Off"));
            None
        }
    };
    Maintenance { quota_bytes, quota_flag, compaction_flags, keep_revisions, defrag, specified: m.cloned() }
}

/// A Go duration as etcd parses `--auto-compaction-retention`: `1h`, `30m`, `1h30m`, `90s`.
fn is_go_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        if digits == 0 || rest[..digits].parse::<f64>().is_err() {
            return false;
        }
        rest = &rest[digits..];
        let unit =
            ["ns", "us", "µs", "ms", "s", "m", "h"].iter().filter(|u| rest.starts_with(*u)).max_by_key(|u| u.len());
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

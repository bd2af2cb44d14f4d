//! Turning a user's EtcdCluster spec into a checked, defaulted [`Desired`] — or into the list
//! of reasons it was refused. An invalid spec changes nothing in the running cluster.

use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::cluster::{DEFAULT_REPOSITORY, DEFAULT_VERSION, PodPolicy};

use crate::naming::{CLUSTER_LABEL, MAX_CLUSTER_NAME, VERSION_ANNOTATION};
use crate::version::{Version, supported_range};

/// Largest accepted size. etcd recommends at most 7 voters; more only slows writes.
pub const MAX_SIZE: i32 = 7;

/// A spec that passed validation, with defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub size: usize,
    pub repository: String,
    pub version: Version,
    pub pod: PodPolicy,
    /// Bootstrap members from this backup (checked: a valid location and a sha256).
    pub restore: Option<Restore>,
    /// What to do when a quorum is lost for good (`spec.recovery`).
    pub recovery: crate::observed::Recovery,
    /// Space quota, compaction and defragmentation (`spec.maintenance`, defaults filled in).
    pub maintenance: Maintenance,
}

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

/// A validated `spec.restore`.
#[derive(Clone, Debug, PartialEq)]
pub struct Restore {
    pub location: crate::backup::location::Location,
    pub source: etcd_operator_api::backup::BackupSource,
    pub sha256: String,
}

impl Desired {
    /// A short hash of what member pods are made from besides the version (image repository,
    /// `spec.pod` and, when set, `spec.maintenance`): a pod carrying another one was made under
    /// an earlier spec.
    pub fn pod_hash(&self) -> String {
        use sha2::Digest;
        let json = match &self.maintenance.specified {
            None => serde_json::to_vec(&(&self.repository, &self.pod)),
            Some(m) => serde_json::to_vec(&(&self.repository, &self.pod, m)),
        }
        .unwrap_or_default();
        hex::encode(&sha2::Sha256::digest(json)[..8])
    }

    /// `<repository>:v<version>`.
    pub fn image(&self) -> String {
        image_for(&self.repository, &self.version)
    }
}

pub fn image_for(repository: &str, version: &Version) -> String {
    format!("{repository}:{}", version.tag())
}

/// Validate `spec` of the cluster named `name`. Every problem is reported, not only the first.
pub fn validate(name: &str, spec: &EtcdClusterSpec) -> Result<Desired, Vec<String>> {
    validate_with(name, spec, true)
}

/// Only the rules of operator versions before the bounds on names, labels, annotations, DNS
/// timeout, cluster domain and the newer reserved `etcdEnv` names: a cluster that formed under
/// such a version keeps healing under its spec (and is told what the current rules refuse)
/// instead of stopping altogether.
pub fn validate_legacy(name: &str, spec: &EtcdClusterSpec) -> Result<Desired, Vec<String>> {
    validate_with(name, spec, false)
}

fn validate_with(name: &str, spec: &EtcdClusterSpec, strict: bool) -> Result<Desired, Vec<String>> {
    let mut errs = vec![];
    if name.len() > MAX_CLUSTER_NAME {
        errs.push(format!(
            "metadata.name is {} characters; at most {MAX_CLUSTER_NAME} fit, because the client Service `<name>-client` must be a 63-character DNS label",
            name.len()
        ));
    }
    if strict && !is_dns1035_label(name) || !strict && !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        errs.push(format!(
            "metadata.name {name:?} must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit (it names Services and pods)"
        ));
    }
    if spec.size < 1 || spec.size > MAX_SIZE {
        errs.push(format!("spec.size {} is out of range: it must be between 1 and {MAX_SIZE}", spec.size));
    }
    let raw_version = if spec.version.is_empty() { DEFAULT_VERSION } else { spec.version.as_str() };
    let version = match Version::parse(raw_version) {
        Ok(v) if v.is_supported() => Some(v),
        Ok(v) => {
            errs.push(format!("spec.version {v} is not supported: supported versions are {}", supported_range()));
            None
        }
        Err(e) => {
            errs.push(format!("spec.version: {e}; supported versions are {}", supported_range()));
            None
        }
    };
    let pod = spec.pod.clone().unwrap_or_default();
    for k in pod.labels.keys() {
        if k == "app" || k.starts_with("etcd_") || k == CLUSTER_LABEL {
            errs.push(format!("spec.pod.labels: {k:?} is reserved for the operator"));
        }
    }
    if pod.annotations.contains_key(VERSION_ANNOTATION) {
        errs.push(format!("spec.pod.annotations: {VERSION_ANNOTATION:?} is reserved for the operator"));
    }
    for e in &pod.etcd_env {
        let reserved = RESERVED_ENV.contains(&e.name.as_str())
            || strict
                && (RESERVED_ENV_SINCE_0_2.contains(&e.name.as_str())
                    || e.name.starts_with(OPERATOR_OWNED_ETCD_ENV_PREFIX));
        if reserved {
            errs.push(format!(
                "spec.pod.etcdEnv: {} is owned by the operator (membership, data location and recovery are its job) and cannot be set",
                e.name
            ));
        }
    }
    if strict {
        strict_pod_rules(&pod, &mut errs);
    }
    if let Some(tls) = spec.tls.as_ref().and_then(|t| t.r#static.as_ref()) {
        let server = tls.member.as_ref().is_some_and(|m| !m.server_secret.is_empty());
        if !tls.operator_secret.is_empty() && !server {
            errs.push("spec.TLS.static: operatorSecret is set but member.serverSecret is not".into());
        }
        if tls.operator_secret.is_empty() && server {
            errs.push("spec.TLS.static: member.serverSecret is set but operatorSecret is not".into());
        }
        errs.push("spec.TLS.static is accepted by the API but not yet wired by this operator version; remove it to run without TLS".into());
    }
    let restore = spec.restore.as_ref().and_then(|r| {
        let loc = crate::backup::location::Location::of(&r.backup_storage_type, &r.source)
            .map_err(|e| errs.push(format!("spec.restore: {e}")))
            .ok()?;
        if r.sha256.len() != 64 || !r.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            errs.push("spec.restore.sha256 must be the 64 hex digits of the backup's sha256".into());
            return None;
        }
        Some(Restore { location: loc, source: r.source.clone(), sha256: r.sha256.to_ascii_lowercase() })
    });
    let recovery = recovery_policy(spec.recovery.as_ref(), &mut errs);
    let maintenance = maintenance_policy(spec.maintenance.as_ref(), &pod, &mut errs);
    if !errs.is_empty() {
        return Err(errs);
    }
    let repository = if spec.repository.is_empty() { DEFAULT_REPOSITORY.to_string() } else { spec.repository.clone() };
    Ok(Desired {
        size: spec.size as usize,
        repository,
        version: version.expect("checked"),
        pod,
        restore,
        recovery,
        maintenance,
    })
}

/// etcd's settings that `spec.maintenance` passes as flags, by the environment variable etcd
/// also reads them from (an `etcdEnv` entry and a flag for the same setting make etcd exit).
const QUOTA_ENV: &str = "ETCD_QUOTA_BACKEND_BYTES";
const COMPACTION_ENV: [&str; 2] = ["ETCD_AUTO_COMPACTION_MODE", "ETCD_AUTO_COMPACTION_RETENTION"];

fn maintenance_policy(
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

/// Longest wait before a quorum-loss recovery.
pub const MAX_RECOVERY_AFTER_SECS: i64 = 86_400;
/// Default wait before a quorum-loss recovery.
pub const DEFAULT_RECOVERY_AFTER_SECS: i64 = 60;

fn recovery_policy(
    r: Option<&etcd_operator_api::cluster::RecoveryPolicy>,
    errs: &mut Vec<String>,
) -> crate::observed::Recovery {
    use crate::observed::{QuorumLossPolicy, Recovery};
    let Some(r) = r else { return Recovery { after_secs: DEFAULT_RECOVERY_AFTER_SECS, ..Default::default() } };
    let after_secs = r.after_seconds.unwrap_or(DEFAULT_RECOVERY_AFTER_SECS);
    if !(0..=MAX_RECOVERY_AFTER_SECS).contains(&after_secs) {
        errs.push(format!(
            "spec.recovery.afterSeconds {after_secs} is out of range: it must be between 0 and {MAX_RECOVERY_AFTER_SECS}"
        ));
    }
    let quorum_loss = match r.quorum_loss.as_str() {
        "" | "Wait" => QuorumLossPolicy::Wait,
        "FromSurvivor" => QuorumLossPolicy::FromSurvivor,
        "FromBackup" if r.backup.is_empty() => {
            errs.push("spec.recovery.quorumLoss FromBackup needs spec.recovery.backup (an EtcdBackup name)".into());
            QuorumLossPolicy::Wait
        }
        "FromBackup" => QuorumLossPolicy::FromBackup { backup: r.backup.clone() },
        other => {
            errs.push(format!("spec.recovery.quorumLoss {other:?} is not one of Wait, FromSurvivor, FromBackup"));
            QuorumLossPolicy::Wait
        }
    };
    Recovery { quorum_loss, after_secs }
}

/// Label and annotation syntax, the DNS timeout's range, the cluster domain's syntax.
fn strict_pod_rules(pod: &PodPolicy, errs: &mut Vec<String>) {
    for (k, v) in &pod.labels {
        if let Err(why) = check_qualified_name(k).and_then(|_| check_label_value(v)) {
            errs.push(format!("spec.pod.labels: {k:?}: {why}"));
        }
    }
    for k in pod.annotations.keys() {
        if let Err(why) = check_qualified_name(k) {
            errs.push(format!("spec.pod.annotations: {k:?}: {why}"));
        }
    }
    let max_env = etcd_operator_api::validation_rules::MAX_ETCD_ENV;
    if pod.etcd_env.len() as i64 > max_env {
        errs.push(format!("spec.pod.etcdEnv has {} entries; at most {max_env} are allowed", pod.etcd_env.len()));
    }
    if let Some(e) = pod.etcd_env.iter().find(|e| e.name.len() > 253) {
        errs.push(format!("spec.pod.etcdEnv: a name of {} characters is too long (at most 253)", e.name.len()));
    }
    if !(0..=MAX_DNS_TIMEOUT_SECS).contains(&pod.dns_timeout_in_second) {
        errs.push(format!(
            "spec.pod.DNSTimeoutInSecond {} is out of range: it must be between 0 (wait forever) and {MAX_DNS_TIMEOUT_SECS}",
            pod.dns_timeout_in_second
        ));
    }
    let domain = pod.cluster_domain.trim_matches('.');
    if !domain.is_empty() && (domain.len() > 253 || !domain.split('.').all(is_dns1123_label)) {
        errs.push(format!("spec.pod.ClusterDomain {:?} is not a DNS domain name", pod.cluster_domain));
    }
}

/// Longest wait of a new member for its own DNS name.
pub const MAX_DNS_TIMEOUT_SECS: i64 = 3600;

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (Service names).
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn check_name_part(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= 63
        && n.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && n.starts_with(|c: char| c.is_ascii_alphanumeric())
        && n.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err("a name must be 1 to 63 characters of letters, digits, '-', '_' or '.', beginning and ending with a letter or digit".into())
    }
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
fn check_qualified_name(k: &str) -> Result<(), String> {
    match k.split_once('/') {
        Some((prefix, name)) => {
            if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(is_dns1123_label) {
                return Err(format!("prefix {prefix:?} is not a DNS subdomain"));
            }
            check_name_part(name)
        }
        None => check_name_part(k),
    }
}

fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() { Ok(()) } else { check_name_part(v).map_err(|e| format!("value {v:?}: {e}")) }
}

use etcd_operator_api::validation_rules::{
    OPERATOR_OWNED_ETCD_ENV as RESERVED_ENV, OPERATOR_OWNED_ETCD_ENV_PREFIX,
    OPERATOR_OWNED_ETCD_ENV_SINCE_0_2 as RESERVED_ENV_SINCE_0_2,
};

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::EnvVar;

    fn spec(size: i32, version: &str) -> EtcdClusterSpec {
        EtcdClusterSpec { size, version: version.into(), ..Default::default() }
    }

    #[test]
    fn seeds_example_is_valid() {
        let d = validate("example-etcd-cluster", &spec(3, "3.5.1")).unwrap();
        assert_eq!(d.size, 3);
        assert_eq!(d.image(), "quay.io/coreos/etcd:v3.5.1");
    }

    #[test]
    fn defaults_fill_in() {
        let d = validate("a", &spec(1, "")).unwrap();
        assert_eq!(d.version.to_string(), DEFAULT_VERSION);
        assert_eq!(d.repository, DEFAULT_REPOSITORY);
    }

    #[test]
    fn coreos_default_version_3_2_13_is_refused_naming_the_supported_range() {
        let e = validate("a", &spec(3, "3.2.13")).unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("3.2.13") && e[0].contains("3.4.x to 3.7.x"), "{e:?}");
    }

    #[test]
    fn size_below_one_and_garbage_version_are_both_reported() {
        let e = validate("a", &spec(0, "latest")).unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(e[0].contains("spec.size 0"));
        assert!(e[1].contains("MAJOR.MINOR.PATCH"));
    }

    #[test]
    fn too_long_names_are_refused() {
        let e = validate(&"a".repeat(57), &spec(3, "3.5.1")).unwrap_err();
        assert!(e[0].contains("57 characters"), "{e:?}");
        assert!(validate(&"a".repeat(56), &spec(3, "3.5.1")).is_ok());
    }

    #[test]
    fn names_that_cannot_name_a_service_are_refused() {
        for bad in ["my.cluster", "Ex", "ex-", "9ex", "e_x", ""] {
            assert!(validate(bad, &spec(3, "3.5.1")).is_err(), "{bad:?}");
        }
        assert!(validate("ex-1", &spec(3, "3.5.1")).is_ok());
    }

    #[test]
    fn pod_fields_are_bounded() {
        let mut s = spec(3, "3.5.1");
        s.pod = Some(PodPolicy {
            dns_timeout_in_second: -1,
            labels: [("team/x y".to_string(), "v".to_string()), ("ok".to_string(), "bad value!".to_string())].into(),
            annotations: [("/x".to_string(), String::new())].into(),
            etcd_env: vec![
                EnvVar { name: "ETCD_FORCE_NEW_CLUSTER".into(), value: Some("true".into()), ..Default::default() },
                EnvVar { name: "ETCD_DISCOVERY_SRV".into(), ..Default::default() },
                EnvVar { name: "ETCD_QUOTA_BACKEND_BYTES".into(), value: Some("1".into()), ..Default::default() },
            ],
            cluster_domain: "cluster..local".into(),
            ..Default::default()
        });
        let e = validate("a", &s).unwrap_err().join("\n");
        for want in [
            "DNSTimeoutInSecond -1",
            "\"team/x y\"",
            "bad value!",
            "\"/x\"",
            "ETCD_FORCE_NEW_CLUSTER is owned by the operator",
            "ETCD_DISCOVERY_SRV",
            "ClusterDomain",
        ] {
            assert!(e.contains(want), "missing {want:?} in:\n{e}");
        }
        assert!(!e.contains("ETCD_QUOTA_BACKEND_BYTES"), "users may tune etcd: {e}");
    }

    /// A spec an earlier version accepted still yields a `Desired` under the earlier rules
    /// (the cluster keeps healing; SpecValid says what the current rules refuse).
    #[test]
    fn legacy_rules_accept_what_earlier_versions_did() {
        let mut s = spec(3, "3.5.1");
        s.pod = Some(PodPolicy {
            dns_timeout_in_second: -1,
            etcd_env: vec![EnvVar { name: "ETCD_WAL_DIR".into(), value: Some("/wal".into()), ..Default::default() }],
            ..Default::default()
        });
        assert!(validate("a", &s).is_err());
        assert!(validate_legacy("a", &s).is_ok());
        // What earlier versions refused stays refused.
        s.size = 0;
        assert!(validate_legacy("a", &s).is_err());
    }

    #[test]
    fn reserved_labels_and_env_are_refused() {
        let mut s = spec(3, "3.5.1");
        s.pod = Some(PodPolicy {
            labels: [("app".to_string(), "x".to_string())].into(),
            etcd_env: vec![EnvVar { name: "ETCD_INITIAL_CLUSTER".into(), ..Default::default() }],
            ..Default::default()
        });
        let e = validate("a", &s).unwrap_err();
        assert_eq!(e.len(), 2, "{e:?}");
    }

    #[test]
    fn maintenance_defaults_become_etcd_flags() {
        let d = validate("ex", &spec(3, "3.6.15")).unwrap();
        let m = &d.maintenance;
        assert_eq!(m.quota_flag, Some(2 << 30), "etcd's own default, said explicitly");
        assert_eq!(m.compaction_flags, Some((CompactionMode::Periodic, "1h".to_string())));
        assert_eq!(m.defrag, Some(DefragRule { min_free_percent: 50, min_free_bytes: 64 << 20 }));
        assert!(m.specified.is_none());
    }

    #[test]
    fn maintenance_is_checked_and_etcd_env_for_the_same_setting_is_refused_with_it() {
        use etcd_operator_api::cluster::{DefragmentationPolicy, MaintenancePolicy};
        let with = |mp: MaintenancePolicy, env: &[(&str, &str)]| {
            let mut s = spec(3, "3.6.15");
            s.maintenance = Some(mp);
            let mut pod = PodPolicy::default();
            pod.etcd_env = env
                .iter()
                .map(|(n, v)| k8s_openapi::api::core::v1::EnvVar {
                    name: n.to_string(),
                    value: Some(v.to_string()),
                    ..Default::default()
                })
                .collect();
            s.pod = Some(pod);
            validate("ex", &s)
        };
        let errs = with(
            MaintenancePolicy {
                quota_backend_bytes: Some(1024),
                auto_compaction_mode: "hourly".into(),
                auto_compaction_retention: "an hour".into(),
                defragmentation: Some(DefragmentationPolicy {
                    mode: "Sometimes".into(),
                    min_free_percent: Some(0),
                    min_free_bytes: Some(-1),
                }),
            },
            &[],
        )
        .unwrap_err()
        .join("\n");
        for what in ["quotaBackendBytes 1024", "hourly", "an hour", "Sometimes", "minFreePercent 0", "minFreeBytes -1"]
        {
            assert!(errs.contains(what), "{what} not reported in:\n{errs}");
        }
        let retention = |mode: &str, r: &str| {
            with(
                MaintenancePolicy {
                    auto_compaction_mode: mode.into(),
                    auto_compaction_retention: r.into(),
                    ..Default::default()
                },
                &[],
            )
            .is_ok()
        };
        assert!(retention("periodic", "30m") && retention("periodic", "1h30m") && retention("periodic", "2"));
        assert!(retention("revision", "10000") && retention("", "0"));
        assert!(!retention("revision", "1h") && !retention("periodic", "m") && !retention("periodic", "1d"));
        // Set twice: refused, naming both.
        let errs = with(
            MaintenancePolicy { quota_backend_bytes: Some(16 << 20), ..Default::default() },
            &[("ETCD_QUOTA_BACKEND_BYTES", "4294967296")],
        )
        .unwrap_err()
        .join("\n");
        assert!(errs.contains("quotaBackendBytes") && errs.contains("ETCD_QUOTA_BACKEND_BYTES"), "{errs}");
        // Set once through etcdEnv (the CoreOS way): no flag (etcd exits when both are given),
        // and the planner still knows the quota.
        let d = with(MaintenancePolicy::default(), &[("ETCD_QUOTA_BACKEND_BYTES", "4294967296")]).unwrap();
        assert_eq!((d.maintenance.quota_flag, d.maintenance.quota_bytes), (None, 4 << 30));
        let d = with(
            MaintenancePolicy::default(),
            &[("ETCD_AUTO_COMPACTION_MODE", "revision"), ("ETCD_AUTO_COMPACTION_RETENTION", "700")],
        )
        .unwrap();
        assert_eq!((d.maintenance.compaction_flags.clone(), d.maintenance.keep_revisions), (None, Some(700)));
    }

    #[test]
    fn the_pod_hash_changes_with_maintenance_only_once_it_is_set() {
        let plain = validate("ex", &spec(3, "3.6.15")).unwrap();
        let mut s = spec(3, "3.6.15");
        s.maintenance = Some(Default::default());
        let empty_block = validate("ex", &s).unwrap();
        s.maintenance = Some(etcd_operator_api::cluster::MaintenancePolicy {
            quota_backend_bytes: Some(4 << 30),
            ..Default::default()
        });
        let quota = validate("ex", &s).unwrap();
        assert_ne!(plain.pod_hash(), quota.pod_hash(), "a new quota is rolled out");
        assert_ne!(empty_block.pod_hash(), quota.pod_hash());
        // A cluster without the block keeps the hash it had before the block existed, so an
        // operator upgrade rolls nothing.
        let before = {
            use sha2::Digest;
            let json = serde_json::to_vec(&(&plain.repository, &plain.pod)).unwrap();
            hex::encode(&sha2::Sha256::digest(json)[..8])
        };
        assert_eq!(plain.pod_hash(), before);
    }

    #[test]
    fn etcd_env_is_bounded_like_the_crd_schema() {
        let env = |n: usize, len: usize| {
            let mut s = spec(3, "3.5.1");
            s.pod = Some(PodPolicy {
                etcd_env: (0..n)
                    .map(|i| EnvVar { name: format!("X{i}{}", "Y".repeat(len)), ..Default::default() })
                    .collect(),
                ..Default::default()
            });
            validate("a", &s)
        };
        let max = etcd_operator_api::validation_rules::MAX_ETCD_ENV as usize;
        assert!(env(max, 1).is_ok());
        let e = env(max + 1, 1).unwrap_err();
        assert!(e[0].contains(&format!("{} entries; at most {max}", max + 1)), "{e:?}");
        let e = env(1, 300).unwrap_err();
        assert!(e[0].contains("too long (at most 253)"), "{e:?}");
    }
}

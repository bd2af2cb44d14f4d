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
}

/// A validated `spec.restore`.
#[derive(Clone, Debug, PartialEq)]
pub struct Restore {
    pub location: crate::backup::location::Location,
    pub source: etcd_operator_api::backup::BackupSource,
    pub sha256: String,
}

impl Desired {
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
    let mut errs = vec![];
    if name.len() > MAX_CLUSTER_NAME {
        errs.push(format!(
            "metadata.name is {} characters; at most {MAX_CLUSTER_NAME} fit, because the client Service `<name>-client` must be a 63-character DNS label",
            name.len()
        ));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        errs.push(format!(
            "metadata.name {name:?} must start with a lowercase letter (Service names are DNS-1035 labels)"
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
        if RESERVED_ENV.contains(&e.name.as_str()) {
            errs.push(format!("spec.pod.etcdEnv: {} is set by the operator and cannot be overridden", e.name));
        }
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
    if !errs.is_empty() {
        return Err(errs);
    }
    let repository = if spec.repository.is_empty() { DEFAULT_REPOSITORY.to_string() } else { spec.repository.clone() };
    Ok(Desired { size: spec.size as usize, repository, version: version.expect("checked"), pod, restore, recovery })
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

/// etcd settings the operator derives from membership; users must not set them.
const RESERVED_ENV: &[&str] = &[
    "ETCD_NAME",
    "ETCD_DATA_DIR",
    "ETCD_INITIAL_CLUSTER",
    "ETCD_INITIAL_CLUSTER_STATE",
    "ETCD_INITIAL_CLUSTER_TOKEN",
    "ETCD_INITIAL_ADVERTISE_PEER_URLS",
    "ETCD_ADVERTISE_CLIENT_URLS",
    "ETCD_LISTEN_PEER_URLS",
    "ETCD_LISTEN_CLIENT_URLS",
];

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
        assert!(e[0].contains("3.2.13") && e[0].contains("3.4.x to 3.6.x"), "{e:?}");
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
}

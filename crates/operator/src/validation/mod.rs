//! Turning a user's EtcdCluster spec into a checked, defaulted [`Desired`] — or into the list
//! of reasons it was refused. An invalid spec changes nothing in the running cluster. Pure.
//! Here: `Desired` and the checks of the spec's top level; `spec.maintenance`, `spec.recovery`,
//! `spec.networkPolicy` and the stricter `spec.pod` rules are in their own modules.

mod maintenance;
mod network_policy;
mod pod_policy;
mod recovery;
#[cfg(test)]
mod tests;
mod tls_policy;
pub use tls_policy::tls_auto_in_use;

pub use maintenance::{
    CompactionMode, DEFAULT_DEFRAG_FREE_BYTES, DEFAULT_DEFRAG_FREE_PERCENT, DEFAULT_PERIODIC_RETENTION,
    DEFAULT_QUOTA_BYTES, DEFAULT_REVISION_RETENTION, DefragRule, MAX_QUOTA_BYTES, MIN_QUOTA_BYTES, Maintenance,
};
pub use network_policy::{NetworkAccess, same_namespace as default_clients};
pub use pod_policy::{ETCD_ENV_PREFIX, MAX_DNS_TIMEOUT_SECS, is_dns1035_label, is_dns1123_label};
pub use recovery::{
    DEFAULT_NODE_LOSS_AFTER_SECS, DEFAULT_RECOVERY_AFTER_SECS, DEFAULT_VOLUME_NODE_LOSS_AFTER_SECS,
    MAX_RECOVERY_AFTER_SECS, NodeLossSettings, QuorumLossPolicy, RecoverySettings,
};

use etcd_operator_api::EtcdClusterSpec;
use etcd_operator_api::cluster::{DEFAULT_REPOSITORY, DEFAULT_VERSION, PodPolicy};
use etcd_operator_api::validation_rules::{
    OPERATOR_OWNED_ETCD_ENV as RESERVED_ENV, OPERATOR_OWNED_ETCD_ENV_PREFIX,
    OPERATOR_OWNED_ETCD_ENV_SINCE_0_2 as RESERVED_ENV_SINCE_0_2,
};

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
    pub recovery: RecoverySettings,
    /// Space quota, compaction and defragmentation (`spec.maintenance`, defaults filled in).
    pub maintenance: Maintenance,
    /// Who may reach the members (`spec.networkPolicy`); `None`: no NetworkPolicy.
    pub network_policy: Option<NetworkAccess>,
    /// `spec.TLS.static`: which sides speak TLS, with which Secrets (`crate::tls`).
    pub tls: crate::tls::Policy,
    /// How member pods are made now: `tls` itself, or while a running cluster turns a side on
    /// or off, the stage on the way (`tls::transition`; observation derives it from the pods).
    pub tls_stage: crate::tls::transition::Stage,
    /// `spec.TLS.auto`: the operator makes and rotates the certificates (`crate::tls::auto`);
    /// `tls` then names its Secrets.
    pub tls_auto: Option<crate::tls::auto::Settings>,
    /// `spec.TLS.certManager` (with `tls_auto` set to its settings: the Secrets, mounts and CA
    /// steps are `auto`'s, cert-manager signs; `crate::tls::cert_manager`).
    pub tls_cert_manager: Option<crate::tls::cert_manager::Request>,
    /// With `spec.TLS.auto`: a fingerprint of the CA bundles the member Secrets hold, filled in
    /// by `observe`. Part of [`Desired::pod_hash`]: etcd reads trusted CAs only at start, so a
    /// new bundle restarts members one at a time.
    pub tls_trust: Option<String>,
    /// `spec.auth`: etcd authentication on, off, or left alone, with the root Secret
    /// (`crate::auth`; the Secret itself is read when observed).
    pub auth: crate::auth::Policy,
}

/// A validated `spec.restore`.
#[derive(Clone, Debug, PartialEq)]
pub struct Restore {
    pub location: crate::backup::location::Location,
    pub source: etcd_operator_api::backup::BackupSource,
    pub sha256: String,
    /// Observed, not from the spec: the backup is on a PVC marked as root's
    /// (`backup::volume_owner`), so the member that restores from it runs as root (its own
    /// volume marked likewise). Set by `observe` before the cluster forms; false here.
    pub root_volume: bool,
}

impl Desired {
    /// A short hash of what member pods are made from besides the version (image repository,
    /// `spec.pod`, when set `spec.maintenance`, and the security profile): a pod carrying
    /// another one was made under an earlier spec. This is the hash of a new member's pod;
    /// [`Desired::pod_hash_for`] that of a member whose volume holds root's data.
    pub fn pod_hash(&self) -> String {
        self.pod_hash_for(false)
    }

    /// The pod-spec hash of a member whose volume is (`root_data`) or is not marked as holding
    /// data only root can use (`pod_security`). Pods of the default profile hash differently
    /// from those made before it existed, so those roll; a member kept as root for its data, or
    /// a spec with a securityContext, hashes as before.
    pub fn pod_hash_for(&self, root_data: bool) -> String {
        use sha2::Digest;
        let mut json = match (&self.maintenance.specified, &self.tls_trust) {
            (None, None) => serde_json::to_vec(&(&self.repository, &self.pod)),
            (Some(m), None) => serde_json::to_vec(&(&self.repository, &self.pod, m)),
            // spec.TLS.auto: the CA bundles members load at start (`tls::auto`).
            (m, Some(trust)) => serde_json::to_vec(&(&self.repository, &self.pod, m, trust)),
        }
        .unwrap_or_default();
        if let Some(tag) = crate::pod_security::profile(self.pod.security_context.as_ref(), root_data).hash_tag() {
            json.extend_from_slice(tag.as_bytes());
        }
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

/// A cluster that formed with no valid spec on record (adopted from the CoreOS operator, or the
/// last-valid-spec mark lost) whose spec today's rules refuse: the spec read by the rules of
/// earlier versions (no bounds on names, labels, annotations, DNS timeout or cluster domain),
/// *without* the `etcdEnv` entries today's rules refuse (`ETCD_FORCE_NEW_CLUSTER`, `ETCD_STRICT_RECONFIG_CHECK`, `ETCD_DISCOVERY*`, a Secret in an
/// `ETCD_*` variable; `ETCD_WAL_DIR` is reported but kept: the logs are there): no pod is ever
/// made with one of those. The cluster keeps healing under
/// it and no running member is changed (`Observed::no_valid_spec`); SpecValid says what is
/// refused.
pub fn validate_legacy(name: &str, spec: &EtcdClusterSpec) -> Result<Desired, Vec<String>> {
    let mut spec = spec.clone();
    if let Some(pod) = spec.pod.as_mut() {
        // Except the WAL directory: it is where the members' logs are, and a member made
        // without it would start with an empty log on a volume that holds its data.
        pod.etcd_env.retain(|e| e.name == "ETCD_WAL_DIR" || !refused_since_0_2(e));
    }
    validate_with(name, &spec, false)
}

/// An `etcdEnv` entry today's rules refuse and earlier versions' did not.
fn refused_since_0_2(e: &k8s_openapi::api::core::v1::EnvVar) -> bool {
    RESERVED_ENV_SINCE_0_2.contains(&e.name.as_str())
        || e.name.starts_with(OPERATOR_OWNED_ETCD_ENV_PREFIX)
        || pod_policy::logged_secret(e).is_some()
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
        pod_policy::strict_pod_rules(&pod, &mut errs);
        // etcd 3.7 has no --experimental-* flags: what cannot be written under a 3.6 name is
        // refused (a running cluster's own spec is only refused the upgrade: `planner::upgrade`).
        if let Some(v) = version.as_ref().filter(|v| v.minor_line() >= (3, 7)) {
            for why in crate::etcd_flags::untranslatable(&pod.etcd_env) {
                errs.push(format!(
                    "spec.pod.etcdEnv: etcd {v} has no --experimental-* flags and {why}; remove it or write it under its 3.6 name"
                ));
            }
        }
    }
    // The Secrets themselves are checked when observed (`tls::material`): reading them is I/O.
    let (tls, tls_auto, tls_cert_manager) = tls_policy::tls_policy(name, spec.tls.as_ref(), &mut errs);
    errs.extend(crate::tls::env_conflicts(&tls, &pod.etcd_env));
    let restore = spec.restore.as_ref().and_then(|r| {
        let loc = crate::backup::location::Location::of(&r.backup_storage_type, &r.source)
            .map_err(|e| errs.push(format!("spec.restore: {e}")))
            .ok()?;
        if r.sha256.len() != 64 || !r.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            errs.push("spec.restore.sha256 must be the 64 hex digits of the backup's sha256".into());
            return None;
        }
        Some(Restore {
            location: loc,
            source: r.source.clone(),
            sha256: r.sha256.to_ascii_lowercase(),
            root_volume: false,
        })
    });
    let recovery = recovery::recovery_policy(spec.recovery.as_ref(), &mut errs);
    let maintenance = maintenance::maintenance_policy(spec.maintenance.as_ref(), &pod, &mut errs);
    let network_policy = network_policy::network_access(spec.network_policy.as_ref(), &mut errs);
    let auth = crate::auth::Policy::of(name, spec.auth.as_ref(), version.as_ref())
        .map_err(|e| errs.extend(e))
        .unwrap_or_default();
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
        network_policy,
        tls_stage: crate::tls::transition::Stage::steady(&tls),
        tls,
        tls_auto,
        tls_cert_manager,
        tls_trust: None,
        auth,
    })
}

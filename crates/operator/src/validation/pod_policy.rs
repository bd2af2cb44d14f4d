//! The stricter `spec.pod` rules (label and annotation syntax, `etcdEnv` bounds and Secrets, the
//! DNS timeout and cluster domain) and the DNS label syntax they use. Pure.

use etcd_operator_api::cluster::PodPolicy;

/// Label and annotation syntax, the DNS timeout's range, the cluster domain's syntax.
pub(super) fn strict_pod_rules(pod: &PodPolicy, errs: &mut Vec<String>) {
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
    for e in &pod.etcd_env {
        if let Some(s) = logged_secret(e) {
            errs.push(format!(
                "spec.pod.etcdEnv: {} takes its value from Secret {:?} (key {:?}), but etcd prints the value of every {ETCD_ENV_PREFIX}* variable in its start-up log (\"recognized and used environment variable\"; unknown ones as \"unrecognized environment variable\"), so the secret would end up in the pod's log. Give etcd no secret through its environment: credentials for clients and peers belong in spec.TLS",
                e.name, s.name, s.key
            ));
        }
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

/// The Secret an `ETCD_*` variable takes its value from: etcd would print it at start-up.
pub(super) fn logged_secret(
    e: &k8s_openapi::api::core::v1::EnvVar,
) -> Option<&k8s_openapi::api::core::v1::SecretKeySelector> {
    let secret = e.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref())?;
    e.name.starts_with(ETCD_ENV_PREFIX).then_some(secret)
}

/// etcd reads (and logs, value included) every environment variable with this prefix.
pub const ETCD_ENV_PREFIX: &str = "ETCD_";

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
pub(super) fn check_qualified_name(k: &str) -> Result<(), String> {
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

pub(super) fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() { Ok(()) } else { check_name_part(v).map_err(|e| format!("value {v:?}: {e}")) }
}

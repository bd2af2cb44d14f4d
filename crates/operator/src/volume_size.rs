//! Growing member volumes: when `spec.pod.persistentVolumeClaimSpec` asks for more storage than
//! a member's PVC has, the PVC's request is raised (Kubernetes expands it where its StorageClass
//! allows; the rollout of the changed pod spec then restarts each member on its volume, which
//! finishes an offline file-system resize). A smaller request is never applied (PVCs cannot
//! shrink). A refusal by the API server (a StorageClass without `allowVolumeExpansion`, a
//! statically provisioned volume) is reported once per PVC and size as a Warning Event naming
//! the PVC and the API's reason; the cluster keeps running on the volumes it has.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::observed::Observed;

/// A Kubernetes quantity (`64Mi`, `1Gi`, `1.5G`, `500000000`) in bytes; `None` if unreadable.
pub fn parse_quantity(q: &str) -> Option<u128> {
    let q = q.trim();
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let mult: u128 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        _ => return None,
    };
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let int: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut value = int.checked_mul(mult)?;
    if !frac.is_empty() {
        let digits = frac.len().min(18) as u32;
        let f: u128 = frac[..digits as usize].parse().ok()?;
        value = value.checked_add(f.checked_mul(mult)? / 10u128.pow(digits))?;
    }
    Some(value)
}

/// PVCs whose storage request is below what the spec asks for now: `(pvc, requested)`.
pub fn to_grow(o: &Observed) -> Vec<(String, String)> {
    let Ok(d) = &o.desired else { return vec![] };
    let Some(want) = d
        .pod
        .persistent_volume_claim_spec
        .as_ref()
        .and_then(|s| s.resources.as_ref()?.requests.as_ref()?.get("storage"))
        .map(|q| q.0.clone())
    else {
        return vec![];
    };
    let Some(want_bytes) = parse_quantity(&want) else { return vec![] };
    o.pvcs
        .values()
        .filter(|v| !v.deleting)
        .filter(|v| v.storage.as_deref().and_then(parse_quantity).is_some_and(|have| have < want_bytes))
        .map(|v| (v.name.clone(), want.clone()))
        .collect()
}

/// `(namespace/pvc, size)` pairs the API server refused, so each is reported (and tried) once
/// per operator process.
#[derive(Default)]
pub struct Refused(Mutex<BTreeSet<(String, String)>>);

impl Refused {
    pub fn contains(&self, key: &(String, String)) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).contains(key)
    }

    pub fn insert(&self, key: (String, String)) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::PvcState;
    use crate::validation::validate;

    #[test]
    fn quantities_are_read_as_kubernetes_writes_them() {
        assert_eq!(parse_quantity("64Mi"), Some(64 << 20));
        assert_eq!(parse_quantity("1Gi"), Some(1 << 30));
        assert_eq!(parse_quantity("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_quantity("2G"), Some(2_000_000_000));
        assert_eq!(parse_quantity("500000"), Some(500_000));
        assert_eq!(parse_quantity("0.5Ki"), Some(512));
        for bad in ["", "Mi", "1Zi", "1..2Gi", "-1Gi", "1e3"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn only_volumes_smaller_than_the_spec_grow() {
        let spec: etcd_operator_api::EtcdClusterSpec = serde_yaml::from_str(
            "size: 3\npod:\n  persistentVolumeClaimSpec:\n    accessModes: [ReadWriteOnce]\n    resources: {requests: {storage: 1Gi}}\n",
        )
        .unwrap();
        let mut o = Observed { desired: validate("ex", &spec), ..Default::default() };
        for (m, size) in [("ex-a", "512Mi"), ("ex-b", "1Gi"), ("ex-c", "2Gi")] {
            o.pvcs.insert(
                m.into(),
                PvcState {
                    name: format!("{m}-data"),
                    member: m.into(),
                    storage: Some(size.into()),
                    ..Default::default()
                },
            );
        }
        assert_eq!(to_grow(&o), [("ex-a-data".to_string(), "1Gi".to_string())], "never shrunk, never the same");
        o.pvcs.get_mut("ex-a").unwrap().deleting = true;
        assert!(to_grow(&o).is_empty(), "a volume going away is left alone");
    }
}

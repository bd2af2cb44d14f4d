//! Where a backup lives: the storage kind, the bucket (S3, GCS) or container (ABS), and the
//! object key; names of periodic backups and of the checksum sidecar; which backups retention
//! deletes. Pure: no I/O.

use etcd_operator_api::backup::{BackupSource, STORAGE_ABS, STORAGE_GCS, STORAGE_PVC, STORAGE_S3};
use serde::{Deserialize, Serialize};

/// Suffix of the sidecar object next to every backup: its sha256, size and origin.
pub const SIDECAR_SUFFIX: &str = ".meta.json";
/// Suffix of the key where a one-shot backup keeps the backup it replaces, with its sidecar, until
/// the new one is complete (`one_shot`).
pub const PREVIOUS_SUFFIX: &str = ".previous";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    S3,
    Abs,
    Gcs,
    Pvc,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::S3 => STORAGE_S3,
            Kind::Abs => STORAGE_ABS,
            Kind::Gcs => STORAGE_GCS,
            Kind::Pvc => STORAGE_PVC,
        }
    }

    pub fn parse(s: &str) -> Result<Kind, String> {
        match s {
            STORAGE_S3 => Ok(Kind::S3),
            STORAGE_ABS => Ok(Kind::Abs),
            STORAGE_GCS => Ok(Kind::Gcs),
            STORAGE_PVC => Ok(Kind::Pvc),
            "" => Err("storage type is empty: use S3, ABS, GCS or PVC".into()),
            other => Err(format!("storage type {other:?} is not supported: use S3, ABS, GCS or PVC")),
        }
    }
}

/// One backup object (or, for periodic backups, the base name of a series).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub kind: Kind,
    /// Bucket (S3, GCS), container (ABS) or claim name (PVC).
    pub bucket: String,
    /// Object key inside the bucket, or file path inside the volume.
    pub key: String,
}

impl Location {
    /// The location a spec names, or why it names none.
    pub fn of(storage_type: &str, source: &BackupSource) -> Result<Location, String> {
        let kind = Kind::parse(storage_type)?;
        let (bucket, key) = match kind {
            Kind::S3 => split_path("s3", source.s3.as_ref().map(|s| s.path.as_str()))?,
            Kind::Abs => split_path("abs", source.abs.as_ref().map(|s| s.path.as_str()))?,
            Kind::Gcs => split_path("gcs", source.gcs.as_ref().map(|s| s.path.as_str()))?,
            Kind::Pvc => {
                let p = source.pvc.as_ref().ok_or("storageType PVC needs a pvc block (claimName, path)")?;
                if p.claim_name.is_empty() {
                    return Err("pvc.claimName is empty".into());
                }
                let key = if p.path.is_empty() { "etcd.backup".to_string() } else { p.path.clone() };
                check_key("pvc.path", &key)?;
                (p.claim_name.clone(), key)
            }
        };
        Ok(Location { kind, bucket, key })
    }

    /// Human form for status and Events: `s3://bucket/key`, `pvc://claim/path`.
    pub fn url(&self) -> String {
        let scheme = match self.kind {
            Kind::S3 => "s3",
            Kind::Abs => "abs",
            Kind::Gcs => "gs",
            Kind::Pvc => "pvc",
        };
        format!("{scheme}://{}/{}", self.bucket, self.key)
    }

    pub fn with_key(&self, key: String) -> Location {
        Location { key, ..self.clone() }
    }
}

/// `source` with its object (S3, ABS, GCS) or file (PVC) replaced by `key`: the same bucket,
/// credentials and options.
pub fn source_with_key(kind: Kind, source: &BackupSource, key: &str) -> BackupSource {
    let mut s = source.clone();
    let rekey = |path: &mut String| {
        let bucket = path.trim_start_matches('/').split_once('/').map(|(b, _)| b.to_string()).unwrap_or_default();
        *path = format!("{bucket}/{key}");
    };
    match kind {
        Kind::S3 => s.s3.iter_mut().for_each(|b| rekey(&mut b.path)),
        Kind::Abs => s.abs.iter_mut().for_each(|b| rekey(&mut b.path)),
        Kind::Gcs => s.gcs.iter_mut().for_each(|b| rekey(&mut b.path)),
        Kind::Pvc => s.pvc.iter_mut().for_each(|b| b.path = key.to_string()),
    }
    s
}

fn split_path(block: &str, path: Option<&str>) -> Result<(String, String), String> {
    let path = path.ok_or_else(|| format!("storage type needs a {block} block with a path"))?;
    let (bucket, key) = path
        .trim_start_matches('/')
        .split_once('/')
        .ok_or_else(|| format!("{block}.path {path:?} must be <bucket>/<key>"))?;
    if bucket.is_empty() || key.is_empty() {
        return Err(format!("{block}.path {path:?} must be <bucket>/<key>"));
    }
    check_key(&format!("{block}.path"), key)?;
    Ok((bucket.to_string(), key.to_string()))
}

fn check_key(what: &str, key: &str) -> Result<(), String> {
    if key.starts_with('/') || key.ends_with('/') || key.split('/').any(|p| p.is_empty() || p == "." || p == "..") {
        return Err(format!("{what} {key:?} must be a relative path without empty, '.' or '..' parts"));
    }
    if key.ends_with(SIDECAR_SUFFIX) {
        return Err(format!("{what} {key:?} must not end in {SIDECAR_SUFFIX} (the checksum sidecars' suffix)"));
    }
    if key.ends_with(PREVIOUS_SUFFIX) {
        return Err(format!("{what} {key:?} must not end in {PREVIOUS_SUFFIX} (the suffix of backups being replaced)"));
    }
    Ok(())
}

/// Key of a periodic backup: the base key, the revision and the UTC time, as in CoreOS
/// (`<key>_v<revision>_<date>`), with a time format that sorts and has no colons.
pub fn periodic_key(base: &str, revision: i64, time: k8s_openapi::jiff::Timestamp) -> String {
    format!("{base}_v{revision}_{}", time.strftime("%Y-%m-%d-%H%M%S"))
}

/// The sidecar key of a backup key.
pub fn sidecar_key(key: &str) -> String {
    format!("{key}{SIDECAR_SUFFIX}")
}

/// Where a one-shot backup keeps the backup at `key` while it replaces it.
pub fn previous_key(key: &str) -> String {
    format!("{key}{PREVIOUS_SUFFIX}")
}

/// If `key` is a periodic backup of `base`: its (time, revision), for ordering.
pub fn parse_periodic(base: &str, key: &str) -> Option<(String, i64)> {
    let rest = key.strip_prefix(base)?.strip_prefix("_v")?;
    let (rev, time) = rest.split_once('_')?;
    let rev: i64 = rev.parse().ok()?;
    let ok = time.len() == 17
        && time.char_indices().all(|(i, c)| if matches!(i, 4 | 7 | 10) { c == '-' } else { c.is_ascii_digit() });
    ok.then(|| (time.to_string(), rev))
}

/// Whose a backup is, as its sidecar says: the EtcdBackup that wrote it and the etcd cluster it
/// was taken from. Retention counts and deletes only backups of exactly its own origin.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Origin {
    /// UID of the EtcdBackup (empty: a sidecar written before sidecars named owners).
    pub owner: String,
    /// The etcd cluster ID, hex (empty: a sidecar written before sidecars named clusters).
    pub cluster_id: String,
}

impl Origin {
    pub fn of(meta: &BackupMeta) -> Origin {
        Origin { owner: meta.owner.clone(), cluster_id: meta.cluster_id.clone() }
    }

    /// Both parts known: only then may retention delete backups of this origin.
    pub fn known(&self) -> bool {
        !self.owner.is_empty() && !self.cluster_id.is_empty()
    }
}

/// Retention: of the periodic backups of `base` among `keys` (sidecars and other objects are
/// ignored), the keys to delete so that the `max` newest of `mine` remain. `origins` maps a key
/// to the origin its sidecar names. A backup of another origin is neither deleted nor counted:
/// of another EtcdBackup writing to the same path, of another etcd cluster (the EtcdCluster was
/// deleted and re-created under its name, or restored: that cluster's last good backups), or one
/// whose origin is not fully known (no sidecar, or one written before sidecars named owners and
/// clusters). `max <= 0` keeps everything. Only called after a backup succeeded.
/// `just_written` is never deleted and counts as the newest, whatever the time in its name says
/// (a pod on a node whose clock is behind would otherwise name its new backup "older" than the
/// last one and delete it at once).
pub fn to_delete(
    base: &str,
    keys: &[String],
    max: i32,
    just_written: &str,
    mine: &Origin,
    origins: &std::collections::BTreeMap<String, Origin>,
) -> Vec<String> {
    if max <= 0 || !mine.known() {
        return Vec::new();
    }
    let mut series: Vec<((String, i64), &String)> = keys
        .iter()
        .filter(|k| k.as_str() != just_written)
        .filter(|k| origins.get(k.as_str()) == Some(mine))
        .filter_map(|k| parse_periodic(base, k).map(|t| (t, k)))
        .collect();
    series.sort_by(|a, b| b.0.cmp(&a.0));
    // One place of the `max` is the backup just written.
    series.into_iter().skip(max as usize - 1).map(|(_, k)| k.clone()).collect()
}

/// The backups of `base` this EtcdBackup (`mine.owner`) wrote of other etcd clusters than
/// `mine`, or of a cluster not recorded (`""`): retention keeps them all. Cluster ID → count.
pub fn kept_of_other_clusters(
    base: &str,
    origins: &std::collections::BTreeMap<String, Origin>,
    mine: &Origin,
) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for (k, o) in origins {
        if parse_periodic(base, k).is_some() && o.owner == mine.owner && o.cluster_id != mine.cluster_id {
            *out.entry(o.cluster_id.clone()).or_insert(0) += 1;
        }
    }
    out
}

/// What the sidecar holds, and what a backup pod reports in its termination message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupMeta {
    /// `s3://bucket/key` etc.
    pub path: String,
    pub sha256: String,
    pub size: i64,
    pub etcd_version: String,
    pub etcd_revision: i64,
    /// The member the snapshot came from.
    pub member: String,
    /// RFC 3339.
    pub time: String,
    /// UID of the EtcdBackup that wrote it: retention deletes only its own owner's backups
    /// (two EtcdBackups may write to the same path). Empty in sidecars written before.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// The etcd cluster the snapshot came from: its cluster ID in hex (as the EtcdCluster's
    /// `status.clusterId`). Retention deletes only backups of the cluster it backs up now. Empty
    /// in sidecars written before.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_id: String,
    /// The store's ETag of the object when its sidecar was written: a cheap check that the
    /// object at the key is still the one this sidecar describes (`one_shot`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub object_etag: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::backup::{PvcSource, S3Source};

    fn s3(path: &str) -> BackupSource {
        BackupSource { s3: Some(S3Source { path: path.into(), ..Default::default() }), ..Default::default() }
    }

    #[test]
    fn a_source_with_another_key_names_that_key_in_the_same_place() {
        for (kind, source) in [
            ("S3", s3("bucket/dir/etcd.backup")),
            (
                "PVC",
                BackupSource {
                    pvc: Some(PvcSource { claim_name: "c".into(), path: "a/b".into() }),
                    ..Default::default()
                },
            ),
        ] {
            let l = Location::of(kind, &source).unwrap();
            let moved = source_with_key(l.kind, &source, "dir/etcd.backup.restores/r-1.db");
            assert_eq!(Location::of(kind, &moved).unwrap(), l.with_key("dir/etcd.backup.restores/r-1.db".into()));
        }
    }

    #[test]
    fn s3_path_is_bucket_and_key() {
        let l = Location::of("S3", &s3("bucket/dir/etcd.backup")).unwrap();
        assert_eq!((l.kind, l.bucket.as_str(), l.key.as_str()), (Kind::S3, "bucket", "dir/etcd.backup"));
        assert_eq!(l.url(), "s3://bucket/dir/etcd.backup");
    }

    #[test]
    fn bad_locations_are_refused_with_the_field_named() {
        assert!(Location::of("S3", &s3("bucket")).unwrap_err().contains("s3.path"));
        assert!(Location::of("S3", &s3("bucket/a/../b")).unwrap_err().contains("'..'"));
        assert!(Location::of("S3", &BackupSource::default()).unwrap_err().contains("s3 block"));
        assert!(Location::of("S3", &s3("b/x.meta.json")).unwrap_err().contains("sidecar"));
        assert!(Location::of("FTP", &s3("b/k")).unwrap_err().contains("\"FTP\" is not supported"));
        assert!(Location::of("", &s3("b/k")).unwrap_err().contains("empty"));
        let pvc =
            BackupSource { pvc: Some(PvcSource { claim_name: "".into(), path: "x".into() }), ..Default::default() };
        assert!(Location::of("PVC", &pvc).unwrap_err().contains("claimName"));
    }

    #[test]
    fn pvc_path_defaults_to_etcd_backup() {
        let pvc = BackupSource {
            pvc: Some(PvcSource { claim_name: "backups".into(), path: "".into() }),
            ..Default::default()
        };
        let l = Location::of("PVC", &pvc).unwrap();
        assert_eq!(l.url(), "pvc://backups/etcd.backup");
    }

    #[test]
    fn periodic_keys_round_trip_and_sort_by_time() {
        let t: k8s_openapi::jiff::Timestamp = "2026-11-22T10:04:05Z".parse().unwrap();
        let k = periodic_key("dir/etcd", 42, t);
        assert_eq!(k, "dir/etcd_v42_2026-11-22-100405");
        assert_eq!(parse_periodic("dir/etcd", &k), Some(("2026-11-22-100405".into(), 42)));
        assert_eq!(parse_periodic("dir/etcd", &sidecar_key(&k)), None, "sidecars are not backups");
        assert_eq!(parse_periodic("dir/etc", &k), None, "another series' prefix");
        assert_eq!(parse_periodic("dir/etcd", "dir/etcd"), None, "the one-shot object");
    }

    #[test]
    fn retention_keeps_the_newest_and_ignores_others() {
        let keys: Vec<String> = [
            "e_v10_2026-01-01-000000",
            "e_v10_2026-01-01-000000.meta.json",
            "e_v30_2026-01-03-000000",
            "e_v20_2026-01-02-000000",
            "e_v40_2026-01-04-000000",
            "e",
            "other_v1_2020-01-01-000000",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let newest = "e_v40_2026-01-04-000000";
        let me = origin("me", "c1");
        let mine = owned(&keys, &me);
        assert_eq!(
            to_delete("e", &keys, 2, newest, &me, &mine),
            ["e_v20_2026-01-02-000000", "e_v10_2026-01-01-000000"]
        );
        assert_eq!(to_delete("e", &keys, 4, newest, &me, &mine), Vec::<String>::new());
        assert_eq!(to_delete("e", &keys, 0, newest, &me, &mine), Vec::<String>::new(), "0 keeps all");
        assert_eq!(to_delete("e", &keys, 1, newest, &me, &mine).len(), 3);
        assert!(!to_delete("e", &keys, 1, newest, &me, &mine).contains(&newest.to_string()));
    }

    fn origin(owner: &str, cluster_id: &str) -> Origin {
        Origin { owner: owner.into(), cluster_id: cluster_id.into() }
    }

    fn owned(keys: &[String], o: &Origin) -> std::collections::BTreeMap<String, Origin> {
        keys.iter().map(|k| (k.clone(), o.clone())).collect()
    }

    /// Two EtcdBackups writing periodic backups to the same path: each one's retention keeps its
    /// own `maxBackups` and never deletes the other's (nor a backup whose owner is unknown).
    #[test]
    fn retention_deletes_only_its_own_owners_backups() {
        let keys: Vec<String> = (1..=6).map(|i| format!("e_v{i}_2026-01-0{i}-000000")).collect();
        let mut owners = std::collections::BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            // 1, 3, 5 are a's; 2, 4 are b's; 6 has no owner (a sidecar from before owners).
            let owner = match i {
                5 => "",
                _ if i % 2 == 0 => "a",
                _ => "b",
            };
            owners.insert(k.clone(), origin(owner, "c1"));
        }
        let a_new = "e_v7_2026-01-07-000000";
        let (a, b) = (origin("a", "c1"), origin("b", "c1"));
        assert_eq!(to_delete("e", &keys, 2, a_new, &a, &owners), ["e_v3_2026-01-03-000000", "e_v1_2026-01-01-000000"]);
        assert_eq!(to_delete("e", &keys, 2, a_new, &b, &owners), ["e_v2_2026-01-02-000000"]);
        let nobody = origin("", "c1");
        assert_eq!(to_delete("e", &keys, 1, a_new, &nobody, &owners), Vec::<String>::new(), "no owner: delete nothing");
    }

    /// The EtcdCluster was deleted and re-created under its name (or restored): its EtcdBackup
    /// now backs up another etcd cluster. Retention prunes the new cluster's backups only; every
    /// backup of the cluster before, and of a cluster not recorded (sidecars from before), stays,
    /// and is reported as kept.
    #[test]
    fn retention_never_deletes_backups_of_another_etcd_cluster() {
        let keys: Vec<String> = (1..=6).map(|i| format!("e_v{i}_2026-01-0{i}-000000")).collect();
        // 1, 2, 3: the cluster before (c-old); 4: no cluster recorded; 5, 6: the new cluster.
        let ids = ["c-old", "c-old", "c-old", "", "c-new", "c-new"];
        let origins: std::collections::BTreeMap<String, Origin> =
            keys.iter().zip(ids).map(|(k, id)| (k.clone(), origin("me", id))).collect();
        let new = origin("me", "c-new");
        let written = "e_v7_2026-01-07-000000";
        assert_eq!(to_delete("e", &keys, 2, written, &new, &origins), ["e_v5_2026-01-05-000000"]);
        assert_eq!(to_delete("e", &keys, 1, written, &new, &origins).len(), 2, "only c-new's, at any limit");
        assert_eq!(
            kept_of_other_clusters("e", &origins, &new),
            std::collections::BTreeMap::from([("".to_string(), 1), ("c-old".to_string(), 3)])
        );
        let unknown = origin("me", "");
        assert_eq!(to_delete("e", &keys, 1, written, &unknown, &origins), Vec::<String>::new(), "own cluster unknown");
    }

    #[test]
    fn retention_never_deletes_the_backup_just_written() {
        // Written by a pod whose clock is a day behind: by its name it is the oldest.
        let keys: Vec<String> = ["e_v50_2026-01-01-000000", "e_v40_2026-01-02-000000", "e_v30_2026-01-01-120000"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let me = origin("me", "c1");
        let mine = owned(&keys, &me);
        let d = to_delete("e", &keys, 1, "e_v50_2026-01-01-000000", &me, &mine);
        assert_eq!(d, ["e_v40_2026-01-02-000000", "e_v30_2026-01-01-120000"]);
        let d = to_delete("e", &keys, 2, "e_v50_2026-01-01-000000", &me, &mine);
        assert_eq!(d, ["e_v30_2026-01-01-120000"]);
    }
}

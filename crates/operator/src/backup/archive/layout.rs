//! Where an archive's segments live: next to the snapshots of `<key>`, under
//! `<key>.archive/<cluster ID>/`, one object per segment named by its revision range with
//! zero-padded numbers, so a plain listing is in revision order and a restore needs no index.
//! Pure.

/// The directory of one etcd cluster's segments for the snapshot series `base_key`.
pub fn prefix(base_key: &str, cluster_id: &str) -> String {
    format!("{base_key}.archive/{cluster_id}/")
}

/// The key of the segment `from..=to`.
pub fn segment_key(prefix: &str, from: i64, to: i64) -> String {
    format!("{prefix}{from:020}-{to:020}.seg")
}

/// The range a segment key names, if `key` is one under `prefix`.
pub fn parse_segment_key(prefix: &str, key: &str) -> Option<(i64, i64)> {
    let name = key.strip_prefix(prefix)?.strip_suffix(".seg")?;
    let (from, to) = name.split_once('-')?;
    if from.len() != 20 || to.len() != 20 {
        return None;
    }
    let (from, to) = (from.parse().ok()?, to.parse().ok()?);
    (from <= to).then_some((from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_keys_sort_in_revision_order_and_parse_back() {
        let p = prefix("backups/etcd.backup", "c0ffee");
        assert_eq!(p, "backups/etcd.backup.archive/c0ffee/");
        let keys = [segment_key(&p, 9, 99), segment_key(&p, 100, 1_000), segment_key(&p, 1_001, 1_001)];
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(sorted, keys, "lexical order is revision order");
        assert_eq!(parse_segment_key(&p, &keys[1]), Some((100, 1_000)));
    }

    #[test]
    fn other_objects_are_not_segments() {
        let p = prefix("b", "c1");
        for k in [
            "b_v10_2026",
            "b.archive/c2/00000000000000000001-00000000000000000002.seg",
            "b.archive/c1/1-2.seg",
            "b.archive/c1/00000000000000000003-00000000000000000002.seg",
        ] {
            assert_eq!(parse_segment_key(&p, k), None, "{k}");
        }
    }
}

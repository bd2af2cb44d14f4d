//! Retention of an archive by a time window (`retention: 168h`): every moment of the last
//! window stays restorable. So the newest snapshot taken at or before the window's start (the
//! floor) is kept with everything after it; older snapshots go, and so do segments that end
//! at or before the floor's revision. And whatever `maxBackups` decides, a snapshot is never
//! deleted while a kept segment chain starts from it. Pure.

use std::collections::BTreeSet;

use super::restorable_ranges::{SegmentRef, SnapshotRef};

/// What a window retention deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletions {
    pub snapshots: Vec<String>,
    pub segments: Vec<String>,
}

/// Keys to delete so that every moment since `now_ms - window_ms` stays restorable. Nothing is
/// deleted without a floor (no snapshot old enough yet: everything is still inside the window).
pub fn by_window(snapshots: &[SnapshotRef], segments: &[SegmentRef], now_ms: i64, window_ms: i64) -> Deletions {
    let start = now_ms.saturating_sub(window_ms);
    let Some(floor) = snapshots.iter().filter(|s| s.taken_ms <= start).max_by_key(|s| (s.taken_ms, s.revision)) else {
        return Deletions::default();
    };
    Deletions {
        snapshots: snapshots
            .iter()
            .filter(|s| s.taken_ms < floor.taken_ms && s.revision < floor.revision)
            .map(|s| s.key.clone())
            .collect(),
        segments: segments
            .iter()
            .filter(|s| s.header.cluster_id == floor.cluster_id && s.header.to <= floor.revision)
            .map(|s| s.key.clone())
            .collect(),
    }
}

/// Segments no kept snapshot can be continued by: they end at or before the revision of the
/// oldest snapshot of the cluster that is kept, so no restore ever replays them (`maxBackups`
/// retention deleted the snapshots they continued). `segments`: key and last revision.
pub fn before_oldest_snapshot(oldest_kept: i64, segments: &[(String, i64)]) -> Vec<String> {
    segments.iter().filter(|(_, to)| *to <= oldest_kept).map(|(k, _)| k.clone()).collect()
}

/// Snapshots that kept segments continue (their `baseRevision`): `maxBackups` must not delete
/// these, or the segments after them restore nothing.
pub fn protected(snapshots: &[SnapshotRef], kept_segments: &[SegmentRef]) -> BTreeSet<String> {
    snapshots
        .iter()
        .filter(|snap| {
            kept_segments
                .iter()
                .any(|s| s.header.cluster_id == snap.cluster_id && s.header.base_revision == snap.revision)
        })
        .map(|s| s.key.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::restorable_ranges::ranges;
    use super::super::segment::{FORMAT, Header};
    use super::*;

    const H: i64 = 3_600_000;

    fn snap(rev: i64, hour: i64) -> SnapshotRef {
        SnapshotRef { key: format!("b_v{rev}"), cluster_id: "c1".into(), revision: rev, taken_ms: hour * H }
    }

    fn seg(base: i64, from: i64, to: i64, hour: i64) -> SegmentRef {
        SegmentRef {
            key: format!("{from}-{to}"),
            header: Header {
                format: FORMAT.into(),
                cluster_id: "c1".into(),
                base_revision: base,
                from,
                to,
                first_ms: hour * H,
                last_ms: hour * H + 1,
                events: 1,
                sha256: String::new(),
            },
        }
    }

    #[test]
    fn the_window_keeps_the_snapshot_before_its_start_and_everything_after() {
        // Snapshots every 10 hours, segments hourly; a 24 h window at hour 40 starts at 16.
        let snaps = [snap(100, 0), snap(200, 10), snap(300, 20), snap(400, 30)];
        let segs: Vec<SegmentRef> =
            (0..40).map(|h| seg(100 + (h / 10) * 100, 100 + h * 10 + 1, 100 + h * 10 + 10, h)).collect();
        let d = by_window(&snaps, &segs, 40 * H, 24 * H);
        assert_eq!(d.snapshots, vec!["b_v100"], "hour 10's snapshot is the floor of a window starting at 16");
        assert!(d.segments.iter().all(|k| segs.iter().any(|s| &s.key == k && s.header.to <= 200)));
        // What is left still restores every revision from the floor on.
        let kept_snaps: Vec<SnapshotRef> = snaps.iter().filter(|s| !d.snapshots.contains(&s.key)).cloned().collect();
        let kept_segs: Vec<SegmentRef> = segs.iter().filter(|s| !d.segments.contains(&s.key)).cloned().collect();
        let rs = ranges("c1", &kept_snaps, &kept_segs);
        assert_eq!(rs.iter().map(|r| r.from).min(), Some(200));
        assert_eq!(rs.iter().map(|r| r.to).max(), Some(500));
    }

    #[test]
    fn nothing_goes_while_no_snapshot_is_older_than_the_window() {
        let d = by_window(&[snap(100, 30)], &[seg(100, 101, 110, 31)], 40 * H, 24 * H);
        assert_eq!(d, Deletions::default());
    }

    #[test]
    fn segments_ending_at_or_before_the_oldest_kept_snapshot_go_and_the_rest_still_restore() {
        let segs = [seg(100, 101, 150, 1), seg(100, 151, 200, 2), seg(100, 201, 260, 3)];
        let listed: Vec<(String, i64)> = segs.iter().map(|s| (s.key.clone(), s.header.to)).collect();
        // maxBackups kept only the snapshot at 200 (hour 2).
        let gone = before_oldest_snapshot(200, &listed);
        assert_eq!(gone, vec!["101-150".to_string(), "151-200".to_string()]);
        let kept: Vec<SegmentRef> = segs.iter().filter(|s| !gone.contains(&s.key)).cloned().collect();
        let rs = ranges("c1", &[snap(200, 2)], &kept);
        assert_eq!((rs[0].from, rs[0].to), (200, 260), "the kept snapshot still restores every later revision");
    }

    #[test]
    fn a_snapshot_that_kept_segments_continue_is_protected_from_max_backups() {
        let p = protected(&[snap(100, 0), snap(200, 10)], &[seg(200, 201, 210, 11)]);
        assert_eq!(p.into_iter().collect::<Vec<_>>(), vec!["b_v200".to_string()]);
    }
}

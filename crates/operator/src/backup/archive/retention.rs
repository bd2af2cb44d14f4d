//! Retention of a snapshot series and its archive, after each successful periodic backup. Pure.
//!
//! Two rules, each optional: `maxBackups` (keep the N newest snapshots) and a time window
//! (`retention: 168h`: every moment of the last window stays restorable, so the newest snapshot
//! taken at or before the window's start, the floor, is kept with everything after it). A
//! snapshot is deleted only when every configured rule allows it ([`plan`]). And whatever they
//! decide, a snapshot is never deleted while a kept segment can be restored only from it
//! ([`protected`]); segments that end at or before the oldest kept snapshot of the cluster go
//! ([`before_oldest_snapshot`]): no restore can start before them any more.
//!
//! A kept snapshot restores every segment after it that continues its revision (the chain is
//! followed by revision, not by the snapshot a segment was first written after: see
//! `restorable_ranges::ranges`), so a snapshot an archive chain was started from may go once a
//! later kept snapshot lies on the same chain.

use std::collections::BTreeSet;

use super::restorable_ranges::{SegmentRef, SnapshotRef, ranges};

/// What retention deletes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deletions {
    pub snapshots: Vec<String>,
    pub segments: Vec<String>,
}

/// The longest window accepted: ten years (longer ones would overflow time arithmetic).
pub const MAX_WINDOW_SECS: u64 = 10 * 365 * 24 * 3600;

/// `retention` as seconds: one or more `<number><unit>` with units `h`, `m`, `s` (`168h`,
/// `90m`, `1h30m`), more than 0 and at most [`MAX_WINDOW_SECS`]. Empty: `None` (no window).
pub fn parse_window(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let bad =
        || format!("backupPolicy.retention {text:?} is not a duration such as 168h, 90m or 1h30m (units h, m, s)");
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n.checked_mul(unit).and_then(|x| total.checked_add(x)).ok_or_else(bad)?;
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    if total == 0 {
        return Err(format!("backupPolicy.retention {text:?} is no time at all: leave it empty for no window"));
    }
    if total > MAX_WINDOW_SECS {
        return Err(format!("backupPolicy.retention {text:?} is longer than ten years"));
    }
    Ok(Some(total))
}

/// What one retention run is given: the listing of the series and its archive, and the rules.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    /// The etcd cluster just backed up: only its snapshots and segments may be deleted.
    pub cluster_id: &'a str,
    /// Keys of the snapshots this EtcdBackup wrote (its sidecars name it): only these may be
    /// deleted; snapshots of other EtcdBackups writing to the same path still anchor segments.
    pub mine: &'a BTreeSet<String>,
    /// Every snapshot of the series with a sidecar, of any cluster and owner, the one just
    /// written included.
    pub snapshots: &'a [SnapshotRef],
    /// Every segment of the series' archive, of any cluster.
    pub segments: &'a [SegmentRef],
    /// The snapshots `maxBackups` would delete (`location::to_delete`); `None`: `maxBackups` is
    /// 0, no such rule.
    pub by_count: Option<&'a [String]>,
    /// The window, in milliseconds; `None`: no window.
    pub window_ms: Option<i64>,
    pub now_ms: i64,
}

/// What to delete: a snapshot of this EtcdBackup and cluster when every configured rule allows
/// it and no kept segment needs it ([`protected`]); this cluster's segments that end at or
/// before the oldest snapshot of the cluster still kept. No rule configured: nothing.
pub fn plan(i: &Inputs) -> Deletions {
    let cluster: Vec<SnapshotRef> = i.snapshots.iter().filter(|s| s.cluster_id == i.cluster_id).cloned().collect();
    let segments: Vec<SegmentRef> =
        i.segments.iter().filter(|s| s.header.cluster_id == i.cluster_id).cloned().collect();
    let mine: Vec<SnapshotRef> = cluster.iter().filter(|s| i.mine.contains(&s.key)).cloned().collect();
    let mine_keys: BTreeSet<String> = mine.iter().map(|s| s.key.clone()).collect();
    let mut rules: Vec<BTreeSet<String>> = Vec::new();
    if let Some(keys) = i.by_count {
        rules.push(keys.iter().cloned().collect());
    }
    if let Some(w) = i.window_ms {
        rules.push(by_window(&mine, &[], i.now_ms, w).snapshots.into_iter().collect());
    }
    let mut doomed: BTreeSet<String> = match rules.split_first() {
        None => BTreeSet::new(),
        Some((first, rest)) => {
            first.iter().filter(|k| mine_keys.contains(*k) && rest.iter().all(|r| r.contains(*k))).cloned().collect()
        }
    };
    // Protecting one snapshot keeps more segments, which may need another: until nothing changes.
    loop {
        let (gone, kept): (Vec<SnapshotRef>, Vec<SnapshotRef>) =
            cluster.iter().cloned().partition(|s| doomed.contains(&s.key));
        let kept_segments: Vec<SegmentRef> = match kept.iter().map(|s| s.revision).min() {
            Some(oldest) => segments.iter().filter(|s| s.header.to > oldest).cloned().collect(),
            None => segments.clone(),
        };
        let save = protected(&gone, &kept, &kept_segments);
        if save.is_empty() {
            let segments = match kept.iter().map(|s| s.revision).min() {
                Some(oldest) => {
                    let listed: Vec<(String, i64)> = segments.iter().map(|s| (s.key.clone(), s.header.to)).collect();
                    before_oldest_snapshot(oldest, &listed)
                }
                // Nothing of the cluster kept (cannot happen after a backup: it keeps the one
                // just written): the segments are left alone.
                None => Vec::new(),
            };
            let mut snapshots: Vec<String> = doomed.into_iter().collect();
            snapshots.sort();
            return Deletions { snapshots, segments };
        }
        doomed.retain(|k| !save.contains(k));
    }
}

/// The window's inputs on the store's clock: each snapshot's time is its object's
/// last-modified time and "now" the one of the snapshot just written (`just_written`), so that
/// a backup pod whose node's clock is off (or two EtcdBackups' pods on nodes whose clocks
/// differ) cannot put kept snapshots outside the window. A snapshot's upload ends after etcd
/// took it: on this clock it looks younger, which keeps more, never less. `None` when the
/// snapshot just written is not listed: no "now" on that clock, so nothing may be deleted.
pub fn on_store_clock(
    snapshots: &[SnapshotRef],
    modified_ms: &std::collections::BTreeMap<String, i64>,
    just_written: &str,
) -> Option<(Vec<SnapshotRef>, i64)> {
    let now = *modified_ms.get(just_written)?;
    let snaps = snapshots
        .iter()
        .map(|s| SnapshotRef { taken_ms: modified_ms.get(&s.key).copied().unwrap_or(now), ..s.clone() })
        .collect();
    Some((snaps, now))
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
/// oldest snapshot of the cluster that is kept, so no restore ever replays them (retention
/// deleted the snapshots they continued). `segments`: key and last revision.
pub fn before_oldest_snapshot(oldest_kept: i64, segments: &[(String, i64)]) -> Vec<String> {
    segments.iter().filter(|(_, to)| *to <= oldest_kept).map(|(k, _)| k.clone()).collect()
}

/// Of the snapshots about to be deleted (`doomed`), those a kept segment can be restored from
/// only through them: some revision of a kept segment lies in the doomed snapshot's restorable
/// range and in no kept snapshot's. Deleting one of those would leave segments that restore
/// nothing (e.g. the snapshot the archiver took after a gap, when `maxBackups` would delete it
/// but keep an older snapshot whose chain ends before the gap).
pub fn protected(doomed: &[SnapshotRef], kept: &[SnapshotRef], kept_segments: &[SegmentRef]) -> BTreeSet<String> {
    let runs = super::restorable_ranges::runs(kept_segments);
    let mut out = BTreeSet::new();
    for x in doomed {
        let Some(mine) = ranges(&x.cluster_id, std::slice::from_ref(x), &runs).pop() else { continue };
        let mut covered: Vec<(i64, i64)> =
            ranges(&x.cluster_id, kept, &runs).into_iter().map(|r| (r.from, r.to)).collect();
        covered.sort();
        let needed = runs.iter().filter(|s| s.header.cluster_id == x.cluster_id).any(|s| {
            let (lo, hi) = (s.header.from.max(x.revision + 1), s.header.to.min(mine.to));
            lo <= hi && !spans(lo, hi, &covered)
        });
        if needed {
            out.insert(x.key.clone());
        }
    }
    out
}

/// Every revision of `lo..=hi` lies in one of `ranges` (sorted by start).
fn spans(lo: i64, hi: i64, ranges: &[(i64, i64)]) -> bool {
    let mut next = lo;
    for (from, to) in ranges {
        if *from > next {
            break;
        }
        next = next.max(to + 1);
        if next > hi {
            return true;
        }
    }
    next > hi
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

    fn keys(snaps: &[SnapshotRef]) -> BTreeSet<String> {
        snaps.iter().map(|s| s.key.clone()).collect()
    }

    /// A cluster written to all day: a snapshot every hour at revision 100·(hour+1), and the
    /// archive started after the first one: segments of 10 revisions each, all continuing the
    /// snapshot at 100 (the archiver keeps the chain it started with).
    fn hourly(hours: i64) -> (Vec<SnapshotRef>, Vec<SegmentRef>) {
        let snaps = (0..hours).map(|h| snap(100 * (h + 1), h)).collect();
        let segs = (0..(hours - 1) * 10).map(|i| seg(100, 101 + i * 10, 110 + i * 10, i / 10)).collect();
        (snaps, segs)
    }

    /// A backup pod whose clock is three days ahead: on its own clock (its sidecar times) the
    /// two snapshots of the last two hours look three days old and one of them goes although a
    /// 24 h window must keep both; on the store's clock nothing is outside the window.
    #[test]
    fn a_pod_clock_ahead_deletes_nothing_inside_the_window_on_the_stores_clock() {
        let now = 1000 * H;
        let snaps = [snap(100, 998), snap(200, 999), SnapshotRef { taken_ms: now + 72 * H, ..snap(300, 0) }];
        let on_pod_clock = run(&snaps, &[], None, Some(24), 1000 + 72);
        assert_eq!(on_pod_clock.snapshots, ["b_v100"], "the skewed clock deletes inside the window");
        let modified = std::collections::BTreeMap::from([
            ("b_v100".to_string(), 998 * H + 5),
            ("b_v200".to_string(), 999 * H + 5),
            ("b_v300".to_string(), now + 5),
        ]);
        let (store_snaps, store_now) = on_store_clock(&snaps, &modified, "b_v300").unwrap();
        assert_eq!(store_now, now + 5);
        let d = plan(&Inputs {
            cluster_id: "c1",
            mine: &keys(&snaps),
            snapshots: &store_snaps,
            segments: &[],
            by_count: None,
            window_ms: Some(24 * H),
            now_ms: store_now,
        });
        assert_eq!(d, Deletions::default());
        // Days later on the store's clock the window does apply.
        let later: std::collections::BTreeMap<String, i64> =
            modified.iter().map(|(k, v)| (k.clone(), if k == "b_v300" { v + 48 * H } else { *v })).collect();
        let (s, n) = on_store_clock(&snaps, &later, "b_v300").unwrap();
        let d = plan(&Inputs {
            cluster_id: "c1",
            mine: &keys(&snaps),
            snapshots: &s,
            segments: &[],
            by_count: None,
            window_ms: Some(24 * H),
            now_ms: n,
        });
        assert_eq!(d.snapshots, ["b_v100"]);
        assert!(on_store_clock(&snaps, &modified, "b_v400").is_none(), "not listed: no now");
    }

    /// `maxBackups` as `location::to_delete` decides it: all but the `max` newest.
    fn beyond(snaps: &[SnapshotRef], max: usize) -> Vec<String> {
        let mut s: Vec<&SnapshotRef> = snaps.iter().collect();
        s.sort_by_key(|s| std::cmp::Reverse(s.taken_ms));
        s.into_iter().skip(max).map(|s| s.key.clone()).collect()
    }

    fn run(
        snaps: &[SnapshotRef],
        segs: &[SegmentRef],
        by_count: Option<&[String]>,
        window_h: Option<i64>,
        now_h: i64,
    ) -> Deletions {
        let mine = keys(snaps);
        plan(&Inputs {
            cluster_id: "c1",
            mine: &mine,
            snapshots: snaps,
            segments: segs,
            by_count,
            window_ms: window_h.map(|h| h * H),
            now_ms: now_h * H,
        })
    }

    /// What the kept objects restore: (first, last) revision of every range.
    fn restorable(snaps: &[SnapshotRef], segs: &[SegmentRef], d: &Deletions) -> Vec<(i64, i64)> {
        let kept_snaps: Vec<SnapshotRef> = snaps.iter().filter(|s| !d.snapshots.contains(&s.key)).cloned().collect();
        let kept_segs: Vec<SegmentRef> = segs.iter().filter(|s| !d.segments.contains(&s.key)).cloned().collect();
        ranges("c1", &kept_snaps, &kept_segs).iter().map(|r| (r.from, r.to)).collect()
    }

    #[test]
    fn a_window_is_hours_minutes_and_seconds() {
        assert_eq!(parse_window(""), Ok(None));
        assert_eq!(parse_window("168h"), Ok(Some(168 * 3600)));
        assert_eq!(parse_window("90m"), Ok(Some(5400)));
        assert_eq!(parse_window("40s"), Ok(Some(40)));
        assert_eq!(parse_window("1h30m"), Ok(Some(5400)));
        for bad in ["7d", "168", "h", "-1h", "1.5h", "1 h", "99999999999999999999h"] {
            let e = parse_window(bad).expect_err(bad);
            assert!(e.contains("backupPolicy.retention") && e.contains(bad), "{bad}: {e}");
        }
        assert!(parse_window("0s").unwrap_err().contains("no time at all"));
        assert!(parse_window("87601h").unwrap_err().contains("ten years"));
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
        let rs = restorable(&snaps, &segs, &d);
        assert_eq!(rs.iter().map(|r| r.0).min(), Some(200));
        assert_eq!(rs.iter().map(|r| r.1).max(), Some(500));
    }

    #[test]
    fn nothing_goes_while_no_snapshot_is_older_than_the_window() {
        let d = by_window(&[snap(100, 30)], &[seg(100, 101, 110, 31)], 40 * H, 24 * H);
        assert_eq!(d, Deletions::default());
        let (snaps, segs) = hourly(6);
        assert_eq!(run(&snaps, &segs, None, Some(24), 6), Deletions::default());
    }

    #[test]
    fn without_max_backups_or_a_window_nothing_is_deleted() {
        let (snaps, segs) = hourly(6);
        assert_eq!(run(&snaps, &segs, None, None, 100), Deletions::default());
    }

    /// Window 2.5 h at hour 5.5: it starts at hour 3, so the snapshot of hour 3 (revision 400)
    /// is the floor. Older snapshots go, and every segment ending at or before 400.
    #[test]
    fn the_window_keeps_its_floor_snapshot_and_every_segment_after_it() {
        let (snaps, segs) = hourly(6);
        let d = plan(&Inputs {
            cluster_id: "c1",
            mine: &keys(&snaps),
            snapshots: &snaps,
            segments: &segs,
            by_count: None,
            window_ms: Some(5 * H / 2),
            now_ms: 11 * H / 2,
        });
        assert_eq!(d.snapshots, ["b_v100", "b_v200", "b_v300"]);
        assert!(!d.segments.is_empty());
        assert!(segs.iter().all(|s| d.segments.contains(&s.key) == (s.header.to <= 400)));
        assert_eq!(restorable(&snaps, &segs, &d).first(), Some(&(400, 600)), "every revision from the floor on");
    }

    /// `maxBackups: 2` alone would keep hours 4 and 5; the 2.5 h window needs hour 3 as well:
    /// a snapshot goes only when both rules let it.
    #[test]
    fn max_backups_2_with_a_window_keeps_what_the_window_needs() {
        let (snaps, segs) = hourly(6);
        let by_count = beyond(&snaps, 2);
        assert_eq!(by_count, ["b_v400", "b_v300", "b_v200", "b_v100"]);
        let d = plan(&Inputs {
            cluster_id: "c1",
            mine: &keys(&snaps),
            snapshots: &snaps,
            segments: &segs,
            by_count: Some(&by_count),
            window_ms: Some(5 * H / 2),
            now_ms: 11 * H / 2,
        });
        assert_eq!(d.snapshots, ["b_v100", "b_v200", "b_v300"], "the floor (400) and after stay");
        // And the other way round: a window that needs nothing old does not keep more than
        // maxBackups would.
        let d = run(&snaps, &segs, Some(&by_count), Some(1), 6);
        assert_eq!(d.snapshots, ["b_v100", "b_v200", "b_v300", "b_v400"]);
    }

    /// Every segment continues the snapshot at 100 (where the archiver started), yet that
    /// snapshot goes with `maxBackups: 2`: the kept snapshot at 500 lies on the same unbroken
    /// chain and restores every later revision. Segments up to 500 go with it.
    #[test]
    fn the_archives_first_snapshot_goes_once_a_kept_snapshot_lies_on_its_chain() {
        let (snaps, segs) = hourly(6);
        let d = run(&snaps, &segs, Some(&beyond(&snaps, 2)), None, 6);
        assert_eq!(d.snapshots, ["b_v100", "b_v200", "b_v300", "b_v400"]);
        assert!(segs.iter().all(|s| d.segments.contains(&s.key) == (s.header.to <= 500)));
        assert_eq!(restorable(&snaps, &segs, &d), [(500, 600), (600, 600)]);
    }

    /// Compaction overtook the archiver after 250: it took a snapshot at 300 and continued from
    /// it (segments 301..=400 continue 300). That pod's clock was behind, so by name the
    /// snapshot at 300 is the oldest, and `maxBackups: 2` would delete it while keeping 200,
    /// whose chain ends at 250. The segments after 300 could then restore nothing: 300 stays.
    #[test]
    fn a_snapshot_a_kept_chain_can_only_be_restored_from_survives_max_backups() {
        let snaps = [snap(100, 1), snap(200, 2), snap(300, 0), snap(400, 4)];
        let segs = [seg(100, 101, 150, 1), seg(100, 151, 250, 2), seg(300, 301, 350, 3), seg(300, 351, 400, 4)];
        let by_count = beyond(&snaps, 2);
        assert_eq!(by_count, ["b_v100", "b_v300"]);
        let d = run(&snaps, &segs, Some(&by_count), None, 5);
        assert_eq!(d.snapshots, ["b_v100"], "300 is protected");
        assert_eq!(d.segments, ["101-150"]);
        assert_eq!(restorable(&snaps, &segs, &d), [(200, 250), (300, 400), (400, 400)]);
        assert_eq!(protected(&[snap(300, 0)], &[snap(200, 2), snap(400, 4)], &segs[1..]).len(), 1);
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
        // The same through plan: maxBackups 1 after the backup at 200.
        let snaps = [snap(100, 0), snap(200, 2)];
        let d = run(&snaps, &segs, Some(&["b_v100".to_string()]), None, 3);
        assert_eq!((d.snapshots, d.segments), (vec!["b_v100".to_string()], gone));
    }

    /// The series also holds an earlier etcd cluster's snapshots and archive (the EtcdCluster
    /// was re-created), and a snapshot another EtcdBackup wrote to the same path. None of them
    /// is deleted, whatever the rules say; the other EtcdBackup's old snapshot of this cluster
    /// still restores the segments after it, so they stay too.
    #[test]
    fn another_clusters_and_another_backups_objects_are_untouched() {
        let old = |mut s: SnapshotRef| {
            s.cluster_id = "c0".into();
            s.key = format!("{}-c0", s.key);
            s
        };
        let old_seg = |mut s: SegmentRef| {
            s.header.cluster_id = "c0".into();
            s.key = format!("c0/{}", s.key);
            s
        };
        let (mut snaps, mut segs) = hourly(6);
        snaps.extend([old(snap(50, 0)), old(snap(90, 0))]);
        segs.push(old_seg(seg(50, 51, 90, 0)));
        let mut other = snap(150, 0);
        other.key = "b_v150-other".into();
        snaps.push(other);
        let mine: BTreeSet<String> = (0..6).map(|h| format!("b_v{}", 100 * (h + 1))).collect();
        let everything: Vec<String> = snaps.iter().map(|s| s.key.clone()).collect();
        let d = plan(&Inputs {
            cluster_id: "c1",
            mine: &mine,
            snapshots: &snaps,
            segments: &segs,
            by_count: Some(&everything),
            window_ms: Some(H),
            now_ms: 6 * H,
        });
        assert_eq!(d.snapshots, ["b_v100", "b_v200", "b_v300", "b_v400", "b_v500"], "mine of c1 only");
        assert!(d.segments.iter().all(|k| !k.starts_with("c0/")), "{:?}", d.segments);
        assert!(
            segs.iter()
                .filter(|s| s.header.cluster_id == "c1")
                .all(|s| d.segments.contains(&s.key) == (s.header.to <= 150))
        );
    }
}

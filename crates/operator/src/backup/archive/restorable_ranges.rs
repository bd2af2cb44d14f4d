//! Which revisions (and moments) an archive can restore, from a listing alone: the full
//! snapshots (revision, time) and the segment headers (first line of each segment object).
//! A snapshot at revision S restores S; followed by segments `S+1..=a`, `a+1..=b`, … it
//! restores every revision up to the last one of that unbroken chain. Whatever lies between two
//! such ranges is a gap: reported, never bridged. Pure.

use super::segment::Header;

/// A full snapshot, as its name and sidecar say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotRef {
    pub key: String,
    pub cluster_id: String,
    pub revision: i64,
    /// Unix milliseconds when it was taken.
    pub taken_ms: i64,
}

/// A segment, as its key and header say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRef {
    pub key: String,
    pub header: Header,
}

/// Revisions `from..=to` (and the moments `from_ms..=to_ms`) are restorable: from the
/// snapshot at `from`, replaying `segments` (in order).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub snapshot: SnapshotRef,
    pub segments: Vec<SegmentRef>,
    pub from: i64,
    pub to: i64,
    pub from_ms: i64,
    pub to_ms: i64,
}

impl Range {
    /// `revision 100 (…Z) to 250 (…Z)`, for conditions, Events and refusals.
    pub fn describe(&self) -> String {
        format!("revisions {}..={} ({} to {})", self.from, self.to, time(self.from_ms), time(self.to_ms))
    }
}

/// RFC 3339 of Unix milliseconds (the number itself if out of range).
pub fn time(ms: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_millisecond(ms).map(|t| t.to_string()).unwrap_or_else(|_| format!("{ms} ms"))
}

/// What is missing between two restorable ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The first and last revision no range restores.
    pub from: i64,
    pub to: i64,
    pub from_ms: i64,
    pub to_ms: i64,
}

/// Every snapshot's range, in snapshot order (a snapshot without segments: a range of one
/// revision). Only snapshots and segments of `cluster_id` count. Where several segments
/// continue a chain (an archiver that wrote one twice after a restart), the one reaching
/// furthest is followed; a segment whose events start past the next revision breaks the chain.
pub fn ranges(cluster_id: &str, snapshots: &[SnapshotRef], segments: &[SegmentRef]) -> Vec<Range> {
    let mut snaps: Vec<&SnapshotRef> = snapshots.iter().filter(|s| s.cluster_id == cluster_id).collect();
    snaps.sort_by_key(|s| (s.revision, s.taken_ms));
    let segs: Vec<&SegmentRef> = segments.iter().filter(|s| s.header.cluster_id == cluster_id).collect();
    snaps
        .into_iter()
        .map(|snap| {
            let mut r = Range {
                snapshot: snap.clone(),
                segments: vec![],
                from: snap.revision,
                to: snap.revision,
                from_ms: snap.taken_ms,
                to_ms: snap.taken_ms,
            };
            while let Some(next) = segs
                .iter()
                .filter(|s| s.header.from <= r.to + 1 && s.header.to > r.to)
                .max_by_key(|s| (s.header.to, std::cmp::Reverse(s.header.from)))
            {
                r.to = next.header.to;
                r.to_ms = r.to_ms.max(next.header.last_ms);
                r.segments.push((*next).clone());
            }
            r
        })
        .collect()
}

/// The segments merged into unbroken runs (per cluster, in revision order): one segment per
/// run, from its first to its last revision, named by the key of the segment reaching furthest,
/// with the earliest `first_ms` and the latest `last_ms`. [`ranges`] over runs gives the same
/// revisions as over the segments (not the segments to replay): for a listing of thousands of
/// segments, and for segments known only by their keys.
pub fn runs(segments: &[SegmentRef]) -> Vec<SegmentRef> {
    let mut sorted: Vec<&SegmentRef> = segments.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.header.cluster_id, a.header.from, a.header.to).cmp(&(&b.header.cluster_id, b.header.from, b.header.to))
    });
    let mut out: Vec<SegmentRef> = Vec::new();
    for s in sorted {
        match out.last_mut() {
            Some(run) if run.header.cluster_id == s.header.cluster_id && s.header.from <= run.header.to + 1 => {
                if s.header.to > run.header.to {
                    run.header.to = s.header.to;
                    run.key = s.key.clone();
                }
                run.header.first_ms = run.header.first_ms.min(s.header.first_ms);
                run.header.last_ms = run.header.last_ms.max(s.header.last_ms);
                run.header.events += s.header.events;
            }
            _ => {
                let mut run = s.clone();
                run.header.sha256.clear();
                out.push(run);
            }
        }
    }
    out
}

/// The revisions between the ranges that none of them restores, oldest first. Ranges that
/// overlap or touch leave no gap.
pub fn gaps(ranges: &[Range]) -> Vec<Gap> {
    let mut sorted: Vec<&Range> = ranges.iter().collect();
    sorted.sort_by_key(|r| (r.from, r.to));
    let mut out = Vec::new();
    let mut reach: Option<(i64, i64)> = None; // (revision, time) restorable so far
    for r in sorted {
        if let Some((rev, ms)) = reach
            && r.from > rev + 1
        {
            out.push(Gap { from: rev + 1, to: r.from - 1, from_ms: ms, to_ms: r.from_ms });
        }
        reach = match reach {
            Some((rev, ms)) if rev >= r.to => Some((rev, ms)),
            _ => Some((r.to, r.to_ms)),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::segment::FORMAT;
    use super::*;

    pub(crate) fn snap(rev: i64, ms: i64) -> SnapshotRef {
        SnapshotRef { key: format!("b_v{rev}"), cluster_id: "c1".into(), revision: rev, taken_ms: ms }
    }

    pub(crate) fn seg(base: i64, from: i64, to: i64) -> SegmentRef {
        SegmentRef {
            key: format!("b.archive/c1/{from:020}-{to:020}.seg"),
            header: Header {
                format: FORMAT.into(),
                cluster_id: "c1".into(),
                base_revision: base,
                from,
                to,
                first_ms: from * 10,
                last_ms: to * 10,
                events: (to - from + 1) as u64,
                sha256: String::new(),
            },
        }
    }

    fn spans(rs: &[Range]) -> Vec<(i64, i64)> {
        rs.iter().map(|r| (r.from, r.to)).collect()
    }

    #[test]
    fn a_snapshot_and_its_unbroken_segments_restore_every_revision_up_to_the_last() {
        let rs = ranges("c1", &[snap(100, 1000)], &[seg(100, 101, 150), seg(100, 151, 200), seg(100, 201, 230)]);
        assert_eq!(spans(&rs), vec![(100, 230)]);
        assert_eq!((rs[0].from_ms, rs[0].to_ms), (1000, 2300));
        assert_eq!(rs[0].segments.len(), 3);
        assert!(gaps(&rs).is_empty());
    }

    #[test]
    fn a_missing_segment_ends_the_chain_and_shows_as_a_gap_until_the_next_snapshot() {
        // The archiver fell behind compaction after 150: it took a new snapshot at 400.
        let rs = ranges(
            "c1",
            &[snap(100, 1000), snap(400, 4000)],
            &[seg(100, 101, 150), seg(100, 201, 300), seg(400, 401, 450)],
        );
        assert_eq!(spans(&rs), vec![(100, 150), (400, 450)]);
        assert_eq!(gaps(&rs), vec![Gap { from: 151, to: 399, from_ms: 1500, to_ms: 4000 }]);
    }

    #[test]
    fn another_clusters_snapshots_and_segments_never_join_a_chain() {
        let mut other = seg(100, 151, 500);
        other.header.cluster_id = "c2".into();
        let rs = ranges("c1", &[snap(100, 1000)], &[seg(100, 101, 150), other]);
        assert_eq!(spans(&rs), vec![(100, 150)]);
    }

    #[test]
    fn overlapping_segments_after_an_archiver_restart_still_make_one_chain() {
        let rs = ranges("c1", &[snap(100, 1000)], &[seg(100, 101, 150), seg(100, 140, 180), seg(100, 181, 190)]);
        assert_eq!(spans(&rs), vec![(100, 190)]);
    }

    #[test]
    fn runs_restore_the_same_revisions_as_their_segments() {
        let mut other = seg(100, 151, 500);
        other.header.cluster_id = "c2".into();
        let segs = [
            seg(100, 101, 150),
            seg(100, 140, 180),
            seg(100, 181, 190),
            seg(100, 201, 300),
            seg(400, 401, 450),
            seg(400, 451, 460),
            other,
        ];
        let r = runs(&segs);
        let spans_of = |rs: &[SegmentRef]| {
            rs.iter().map(|s| (s.header.cluster_id.clone(), s.header.from, s.header.to)).collect::<Vec<_>>()
        };
        assert_eq!(
            spans_of(&r),
            [("c1".into(), 101, 190), ("c1".into(), 201, 300), ("c1".into(), 401, 460), ("c2".into(), 151, 500)]
        );
        assert_eq!(r[0].key, segs[2].key, "named by the segment reaching furthest");
        assert_eq!((r[0].header.first_ms, r[0].header.last_ms), (1010, 1900));
        let snaps = [snap(100, 1000), snap(160, 1600), snap(250, 2500), snap(400, 4000), snap(470, 4700)];
        assert_eq!(spans(&ranges("c1", &snaps, &r)), spans(&ranges("c1", &snaps, &segs)));
    }

    #[test]
    fn a_later_snapshot_inside_a_range_leaves_no_gap() {
        let rs = ranges("c1", &[snap(100, 1000), snap(120, 1200)], &[seg(100, 101, 150)]);
        assert_eq!(spans(&rs), vec![(100, 150), (120, 150)]);
        assert!(gaps(&rs).is_empty());
    }
}

//! Restores to a point, as an etcd engineer would check them: which snapshot and segments,
//! which refusals; and, over generated histories cut into segments anywhere, that snapshot +
//! replay gives exactly the keys and values the history had at the target.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::super::restorable_ranges::{SegmentRef, SnapshotRef, ranges};
use super::super::segment::{Event, FORMAT, Header, Op, Segment};
use super::*;

fn snap(rev: i64, ms: i64) -> SnapshotRef {
    SnapshotRef { key: format!("b_v{rev}"), cluster_id: "c1".into(), revision: rev, taken_ms: ms }
}

fn seg(base: i64, from: i64, to: i64) -> SegmentRef {
    SegmentRef {
        key: format!("{from}-{to}"),
        header: Header {
            format: FORMAT.into(),
            cluster_id: "c1".into(),
            base_revision: base,
            from,
            to,
            first_ms: from * 10,
            last_ms: to * 10,
            events: 1,
            sha256: String::new(),
        },
    }
}

fn ev(rev: i64, op: Op, key: &str, at_ms: i64) -> Event {
    Event {
        op,
        key: key.into(),
        value: if op == Op::Put { format!("{key}@{rev}").into() } else { vec![] },
        revision: rev,
        create_revision: 0,
        version: 0,
        lease: 0,
        at_ms,
    }
}

#[test]
fn a_revision_is_restored_from_the_newest_snapshot_before_it_and_only_the_segments_it_needs() {
    let rs = ranges(
        "c1",
        &[snap(100, 1000), snap(160, 1600)],
        &[seg(100, 101, 150), seg(100, 151, 200), seg(160, 161, 210)],
    );
    let p = plan(&rs, 175).expect("restorable");
    assert_eq!(p.snapshot.revision, 160);
    assert_eq!(p.segments.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), vec!["161-210"]);
    assert_eq!(p.revision, 175);
    // The snapshot's own revision needs no segment.
    assert!(plan(&rs, 100).expect("restorable").segments.is_empty());
    // Before 160, only the first chain reaches: both of its segments up to 155.
    let p = plan(&rs, 155).expect("restorable");
    assert_eq!((p.snapshot.revision, p.segments.len()), (100, 2));
}

#[test]
fn a_target_outside_the_ranges_is_refused_naming_what_can_be_restored() {
    let rs = ranges("c1", &[snap(100, 1000), snap(400, 4000)], &[seg(100, 101, 150), seg(400, 401, 450)]);
    let before = plan(&rs, 99).expect_err("before the oldest");
    assert_eq!(before.why, "it is before the oldest snapshot");
    let gap = plan(&rs, 200).expect_err("in the gap");
    assert_eq!(gap.why, "it falls in a gap of the archive");
    let after = plan(&rs, 451).expect_err("after the last");
    assert_eq!(after.why, "it is after the last durable change");
    let text = after.to_string();
    assert!(text.starts_with("revision 451 cannot be restored"), "{text}");
    assert!(text.contains("revisions 100..=150") && text.contains("revisions 400..=450"), "{text}");
    assert_eq!(plan(&[], 5).expect_err("empty").why, "the archive holds no snapshot");
}

#[test]
fn a_moment_names_the_last_revision_received_at_or_before_it() {
    // Segment 101..=150 arrived from 1010 to 1500 ms, 151..=200 from 1510 to 2000 ms.
    let rs = ranges("c1", &[snap(100, 1000)], &[seg(100, 101, 150), seg(100, 151, 200)]);
    assert_eq!(lookup_time(&rs, 1000), Ok(TimeLookup::Revision(100)));
    assert_eq!(lookup_time(&rs, 1505), Ok(TimeLookup::Revision(150)));
    assert_eq!(lookup_time(&rs, 2000), Ok(TimeLookup::Revision(200)));
    assert!(
        matches!(lookup_time(&rs, 1200), Ok(TimeLookup::ReadSegment { segment, reached: 100 }) if segment.key == "101-150")
    );
    assert_eq!(lookup_time(&rs, 999).expect_err("before").why, "it is before the oldest snapshot");
    assert_eq!(lookup_time(&rs, 2001).expect_err("after").why, "it is after the last durable change");
}

#[test]
fn inside_a_segment_a_moment_never_splits_a_transaction() {
    // Revision 12 is one transaction whose second event was (oddly) stamped later.
    let events = vec![
        ev(11, Op::Put, "a", 100),
        ev(12, Op::Put, "b", 200),
        ev(12, Op::Delete, "a", 300),
        ev(13, Op::Put, "c", 400),
    ];
    assert_eq!(revision_at(&events, 10, 50), 10);
    assert_eq!(revision_at(&events, 10, 150), 11);
    assert_eq!(revision_at(&events, 10, 250), 11, "half of revision 12 is not a state etcd ever had");
    assert_eq!(revision_at(&events, 10, 300), 12);
    // A segment written twice overlaps what the chain reached: its early events never pull the
    // moment's revision back.
    assert_eq!(revision_at(&events, 11, 50), 11, "revision 11 was reached before this segment");
    assert_eq!(revision_at(&events, 10, 999), 13);
}

#[test]
fn replay_is_one_transaction_per_revision_after_the_snapshot_up_to_the_target() {
    let events =
        vec![ev(11, Op::Put, "a", 1), ev(12, Op::Put, "b", 2), ev(12, Op::Delete, "a", 2), ev(13, Op::Put, "c", 3)];
    let txns = transactions(&events, 11, 12);
    assert_eq!(txns.len(), 1);
    assert_eq!(txns[0].iter().map(|e| (e.revision, e.op)).collect::<Vec<_>>(), vec![(12, Op::Put), (12, Op::Delete)]);
}

/// A history: revisions 1..=n, each one transaction of 1–3 puts or deletes over a few keys.
fn history() -> impl Strategy<Value = Vec<Event>> {
    prop::collection::vec(prop::collection::vec((any::<bool>(), 0u8..6), 1..4), 1..60).prop_map(|revs| {
        let mut out = Vec::new();
        for (i, ops) in revs.into_iter().enumerate() {
            let rev = i as i64 + 1;
            for (is_put, k) in ops {
                out.push(ev(rev, if is_put { Op::Put } else { Op::Delete }, &format!("k{k}"), rev * 100));
            }
        }
        out
    })
}

proptest! {
    /// Cut the history into segments anywhere after a snapshot; whatever revision or moment
    /// inside the restorable range is asked, snapshot + replay equals the history's state then.
    #[test]
    fn snapshot_plus_replay_equals_the_history_at_every_target(
        events in history(),
        snap_frac in 0.0f64..1.0,
        cuts in prop::collection::vec(0.0f64..1.0, 0..6),
        target_frac in 0.0f64..1.0,
        by_time in any::<bool>(),
    ) {
        let last = events.last().map(|e| e.revision).unwrap_or(1);
        let snap_rev = ((last as f64) * snap_frac) as i64; // 0: a snapshot of the empty store
        // The truth, folded here independently of the code under test.
        let truth = |upto: i64| {
            let mut kv = BTreeMap::new();
            for e in events.iter().filter(|e| e.revision <= upto) {
                if e.op == Op::Put { kv.insert(e.key.clone(), e.value.clone()); } else { kv.remove(&e.key); }
            }
            kv
        };
        // Segment boundaries at revision borders after the snapshot.
        let mut bounds: Vec<i64> = cuts.iter().map(|c| snap_rev + 1 + ((last - snap_rev) as f64 * c) as i64).collect();
        bounds.push(last + 1);
        bounds.sort();
        bounds.dedup();
        let mut segments = Vec::new();
        let mut objects = BTreeMap::new();
        let mut start = snap_rev + 1;
        for b in bounds {
            let part: Vec<Event> = events.iter().filter(|e| e.revision >= start && e.revision < b).cloned().collect();
            if let Some(s) = Segment::new("c1", snap_rev, part) {
                let key = format!("{}-{}", s.header.from, s.header.to);
                let bytes = s.encode();
                let header = Segment::decode(&bytes).expect("decodes").header;
                objects.insert(key.clone(), bytes);
                segments.push(SegmentRef { key, header });
            }
            start = start.max(b);
        }
        let rs = ranges("c1", &[snap(snap_rev, snap_rev * 100)], &segments);
        prop_assert_eq!(rs.len(), 1);
        prop_assert_eq!((rs[0].from, rs[0].to), (snap_rev, last.max(snap_rev)));
        let target_rev = snap_rev + ((last - snap_rev) as f64 * target_frac) as i64;
        let revision = if by_time {
            // Any moment between the snapshot and the last event.
            let at = snap_rev * 100 + (((last - snap_rev) * 100) as f64 * target_frac) as i64;
            let r = match lookup_time(&rs, at).expect("inside the range") {
                TimeLookup::Revision(r) => r,
                TimeLookup::ReadSegment { segment, reached } => {
                    let seg = Segment::decode(&objects[&segment.key]).expect("decodes");
                    revision_at(&seg.events, reached, at)
                }
            };
            // The moment's revision: the last one whose events came at or before it.
            prop_assert_eq!(r, (at / 100).clamp(snap_rev, last));
            r
        } else {
            target_rev
        };
        let p = plan(&rs, revision).expect("inside the range");
        let mut kv = truth(snap_rev); // what the snapshot holds
        for s in &p.segments {
            let seg = Segment::decode(&objects[&s.key]).expect("decodes");
            for txn in transactions(&seg.events, snap_rev, p.revision) {
                for e in txn {
                    if e.op == Op::Put { kv.insert(e.key.clone(), e.value.clone()); } else { kv.remove(&e.key); }
                }
            }
        }
        prop_assert_eq!(kv, truth(revision));
    }
}

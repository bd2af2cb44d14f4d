//! A restore to a point: which snapshot, which segments, and up to which revision — or why
//! not, with the ranges that are available. And the replay itself as a pure function over
//! events: the restore pod applies [`transactions`] to a temporary etcd, one transaction per
//! revision (what was one transaction in etcd stays one).

use super::restorable_ranges::{Range, SegmentRef, SnapshotRef, time};
use super::segment::Event;

/// Where to restore to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The state right after this revision.
    Revision(i64),
    /// The state at this moment (Unix milliseconds): every change the archiver received at or
    /// before it.
    Time(i64),
}

/// What a restore to a revision does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub snapshot: SnapshotRef,
    /// The segments to replay, in order (the last may reach past `revision`: replay stops there).
    pub segments: Vec<SegmentRef>,
    /// The revision the restored data ends at.
    pub revision: i64,
}

/// A target no range restores: what was asked and what exists.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{asked} cannot be restored: {why}; restorable: {available}")]
pub struct Refusal {
    pub asked: String,
    pub why: String,
    pub available: String,
}

/// The plan for a revision: the newest snapshot at or before it whose chain reaches it (the
/// least to replay).
pub fn plan(ranges: &[Range], revision: i64) -> Result<Plan, Refusal> {
    let best = ranges.iter().filter(|r| r.from <= revision && revision <= r.to).max_by_key(|r| r.from);
    match best {
        Some(r) => Ok(Plan {
            snapshot: r.snapshot.clone(),
            segments: r.segments.iter().take_while(|s| s.header.from <= revision).cloned().collect(),
            revision,
        }),
        None => Err(refusal(ranges, format!("revision {revision}"), |r| (r.from, r.to), revision)),
    }
}

/// For a time target: the revision it names when the listing alone tells (it falls on a
/// snapshot or between two segments), or the segment to read to find it ([`revision_at`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TimeLookup {
    Revision(i64),
    /// Read this segment: the moment falls inside it; the chain had reached `reached` before it.
    ReadSegment {
        segment: SegmentRef,
        reached: i64,
    },
}

/// Which revision a moment names: the last one received at or before it, inside one range.
pub fn lookup_time(ranges: &[Range], at_ms: i64) -> Result<TimeLookup, Refusal> {
    let r = ranges
        .iter()
        .filter(|r| r.from_ms <= at_ms && at_ms <= r.to_ms)
        .max_by_key(|r| r.from_ms)
        .ok_or_else(|| refusal(ranges, format!("time {}", time(at_ms)), |r| (r.from_ms, r.to_ms), at_ms))?;
    let mut revision = r.from;
    for s in &r.segments {
        if s.header.first_ms > at_ms {
            break;
        }
        if s.header.last_ms > at_ms {
            return Ok(TimeLookup::ReadSegment { segment: s.clone(), reached: revision });
        }
        revision = s.header.to;
    }
    Ok(TimeLookup::Revision(revision))
}

/// In a segment read for [`TimeLookup::ReadSegment`]: the last revision whose events all
/// arrived at or before `at_ms` (`before`: the revision the chain reached before it; events up
/// to it, which a segment written twice after an archiver restart repeats, are passed over).
pub fn revision_at(events: &[Event], before: i64, at_ms: i64) -> i64 {
    let mut rev = before;
    for e in events.iter().filter(|e| e.revision > before) {
        if e.at_ms > at_ms {
            // The rest of this revision's events, and all later ones, came after the moment.
            return if e.revision == rev { rev - 1 } else { rev };
        }
        rev = e.revision;
    }
    rev
}

fn refusal(ranges: &[Range], asked: String, span: impl Fn(&Range) -> (i64, i64), x: i64) -> Refusal {
    let available = if ranges.is_empty() {
        "nothing (no snapshot of this cluster)".to_string()
    } else {
        ranges.iter().map(Range::describe).collect::<Vec<_>>().join(", ")
    };
    let (first, last) =
        (ranges.iter().map(|r| span(r).0).min().unwrap_or(0), ranges.iter().map(|r| span(r).1).max().unwrap_or(0));
    let why = if ranges.is_empty() {
        "the archive holds no snapshot".into()
    } else if x < first {
        "it is before the oldest snapshot".into()
    } else if x > last {
        "it is after the last durable change".into()
    } else {
        "it falls in a gap of the archive".into()
    };
    Refusal { asked, why, available }
}

/// The events of `segments` after `after` up to and including `upto`, one batch per revision,
/// in order: what the restore applies, a transaction per batch.
pub fn transactions(events: &[Event], after: i64, upto: i64) -> Vec<Vec<&Event>> {
    let mut out: Vec<Vec<&Event>> = Vec::new();
    for e in events.iter().filter(|e| e.revision > after && e.revision <= upto) {
        match out.last_mut() {
            Some(batch) if batch.first().is_some_and(|f| f.revision == e.revision) => batch.push(e),
            _ => out.push(vec![e]),
        }
    }
    out
}

#[cfg(test)]
#[path = "point_in_time_tests.rs"]
mod tests;

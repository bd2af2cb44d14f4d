//! What an EtcdBackup's status says about what can be restored. Pure.
//!
//! - `status.restorableRanges`: computed by each periodic backup pod from its listing of the
//!   series (`restorable_ranges::ranges`, [`for_status`]) and reported with its result; between
//!   backups the archiver's durable revision extends the ranges that end on its chain
//!   ([`extend`]).
//! - The `ArchiveCurrent` condition ([`condition`]): whether every change the archiver received
//!   is in the store, and if not why (lag, a failing store or watch, a gap found since the last
//!   periodic backup), with the newest restorable range.
//! - A gap is said once, as a Warning Event, when it first shows in status ([`new_gaps`]).

use etcd_operator_api::backup::{ArchiveGap, ArchiveStatus, RestorableRange};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::EventType;

use super::archive::restorable_ranges::Range;
use super::identity::Note;

/// Most ranges in status (the newest).
pub const RANGE_LIMIT: usize = 20;
/// The condition type.
pub const CONDITION: &str = "ArchiveCurrent";
/// The archive is behind when its newest durable change is older than this many flush
/// intervals while changes wait or writes fail.
pub const LAG_FLUSHES: i64 = 3;

/// The ranges status shows, oldest first: a range another one contains is left out (a later
/// snapshot on the same unbroken chain adds no revision), and at most [`RANGE_LIMIT`], the
/// newest. `url`: a snapshot key as a location (`s3://bucket/key`).
pub fn for_status(ranges: &[Range], url: impl Fn(&str) -> String) -> Vec<RestorableRange> {
    let out: Vec<RestorableRange> = ranges
        .iter()
        .map(|r| RestorableRange {
            cluster_id: r.snapshot.cluster_id.clone(),
            from_revision: r.from,
            to_revision: r.to,
            from_time: whole_seconds(r.from_ms),
            to_time: whole_seconds(r.to_ms),
            snapshot: url(&r.snapshot.key),
            cut_short: false,
        })
        .collect();
    tidy(out)
}

/// RFC 3339 of Unix milliseconds in whole seconds, as status writes times: rounded down, so a
/// range's last moment is never later than its last change.
pub fn whole_seconds(ms: i64) -> String {
    let t = Timestamp::from_millisecond(ms.div_euclid(1000) * 1000).unwrap_or(Timestamp::UNIX_EPOCH);
    super::rfc3339(t)
}

/// Contained ranges dropped, oldest first, the newest [`RANGE_LIMIT`].
fn tidy(mut rs: Vec<RestorableRange>) -> Vec<RestorableRange> {
    rs.sort_by(|a, b| {
        (&a.from_time, a.from_revision, b.to_revision).cmp(&(&b.from_time, b.from_revision, a.to_revision))
    });
    let mut out: Vec<RestorableRange> = Vec::new();
    for r in rs {
        let contained = out.iter().any(|o| {
            o.cluster_id == r.cluster_id && o.from_revision <= r.from_revision && r.to_revision <= o.to_revision
        });
        if !contained {
            out.push(r);
        }
    }
    let extra = out.len().saturating_sub(RANGE_LIMIT);
    out.drain(..extra);
    out
}

/// The ranges with the archiver's progress since they were listed: a range of the archived
/// cluster that ends inside the archiver's current chain (at or after the snapshot it continues)
/// reaches its durable revision and time now. Others are left as they are, and so is a range
/// the backup pod cut short at its snapshot (a segment after it could not be read): the
/// archiver's word does not make that segment readable.
pub fn extend(ranges: &[RestorableRange], archive: Option<&ArchiveStatus>) -> Vec<RestorableRange> {
    let Some(a) = archive.filter(|a| !a.cluster_id.is_empty()) else { return ranges.to_vec() };
    let Some(durable_time) = a.durable_time.as_deref().filter(|t| t.parse::<Timestamp>().is_ok()) else {
        return ranges.to_vec();
    };
    let out = ranges
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if !r.cut_short
                && r.cluster_id == a.cluster_id
                && a.base_revision <= r.to_revision
                && r.to_revision < a.durable_revision
            {
                r.to_revision = a.durable_revision;
                r.to_time = durable_time.to_string();
            }
            r
        })
        .collect();
    tidy(out)
}

/// Seconds the archive is behind: 0 while the archiver, asked just now (`answered`), holds
/// nothing it failed to write; else the age of its newest durable change (`None`: none yet).
pub fn lag_secs(archive: &ArchiveStatus, answered: bool, now: Timestamp) -> Option<i64> {
    if answered && archive.pending_events == 0 && archive.last_error.is_empty() {
        return Some(0);
    }
    let t: Timestamp = archive.durable_time.as_deref()?.parse().ok()?;
    Some(now.duration_since(t).as_secs().max(0))
}

/// The `ArchiveCurrent` condition: (status, reason, message). `answered`: the archiver pod
/// answered `GET /status` in this reconcile (else `archive` is what it said last).
/// `last_success`: of the last periodic backup (a gap found after it is news).
pub fn condition(
    archive: Option<&ArchiveStatus>,
    answered: bool,
    flush_secs: u64,
    last_success: Option<Timestamp>,
    ranges: &[RestorableRange],
    now: Timestamp,
) -> (bool, &'static str, String) {
    let Some(a) = archive else {
        return (false, "NoReport", "the archiver has not reported where the archive stands yet".into());
    };
    let durable = match &a.durable_time {
        Some(t) => format!("every change received up to {t} (revision {}) is in the store", a.durable_revision),
        None => format!("no change archived since the archiver started at revision {}", a.durable_revision),
    };
    let newest = newest(ranges, &a.cluster_id)
        .map(|r| {
            format!(
                "; newest restorable: revisions {}..={} ({} to {})",
                r.from_revision, r.to_revision, r.from_time, r.to_time
            )
        })
        .unwrap_or_default();
    let limit = LAG_FLUSHES * flush_secs as i64;
    let lag = lag_secs(a, answered, now);
    let behind = lag.is_none_or(|l| l > limit);
    if !answered && behind {
        let why = format!("the archiver pod does not answer; {durable}{newest}");
        return (false, "NotReporting", why);
    }
    if !a.last_error.is_empty() && behind {
        let reason = if a.last_error.starts_with("watch") { "WatchFailing" } else { "StoreFailing" };
        return (false, reason, format!("{}; {durable}{newest}", a.last_error));
    }
    if let Some(g) = a.gaps.iter().rev().find(|g| gap_is_news(g, last_success)) {
        let why = format!(
            "revisions {}..={} were compacted by etcd before the archiver received them (found {}): a full snapshot was taken and the archive continues from it; {durable}{newest}",
            g.from_revision, g.to_revision, g.time
        );
        return (false, "GapFound", why);
    }
    if a.pending_events > 0 && behind {
        let why = format!(
            "{} changes received are not in the store yet, for more than {LAG_FLUSHES} × flushIntervalInSecond ({limit}s); {durable}{newest}",
            a.pending_events
        );
        return (false, "Lagging", why);
    }
    (true, "Current", format!("{durable}{newest}"))
}

/// A gap found after the last periodic backup (or before any).
fn gap_is_news(g: &ArchiveGap, last_success: Option<Timestamp>) -> bool {
    match (g.time.parse::<Timestamp>(), last_success) {
        (Ok(found), Some(last)) => found >= last,
        _ => true,
    }
}

/// The range reaching furthest of `cluster_id` (of any cluster when none of it).
pub fn newest<'a>(ranges: &'a [RestorableRange], cluster_id: &str) -> Option<&'a RestorableRange> {
    let of = |c: bool| {
        ranges
            .iter()
            .filter(move |r| !c || r.cluster_id == cluster_id)
            .max_by(|a, b| (&a.to_time, a.to_revision).cmp(&(&b.to_time, b.to_revision)))
    };
    of(true).or_else(|| of(false))
}

/// Warning Events for the gaps `after` reports that `before` did not: each gap is said once.
pub fn new_gaps(before: Option<&ArchiveStatus>, after: Option<&ArchiveStatus>) -> Vec<Note> {
    let known = |g: &ArchiveGap| {
        before.is_some_and(|b| {
            b.gaps.iter().any(|o| o.from_revision == g.from_revision && o.to_revision == g.to_revision)
        })
    };
    after
        .map(|a| {
            a.gaps
                .iter()
                .filter(|g| !known(g))
                .map(|g| {
                    (
                        EventType::Warning,
                        "ArchiveGap",
                        format!(
                            "etcd cluster {} compacted revisions {}..={} before the archiver received them (found {}): they cannot be restored to; a full snapshot was taken and the archive continues from it",
                            a.cluster_id, g.from_revision, g.to_revision, g.time
                        ),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::archive::restorable_ranges::{SnapshotRef, ranges};
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn range(c: &str, from: i64, to: i64, from_time: &str, to_time: &str) -> RestorableRange {
        RestorableRange {
            cluster_id: c.into(),
            from_revision: from,
            to_revision: to,
            from_time: from_time.into(),
            to_time: to_time.into(),
            snapshot: format!("s3://b/k_v{from}"),
            cut_short: false,
        }
    }

    fn spans(rs: &[RestorableRange]) -> Vec<(i64, i64)> {
        rs.iter().map(|r| (r.from_revision, r.to_revision)).collect()
    }

    /// Reported at 12:00:00: the archive of c1 is durable up to revision 500, received 11:59:58,
    /// continuing the snapshot at 100.
    fn archive() -> ArchiveStatus {
        ArchiveStatus {
            cluster_id: "c1".into(),
            base_revision: 100,
            durable_revision: 500,
            durable_time: Some("2026-01-01T11:59:58Z".into()),
            ..Default::default()
        }
    }

    const NOW: &str = "2026-01-01T12:00:00Z";

    #[test]
    fn status_shows_each_unbroken_history_once_oldest_first() {
        let snap = |rev: i64, ms: i64| SnapshotRef {
            key: format!("k_v{rev}"),
            cluster_id: "c1".into(),
            revision: rev,
            taken_ms: ms,
        };
        // Snapshots at 100, 200 and 300 on one chain up to 350; a gap; the snapshot at 400.
        let rs = vec![
            Range { snapshot: snap(300, 3_000), segments: vec![], from: 300, to: 350, from_ms: 3_000, to_ms: 3_500 },
            Range { snapshot: snap(100, 1_000), segments: vec![], from: 100, to: 350, from_ms: 1_000, to_ms: 3_500 },
            Range { snapshot: snap(200, 2_000), segments: vec![], from: 200, to: 350, from_ms: 2_000, to_ms: 3_500 },
            Range { snapshot: snap(400, 4_000), segments: vec![], from: 400, to: 400, from_ms: 4_000, to_ms: 4_000 },
        ];
        let st = for_status(&rs, |k| format!("s3://b/{k}"));
        assert_eq!(spans(&st), [(100, 350), (400, 400)]);
        assert_eq!(st[0].snapshot, "s3://b/k_v100");
        assert_eq!(
            (st[0].from_time.as_str(), st[0].to_time.as_str()),
            ("1970-01-01T00:00:01Z", "1970-01-01T00:00:03Z")
        );
    }

    #[test]
    fn status_keeps_the_newest_ranges_only() {
        // Plain periodic snapshots without an archive: each restores its own revision.
        let snaps: Vec<SnapshotRef> = (1..=30)
            .map(|i| SnapshotRef {
                key: format!("k_v{i}"),
                cluster_id: "c1".into(),
                revision: i * 10,
                taken_ms: i * 1000,
            })
            .collect();
        let st = for_status(&ranges("c1", &snaps, &[]), |k| k.to_string());
        assert_eq!(st.len(), RANGE_LIMIT);
        assert_eq!((st[0].from_revision, st[RANGE_LIMIT - 1].from_revision), (110, 300), "oldest first, the newest 20");
    }

    #[test]
    fn the_archivers_progress_extends_the_ranges_on_its_chain_only() {
        let listed = [
            range("c1", 50, 80, "2026-01-01T10:00:00Z", "2026-01-01T10:10:00Z"), // before a gap
            range("c1", 100, 300, "2026-01-01T11:00:00Z", "2026-01-01T11:30:00Z"),
            range("c1", 400, 400, "2026-01-01T11:40:00Z", "2026-01-01T11:40:00Z"), // a backup after
            range("c0", 100, 900, "2026-01-01T09:00:00Z", "2026-01-01T09:30:00Z"), // another cluster
        ];
        let st = extend(&listed, Some(&archive()));
        assert_eq!(spans(&st), [(100, 900), (50, 80), (100, 500)], "400's range lies inside 100's now");
        assert_eq!(st[2].to_time, "2026-01-01T11:59:58Z");
        assert_eq!(st[1].to_time, "2026-01-01T10:10:00Z");
        // Nothing durable beyond what was listed, or no archive: unchanged.
        let behind = ArchiveStatus { durable_revision: 250, ..archive() };
        assert_eq!(spans(&extend(&listed, Some(&behind))), spans(&tidy(listed.to_vec())));
        assert_eq!(extend(&listed, None), listed.to_vec());
        // A chain the archiver started after a gap (base 450) does not extend ranges before it.
        let after_gap = ArchiveStatus { base_revision: 450, ..archive() };
        assert_eq!(spans(&extend(&listed, Some(&after_gap))), [(100, 900), (50, 80), (100, 300), (400, 400)]);
        // A range the backup pod cut short at its snapshot (the segment after it unreadable)
        // stays so, although the archiver's chain starts there.
        let cut = [RestorableRange {
            cut_short: true,
            ..range("c1", 100, 100, "2026-01-01T11:00:00Z", "2026-01-01T11:00:00Z")
        }];
        assert_eq!(spans(&extend(&cut, Some(&archive()))), [(100, 100)]);
        assert_eq!(
            spans(&extend(&[RestorableRange { cut_short: false, ..cut[0].clone() }], Some(&archive()))),
            [(100, 500)]
        );
    }

    #[test]
    fn the_archive_is_current_while_every_change_received_is_written() {
        let rs = [range("c1", 100, 500, "2026-01-01T11:00:00Z", "2026-01-01T11:59:58Z")];
        // Idle for an hour: nothing received, nothing owed.
        let idle = ArchiveStatus { durable_time: Some("2026-01-01T11:00:00Z".into()), ..archive() };
        let (ok, reason, msg) = condition(Some(&idle), true, 10, None, &rs, t(NOW));
        assert_eq!((ok, reason), (true, "Current"));
        assert!(msg.contains("revision 500") && msg.contains("newest restorable: revisions 100..=500"), "{msg}");
        assert_eq!(lag_secs(&idle, true, t(NOW)), Some(0));
        // A write failed just now and is retried: within 3 flushes, still current.
        let retrying = ArchiveStatus { last_error: "writing k: 503".into(), pending_events: 4, ..archive() };
        assert_eq!(condition(Some(&retrying), true, 10, None, &rs, t(NOW)).1, "Current");
        assert_eq!(lag_secs(&retrying, true, t(NOW)), Some(2));
    }

    #[test]
    fn a_failing_store_or_watch_a_silent_archiver_and_lag_are_not_current() {
        let rs = [range("c1", 100, 500, "2026-01-01T11:00:00Z", "2026-01-01T11:59:58Z")];
        let old = Some("2026-01-01T11:59:00Z".to_string());
        let store = ArchiveStatus {
            last_error: "writing k: 503".into(),
            pending_events: 9,
            durable_time: old.clone(),
            ..archive()
        };
        let (ok, reason, msg) = condition(Some(&store), true, 10, None, &rs, t(NOW));
        assert_eq!((ok, reason), (false, "StoreFailing"));
        assert!(msg.starts_with("writing k: 503;") && msg.contains("revision 500"), "{msg}");
        assert_eq!(lag_secs(&store, true, t(NOW)), Some(60));
        let watch =
            ArchiveStatus { last_error: "watch: connect: refused".into(), durable_time: old.clone(), ..archive() };
        assert_eq!(condition(Some(&watch), true, 10, None, &rs, t(NOW)).1, "WatchFailing");
        let lagging = ArchiveStatus { pending_events: 9, durable_time: old.clone(), ..archive() };
        let (ok, reason, msg) = condition(Some(&lagging), true, 10, None, &rs, t(NOW));
        assert_eq!((ok, reason), (false, "Lagging"));
        assert!(msg.contains("9 changes") && msg.contains("(30s)"), "{msg}");
        // The pod did not answer: what it said last is all there is.
        let silent = ArchiveStatus { durable_time: old, ..archive() };
        assert_eq!(condition(Some(&silent), false, 10, None, &rs, t(NOW)).1, "NotReporting");
        assert_eq!(condition(Some(&silent), false, 60, None, &rs, t(NOW)).1, "Current", "within 3 × 60 s");
        assert_eq!(condition(None, false, 10, None, &rs, t(NOW)).1, "NoReport");
    }

    #[test]
    fn a_gap_is_news_until_the_next_periodic_backup_and_is_said_once() {
        let gap = ArchiveGap { from_revision: 301, to_revision: 420, time: "2026-01-01T11:50:00Z".into() };
        let a = ArchiveStatus { gaps: vec![gap.clone()], ..archive() };
        let (ok, reason, msg) = condition(Some(&a), true, 10, Some(t("2026-01-01T11:45:00Z")), &[], t(NOW));
        assert_eq!((ok, reason), (false, "GapFound"));
        assert!(msg.contains("revisions 301..=420"), "{msg}");
        assert_eq!(condition(Some(&a), true, 10, Some(t("2026-01-01T11:55:00Z")), &[], t(NOW)).1, "Current");

        let notes = new_gaps(Some(&archive()), Some(&a));
        assert_eq!(notes.len(), 1);
        assert_eq!((notes[0].0, notes[0].1), (EventType::Warning, "ArchiveGap"));
        assert!(notes[0].2.contains("301..=420"), "{}", notes[0].2);
        assert!(new_gaps(Some(&a), Some(&a)).is_empty(), "once");
        let later = ArchiveStatus {
            gaps: vec![gap, ArchiveGap { from_revision: 600, to_revision: 700, time: NOW.into() }],
            ..archive()
        };
        assert_eq!(new_gaps(Some(&a), Some(&later)).len(), 1);
        assert!(new_gaps(Some(&a), None).is_empty());
    }
}

//! A segment of the continuous archive: every change etcd made in a closed range of revisions
//! `[from, to]`, in revision order, as the archiver's watch delivered them, with the wall-clock
//! time each arrived. Pure: encoding, decoding and every check a restore makes before it trusts
//! a segment.
//!
//! One object per segment, self-verifying, readable with `head -1` and `jq`:
//!
//! ```text
//! {"format":"etcd-operator-rs/segment/v1","clusterId":"…","baseRevision":100,"from":101,"to":250,…,"sha256":"…"}
//! {"rev":101,"atMs":1795…,"op":"put","key":"<base64>","value":"<base64>","create":101,"version":1,"lease":0}
//! …
//! ```
//!
//! The header's sha256 covers every byte after the header line, so one flipped byte anywhere is
//! found before anything is replayed. Every revision of the range has at least one event (etcd
//! raises the revision only for a write, and the archiver watches the whole key space); a
//! revision missing inside a segment means a lost event, and the segment is refused.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The first field of every segment's header.
pub const FORMAT: &str = "etcd-operator-rs/segment/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Put,
    Delete,
}

/// One change of one key, as etcd's watch reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub op: Op,
    pub key: Vec<u8>,
    /// Empty for a delete.
    pub value: Vec<u8>,
    /// The revision of this change (the key's `mod_revision`; for a delete, the revision that
    /// deleted it).
    pub revision: i64,
    /// The key's `create_revision` (0 for a delete).
    pub create_revision: i64,
    /// The key's `version` after the change (0 for a delete).
    pub version: i64,
    /// The lease the key is attached to (0: none).
    pub lease: i64,
    /// Unix milliseconds when the archiver received it.
    pub at_ms: i64,
}

/// What a segment says about itself (its first line).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    pub format: String,
    /// The etcd cluster ID, hex: a segment of another cluster never joins a chain.
    pub cluster_id: String,
    /// The revision of the full snapshot this chain of segments continues.
    pub base_revision: i64,
    /// First and last revision covered (closed range).
    pub from: i64,
    pub to: i64,
    /// When the archiver received the first and the last event (Unix milliseconds).
    pub first_ms: i64,
    pub last_ms: i64,
    pub events: u64,
    /// sha256 (hex) of every byte after the header line.
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub header: Header,
    pub events: Vec<Event>,
}

/// Why a segment is not trusted. The caller names the object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SegmentError {
    #[error("not a segment: {0}")]
    NotASegment(String),
    #[error("segment format {0:?} is not known (this operator reads {FORMAT})")]
    UnknownFormat(String),
    #[error("checksum mismatch: the header says sha256 {header}, the content has {content}")]
    Checksum { header: String, content: String },
    #[error("line {line}: {why}")]
    BadEvent { line: usize, why: String },
    #[error("the header says {header} events, the content holds {content}")]
    Count { header: u64, content: u64 },
    #[error("revisions {0}")]
    Revisions(String),
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Line {
    rev: i64,
    at_ms: i64,
    op: Op,
    key: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    value: String,
    #[serde(default)]
    create: i64,
    #[serde(default)]
    version: i64,
    #[serde(default)]
    lease: i64,
}

impl Segment {
    /// A segment of `events` (in revision order, every revision of `[from, to]` present), its
    /// header filled in. `None` without events: an empty range is never written.
    pub fn new(cluster_id: &str, base_revision: i64, events: Vec<Event>) -> Option<Segment> {
        let (first, last) = (events.first()?, events.last()?);
        let header = Header {
            format: FORMAT.into(),
            cluster_id: cluster_id.into(),
            base_revision,
            from: first.revision,
            to: last.revision,
            first_ms: first.at_ms,
            last_ms: last.at_ms,
            events: events.len() as u64,
            sha256: String::new(),
        };
        Some(Segment { header, events })
    }

    /// The bytes of the object: the header line (with the content's checksum) and one line per
    /// event.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for e in &self.events {
            let line = Line {
                rev: e.revision,
                at_ms: e.at_ms,
                op: e.op,
                key: B64.encode(&e.key),
                value: B64.encode(&e.value),
                create: e.create_revision,
                version: e.version,
                lease: e.lease,
            };
            // A struct of numbers and strings always serialises.
            body.extend(serde_json::to_vec(&line).unwrap_or_default());
            body.push(b'\n');
        }
        let header = Header { sha256: hex::encode(Sha256::digest(&body)), ..self.header.clone() };
        let mut out = serde_json::to_vec(&header).unwrap_or_default();
        out.push(b'\n');
        out.extend(body);
        out
    }

    /// The segment in `bytes`, after every check: format, checksum, event count, and revisions
    /// in order, inside the header's range, none skipped.
    pub fn decode(bytes: &[u8]) -> Result<Segment, SegmentError> {
        let nl =
            bytes.iter().position(|b| *b == b'\n').ok_or_else(|| SegmentError::NotASegment("no header line".into()))?;
        let header = Header::parse(&bytes[..nl])?;
        let body = &bytes[nl + 1..];
        let content = hex::encode(Sha256::digest(body));
        if content != header.sha256 {
            return Err(SegmentError::Checksum { header: header.sha256, content });
        }
        let mut events = Vec::new();
        for (i, raw) in body.split(|b| *b == b'\n').enumerate().filter(|(_, l)| !l.is_empty()) {
            let bad = |why: String| SegmentError::BadEvent { line: i + 2, why };
            let l: Line = serde_json::from_slice(raw).map_err(|e| bad(e.to_string()))?;
            let key = B64.decode(&l.key).map_err(|e| bad(format!("key: {e}")))?;
            let value = B64.decode(&l.value).map_err(|e| bad(format!("value: {e}")))?;
            if key.is_empty() {
                return Err(bad("empty key".into()));
            }
            events.push(Event {
                op: l.op,
                key,
                value,
                revision: l.rev,
                create_revision: l.create,
                version: l.version,
                lease: l.lease,
                at_ms: l.at_ms,
            });
        }
        if events.len() as u64 != header.events {
            return Err(SegmentError::Count { header: header.events, content: events.len() as u64 });
        }
        check_revisions(&header, &events)?;
        Ok(Segment { header, events })
    }
}

impl Header {
    /// The header alone (a listing reads only the first line of each object).
    pub fn parse(line: &[u8]) -> Result<Header, SegmentError> {
        let h: Header = serde_json::from_slice(line).map_err(|e| SegmentError::NotASegment(format!("header: {e}")))?;
        if h.format != FORMAT {
            return Err(SegmentError::UnknownFormat(h.format));
        }
        if h.from <= h.base_revision || h.to < h.from {
            return Err(SegmentError::Revisions(format!(
                "range {}..={} does not follow the base snapshot's revision {}",
                h.from, h.to, h.base_revision
            )));
        }
        Ok(h)
    }
}

fn check_revisions(h: &Header, events: &[Event]) -> Result<(), SegmentError> {
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Err(SegmentError::Revisions("none: a segment holds at least one event".into()));
    };
    if first.revision != h.from || last.revision != h.to {
        return Err(SegmentError::Revisions(format!(
            "{}..={} in the content, {}..={} in the header",
            first.revision, last.revision, h.from, h.to
        )));
    }
    for w in events.windows(2) {
        let (a, b) = (w[0].revision, w[1].revision);
        if b < a {
            return Err(SegmentError::Revisions(format!("out of order: {b} after {a}")));
        }
        if b > a + 1 {
            return Err(SegmentError::Revisions(format!("{} to {} missing: events were lost", a + 1, b - 1)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(rev: i64, key: &str, value: &str) -> Event {
        Event {
            op: Op::Put,
            key: key.into(),
            value: value.into(),
            revision: rev,
            create_revision: rev,
            version: 1,
            lease: 0,
            at_ms: 1_000 + rev,
        }
    }

    fn del(rev: i64, key: &str) -> Event {
        Event { op: Op::Delete, value: vec![], create_revision: 0, version: 0, ..put(rev, key, "") }
    }

    fn sample() -> Segment {
        // Revision 12 is one transaction that deleted two keys.
        let events = vec![put(11, "a", "1"), del(12, "b"), del(12, "c"), put(13, "\u{0}bin", "\u{ff}")];
        Segment::new("c0ffee", 10, events).expect("events")
    }

    #[test]
    fn a_segment_reads_back_as_written_with_its_range_and_times() {
        let s = sample();
        let back = Segment::decode(&s.encode()).expect("decodes");
        assert_eq!(back.events, s.events);
        assert_eq!((back.header.from, back.header.to, back.header.base_revision), (11, 13, 10));
        assert_eq!((back.header.first_ms, back.header.last_ms, back.header.events), (1_011, 1_013, 4));
    }

    #[test]
    fn one_flipped_byte_anywhere_after_the_header_is_refused_by_the_checksum() {
        let bytes = sample().encode();
        let header_end = bytes.iter().position(|b| *b == b'\n').expect("header") + 1;
        for i in header_end..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            assert!(
                matches!(Segment::decode(&bad), Err(SegmentError::Checksum { .. })),
                "byte {i} flipped was not caught by the checksum"
            );
        }
    }

    #[test]
    fn a_damaged_header_is_refused_never_trusted() {
        let bytes = sample().encode();
        let text = String::from_utf8(bytes).expect("utf-8");
        let other = text.replacen(FORMAT, "etcd-operator-rs/segment/v9", 1);
        assert_eq!(
            Segment::decode(other.as_bytes()),
            Err(SegmentError::UnknownFormat("etcd-operator-rs/segment/v9".into()))
        );
        let wider = text.replacen("\"to\":13", "\"to\":14", 1);
        assert!(matches!(Segment::decode(wider.as_bytes()), Err(SegmentError::Revisions(_))));
        assert!(matches!(Segment::decode(b"no newline"), Err(SegmentError::NotASegment(_))));
    }

    #[test]
    fn a_revision_missing_inside_the_range_means_lost_events_and_is_refused() {
        let s = Segment::new("c0ffee", 10, vec![put(11, "a", "1"), put(13, "b", "2")]).expect("events");
        assert_eq!(
            Segment::decode(&s.encode()),
            Err(SegmentError::Revisions("12 to 12 missing: events were lost".into()))
        );
    }

    #[test]
    fn no_events_makes_no_segment() {
        assert_eq!(Segment::new("c0ffee", 10, vec![]), None);
    }
}

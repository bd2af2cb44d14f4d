//! Listing a snapshot series and its continuous archive in a store (I/O; runs in backup and
//! restore pods). One listing of the directory holds everything: the periodic snapshots
//! `<key>_v<revision>_<time>`, their sidecars, and the segments under `<key>.archive/<cluster>/`
//! (object stores list recursively). A segment's revisions are in its name, so most decisions
//! need no read of it ([`segments_by_key`]); its times need its header, the first line, which
//! [`read_header`] reads without downloading the rest.

use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

use super::archive::layout;
use super::archive::restorable_ranges::SegmentRef;
use super::archive::segment::{FORMAT, Header};
use super::contract::PodError;
use super::store;

/// Every key next to `base` (same directory) that starts with its name: snapshots, sidecars,
/// and the archive's segments.
pub async fn list_keys(store: &dyn ObjectStore, base: &str) -> Result<Vec<String>, PodError> {
    Ok(list_objects(store, base).await?.into_iter().map(|(k, _)| k).collect())
}

/// [`list_keys`] with each object's last-modified time (milliseconds) on the store's clock:
/// times of one clock, whatever the clocks of the pods that wrote them say.
pub async fn list_objects(store: &dyn ObjectStore, base: &str) -> Result<Vec<(String, i64)>, PodError> {
    let dir = base.rsplit_once('/').map(|(d, _)| d);
    let prefix = dir.map(object_store::path::Path::from);
    let mut out = Vec::new();
    let mut list = store.list(prefix.as_ref());
    while let Some(item) = list.next().await {
        let meta = item.map_err(|e| format!("list {base}: {}", store::why(&e)))?;
        let k = meta.location.to_string();
        if k.starts_with(base) {
            out.push((k, meta.last_modified.timestamp_millis()));
        }
    }
    Ok(out)
}

/// The cluster (directory) and revisions a key of the archive of `base` names, if it is a segment.
pub fn segment_of(base: &str, key: &str) -> Option<(String, i64, i64)> {
    let archive = format!("{base}.archive/");
    let cluster = key.strip_prefix(&archive)?.split_once('/')?.0;
    let (from, to) = layout::parse_segment_key(&layout::prefix(base, cluster), key)?;
    Some((cluster.to_string(), from, to))
}

/// The segments among `keys`, known by their names only: cluster and revisions are real; the
/// header's base revision, times, event count and checksum are not known (0 and empty). Enough
/// for revisions (`restorable_ranges::ranges`, retention), not for times or a replay.
pub fn segments_by_key(base: &str, keys: &[String]) -> Vec<SegmentRef> {
    keys.iter()
        .filter_map(|k| {
            let (cluster_id, from, to) = segment_of(base, k)?;
            let header = Header {
                format: FORMAT.into(),
                cluster_id,
                base_revision: 0,
                from,
                to,
                first_ms: 0,
                last_ms: 0,
                events: 0,
                sha256: String::new(),
            };
            Some(SegmentRef { key: k.clone(), header })
        })
        .collect()
}

/// Longest header line read.
const HEADER_LIMIT: usize = 64 << 10;

/// The header of the segment at `key`: its first line, read as it streams in (the rest of the
/// object is not downloaded). A damaged header is refused.
pub async fn read_header(store: &dyn ObjectStore, key: &str) -> Result<Header, PodError> {
    let path = object_store::path::Path::parse(key).map_err(|e| format!("{key}: {e}"))?;
    let got = store.get(&path).await.map_err(|e| format!("read {key}: {}", store::why(&e)))?;
    let mut stream = got.into_stream();
    let mut line = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("read {key}: {}", store::why(&e)))?;
        match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&chunk[..i]);
                break;
            }
            None => line.extend_from_slice(&chunk),
        }
        if line.len() > HEADER_LIMIT {
            break;
        }
    }
    Header::parse(&line).map_err(|e| PodError::Refused(format!("segment {key} has a damaged header: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_known_by_their_names() {
        let seg = |c: &str, f: i64, t: i64| layout::segment_key(&layout::prefix("d/k", c), f, t);
        let keys = vec![
            "d/k_v100_2026-01-01-000000".to_string(),
            "d/k_v100_2026-01-01-000000.meta.json".to_string(),
            seg("c1", 101, 150),
            seg("c2", 7, 9),
            "d/k.archive/c1/notes.txt".to_string(),
            "d/k2.archive/c1/00000000000000000001-00000000000000000002.seg".to_string(),
        ];
        let s = segments_by_key("d/k", &keys);
        let seen: Vec<(&str, i64, i64)> =
            s.iter().map(|s| (s.header.cluster_id.as_str(), s.header.from, s.header.to)).collect();
        assert_eq!(seen, [("c1", 101, 150), ("c2", 7, 9)]);
        assert_eq!(s[0].key, keys[2]);
    }

    #[tokio::test]
    async fn a_header_is_read_from_the_first_line_alone() {
        use super::super::archive::segment::{Event, Op, Segment};
        let store = object_store::memory::InMemory::new();
        let events: Vec<Event> = (101..=103)
            .map(|r| Event {
                op: Op::Put,
                key: b"k".to_vec(),
                value: vec![b'v'; 100_000],
                revision: r,
                create_revision: 101,
                version: r - 100,
                lease: 0,
                at_ms: r * 1000,
            })
            .collect();
        let seg = Segment::new("c1", 100, events).unwrap();
        let key = layout::segment_key(&layout::prefix("d/k", "c1"), 101, 103);
        let path = object_store::path::Path::parse(&key).unwrap();
        store.put(&path, seg.encode().into()).await.unwrap();
        let h = read_header(&store, &key).await.unwrap();
        assert_eq!((h.from, h.to, h.first_ms, h.last_ms), (101, 103, 101_000, 103_000));
        store.put(&path, b"{\"format\":\"x\"}\n{}".to_vec().into()).await.unwrap();
        assert!(matches!(read_header(&store, &key).await, Err(PodError::Refused(_))));
    }
}

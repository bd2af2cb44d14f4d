//! How far a member's data on its volume reaches, in raft indexes, read from etcd's own files
//! (pod side, for `member_volume`'s check): the highest of the entry indexes and commit indexes
//! its write-ahead log records, the snapshots the log names, and the snapshot files' names. A
//! member applies nothing that is not in its log first, so a volume whose data reaches less
//! than what the member acknowledged (`progress`) was rolled back.
//!
//! etcd's formats (unchanged from 3.4 to 3.7): `member/wal/<seq>-<index>.wal` holds frames of an
//! 8-byte little-endian length (the top byte flags padding to 8 bytes) and a `walpb.Record`
//! (`type` 1, `crc` 2, `data` 3); an entry record (type 2) holds a `raftpb.Entry` (`Index` 3), a
//! state record (3) a `raftpb.HardState` (`commit` 3), a snapshot record (5) a `walpb.Snapshot`
//! (`index` 1). A file ends at a zero length (the rest is preallocated) or at a torn frame (which
//! etcd itself drops when it starts). `member/snap/<term>-<index>.snap` and `<index>.snap.db`
//! name their index. Only ever an overestimate of what the member has, never an underestimate:
//! the check must never refuse a volume that holds what its member acknowledged.

use std::io::Read;
use std::path::Path;

const ENTRY: u64 = 2;
const STATE: u64 = 3;
const SNAPSHOT: u64 = 5;
/// Largest record etcd writes is far below a WAL segment (64 MiB); anything larger is torn.
const MAX_RECORD: u64 = 64 << 20;

/// The highest raft index the data under `data_dir` reaches; `None` when there is no log and
/// no snapshot at all. An I/O error is an error, never "no data".
pub fn of(data_dir: &Path) -> Result<Option<u64>, String> {
    let member = data_dir.join("member");
    let mut best: Option<u64> = None;
    let mut see = |i: u64| best = Some(best.map_or(i, |b| b.max(i)));
    for name in file_names(&member.join("snap"))? {
        if let Some(i) = snapshot_file_index(&name) {
            see(i);
        }
    }
    for name in file_names(&member.join("wal"))?.into_iter().filter(|n| n.ends_with(".wal")) {
        let path = member.join("wal").join(&name);
        let file = std::fs::File::open(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
        if let Some(i) =
            wal_index(std::io::BufReader::new(file)).map_err(|e| format!("read {}: {e}", path.display()))?
        {
            see(i);
        }
    }
    Ok(best)
}

/// Names of the files in `dir`; none when it does not exist.
fn file_names(dir: &Path) -> Result<Vec<String>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(format!("read {}: {e}", dir.display())),
    };
    let mut names = Vec::new();
    for e in entries {
        names.push(e.map_err(|e| format!("read {}: {e}", dir.display()))?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// `<term>-<index>.snap` or `<index>.snap.db` (16 hex digits each).
fn snapshot_file_index(name: &str) -> Option<u64> {
    if let Some(stem) = name.strip_suffix(".snap.db") {
        return u64::from_str_radix(stem, 16).ok();
    }
    let (_, index) = name.strip_suffix(".snap")?.split_once('-')?;
    u64::from_str_radix(index, 16).ok()
}

/// The highest index one WAL file's records name.
pub fn wal_index(mut r: impl Read) -> std::io::Result<Option<u64>> {
    let mut best = None;
    let mut len = [0u8; 8];
    loop {
        match read_full(&mut r, &mut len)? {
            8 => {}
            _ => return Ok(best),
        }
        let field = u64::from_le_bytes(len);
        if field == 0 {
            return Ok(best);
        }
        let size = field & !(0xffu64 << 56);
        let pad = if field >> 63 == 1 { (field >> 56) & 0x7 } else { 0 };
        if size > MAX_RECORD {
            return Ok(best);
        }
        let mut rec = vec![0u8; (size + pad) as usize];
        if read_full(&mut r, &mut rec)? < rec.len() {
            return Ok(best);
        }
        rec.truncate(size as usize);
        let Some(i) = record_index(&rec) else {
            // Not a record: a torn or unwritten tail.
            return Ok(best);
        };
        if let Some(i) = i {
            best = Some(best.map_or(i, |b: u64| b.max(i)));
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The index a `walpb.Record` names: `Some(None)` for a record that names none (metadata,
/// crc), `None` for bytes that are no record.
fn record_index(rec: &[u8]) -> Option<Option<u64>> {
    let record = fields(rec)?;
    let kind = record.iter().find(|f| f.0 == 1).and_then(|f| f.1)?;
    let data = record.iter().find(|f| f.0 == 3).and_then(|f| f.2).unwrap_or_default();
    let field_of =
        |number: u64| -> Option<Option<u64>> { Some(fields(data)?.iter().find(|f| f.0 == number).and_then(|f| f.1)) };
    match kind {
        ENTRY => field_of(3),
        STATE => field_of(3),
        SNAPSHOT => field_of(1),
        _ => Some(None),
    }
}

/// One protocol buffer field: its number, and its value as a varint or as bytes.
type Field<'a> = (u64, Option<u64>, Option<&'a [u8]>);

/// Protocol buffer fields (fixed-size ones skipped).
fn fields(mut b: &[u8]) -> Option<Vec<Field<'_>>> {
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b)?;
        let (number, wire) = (key >> 3, key & 7);
        if number == 0 {
            return None;
        }
        match wire {
            0 => out.push((number, Some(varint(&mut b)?), None)),
            1 => b = b.get(8..)?,
            2 => {
                let n = usize::try_from(varint(&mut b)?).ok()?;
                out.push((number, None, Some(b.get(..n)?)));
                b = &b[n..];
            }
            5 => b = b.get(4..)?,
            _ => return None,
        }
    }
    Some(out)
}

fn varint(b: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, rest) = b.split_first()?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests;

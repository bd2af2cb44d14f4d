//! `data_index` against a write-ahead log etcd itself wrote: etcd 3.4.23 (the host's), one
//! member, `--snapshot-count 50`, 120 puts, stopped; `endpoint status` said raft index 124,
//! applied 124. The file is cut after its last record (etcd preallocates 64 MB of zeros).

use super::*;

const WAL: &[u8] = include_bytes!("testdata/member-etcd-3.4.23.wal");

#[test]
fn the_log_etcd_wrote_reaches_the_index_etcd_reported() {
    assert_eq!(wal_index(WAL).unwrap(), Some(124));
    // Preallocated zeros after the records end the file.
    let padded = [WAL, &[0u8; 4096][..]].concat();
    assert_eq!(wal_index(&padded[..]).unwrap(), Some(124));
}

/// A frame torn by a crash is where the file ends: what came before counts (etcd drops the
/// torn frame itself when it starts), nothing is made up from the rest.
#[test]
fn a_torn_tail_ends_the_log() {
    for cut in [WAL.len() - 3, WAL.len() - 8, WAL.len() / 2, 8, 3, 0] {
        let i = wal_index(&WAL[..cut]).unwrap();
        assert!(i.unwrap_or(0) <= 124, "cut at {cut}: {i:?}");
    }
    assert_eq!(wal_index(&WAL[..0]).unwrap(), None);
    let mut garbage = WAL[..WAL.len() / 2].to_vec();
    garbage.extend_from_slice(&[0x10, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    assert!(wal_index(&garbage[..]).unwrap().is_some_and(|i| i < 124));
}

#[test]
fn snapshot_files_name_their_index() {
    assert_eq!(snapshot_file_index("0000000000000002-0000000000000066.snap"), Some(0x66));
    assert_eq!(snapshot_file_index("00000000000004d2.snap.db"), Some(0x4d2));
    assert_eq!(snapshot_file_index("db"), None);
    assert_eq!(snapshot_file_index("0000000000000002-0000000000000066.snap.broken"), None);
}

/// A data directory as etcd lays it out: the log, the snapshots; none at all is `None`, and a
/// log alone or snapshots alone are read.
#[test]
fn a_data_directory_reaches_its_highest_index() {
    let root = std::env::temp_dir().join(format!("eo-data-index-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let data = root.join("data");
    assert_eq!(of(&data).unwrap(), None);
    std::fs::create_dir_all(data.join("member/wal")).unwrap();
    std::fs::create_dir_all(data.join("member/snap")).unwrap();
    assert_eq!(of(&data).unwrap(), None);
    std::fs::write(data.join("member/snap/0000000000000002-0000000000000033.snap"), b"x").unwrap();
    assert_eq!(of(&data).unwrap(), Some(0x33));
    std::fs::write(data.join("member/wal/0000000000000000-0000000000000000.wal"), WAL).unwrap();
    std::fs::write(data.join("member/wal/0.tmp"), b"\xff\xff").unwrap();
    assert_eq!(of(&data).unwrap(), Some(124));
    std::fs::write(data.join("member/snap/00000000000004d2.snap.db"), b"x").unwrap();
    assert_eq!(of(&data).unwrap(), Some(0x4d2));
    std::fs::remove_dir_all(&root).unwrap();
}

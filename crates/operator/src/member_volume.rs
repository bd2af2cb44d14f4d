//! The member data check (`etcd-operator check-data`, the first init container of every
//! PVC-backed member pod). A volume must prove it holds the member's data before the member
//! restarts on it under its old ID: an emptied or swapped volume rejoining as the same member
//! would break raft's assumption that a member never forgets what it acknowledged.
//!
//! At a member's first start the check writes a marker file beside the data directory naming
//! the member and its EtcdCluster (by UID). On a restart it requires that marker, with the same
//! names, and etcd's member directory. Otherwise it exits with [`REFUSED_EXIT_CODE`] and says
//! why in the termination message; the operator then replaces the member (removes it and adds
//! a new one) instead of restarting it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Name of the init container.
pub const CHECK_CONTAINER: &str = "check-data";
/// Exit code of a refusal (any other failure is an ordinary crash and is retried).
pub const REFUSED_EXIT_CODE: i32 = 3;
/// The marker's file name, in the volume's root (beside etcd's data directory).
pub const MARKER_FILE: &str = "etcd-operator-member.json";

/// Who the data on a volume belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Marker {
    pub member: String,
    pub cluster_uid: String,
}

#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The member (pod) name.
    #[arg(long)]
    pub member: String,
    /// UID of the EtcdCluster.
    #[arg(long)]
    pub cluster_uid: String,
    /// etcd's data directory on the volume.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// The member restarts on this volume: it must hold the member's data.
    #[arg(long)]
    pub expect_data: bool,
}

/// What the check found.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The volume is this member's; write the marker if it is missing.
    Accept { write_marker: bool },
    /// The volume must not be used by this member.
    Refuse(String),
}

/// The decision, from what is on the volume.
pub fn judge(found: Option<&Marker>, has_data: bool, want: &Marker, expect_data: bool) -> Verdict {
    match found {
        Some(m) if m != want => Verdict::Refuse(format!(
            "the volume holds member {} of the cluster with UID {}, not member {} of {}",
            m.member, m.cluster_uid, want.member, want.cluster_uid
        )),
        Some(_) if has_data => Verdict::Accept { write_marker: false },
        Some(_) if expect_data => Verdict::Refuse(format!(
            "the volume was emptied: member {}'s marker is there but etcd's data directory is gone",
            want.member
        )),
        Some(_) => Verdict::Accept { write_marker: false },
        // Data from before markers existed (an earlier operator version): adopted as is.
        None if has_data => Verdict::Accept { write_marker: true },
        None if expect_data => Verdict::Refuse(format!(
            "the volume holds no data (no marker, no etcd data directory) but member {} is restarting on it",
            want.member
        )),
        None => Verdict::Accept { write_marker: true },
    }
}

/// Whether etcd's member directory is there. An error other than "not found" (permissions, I/O)
/// is an error, never "no data": a volume is refused only on evidence.
fn has_member_data(data_dir: &Path) -> Result<bool, String> {
    for dir in ["wal", "snap"] {
        let p = data_dir.join("member").join(dir);
        match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => return Ok(true),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot look at {}: {e}", p.display())),
        }
    }
    Ok(false)
}

/// Run the check; `Err((code, message))` to exit with.
pub fn check(args: &CheckArgs) -> Result<String, (i32, String)> {
    let root = args.data_dir.parent().ok_or((1, format!("{} has no parent directory", args.data_dir.display())))?;
    let marker_path = root.join(MARKER_FILE);
    let found = match std::fs::read(&marker_path) {
        Ok(bytes) => Some(
            serde_json::from_slice::<Marker>(&bytes)
                .map_err(|e| (REFUSED_EXIT_CODE, format!("{} is not a member marker: {e}", marker_path.display())))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err((1, format!("read {}: {e}", marker_path.display()))),
    };
    let want = Marker { member: args.member.clone(), cluster_uid: args.cluster_uid.clone() };
    let has_data = has_member_data(&args.data_dir).map_err(|e| (1, e))?;
    match judge(found.as_ref(), has_data, &want, args.expect_data) {
        Verdict::Refuse(why) => Err((REFUSED_EXIT_CODE, why)),
        Verdict::Accept { write_marker: false } => Ok(format!("volume holds member {}'s data", want.member)),
        Verdict::Accept { write_marker: true } => {
            let tmp = root.join(format!("{MARKER_FILE}.tmp"));
            let body = serde_json::to_vec(&want).map_err(|e| (1, e.to_string()))?;
            std::fs::write(&tmp, body)
                .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|_| std::fs::rename(&tmp, &marker_path))
                .map_err(|e| (1, format!("write {}: {e}", marker_path.display())))?;
            Ok(format!("marked the volume as member {}'s", want.member))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(member: &str, uid: &str) -> Marker {
        Marker { member: member.into(), cluster_uid: uid.into() }
    }

    #[test]
    fn a_restart_needs_the_members_marker_and_its_data() {
        let me = m("ex-a", "u1");
        assert_eq!(judge(Some(&me), true, &me, true), Verdict::Accept { write_marker: false });
        assert!(matches!(judge(Some(&me), false, &me, true), Verdict::Refuse(w) if w.contains("emptied")));
        assert!(matches!(judge(None, false, &me, true), Verdict::Refuse(w) if w.contains("no data")));
    }

    #[test]
    fn another_members_or_clusters_volume_is_refused_even_with_data() {
        let me = m("ex-a", "u1");
        for other in [m("ex-b", "u1"), m("ex-a", "u2")] {
            for expect in [true, false] {
                assert!(matches!(judge(Some(&other), true, &me, expect), Verdict::Refuse(_)), "{other:?}");
            }
        }
    }

    #[test]
    fn a_first_start_marks_the_volume_and_older_data_is_adopted() {
        let me = m("ex-a", "u1");
        assert_eq!(judge(None, false, &me, false), Verdict::Accept { write_marker: true });
        assert_eq!(judge(None, true, &me, true), Verdict::Accept { write_marker: true });
        // Marked, but etcd has not written yet (the pod restarted before etcd's first start).
        assert_eq!(judge(Some(&me), false, &me, false), Verdict::Accept { write_marker: false });
    }

    #[test]
    fn check_writes_the_marker_then_refuses_the_emptied_volume() {
        let root = std::env::temp_dir().join(format!("eo-check-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let args = |expect_data| CheckArgs {
            member: "ex-a".into(),
            cluster_uid: "u1".into(),
            data_dir: root.join("data"),
            expect_data,
        };
        assert!(check(&args(false)).unwrap().contains("marked"));
        std::fs::create_dir_all(root.join("data/member/wal")).unwrap();
        assert!(check(&args(true)).unwrap().contains("holds"));
        std::fs::remove_dir_all(root.join("data")).unwrap();
        let (code, why) = check(&args(true)).unwrap_err();
        assert_eq!(code, REFUSED_EXIT_CODE);
        assert!(why.contains("emptied"), "{why}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}

//! The member data check (`etcd-operator check-data`, the first init container of every
//! PVC-backed member pod). A volume must prove it holds the member's data before the member
//! restarts on it under its old ID: an emptied or swapped volume rejoining as the same member
//! would break raft's assumption that a member never forgets what it acknowledged.
//!
//! At a member's first start the check writes a marker file beside the data directory naming
//! the member and its EtcdCluster (by UID). On a restart it requires that marker, with the same
//! names, and etcd's member directory; and, when the operator recorded how far the member's
//! data reached (`progress`: `--acknowledged-index`), data that reaches that far
//! (`data_index`): a volume rolled back to an older snapshot holds the same marker. Otherwise it
//! exits with [`REFUSED_EXIT_CODE`] and says why in the termination message; the operator then
//! keeps the volume (retired) and replaces the member instead of restarting it.
//!
//! Before judging anything, the check makes sure the pod's user may read and write everything
//! the member uses on the volume (its root, the marker, etcd's data directory and the restore
//! work directory), as the kernel would decide from owners and modes. Data another user wrote
//! (root, under an earlier operator version) on a volume type the kubelet does not apply the
//! pod's `fsGroup` to cannot be judged or used: it exits with [`INACCESSIBLE_EXIT_CODE`], and
//! the operator restarts the member as root (`pod_security`). Never a refusal: an unreadable
//! data directory is not an empty one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Name of the init container.
pub const CHECK_CONTAINER: &str = "check-data";
/// Exit code of a refusal (any other failure is an ordinary crash and is retried).
pub const REFUSED_EXIT_CODE: i32 = 3;
/// Exit code when the pod's user cannot read and write what the member uses on its volume.
pub const INACCESSIBLE_EXIT_CODE: i32 = 4;
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
    /// The raft index the operator saw this member acknowledge: its data must reach it.
    #[arg(long, default_value_t = 0)]
    pub acknowledged_index: u64,
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

/// A volume that passed [`judge`], against what the member acknowledged: its data must reach
/// that raft index (`found`: how far it reaches, `None` without log or snapshot). `None`: fine.
pub fn judge_reach(found: Option<u64>, acknowledged: u64, member: &str) -> Option<String> {
    match found {
        _ if acknowledged == 0 => None,
        Some(i) if i >= acknowledged => None,
        Some(i) => Some(format!(
            "the volume's data reaches raft index {i} but member {member} had acknowledged index {acknowledged}: it was rolled back (an older snapshot of the volume?); restarted on it the member would forget acknowledged writes"
        )),
        None => Some(format!(
            "the volume holds no raft log or snapshot but member {member} had acknowledged index {acknowledged}"
        )),
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

/// Who a process is to the kernel's file permission checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsIdentity {
    /// Filesystem user and group ids.
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the pod's `fsGroup` among them).
    pub groups: Vec<u32>,
    /// `CAP_DAC_OVERRIDE` is effective: modes do not apply (member containers drop it, so even
    /// root is bound by them there).
    pub dac_override: bool,
}

impl FsIdentity {
    /// From `/proc/self/status`: the fourth (filesystem) ids of `Uid:` and `Gid:`, `Groups:`,
    /// and `CapEff:`.
    pub fn parse_status(status: &str) -> Option<FsIdentity> {
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
        let fs_id = |name: &str| field(name)?.split_whitespace().nth(3)?.parse::<u32>().ok();
        let cap_eff = u64::from_str_radix(field("CapEff:")?, 16).ok()?;
        Some(FsIdentity {
            uid: fs_id("Uid:")?,
            gid: fs_id("Gid:")?,
            groups: field("Groups:").unwrap_or_default().split_whitespace().filter_map(|g| g.parse().ok()).collect(),
            dac_override: cap_eff & (1 << 1) != 0,
        })
    }

    pub fn of_this_process() -> Result<FsIdentity, String> {
        let status =
            std::fs::read_to_string("/proc/self/status").map_err(|e| format!("read /proc/self/status: {e}"))?;
        FsIdentity::parse_status(&status).ok_or_else(|| "/proc/self/status lacks Uid, Gid or CapEff".into())
    }

    /// Read and write (and, for a directory, search), as the kernel decides from the owner,
    /// group and mode: the owner's bits if it is the owner, else the group's if it is in the
    /// group, else the others'.
    pub fn may_use(&self, owner: u32, group: u32, mode: u32, dir: bool) -> bool {
        self.permits(owner, group, mode, if dir { 0o7 } else { 0o6 })
    }

    /// Whether the mode grants every bit of `need` (4 read, 2 write, 1 search), by the same
    /// owner-then-group-then-others rule.
    pub fn permits(&self, owner: u32, group: u32, mode: u32, need: u32) -> bool {
        if self.dac_override {
            return true;
        }
        let bits = if owner == self.uid {
            mode >> 6
        } else if group == self.gid || self.groups.contains(&group) {
            mode >> 3
        } else {
            mode
        } & 0o7;
        bits & need == need
    }

    /// `uid 65532 (gid 65532, groups [65532])`.
    pub fn describe(&self) -> String {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        format!("uid {} (gid {}, groups [{}])", self.uid, self.gid, groups.join(","))
    }
}

/// The first path of what a member uses on its volume that `who` cannot read and write, with
/// its owner and mode: the volume's root, the marker (read), `data_dir` and the restore work
/// directory beside it, recursively. Symbolic links are not followed (etcd makes none).
pub fn first_inaccessible(data_dir: &Path, who: &FsIdentity) -> Result<Option<String>, String> {
    let root = data_dir.parent().ok_or(format!("{} has no parent directory", data_dir.display()))?;
    let restore_dir = root.join(Path::new(crate::backup::contract::RESTORE_WORK_DIR).file_name().unwrap_or_default());
    // The volume's root itself (not what else lives there: lost+found, ...), and the marker.
    if let Some(what) =
        inaccessible(root, who, Access::ReadWrite)?.or(inaccessible(&root.join(MARKER_FILE), who, Access::Read)?)
    {
        return Ok(Some(what));
    }
    let mut todo = vec![data_dir.to_path_buf(), restore_dir];
    while let Some(path) = todo.pop() {
        if let Some(what) = inaccessible(&path, who, Access::ReadWrite)? {
            return Ok(Some(what));
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
            let entries = std::fs::read_dir(&path).map_err(|e| format!("read {}: {e}", path.display()))?;
            for e in entries {
                todo.push(e.map_err(|e| format!("read {}: {e}", path.display()))?.path());
            }
        }
    }
    Ok(None)
}

#[derive(Clone, Copy, PartialEq)]
enum Access {
    Read,
    ReadWrite,
}

/// `path` exists and `who` may not use it so: what, with its owner and mode.
fn inaccessible(path: &Path, who: &FsIdentity, access: Access) -> Result<Option<String>, String> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => return Ok(None),
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot look at {}: {e}", path.display())),
    };
    // Read only: as if every write bit were set.
    let mode = if access == Access::Read { meta.mode() | 0o222 } else { meta.mode() };
    if who.may_use(meta.uid(), meta.gid(), mode, meta.is_dir()) {
        return Ok(None);
    }
    Ok(Some(format!(
        "{} cannot {} {} (owner {}:{}, mode {:o})",
        who.describe(),
        if access == Access::Read { "read" } else { "read and write" },
        path.display(),
        meta.uid(),
        meta.gid(),
        meta.mode() & 0o7777
    )))
}

/// Run the check; `Err((code, message))` to exit with.
pub fn check(args: &CheckArgs) -> Result<String, (i32, String)> {
    let who = FsIdentity::of_this_process().map_err(|e| (1, e))?;
    if let Some(what) = first_inaccessible(&args.data_dir, &who).map_err(|e| (1, e))? {
        return Err((INACCESSIBLE_EXIT_CODE, what));
    }
    check_as(args)
}

/// The check, once the volume is known to be usable.
fn check_as(args: &CheckArgs) -> Result<String, (i32, String)> {
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
    let mut verdict = judge(found.as_ref(), has_data, &want, args.expect_data);
    if matches!(verdict, Verdict::Accept { .. }) && has_data && args.acknowledged_index > 0 {
        let reach = crate::pod::data_index::of(&args.data_dir).map_err(|e| (1, e))?;
        if let Some(why) = judge_reach(reach, args.acknowledged_index, &want.member) {
            verdict = Verdict::Refuse(why);
        }
    }
    match verdict {
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
            acknowledged_index: 0,
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

    /// A volume whose data ends before what its member acknowledged was rolled back: refused,
    /// whatever its marker says; one that reaches it, or with nothing recorded, is judged as
    /// before.
    #[test]
    fn data_older_than_what_the_member_acknowledged_is_refused() {
        assert_eq!(judge_reach(Some(124), 124, "ex-a"), None);
        assert_eq!(judge_reach(Some(500), 124, "ex-a"), None);
        assert_eq!(judge_reach(None, 0, "ex-a"), None, "nothing recorded: nothing to compare");
        let why = judge_reach(Some(100), 124, "ex-a").expect("refused");
        assert!(why.contains("rolled back") && why.contains("100") && why.contains("124"), "{why}");
        assert!(judge_reach(None, 124, "ex-a").is_some());

        // The check, on a volume whose marker is the member's: its log decides.
        let root = std::env::temp_dir().join(format!("eo-check-reach-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("data/member/wal")).unwrap();
        std::fs::write(
            root.join("data/member/wal/0000000000000000-0000000000000000.wal"),
            include_bytes!("data_index/testdata/member-etcd-3.4.23.wal"),
        )
        .unwrap();
        let want = Marker { member: "ex-a".into(), cluster_uid: "u1".into() };
        std::fs::write(root.join(MARKER_FILE), serde_json::to_vec(&want).unwrap()).unwrap();
        let args = |acknowledged_index| CheckArgs {
            member: "ex-a".into(),
            cluster_uid: "u1".into(),
            data_dir: root.join("data"),
            expect_data: true,
            acknowledged_index,
        };
        assert!(check_as(&args(124)).unwrap().contains("holds"));
        assert!(check_as(&args(0)).unwrap().contains("holds"));
        let (code, why) = check_as(&args(125)).unwrap_err();
        assert_eq!(code, REFUSED_EXIT_CODE);
        assert!(why.contains("rolled back"), "{why}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    fn who(uid: u32, gid: u32, groups: &[u32]) -> FsIdentity {
        FsIdentity { uid, gid, groups: groups.to_vec(), dac_override: false }
    }

    #[test]
    fn credentials_are_the_filesystem_ids_groups_and_dac_override() {
        let status = "Name:\tx\nUid:\t65532\t65532\t65532\t65532\nGid:\t65532\t65532\t65532\t65532\nGroups:\t65532 7 \nCapEff:\t0000000000000000\n";
        assert_eq!(FsIdentity::parse_status(status), Some(who(65532, 65532, &[65532, 7])));
        let root = "Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nGroups:\t \nCapEff:\t000001fffeffffff\n";
        let c = FsIdentity::parse_status(root).unwrap();
        assert!(c.dac_override && c.groups.is_empty());
        assert_eq!(FsIdentity::parse_status("Uid:\t0\t0\t0\t0\n"), None);
    }

    /// The kernel's rule: the owner's bits for the owner (even when the group's would allow
    /// more), the group's for a member of the group, else the others'; root without
    /// CAP_DAC_OVERRIDE (member containers drop it) is bound by them like anyone.
    #[test]
    fn access_follows_owner_then_group_then_others() {
        let nonroot = who(65532, 65532, &[65532]);
        let rootless_root = who(0, 0, &[]);
        let table: &[(&FsIdentity, u32, u32, u32, bool, bool)] = &[
            // who, owner, group, mode, dir, usable
            (&nonroot, 65532, 65532, 0o600, false, true),
            (&nonroot, 65532, 65532, 0o700, true, true),
            (&nonroot, 65532, 0, 0o500, true, false),
            // Written by root, no fsGroup: etcd's 0700/0600 modes shut everyone else out.
            (&nonroot, 0, 0, 0o700, true, false),
            (&nonroot, 0, 0, 0o600, false, false),
            // Written by root, the kubelet applied fsGroup 65532 (group rw, setgid directories).
            (&nonroot, 0, 65532, 0o2770, true, true),
            (&nonroot, 0, 65532, 0o660, false, true),
            (&nonroot, 0, 65532, 0o640, false, false),
            // A devkit volume's root: 0777.
            (&nonroot, 0, 0, 0o777, true, true),
            (&nonroot, 65532, 0, 0o077, false, false),
            (&rootless_root, 0, 0, 0o700, true, true),
            (&rootless_root, 65532, 65532, 0o600, false, false),
        ];
        for (w, owner, group, mode, dir, usable) in table {
            assert_eq!(w.may_use(*owner, *group, *mode, *dir), *usable, "{w:?} on {owner}:{group} {mode:o}");
        }
        assert!(FsIdentity { dac_override: true, ..rootless_root }.may_use(65532, 65532, 0, true));
    }

    /// The walk covers the volume's root, the marker (read), etcd's data directory and the
    /// restore work directory, to the last file; not what else lives on the volume. Another
    /// user than the files' owner stands in for the pod's user.
    #[test]
    fn the_first_inaccessible_path_is_named_with_its_owner_and_mode() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let root = std::env::temp_dir().join(format!("eo-access-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("data/member/wal")).unwrap();
        std::fs::create_dir_all(root.join("lost+found")).unwrap();
        std::fs::write(root.join("data/member/wal/0.wal"), b"x").unwrap();
        std::fs::write(root.join(MARKER_FILE), b"{}").unwrap();
        let chmod =
            |p: &str, m: u32| std::fs::set_permissions(root.join(p), std::fs::Permissions::from_mode(m)).unwrap();
        let meta = std::fs::metadata(&root).unwrap();
        let (me, my_group) = (meta.uid(), meta.gid());
        let other = who(me.wrapping_add(1), my_group.wrapping_add(1), &[]);
        let in_group = who(me.wrapping_add(1), my_group.wrapping_add(1), &[my_group]);
        let data = root.join("data");
        for p in ["", "data", "data/member", "data/member/wal"] {
            chmod(p, 0o770);
        }
        chmod("data/member/wal/0.wal", 0o660);
        chmod(MARKER_FILE, 0o640);
        chmod("lost+found", 0o700);
        assert_eq!(first_inaccessible(&data, &in_group).unwrap(), None, "group access is enough");
        let what = first_inaccessible(&data, &other).unwrap().expect("no access for others");
        assert!(what.contains(&format!("cannot read and write {} ", root.display())), "{what}");
        chmod("", 0o777);
        let what = first_inaccessible(&data, &other).unwrap().unwrap();
        assert!(what.contains(&format!("cannot read {}", root.join(MARKER_FILE).display())), "{what}");
        chmod(MARKER_FILE, 0o644);
        let what = first_inaccessible(&data, &other).unwrap().unwrap();
        assert!(what.contains("data") && what.contains("mode 770"), "{what}");
        for p in ["data", "data/member", "data/member/wal"] {
            chmod(p, 0o777);
        }
        let what = first_inaccessible(&data, &other).unwrap().unwrap();
        assert!(what.ends_with(&format!("0.wal (owner {me}:{my_group}, mode 660)")), "{what}");
        chmod("data/member/wal/0.wal", 0o666);
        assert_eq!(first_inaccessible(&data, &other).unwrap(), None, "lost+found is not the member's");
        std::fs::create_dir_all(root.join("restore/data")).unwrap();
        chmod("restore", 0o777);
        chmod("restore/data", 0o700);
        assert!(first_inaccessible(&data, &other).unwrap().unwrap().contains("restore/data"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}

//! (pod side) May this pod's user use what it must on a PVC backup location? Checked before
//! anything is read or written, from owners and modes as the kernel decides them
//! (`member_volume::FsIdentity`), so that a pod whose user cannot fails at once with
//! [`PodError::AccessDenied`] (which the operator tells apart from other failures) instead of
//! half-way through with an I/O error.
//!
//! Backup and verify pods run as the non-root user with the pod's `fsGroup`, which the kubelet
//! applies to most volume types (the volume becomes group-writable). It does not to hostPath
//! volumes, and files or directories written as root by earlier operator versions (directories
//! 0755, files 0644) stay root's there: the non-root user can read them but not create, replace
//! or keep aside files beside them. The operator then marks the claim as root's and the next pod
//! runs as root (`backup_planner`, `restore_planner`).
//!
//! What the store (`object_store`'s `LocalFileSystem`) does on the volume, and so what is
//! checked:
//! - `backup-save` creates staged files in the key's directory and renames them over the key
//!   and its sidecar, creates missing directories, lists and deletes backups (retention, the
//!   previous pair of a one-shot backup): every directory on the way must be searchable, the
//!   deepest existing one readable, writable and searchable. A one-shot backup keeps the backup
//!   it replaces aside as a hard link, which Linux (`fs.protected_hardlinks`) allows to the
//!   file's owner or to whoever may read and write it.
//! - `backup-verify` and `restore-prepare` read the key, its sidecar and the pair kept aside
//!   while a one-shot backup replaces it: the directories on the way must be searchable, each
//!   of those files that exists readable.

use std::path::{Path, PathBuf};

use super::contract::PodError;
use super::location;
use crate::pod::member_volume::FsIdentity;

/// Check that `who` may write a backup at `key` under the mount `root`; `one_shot`: it replaces
/// the backup at the key, keeping it aside as a hard link first.
pub fn check_write(root: &Path, key: &str, one_shot: bool, who: &FsIdentity) -> Result<(), PodError> {
    let (deepest, meta) = match walk(root, key, who)? {
        Walk::Reached(dir, meta) | Walk::Stopped(dir, meta) => (dir, meta),
        Walk::NotADirectory => return Ok(()),
    };
    if !permits(who, &meta, 0o7) {
        return Err(denied(who, "create, replace and delete files in", &deepest, &meta));
    }
    if one_shot {
        let path = root.join(key);
        if let Some(m) = look(&path, who)?.filter(|m| m.is_file()) {
            use std::os::unix::fs::MetadataExt;
            if m.uid() != who.uid && !permits(who, &m, 0o6) {
                return Err(denied(who, "keep aside (hard-link) the backup it replaces,", &path, &m));
            }
        }
    }
    Ok(())
}

/// Check that `who` may read the backup at `key` under the mount `root`, its sidecar and the
/// pair kept aside while a one-shot backup replaces it (those that exist: a missing backup is
/// the verification's to report).
pub fn check_read(root: &Path, key: &str, who: &FsIdentity) -> Result<(), PodError> {
    match walk(root, key, who)? {
        Walk::Reached(..) => {}
        Walk::Stopped(..) | Walk::NotADirectory => return Ok(()),
    }
    let previous = location::previous_key(key);
    for k in [key.to_string(), location::sidecar_key(key), location::sidecar_key(&previous), previous.clone()] {
        let path = root.join(&k);
        if let Some(m) = look(&path, who)?.filter(|m| m.is_file())
            && !permits(who, &m, 0o4)
        {
            return Err(denied(who, "read", &path, &m));
        }
    }
    Ok(())
}

/// How far the directories from `root` to the key's directory exist, each checked searchable.
enum Walk {
    /// The key's directory exists (and its metadata).
    Reached(PathBuf, std::fs::Metadata),
    /// The deepest directory that exists: the ones below are created by the store.
    Stopped(PathBuf, std::fs::Metadata),
    /// Something on the way is no directory: the store's own error says so.
    NotADirectory,
}

fn walk(root: &Path, key: &str, who: &FsIdentity) -> Result<Walk, PodError> {
    let parts: Vec<&str> = key.split('/').collect();
    let dirs = &parts[..parts.len().saturating_sub(1)];
    let mut path = root.to_path_buf();
    let Some(mut meta) = look(&path, who)? else {
        return Err(format!("the volume is not mounted at {}", root.display()).into());
    };
    for d in dirs {
        if !meta.is_dir() {
            return Ok(Walk::NotADirectory);
        }
        if !permits(who, &meta, 0o1) {
            return Err(denied(who, "search", &path, &meta));
        }
        let next = path.join(d);
        match look(&next, who)? {
            Some(m) => (path, meta) = (next, m),
            None => return Ok(Walk::Stopped(path, meta)),
        }
    }
    if !meta.is_dir() {
        return Ok(Walk::NotADirectory);
    }
    if !permits(who, &meta, 0o1) {
        return Err(denied(who, "search", &path, &meta));
    }
    Ok(Walk::Reached(path, meta))
}

/// The metadata of `path` (symbolic links followed, as the store follows them); None when it
/// does not exist. A path the kernel refuses to look at is denied access.
fn look(path: &Path, who: &FsIdentity) -> Result<Option<std::fs::Metadata>, PodError> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(PodError::AccessDenied {
            uid: who.uid,
            what: format!("{} cannot look at {}: {e}", who.describe(), path.display()),
        }),
        Err(e) => Err(format!("cannot look at {}: {e}", path.display()).into()),
    }
}

fn permits(who: &FsIdentity, m: &std::fs::Metadata, need: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    who.permits(m.uid(), m.gid(), m.mode(), need)
}

fn denied(who: &FsIdentity, verb: &str, path: &Path, m: &std::fs::Metadata) -> PodError {
    use std::os::unix::fs::MetadataExt;
    PodError::AccessDenied {
        uid: who.uid,
        what: format!(
            "{} cannot {verb} {} (owner {}:{}, mode {:o})",
            who.describe(),
            path.display(),
            m.uid(),
            m.gid(),
            m.mode() & 0o7777
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A volume owned by this test's user; another user (in the files' group or not) stands in
    /// for the pod's non-root user, this one for root without capabilities (the owner).
    struct Volume {
        root: PathBuf,
        owner: FsIdentity,
        other: FsIdentity,
        in_group: FsIdentity,
    }

    impl Volume {
        fn new(name: &str) -> Volume {
            let root = std::env::temp_dir().join(format!("eo-volume-access-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(&root).unwrap();
            let m = std::fs::metadata(&root).unwrap();
            let (uid, gid) = (m.uid(), m.gid());
            let who = |uid, gid, groups: Vec<u32>| FsIdentity { uid, gid, groups, dac_override: false };
            Volume {
                owner: who(uid, gid, vec![]),
                other: who(uid.wrapping_add(1), gid.wrapping_add(1), vec![]),
                in_group: who(uid.wrapping_add(1), gid.wrapping_add(1), vec![gid]),
                root,
            }
        }
        fn dir(&self, p: &str, mode: u32) {
            let path = self.root.join(p);
            std::fs::create_dir_all(&path).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        fn file(&self, p: &str, mode: u32) {
            let path = self.root.join(p);
            std::fs::write(&path, b"x").unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        fn what(r: Result<(), PodError>) -> String {
            match r {
                Err(PodError::AccessDenied { what, .. }) => what,
                other => panic!("not denied: {other:?}"),
            }
        }
    }

    impl Drop for Volume {
        fn drop(&mut self) {
            let _ = std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o755));
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// The case of the issue: the hostPath volume's root is 0777, an earlier version's root pod
    /// left `ex/` 0755 and a backup 0644 in it. The non-root user may read them but not write
    /// beside them; root (the owner here) may; the kubelet's fsGroup (group rw) lets it in.
    #[test]
    fn a_directory_an_earlier_root_pod_left_denies_writing_but_not_reading() {
        let v = Volume::new("earlier");
        v.dir("", 0o777);
        v.dir("ex", 0o755);
        v.file("ex/etcd.backup", 0o644);
        v.file("ex/etcd.backup.meta.json", 0o644);
        for one_shot in [true, false] {
            let what = Volume::what(check_write(&v.root, "ex/etcd.backup", one_shot, &v.other));
            assert!(what.contains("cannot create, replace and delete files in"), "{what}");
            assert!(what.contains(&format!("{} (owner", v.root.join("ex").display())), "{what}");
            assert!(what.contains("mode 755"), "{what}");
            assert!(check_write(&v.root, "ex/etcd.backup", one_shot, &v.owner).is_ok());
        }
        assert!(check_read(&v.root, "ex/etcd.backup", &v.other).is_ok(), "0644 files are readable");
        // fsGroup applied: group rwx on directories, rw on files.
        v.dir("ex", 0o2775);
        v.file("ex/etcd.backup", 0o664);
        assert!(check_write(&v.root, "ex/etcd.backup", true, &v.in_group).is_ok());
        // A fresh volume: nothing there yet, the root is the deepest directory.
        let fresh = Volume::new("fresh");
        fresh.dir("", 0o777);
        assert!(check_write(&fresh.root, "a/b/etcd.backup", true, &fresh.other).is_ok());
        fresh.dir("", 0o755);
        let what = Volume::what(check_write(&fresh.root, "a/b/etcd.backup", false, &fresh.other));
        assert!(what.contains(&format!("files in {} (owner", fresh.root.display())), "{what}");
        assert!(check_read(&fresh.root, "a/b/etcd.backup", &fresh.other).is_ok(), "nothing to read: verify says");
    }

    /// A one-shot backup keeps the one it replaces as a hard link: allowed to the file's owner
    /// or to whoever may read and write it, even in a directory everyone may write.
    #[test]
    fn a_one_shot_backup_must_be_able_to_link_the_backup_it_replaces() {
        let v = Volume::new("link");
        v.dir("", 0o777);
        v.file("etcd.backup", 0o644);
        let what = Volume::what(check_write(&v.root, "etcd.backup", true, &v.other));
        assert!(what.contains("keep aside (hard-link)") && what.contains("mode 644"), "{what}");
        assert!(check_write(&v.root, "etcd.backup", false, &v.other).is_ok(), "periodic: nothing linked");
        assert!(check_write(&v.root, "etcd.backup", true, &v.owner).is_ok(), "the owner may");
        v.file("etcd.backup", 0o666);
        assert!(check_write(&v.root, "etcd.backup", true, &v.other).is_ok(), "read and write may");
    }

    #[test]
    fn reading_needs_searchable_directories_and_readable_files() {
        let v = Volume::new("read");
        v.dir("", 0o777);
        v.dir("ex", 0o700);
        v.file("ex/etcd.backup", 0o600);
        let what = Volume::what(check_read(&v.root, "ex/etcd.backup", &v.other));
        assert!(what.contains("cannot search") && what.contains("mode 700"), "{what}");
        v.dir("ex", 0o755);
        let what = Volume::what(check_read(&v.root, "ex/etcd.backup", &v.other));
        assert!(what.contains("cannot read") && what.contains("etcd.backup (owner"), "{what}");
        v.file("ex/etcd.backup", 0o644);
        v.file("ex/etcd.backup.previous.meta.json", 0o600);
        let what = Volume::what(check_read(&v.root, "ex/etcd.backup", &v.other));
        assert!(what.contains("etcd.backup.previous.meta.json"), "the pair kept aside too: {what}");
        assert!(check_read(&v.root, "ex/etcd.backup", &v.owner).is_ok());
        // The uid denied is the pod's (the operator marks the volume only for a non-root one).
        match check_read(&v.root, "ex/etcd.backup", &v.other) {
            Err(PodError::AccessDenied { uid, .. }) => assert_eq!(uid, v.other.uid),
            other => panic!("{other:?}"),
        }
    }
}

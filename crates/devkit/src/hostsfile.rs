//! Writing the dnsmasq hosts file and the marked block of the host's `/etc/hosts`.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use anyhow::{Context, Result};

pub const BLOCK_BEGIN: &str =
    "# BEGIN etcd-operator-dev cluster DNS (devkit dns-sync; removed by hack/cluster.sh down)";
pub const BLOCK_END: &str = "# END etcd-operator-dev cluster DNS";

/// Writes `content` to `path` through a temporary file and a rename, unless the file already
/// holds exactly that. Returns whether it wrote. The file is world-readable: dnsmasq drops
/// its privileges to `nobody` before it reads the file.
pub fn write_if_changed(path: &Path, content: &str) -> Result<bool> {
    if fs::read_to_string(path).ok().as_deref() == Some(content) {
        return Ok(false);
    }
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = path.file_name().context("hosts path has no file name")?.to_string_lossy();
    let tmp = dir.join(format!(".{file_name}.devkit-tmp"));
    {
        let mut f = fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
        f.write_all(content.as_bytes())?;
        f.set_permissions(fs::Permissions::from_mode(0o644))?;
        f.sync_all()?;
    }
    match fs::rename(&tmp, path) {
        Ok(()) => {}
        // /etc/hosts can be a bind mount (containers, some VMs): a rename over it fails with EBUSY,
        // so fall back to rewriting it in place.
        Err(e)
            if e.kind() == ErrorKind::ResourceBusy || e.raw_os_error() == Some(16) || e.raw_os_error() == Some(18) =>
        {
            let _ = fs::remove_file(&tmp);
            fs::write(path, content).with_context(|| format!("write {}", path.display()))?;
        }
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e).with_context(|| format!("rename {} to {}", tmp.display(), path.display()));
        }
    }
    Ok(true)
}

/// `existing` without the marked block.
pub fn strip_block(existing: &str) -> String {
    let mut out = String::with_capacity(existing.len());
    let mut inside = false;
    for line in existing.split_inclusive('\n') {
        let trimmed = line.trim_end();
        if trimmed == BLOCK_BEGIN {
            inside = true;
        } else if inside && trimmed == BLOCK_END {
            inside = false;
        } else if !inside {
            out.push_str(line);
        }
    }
    out
}

/// `existing` with the marked block replaced by `lines` (the block is dropped when `lines` is empty).
pub fn splice_block(existing: &str, lines: &str) -> String {
    let mut out = strip_block(existing);
    if lines.is_empty() {
        return out;
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(BLOCK_BEGIN);
    out.push('\n');
    out.push_str(lines);
    if !lines.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(BLOCK_END);
    out.push('\n');
    out
}

/// Puts `lines` into the marked block of the hosts file at `path` (e.g. `/etc/hosts`).
pub fn update_block(path: &Path, lines: &str) -> Result<bool> {
    let existing = fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    let wanted = splice_block(&existing, lines);
    if wanted == existing {
        return Ok(false);
    }
    write_if_changed(path, &wanted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOSTS: &str = "127.0.0.1 localhost\n127.0.0.1 vm\n";

    #[test]
    fn splice_adds_replaces_and_removes_the_block() {
        let one = splice_block(HOSTS, "10.96.0.1 kubernetes.default.svc.cluster.local\n");
        assert_eq!(one, format!("{HOSTS}{BLOCK_BEGIN}\n10.96.0.1 kubernetes.default.svc.cluster.local\n{BLOCK_END}\n"));
        let two = splice_block(&one, "10.96.0.2 x.ns.svc.cluster.local\n");
        assert_eq!(two, format!("{HOSTS}{BLOCK_BEGIN}\n10.96.0.2 x.ns.svc.cluster.local\n{BLOCK_END}\n"));
        assert_eq!(splice_block(&two, ""), HOSTS);
        assert_eq!(strip_block(&two), HOSTS);
    }

    #[test]
    fn splice_keeps_lines_after_the_block_and_handles_missing_newline() {
        let with_tail = format!("{HOSTS}{BLOCK_BEGIN}\n1.2.3.4 a\n{BLOCK_END}\n10.0.0.1 later\n");
        assert_eq!(strip_block(&with_tail), format!("{HOSTS}10.0.0.1 later\n"));
        assert_eq!(
            splice_block("127.0.0.1 localhost", "1.2.3.4 a\n"),
            format!("127.0.0.1 localhost\n{BLOCK_BEGIN}\n1.2.3.4 a\n{BLOCK_END}\n")
        );
    }

    #[test]
    fn write_if_changed_writes_once() {
        let dir = std::env::temp_dir().join(format!("devkit-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("hosts");
        assert!(write_if_changed(&p, "a\n").unwrap());
        assert!(!write_if_changed(&p, "a\n").unwrap());
        assert!(update_block(&p, "1.2.3.4 b\n").unwrap());
        assert!(!update_block(&p, "1.2.3.4 b\n").unwrap());
        assert!(update_block(&p, "").unwrap());
        assert_eq!(fs::read_to_string(&p).unwrap(), "a\n");
        fs::remove_dir_all(&dir).unwrap();
    }
}

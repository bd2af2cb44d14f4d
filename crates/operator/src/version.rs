//! etcd versions: parsing, the supported range, and which version changes are allowed.

use std::fmt;

/// A released etcd version `major.minor.patch` (a `-suffix` is kept for image tags only).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
    /// Pre-release or build suffix after `-`, e.g. `rc.0`; empty for releases.
    pub suffix: String,
}

/// Oldest supported minor line (inclusive). 3.4 introduced learners, which scaling relies on.
pub const MIN_SUPPORTED: (u64, u64) = (3, 4);
/// Newest supported minor line (inclusive).
pub const MAX_SUPPORTED: (u64, u64) = (3, 7);

/// The oldest patch of a minor line from which etcd supports moving to the next minor, from the
/// upstream upgrade guides: 3.5 → 3.6 from 3.5.26 (before 3.5.20 a learner's promotion was
/// persisted only in the v2 store, so promoted members turn back into learners under 3.6; 3.5.26
/// is the release upstream names for the step), 3.6 → 3.7 from 3.6.11 ("earlier 3.6 patch
/// releases may not be compatible with a rolling upgrade to 3.7").
pub const STEPPING_STONES: &[((u64, u64), u64)] = &[((3, 5), 26), ((3, 6), 11)];

/// The stepping stone `from` must reach before moving to the next minor, if it has not yet.
pub fn stepping_stone(from: &Version) -> Option<Version> {
    STEPPING_STONES
        .iter()
        .find(|(line, patch)| *line == from.minor_line() && from.patch < *patch)
        .map(|((major, minor), patch)| Version { major: *major, minor: *minor, patch: *patch, suffix: String::new() })
}

/// Human-readable list for messages.
pub fn supported_range() -> String {
    format!("{}.{}.x to {}.{}.x", MIN_SUPPORTED.0, MIN_SUPPORTED.1, MAX_SUPPORTED.0, MAX_SUPPORTED.1)
}

impl Version {
    /// Parse `3.5.1`, `v3.5.1` or `3.5.1-rc.0`.
    pub fn parse(s: &str) -> Result<Version, String> {
        let t = s.trim().trim_start_matches('v');
        let (core, suffix) = match t.split_once('-') {
            Some((c, x)) => (c, x.to_string()),
            None => (t, String::new()),
        };
        let parts: Vec<_> = core.split('.').collect();
        if parts.len() != 3 {
            return Err(format!("version {s:?} is not of the form MAJOR.MINOR.PATCH"));
        }
        let num = |p: &str| p.parse::<u64>().map_err(|_| format!("version {s:?} is not of the form MAJOR.MINOR.PATCH"));
        Ok(Version { major: num(parts[0])?, minor: num(parts[1])?, patch: num(parts[2])?, suffix })
    }

    pub fn minor_line(&self) -> (u64, u64) {
        (self.major, self.minor)
    }

    pub fn is_supported(&self) -> bool {
        (MIN_SUPPORTED..=MAX_SUPPORTED).contains(&self.minor_line())
    }

    /// Image tag in etcd's convention: `v3.5.1`.
    pub fn tag(&self) -> String {
        format!("v{self}")
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.suffix.is_empty() {
            write!(f, "-{}", self.suffix)?;
        }
        Ok(())
    }
}

/// Whether a running cluster at `from` may be moved to `to`: the same version, a patch change
/// within a minor line (either direction: etcd supports patch downgrades), or one minor up.
/// Minor downgrades and skipped minors are refused, as etcd itself does not support them.
pub fn check_change(from: &Version, to: &Version) -> Result<(), String> {
    if from.minor_line() == to.minor_line() {
        return Ok(());
    }
    if to.major == from.major && to.minor == from.minor + 1 {
        if let Some(stone) = stepping_stone(from) {
            return Err(format!(
                "upgrade from {from} to {to} needs {stone} or later first: etcd supports {}.{} → {}.{} only from {stone}; upgrade to {}.{}.{}+ first (a patch upgrade), then to {to}",
                from.major, from.minor, to.major, to.minor, stone.major, stone.minor, stone.patch
            ));
        }
        return Ok(());
    }
    if to.minor_line() < from.minor_line() {
        return Err(format!(
            "downgrade from {from} to {to} is not supported: etcd cannot move back a minor version; set version back to {}.{}.x",
            from.major, from.minor
        ));
    }
    Err(format!(
        "upgrade from {from} to {to} skips a minor version: upgrade one minor at a time ({}.{} first)",
        from.major,
        from.minor + 1
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn parses_with_and_without_v() {
        assert_eq!(v("v3.5.1"), v("3.5.1"));
        assert_eq!(v("3.5.1").tag(), "v3.5.1");
        assert_eq!(v("3.6.0-rc.1").suffix, "rc.1");
        assert!(Version::parse("3.5").is_err());
        assert!(Version::parse("latest").is_err());
        assert!(Version::parse("").is_err());
    }

    #[test]
    fn supported_lines() {
        assert!(!v("3.2.13").is_supported());
        assert!(!v("3.3.27").is_supported());
        assert!(v("3.4.23").is_supported());
        assert!(v("3.5.1").is_supported());
        assert!(v("3.6.0").is_supported());
        assert!(v("3.7.2").is_supported());
        assert!(!v("3.8.0").is_supported());
        assert!(!v("4.0.0").is_supported());
    }

    #[test]
    fn allowed_changes() {
        assert!(check_change(&v("3.4.23"), &v("3.5.0")).is_ok());
        assert!(check_change(&v("3.5.0"), &v("3.5.1")).is_ok());
        assert!(check_change(&v("3.5.1"), &v("3.5.0")).is_ok(), "patch rollback is allowed");
        assert!(check_change(&v("3.5.1"), &v("3.4.23")).unwrap_err().contains("downgrade"));
        assert!(check_change(&v("3.4.23"), &v("3.6.0")).unwrap_err().contains("skips a minor"));
        let e = check_change(&v("3.5.1"), &v("3.6.6")).unwrap_err();
        assert!(e.contains("needs 3.5.26 or later first") && e.contains("upgrade to 3.5.26+ first"), "{e}");
        assert!(check_change(&v("3.5.26"), &v("3.6.0")).is_ok());
        assert!(check_change(&v("3.6.10"), &v("3.7.0")).unwrap_err().contains("3.6.11"));
        assert!(check_change(&v("3.6.11"), &v("3.7.0")).is_ok());
    }
}

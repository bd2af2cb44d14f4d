//! etcd versions: parsing, the supported range, and which version changes are allowed.

use std::cmp::Ordering;
use std::fmt;

/// An etcd version `major.minor.patch[-pre-release]`, ordered by semver precedence: a
/// pre-release comes before its release (`3.5.1-rc.0 < 3.5.1`), pre-release identifiers compare
/// numerically when both are numbers, else as ASCII, numbers before words, fewer before more.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
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

/// The oldest release of a minor line from which etcd supports moving to the next minor, as the
/// upstream upgrade guides say (etcd-io/website `content/en/docs/v3.6/upgrades/upgrade_3_6.md`
/// and `v3.7/upgrades/upgrade_3_7.md`, read 2026-08):
/// - 3.5 → 3.6 from **3.5.32**: "make sure that all of your 3.5 members are updated to 3.5.32 or
///   later"; 3.5.20 stopped promotions living only in the v2 store (members turned back into
///   learners under 3.6), 3.5.24–3.5.26 fixed zombie members in the v3 store (etcd#20995), 3.5.32
///   added `--v2-deprecation=write-only-skip-check` and the WAL-aware `etcdutl check v2store`;
/// - 3.6 → 3.7 from 3.6.11: "earlier 3.6 patch releases may not be compatible with a rolling
///   upgrade to 3.7".
pub const STEPPING_STONES: &[((u64, u64), u64)] = &[((3, 5), 32), ((3, 6), 11)];

/// The stepping stone `from` must reach before moving to the next minor, if it has not yet (a
/// pre-release of the stepping stone has not).
pub fn stepping_stone(from: &Version) -> Option<Version> {
    STEPPING_STONES
        .iter()
        .filter(|(line, _)| *line == from.minor_line())
        .map(|((major, minor), patch)| Version { major: *major, minor: *minor, patch: *patch, suffix: String::new() })
        .find(|stone| from < stone)
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

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| pre_release_cmp(self.pre_release(), other.pre_release()))
            // Build metadata does not count for precedence; compared last only so that the order
            // agrees with equality.
            .then_with(|| self.suffix.cmp(&other.suffix))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Version {
    /// The pre-release part of the suffix (build metadata after `+` removed); empty for releases.
    fn pre_release(&self) -> &str {
        self.suffix.split('+').next().unwrap_or_default()
    }
}

/// A pre-release identifier made of digits only.
fn numeric(s: &str) -> Option<&str> {
    (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())).then_some(s)
}

/// Semver §11: no pre-release ranks above any pre-release; identifiers left to right, numbers
/// numerically and below words, words as ASCII; a prefix ranks below the longer list.
fn pre_release_cmp(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (mut xs, mut ys) = (a.split('.'), b.split('.'));
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let o = match (numeric(x), numeric(y)) {
                    // Numbers of any length: the shorter (without leading zeros) is smaller.
                    (Some(x), Some(y)) => {
                        let (x, y) = (x.trim_start_matches('0'), y.trim_start_matches('0'));
                        x.len().cmp(&y.len()).then_with(|| x.cmp(y))
                    }
                    (Some(_), None) => Ordering::Less,
                    (None, Some(_)) => Ordering::Greater,
                    (None, None) => x.cmp(y),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
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
        assert!(e.contains("needs 3.5.32 or later first") && e.contains("upgrade to 3.5.32+ first"), "{e}");
        assert!(check_change(&v("3.5.32"), &v("3.6.0")).is_ok());
        assert!(check_change(&v("3.6.10"), &v("3.7.0")).unwrap_err().contains("3.6.11"));
        assert!(check_change(&v("3.6.11"), &v("3.7.0")).is_ok());
    }

    /// Semver precedence (semver.org §11), as etcd tags its releases: `v3.5.1-rc.0` before
    /// `v3.5.1`.
    #[test]
    fn a_pre_release_comes_before_its_release() {
        assert!(v("3.5.1-rc.0") < v("3.5.1"));
        assert!(v("3.5.0") < v("3.5.1-rc.0"));
        assert_eq!([v("3.5.1"), v("3.5.1-rc.0")].iter().min(), Some(&v("3.5.1-rc.0")));
        let ordered = [
            "3.6.0-alpha",
            "3.6.0-alpha.1",
            "3.6.0-alpha.beta",
            "3.6.0-beta",
            "3.6.0-beta.2",
            "3.6.0-beta.11",
            "3.6.0-rc.1",
            "3.6.0",
            "3.6.1",
        ];
        for w in ordered.windows(2) {
            assert!(v(w[0]) < v(w[1]), "{} < {}", w[0], w[1]);
            assert!(v(w[1]) > v(w[0]), "{} > {}", w[1], w[0]);
        }
        assert_eq!(v("3.6.0-rc.1").cmp(&v("3.6.0-rc.1")), std::cmp::Ordering::Equal);
    }

    /// The stepping stone's own pre-release is below it: 3.5.32-rc.0 → 3.6 is refused.
    #[test]
    fn a_pre_release_of_a_stepping_stone_is_not_the_stepping_stone() {
        assert_eq!(stepping_stone(&v("3.5.32-rc.0")), Some(v("3.5.32")));
        assert_eq!(stepping_stone(&v("3.5.32")), None);
        assert!(check_change(&v("3.5.32-rc.0"), &v("3.6.15")).unwrap_err().contains("3.5.32"));
    }

    /// Upstream's current floor for 3.5 → 3.6 (the 3.6 upgrade guide since the July 2026
    /// releases) is 3.5.32: 3.5.26 is refused, naming it.
    #[test]
    fn three_five_to_three_six_needs_three_five_thirty_two() {
        let e = check_change(&v("3.5.26"), &v("3.6.15")).unwrap_err();
        assert!(e.contains("3.5.32"), "{e}");
        assert!(check_change(&v("3.5.31"), &v("3.6.15")).is_err());
        assert!(check_change(&v("3.5.34"), &v("3.6.15")).is_ok());
    }
}

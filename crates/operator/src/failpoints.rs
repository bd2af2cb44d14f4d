//! Fault injection for the end-to-end tests, in the spirit of etcd's gofail failpoints: every
//! failpoint is off unless the process was started with `ETCD_OPERATOR_FAILPOINTS` naming it
//! (comma-separated). The shipped manifests never set it; the operator logs the active ones at
//! start-up so a forgotten setting is visible.
//!
//! - `reconcile-panic`: a reconcile of an object annotated [`ANNOTATION`]`: reconcile-panic`
//!   panics (proves that one object's panic stays that object's: `panic_guard`).
//! - `backup-publish-pause` (backup pods): 3 s between the steps of a one-shot backup's
//!   publication (`backup::one_shot`), so a reader can watch every intermediate state.
//! - `restore-snapshot-kill-once` (restored members): the restore step kills `etcdutl` half-way
//!   the first time it runs on a volume (`crates/restore-step`).
//!
//! The pods the operator starts for backups and restores get the operator's armed failpoints in
//! their environment ([`pod_env`]): the pod commands are the same binary.

use std::sync::OnceLock;

use kube::ResourceExt;

/// The environment variable that arms failpoints.
pub const ENV: &str = "ETCD_OPERATOR_FAILPOINTS";
/// The annotation that selects the objects a failpoint fires on.
pub const ANNOTATION: &str = "etcd.database.coreos.com/failpoint";
pub const RECONCILE_PANIC: &str = "reconcile-panic";

fn all_armed() -> &'static [String] {
    static ARMED: OnceLock<Vec<String>> = OnceLock::new();
    ARMED.get_or_init(|| parse(&std::env::var(ENV).unwrap_or_default()))
}

fn parse(v: &str) -> Vec<String> {
    v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// The armed failpoints (for the start-up log line).
pub fn active() -> &'static [String] {
    all_armed()
}

/// Whether failpoint `name` is armed.
pub fn armed(name: &str) -> bool {
    all_armed().iter().any(|f| f == name)
}

pub const RESTORE_SNAPSHOT_KILL_ONCE: &str = "restore-snapshot-kill-once";

/// The environment that passes the armed failpoints on to a pod the operator starts (none when
/// none is armed: the shipped manifests never arm any).
pub fn pod_env() -> Vec<k8s_openapi::api::core::v1::EnvVar> {
    if all_armed().is_empty() {
        return Vec::new();
    }
    vec![k8s_openapi::api::core::v1::EnvVar {
        name: ENV.into(),
        value: Some(all_armed().join(",")),
        ..Default::default()
    }]
}

/// Panics when `reconcile-panic` is armed and `obj` asks for it.
pub fn reconcile_panic(obj: &impl ResourceExt) {
    if armed(RECONCILE_PANIC) && obj.annotations().get(ANNOTATION).is_some_and(|v| v == RECONCILE_PANIC) {
        panic!("failpoint {RECONCILE_PANIC} fired on {}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_named_failpoints_are_armed() {
        assert_eq!(parse(""), Vec::<String>::new());
        assert_eq!(parse(" reconcile-panic , other,"), ["reconcile-panic", "other"]);
    }
}

//! Backups and restores. The operator process only plans and records: every byte of backup
//! data moves in pods it creates (the operator's own image), which also are the only places
//! credentials are mounted. Same shape as the EtcdCluster wing: observe → pure plan → act.
//! See ARCHITECTURE.md.
//!
//! Pure:
//! - [`archive`]: the continuous archive's segment format, restorable ranges, point-in-time
//!   plans and window retention (the core of point-in-time restores: the archiver writes it,
//!   `pod_commands::restore_point` replays it).
//! - [`contract`]: what passes between the operator and its pods (labels, paths, flags, reports).
//! - [`location`]: where a backup lives, periodic names, retention (only of the etcd cluster
//!   backed up now); [`identity`]: what is said when that cluster changed.
//! - [`backup_planner`] / [`restore_planner`]: the decisions of the two controllers;
//!   [`archiver_plan`]: the continuous archiver's pod and its `Archiving` condition;
//!   [`restore_wait`]: how long a restore waits for a cluster of its name to go.
//! - [`restorable`]: what status says can be restored (`restorableRanges`, the
//!   `ArchiveCurrent` condition, gap Events).
//! - [`verify_policy`]: when a failed verify pod is retried and with how much time.
//! - [`series_owner`]: one schedule per snapshot series (a later EtcdBackup naming it is refused).
//! - [`drill`]: restore drills: the key-space digest they compare and when one is due.
//! - [`volume_owner`]: who job pods run as on a PVC; the root mark and what it says.
//! - [`job_pods`]: what a job pod in the cache says.
//! - [`pods`], [`restore_init`]: builders of job pods and of a restored member's init containers.
//!
//! I/O:
//! - [`jobs`]: shared plumbing and the one controller runner; [`backup_controller`] and
//!   [`restore_controller`]: observe and execute.
//! - Pod commands: [`save`] (`backup-save`, with [`one_shot`]), [`archiver`] (`archive-follow`), [`fetch`] (`backup-verify`,
//!   `restore-prepare`, `restore-finish`, `seed-from-member`); [`store`] opens a location,
//!   [`series`] lists a snapshot series and its archive (segment headers read by first line),
//!   [`pod_secrets`] reads the etcd login and client certificate mounted into the pod;
//!   [`volume_access`] checks up front that the pod's user may use a PVC location. They fail
//!   with [`contract::PodError`]: refused (final), access denied (on a PVC), or transient.

pub mod archive;
pub mod archiver;
pub mod archiver_plan;
pub mod backup_planner;
pub mod contract;
pub mod drill;
pub mod fetch;
pub mod identity;
pub mod job_pods;
pub mod location;
pub mod one_shot;
pub mod pod_secrets;
pub mod pods;
pub mod restorable;
pub mod restore_init;
pub mod restore_planner;
pub mod restore_wait;
pub mod save;
pub mod series;
pub mod series_owner;
pub mod store;
pub mod verify_policy;
pub mod volume_access;
pub mod volume_owner;

/// RFC 3339 in UTC, whole seconds: how status writes times.
pub fn rfc3339(t: k8s_openapi::jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A time status wrote with [`rfc3339`].
pub fn parse_time(s: &Option<String>) -> Option<k8s_openapi::jiff::Timestamp> {
    s.as_deref().and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
}

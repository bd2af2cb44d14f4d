//! Backups and restores. The operator process only plans and records: every byte of backup
//! data moves in pods it creates (the operator's own image), which also are the only places
//! credentials are mounted. See ARCHITECTURE.md.
//!
//! - [`location`]: where a backup lives, periodic names, retention (pure).
//! - [`store`]: a location as an `object_store`, credentials from the mounted Secret.
//! - [`save`]: `backup-save`, run by backup pods.
//! - [`fetch`]: `backup-verify`, `restore-prepare`, `restore-finish`, run by restore pods.
//! - [`pods`]: builders of those pods and init containers (pure).
//! - [`verify_policy`]: when a failed verify pod is retried and with how much time (pure).
//! - [`controller`]: the EtcdBackup controller; [`restore`]: the EtcdRestore controller.

pub mod controller;
pub mod fetch;
pub mod location;
pub mod pods;
pub mod restore;
pub mod save;
pub mod store;
pub mod verify_policy;

//! Commands of the pods the operator starts that talk to etcd or Kubernetes themselves: a layer
//! (I/O), not a feature folder. `restore-point` replays a continuous archive into a snapshot
//! ([`restore_point`]); `restore-drill` restores the newest point into a throw-away etcd and
//! compares it with the live cluster ([`restore_drill`]). The older pod commands still live in `backup/` (`save`, `fetch`,
//! `archiver`: `FEATURE_IO_LEFT` in the import-rule test) until they move here.

pub mod restore_drill;
pub mod restore_point;

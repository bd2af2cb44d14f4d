//! Commands of the pods the operator starts that talk to etcd or Kubernetes themselves: a layer
//! (I/O), not a feature folder. `restore-point` replays a continuous archive into a snapshot
//! ([`restore_point`]). The older pod commands still live in `backup/` (`save`, `fetch`,
//! `archiver`: `FEATURE_IO_LEFT` in the import-rule test) until they move here.

pub mod restore_point;

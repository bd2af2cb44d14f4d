//! The continuous archive behind point-in-time restores (issue 29), its pure core: the
//! segment format ([`segment`]) and where segments live ([`layout`]), what a listing of snapshots and segments can restore and
//! where its gaps are ([`restorable_ranges`]), the plan of a restore to a revision or a moment
//! and the replay's transactions ([`point_in_time`]), and retention by a time window
//! ([`retention`]). No I/O here: the archiver (`backup::archiver`) writes segments and
//! `pod_commands::restore_point` replays them (docs/src/development/point-in-time-restore.md
//! says what is built and what is not).

pub mod layout;
pub mod point_in_time;
pub mod restorable_ranges;
pub mod retention;
pub mod segment;

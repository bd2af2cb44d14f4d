//! The binary's subcommands (the library does the work): [`run`] the controller (the default),
//! [`install`] prints or writes what installs the operator, [`pod_commands`] are what the pods
//! the operator starts run.

pub mod install;
pub mod pod_commands;
pub mod run;

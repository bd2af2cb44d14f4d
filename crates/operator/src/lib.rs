//! etcd-operator: a Kubernetes operator for etcd, compatible with the CoreOS
//! `etcd.database.coreos.com/v1beta2` API. See ARCHITECTURE.md for the map.

pub mod act;
pub mod auth;
pub mod backup;
pub mod backup_controllers;
pub mod controller;
pub mod coreos;
pub mod decide;
pub mod disruption_budget;
pub mod etcd;
pub mod etcd_flags;
pub mod failpoints;
pub mod fencing;
#[cfg(test)]
mod input_fuzz;
pub mod install;
pub mod marks;
pub mod naming;
pub mod network_policy;
pub mod nodes;
pub mod observe;
pub mod observed;
pub mod planner;
pub mod pod;
pub mod pod_commands;
pub mod pod_security;
pub mod pod_spec;
pub mod progress;
pub mod runtime;
pub mod status;
pub mod tls;
pub mod validation;
pub mod version;
pub mod volume_size;

/// The name this operator writes as field manager, Event reporter and Lease holder prefix.
pub const OPERATOR_NAME: &str = "etcd-operator";

/// Image of this operator, used for its Deployment and for the member pods' DNS-wait init
/// container. Overridable with `--image`.
pub fn default_image() -> String {
    format!("quay.io/etcd-operator-rs/etcd-operator:v{}", env!("CARGO_PKG_VERSION"))
}

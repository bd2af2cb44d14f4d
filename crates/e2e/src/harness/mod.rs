//! The one harness of the e2e tests (`tests/`) and the bench (`src/bin/bench`): a namespace per
//! test or sample with its clean-up, the operator under test (a process of this machine or
//! installed in-cluster from its manifests), and reading what it did (EtcdCluster status, member
//! pods, Events, the etcd cluster itself through etcdctl).
//!
//! | module | what |
//! |---|---|
//! | `namespace` | [`TestNamespace`]: create, kubectl in it, pods, delete on drop / `finish` / signal |
//! | `operator` | [`Operator`] (process or in-cluster by `E2E_OPERATOR`), [`with_operator`], [`diagnostics`] |
//! | `in_cluster` | [`InClusterOperator`] from `etcd-operator manifests`, [`operator_image`] |
//! | `cluster` | EtcdCluster status, member pods, [`wait_healthy`], endpoints, spec patches |
//! | `events` | Events about an object, new ones since a mark |
//! | `etcdctl` | the host's etcdctl against the cluster: keys, member list, version |
//! | `pods` | pod conditions, containers that will not start |
//! | `eviction` | the Eviction API (`policy/v1`, `v1beta1` before 1.22), as a drain calls it |
//! | `node` | this machine as the cluster's node: containers signalled with `ctr`, a member's data on the host, broken |
//! | `prometheus` | the local cluster's Prometheus (`MONITORING=1`): queries, alerts, targets |
//!
//! Every process it starts goes through [`crate::process`] and dies with the test process.

mod cluster;
mod etcdctl;
mod events;
mod eviction;
mod in_cluster;
mod namespace;
mod node;
mod operator;
mod pods;
mod prometheus;

pub use cluster::*;
pub use etcdctl::*;
pub use events::*;
pub use eviction::*;
pub use in_cluster::*;
pub use namespace::*;
pub use node::*;
pub use operator::*;
pub use pods::*;
pub use prometheus::*;

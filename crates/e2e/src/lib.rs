//! The end-to-end test library: helpers for the tests (`tests/`) and the bench
//! (`src/bin/bench`) against the local cluster started by `hack/cluster.sh up`.
//!
//! Everything goes through `kubectl` (the build of the running local cluster's version when
//! present, `$KUBECTL` to choose another) with the
//! kubeconfig in `$KUBECONFIG` (default: the cluster's admin kubeconfig). Nothing here skips a
//! test when the cluster is missing: the first kubectl call fails with its error instead.
//! Waiting is always polling of a condition against a deadline.
//!
//! - [`kubectl`]: `Kubectl`, running commands, `wait_until`;
//! - [`harness`]: namespaces, the operator under test, EtcdCluster/pod/Event helpers;
//! - [`manifests`]: YAML the tests and the bench apply;
//! - [`nodes`]: the local cluster's nodes and their faults (lose, restore, partition, latency, fill);
//! - [`process`]: child processes that die with the test process;
//! - [`objstore`]: real S3 (moto) and Azure Blob (Azurite) servers for backups.
//!
//! The commonly used items are re-exported here (`e2e::TestNamespace`, `e2e::wait_until`, ...).

pub mod api_get;
pub mod harness;
pub mod kubectl;
pub mod manifests;
pub mod nodes;
pub mod objstore;
pub mod process;

pub use harness::{TestNamespace, condition_true, host_etcdctl};
pub use kubectl::{DEFAULT_KUBECONFIG, K8S_VERSION_FILE, Kubectl, default_kubectl, run, unique_name, wait_until};
pub use manifests::{cluster_ip_service, etcd_pod, headless_service, one_shot_pod};

/// The etcd images `hack/images.sh` loads into the cluster.
pub const ETCD_IMAGE_3_5_1: &str = "quay.io/coreos/etcd:v3.5.1";
pub const CLUSTER_DOMAIN: &str = "cluster.local";

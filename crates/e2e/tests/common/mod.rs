//! What the e2e tests share: the library's harness (`e2e::harness`, also used by the bench),
//! re-exported so that a test file says `use common::*`, and the test-only continuous writer.

#![allow(dead_code, unused_imports)]

pub mod backups;
pub mod tls;
pub mod writer;

pub use e2e::harness::*;
pub use e2e::manifests::cluster_manifest;

//! Runtime plumbing of the operator process: the HTTP server, leader election, Prometheus
//! series and who may read them, Events, panic isolation, logging.

pub mod events;
pub mod http;
pub mod leader_election;
pub mod metrics;
pub mod metrics_auth;
pub mod panic_guard;
pub mod telemetry;

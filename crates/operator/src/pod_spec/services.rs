//! The peer (headless) and client Services of a cluster.

use etcd_operator_api::EtcdCluster;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{cluster_name, member_labels, meta, selector_labels, serving_labels};
use crate::naming::{self, CLIENT_PORT, PEER_PORT};

/// The headless Service that gives each member its stable DNS name. Not-ready addresses are
/// published because a member must resolve its peers before any of them is ready.
pub fn peer_service(c: &EtcdCluster) -> Service {
    let name = cluster_name(c);
    Service {
        metadata: meta(c, &name, selector_labels(&name)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(member_labels(c)),
            ports: Some(vec![port("client", CLIENT_PORT), port("peer", PEER_PORT)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The client Service: ready members only (learners are not ready: they refuse most requests).
pub fn client_service(c: &EtcdCluster) -> Service {
    let name = cluster_name(c);
    Service {
        metadata: meta(c, &naming::client_service(&name), selector_labels(&name)),
        spec: Some(ServiceSpec {
            // Members drained before they leave are out of it before they stop answering.
            selector: Some(serving_labels(c)),
            ports: Some(vec![port("client", CLIENT_PORT)]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn port(name: &str, p: i32) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: p,
        target_port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

//! Where member pods are scheduled: without an affinity of the user's, spread over nodes and
//! zones where the scheduler can; CoreOS' `antiAffinity: true` as at most one member per node.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm, PodAntiAffinity, TopologySpreadConstraint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::naming::CLUSTER_LABEL;
use crate::validation::Desired;

/// The affinity and topology spread constraints of a member pod of cluster `name`.
pub(super) fn of(d: &Desired, name: &str) -> (Option<Affinity>, Option<Vec<TopologySpreadConstraint>>) {
    let mut affinity = d.pod.affinity.clone();
    let cluster_selector = LabelSelector {
        match_labels: Some(BTreeMap::from([(CLUSTER_LABEL.to_string(), name.to_string())])),
        ..Default::default()
    };
    // Without an affinity of the user's: spread members over nodes and zones where the
    // scheduler can (preferred, never blocking: a one-node cluster still schedules).
    let spread = (affinity.is_none() && !d.pod.anti_affinity).then(|| {
        affinity = Some(k8s_openapi::api::core::v1::Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    k8s_openapi::api::core::v1::WeightedPodAffinityTerm {
                        weight: 100,
                        pod_affinity_term: PodAffinityTerm {
                            label_selector: Some(cluster_selector.clone()),
                            topology_key: "kubernetes.io/hostname".into(),
                            ..Default::default()
                        },
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        });
        vec![k8s_openapi::api::core::v1::TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            label_selector: Some(cluster_selector.clone()),
            ..Default::default()
        }]
    });
    if d.pod.anti_affinity && affinity.is_none() {
        // CoreOS' deprecated `antiAffinity: true`: at most one member of this cluster per node.
        affinity = Some(k8s_openapi::api::core::v1::Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(CLUSTER_LABEL.to_string(), name.to_string())])),
                        ..Default::default()
                    }),
                    topology_key: "kubernetes.io/hostname".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    (affinity, spread)
}

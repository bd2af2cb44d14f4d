//! Clusters made by the CoreOS etcd-operator, which this operator adopts in place
//! (`docs/src/migrating-from-coreos.md`). Its pods, Services and etcd members already fit
//! this operator's model: the same labels (`app=etcd`, `etcd_cluster`), `etcd.version`
//! annotation, owner reference, Service names and peer URLs `http://<pod>.<cluster>.<ns>.svc:2380`;
//! the operator labels the pods and takes its Services over without restarting anything.
//!
//! What CoreOS did not leave is this operator's durable proof that a cluster formed (the
//! `cluster-id` annotation, `status.clusterId`). Without it, a CoreOS cluster whose pods are all
//! gone would look like a new EtcdCluster and be bootstrapped empty. The status CoreOS wrote says
//! the cluster ran; [`status_shows_it_ran`] reads it, so such a cluster is treated as formed: it
//! is never bootstrapped again (`DataLost` instead), and a spec that only the stricter rules of
//! this version refuse keeps healing under the rules of its time (`validation::validate_legacy`).

use etcd_operator_api::EtcdClusterStatus;

/// The status says the cluster formed and served at some point: a reported version, a ready
/// member, or the `Running` phase. CoreOS wrote these only once its seed member ran; this
/// operator only once etcd answered (when it also records the cluster ID).
pub fn status_shows_it_ran(s: &EtcdClusterStatus) -> bool {
    !s.current_version.is_empty() || !s.members.ready.is_empty() || s.phase == "Running"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coreos_status_shows_a_cluster_that_ran() {
        // What CoreOS wrote for a running cluster (its JSON, as stored in the object).
        let coreos: EtcdClusterStatus = serde_json::from_str(
            r#"{"phase":"Running","size":3,"serviceName":"ex-client","clientPort":2379,
                "members":{"ready":["ex-4kd9qnfq2b","ex-l7mbzxk5w2","ex-tq5wn88dfc"]},
                "currentVersion":"3.5.1","targetVersion":"",
                "conditions":[{"type":"Available","status":"True","reason":"Cluster available",
                               "lastUpdateTime":"2020-03-01T10:00:00Z","lastTransitionTime":"2020-03-01T10:00:00Z"}]}"#,
        )
        .unwrap();
        assert!(status_shows_it_ran(&coreos));
        // Each piece of evidence alone (a status CoreOS wrote mid-failure still has one).
        let only = |f: fn(&mut EtcdClusterStatus)| {
            let mut s = EtcdClusterStatus::default();
            f(&mut s);
            status_shows_it_ran(&s)
        };
        assert!(only(|s| s.current_version = "3.5.1".into()));
        assert!(only(|s| s.members.ready = vec!["ex-a".into()]));
        assert!(only(|s| s.phase = "Running".into()));
    }

    #[test]
    fn a_new_or_never_formed_cluster_shows_nothing() {
        assert!(!status_shows_it_ran(&EtcdClusterStatus::default()));
        // CoreOS while creating the seed member; this operator during a bootstrap.
        let creating = EtcdClusterStatus {
            phase: "Creating".into(),
            size: 3,
            members: etcd_operator_api::cluster::MembersStatus {
                unready: vec!["ex-a".into(), "ex-b".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(!status_shows_it_ran(&creating));
    }
}

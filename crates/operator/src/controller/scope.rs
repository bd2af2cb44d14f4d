//! Which EtcdClusters this operator instance manages (namespaced or cluster-wide, CoreOS'
//! `scope` annotation) and the API handles for that scope. Pure but for building `Api`s.

use etcd_operator_api::{SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE};
use kube::api::Api;
use kube::{Client, Resource, ResourceExt};

/// Which EtcdClusters this operator instance manages.
#[derive(Clone, Debug)]
pub struct WatchScope {
    /// `Some(ns)`: only that namespace. `None`: every namespace (`-cluster-wide`).
    pub namespace: Option<String>,
}

impl WatchScope {
    /// CoreOS semantics (`Controller.managed`): a cluster-wide operator manages only objects
    /// annotated `etcd.database.coreos.com/scope: clusterwide`; a namespaced one only objects
    /// without that annotation, whatever its value. An object annotated with another value is
    /// managed by neither.
    pub fn manages<K: Resource>(&self, obj: &K) -> bool {
        match (obj.annotations().get(SCOPE_ANNOTATION), &self.namespace) {
            (None, Some(_)) => true,
            (Some(v), None) => v == SCOPE_CLUSTERWIDE,
            _ => false,
        }
    }

    pub(crate) fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        match &self.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::EtcdCluster;
    use etcd_operator_api::EtcdClusterSpec;

    fn cluster(annotated: bool) -> EtcdCluster {
        cluster_with_scope(annotated.then_some(SCOPE_CLUSTERWIDE))
    }

    fn cluster_with_scope(scope: Option<&str>) -> EtcdCluster {
        let mut c = EtcdCluster::new("a", EtcdClusterSpec::default());
        if let Some(v) = scope {
            c.annotations_mut().insert(SCOPE_ANNOTATION.into(), v.into());
        }
        c
    }

    #[test]
    fn namespaced_operator_skips_clusterwide_objects() {
        let s = WatchScope { namespace: Some("ns".into()) };
        assert!(s.manages(&cluster(false)));
        assert!(!s.manages(&cluster(true)));
    }

    #[test]
    fn clusterwide_operator_takes_only_annotated_objects() {
        let s = WatchScope { namespace: None };
        assert!(!s.manages(&cluster(false)));
        assert!(s.manages(&cluster(true)));
    }

    /// As CoreOS: the annotation with any other value (a typo, an empty string) takes the object
    /// away from the namespaced operator without giving it to a cluster-wide one.
    #[test]
    fn a_scope_annotation_with_another_value_is_managed_by_neither() {
        for v in ["", "namespaced", "ClusterWide"] {
            let c = cluster_with_scope(Some(v));
            assert!(!WatchScope { namespace: Some("ns".into()) }.manages(&c), "{v:?}");
            assert!(!WatchScope { namespace: None }.manages(&c), "{v:?}");
        }
    }
}

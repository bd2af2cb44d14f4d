//! Wiring of the EtcdCluster controller: watches, the reconcile entry point, error policy.

use std::sync::Arc;
use std::time::Duration;

use etcd_operator_api::{EtcdCluster, SCOPE_ANNOTATION, SCOPE_CLUSTERWIDE};
use futures::StreamExt;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

/// Which EtcdClusters this operator instance manages.
#[derive(Clone, Debug)]
pub struct Scope {
    /// `Some(ns)`: only that namespace. `None`: every namespace (`-cluster-wide`).
    pub namespace: Option<String>,
}

impl Scope {
    /// CoreOS semantics: a cluster-wide operator manages only objects annotated
    /// `etcd.database.coreos.com/scope: clusterwide`; a namespaced one manages the others.
    pub fn manages(&self, obj: &EtcdCluster) -> bool {
        let annotated =
            obj.annotations().get(SCOPE_ANNOTATION).map(String::as_str) == Some(SCOPE_CLUSTERWIDE);
        annotated == self.namespace.is_none()
    }
}

/// Shared state of reconciles.
pub struct Context {
    pub client: Client,
    pub scope: Scope,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

async fn reconcile(obj: Arc<EtcdCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.scope.manages(&obj) {
        return Ok(Action::await_change());
    }
    tracing::info!(
        cluster = %format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()),
        generation = obj.metadata.generation.unwrap_or_default(),
        size = obj.spec.size,
        version = %obj.spec.version,
        "observed EtcdCluster"
    );
    Ok(Action::await_change())
}

fn error_policy(_obj: Arc<EtcdCluster>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// Run the controller until `shutdown` resolves.
pub async fn run(
    client: Client,
    scope: Scope,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let clusters: Api<EtcdCluster> = match &scope.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(Context { client, scope });
    Controller::new(clusters, watcher::Config::default())
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use etcd_operator_api::EtcdClusterSpec;

    fn cluster(annotated: bool) -> EtcdCluster {
        let mut c = EtcdCluster::new("a", EtcdClusterSpec::default());
        if annotated {
            c.annotations_mut()
                .insert(SCOPE_ANNOTATION.into(), SCOPE_CLUSTERWIDE.into());
        }
        c
    }

    #[test]
    fn namespaced_operator_skips_clusterwide_objects() {
        let s = Scope {
            namespace: Some("ns".into()),
        };
        assert!(s.manages(&cluster(false)));
        assert!(!s.manages(&cluster(true)));
    }

    #[test]
    fn clusterwide_operator_takes_only_annotated_objects() {
        let s = Scope { namespace: None };
        assert!(!s.manages(&cluster(false)));
        assert!(s.manages(&cluster(true)));
    }
}

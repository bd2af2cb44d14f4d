//! The client Service's endpoints, from the EndpointSlice watch: which member pods a client
//! connecting through the Service may still reach, and since when that is so. A drained member
//! leaves once its pod is gone from them and every node's proxy has had time to follow
//! (`planner::drained_first`).
//!
//! A slice carries no time of its last change finer than a second, so the watch keeps its own:
//! [`SliceClock`] notes when an event about a Service's slices arrived. After an operator restart
//! the first list counts as a change, which only makes a drain wait longer.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;

use crate::observed::ClientEndpoints;

/// The label the EndpointSlice controller puts on each slice: the Service it belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// When the watch last delivered an event about a Service's slices, by (namespace, Service), and
/// whether it ever listed them all. Until it has (the watch refused by an RBAC made before the
/// operator needed it, say), endpoints are not known: drains last the fixed time, and nothing
/// else waits for this watch.
#[derive(Clone, Default)]
pub struct SliceClock {
    changed: Arc<Mutex<HashMap<(String, String), Instant>>>,
    listed: Arc<AtomicBool>,
    warned: Arc<AtomicBool>,
}

impl SliceClock {
    /// Note a watch event (a slice added, changed or deleted, or listed at start).
    pub fn note(&self, event: &watcher::Event<EndpointSlice>) {
        let slice = match event {
            watcher::Event::Apply(s) | watcher::Event::Delete(s) | watcher::Event::InitApply(s) => s,
            watcher::Event::InitDone => return self.listed.store(true, Ordering::Release),
            watcher::Event::Init => return,
        };
        let Some(service) = slice.labels().get(SERVICE_NAME_LABEL) else { return };
        let key = (slice.namespace().unwrap_or_default(), service.clone());
        self.changed.lock().unwrap_or_else(|e| e.into_inner()).insert(key, Instant::now());
    }

    /// Say once that the watch fails (it retries with a backoff meanwhile).
    pub fn failed(&self, error: &watcher::Error) {
        if !self.warned.swap(true, Ordering::AcqRel) {
            tracing::warn!(%error, "the EndpointSlice watch fails (does the operator's role allow list and watch on discovery.k8s.io endpointslices?): drains last a fixed time until it works");
        }
    }

    fn since(&self, namespace: &str, service: &str) -> Option<u64> {
        let map = self.changed.lock().unwrap_or_else(|e| e.into_inner());
        let at = map.get(&(namespace.to_string(), service.to_string()))?;
        Some(u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX))
    }
}

/// Whether the server serves `discovery.k8s.io/v1` EndpointSlices (Kubernetes 1.21 and later),
/// found through discovery.
pub async fn served(client: &kube::Client) -> bool {
    match client.list_api_group_resources("discovery.k8s.io/v1").await {
        Ok(list) => list.resources.iter().any(|r| r.name == "endpointslices"),
        Err(e) => {
            tracing::debug!(error = %e, "discovery.k8s.io/v1 not served");
            false
        }
    }
}

/// The pods `service`'s slices list, from the watch cache; `None` before the watch listed them
/// all, and while no slice of it is there.
pub fn read(
    store: &Store<EndpointSlice>,
    clock: &SliceClock,
    namespace: &str,
    service: &str,
) -> Option<ClientEndpoints> {
    if !clock.listed.load(Ordering::Acquire) {
        return None;
    }
    let slices: Vec<_> = store
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(namespace)
                && s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(service)
        })
        .collect();
    if slices.is_empty() {
        return None;
    }
    Some(ClientEndpoints {
        listed: listed(slices.iter().map(|s| s.as_ref())),
        // A slice in the cache without a noted event: as if it changed just now.
        since_change_ms: clock.since(namespace, service).unwrap_or(0),
    })
}

/// Pod names the slices list, whatever their conditions say: kube-proxy may still route to an
/// endpoint that is not ready (when no endpoint is) or terminating.
fn listed<'a>(slices: impl Iterator<Item = &'a EndpointSlice>) -> BTreeSet<String> {
    slices
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.target_ref.as_ref())
        .filter(|r| r.kind.as_deref() == Some("Pod"))
        .filter_map(|r| r.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use kube::runtime::reflector;

    fn slice(name: &str, ns: &str, service: &str, pods: &[(&str, bool)]) -> EndpointSlice {
        EndpointSlice {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), service.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: pods
                .iter()
                .map(|(p, ready)| Endpoint {
                    addresses: vec!["10.0.0.1".into()],
                    conditions: Some(EndpointConditions { ready: Some(*ready), ..Default::default() }),
                    target_ref: Some(ObjectReference {
                        kind: Some("Pod".into()),
                        name: Some(p.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            ports: None,
        }
    }

    fn store_of(slices: Vec<EndpointSlice>, clock: &SliceClock) -> Store<EndpointSlice> {
        let mut w = reflector::store::Writer::<EndpointSlice>::default();
        for s in slices {
            let ev = watcher::Event::Apply(s);
            clock.note(&ev);
            w.apply_watcher_event(&ev);
        }
        clock.note(&watcher::Event::InitDone);
        w.as_reader()
    }

    #[test]
    fn lists_every_pod_of_the_service_ready_or_not_and_nothing_of_other_services() {
        let clock = SliceClock::default();
        let store = store_of(
            vec![
                slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", false)]),
                slice("ex-client-b", "ns", "ex-client", &[("ex-3", true)]),
                slice("ex-x", "ns", "ex", &[("ex-4", true)]),
                slice("ex-client-c", "other", "ex-client", &[("ex-5", true)]),
            ],
            &clock,
        );
        let ep = read(&store, &clock, "ns", "ex-client").expect("seen");
        assert_eq!(ep.listed, ["ex-1", "ex-2", "ex-3"].map(String::from).into());
        assert!(ep.since_change_ms < 1000, "{ep:?}");
    }

    #[test]
    fn nothing_is_known_before_the_watch_listed_every_slice() {
        let clock = SliceClock::default();
        let mut w = reflector::store::Writer::<EndpointSlice>::default();
        let store = w.as_reader();
        let listing = [
            watcher::Event::Init,
            watcher::Event::InitApply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)])),
        ];
        for ev in &listing {
            clock.note(ev);
            w.apply_watcher_event(ev);
        }
        assert_eq!(read(&store, &clock, "ns", "ex-client"), None);
        clock.note(&watcher::Event::InitDone);
        w.apply_watcher_event(&watcher::Event::InitDone);
        assert!(read(&store, &clock, "ns", "ex-client").is_some());
    }

    #[test]
    fn no_slice_seen_is_not_known_not_empty() {
        let clock = SliceClock::default();
        let store = store_of(vec![slice("ex-x", "ns", "ex", &[("ex-1", true)])], &clock);
        assert_eq!(read(&store, &clock, "ns", "ex-client"), None);
    }

    #[test]
    fn the_clock_counts_from_the_last_event_of_the_service_deletes_included() {
        let clock = SliceClock::default();
        let a = slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)]);
        clock.note(&watcher::Event::Apply(a.clone()));
        std::thread::sleep(std::time::Duration::from_millis(120));
        let first = clock.since("ns", "ex-client").unwrap();
        assert!(first >= 100, "{first}");
        clock.note(&watcher::Event::Delete(a));
        assert!(clock.since("ns", "ex-client").unwrap() < first);
        // Another Service's events do not move it.
        clock.note(&watcher::Event::Apply(slice("ex-x", "ns", "ex", &[])));
        assert_eq!(clock.since("ns", "other"), None);
    }
}

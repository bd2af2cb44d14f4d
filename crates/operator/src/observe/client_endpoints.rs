//! The client Service's endpoints, from the EndpointSlice watch: which member pods a client
//! connecting through the Service may still reach, and since when each other pod is no longer
//! listed. A drained member leaves once its pod is gone from them and every node's proxy has had
//! time to follow (`planner::drained_first`).
//!
//! A slice carries no time of its last change finer than a second, so the watch keeps its own:
//! [`SliceClock`] holds what each slice lists and notes when a pod stopped being listed, as the
//! watch's events arrive. After an operator restart (or a relist) a pod not listed counts as
//! unlisted since that list, which only makes a drain wait longer.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::watcher;

use crate::observed::ClientEndpoints;

/// The label the EndpointSlice controller puts on each slice: the Service it belongs to.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// (namespace, Service name).
type ServiceKey = (String, String);

/// How long a pod no longer listed is remembered as such. Far beyond any drain
/// (`planner::DRAIN_STALE_SECS`); forgotten, it counts from the watch's last full list, which
/// is either older than the drain (no evidence: the drain waits) or a fresh list after it.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// One Service's slices as the watch shows them.
#[derive(Default)]
struct Slices {
    /// Pods each slice lists, by slice name.
    by_slice: HashMap<String, BTreeSet<String>>,
    /// When each pod listed earlier stopped being listed (dropped again once listed).
    dropped: HashMap<String, Instant>,
}

impl Slices {
    fn listed(&self) -> BTreeSet<String> {
        self.by_slice.values().flatten().cloned().collect()
    }

    /// Replace what the slices list (one slice, or all of them on a relist), noting the pods
    /// that stopped being listed now.
    fn update(&mut self, change: impl FnOnce(&mut HashMap<String, BTreeSet<String>>), now: Instant) {
        let before = self.listed();
        change(&mut self.by_slice);
        let after = self.listed();
        for pod in before.difference(&after) {
            self.dropped.insert(pod.clone(), now);
        }
        for pod in &after {
            self.dropped.remove(pod);
        }
        // Pods of members long gone (a new name per emptyDir incarnation) are not kept forever.
        self.dropped.retain(|_, at| now.saturating_duration_since(*at) < FORGET_AFTER);
    }
}

#[derive(Default)]
struct State {
    services: HashMap<ServiceKey, Slices>,
    /// When the watch last finished a full list; `None` before, and after it failed.
    listed_at: Option<Instant>,
    /// A list in progress (between `Init` and `InitDone`).
    relist: Option<HashMap<ServiceKey, HashMap<String, BTreeSet<String>>>>,
}

/// What the EndpointSlice watch shows, kept by its own events. Until it has listed every slice
/// (or after it failed: the watch refused, say), endpoints are not known and drains last the
/// fixed time.
#[derive(Clone, Default)]
pub struct SliceClock {
    state: Arc<Mutex<State>>,
    warned: Arc<std::sync::atomic::AtomicBool>,
}

fn key_of(slice: &EndpointSlice) -> Option<ServiceKey> {
    let service = slice.labels().get(SERVICE_NAME_LABEL)?;
    Some((slice.namespace().unwrap_or_default(), service.clone()))
}

impl SliceClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Note a watch event (a slice added, changed or deleted; a list begun, a slice listed, the
    /// list done).
    pub fn note(&self, event: &watcher::Event<EndpointSlice>) {
        let now = Instant::now();
        let mut st = self.lock();
        match event {
            watcher::Event::Init => st.relist = Some(HashMap::new()),
            watcher::Event::InitApply(s) => {
                if let (Some(key), Some(relist)) = (key_of(s), st.relist.as_mut()) {
                    relist.entry(key).or_default().insert(s.name_any(), pods_of(s));
                }
            }
            watcher::Event::InitDone => {
                let mut listed = st.relist.take().unwrap_or_default();
                let keys: BTreeSet<ServiceKey> = st.services.keys().chain(listed.keys()).cloned().collect();
                for key in keys {
                    let by_slice = listed.remove(&key).unwrap_or_default();
                    st.services.entry(key).or_default().update(|s| *s = by_slice, now);
                }
                // Services without a slice any more: as for a deleted last slice.
                st.services.retain(|_, s| !s.by_slice.is_empty());
                st.listed_at = Some(now);
            }
            watcher::Event::Apply(s) => {
                if let Some(key) = key_of(s) {
                    let (name, pods) = (s.name_any(), pods_of(s));
                    st.services.entry(key).or_default().update(|b| drop(b.insert(name, pods)), now);
                }
            }
            watcher::Event::Delete(s) => {
                if let Some(key) = key_of(s) {
                    let name = s.name_any();
                    st.services.entry(key.clone()).or_default().update(|b| drop(b.remove(&name)), now);
                    // A Service's last slice deleted: mostly the Service (its cluster) is gone.
                    // Should it come back, its pods count from the watch's last full list.
                    if st.services.get(&key).is_some_and(|s| s.by_slice.is_empty()) {
                        st.services.remove(&key);
                    }
                }
            }
        }
    }

    /// The watch failed (it retries with a backoff): endpoints are not known until it lists
    /// again. Said once.
    pub fn failed(&self, error: &watcher::Error) {
        self.lock().listed_at = None;
        if !self.warned.swap(true, std::sync::atomic::Ordering::AcqRel) {
            tracing::warn!(%error, "the EndpointSlice watch fails: drains last a fixed time until it lists again");
        }
    }

    /// What `service`'s slices list now; `None` until the watch has listed every slice.
    pub fn read(&self, namespace: &str, service: &str) -> Option<ClientEndpoints> {
        let st = self.lock();
        let listed_at = st.listed_at?;
        let ms = |at: Instant| u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX);
        let slices = st.services.get(&(namespace.to_string(), service.to_string()));
        Some(ClientEndpoints {
            listed: slices.map(Slices::listed).unwrap_or_default(),
            unlisted_ms: slices
                .map(|s| s.dropped.iter().map(|(pod, at)| (pod.clone(), ms(*at))).collect())
                .unwrap_or_default(),
            watch_ms: ms(listed_at),
        })
    }
}

/// Whether the server serves `discovery.k8s.io/v1` EndpointSlices (Kubernetes 1.21 and later),
/// found through discovery. Only a "not found" is an answer: another error (the server busy at
/// the operator's start) counts as served, and the watch's own retries find out.
pub async fn served(client: &kube::Client) -> bool {
    match client.list_api_group_resources("discovery.k8s.io/v1").await {
        Ok(list) => list.resources.iter().any(|r| r.name == "endpointslices"),
        Err(kube::Error::Api(e)) if e.code == 404 => false,
        Err(e) => {
            tracing::warn!(error = %e, "discovery of discovery.k8s.io/v1 failed; watching EndpointSlices anyway");
            true
        }
    }
}

/// Pod names a slice lists, whatever their conditions say: kube-proxy may still route to an
/// endpoint that is not ready (when no endpoint is) or terminating.
fn pods_of(slice: &EndpointSlice) -> BTreeSet<String> {
    slice
        .endpoints
        .iter()
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

    fn listed(slices: Vec<EndpointSlice>) -> SliceClock {
        let clock = SliceClock::default();
        clock.note(&watcher::Event::Init);
        for s in slices {
            clock.note(&watcher::Event::InitApply(s));
        }
        clock.note(&watcher::Event::InitDone);
        clock
    }

    fn names(pods: &[&str]) -> BTreeSet<String> {
        pods.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn lists_every_pod_of_the_service_ready_or_not_and_nothing_of_other_services() {
        let clock = listed(vec![
            slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", false)]),
            slice("ex-client-b", "ns", "ex-client", &[("ex-3", true)]),
            slice("ex-x", "ns", "ex", &[("ex-4", true)]),
            slice("ex-client-c", "other", "ex-client", &[("ex-5", true)]),
        ]);
        let ep = clock.read("ns", "ex-client").expect("listed");
        assert_eq!(ep.listed, names(&["ex-1", "ex-2", "ex-3"]));
        assert!(ep.unlisted_ms.is_empty() && ep.watch_ms < 1000, "{ep:?}");
    }

    #[test]
    fn nothing_is_known_before_the_watch_listed_every_slice_nor_after_it_failed() {
        let clock = SliceClock::default();
        clock.note(&watcher::Event::Init);
        clock.note(&watcher::Event::InitApply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)])));
        assert_eq!(clock.read("ns", "ex-client"), None);
        clock.note(&watcher::Event::InitDone);
        assert_eq!(clock.read("ns", "ex-client").unwrap().listed, names(&["ex-1"]));
        clock.failed(&watcher::Error::NoResourceVersion);
        assert_eq!(clock.read("ns", "ex-client"), None);
    }

    #[test]
    fn a_service_without_slices_once_listed_lists_nothing() {
        let clock = listed(vec![]);
        let ep = clock.read("ns", "ex-client").expect("listed");
        assert!(ep.listed.is_empty() && ep.unlisted_ms.is_empty(), "{ep:?}");
    }

    #[test]
    fn a_pod_dropped_from_a_slice_is_unlisted_from_that_event_and_listed_again_after() {
        let clock = listed(vec![slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", true)])]);
        std::thread::sleep(Duration::from_millis(120));
        clock.note(&watcher::Event::Apply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)])));
        let ep = clock.read("ns", "ex-client").unwrap();
        assert_eq!(ep.listed, names(&["ex-1"]));
        let dropped = ep.unlisted_ms["ex-2"];
        assert!(dropped < 100 && ep.watch_ms >= 100, "dropped {dropped} ms ago, listed {} ms ago", ep.watch_ms);
        // Another pod's change later does not move when ex-2 left.
        std::thread::sleep(Duration::from_millis(120));
        clock.note(&watcher::Event::Apply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", false)])));
        assert!(clock.read("ns", "ex-client").unwrap().unlisted_ms["ex-2"] >= 100);
        // Listed again: no longer unlisted.
        clock.note(&watcher::Event::Apply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", true)])));
        assert!(!clock.read("ns", "ex-client").unwrap().unlisted_ms.contains_key("ex-2"));
    }

    #[test]
    fn a_pod_moved_between_slices_stays_listed_and_a_deleted_slice_drops_its_pods() {
        let clock = listed(vec![
            slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)]),
            slice("ex-client-b", "ns", "ex-client", &[("ex-2", true)]),
        ]);
        clock.note(&watcher::Event::Apply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", true)])));
        clock.note(&watcher::Event::Delete(slice("ex-client-b", "ns", "ex-client", &[("ex-2", true)])));
        let ep = clock.read("ns", "ex-client").unwrap();
        assert_eq!(ep.listed, names(&["ex-1", "ex-2"]));
        assert!(ep.unlisted_ms.is_empty(), "{ep:?}");
        // The last slice deleted (the Service gone): nothing listed, nothing remembered; its
        // pods count from the watch's last full list.
        clock.note(&watcher::Event::Delete(slice("ex-client-a", "ns", "ex-client", &[])));
        let ep = clock.read("ns", "ex-client").unwrap();
        assert!(ep.listed.is_empty() && ep.unlisted_ms.is_empty(), "{ep:?}");
        assert_eq!(ep.unlisted_for("ex-1"), Some(ep.watch_ms));
        assert!(clock.lock().services.is_empty());
    }

    #[test]
    fn pods_long_gone_are_forgotten() {
        let clock = listed(vec![slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", true)])]);
        clock.note(&watcher::Event::Apply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)])));
        let key = ("ns".to_string(), "ex-client".to_string());
        let long_ago = Instant::now().checked_sub(FORGET_AFTER).expect("an uptime longer than FORGET_AFTER");
        clock.lock().services.get_mut(&key).unwrap().dropped.insert("ex-0".into(), long_ago);
        // The next event of the Service forgets ex-0, keeps ex-2.
        clock.note(&watcher::Event::Apply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", false)])));
        let ep = clock.read("ns", "ex-client").unwrap();
        assert_eq!(ep.unlisted_ms.keys().cloned().collect::<BTreeSet<_>>(), names(&["ex-2"]));
    }

    #[test]
    fn a_relist_drops_what_it_no_longer_shows_and_keeps_the_rest() {
        let clock = listed(vec![slice("ex-client-a", "ns", "ex-client", &[("ex-1", true), ("ex-2", true)])]);
        clock.note(&watcher::Event::Init);
        clock.note(&watcher::Event::InitApply(slice("ex-client-a", "ns", "ex-client", &[("ex-1", true)])));
        // While relisting, the last full list still answers.
        assert_eq!(clock.read("ns", "ex-client").unwrap().listed, names(&["ex-1", "ex-2"]));
        clock.note(&watcher::Event::InitDone);
        let ep = clock.read("ns", "ex-client").unwrap();
        assert_eq!(ep.listed, names(&["ex-1"]));
        assert!(ep.unlisted_ms.contains_key("ex-2"));
    }
}

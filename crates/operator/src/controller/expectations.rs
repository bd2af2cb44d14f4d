//! Expectations: the pods this operator just created or deleted, which planning waits to see
//! in the watch cache (a plan made from a cache that lags our own writes would repeat them).
//! In memory, no I/O.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// How long to wait for the watch cache to show a pod this operator created or deleted.
const EXPECTATION_TIMEOUT: Duration = Duration::from_secs(30);

/// Pods this operator created or deleted and has not yet seen so in its cache. Planning waits
/// for them: a plan made from a cache that lags our own writes would repeat them.
#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, Pending>>,
}

/// Pods created and deleted for one cluster, pod annotations written `(pod, key, value)`, and
/// since when.
type Pending = (BTreeSet<String>, BTreeSet<String>, Vec<(String, String, String)>, Instant);

impl Expectations {
    pub(super) fn expect(
        &self,
        key: &str,
        created: &[String],
        deleted: &[String],
        annotated: &[(String, String, String)],
    ) {
        if created.is_empty() && deleted.is_empty() && annotated.is_empty() {
            return;
        }
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).insert(
            key.to_string(),
            (created.iter().cloned().collect(), deleted.iter().cloned().collect(), annotated.to_vec(), Instant::now()),
        );
    }

    /// True when the cache shows every expected create and delete (or they timed out).
    pub(super) fn satisfied(&self, key: &str, pods: &[Arc<Pod>]) -> bool {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((created, deleted, annotated, since)) = pending.get(key) else { return true };
        let present = |n: &String| pods.iter().any(|p| p.name_any() == *n && p.metadata.deletion_timestamp.is_none());
        // An annotation counts once shown, or once its pod is gone (nothing to plan on then).
        let shown = |(pod, k, v): &(String, String, String)| {
            pods.iter().find(|p| p.name_any() == *pod).is_none_or(|p| p.annotations().get(k) == Some(v))
        };
        let done = created.iter().all(present) && !deleted.iter().any(present) && annotated.iter().all(shown);
        if done || since.elapsed() > EXPECTATION_TIMEOUT {
            if !done {
                tracing::warn!(cluster = key, "watch cache did not show our pod changes in time; planning anyway");
            }
            pending.remove(key);
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_hold_planning_until_the_cache_shows_our_writes() {
        let e = Expectations::default();
        e.expect("ns/a", &["a-1".into()], &[], &[]);
        assert!(!e.satisfied("ns/a", &[]));
        let mut p = Pod::default();
        p.metadata.name = Some("a-1".into());
        assert!(e.satisfied("ns/a", &[Arc::new(p)]));
        assert!(e.satisfied("ns/a", &[]), "cleared once satisfied");
    }

    #[test]
    fn a_pod_annotation_written_holds_planning_until_the_cache_shows_it() {
        let e = Expectations::default();
        let at = ("a-1".to_string(), "k".to_string(), "t2".to_string());
        e.expect("ns/a", &[], &[], std::slice::from_ref(&at));
        let mut p = Pod::default();
        p.metadata.name = Some("a-1".into());
        p.metadata.annotations = Some([("k".to_string(), "t1".to_string())].into());
        assert!(!e.satisfied("ns/a", &[Arc::new(p.clone())]), "an older value is not ours");
        p.metadata.annotations = Some([("k".to_string(), "t2".to_string())].into());
        assert!(e.satisfied("ns/a", &[Arc::new(p)]));
    }
}

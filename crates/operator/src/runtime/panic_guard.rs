//! One object must never take the operator down. Each reconcile runs behind [`guard`]: a panic
//! inside it (a bug the validation did not catch) is caught, reported on that object alone (a
//! Warning Event `ReconcilePanicked`, the error metric, a log line) and retried later, while every
//! other object keeps being reconciled.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};

use crate::runtime::events::Recorder;
use crate::runtime::metrics::Metrics;

/// How long a reconcile that panicked waits before the next try.
pub const RETRY_AFTER_PANIC: Duration = Duration::from_secs(60);

/// Run `fut`; `Err` carries the panic's message.
pub async fn catch<T>(fut: impl Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(fut).catch_unwind().await.map_err(|p| {
        p.downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

/// Run one reconcile of `obj` (of `kind`, `ar`) behind `catch`; a panic is reported and retried.
pub async fn guard<E>(
    kind: &'static str,
    ar: &ApiResource,
    obj: &DynamicObject,
    recorder: &Recorder,
    metrics: &Metrics,
    fut: impl Future<Output = Result<Action, E>>,
) -> Result<Action, E> {
    let started = Instant::now();
    let fut = async {
        crate::failpoints::reconcile_panic(obj);
        fut.await
    };
    match catch(fut).await {
        Ok(r) => r,
        Err(msg) => {
            let key = format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any());
            tracing::error!(kind, object = %key, panic = %msg, "reconcile panicked; this object is retried later, the others go on");
            metrics.reconciled(kind, started.elapsed(), true);
            let note = format!(
                "the operator hit a bug while handling this object and skipped it (retrying in {}s): {msg}",
                RETRY_AFTER_PANIC.as_secs()
            );
            let ev = Event {
                type_: EventType::Warning,
                reason: "ReconcilePanicked".into(),
                note: Some(note),
                action: "Reconcile".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &obj.object_ref(ar)).await {
                tracing::warn!(error = %e, "could not publish Event");
            }
            Ok(Action::requeue(RETRY_AFTER_PANIC))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_becomes_its_message_and_the_next_call_runs() {
        let r = catch(async { panic!("index out of bounds: the len is 0") }).await;
        assert_eq!(r.unwrap_err(), "index out of bounds: the len is 0");
        let r: Result<i32, String> = catch(async { 7 }).await;
        assert_eq!(r.unwrap(), 7, "nothing is left broken after a caught panic");
        let who = String::from("ex");
        let r = catch(async move { panic!("bad object {who}") }).await;
        assert_eq!(r.unwrap_err(), "bad object ex");
    }
}

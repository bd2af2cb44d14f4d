//! The operator's HTTP endpoints: `/healthz` (the process serves), `/readyz` (this replica leads
//! and its watch caches are synced), `/metrics` (Prometheus text format).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

async fn healthz() -> &'static str {
    "ok\n"
}

#[derive(Clone)]
struct AppState {
    ready: Arc<AtomicBool>,
    metrics: Arc<crate::metrics::Metrics>,
}

async fn metrics(State(s): State<AppState>) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.metrics.encode())
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watch caches not synced yet\n")
    }
}

pub fn router(ready: Arc<AtomicBool>, metrics: Arc<crate::metrics::Metrics>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .with_state(AppState { ready, metrics })
}

/// Serve until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    metrics: Arc<crate::metrics::Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for /healthz, /readyz, /metrics: {e}"))?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics");
    axum::serve(listener, router(ready, metrics)).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

//! The operator's HTTP endpoints: `/healthz` (the process serves), `/readyz` (watch caches are
//! synced, so reconciles can run).

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

async fn readyz(State(ready): State<Arc<AtomicBool>>) -> (StatusCode, &'static str) {
    if ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watch caches not synced yet\n")
    }
}

pub fn router(ready: Arc<AtomicBool>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(ready)
}

/// Serve until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for /healthz, /readyz: {e}"))?;
    tracing::info!(%addr, "serving /healthz and /readyz");
    axum::serve(listener, router(ready)).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

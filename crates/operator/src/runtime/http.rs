//! The operator's HTTP endpoints: `/healthz` (the process serves), `/readyz` (this replica leads
//! and its watch caches are synced), `/metrics` (Prometheus text format; with
//! `--metrics-auth=kubernetes` only for a token allowed to read it, `metrics_auth`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

async fn healthz() -> &'static str {
    "ok\n"
}

#[derive(Clone)]
struct AppState {
    ready: Arc<AtomicBool>,
    metrics: Arc<crate::runtime::metrics::Metrics>,
    /// `--metrics-auth=kubernetes`: who may read `/metrics`.
    auth: Option<Arc<crate::runtime::metrics_auth::Reviewer>>,
}

async fn metrics(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Some(auth) = &s.auth {
        let header = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if let Err((code, body)) = auth.check(header).await {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::FORBIDDEN);
            let challenge = [(axum::http::header::WWW_AUTHENTICATE, "Bearer")];
            return if code == StatusCode::UNAUTHORIZED {
                (code, challenge, body).into_response()
            } else {
                (code, body).into_response()
            };
        }
    }
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], s.metrics.encode())
        .into_response()
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::Acquire) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watch caches not synced yet\n")
    }
}

pub fn router(
    ready: Arc<AtomicBool>,
    metrics: Arc<crate::runtime::metrics::Metrics>,
    auth: Option<Arc<crate::runtime::metrics_auth::Reviewer>>,
) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(self::metrics))
        .with_state(AppState { ready, metrics, auth })
}

/// Serve until `shutdown` resolves.
pub async fn serve(
    addr: SocketAddr,
    ready: Arc<AtomicBool>,
    metrics: Arc<crate::runtime::metrics::Metrics>,
    auth: Option<Arc<crate::runtime::metrics_auth::Reviewer>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} for /healthz, /readyz, /metrics: {e}"))?;
    let who = if auth.is_some() { "a token allowed to get /metrics" } else { "anyone" };
    // The bound address: with port 0 (tests) the one the system picked.
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "serving /healthz, /readyz and /metrics (metrics for {who})");
    axum::serve(listener, router(ready, metrics, auth)).with_graceful_shutdown(shutdown).await?;
    Ok(())
}

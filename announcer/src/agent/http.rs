//! `/healthz`, `/readyz`, `/state` and `/metrics`: what the kubelet probes, what
//! `announcer status` and the tests read from a running agent, and what Prometheus scrapes.
//!
//! Why `/state` is JSON over HTTP rather than only logs: tests and operators need to ask "which
//! VIPs do you announce, whom do you see" at any moment, also with `--no-dataplane`, where there
//! are no pinned maps to dump.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Json, Router,
    extract::State,
    http::{StatusCode, header},
    routing::get,
};

use super::{
    metrics::{self, Metrics},
    published::PublishedState,
};

/// The agent loop publishes at least every heartbeat; silence this long means it is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(10);

/// The router (separate from [`serve`] so tests can drive it without a socket).
pub fn router(shared: PublishedState) -> Router {
    router_with_metrics(shared, Arc::new(Metrics::new()))
}

/// The router with `/metrics` served from `metrics`.
pub fn router_with_metrics(shared: PublishedState, metrics: Arc<Metrics>) -> Router {
    let scrape = Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move {
                // Encoding reads the pinned maps: off the async workers.
                let body = tokio::task::spawn_blocking(move || m.encode())
                    .await
                    .unwrap_or_default();
                ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body)
            }),
        )
        .with_state(metrics);
    Router::new()
        .route(
            "/healthz",
            get(|State(s): State<PublishedState>| async move {
                let (_, age) = s.get();
                if age < STUCK_AFTER {
                    (StatusCode::OK, "ok".to_string())
                } else {
                    (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("agent loop stuck for {age:?}"),
                    )
                }
            }),
        )
        .route(
            "/readyz",
            get(|State(s): State<PublishedState>| async move {
                let (st, _) = s.get();
                if st.ready {
                    (StatusCode::OK, "ready")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "warming up")
                }
            }),
        )
        .route(
            crate::state::PATH,
            get(|State(s): State<PublishedState>| async move { Json(s.get().0) }),
        )
        .with_state(shared)
        .merge(scrape)
}

/// Serve on `addr` until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    shared: PublishedState,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz, /readyz, /state and /metrics");
    axum::serve(listener, router_with_metrics(shared, metrics))
        .with_graceful_shutdown(shutdown)
        .await
}

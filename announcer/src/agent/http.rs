//! `/healthz`, `/readyz`, `/state` and `/metrics`: what the kubelet probes, what
//! `announcer status` and the tests read from a running agent, and what Prometheus scrapes.
//!
//! Why `/state` is JSON over HTTP rather than only logs: tests and operators need to ask "which
//! VIPs do you announce, whom do you see" at any moment, also with `--no-dataplane`, where there
//! are no pinned maps to dump.
//!
//! # Who may read what
//!
//! The agent runs with host networking, so `--http-address` (`0.0.0.0:9746` by default) is
//! reachable by every Pod, every host on the segment and, under IPVS kube-proxy, on every VIP
//! (issue 25, finding 8). `/state` tells whoever asks which VIP is which Service, who is on
//! standby and how fresh every peer's heartbeats are: a map for an attacker. So `/state` (and
//! every path but the three below) is answered only to a peer on loopback, that is a process
//! in the node's own network namespace (`announcer status` in the agent's container, `kubectl
//! exec`, `kubectl port-forward`, which connects from the Pod's namespace to `localhost`);
//! anyone else gets 403. `/metrics`, `/healthz` and `/readyz` stay public: the kubelet probes
//! the Pod's IP, which on host networking is the node's address, and Prometheus scrapes from
//! another Pod. They carry counts, not the map.
//!
//! Why one listener that looks at the peer rather than a second one bound to `127.0.0.1`: one
//! port to configure, open and document (a second port on host networking is one more to
//! collide with), the CLI's default address keeps working unchanged, and an operator who binds
//! `--http-address` to a single address does not silently lose `/state`. The check is on the
//! connection's source address, which a remote host cannot make loopback (the kernel drops
//! packets from 127.0.0.0/8 or ::1 arriving on any other interface as martians).

use std::{
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use axum::{
    Json, Router,
    extract::{ConnectInfo, Request, State},
    http::{StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};

use super::{
    metrics::{self, Metrics},
    published::PublishedState,
};

/// The agent loop publishes at least every heartbeat; silence this long means it is stuck.
const STUCK_AFTER: Duration = Duration::from_secs(10);

/// What a peer off the node gets for `/state`.
pub const LOOPBACK_ONLY: &str = "/state is served on loopback only: run `announcer status` on the \
     node (kubectl exec into the agent's Pod), or use kubectl port-forward\n";

/// Whether a connection from `peer` may read `/state`: loopback only (an IPv4-mapped IPv6
/// loopback address included, for a listener on `[::]`).
pub fn may_read_state(peer: IpAddr) -> bool {
    peer.to_canonical().is_loopback()
}

/// Refuses the request unless it came over loopback. A request without a peer address (the
/// router driven without a socket) is refused too: the sensitive side fails closed.
async fn loopback_only(request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    if peer.is_some_and(may_read_state) {
        next.run(request).await
    } else {
        (StatusCode::FORBIDDEN, LOOPBACK_ONLY).into_response()
    }
}

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
    let private = Router::new()
        .route(
            crate::state::PATH,
            get(|State(s): State<PublishedState>| async move { Json(s.get().0) }),
        )
        .with_state(shared.clone())
        .route_layer(middleware::from_fn(loopback_only));
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
        .with_state(shared)
        .merge(scrape)
        .merge(private)
}

/// Serve on `addr` until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    shared: PublishedState,
    metrics: Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /healthz, /readyz and /metrics; /state to loopback only");
    let app = router_with_metrics(shared, metrics);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn only_loopback_peers_may_read_state() {
        for peer in [
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::new(127, 1, 2, 3)),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv4Addr::LOCALHOST.to_ipv6_mapped()),
        ] {
            assert!(may_read_state(peer), "{peer}");
        }
        for peer in [
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 5)),
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 5)),
            IpAddr::V6(Ipv4Addr::new(10, 0, 0, 5).to_ipv6_mapped()),
        ] {
            assert!(!may_read_state(peer), "{peer}");
        }
    }

    /// The listener passes the peer's address to the check: without it every `/state` would
    /// be refused (the check fails closed), also on loopback.
    #[tokio::test]
    async fn state_is_served_over_a_loopback_connection() {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            addr,
            PublishedState::default(),
            Arc::new(Metrics::new()),
            async move {
                let _ = stop_rx.await;
            },
        ));
        let status = |path: &'static str| {
            tokio::task::spawn_blocking(move || {
                for _ in 0..50 {
                    match ureq::get(&format!("http://{addr}{path}")).call() {
                        Ok(r) => return r.status(),
                        Err(ureq::Error::Status(code, _)) => return code,
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
                panic!("nothing listens on {addr}");
            })
        };
        assert_eq!(status("/state").await.unwrap(), 200);
        assert_eq!(status("/metrics").await.unwrap(), 200);
        let _ = stop_tx.send(());
        server.await.unwrap().unwrap();
    }
}

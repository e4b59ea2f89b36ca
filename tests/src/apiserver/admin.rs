//! The `/_admin/` HTTP API: the handle's observability and fault controls for other processes
//! (benchmarks, xtask, the demo) that only have the server's URL.
//!
//! | Method and path | Body | Answer |
//! |---|---|---|
//! | `GET /_admin/counts` | | [`Counts`](super::Counts) |
//! | `POST /_admin/counts/reset` | | `{}` |
//! | `GET /_admin/faults` | | `[Fault]` |
//! | `POST /_admin/faults` | `Fault` or `[Fault]` (added) | `[Fault]` (all active) |
//! | `PUT /_admin/faults` | `Fault` or `[Fault]` (replace) | `[Fault]` |
//! | `DELETE /_admin/faults` | | `[]` |
//! | `POST /_admin/faults/seed` | `{"seed": 7}` | `{}` |
//! | `POST /_admin/drop_watches` | optional `{"client": "t", "resource": "leases"}` | `{"dropped": n}` |
//! | `POST /_admin/compact` | | `{"resourceVersion": "n"}` |
//! | `GET /_admin/watches` | | `[WatchInfo]` |
//! | `GET /_admin/stats` | | `{"resource_version", "objects", "history", "oldest_watchable"}` |
//!
//! Admin requests are neither counted nor subject to faults.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::faults::{Fault, FaultAction};
use super::http::Shared;
use super::status::{ApiError, json_response};

/// End the open watches of clients an outage fault now cuts off: a dead or partitioned server
/// does not keep streaming.
pub(crate) fn drop_cut_off_watches(s: &Shared, faults: &[Fault]) {
    for fault in faults {
        let is_outage = matches!(fault.action, FaultAction::Outage { .. });
        let hits_watch = fault.scope.verb.is_none_or(|v| v == super::Verb::Watch);
        if is_outage && hits_watch {
            s.watches.drop_matching(
                fault.scope.client.as_deref(),
                fault.scope.resource.as_deref(),
            );
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(Fault),
    Many(Vec<Fault>),
}

fn faults_from(body: &Bytes) -> Result<Vec<Fault>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(OneOrMany::One(f)) => Ok(vec![f]),
        Ok(OneOrMany::Many(fs)) => Ok(fs),
        Err(e) => Err(ApiError::bad_request(format!("invalid fault: {e}"))),
    }
}

fn answer(value: &impl serde::Serialize) -> Response {
    json_response(
        StatusCode::OK,
        &serde_json::to_value(value).unwrap_or(Value::Null),
    )
}

fn error(e: ApiError) -> Response {
    axum::response::IntoResponse::into_response(e)
}

async fn counts(State(s): State<Arc<Shared>>) -> Response {
    answer(&s.counts.snapshot())
}

async fn reset_counts(State(s): State<Arc<Shared>>) -> Response {
    s.counts.reset();
    answer(&json!({}))
}

async fn list_faults(State(s): State<Arc<Shared>>) -> Response {
    answer(&s.faults.list())
}

async fn add_faults(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    match faults_from(&body) {
        Ok(faults) => {
            s.faults.add(faults.clone());
            drop_cut_off_watches(&s, &faults);
            answer(&s.faults.list())
        }
        Err(e) => error(e),
    }
}

async fn set_faults(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    match faults_from(&body) {
        Ok(faults) => {
            s.faults.set(faults.clone());
            drop_cut_off_watches(&s, &faults);
            answer(&s.faults.list())
        }
        Err(e) => error(e),
    }
}

async fn clear_faults(State(s): State<Arc<Shared>>) -> Response {
    s.faults.set(Vec::new());
    answer(&s.faults.list())
}

#[derive(Deserialize)]
struct Seed {
    seed: u64,
}

async fn reseed(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    match serde_json::from_slice::<Seed>(&body) {
        Ok(seed) => {
            s.faults.reseed(seed.seed);
            answer(&json!({}))
        }
        Err(e) => error(ApiError::bad_request(format!(
            "expected {{\"seed\": n}}: {e}"
        ))),
    }
}

#[derive(Deserialize, Default)]
struct DropWatches {
    client: Option<String>,
    resource: Option<String>,
}

async fn drop_watches(State(s): State<Arc<Shared>>, body: Bytes) -> Response {
    let which: DropWatches = if body.is_empty() {
        DropWatches::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(w) => w,
            Err(e) => return error(ApiError::bad_request(format!("invalid body: {e}"))),
        }
    };
    let dropped = s
        .watches
        .drop_matching(which.client.as_deref(), which.resource.as_deref());
    answer(&json!({"dropped": dropped}))
}

async fn compact(State(s): State<Arc<Shared>>) -> Response {
    answer(&json!({"resourceVersion": s.store.compact().to_string()}))
}

async fn watches(State(s): State<Arc<Shared>>) -> Response {
    answer(&s.watches.list())
}

async fn stats(State(s): State<Arc<Shared>>) -> Response {
    answer(&s.store.stats())
}

/// The admin routes, to be nested under `/_admin`.
pub(crate) fn router() -> Router<Arc<Shared>> {
    Router::new()
        .route("/counts", get(counts))
        .route("/counts/reset", post(reset_counts))
        .route(
            "/faults",
            get(list_faults)
                .post(add_faults)
                .put(set_faults)
                .delete(clear_faults),
        )
        .route("/faults/seed", post(reseed))
        .route("/drop_watches", post(drop_watches))
        .route("/compact", post(compact))
        .route("/watches", get(watches))
        .route("/stats", get(stats))
}

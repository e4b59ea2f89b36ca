//! Watch streams: newline-delimited JSON `WatchEvent`s over a chunked response, as the
//! watch cache (`k8s.io/apiserver/pkg/storage/cacher`) serves them.
//!
//! Reproduced: replay from a `resourceVersion` out of the bounded history, or a 410 `Expired`
//! `ERROR` event when it is older (HTTP 200, one event, end of stream — which `kube`'s watcher
//! answers with a re-list; an HTTP-level 410 would make it retry the same version forever);
//! synthetic ADDED events for `resourceVersion` "" / "0"; streaming lists (`sendInitialEvents`)
//! ending in a BOOKMARK annotated `k8s.io/initial-events-end`; periodic bookmarks with
//! `allowWatchBookmarks`; `timeoutSeconds`; selectors with the cacher's transitions (an object
//! that stops matching arrives as DELETED, one that starts matching as ADDED). A watcher that
//! falls more than the broadcast capacity behind is disconnected, as the cacher terminates slow
//! watchers. Bookmarks carry the last revision the watch has seen, so resuming from one never
//! skips an event.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::header::CONTENT_TYPE;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};
use tokio::time::{Instant, MissedTickBehavior};

use super::resources::RESOURCES;
use super::selectors::Selectors;
use super::status::ApiError;
use super::store::{EventType, LogEvent, WatchStart};

/// An open watch, as listed by `GET /_admin/watches`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchInfo {
    pub id: u64,
    pub client: String,
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
}

/// The open watches, so they can be listed and dropped.
#[derive(Debug, Default)]
pub(crate) struct WatchRegistry {
    next: AtomicU64,
    open: Mutex<HashMap<u64, (WatchInfo, oneshot::Sender<()>)>>,
}

/// Unregisters a watch when its stream is dropped (client gone or stream ended).
pub(crate) struct WatchGuard {
    id: u64,
    registry: Arc<WatchRegistry>,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.registry
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

impl WatchRegistry {
    pub fn register(self: &Arc<Self>, mut info: WatchInfo) -> (WatchGuard, oneshot::Receiver<()>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        info.id = id;
        let (tx, rx) = oneshot::channel();
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, (info, tx));
        (
            WatchGuard {
                id,
                registry: self.clone(),
            },
            rx,
        )
    }

    pub fn list(&self) -> Vec<WatchInfo> {
        let mut out: Vec<WatchInfo> = self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|(i, _)| i.clone())
            .collect();
        out.sort_by_key(|i| i.id);
        out
    }

    /// End the matching open watches now; returns how many.
    pub fn drop_matching(&self, client: Option<&str>, resource: Option<&str>) -> usize {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let ids: Vec<u64> = open
            .iter()
            .filter(|(_, (i, _))| {
                client.is_none_or(|c| c == i.client) && resource.is_none_or(|r| r == i.resource)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in &ids {
            if let Some((_, tx)) = open.remove(id) {
                let _ = tx.send(());
            }
        }
        ids.len()
    }
}

/// What one watch request asked for.
pub(crate) struct WatchParams {
    pub res: usize,
    pub namespace: Option<String>,
    pub selectors: Selectors,
    pub bookmarks: bool,
    pub send_initial_events: bool,
    pub timeout: Duration,
    pub bookmark_interval: Duration,
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = format!("{{\"type\":\"{kind}\",\"object\":").into_bytes();
    serde_json::to_writer(&mut line, object).unwrap_or_default();
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

fn bookmark_line(res: usize, rv: u64, initial_end: bool) -> Bytes {
    let rt = &RESOURCES[res];
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_line(
        "BOOKMARK",
        &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata}),
    )
}

/// A watch `ERROR` event carrying a `Status`.
pub(crate) fn error_line(err: &ApiError) -> Bytes {
    event_line("ERROR", &err.to_status())
}

/// With the resourceVersion replaced (DELETED-by-selector events carry the new revision).
fn restamped(obj: &Value, rv: u64) -> Value {
    let mut obj = obj.clone();
    if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
    obj
}

/// The line a watch with these parameters sees for a store event, if any.
fn translate(ev: &LogEvent, p: &WatchParams) -> Option<Bytes> {
    if ev.res != p.res || p.namespace.as_deref().is_some_and(|ns| ns != ev.namespace) {
        return None;
    }
    let now = p.selectors.matches(&ev.object);
    let before = ev.prev.as_deref().is_some_and(|o| p.selectors.matches(o));
    match ev.kind {
        EventType::Added => now.then(|| event_line("ADDED", &ev.object)),
        EventType::Deleted => now.then(|| event_line("DELETED", &ev.object)),
        EventType::Modified => match (before, now) {
            (true, true) => Some(event_line("MODIFIED", &ev.object)),
            (false, true) => Some(event_line("ADDED", &ev.object)),
            (true, false) => ev
                .prev
                .as_deref()
                .map(|o| event_line("DELETED", &restamped(o, ev.rv))),
            (false, false) => None,
        },
    }
}

struct State {
    params: WatchParams,
    pending: VecDeque<Bytes>,
    rx: broadcast::Receiver<Arc<LogEvent>>,
    last_rv: u64,
    kill: oneshot::Receiver<()>,
    deadline: Instant,
    ticker: tokio::time::Interval,
    _guard: WatchGuard,
}

/// The streaming response for a started watch.
pub(crate) fn respond(
    params: WatchParams,
    start: WatchStart,
    guard: WatchGuard,
    kill: oneshot::Receiver<()>,
) -> Response {
    let mut pending: VecDeque<Bytes> = start
        .initial
        .iter()
        .filter_map(|e| translate(e, &params))
        .collect();
    if params.send_initial_events {
        pending.push_back(bookmark_line(params.res, start.rv, true));
    }
    let interval = params.bookmark_interval.max(Duration::from_millis(1));
    let mut ticker = tokio::time::interval_at(Instant::now() + interval, interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let state = State {
        deadline: Instant::now() + params.timeout,
        params,
        pending,
        rx: start.rx,
        last_rv: start.rv,
        kill,
        ticker,
        _guard: guard,
    };
    let stream = futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(line) = s.pending.pop_front() {
                return Some((Ok::<_, Infallible>(line), s));
            }
            tokio::select! {
                _ = &mut s.kill => return None,
                () = tokio::time::sleep_until(s.deadline) => return None,
                _ = s.ticker.tick(), if s.params.bookmarks => {
                    s.pending.push_back(bookmark_line(s.params.res, s.last_rv, false));
                }
                received = s.rx.recv() => match received {
                    Ok(ev) => {
                        s.last_rv = ev.rv;
                        s.pending.extend(translate(&ev, &s.params));
                    }
                    // Lagged: too slow; Closed: shutting down. Either way the client resumes.
                    Err(_) => return None,
                },
            }
        }
    });
    streaming(Body::from_stream(stream))
}

/// A single `ERROR` event, then the end of the stream.
pub(crate) fn respond_error(err: &ApiError) -> Response {
    streaming(Body::from(error_line(err)))
}

fn streaming(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    response
}

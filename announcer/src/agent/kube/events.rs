//! Kubernetes Events on Services: "announcing 10.0.0.5 from node-b on eth1", or why not.
//!
//! Why Events: they are where users look first (`kubectl describe service`), next to the
//! Service itself. Why this wrapper around [`kube::runtime::events::Recorder`]:
//!
//! * Recording must never stall or fail the agent: the API server may be slow or down exactly
//!   when failover happens. [`Events::record`] returns at once; the write runs in a spawned
//!   task, and failures are logged and counted.
//! * The recorder folds repeats into a series keyed on (type, action, reason, object) but
//!   *not* the note, so two different notes with one reason ("announcing 10.0.0.5", then
//!   "announcing fd00::5") would be folded into the first Event, keeping its note. Here each
//!   distinct (Service, reason, note) gets its own recorder, so distinct messages stay distinct
//!   and true repeats become a series (`count` grows) instead of new objects.
//! * The same (Service, reason, note) within [`DEDUPE_WINDOW`] is not re-sent at all: a flapping
//!   watch must not turn into an Event storm.
//! * `kubectl describe` finds Events by the object's UID, so the reference carries the
//!   Service's UID when the Service store knows it ([`Events::with_services`]).
//!
//! Every recorded Event is also logged (info for Normal, warn for Warning), so callers do not
//! log the same line again.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::{
    Client,
    runtime::{
        events::{Event, Recorder, Reporter},
        reflector::{ObjectRef, Store},
    },
};

pub use kube::runtime::events::EventType;

use crate::election::{EventKind, NodeEventKind, NodeName, ServiceRef};

/// The `reportingController` of the agent's Events.
pub const CONTROLLER: &str = "announcer.dev/agent";
/// The same (Service, reason, note) is not re-sent within this window.
pub const DEDUPE_WINDOW: Duration = Duration::from_secs(60);
/// Unused recorders are dropped after this long (the recorder's own series cache lives 6 min).
const FORGET_AFTER: Duration = Duration::from_secs(6 * 60);

/// What makes two Events the same.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The Service.
    pub service: ServiceRef,
    /// Its UID, if known (a recreated Service is another object).
    pub uid: Option<String>,
    /// Normal or Warning.
    pub type_: EventType,
    /// Event reason.
    pub reason: String,
    /// Event note.
    pub note: String,
}

/// The dedupe rule, kept apart from the IO so it can be tested with fake time.
#[derive(Debug)]
pub struct Dedupe<V> {
    window: Duration,
    entries: HashMap<Key, (Instant, V)>,
}

impl<V> Dedupe<V> {
    /// A dedupe that suppresses repeats within `window`.
    pub fn new(window: Duration) -> Self {
        Dedupe {
            window,
            entries: HashMap::new(),
        }
    }

    /// Whether to send `key` at `now`; if so, records it and returns its value (made with
    /// `make` the first time, kept across windows). Also forgets long-unused keys.
    pub fn admit(&mut self, key: Key, now: Instant, make: impl FnOnce() -> V) -> Option<&V> {
        let forget = FORGET_AFTER.max(self.window);
        self.entries
            .retain(|_, (last, _)| now.saturating_duration_since(*last) < forget);
        let window = self.window;
        let fresh = |last: &Instant| now.saturating_duration_since(*last) < window;
        if self.entries.get(&key).is_some_and(|(last, _)| fresh(last)) {
            return None;
        }
        let e = self.entries.entry(key).or_insert_with(|| (now, make()));
        e.0 = now;
        Some(&e.1)
    }

    /// Keys currently remembered.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Counters, for metrics and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Handed to the API server (successfully or not).
    pub sent: u64,
    /// Not sent: a repeat within the window.
    pub suppressed: u64,
    /// Rejected by, or not delivered to, the API server.
    pub failed: u64,
    /// Not sent: over the rate limit (still logged).
    pub rate_limited: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    suppressed: AtomicU64,
    failed: AtomicU64,
    rate_limited: AtomicU64,
}

/// Events one agent may write per second in the long run, and in a burst. A failover of a
/// node that announced many VIPs raises one Event per VIP; beyond the burst they are logged
/// but not written, so that a flapping cluster cannot flood the API server with Events.
const RATE_PER_S: f64 = 10.0;
/// See [`RATE_PER_S`].
const BURST: f64 = 100.0;

/// A token bucket.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn new(now: Instant) -> Self {
        Bucket {
            tokens: BURST,
            at: now,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        let refill = now.saturating_duration_since(self.at).as_secs_f64() * RATE_PER_S;
        self.tokens = (self.tokens + refill).min(BURST);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Records Events on Services (and this Node) without ever blocking or failing the caller.
#[derive(Clone)]
pub struct Events {
    client: Client,
    reporter: Reporter,
    services: Option<Store<Service>>,
    dedupe: Arc<Mutex<Dedupe<Recorder>>>,
    bucket: Arc<Mutex<Bucket>>,
    counters: Arc<Counters>,
    /// Where the writes run: the runtime `new` was called on (the agent's API side), also when
    /// [`record`](Self::record) is called from the election thread, so Event writes never
    /// take turns with heartbeats.
    rt: Option<tokio::runtime::Handle>,
}

impl Events {
    /// Events reported by [`CONTROLLER`] from instance `node`, written on the current tokio
    /// runtime (or, outside any, on the one current at each record).
    pub fn new(client: Client, node: &NodeName) -> Self {
        Events {
            rt: tokio::runtime::Handle::try_current().ok(),
            client,
            reporter: Reporter {
                controller: CONTROLLER.to_owned(),
                instance: Some(node.to_string()),
            },
            services: None,
            dedupe: Arc::new(Mutex::new(Dedupe::new(DEDUPE_WINDOW))),
            bucket: Arc::new(Mutex::new(Bucket::new(Instant::now()))),
            counters: Arc::default(),
        }
    }

    /// Looks Services' UIDs up in `store`, so `kubectl describe service` shows the Events.
    pub fn with_services(mut self, store: Store<Service>) -> Self {
        self.services = Some(store);
        self
    }

    /// The counters so far.
    pub fn stats(&self) -> EventStats {
        EventStats {
            sent: self.counters.sent.load(Ordering::Relaxed),
            suppressed: self.counters.suppressed.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            rate_limited: self.counters.rate_limited.load(Ordering::Relaxed),
        }
    }

    /// The reference Events on `service` point at.
    pub fn reference(&self, service: &ServiceRef) -> ObjectReference {
        let uid = self.services.as_ref().and_then(|s| {
            let key = ObjectRef::new(&service.name).within(&service.namespace);
            s.get(&key).and_then(|svc| svc.metadata.uid.clone())
        });
        ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Service".to_owned()),
            namespace: Some(service.namespace.clone()),
            name: Some(service.name.clone()),
            uid,
            ..Default::default()
        }
    }

    /// Records an Event on `service` (and logs it), unless the same was sent within the
    /// window. Returns at once; must be called within a tokio runtime (otherwise the Event is
    /// logged, counted as failed and dropped).
    pub fn record(&self, service: &ServiceRef, type_: EventType, reason: &str, note: &str) {
        let reference = self.reference(service);
        self.record_on(service, reference, type_, reason, note);
    }

    /// Like [`record`](Self::record), about this node rather than a Service: recorded on
    /// the Node (`kubectl describe node` shows it). Its UID is the node name, as the kubelet's
    /// own node Events have it.
    pub fn record_on_node(&self, type_: EventType, reason: &str, note: &str) {
        let Some(node) = self.reporter.instance.clone() else {
            return;
        };
        let reference = ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Node".to_owned()),
            name: Some(node.clone()),
            uid: Some(node.clone()),
            ..Default::default()
        };
        // Dedupe identity: no Service has an empty namespace, so this never collides.
        let object = ServiceRef {
            namespace: String::new(),
            name: format!("node/{node}"),
        };
        self.record_on(&object, reference, type_, reason, note);
    }

    fn record_on(
        &self,
        service: &ServiceRef,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let key = Key {
            service: service.clone(),
            uid: reference.uid.clone(),
            type_,
            reason: reason.to_owned(),
            note: note.to_owned(),
        };
        let recorder = {
            let mut d = self.dedupe.lock().unwrap_or_else(|e| e.into_inner());
            d.admit(key, Instant::now(), || {
                Recorder::new(self.client.clone(), self.reporter.clone())
            })
            .cloned()
        };
        let Some(recorder) = recorder else {
            self.counters.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        match type_ {
            EventType::Normal => tracing::info!(service = %service, reason, "{note}"),
            EventType::Warning => tracing::warn!(service = %service, reason, "{note}"),
        }
        let admitted = self
            .bucket
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take(Instant::now());
        if !admitted {
            let n = self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::warn!(
                    dropped = n + 1,
                    "Events over {RATE_PER_S}/s are logged only"
                );
            }
            return;
        }
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: action(reason).to_owned(),
            secondary: None,
        };
        let counters = self.counters.clone();
        let service = service.clone();
        let Some(rt) = self
            .rt
            .clone()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
        else {
            tracing::warn!(service = %service, reason, "no runtime to send the Event from");
            counters.failed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        rt.spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                counters.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(service = %service, reason = %event.reason, error = %e, "could not record Event");
            }
        });
    }
}

/// The Event `action` (what the agent did) for a reason.
fn action(reason: &str) -> &'static str {
    match reason {
        "Announcing" => "Announce",
        "Released" => "Release",
        "AddressRefused" | "SharingConflict" => "Refuse",
        _ => "Elect",
    }
}

/// The (Kubernetes) Event type and reason for a core event.
pub(crate) fn announce_event_type(kind: &EventKind) -> (EventType, &'static str) {
    match kind {
        EventKind::Announcing => (EventType::Normal, "Announcing"),
        EventKind::Released => (EventType::Normal, "Released"),
        EventKind::NoEligibleNode => (EventType::Warning, "NoEligibleNode"),
        EventKind::NoInterface => (EventType::Warning, "NoInterface"),
        EventKind::Overlap => (EventType::Warning, "Overlap"),
    }
}

/// The (Kubernetes) Event type and reason for a core event about this node.
pub(crate) fn node_event_type(kind: &NodeEventKind) -> (EventType, &'static str) {
    match kind {
        NodeEventKind::Isolated => (EventType::Warning, "Isolated"),
        NodeEventKind::Rejoined => (EventType::Normal, "Rejoined"),
        NodeEventKind::ConfigMismatch => (EventType::Warning, "ConfigMismatch"),
        NodeEventKind::Fenced => (EventType::Warning, "Fenced"),
    }
}

#[cfg(test)]
mod bucket_tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn burst_then_rate() {
        let t = Instant::now();
        let mut b = Bucket::new(t);
        assert_eq!((0..200).filter(|_| b.take(t)).count(), BURST as usize);
        // One second later, RATE_PER_S more.
        let t2 = t + Duration::from_secs(1);
        assert_eq!((0..200).filter(|_| b.take(t2)).count(), RATE_PER_S as usize);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(note: &str) -> Key {
        Key {
            service: ServiceRef {
                namespace: "default".into(),
                name: "web".into(),
            },
            uid: None,
            type_: EventType::Normal,
            reason: "Announcing".into(),
            note: note.into(),
        }
    }

    #[test]
    fn repeats_within_the_window_are_suppressed() {
        let t0 = Instant::now();
        let mut d = Dedupe::new(Duration::from_secs(60));
        let mut made = 0;
        let mut make = || {
            made += 1;
            made
        };
        assert_eq!(d.admit(key("a"), t0, &mut make), Some(&1));
        assert_eq!(
            d.admit(key("a"), t0 + Duration::from_secs(59), &mut make),
            None
        );
        // Another note is another Event.
        assert_eq!(
            d.admit(key("b"), t0 + Duration::from_secs(1), &mut make),
            Some(&2)
        );
        // After the window, sent again through the same recorder (a series, not a new object).
        assert_eq!(
            d.admit(key("a"), t0 + Duration::from_secs(60), &mut make),
            Some(&1)
        );
        assert_eq!(
            d.admit(key("a"), t0 + Duration::from_secs(61), &mut make),
            None
        );
    }

    #[test]
    fn unused_keys_are_forgotten() {
        let t0 = Instant::now();
        let mut d = Dedupe::new(Duration::from_secs(60));
        d.admit(key("a"), t0, || ());
        d.admit(key("b"), t0 + Duration::from_secs(300), || ());
        assert_eq!(d.len(), 2);
        d.admit(key("c"), t0 + FORGET_AFTER, || ());
        assert_eq!(d.len(), 2, "a is forgotten, b and c remain");
    }

    #[tokio::test]
    async fn recording_never_fails_the_caller_and_counts() {
        // Nothing listens on port 1: the write fails in the background, the caller never sees it.
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let ev = Events::new(Client::try_from(cfg).unwrap(), &NodeName::from("node-b"));
        let svc = ServiceRef {
            namespace: "default".into(),
            name: "web".into(),
        };
        ev.record(
            &svc,
            EventType::Normal,
            "Announcing",
            "announcing 10.0.0.5 from node-b on eth1",
        );
        ev.record(
            &svc,
            EventType::Normal,
            "Announcing",
            "announcing 10.0.0.5 from node-b on eth1",
        );
        let s = ev.stats();
        assert_eq!((s.sent, s.suppressed), (1, 1));
        let r = ev.reference(&svc);
        assert_eq!((r.kind.as_deref(), r.uid), (Some("Service"), None));
    }
}

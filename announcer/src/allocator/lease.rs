//! The allocator's single Lease, `announcer-allocator` (coordination.k8s.io/v1), taken and
//! renewed the way client-go's leader election does it.
//!
//! Why client-go's rules: they are what operators know, and they bound the time two
//! allocators could both believe they are active:
//!
//! * expiry is judged on the local clock, from when *this* process last saw the Lease change
//!   (not from `renewTime`, which is another node's clock): a Lease is free once it has not
//!   changed for `leaseDurationSeconds`, or has no holder;
//! * every write carries the `resourceVersion` last read, so two candidates cannot both
//!   take it: the loser gets 409 and re-reads;
//! * the leader counts itself active only until `renew deadline` (< lease duration) after the
//!   *start* of its last successful renewal ([`Elector::active_until`]); the caller checks it
//!   before every write, so a leader paused past its deadline (SIGSTOP, a stalled VM) does not
//!   write once it resumes, even before it learns that another node took over.
//!
//! Two additions of our own, for scale (issue 29, T3 and T6):
//!
//! * **the leader renews on a task of its own** ([`Holding`]): however long the write queue
//!   is, and however long a plan takes, the renewal timer is never behind it;
//! * **a standby does not poll**: it is handed the Lease by a watch on that one name
//!   ([`Elector::saw`]) and judges expiry from what the watch showed, so it reads nothing until
//!   the Lease is free or has not changed for its duration. Only where the watch is refused
//!   (RBAC without `list`/`watch` on the Lease) does it read the Lease, once per duration.

use std::time::Duration;

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, ResourceExt, api::PostParams};
use tokio::{
    sync::{oneshot, watch},
    time::Instant,
};

/// The Lease's name.
pub const LEASE_NAME: &str = "announcer-allocator";

/// How the Lease is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimings {
    /// `leaseDurationSeconds`: a Lease unchanged this long is free.
    pub duration: Duration,
    /// How often the leader renews it.
    pub renew: Duration,
    /// The leader stops writing this long after the start of its last successful renewal.
    pub deadline: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            duration: Duration::from_secs(15),
            renew: Duration::from_secs(5),
            deadline: Duration::from_secs(10),
        }
    }
}

/// Why a Lease request failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Someone else wrote the Lease since it was read (409): re-read and try again.
    #[error("the allocator Lease changed since it was read")]
    Conflict,
    /// The API server refused the request or could not be reached.
    #[error("allocator Lease: {0}")]
    Api(#[from] kube::Error),
}

fn conflict(e: kube::Error) -> LeaseError {
    match e {
        kube::Error::Api(ref s) if s.code == 409 => LeaseError::Conflict,
        e => LeaseError::Api(e),
    }
}

/// One candidate for the Lease.
pub struct Elector {
    api: Api<Lease>,
    identity: String,
    timings: LeaseTimings,
    /// The Lease as last read or written.
    last: Option<Lease>,
    /// The `resourceVersion` last seen, and when (local clock) it was first seen.
    observed: Option<(String, Instant)>,
    /// Until when this candidate may act as the leader.
    active_until: Option<Instant>,
    /// `last` is kept current by a watch of the Lease ([`Self::saw`]): a standby decides from
    /// it without a read.
    watched: bool,
}

impl Elector {
    /// A candidate named `identity` (the node name) for the Lease in `namespace`.
    pub fn new(client: Client, namespace: &str, identity: &str, timings: LeaseTimings) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            identity: identity.to_owned(),
            timings,
            last: None,
            observed: None,
            active_until: None,
            watched: false,
        }
    }

    /// The timings it holds the Lease with.
    pub fn timings(&self) -> LeaseTimings {
        self.timings
    }

    /// A watch of the Lease showed it as `lease` (`None`: it does not exist): while not
    /// leading, the next decision is taken from it, with no read. Expiry counts from when a
    /// `resourceVersion` was first seen, by the watch or by a read alike.
    pub fn saw(&mut self, lease: Option<Lease>) {
        if self.is_active() {
            return;
        }
        match lease {
            Some(l) => {
                self.observe(&l);
                self.last = Some(l);
                self.watched = true;
            }
            None => {
                self.last = None;
                self.observed = None;
                // Unknown until read: the next attempt reads (and creates it if missing).
                self.watched = false;
            }
        }
    }

    /// The watch broke (or ended): decide from a read again until it shows the Lease.
    pub fn unwatched(&mut self) {
        self.watched = false;
    }

    /// When this candidate will judge the Lease free, as far as it knows: now if it has no
    /// holder, else the Lease duration after its `resourceVersion` was first seen; `None` if it
    /// knows no Lease (a read decides).
    pub fn free_at(&self) -> Option<Instant> {
        let l = self.last.as_ref()?;
        let spec = l.spec.clone().unwrap_or_default();
        if spec
            .holder_identity
            .as_deref()
            .unwrap_or_default()
            .is_empty()
        {
            return Some(Instant::now());
        }
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timings.duration, Duration::from_secs);
        self.observed.as_ref().map(|(_, at)| *at + duration)
    }

    /// Until when it may write as the leader (`None`: it is not the leader).
    pub fn active_until(&self) -> Option<Instant> {
        self.active_until.filter(|t| Instant::now() < *t)
    }

    /// Whether it may write as the leader now.
    pub fn is_active(&self) -> bool {
        self.active_until().is_some()
    }

    fn observe(&mut self, l: &Lease) {
        let rv = l.resource_version().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != rv) {
            self.observed = Some((rv, Instant::now()));
        }
    }

    /// Takes the Lease if it is free or ours, renews it if ours. `Ok(true)`: this candidate
    /// is the leader until [`Self::active_until`]; `Ok(false)`: another node holds it.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let started = Instant::now();
        let result = self.attempt().await;
        match &result {
            Ok(true) => self.active_until = Some(started + self.timings.deadline),
            Ok(false) => self.active_until = None,
            // A failed renewal keeps the leadership until the deadline, no longer.
            Err(_) => {}
        }
        if matches!(result, Err(LeaseError::Conflict)) {
            self.last = None;
        }
        result
    }

    async fn attempt(&mut self) -> Result<bool, LeaseError> {
        let now = MicroTime(Timestamp::now());
        let current = match self.last.take() {
            // While leading, renew from the Lease this candidate wrote, and while a watch
            // keeps it current, decide from what the watch showed: no read needed; a conflict
            // makes the next attempt re-read.
            Some(l) if self.is_active() || self.watched => Some(l),
            _ => self.api.get_opt(LEASE_NAME).await?,
        };
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.to_owned()),
                    labels: Some(
                        [
                            ("app.kubernetes.io/name".to_owned(), "announcer".to_owned()),
                            ("announcer.dev/lease".to_owned(), "allocator".to_owned()),
                        ]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(None, &now)),
            };
            let created = self
                .api
                .create(&PostParams::default(), &lease)
                .await
                .map_err(conflict)?;
            self.observe(&created);
            self.last = Some(created);
            return Ok(true);
        };
        self.observe(&lease);
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(self.timings.duration, Duration::from_secs);
        let expired = holder.is_empty()
            || self
                .observed
                .as_ref()
                .is_none_or(|(_, at)| at.elapsed() >= duration);
        if holder != self.identity && !expired {
            self.last = Some(lease);
            return Ok(false);
        }
        lease.spec = Some(self.spec(Some(&spec), &now));
        let written = self
            .api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
            .map_err(conflict)?;
        self.observe(&written);
        self.last = Some(written);
        Ok(true)
    }

    fn spec(&self, old: Option<&LeaseSpec>, now: &MicroTime) -> LeaseSpec {
        let ours = old.is_some_and(|o| o.holder_identity.as_deref() == Some(&self.identity));
        let transitions = old.and_then(|o| o.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: i32::try_from(self.timings.duration.as_secs()).ok(),
            acquire_time: if ours {
                old.and_then(|o| o.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now.clone()),
            lease_transitions: Some(if ours || old.is_none() {
                transitions
            } else {
                transitions + 1
            }),
            ..LeaseSpec::default()
        }
    }

    /// Gives the Lease up (holder emptied), so another node need not wait for it to expire.
    /// Only if this candidate is the active leader; best effort.
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        let active = self.is_active();
        self.active_until = None;
        let Some(mut lease) = self.last.take().filter(|_| active) else {
            return Ok(());
        };
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
        }
        self.api
            .replace(LEASE_NAME, &PostParams::default(), &lease)
            .await
            .map_err(conflict)?;
        Ok(())
    }
}

/// The leadership, renewed by a task of its own every [`LeaseTimings::renew`] until
/// [`Holding::end`]: no write queue or plan can delay a renewal. Writers ask
/// [`Active::is_active`] before each write.
pub struct Holding {
    active: Active,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Elector>,
}

/// Whether the leader may write now (a cheap clone for each write).
#[derive(Clone)]
pub struct Active(watch::Receiver<Option<Instant>>);

impl Active {
    /// Until when it may write (`None`: not the leader any more).
    pub fn until(&self) -> Option<Instant> {
        self.0.borrow().filter(|t| Instant::now() < *t)
    }

    /// Whether it may write now.
    pub fn is_active(&self) -> bool {
        self.until().is_some()
    }

    /// Resolves when the leadership's deadline moves (a renewal, or its loss).
    pub async fn changed(&mut self) {
        if self.0.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl Holding {
    /// Starts renewing for `elector`, which has just taken or renewed the Lease.
    pub fn start(mut elector: Elector) -> Holding {
        let (tx, rx) = watch::channel(elector.active_until);
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let timings = elector.timings;
            let mut renew_at = Instant::now() + timings.renew;
            let mut last_ok = Instant::now();
            loop {
                tokio::select! {
                    biased;
                    _ = &mut stopped => break,
                    () = tokio::time::sleep_until(renew_at) => {}
                }
                match elector.try_acquire_or_renew().await {
                    Ok(true) => {
                        let gap = last_ok.elapsed();
                        if gap > timings.renew.mul_f64(1.5) {
                            tracing::warn!(
                                gap_s = gap.as_secs_f64(),
                                "allocator Lease renewed late"
                            );
                        }
                        last_ok = Instant::now();
                        renew_at = last_ok + timings.renew;
                    }
                    Ok(false) => {
                        let _ = tx.send(None);
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "allocator Lease renewal failed");
                        let retry =
                            Duration::from_secs(1).mul_f64(1.0 + rand::random::<f64>() * 0.2);
                        renew_at = Instant::now() + retry;
                    }
                }
                let _ = tx.send(elector.active_until);
                if !elector.is_active() {
                    let _ = tx.send(None);
                    break;
                }
            }
            elector
        });
        Holding {
            active: Active(rx),
            stop: Some(stop),
            task,
        }
    }

    /// The writers' view of the leadership.
    pub fn active(&self) -> Active {
        self.active.clone()
    }

    /// Stops renewing and hands the elector back (to release the Lease, or to stand by).
    pub async fn end(mut self) -> Elector {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.expect("the renewal task does not panic")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::{
        Json, Router,
        extract::State,
        http::StatusCode,
        routing::{get, post},
    };
    use serde_json::{Value, json};

    use super::*;

    /// One Lease, in memory, with resourceVersion checks on replace (409 on a stale one).
    #[derive(Clone, Default)]
    struct Server {
        lease: Arc<Mutex<Option<Value>>>,
        rv: Arc<Mutex<u64>>,
        /// GETs of the Lease served.
        gets: Arc<Mutex<u64>>,
    }

    impl Server {
        fn stamp(&self, mut v: Value) -> Value {
            let mut rv = self.rv.lock().unwrap();
            *rv += 1;
            v["metadata"]["resourceVersion"] = json!(rv.to_string());
            v["metadata"]["namespace"] = json!("ns");
            v
        }

        /// Someone else writes the Lease (another node).
        fn put(&self, holder: &str) {
            let v = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": LEASE_NAME},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 1, "leaseTransitions": 3},
            });
            let v = self.stamp(v);
            *self.lease.lock().unwrap() = Some(v);
        }

        fn holder(&self) -> Option<String> {
            self.lease
                .lock()
                .unwrap()
                .as_ref()
                .and_then(|l| l["spec"]["holderIdentity"].as_str().map(String::from))
        }
    }

    async fn start(server: Server) -> Client {
        async fn read(State(s): State<Server>) -> (StatusCode, Json<Value>) {
            *s.gets.lock().unwrap() += 1;
            match s.lease.lock().unwrap().clone() {
                Some(l) => (StatusCode::OK, Json(l)),
                None => (
                    StatusCode::NOT_FOUND,
                    Json(
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "NotFound", "code": 404, "message": "not found"}),
                    ),
                ),
            }
        }
        async fn create(
            State(s): State<Server>,
            Json(v): Json<Value>,
        ) -> (StatusCode, Json<Value>) {
            let v = s.stamp(v);
            *s.lease.lock().unwrap() = Some(v.clone());
            (StatusCode::CREATED, Json(v))
        }
        async fn replace(
            State(s): State<Server>,
            Json(v): Json<Value>,
        ) -> (StatusCode, Json<Value>) {
            let current = s.lease.lock().unwrap().clone();
            let stale = current.is_none_or(|c| {
                c["metadata"]["resourceVersion"] != v["metadata"]["resourceVersion"]
            });
            if stale {
                return (
                    StatusCode::CONFLICT,
                    Json(
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "Conflict", "code": 409, "message": "conflict"}),
                    ),
                );
            }
            let v = s.stamp(v);
            *s.lease.lock().unwrap() = Some(v.clone());
            (StatusCode::OK, Json(v))
        }
        let base = "/apis/coordination.k8s.io/v1/namespaces/ns/leases";
        let app = Router::new()
            .route(base, post(create))
            .route(&format!("{base}/{LEASE_NAME}"), get(read).put(replace))
            .with_state(server);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    fn timings() -> LeaseTimings {
        LeaseTimings {
            duration: Duration::from_secs(1),
            renew: Duration::from_millis(300),
            deadline: Duration::from_millis(600),
        }
    }

    #[tokio::test]
    async fn a_missing_lease_is_created_and_held() {
        let s = Server::default();
        let mut e = Elector::new(start(s.clone()).await, "ns", "node-a", timings());
        assert!(e.try_acquire_or_renew().await.unwrap());
        assert!(e.is_active());
        assert_eq!(s.holder().as_deref(), Some("node-a"));
        // Renewals keep it.
        assert!(e.try_acquire_or_renew().await.unwrap());
    }

    #[tokio::test]
    async fn a_lease_held_by_another_is_taken_only_once_it_stayed_unchanged_for_its_duration() {
        let s = Server::default();
        s.put("node-b");
        let mut e = Elector::new(start(s.clone()).await, "ns", "node-a", timings());
        assert!(!e.try_acquire_or_renew().await.unwrap());
        // node-b renews: the clock starts again.
        tokio::time::sleep(Duration::from_millis(700)).await;
        s.put("node-b");
        assert!(!e.try_acquire_or_renew().await.unwrap());
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(
            !e.try_acquire_or_renew().await.unwrap(),
            "changed 0.7 s ago"
        );
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(
            e.try_acquire_or_renew().await.unwrap(),
            "unchanged for 1.1 s"
        );
        let lease = s.lease.lock().unwrap().clone().unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "node-a");
        assert_eq!(lease["spec"]["leaseTransitions"], 4);
    }

    #[tokio::test]
    async fn a_leader_whose_lease_was_taken_gets_a_conflict_then_sees_the_new_holder() {
        let s = Server::default();
        let mut e = Elector::new(start(s.clone()).await, "ns", "node-a", timings());
        assert!(e.try_acquire_or_renew().await.unwrap());
        s.put("node-b");
        assert!(matches!(
            e.try_acquire_or_renew().await,
            Err(LeaseError::Conflict)
        ));
        assert!(!e.try_acquire_or_renew().await.unwrap());
        assert!(!e.is_active());
        assert_eq!(s.holder().as_deref(), Some("node-b"));
    }

    #[tokio::test]
    async fn leadership_ends_at_the_renew_deadline_without_a_renewal() {
        let s = Server::default();
        let mut e = Elector::new(start(s.clone()).await, "ns", "node-a", timings());
        assert!(e.try_acquire_or_renew().await.unwrap());
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(!e.is_active(), "past the 0.6 s deadline");
    }

    #[tokio::test]
    async fn a_standby_shown_the_lease_by_a_watch_decides_without_reading_it() {
        let s = Server::default();
        s.put("node-b");
        let client = start(s.clone()).await;
        let watched = |s: &Server| -> Lease {
            serde_json::from_value(s.lease.lock().unwrap().clone().unwrap()).unwrap()
        };
        let mut e = Elector::new(client, "ns", "node-a", timings());
        e.saw(Some(watched(&s)));
        assert!(!e.try_acquire_or_renew().await.unwrap(), "node-b holds it");
        let free_at = e.free_at().expect("a known Lease");
        // node-b renews; the watch shows it: expiry counts again from now.
        tokio::time::sleep(Duration::from_millis(600)).await;
        s.put("node-b");
        e.saw(Some(watched(&s)));
        assert!(e.free_at().expect("known") > free_at);
        assert!(!e.try_acquire_or_renew().await.unwrap());
        // Unchanged for its duration: taken, still without a read.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(e.free_at().expect("known") <= Instant::now());
        assert!(e.try_acquire_or_renew().await.unwrap());
        assert_eq!(*s.gets.lock().unwrap(), 0, "no read while watched");
        assert_eq!(s.holder().as_deref(), Some("node-a"));
        // Without a watch, a candidate reads.
        let mut other = Elector::new(start(s.clone()).await, "ns", "node-c", timings());
        assert!(!other.try_acquire_or_renew().await.unwrap());
        assert_eq!(*s.gets.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn the_holding_task_renews_until_ended_and_hands_the_elector_back() {
        let s = Server::default();
        let mut e = Elector::new(start(s.clone()).await, "ns", "node-a", timings());
        assert!(e.try_acquire_or_renew().await.unwrap());
        let holding = Holding::start(e);
        let active = holding.active();
        // Past the 0.6 s deadline of the first acquisition: renewed by the task meanwhile.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(active.is_active(), "renewed by its own task");
        let mut e = holding.end().await;
        e.release().await.unwrap();
        assert_eq!(s.holder(), None);
    }

    #[tokio::test]
    async fn release_empties_the_holder() {
        let s = Server::default();
        let mut e = Elector::new(start(s.clone()).await, "ns", "node-a", timings());
        assert!(e.try_acquire_or_renew().await.unwrap());
        e.release().await.unwrap();
        assert_eq!(s.holder(), None);
        assert!(!e.is_active());
    }
}

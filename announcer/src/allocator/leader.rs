//! The allocator loop: wait for pools, hold the `announcer-allocator` Lease ([`super::lease`]),
//! and while holding it write what [`crate::ipam::plan`] computes (see the module docs of
//! [`super`] for why it is shaped this way).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    hash::{Hash, Hasher},
    net::IpAddr,
    num::NonZeroU32,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{StreamExt, stream::FuturesUnordered};
use governor::{
    Quota, RateLimiter,
    clock::DefaultClock,
    state::{InMemoryState, NotKeyed},
};
use k8s_openapi::{
    api::{
        coordination::v1::Lease,
        core::v1::{Namespace, ObjectReference, Service},
    },
    apimachinery::pkg::apis::meta::v1::Time,
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{
        WatchStreamExt,
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, Store},
        watcher,
    },
};
use rand::Rng;
use serde_json::json;
use tokio::{
    sync::{mpsc, watch},
    time::Instant,
};

use super::{
    AllocatorArgs,
    backoff::Backoff,
    lease::{Active, Elector, Holding, LEASE_NAME, LeaseError, LeaseTimings},
};
use crate::{
    agent::{kube::other_announcers::OtherAnnouncer, shutdown::Shutdown},
    ipam::{self, AddressPool, AddressPoolStatus, Allocation, Problem, ServiceKey},
};

/// The `reportingController` of the allocator's Events.
pub const CONTROLLER: &str = "announcer.dev/allocator";

/// What the running allocator needs to know: the rules' [`ipam::AllocationScope`], and where
/// and how it holds the allocator Lease.
#[derive(Clone, Debug)]
pub struct AllocatorConfig {
    /// The announcer namespace (where the Lease lives).
    pub namespace: String,
    /// This replica's Pod name: the Lease holder identity and the Events' instance.
    pub identity: String,
    /// Which Services are ours.
    pub scope: ipam::AllocationScope,
    /// How the Lease is held.
    pub lease: LeaseTimings,
    /// Other announcers found at start: with one, a class-less Service we do not serve is
    /// its to serve, so no [`NOT_ALLOCATED`] Event is sent.
    pub other_announcers: Vec<OtherAnnouncer>,
    /// The most writes per second (Services, pools, Events; not the Lease): `--write-qps`.
    pub write_qps: NonZeroU32,
}

/// The reason of the Event on a class-less Service that nothing will allocate.
pub const NOT_ALLOCATED: &str = "ClasslessNotAllocated";

/// Whether `s` is a class-less LoadBalancer Service still without an address that nobody will
/// allocate: we do not serve class-less Services and no other announcer is installed.
pub fn unserved_classless(
    s: &Service,
    scope: &ipam::AllocationScope,
    others: &[OtherAnnouncer],
) -> bool {
    let Some(spec) = &s.spec else { return false };
    spec.type_.as_deref() == Some("LoadBalancer")
        && spec.load_balancer_class.is_none()
        && !scope.classless
        && others.is_empty()
        && current_ips(s).is_empty()
}

/// The note of the [`NOT_ALLOCATED`] Event: why the Service is `<pending>`, and the two ways out.
pub fn not_allocated_note(class: &str) -> String {
    format!(
        "this LoadBalancer Service has no spec.loadBalancerClass, and the announcer allocates \
         addresses only to Services of class {class} (no other load balancer is installed), so \
         its EXTERNAL-IP stays <pending>. Set spec.loadBalancerClass: {class} (a new Service: \
         the field cannot be changed), or let the announcer serve class-less Services: \
         --classless on the announcer-allocator Deployment and classOnly: false for the agents"
    )
}

impl AllocatorConfig {
    /// From the allocator's flags: our class, and class-less Services only with
    /// `--classless` (never with `--class-only`).
    pub fn from_args(args: &AllocatorArgs) -> Self {
        AllocatorConfig {
            namespace: args.namespace.clone(),
            identity: args.identity.clone(),
            scope: ipam::AllocationScope {
                class: args.load_balancer_class.clone(),
                classless: args.classless && !args.class_only,
            },
            lease: LeaseTimings::default(),
            other_announcers: Vec::new(),
            write_qps: args.write_qps,
        }
    }
}

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object changed since it was read (409): wait for the watch.
    #[error("{0} changed since it was read")]
    Conflict(String),
    /// No longer the leader: nothing is written.
    #[error("no longer the active allocator")]
    NotActive,
    /// The API server refused the request or could not be reached.
    #[error("{0}: {1}")]
    Api(String, kube::Error),
}

/// Plans are spaced at least this many times the last plan's cost apart (a burst of watch
/// events becomes one plan), so planning takes at most 1/20 = 5 % of the wall time whatever
/// the event rate.
const PLAN_SPACING: u32 = 20;

/// Runs the allocator until `stop`. Idle while `pools` is empty.
pub async fn run(
    client: Client,
    cfg: AllocatorConfig,
    services: Store<Service>,
    pools: Store<AddressPool>,
    mut changed: watch::Receiver<u64>,
    mut stop: Shutdown,
) {
    let ready = async {
        services.wait_until_ready().await?;
        pools.wait_until_ready().await
    };
    tokio::select! {
        () = stop.recv() => return,
        r = ready => if r.is_err() { return },
    }
    let limiter = Arc::new(RateLimiter::direct(write_quota(cfg.write_qps)));
    let mut elector = Elector::new(client.clone(), &cfg.namespace, &cfg.identity, cfg.lease);
    // The standby's view of the Lease: a watch of it by name, or reads where that is refused.
    let mut standby = Standby::new(client.clone(), &cfg.namespace);
    loop {
        // Idle: no pools, nothing to do, no requests.
        if pools.state().is_empty() {
            standby.pause(&mut elector);
            while pools.state().is_empty() {
                tokio::select! {
                    () = stop.recv() => return,
                    r = changed.changed() => if r.is_err() { return },
                }
            }
        }
        standby.resume();
        match elector.try_acquire_or_renew().await {
            Ok(true) => {
                tracing::info!(identity = %cfg.identity, "became the active address allocator");
                standby.pause(&mut elector);
                let holding = Holding::start(elector);
                let mut leader = Leader::new(&client, &cfg, &services, &pools, limiter.clone());
                let end = leader.lead(holding.active(), &mut changed, &mut stop).await;
                elector = holding.end().await;
                if let Err(e) = elector.release().await {
                    tracing::debug!(error = %e, "could not release the allocator Lease");
                }
                match end {
                    End::Stopped => return,
                    End::Lost => tracing::warn!("no longer the active address allocator"),
                    End::NoPools => {
                        tracing::info!("no address pools left: allocator idle");
                        continue;
                    }
                }
                standby.resume();
            }
            Ok(false) => {}
            Err(LeaseError::Conflict) => {}
            Err(e) => tracing::warn!(error = %e, "allocator Lease"),
        }
        // Standing by: until the Lease is free as far as this replica knows (released, or
        // unchanged for its duration), with no read while the watch shows it.
        loop {
            let until = standby.wake_at(&elector, cfg.lease);
            tokio::select! {
                () = stop.recv() => return,
                r = changed.changed() => {
                    if r.is_err() { return }
                    if pools.state().is_empty() { break }
                }
                seen = standby.next() => {
                    match seen {
                        Seen::Lease(l) => elector.saw(l.map(|l| *l)),
                        Seen::Broken => elector.unwatched(),
                    }
                    if elector.free_at().is_none_or(|t| t <= Instant::now()) { break }
                }
                () = tokio::time::sleep_until(until) => break,
            }
        }
    }
}

/// The share of `--write-qps` the limiter sends at: requests sent evenly spaced reach the API
/// server a little bunched (measured on kube-apiserver at 100/s: 102 in one second), so 5 %
/// headroom keeps every second as the API server sees it at or below `--write-qps`.
const WRITE_HEADROOM: f64 = 0.95;

/// The quota of `--write-qps`: evenly spaced 1 / (0.95 × qps) apart, no burst, so no 1-second
/// window holds more than `qps` writes (a bucket `qps` deep would allow twice that in the first
/// second).
fn write_quota(qps: NonZeroU32) -> Quota {
    let period = Duration::from_secs_f64(1.0 / (f64::from(qps.get()) * WRITE_HEADROOM));
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(qps))
        .allow_burst(NonZeroU32::MIN)
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, DefaultClock>;

/// What the Lease watch showed a standby.
enum Seen {
    /// The Lease as it is now (`None`: it does not exist).
    Lease(Option<Box<Lease>>),
    /// The watch broke (it retries by itself): the Lease is unknown until it is back.
    Broken,
}

/// A standby's view of the Lease: a watch of that one name (field selector
/// `metadata.name=announcer-allocator`; RBAC grants `list` and `watch` with `resourceNames`
/// only so), or, if the API server refuses it (403), a read once per Lease duration, said once
/// in the log.
struct Standby {
    client: Client,
    namespace: String,
    rx: Option<mpsc::Receiver<Seen>>,
    task: Option<AbortOnDrop>,
    /// The watch was refused: read instead, for the rest of the process's life.
    forbidden: Arc<AtomicBool>,
}

impl Standby {
    fn new(client: Client, namespace: &str) -> Self {
        Standby {
            client,
            namespace: namespace.to_owned(),
            rx: None,
            task: None,
            forbidden: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Stops watching (leading, or idle without pools).
    fn pause(&mut self, elector: &mut Elector) {
        self.task = None;
        self.rx = None;
        elector.unwatched();
    }

    /// Watches the Lease unless it already does or the watch was refused.
    fn resume(&mut self) {
        if self.task.is_some() || self.forbidden.load(Ordering::Acquire) {
            return;
        }
        let (tx, rx) = mpsc::channel(4);
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let forbidden = self.forbidden.clone();
        let task = tokio::spawn(async move {
            let cfg = watcher::Config::default().fields(&format!("metadata.name={LEASE_NAME}"));
            let stream = watcher(api, cfg).default_backoff();
            let mut stream = std::pin::pin!(stream);
            let mut listed: Option<Lease> = None;
            while let Some(ev) = stream.next().await {
                let seen = match ev {
                    Ok(watcher::Event::Init) => {
                        listed = None;
                        continue;
                    }
                    Ok(watcher::Event::InitApply(l)) => {
                        listed = Some(l);
                        continue;
                    }
                    Ok(watcher::Event::InitDone) => Seen::Lease(listed.take().map(Box::new)),
                    Ok(watcher::Event::Apply(l)) => Seen::Lease(Some(Box::new(l))),
                    Ok(watcher::Event::Delete(_)) => Seen::Lease(None),
                    Err(e) if is_forbidden(&e) => {
                        forbidden.store(true, Ordering::Release);
                        tracing::warn!(
                            error = %e,
                            "may not watch the allocator Lease (RBAC: list and watch on the \
                             announcer-allocator Lease): standing by with a read of it once \
                             per Lease duration instead"
                        );
                        let _ = tx.send(Seen::Broken).await;
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "allocator Lease watch");
                        Seen::Broken
                    }
                };
                if tx.send(seen).await.is_err() {
                    return;
                }
            }
        });
        self.rx = Some(rx);
        self.task = Some(AbortOnDrop(task));
    }

    /// The next thing the watch showed; pending forever without a watch.
    async fn next(&mut self) -> Seen {
        match self.rx.as_mut() {
            Some(rx) => match rx.recv().await {
                Some(s) => s,
                None => {
                    self.rx = None;
                    Seen::Broken
                }
            },
            None => std::future::pending().await,
        }
    }

    /// When to try for the Lease: when it will be free as far as this replica knows; never
    /// later than a Lease duration from now when the Lease is known only by reads (no watch),
    /// and after a renew period when it is not known at all.
    fn wake_at(&self, elector: &Elector, timings: LeaseTimings) -> Instant {
        let now = Instant::now();
        match elector.free_at() {
            Some(t) => t.max(now),
            None => now + jittered(timings.renew),
        }
    }
}

fn is_forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// `d` scaled by a random factor in [1, 1.2): candidates do not retry in lockstep.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + rand::rng().random::<f64>() * 0.2)
}

enum End {
    Stopped,
    Lost,
    NoPools,
}

/// One write the leader has decided on, waiting for the rate limiter.
enum Write {
    /// A Service's addresses, over the resourceVersion it was planned from.
    Service {
        key: ServiceKey,
        rv: String,
        ips: Vec<IpAddr>,
    },
    /// A pool's status.
    Pool {
        name: String,
        rv: String,
        status: AddressPoolStatus,
    },
}

/// A finished write and how it went.
struct Written {
    write: Write,
    result: Result<(), WriteError>,
}

/// The active allocator's state: what it wrote and is waiting to see, what it reported.
struct Leader {
    client: Client,
    cfg: AllocatorConfig,
    services: Store<Service>,
    pools: Store<AddressPool>,
    /// Service writes not seen in the store yet: key → (resourceVersion written over, ips).
    pending_services: HashMap<ServiceKey, (String, Vec<IpAddr>)>,
    /// Pool status writes not seen yet: name → (resourceVersion written over, status).
    pending_pools: HashMap<String, (String, AddressPoolStatus)>,
    /// Service writes that failed, waiting for their retry.
    service_backoff: Backoff<ServiceKey>,
    /// Pool status writes that failed, waiting for their retry.
    pool_backoff: Backoff<String>,
    /// The problems already reported per Service.
    reported: BTreeMap<ServiceKey, BTreeSet<Problem>>,
    /// The UIDs of the class-less Services told [`NOT_ALLOCATED`] (once per Service).
    told_unserved: BTreeSet<String>,
    reporter: Reporter,
    /// Every write (Services, pools, Events) waits for it: `--write-qps`.
    limiter: Arc<Limiter>,
    /// The digest of the inputs the last plan would leave once its writes are seen: a
    /// recompute from the same inputs is skipped (our own writes coming back change nothing).
    expected: Option<u64>,
    /// The writes of the last plan not sent yet, oldest Service first.
    queue: VecDeque<Write>,
    /// The Services with a write in flight, and what it writes (not queued again meanwhile).
    in_flight_services: HashMap<ServiceKey, Vec<IpAddr>>,
    /// The pools with a status write in flight.
    in_flight_pools: HashSet<String>,
}

impl Leader {
    fn new(
        client: &Client,
        cfg: &AllocatorConfig,
        services: &Store<Service>,
        pools: &Store<AddressPool>,
        limiter: Arc<Limiter>,
    ) -> Self {
        Leader {
            client: client.clone(),
            cfg: cfg.clone(),
            services: services.clone(),
            pools: pools.clone(),
            pending_services: HashMap::new(),
            pending_pools: HashMap::new(),
            service_backoff: Backoff::default(),
            pool_backoff: Backoff::default(),
            reported: BTreeMap::new(),
            told_unserved: BTreeSet::new(),
            reporter: Reporter {
                controller: CONTROLLER.to_owned(),
                instance: Some(cfg.identity.clone()),
            },
            limiter,
            expected: None,
            queue: VecDeque::new(),
            in_flight_services: HashMap::new(),
            in_flight_pools: HashSet::new(),
        }
    }

    async fn lead(
        &mut self,
        mut active: Active,
        changed: &mut watch::Receiver<u64>,
        stop: &mut Shutdown,
    ) -> End {
        // Namespaces, for the pools' namespaceSelector: watched only while active.
        let (ns_store, ns_changed, ns_listed, ns_task) = watch_namespaces(self.client.clone());
        let _abort = AbortOnDrop(ns_task);
        let mut ns_changed = ns_changed;
        let mut retry_at: Option<Instant> = None;
        let mut dirty = true;
        // A retry is due: plan even if the inputs did not change.
        let mut force = false;
        let mut next_plan_at = Instant::now();
        let mut in_flight = FuturesUnordered::new();
        loop {
            if self.pools.state().is_empty() {
                return End::NoPools;
            }
            let Some(active_until) = active.until() else {
                return End::Lost;
            };
            if dirty && ns_listed.load(Ordering::Acquire) && Instant::now() >= next_plan_at {
                dirty = false;
                let started = Instant::now();
                self.reconcile(&ns_store, std::mem::take(&mut force));
                // Items whose write failed wait on their own backoff (finding 11).
                retry_at = self.next_retry();
                next_plan_at = Instant::now() + started.elapsed() * PLAN_SPACING;
            }
            // A plan is due once the spacing after the last one has passed.
            let plan_due = dirty && ns_listed.load(Ordering::Acquire);
            let may_send =
                !self.queue.is_empty() && in_flight.len() < super::backoff::MAX_CONCURRENT_WRITES;
            tokio::select! {
                () = stop.recv() => return End::Stopped,
                r = changed.changed() => {
                    if r.is_err() { return End::Stopped }
                    dirty = true;
                }
                r = ns_changed.changed() => {
                    if r.is_err() { return End::Lost }
                    dirty = true;
                }
                () = sleep_until_opt(retry_at) => {
                    retry_at = None;
                    dirty = true;
                    force = true;
                }
                () = tokio::time::sleep_until(next_plan_at), if plan_due => {}
                () = self.limiter.until_ready(), if may_send => {
                    if let Some(w) = self.queue.pop_front() {
                        match &w {
                            Write::Service { key, ips, .. } => {
                                self.in_flight_services.insert(key.clone(), ips.clone());
                            }
                            Write::Pool { name, .. } => {
                                self.in_flight_pools.insert(name.clone());
                            }
                        }
                        in_flight.push(send(self.client.clone(), active.clone(), w));
                    }
                }
                Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                    if !self.written(done) {
                        return End::Lost;
                    }
                    retry_at = self.next_retry();
                    // A conflict: plan again (the watch may already have brought the change).
                    dirty |= self.expected.is_none();
                    // The last write of a batch landed: plan once more, even on the inputs
                    // the plan expected. The pools' status was computed before the batch's
                    // addresses were written, and skipping would leave it counting too few.
                    if self.queue.is_empty() && in_flight.is_empty() {
                        dirty = true;
                        force = true;
                    }
                }
                () = active.changed() => {}
                () = tokio::time::sleep_until(active_until) => return End::Lost,
            }
        }
    }

    /// Recomputes the plan unless its inputs are what the last plan left (or `force`: a
    /// retry is due), reports new problems, and queues the writes that differ and are due (a
    /// failed write waits for its backoff; a conflict for the watch).
    fn reconcile(&mut self, ns_store: &Store<Namespace>, force: bool) {
        let namespaces: BTreeMap<String, BTreeMap<String, String>> = ns_store
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        let services = self.services_with_pending();
        let pools: Vec<AddressPool> = self.pools.state().iter().map(|p| (**p).clone()).collect();
        let inputs = Digest::of(&pools, &services, &namespaces);
        // The inputs as they will be once the writes queued and in flight land: what the last
        // plan expected, unless something else changed (its own writes coming back do not).
        let mut landing: HashMap<ServiceKey, &[IpAddr]> = self
            .in_flight_services
            .iter()
            .map(|(k, ips)| (k.clone(), ips.as_slice()))
            .collect();
        for w in &self.queue {
            if let Write::Service { key, ips, .. } = w {
                landing.insert(key.clone(), ips);
            }
        }
        if !force && self.expected == Some(inputs.sum(&landing)) {
            tracing::trace!("allocator inputs as planned: no plan");
            return;
        }
        let mut plan = ipam::plan(&pools, &services, &namespaces, &self.cfg.scope);
        // A Service in a namespace the Namespaces watch has not shown yet (just created: the
        // two watches race) is judged without its namespace's labels: its addresses still
        // count as taken, but nothing is written or reported for it until the namespace shows.
        plan.services
            .retain(|k, _| namespaces.contains_key(&k.namespace));
        self.report(&plan, &services);
        // The Service writes that are due, oldest Service first.
        let now_i = Instant::now();
        let mut todo = Vec::new();
        let mut planned: HashMap<ServiceKey, &[IpAddr]> = HashMap::new();
        for s in &services {
            let key = ServiceKey {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
            };
            let Some(a) = plan.services.get(&key) else {
                continue;
            };
            if current_ips(s) == a.ips {
                self.service_backoff.succeeded(&key);
                continue;
            }
            planned.insert(key.clone(), &a.ips);
            if !self.service_backoff.due(&key, now_i) || self.in_flight_services.contains_key(&key)
            {
                continue;
            }
            todo.push((
                s.metadata.creation_timestamp.clone(),
                key,
                s.resource_version().unwrap_or_default(),
                a.ips.clone(),
            ));
        }
        todo.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        self.expected = Some(inputs.sum(&planned));
        let keys: HashSet<ServiceKey> = services
            .iter()
            .map(|s| ServiceKey {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
            })
            .collect();
        self.service_backoff.retain(|k| keys.contains(k));
        self.queue.clear();
        let now = Time(Timestamp::now());
        for p in &pools {
            let name = p.name_any();
            let Some(report) = plan.pools.get(&name) else {
                continue;
            };
            let rv = p.resource_version().unwrap_or_default();
            let old = match self.pending_pools.get(&name) {
                Some((written_over, st)) if *written_over == rv => Some(st.clone()),
                _ => {
                    self.pending_pools.remove(&name);
                    p.status.clone()
                }
            };
            let new = ipam::pool_status(report, old.as_ref(), p.metadata.generation, &now);
            if old.as_ref() == Some(&new) {
                self.pool_backoff.succeeded(&name);
                continue;
            }
            if !self.pool_backoff.due(&name, Instant::now()) || self.in_flight_pools.contains(&name)
            {
                continue;
            }
            self.queue.push_back(Write::Pool {
                name,
                rv,
                status: new,
            });
        }
        self.queue
            .extend(
                todo.into_iter()
                    .map(|(_, key, rv, ips)| Write::Service { key, rv, ips }),
            );
    }

    /// Books a finished write; `false` if it found the leadership over.
    fn written(&mut self, done: Written) -> bool {
        match &done.write {
            Write::Service { key, .. } => {
                self.in_flight_services.remove(key);
            }
            Write::Pool { name, .. } => {
                self.in_flight_pools.remove(name);
            }
        }
        match (done.write, done.result) {
            (_, Err(WriteError::NotActive)) => return false,
            (Write::Service { key, rv, ips }, r) => match r {
                Ok(()) => {
                    self.service_backoff.succeeded(&key);
                    self.pending_services.insert(key, (rv, ips));
                }
                Err(WriteError::Conflict(what)) => {
                    tracing::debug!("{what} changed; waiting for the watch");
                    // The plan expected this write to land: the next one must not be skipped.
                    self.expected = None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not write a Service's addresses");
                    self.service_backoff.failed(&key, Instant::now());
                }
            },
            (Write::Pool { name, rv, status }, r) => match r {
                Ok(()) => {
                    self.pool_backoff.succeeded(&name);
                    self.pending_pools.insert(name, (rv, status));
                }
                Err(WriteError::Conflict(_)) => {
                    tracing::debug!(pool = %name, "the pool changed; waiting for the watch");
                    // Its status is not in the plan's inputs: without this the version the
                    // watch brings would plan alike and the status would never be written.
                    self.expected = None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not write a pool's status");
                    self.pool_backoff.failed(&name, Instant::now());
                }
            },
        }
        true
    }

    /// When the earliest failed write may be tried again.
    fn next_retry(&self) -> Option<Instant> {
        match (
            self.service_backoff.next_due(),
            self.pool_backoff.next_due(),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The Services as stored, with the addresses this allocator wrote but the watch has not
    /// shown yet put in, so the plan builds on its own writes.
    fn services_with_pending(&mut self) -> Vec<Service> {
        let mut out = Vec::new();
        let mut seen = HashMap::new();
        for s in self.services.state() {
            let key = ServiceKey {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
            };
            let rv = s.resource_version().unwrap_or_default();
            let mut s = (*s).clone();
            if let Some((written_over, ips)) = self.pending_services.get(&key)
                && *written_over == rv
            {
                set_ips(&mut s, ips);
                seen.insert(key, ());
            }
            out.push(s);
        }
        self.pending_services.retain(|k, _| seen.contains_key(k));
        out
    }

    /// Records a Warning for each problem a Service did not have at the last recompute.
    fn report(&mut self, plan: &Allocation, services: &[Service]) {
        let uids: HashMap<ServiceKey, String> = services
            .iter()
            .filter_map(|s| {
                let key = ServiceKey {
                    namespace: s.namespace().unwrap_or_default(),
                    name: s.name_any(),
                };
                s.uid().map(|u| (key, u))
            })
            .collect();
        let mut now = BTreeMap::new();
        for (key, a) in &plan.services {
            let problems: BTreeSet<Problem> = a.problems.iter().cloned().collect();
            let before = self.reported.get(key);
            for p in &problems {
                if before.is_some_and(|b| b.contains(p)) {
                    continue;
                }
                self.record_problem(key, uids.get(key).cloned(), p);
            }
            if !problems.is_empty() {
                now.insert(key.clone(), problems);
            }
        }
        self.reported = now;
        // Class-less Services nothing will allocate: told once each (by UID, so a new Service
        // of the same name is told again); forgotten once they are gone or have an address.
        let mut still = BTreeSet::new();
        for s in services {
            let Some(uid) = s.uid() else { continue };
            if !unserved_classless(s, &self.cfg.scope, &self.cfg.other_announcers) {
                continue;
            }
            if !self.told_unserved.contains(&uid) {
                let key = ServiceKey {
                    namespace: s.namespace().unwrap_or_default(),
                    name: s.name_any(),
                };
                let note = not_allocated_note(&self.cfg.scope.class);
                self.record(
                    &key,
                    Some(uid.clone()),
                    EventType::Warning,
                    NOT_ALLOCATED,
                    note,
                );
            }
            still.insert(uid);
        }
        self.told_unserved = still;
    }

    fn record_problem(&self, key: &ServiceKey, uid: Option<String>, p: &Problem) {
        self.record(
            key,
            uid,
            EventType::Warning,
            p.reason.as_str(),
            p.message.clone(),
        );
    }

    fn record(
        &self,
        key: &ServiceKey,
        uid: Option<String>,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        tracing::warn!(service = %key, reason, "{note}");
        let reference = ObjectReference {
            api_version: Some("v1".to_owned()),
            kind: Some("Service".to_owned()),
            namespace: Some(key.namespace.clone()),
            name: Some(key.name.clone()),
            uid,
            ..ObjectReference::default()
        };
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: "Allocate".to_owned(),
            secondary: None,
        };
        // One recorder per Event: each distinct problem is sent once, so there is no series to
        // continue. Events are writes too: they wait for the same limiter.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let key = key.clone();
        let limiter = self.limiter.clone();
        tokio::spawn(async move {
            limiter.until_ready().await;
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(service = %key, error = %e, "could not record Event");
            }
        });
    }
}

/// Sends `w` unless the leadership ended.
async fn send(client: Client, active: Active, write: Write) -> Written {
    let result = match &write {
        Write::Service { key, rv, ips } => write_service(&client, &active, key, rv, ips).await,
        Write::Pool { name, rv, status } => write_pool(&client, &active, name, rv, status).await,
    };
    Written { write, result }
}

/// The digest of what a plan reads: per Service the fields the rules look at (not its
/// resourceVersion, so an unrelated change such as an agent's condition does not count), the
/// pools' specs and the namespaces' labels. A sum of per-object hashes, so the store's order
/// does not matter and a Service's term can be swapped for what the plan will write.
struct Digest {
    /// Pools and namespaces.
    rest: u64,
    /// Per Service: the hash of its fields but its addresses, and its addresses.
    services: Vec<(ServiceKey, u64, Vec<IpAddr>)>,
}

fn hash_of(v: &impl Hash) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

impl Digest {
    fn of(
        pools: &[AddressPool],
        services: &[Service],
        namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Digest {
        let mut rest = hash_of(namespaces);
        for p in pools {
            let spec = serde_json::to_string(&p.spec).unwrap_or_default();
            let created = p
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string());
            rest = rest.wrapping_add(hash_of(&(
                &p.metadata.name,
                created,
                p.metadata.generation,
                spec,
            )));
        }
        let services = services
            .iter()
            .map(|s| {
                let key = ServiceKey {
                    namespace: s.namespace().unwrap_or_default(),
                    name: s.name_any(),
                };
                let m = &s.metadata;
                let created = m.creation_timestamp.as_ref().map(|t| t.0.to_string());
                let spec = s.spec.as_ref().map(|sp| {
                    let ports: Vec<(i32, Option<&str>)> = sp
                        .ports
                        .iter()
                        .flatten()
                        .map(|p| (p.port, p.protocol.as_deref()))
                        .collect();
                    hash_of(&(
                        &sp.type_,
                        &sp.load_balancer_class,
                        &sp.load_balancer_ip,
                        &sp.ip_families,
                        &sp.ip_family_policy,
                        &sp.external_traffic_policy,
                        &sp.selector,
                        ports,
                    ))
                });
                let h = hash_of(&(&key, &m.uid, created, &m.labels, &m.annotations, spec));
                (key, h, current_ips(s))
            })
            .collect();
        Digest { rest, services }
    }

    /// The digest with the addresses in `planned` in place of the Services' own.
    fn sum(&self, planned: &HashMap<ServiceKey, &[IpAddr]>) -> u64 {
        self.services.iter().fold(self.rest, |acc, (key, h, ips)| {
            let ips = planned.get(key).copied().unwrap_or(ips);
            acc.wrapping_add(hash_of(&(h, ips)))
        })
    }
}

async fn write_pool(
    client: &Client,
    active: &Active,
    name: &str,
    rv: &str,
    status: &AddressPoolStatus,
) -> Result<(), WriteError> {
    if !active.is_active() {
        return Err(WriteError::NotActive);
    }
    let patch = json!({
        "metadata": {"resourceVersion": rv},
        "status": status,
    });
    let api: Api<AddressPool> = Api::all(client.clone());
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(WriteError::Conflict(name.into())),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(WriteError::Api(format!("pool {name}"), e)),
    }
}

/// Writes `ips` as `key`'s addresses over resourceVersion `rv` (merge patch).
async fn write_service(
    client: &Client,
    active: &Active,
    key: &ServiceKey,
    rv: &str,
    ips: &[IpAddr],
) -> Result<(), WriteError> {
    if !active.is_active() {
        return Err(WriteError::NotActive);
    }
    let ingress: Vec<_> = ips
        .iter()
        .map(|ip| json!({"ip": ip.to_string(), "ipMode": "VIP"}))
        .collect();
    let ingress = if ingress.is_empty() {
        serde_json::Value::Null
    } else {
        json!(ingress)
    };
    let patch = json!({
        "metadata": {"resourceVersion": rv},
        "status": {"loadBalancer": {"ingress": ingress}},
    });
    let api: Api<Service> = Api::namespaced(client.clone(), &key.namespace);
    match api
        .patch_status(&key.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(service = %key, ?ips, "addresses written");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Err(WriteError::Conflict(key.to_string())),
        // Deleted meanwhile: nothing to do.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(WriteError::Api(key.to_string(), e)),
    }
}

use crate::ipam::alloc::current_ips;

fn set_ips(s: &mut Service, ips: &[IpAddr]) {
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    let status = s.status.get_or_insert_with(ServiceStatus::default);
    let lb = status
        .load_balancer
        .get_or_insert_with(LoadBalancerStatus::default);
    lb.ingress = (!ips.is_empty()).then(|| {
        ips.iter()
            .map(|ip| LoadBalancerIngress {
                ip: Some(ip.to_string()),
                ip_mode: Some("VIP".to_owned()),
                ..LoadBalancerIngress::default()
            })
            .collect()
    });
}

async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Watches Namespaces (labels only matter) into a store; the receiver is bumped on every
/// change, the flag set once listed. The task ends when aborted.
fn watch_namespaces(
    client: Client,
) -> (
    Store<Namespace>,
    watch::Receiver<u64>,
    Arc<AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    let (reader, writer) = reflector::store::<Namespace>();
    let (tx, rx) = watch::channel(0u64);
    let listed = Arc::new(AtomicBool::new(false));
    let flag = listed.clone();
    let api: Api<Namespace> = Api::all(client);
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default())
            .modify(|n: &mut Namespace| {
                n.managed_fields_mut().clear();
                n.spec = None;
            })
            .default_backoff()
            .reflect(writer);
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::InitDone) => {
                    flag.store(true, Ordering::Release);
                    tx.send_modify(|g| *g = g.wrapping_add(1));
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                    tx.send_modify(|g| *g = g.wrapping_add(1));
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "namespaces watch"),
            }
        }
    });
    (reader, rx, listed, task)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceSpec;

    use super::*;

    #[test]
    fn the_write_quota_spaces_writes_evenly_below_the_flag() {
        for qps in [1u32, 20, 100, 1000] {
            let q = write_quota(NonZeroU32::new(qps).expect("non-zero"));
            assert_eq!(q.burst_size(), NonZeroU32::MIN, "no burst at {qps}");
            let per_s = 1.0 / q.replenish_interval().as_secs_f64();
            assert!(
                per_s <= f64::from(qps) && per_s >= f64::from(qps) * 0.9,
                "{per_s} writes/s for --write-qps {qps}"
            );
        }
    }

    fn svc(class: Option<&str>, ip: Option<&str>) -> Service {
        let mut s = Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                load_balancer_class: class.map(String::from),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        if let Some(ip) = ip {
            set_ips(&mut s, &[ip.parse().expect("ip")]);
        }
        s
    }

    fn scope(classless: bool) -> ipam::AllocationScope {
        ipam::AllocationScope {
            class: "announcer.dev/l2".into(),
            classless,
        }
    }

    #[test]
    fn a_pending_classless_service_nobody_serves_is_told_why() {
        assert!(unserved_classless(&svc(None, None), &scope(false), &[]));
        let note = not_allocated_note("announcer.dev/l2");
        assert!(note.contains("<pending>") && note.contains("loadBalancerClass: announcer.dev/l2"));
        assert!(note.contains("--classless") && note.contains("classOnly: false"));
    }

    #[test]
    fn no_pending_event_when_someone_serves_the_classless_service() {
        // We serve class-less Services.
        assert!(!unserved_classless(&svc(None, None), &scope(true), &[]));
        // Another announcer (its allocator) will.
        assert!(!unserved_classless(
            &svc(None, None),
            &scope(false),
            &[OtherAnnouncer::MetalLb]
        ));
        // It has an address already, or is of a class.
        assert!(!unserved_classless(
            &svc(None, Some("10.0.0.1")),
            &scope(false),
            &[]
        ));
        assert!(!unserved_classless(
            &svc(Some("announcer.dev/l2"), None),
            &scope(false),
            &[]
        ));
    }
}

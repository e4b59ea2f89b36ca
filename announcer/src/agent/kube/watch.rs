//! The agent's view of the cluster: reflector-backed watches, never polling.
//!
//! Why watches only: API-server load must grow with the rate of change, not with the number
//! of agents × objects × polls. Each resource is listed once and then watched
//! (`kube::runtime::watcher`, which resumes from the last `resourceVersion` and relists on
//! `410 Gone`). A watch that fails is replaced after a jittered exponential backoff
//! ([`RetryBackoff`]: 250 ms doubling to 5 s, each wait drawn at random from the upper half of
//! its step), so that after an outage a struggling API server is not hammered by every node at
//! once, in lockstep.
//!
//! What is watched: Services and EndpointSlices in all namespaces, Nodes, the node Leases
//! in the agent's namespace (by label), which also carry each node's heartbeat public key, and
//! the `AddressPool`s (placement, and the allocator's input). The stores are read by
//! [`crate::placement::eligibility::plan`];
//! [`Watches::changed`] says when to recompute; [`Watches::healthy`] is false while any watch
//! is failing (the election core counts it as "cannot reach the API server"; the pools' watch
//! does not count, because a cluster without the `AddressPool` CRD, or an API server without
//! it, must work as before: its store then stays empty); Lease changes
//! also arrive one by one ([`LeaseEvent`]) because the election core wants each Lease's
//! changes, not just the latest set.

use std::{
    collections::BTreeMap,
    fmt::Debug,
    hash::Hash,
    pin::pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    runtime::{
        reflector::{self, ObjectRef, Store, store::WriterDropped},
        watcher,
    },
};
use serde::de::DeserializeOwned;
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
};

use super::plan_feed::{self, SharedPlan};
use crate::{
    agent::shutdown::Shutdown,
    ipam::AddressPool,
    placement::{eligibility::SERVICE_NAME_LABEL, planner::Planned},
};

/// One of the watched resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WatchedResource {
    /// Services, all namespaces.
    Services,
    /// EndpointSlices, all namespaces.
    EndpointSlices,
    /// Nodes.
    Nodes,
    /// Node Leases in the agent's namespace.
    Leases,
    /// `AddressPool`s (cluster-scoped). Optional: see [`WatchedResource::required`].
    Pools,
}

impl WatchedResource {
    /// Every source, in a fixed order.
    pub const ALL: [WatchedResource; 5] = [
        WatchedResource::Services,
        WatchedResource::EndpointSlices,
        WatchedResource::Nodes,
        WatchedResource::Leases,
        WatchedResource::Pools,
    ];

    /// Whether the agent is healthy only once this watch has listed and while it works. The
    /// pools' is not required: without the CRD (or on an API server that has none) the
    /// agent announces what another IPAM assigned, as before pools existed.
    pub const fn required(self) -> bool {
        !matches!(self, WatchedResource::Pools)
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The resource's plural name, for logs and metric labels.
    pub const fn name(self) -> &'static str {
        match self {
            WatchedResource::Services => "services",
            WatchedResource::EndpointSlices => "endpointslices",
            WatchedResource::Nodes => "nodes",
            WatchedResource::Leases => "leases",
            WatchedResource::Pools => "addresspools",
        }
    }
}

/// How often each watch failed and was replaced, for metrics.
#[derive(Debug, Default)]
pub struct WatchCounters {
    /// Per [`WatchedResource`] (in [`WatchedResource::ALL`] order): watches replaced after an error or the end
    /// of their stream.
    restarts: [AtomicU64; WatchedResource::ALL.len()],
    /// Per source: errors from the API server or the connection.
    errors: [AtomicU64; WatchedResource::ALL.len()],
    /// Per source: changes that planned alike (stored, no re-plan).
    alike: [AtomicU64; WatchedResource::ALL.len()],
}

impl WatchCounters {
    /// `(source, restarts, errors, changes that planned alike)` for every source.
    pub fn snapshot(&self) -> [(WatchedResource, u64, u64, u64); WatchedResource::ALL.len()] {
        WatchedResource::ALL.map(|s| {
            (
                s,
                self.restarts[s.index()].load(Ordering::Relaxed),
                self.errors[s.index()].load(Ordering::Relaxed),
                self.alike[s.index()].load(Ordering::Relaxed),
            )
        })
    }
}

/// The state of one watch, for the health flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchState {
    /// Initial list not done yet.
    Starting,
    /// Listed, and the last thing it did succeeded.
    Ok,
    /// The last thing it did failed.
    Failing,
}

/// The health of all watches: healthy when every watch has listed and none is failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthBoard {
    states: [WatchState; WatchedResource::ALL.len()],
}

impl Default for HealthBoard {
    fn default() -> Self {
        HealthBoard {
            states: [WatchState::Starting; WatchedResource::ALL.len()],
        }
    }
}

impl HealthBoard {
    /// Records a successful event: `synced` when the event completes a (re)list. A starting
    /// watch becomes Ok only once synced; a failing one on any success. Returns the old state.
    pub fn success(&mut self, s: WatchedResource, synced: bool) -> WatchState {
        let old = self.states[s.index()];
        if old == WatchState::Failing || synced {
            self.states[s.index()] = WatchState::Ok;
        }
        old
    }

    /// Records a failure. Returns the old state.
    pub fn failure(&mut self, s: WatchedResource) -> WatchState {
        std::mem::replace(&mut self.states[s.index()], WatchState::Failing)
    }

    /// The state of one watch.
    pub fn state(&self, s: WatchedResource) -> WatchState {
        self.states[s.index()]
    }

    /// Whether all required watches ([`WatchedResource::required`]) are listed and none is failing.
    pub fn healthy(&self) -> bool {
        WatchedResource::ALL
            .iter()
            .filter(|s| s.required())
            .all(|s| self.states[s.index()] == WatchState::Ok)
    }
}

/// A node Lease changed (as seen by the store after the event).
#[derive(Clone, Debug, PartialEq)]
pub enum LeaseEvent {
    /// Added, or modified (new `resourceVersion`).
    Applied(Arc<Lease>),
    /// Deleted (or absent from a relist); the last version seen.
    Deleted(Arc<Lease>),
}

/// What changed between the last known Leases (`known`, by name) and the store's `now`;
/// updates `known`. A Lease is applied when new or its `resourceVersion` changed, deleted when
/// gone. Sorted by name, so the same change always gives the same events.
pub fn diff_leases(
    known: &mut BTreeMap<String, Arc<Lease>>,
    now: Vec<Arc<Lease>>,
) -> Vec<LeaseEvent> {
    let next: BTreeMap<String, Arc<Lease>> = now.into_iter().map(|l| (l.name_any(), l)).collect();
    let mut out: Vec<(String, LeaseEvent)> = known
        .iter()
        .filter(|(name, _)| !next.contains_key(*name))
        .map(|(name, old)| (name.clone(), LeaseEvent::Deleted(old.clone())))
        .collect();
    for (name, l) in &next {
        let same = known
            .get(name)
            .is_some_and(|old| old.resource_version() == l.resource_version());
        if !same {
            out.push((name.clone(), LeaseEvent::Applied(l.clone())));
        }
    }
    *known = next;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, e)| e).collect()
}

/// Turns the Lease watch's events into [`LeaseEvent`]s, one changed Lease at a time.
///
/// Why not [`diff_leases`] after every event: that rebuilt a map of every Lease for each
/// renewal, O(N) per event with N renewals every few seconds, so O(N²) per second per agent
/// (at 1,000 nodes a third of a core on the watch runtime). A watch event names the one
/// object that changed; only a (re)list needs the whole diff, to report the Leases deleted
/// while the watch was down.
#[derive(Debug, Default)]
pub struct LeaseTracker {
    /// Every Lease reported so far, by name.
    known: BTreeMap<String, Arc<Lease>>,
    /// The Leases of a (re)list in progress (between `Init` and `InitDone`).
    relist: Option<Vec<Arc<Lease>>>,
}

impl LeaseTracker {
    /// What `ev` changed: a Lease applied with a new `resourceVersion`, or deleted; at the end
    /// of a (re)list, everything that differs from what was known ([`diff_leases`]).
    pub fn event(&mut self, ev: &watcher::Event<Lease>) -> Vec<LeaseEvent> {
        match ev {
            watcher::Event::Apply(l) => {
                let name = l.name_any();
                let same = self
                    .known
                    .get(&name)
                    .is_some_and(|old| old.resource_version() == l.resource_version());
                if same {
                    return Vec::new();
                }
                let l = Arc::new(l.clone());
                self.known.insert(name, l.clone());
                vec![LeaseEvent::Applied(l)]
            }
            watcher::Event::Delete(l) => match self.known.remove(&l.name_any()) {
                Some(old) => vec![LeaseEvent::Deleted(old)],
                None => Vec::new(),
            },
            watcher::Event::Init => {
                self.relist = Some(Vec::new());
                Vec::new()
            }
            watcher::Event::InitApply(l) => {
                self.relist
                    .get_or_insert_with(Vec::new)
                    .push(Arc::new(l.clone()));
                Vec::new()
            }
            watcher::Event::InitDone => {
                let listed = self.relist.take().unwrap_or_default();
                diff_leases(&mut self.known, listed)
            }
        }
    }
}

/// The running watches.
pub struct Watches {
    /// Services, all namespaces.
    pub services: Store<Service>,
    /// EndpointSlices, all namespaces (only those linked to a Service).
    pub slices: Store<EndpointSlice>,
    /// Nodes (without `status.images`).
    pub nodes: Store<Node>,
    /// Node Leases in the agent's namespace.
    pub leases: Store<Lease>,
    /// `AddressPool`s; empty while the CRD is not installed.
    pub pools: Store<AddressPool>,
    /// Bumped after every change to the plan's inputs: the Service, EndpointSlice, Node and
    /// AddressPool stores (adds, updates, deletes, completed relists). Changes coalesce: after
    /// `changed().await`, recompute the plan from the stores. (Lease renewals, every few
    /// seconds per node, do not bump it: they come as [`Watches::lease_events`].)
    pub changed: watch::Receiver<u64>,
    /// False while any watch has not listed yet or is failing.
    pub healthy: watch::Receiver<bool>,
    /// Node Lease changes, one by one.
    pub lease_events: mpsc::UnboundedReceiver<LeaseEvent>,
    /// The watch tasks: they end on shutdown.
    pub tasks: Vec<JoinHandle<()>>,
    /// Restarts and errors per watch.
    pub counters: Arc<WatchCounters>,
    /// The placement, kept up to date by the watch tasks once started
    /// ([`PlanFeed::start`](super::plan_feed::PlanFeed::start)).
    pub plan: SharedPlan,
}

/// What the watch tasks report into: the health board and flag, the change signal, the
/// counters.
struct WatchSignals {
    board: Mutex<HealthBoard>,
    healthy: watch::Sender<bool>,
    changed: watch::Sender<u64>,
    counters: Arc<WatchCounters>,
}

impl WatchSignals {
    fn success(&self, s: WatchedResource, synced: bool) {
        let mut b = self.board.lock().unwrap_or_else(|e| e.into_inner());
        if b.success(s, synced) == WatchState::Failing {
            tracing::info!(watch = ?s, "watch recovered");
        }
        let h = b.healthy();
        self.healthy
            .send_if_modified(|v| std::mem::replace(v, h) != h);
    }

    fn failure(&self, s: WatchedResource, e: &watcher::Error) {
        self.counters.errors[s.index()].fetch_add(1, Ordering::Relaxed);
        let mut b = self.board.lock().unwrap_or_else(|e| e.into_inner());
        let old = b.failure(s);
        if !s.required() {
            // Not installed is normal here: say so once, not every retry.
            if old != WatchState::Failing {
                tracing::info!(watch = ?s, error = %e, "cannot watch AddressPools (is the CRD installed?); announcing without pools");
            }
            return;
        }
        tracing::warn!(watch = ?s, error = %e, "watch failed; retrying with backoff");
        self.healthy
            .send_if_modified(|v| std::mem::replace(v, false));
    }
}

impl Watches {
    /// Starts the watches. They stop when `shutdown` fires (or its trigger is dropped). `lease_selector` is a label selector for the node Leases (see
    /// [`super::node_lease::selector`]) in `namespace`. Must be called within a tokio
    /// runtime.
    pub fn start(
        client: Client,
        namespace: &str,
        lease_selector: &str,
        shutdown: Shutdown,
    ) -> Watches {
        let (healthy_tx, healthy) = watch::channel(false);
        let (changed_tx, changed) = watch::channel(0u64);
        let shared = Arc::new(WatchSignals {
            board: Mutex::new(HealthBoard::default()),
            healthy: healthy_tx,
            changed: changed_tx,
            counters: Arc::default(),
        });
        let (lease_tx, lease_events) = mpsc::unbounded_channel();
        let cfg = watcher::Config::default;
        let ctx = (&shared, &shutdown);
        let mut tasks = Vec::new();
        let plan = SharedPlan::default();
        // Feeds the planner each event its store applied.
        fn feeds<K>(plan: &SharedPlan, store: &Store<K>) -> impl FnMut(&watcher::Event<K>) + use<K>
        where
            K: Planned + Resource + Clone,
            K::DynamicType: Default + Eq + Hash + Clone,
        {
            let (plan, store) = (plan.clone(), store.clone());
            move |ev| {
                plan_feed::lock(&plan).feed(ev, &store);
            }
        }

        let (services, w) = reflector::store();
        tasks.push(spawn(
            WatchedResource::Services,
            Api::all(client.clone()),
            cfg(),
            w,
            ctx,
            (|_: &mut Service| {}, services_plan_alike, || {}),
            feeds(&plan, &services),
        ));

        let (slices, w) = reflector::store();
        let c = cfg().labels(SERVICE_NAME_LABEL);
        tasks.push(spawn(
            WatchedResource::EndpointSlices,
            Api::all(client.clone()),
            c,
            w,
            ctx,
            (|_: &mut EndpointSlice| {}, never_alike, || {}),
            feeds(&plan, &slices),
        ));

        let (nodes, w) = reflector::store();
        let strip_images = |n: &mut Node| {
            if let Some(s) = n.status.as_mut() {
                s.images = None;
            }
        };
        tasks.push(spawn(
            WatchedResource::Nodes,
            Api::all(client.clone()),
            cfg(),
            w,
            ctx,
            (strip_images, nodes_plan_alike, || {}),
            feeds(&plan, &nodes),
        ));

        let (leases, w) = reflector::store::<Lease>();
        let mut tracker = LeaseTracker::default();
        let feed = move |ev: &watcher::Event<Lease>| {
            for e in tracker.event(ev) {
                // The receiver may be gone (nobody wants them): not an error.
                let _ = lease_tx.send(e);
            }
        };
        let c = cfg().labels(lease_selector);
        tasks.push(spawn(
            WatchedResource::Leases,
            Api::namespaced(client.clone(), namespace),
            c,
            w,
            ctx,
            (|_: &mut Lease| {}, never_alike, || {}),
            feed,
        ));

        let (pools, w) = reflector::store::<AddressPool>();
        tasks.push(spawn(
            WatchedResource::Pools,
            Api::all(client.clone()),
            cfg(),
            w,
            ctx,
            (|_: &mut AddressPool| {}, never_alike, || {}),
            feeds(&plan, &pools),
        ));

        Watches {
            services,
            slices,
            nodes,
            leases,
            pools,
            changed,
            healthy,
            lease_events,
            tasks,
            counters: shared.counters.clone(),
            plan,
        }
    }

    /// Waits until every store has completed its initial list.
    pub async fn synced(&self) -> Result<(), WriterDropped> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.leases.wait_until_ready().await
    }
}

/// Spawns one watch: `modify` trims each object before it is stored; `same` says whether a
/// new version of an object plans exactly like the stored one (then it is stored but nobody
/// re-plans); `after` runs after each change has been applied to the store, and `feed` after
/// every event has (the planner's).
fn spawn<K>(
    source: WatchedResource,
    api: Api<K>,
    cfg: watcher::Config,
    writer: reflector::store::Writer<K>,
    (shared, shutdown): (&Arc<WatchSignals>, &Shutdown),
    (modify, same, after): (
        impl FnMut(&mut K) + Send + 'static,
        PlanAlike<K>,
        impl FnMut() + Send + 'static,
    ),
    feed: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    tokio::spawn(drive(
        source,
        (api, cfg, writer),
        shared.clone(),
        shutdown.clone(),
        (modify, same, after),
        feed,
    ))
}

/// Whether two versions of an object plan alike: a change between them needs no re-plan.
type PlanAlike<K> = fn(&K, &K) -> bool;

/// Every version counts as a change (EndpointSlices, Leases, pools: what changes in them is
/// what the agent reads).
fn never_alike<K>(_: &K, _: &K) -> bool {
    false
}

/// Two versions of a Service that differ only in `status.conditions` (the `Announced`
/// condition every agent writes on a takeover) and the `resourceVersion` plan alike. Without
/// this, each condition write re-planned every VIP on every agent.
fn services_plan_alike(old: &Service, new: &Service) -> bool {
    let bare = |s: &Service| {
        let mut s = s.clone();
        s.metadata.resource_version = None;
        if let Some(st) = s.status.as_mut() {
            st.conditions = None;
        }
        s
    };
    bare(old) == bare(new)
}

/// Two versions of a Node that differ only in the kubelet's status heartbeat
/// (`lastHeartbeatTime` of its conditions, every 5 min unchanged) and the `resourceVersion`
/// plan alike.
fn nodes_plan_alike(old: &Node, new: &Node) -> bool {
    let bare = |n: &Node| {
        let mut n = n.clone();
        n.metadata.resource_version = None;
        for c in n
            .status
            .as_mut()
            .and_then(|st| st.conditions.as_mut())
            .into_iter()
            .flatten()
        {
            c.last_heartbeat_time = None;
        }
        n
    };
    bare(old) == bare(new)
}

/// The first backoff step between a failed watch and the fresh one that replaces it.
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// The largest step: an API server that is back is noticed within this.
const RETRY_MAX: Duration = crate::election::defaults::WATCH_RETRY_MAX;

/// The waits between a failed watch and its replacement: a step doubling from 250 ms
/// (`RETRY_FIRST`) to 5 s (`RETRY_MAX`), and each wait drawn uniformly from the upper half of
/// its step ("equal jitter").
///
/// Why jitter: every node's watches fail together when the API server goes away, and without
/// it they would retry together too, at the same instants, on every step of the backoff.
/// Why the upper half rather than around the step: the step stays the longest wait, so a
/// recovered API server is still noticed within 5 s. (kube-runtime's
/// `DefaultBackoff` is jittered too, but waits 0.8 s to 30 s; that would change when a
/// recovery is noticed.)
#[derive(Clone, Debug)]
pub struct RetryBackoff {
    step: Duration,
}

impl Default for RetryBackoff {
    fn default() -> Self {
        RetryBackoff { step: RETRY_FIRST }
    }
}

impl RetryBackoff {
    /// The next wait, drawn with `rng`; the step after it is twice as long (up to the cap).
    pub fn next_wait(&mut self, rng: &mut impl rand::Rng) -> Duration {
        let half = self.step / 2;
        let wait = half + half.mul_f64(rng.random::<f64>());
        self.step = (self.step * 2).min(RETRY_MAX);
        wait
    }

    /// Back to the first step (after a watch has listed again).
    pub fn reset(&mut self) {
        self.step = RETRY_FIRST;
    }
}

/// Runs one watch until shutdown. After an error the watcher is not resumed but replaced by a
/// fresh one (after a backoff): a resumed watch that finds nothing new emits nothing, so the
/// health flag would never learn that the API server is back. The fresh watcher re-lists, its
/// end-of-list event marks the watch healthy again, and the store is swapped atomically, so
/// objects deleted meanwhile disappear too.
async fn drive<K>(
    source: WatchedResource,
    (api, cfg, mut writer): (Api<K>, watcher::Config, reflector::store::Writer<K>),
    shared: Arc<WatchSignals>,
    mut shutdown: Shutdown,
    (mut modify, same, mut after): (impl FnMut(&mut K), PlanAlike<K>, impl FnMut()),
    mut feed: impl FnMut(&watcher::Event<K>),
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    let mut retry = RetryBackoff::default();
    loop {
        let mut stream = pin!(watcher(api.clone(), cfg.clone()));
        // When this watcher completed its list. A completed list alone does not reset the
        // backoff: a watch refused right after every list (403 on watch, 200 on list) would
        // then relist several times a second forever. The watch has to prove itself: an event
        // after the list, or streaming for [`RETRY_MAX`].
        let mut listed_at: Option<tokio::time::Instant> = None;
        loop {
            let next = tokio::select! {
                biased;
                () = shutdown.recv() => return,
                next = stream.next() => next,
            };
            let ev = match next {
                None => {
                    tracing::warn!(watch = ?source, "watch stream ended; restarting it");
                    break;
                }
                Some(Err(e)) => {
                    shared.failure(source, &e);
                    break;
                }
                Some(Ok(ev)) => ev,
            };
            let ev = ev.modify(|o: &mut K| {
                o.managed_fields_mut().clear();
                modify(o);
            });
            let alike = match &ev {
                watcher::Event::Apply(o) => writer
                    .as_reader()
                    .get(&ObjectRef::from_obj(o))
                    .is_some_and(|stored| same(&stored, o)),
                _ => false,
            };
            writer.apply_watcher_event(&ev);
            feed(&ev);
            // `Init` only announces a (re)list about to start, before any request: no sign
            // that the API server answers, so it must not clear a failure.
            let answered = !matches!(ev, watcher::Event::Init);
            let (event, synced) = match ev {
                watcher::Event::Apply(_) | watcher::Event::Delete(_) => (true, false),
                watcher::Event::InitDone => (true, true),
                watcher::Event::Init | watcher::Event::InitApply(_) => (false, false),
            };
            if answered {
                shared.success(source, synced);
            }
            if synced {
                listed_at = Some(tokio::time::Instant::now());
            } else if event && listed_at.is_some() {
                retry.reset();
            }
            if alike {
                shared.counters.alike[source.index()].fetch_add(1, Ordering::Relaxed);
            }
            if event && !alike {
                after();
                let signal = match source {
                    WatchedResource::Services
                    | WatchedResource::EndpointSlices
                    | WatchedResource::Nodes
                    | WatchedResource::Pools => Some(&shared.changed),
                    WatchedResource::Leases => None,
                };
                if let Some(s) = signal {
                    s.send_modify(|g| *g = g.wrapping_add(1));
                }
            }
        }
        if listed_at.is_some_and(|t| t.elapsed() >= RETRY_MAX) {
            retry.reset();
        }
        let wait = retry.next_wait(&mut rand::rng());
        tokio::select! {
            () = shutdown.recv() => return,
            () = tokio::time::sleep(wait) => {}
        }
        shared.counters.restarts[source.index()].fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn service(rv: &str, ingress_ip: &str, condition_message: &str) -> Service {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "shop", "resourceVersion": rv},
            "spec": {"type": "LoadBalancer"},
            "status": {
                "loadBalancer": {"ingress": [{"ip": ingress_ip}]},
                "conditions": [{
                    "type": "announcer.dev/Announced", "status": "True", "reason": "Announced",
                    "message": condition_message, "lastTransitionTime": "2026-12-04T20:00:00Z",
                }],
            },
        }))
        .expect("a Service")
    }

    #[test]
    fn a_services_announced_condition_write_needs_no_replan() {
        let before = service("1", "192.0.2.10", "192.0.2.10 by node-a on eth0");
        let after = service("2", "192.0.2.10", "192.0.2.10 by node-b on eth0");
        assert!(services_plan_alike(&before, &after));
    }

    #[test]
    fn a_services_new_ingress_address_is_replanned() {
        let before = service("1", "192.0.2.10", "");
        let after = service("2", "192.0.2.11", "");
        assert!(!services_plan_alike(&before, &after));
    }

    fn node(rv: &str, ready: &str, heartbeat: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "node-a", "resourceVersion": rv},
            "status": {"conditions": [{
                "type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": "2026-12-04T20:00:00Z",
            }]},
        }))
        .expect("a Node")
    }

    #[test]
    fn a_nodes_status_heartbeat_needs_no_replan() {
        let before = node("1", "True", "2026-12-04T20:00:00Z");
        let after = node("2", "True", "2026-12-04T20:05:00Z");
        assert!(nodes_plan_alike(&before, &after));
    }

    #[test]
    fn a_node_turning_not_ready_is_replanned() {
        let before = node("1", "True", "2026-12-04T20:00:00Z");
        let after = node("2", "False", "2026-12-04T20:00:40Z");
        assert!(!nodes_plan_alike(&before, &after));
    }

    #[test]
    fn retry_waits_double_to_the_cap_each_drawn_from_the_upper_half_of_its_step() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut b = RetryBackoff::default();
        for ms in [250, 500, 1000, 2000, 4000, 5000, 5000, 5000] {
            let step = Duration::from_millis(ms);
            let wait = b.next_wait(&mut rng);
            assert!(
                step / 2 <= wait && wait <= step,
                "{wait:?} outside [{:?}, {step:?}]",
                step / 2
            );
        }
        b.reset();
        assert!(
            b.next_wait(&mut rng) <= RETRY_FIRST,
            "reset to the first step"
        );
    }

    #[test]
    fn two_nodes_do_not_retry_in_lockstep() {
        use rand::SeedableRng;
        let waits = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut b = RetryBackoff::default();
            (0..8).map(|_| b.next_wait(&mut rng)).collect::<Vec<_>>()
        };
        let (a, b) = (waits(1), waits(2));
        assert!(
            a.iter().zip(&b).all(|(x, y)| x != y),
            "the same wait on some step: {a:?} vs {b:?}"
        );
    }

    fn lease(name: &str, rv: &str) -> Arc<Lease> {
        Arc::new(Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: None,
        })
    }

    fn names(evs: &[LeaseEvent]) -> Vec<String> {
        evs.iter()
            .map(|e| match e {
                LeaseEvent::Applied(l) => {
                    format!("+{}@{}", l.name_any(), l.resource_version().unwrap())
                }
                LeaseEvent::Deleted(l) => format!("-{}", l.name_any()),
            })
            .collect()
    }

    #[test]
    fn lease_diff_reports_adds_changes_and_deletes_once() {
        let mut known = BTreeMap::new();
        let evs = diff_leases(&mut known, vec![lease("b", "1"), lease("a", "1")]);
        assert_eq!(names(&evs), ["+a@1", "+b@1"]);
        // Nothing changed: nothing reported (a relist of the same objects is silent).
        assert!(diff_leases(&mut known, vec![lease("a", "1"), lease("b", "1")]).is_empty());
        let evs = diff_leases(&mut known, vec![lease("b", "2"), lease("c", "1")]);
        assert_eq!(names(&evs), ["-a", "+b@2", "+c@1"]);
        let evs = diff_leases(&mut known, vec![]);
        assert_eq!(names(&evs), ["-b", "-c"]);
        assert!(known.is_empty());
    }

    fn tracked(t: &mut LeaseTracker, evs: Vec<watcher::Event<Lease>>) -> Vec<String> {
        let out: Vec<LeaseEvent> = evs.iter().flat_map(|e| t.event(e)).collect();
        names(&out)
    }

    fn owned(l: Arc<Lease>) -> Lease {
        Arc::unwrap_or_clone(l)
    }

    #[test]
    fn lease_tracker_reports_a_renewal_and_not_a_repeat() {
        let mut t = LeaseTracker::default();
        let a1 = || watcher::Event::Apply(owned(lease("a", "1")));
        assert_eq!(tracked(&mut t, vec![a1()]), ["+a@1"]);
        assert!(tracked(&mut t, vec![a1()]).is_empty());
        let a2 = watcher::Event::Apply(owned(lease("a", "2")));
        assert_eq!(tracked(&mut t, vec![a2]), ["+a@2"]);
    }

    #[test]
    fn lease_tracker_reports_a_delete_of_a_known_lease_only() {
        let mut t = LeaseTracker::default();
        tracked(&mut t, vec![watcher::Event::Apply(owned(lease("a", "1")))]);
        let del = |n| watcher::Event::Delete(owned(lease(n, "9")));
        assert_eq!(tracked(&mut t, vec![del("a")]), ["-a"]);
        assert!(tracked(&mut t, vec![del("b")]).is_empty());
    }

    #[test]
    fn lease_tracker_relist_reports_what_changed_while_the_watch_was_down() {
        let mut t = LeaseTracker::default();
        tracked(
            &mut t,
            vec![
                watcher::Event::Apply(owned(lease("a", "1"))),
                watcher::Event::Apply(owned(lease("b", "1"))),
            ],
        );
        let relist = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(owned(lease("b", "2"))),
            watcher::Event::InitApply(owned(lease("c", "1"))),
        ];
        // Nothing until the list is complete.
        assert!(tracked(&mut t, relist).is_empty());
        assert_eq!(
            tracked(&mut t, vec![watcher::Event::InitDone]),
            ["-a", "+b@2", "+c@1"]
        );
    }

    #[test]
    fn health_needs_every_watch_listed_and_none_failing() {
        let mut b = HealthBoard::default();
        assert!(!b.healthy());
        for s in WatchedResource::ALL {
            // Events before the list completes do not make a watch healthy.
            b.success(s, false);
            assert_eq!(b.state(s), WatchState::Starting);
            b.success(s, true);
        }
        assert!(b.healthy());
        assert_eq!(b.failure(WatchedResource::Nodes), WatchState::Ok);
        assert!(!b.healthy());
        // The next successful event of the failed watch restores health.
        assert_eq!(
            b.success(WatchedResource::Nodes, false),
            WatchState::Failing
        );
        assert!(b.healthy());
    }

    /// A stub API server: lists answer from `items` by path (empty otherwise), watches hang
    /// open without events (a quiet cluster).
    async fn quiet_cluster(items: Vec<(&'static str, serde_json::Value)>) -> Client {
        use axum::{Router, body::Body, http::Uri, response::Response};
        let items = Arc::new(items);
        let app = Router::new().fallback(move |uri: Uri| {
            let items = items.clone();
            async move {
                if uri.query().is_some_and(|q| q.contains("watch=true")) {
                    let never =
                        futures::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
                    return Response::new(Body::from_stream(never));
                }
                let listed: Vec<_> = items
                    .iter()
                    .filter(|(p, _)| *p == uri.path())
                    .map(|(_, v)| v.clone())
                    .collect();
                let list = serde_json::json!({
                    "apiVersion": "v1", "kind": "List",
                    "metadata": {"resourceVersion": "10"}, "items": listed,
                });
                Response::new(Body::from(list.to_string()))
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    #[tokio::test]
    async fn listing_fills_the_stores_reports_leases_and_turns_healthy() {
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "announcer-node-b", "namespace": "announcer", "resourceVersion": "7"},
            "spec": {"holderIdentity": "b", "leaseDurationSeconds": 10},
        });
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "b", "resourceVersion": "3"},
            "status": {"images": [{"names": ["big/image:1"], "sizeBytes": 1}]},
        });
        let client = quiet_cluster(vec![
            (
                "/apis/coordination.k8s.io/v1/namespaces/announcer/leases",
                lease,
            ),
            ("/api/v1/nodes", node),
        ])
        .await;
        let (_stop, shutdown) = crate::agent::shutdown::channel();
        let mut w = Watches::start(client, "announcer", "a=b", shutdown);
        w.synced().await.unwrap();
        w.healthy.wait_for(|h| *h).await.unwrap();
        match w.lease_events.recv().await.unwrap() {
            LeaseEvent::Applied(l) => assert_eq!(l.name_any(), "announcer-node-b"),
            other => panic!("expected the listed Lease, got {other:?}"),
        }
        let nodes = w.nodes.state();
        assert_eq!(nodes.len(), 1);
        assert_eq!(
            nodes[0].status.as_ref().unwrap().images,
            None,
            "images stripped"
        );
        assert!(*w.changed.borrow() > 0);
    }

    #[tokio::test]
    async fn watches_report_unhealthy_without_an_api_server_and_stop_on_shutdown() {
        let cfg = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = Client::try_from(cfg).unwrap();
        let (stop, shutdown) = crate::agent::shutdown::channel();
        let mut w = Watches::start(client, "announcer", "a=b", shutdown);
        assert!(!*w.healthy.borrow());
        // Every watch fails to connect, is counted, and is replaced after its backoff.
        let counted = || {
            w.counters
                .snapshot()
                .iter()
                .all(|(_, restarts, errors, _)| *restarts >= 1 && *errors >= 1)
        };
        for _ in 0..200 {
            if counted() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(counted(), "{:?}", w.counters.snapshot());
        stop.fire();
        for t in w.tasks.drain(..) {
            t.await.unwrap();
        }
        assert!(!*w.healthy.borrow());
    }
}

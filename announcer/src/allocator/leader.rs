//! The allocator loop: wait for pools, hold the `announcer-allocator` Lease ([`super::lease`]),
//! and while holding it write what [`crate::ipam::plan`] computes (see the module docs of
//! [`super`] for why it is shaped this way).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::{
    api::core::v1::{Namespace, ObjectReference, Service},
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
use tokio::{sync::watch, time::Instant};

use super::{
    AllocatorArgs,
    backoff::Backoff,
    lease::{Elector, LeaseError, LeaseTimings},
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
    let mut elector = Elector::new(client.clone(), &cfg.namespace, &cfg.identity, cfg.lease);
    loop {
        // Idle: no pools, nothing to do, no requests.
        while pools.state().is_empty() {
            tokio::select! {
                () = stop.recv() => return,
                r = changed.changed() => if r.is_err() { return },
            }
        }
        match elector.try_acquire_or_renew().await {
            Ok(true) => {
                tracing::info!(identity = %cfg.identity, "became the active address allocator");
                let mut leader = Leader::new(&client, &cfg, &services, &pools);
                let end = leader.lead(&mut elector, &mut changed, &mut stop).await;
                if let Err(e) = elector.release().await {
                    tracing::debug!(error = %e, "could not release the allocator Lease");
                }
                match end {
                    End::Stopped => return,
                    End::Lost => tracing::warn!("no longer the active address allocator"),
                    End::NoPools => tracing::info!("no address pools left: allocator idle"),
                }
            }
            Ok(false) => {}
            Err(LeaseError::Conflict) => {}
            Err(e) => tracing::warn!(error = %e, "allocator Lease"),
        }
        let wait = jittered(cfg.lease.renew);
        tokio::select! {
            () = stop.recv() => return,
            () = tokio::time::sleep(wait) => {}
        }
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
}

impl Leader {
    fn new(
        client: &Client,
        cfg: &AllocatorConfig,
        services: &Store<Service>,
        pools: &Store<AddressPool>,
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
        }
    }

    async fn lead(
        &mut self,
        elector: &mut Elector,
        changed: &mut watch::Receiver<u64>,
        stop: &mut Shutdown,
    ) -> End {
        // Namespaces, for the pools' namespaceSelector: watched only while active.
        let (ns_store, ns_changed, ns_listed, ns_task) = watch_namespaces(self.client.clone());
        let _abort = AbortOnDrop(ns_task);
        let mut ns_changed = ns_changed;
        let mut renew_at = Instant::now() + self.cfg.lease.renew;
        let mut retry_at: Option<Instant> = None;
        let mut dirty = true;
        loop {
            if self.pools.state().is_empty() {
                return End::NoPools;
            }
            if !elector.is_active() {
                return End::Lost;
            }
            if dirty && ns_listed.load(Ordering::Acquire) {
                dirty = false;
                self.reconcile(elector, &ns_store).await;
                // Items whose write failed wait on their own backoff (finding 11).
                retry_at = self.next_retry();
            }
            let active_until = elector.active_until().unwrap_or_else(Instant::now);
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
                }
                () = tokio::time::sleep_until(active_until) => return End::Lost,
                () = tokio::time::sleep_until(renew_at) => {
                    match elector.try_acquire_or_renew().await {
                        Ok(true) => renew_at = Instant::now() + self.cfg.lease.renew,
                        Ok(false) => return End::Lost,
                        Err(e) => {
                            tracing::warn!(error = %e, "allocator Lease renewal failed");
                            renew_at = Instant::now() + jittered(Duration::from_secs(1));
                        }
                    }
                }
            }
        }
    }

    /// Recomputes the plan and writes what differs and is due (a failed write waits for its
    /// backoff; a conflict for the watch).
    async fn reconcile(&mut self, elector: &Elector, ns_store: &Store<Namespace>) {
        let namespaces: BTreeMap<String, BTreeMap<String, String>> = ns_store
            .state()
            .iter()
            .map(|n| (n.name_any(), n.labels().clone()))
            .collect();
        let services = self.services_with_pending();
        let pools: Vec<AddressPool> = self.pools.state().iter().map(|p| (**p).clone()).collect();
        let mut plan = ipam::plan(&pools, &services, &namespaces, &self.cfg.scope);
        // A Service in a namespace the Namespaces watch has not shown yet (just created: the
        // two watches race) is judged without its namespace's labels: its addresses still
        // count as taken, but nothing is written or reported for it until the namespace shows.
        plan.services
            .retain(|k, _| namespaces.contains_key(&k.namespace));
        self.report(&plan, &services);
        // The Service writes that are due, at most MAX_CONCURRENT_WRITES in flight.
        let now_i = Instant::now();
        let mut todo = Vec::new();
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
            if !self.service_backoff.due(&key, now_i) {
                continue;
            }
            todo.push((key, s.resource_version().unwrap_or_default(), a.ips.clone()));
        }
        let keys: BTreeSet<ServiceKey> = services
            .iter()
            .map(|s| ServiceKey {
                namespace: s.namespace().unwrap_or_default(),
                name: s.name_any(),
            })
            .collect();
        self.service_backoff.retain(|k| keys.contains(k));
        let client = self.client.clone();
        let results: Vec<_> = futures::stream::iter(todo)
            .map(|(key, rv, ips)| {
                let client = client.clone();
                async move {
                    let r = write_service(&client, elector, &key, &rv, &ips).await;
                    (key, rv, ips, r)
                }
            })
            .buffer_unordered(super::backoff::MAX_CONCURRENT_WRITES)
            .collect()
            .await;
        for (key, rv, ips, r) in results {
            match r {
                Ok(()) => {
                    self.service_backoff.succeeded(&key);
                    self.pending_services.insert(key, (rv, ips));
                }
                Err(WriteError::Conflict(what)) => {
                    tracing::debug!("{what} changed; waiting for the watch")
                }
                Err(WriteError::NotActive) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not write a Service's addresses");
                    self.service_backoff.failed(&key, Instant::now());
                }
            }
        }
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
            if !self.pool_backoff.due(&name, Instant::now()) {
                continue;
            }
            match self.write_pool(elector, &name, &rv, &new).await {
                Ok(()) => {
                    self.pool_backoff.succeeded(&name);
                    self.pending_pools.insert(name, (rv, new));
                }
                Err(WriteError::Conflict(_)) => {}
                Err(WriteError::NotActive) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "could not write a pool's status");
                    self.pool_backoff.failed(&name, Instant::now());
                }
            }
        }
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

    async fn write_pool(
        &self,
        elector: &Elector,
        name: &str,
        rv: &str,
        status: &AddressPoolStatus,
    ) -> Result<(), WriteError> {
        if !elector.is_active() {
            return Err(WriteError::NotActive);
        }
        let patch = json!({
            "metadata": {"resourceVersion": rv},
            "status": status,
        });
        let api: Api<AddressPool> = Api::all(self.client.clone());
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
        // continue.
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        let key = key.clone();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::warn!(service = %key, error = %e, "could not record Event");
            }
        });
    }
}

/// Writes `ips` as `key`'s addresses over resourceVersion `rv` (merge patch).
async fn write_service(
    client: &Client,
    elector: &Elector,
    key: &ServiceKey,
    rv: &str,
    ips: &[IpAddr],
) -> Result<(), WriteError> {
    if !elector.is_active() {
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

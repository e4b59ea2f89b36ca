//! The lease-per-service election mode (`--election lease-per-service`), kept for comparison.
//!
//! Why it exists: it is how kube-vip and Cilium's L2 announcements elect an announcer, both
//! through client-go's `leaderelection` package, so it is the baseline the node-lease design
//! ([`super::node_lease`], [`crate::election::core`]) is measured against. It is built
//! faithfully, costs included: one Lease per Service (`announcer-svc-<namespace>.<name>`);
//! every agent eligible for a Service runs client-go's loop for it, every retry period:
//!
//! 1. `GET` the Lease — client-go polls, it does not watch, which is why API cost grows with
//!    Services × nodes;
//! 2. missing → create it with itself as holder;
//! 3. held by another and not expired → wait. Expiry is judged like client-go's
//!    `observedTime`: on the local monotonic clock, `leaseDurationSeconds` after the Lease was
//!    last *seen to change* ([`crate::election::lease::Observed`]), never from the remote
//!    `renewTime`;
//! 4. held by itself → renew (`renewTime = now`); expired or released (empty holder) → take it
//!    (`acquireTime = now`, `leaseTransitions + 1`). Both are `PUT`s carrying the
//!    `resourceVersion` read in 1; a 409 means someone else wrote first: re-read next round.
//!
//! A leader that cannot renew within the renew deadline stops announcing. Like client-go, a
//! leader that sees another holder keeps leading until that deadline passes. On leaving a
//! Service (no longer eligible, deleted) or on shutdown, the agent stops announcing first and
//! then releases the Lease (empty holder, 1 s duration), as client-go's `ReleaseOnCancel`.
//!
//! The timing logic is the pure [`Contender`]; [`run`] is the thin shell around it.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{Api, Client, api::PostParams};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
    time::{MissedTickBehavior, timeout},
};

use super::node_lease::{APP_LABEL, bounded_name, duration_seconds};
use crate::agent::shutdown::{self, Shutdown, Trigger};
use crate::election::{Instant, NodeName, ServiceRef, lease::Observed};
use crate::placement::eligibility::Placement;

/// Prefix of per-Service Lease names.
pub const LEASE_PREFIX: &str = "announcer-svc-";
/// Marks per-Service Leases.
pub const KIND_LABEL: (&str, &str) = ("announcer.dev/lease", "service");

/// The Lease of a Service: `announcer-svc-<namespace>.<name>`. A dot separates the two because
/// neither a namespace nor a Service name may contain one (a dash would make `a-b`/`c` and
/// `a`/`b-c` collide); cut and hashed if longer than 253 characters.
pub fn lease_name(service: &ServiceRef) -> String {
    bounded_name(
        LEASE_PREFIX,
        &format!("{}.{}", service.namespace, service.name),
    )
}

/// client-go's leader-election timings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `leaseDurationSeconds`: how long others wait after the last seen change.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long stops.
    pub renew_deadline: Duration,
    /// How often every contender GETs the Lease.
    pub retry_period: Duration,
}

impl Timing {
    /// Cilium's defaults (`--l2-announcements-lease-duration` etc.): 15 s / 5 s / 2 s.
    pub const CILIUM: Timing = Timing {
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(5),
        retry_period: Duration::from_secs(2),
    };
    /// kube-vip's tuned values: 5 s / 3 s / 1 s.
    pub const KUBE_VIP: Timing = Timing {
        lease_duration: Duration::from_secs(5),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_secs(1),
    };
}

/// What a GET (or a successful write) returned, reduced to what the election needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// `metadata.resourceVersion`.
    pub resource_version: String,
    /// `spec.holderIdentity`; empty or `None`: released.
    pub holder: Option<String>,
    /// `spec.renewTime`, verbatim.
    pub renew_time: Option<String>,
    /// `spec.leaseDurationSeconds` (the configured duration if unset).
    pub duration: Duration,
    /// `spec.leaseTransitions`.
    pub transitions: i32,
}

impl LeaseRecord {
    /// Reads a Lease; `None` if it has no `resourceVersion` (then it cannot be written safely).
    pub fn of(lease: &Lease, default_duration: Duration) -> Option<LeaseRecord> {
        let spec = lease.spec.as_ref();
        Some(LeaseRecord {
            resource_version: lease.metadata.resource_version.clone()?,
            holder: spec.and_then(|s| s.holder_identity.clone()),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            duration: spec
                .and_then(|s| s.lease_duration_seconds)
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
                .map_or(default_duration, Duration::from_secs),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        })
    }
}

/// The result of a GET, for [`Contender::on_get`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Got {
    /// 404.
    Missing,
    /// The Lease.
    Found(LeaseRecord),
    /// Anything else (timeout, 5xx...).
    Error,
}

/// What to do after a GET.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the Lease with us as holder (`leaseTransitions: 0`).
    Create,
    /// Replace it with us as holder, carrying `resource_version`.
    Update {
        /// The precondition.
        resource_version: String,
        /// Taking it from another holder (or from nobody): `acquireTime = now`.
        take: bool,
        /// `leaseTransitions` to write (incremented when taking from another holder).
        transitions: i32,
    },
    /// Held by another and not expired (or the GET failed): do nothing this round.
    Wait,
}

/// How a write ended, for [`Contender::on_write`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wrote {
    /// Stored; what the server returned.
    Ok(LeaseRecord),
    /// 409: someone wrote first.
    Conflict,
    /// Anything else.
    Failed,
}

/// client-go's `tryAcquireOrRenew` for one Service, as a pure state machine over time.
#[derive(Clone, Debug)]
pub struct Contender {
    me: String,
    timing: Timing,
    /// The Lease as last seen, and when it last changed (client-go's `observedRecord` and
    /// `observedTime`).
    observed: Option<Observed>,
    observed_holder: Option<String>,
    observed_transitions: i32,
    /// When we last wrote it successfully as holder.
    renewed_at: Option<Instant>,
}

impl Contender {
    /// A contender named `me` (the node).
    pub fn new(me: &NodeName, timing: Timing) -> Self {
        Contender {
            me: me.to_string(),
            timing,
            observed: None,
            observed_holder: None,
            observed_transitions: 0,
            renewed_at: None,
        }
    }

    fn observe(&mut self, r: &LeaseRecord, now: Instant) {
        // A new holder always comes with a new resourceVersion, so `Observed` sees the change.
        let (rv, renew) = (r.resource_version.clone(), r.renew_time.clone());
        match &mut self.observed {
            Some(o) => {
                o.update(rv, renew, r.duration, now);
            }
            None => self.observed = Some(Observed::new(rv, renew, r.duration, now)),
        }
        self.observed_holder = r.holder.clone().filter(|h| !h.is_empty());
        self.observed_transitions = r.transitions;
    }

    /// Decides what to do with a GET's result at `now`.
    pub fn on_get(&mut self, now: Instant, got: Got) -> Action {
        let r = match got {
            Got::Error => return Action::Wait,
            Got::Missing => {
                self.observed = None;
                self.observed_holder = None;
                return Action::Create;
            }
            Got::Found(r) => r,
        };
        self.observe(&r, now);
        let o = self.observed.as_ref().expect("just observed");
        match self.observed_holder.as_deref() {
            Some(h) if h == self.me => Action::Update {
                resource_version: r.resource_version,
                take: false,
                transitions: r.transitions,
            },
            Some(_) if !o.expired(now) => Action::Wait,
            _ => Action::Update {
                resource_version: r.resource_version,
                take: true,
                // client-go counts a transition whenever it is not already the holder, taking a
                // released Lease included.
                transitions: r.transitions.saturating_add(1),
            },
        }
    }

    /// Records how the write asked for by [`Contender::on_get`] ended.
    pub fn on_write(&mut self, now: Instant, wrote: Wrote) {
        if let Wrote::Ok(r) = wrote {
            self.observed = Some(Observed::new(
                r.resource_version.clone(),
                r.renew_time.clone(),
                r.duration,
                now,
            ));
            self.observed_holder = Some(self.me.clone());
            self.observed_transitions = r.transitions;
            self.renewed_at = Some(now);
        }
    }

    /// Whether we lead (announce) at `now`: we wrote the Lease as holder less than the renew
    /// deadline ago.
    pub fn leading(&self, now: Instant) -> bool {
        self.renewed_at
            .is_some_and(|t| now.saturating_duration_since(t) < self.timing.renew_deadline)
    }

    /// When leadership lapses unless renewed (`None`: not leading).
    pub fn lapses_at(&self) -> Option<Instant> {
        self.renewed_at.map(|t| t + self.timing.renew_deadline)
    }

    /// The write that releases the Lease, if it was last seen held by us (client-go's
    /// `release`, which also only releases when it is the observed holder).
    pub fn release(&self) -> Option<Write> {
        if self.observed_holder.as_deref() != Some(self.me.as_str()) {
            return None;
        }
        let o = self.observed.as_ref()?;
        Some(Write::Release {
            resource_version: o.resource_version.clone(),
            transitions: self.observed_transitions,
        })
    }

    /// Forgets leadership (after releasing, successfully or not).
    pub fn released(&mut self) {
        self.renewed_at = None;
        self.observed_holder = None;
    }
}

/// A Lease write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// What [`Contender::on_get`] asked for.
    Acquire(Action),
    /// Give the Lease up: empty holder, 1 s duration (client-go's `ReleaseOnCancel`).
    Release {
        /// The precondition.
        resource_version: String,
        /// `leaseTransitions`, unchanged.
        transitions: i32,
    },
}

/// The object to write: `base` is the Lease last read (its other fields are kept, as
/// client-go's `LeaseLock.Update` does), `now` the wall-clock time for `renewTime`. `None` for
/// [`Action::Wait`].
pub fn lease_object(
    base: Option<&Lease>,
    name: &str,
    me: &NodeName,
    timing: &Timing,
    write: &Write,
    now: Timestamp,
) -> Option<Lease> {
    let mut lease = match (write, base) {
        (Write::Acquire(Action::Create), _) | (_, None) => Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(BTreeMap::from([
                    (APP_LABEL.0.to_owned(), APP_LABEL.1.to_owned()),
                    (KIND_LABEL.0.to_owned(), KIND_LABEL.1.to_owned()),
                ])),
                ..Default::default()
            },
            spec: None,
        },
        (_, Some(b)) => b.clone(),
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    spec.renew_time = Some(MicroTime(now));
    let rv = match write {
        Write::Acquire(Action::Wait) => return None,
        Write::Acquire(Action::Create) => {
            spec.holder_identity = Some(me.to_string());
            spec.lease_duration_seconds = Some(duration_seconds(timing.lease_duration));
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(0);
            None
        }
        Write::Acquire(Action::Update {
            resource_version,
            take,
            transitions,
        }) => {
            spec.holder_identity = Some(me.to_string());
            spec.lease_duration_seconds = Some(duration_seconds(timing.lease_duration));
            if *take || spec.acquire_time.is_none() {
                spec.acquire_time = Some(MicroTime(now));
            }
            spec.lease_transitions = Some(*transitions);
            Some(resource_version.clone())
        }
        Write::Release {
            resource_version,
            transitions,
        } => {
            spec.holder_identity = Some(String::new());
            spec.lease_duration_seconds = Some(1);
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(*transitions);
            Some(resource_version.clone())
        }
    };
    lease.metadata.resource_version = rv;
    Some(lease)
}

/// A change of who announces a Service's VIPs, from this node's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ownership {
    /// The Service.
    pub service: ServiceRef,
    /// Its VIPs (sent again when they change while owned).
    pub vips: Vec<IpAddr>,
    /// This node announces them (true) or must stop (false).
    pub owned: bool,
}

/// Configuration of the lease-per-service mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceLeaseConfig {
    /// This node (the holder identity).
    pub node: NodeName,
    /// Where the Leases live.
    pub namespace: String,
    /// The timings.
    pub timing: Timing,
}

/// API requests made, to compare the two modes' cost.
#[derive(Debug, Default)]
pub struct LeaseApiStats {
    /// GETs.
    pub gets: AtomicU64,
    /// Creates and replaces (releases included).
    pub writes: AtomicU64,
    /// 409s.
    pub conflicts: AtomicU64,
}

/// A running contender.
struct Task {
    vips: watch::Sender<Vec<IpAddr>>,
    stop: Trigger,
    task: JoinHandle<()>,
}

/// What every contender shares.
#[derive(Clone)]
struct Ctx {
    api: Api<Lease>,
    cfg: Arc<ServiceLeaseConfig>,
    out: mpsc::Sender<Ownership>,
    stats: Arc<LeaseApiStats>,
}

/// Runs the mode: contends, for each Service `plan` says this node is eligible for, until
/// `shutdown` fires (or its trigger is dropped); then stops announcing and releases
/// every Lease it holds before returning. Services this node stops being eligible for (or
/// that are deleted) are released the same way. Ownership changes go to `out`.
pub async fn run(
    client: Client,
    cfg: ServiceLeaseConfig,
    mut plan: watch::Receiver<Placement>,
    out: mpsc::Sender<Ownership>,
    mut shutdown: Shutdown,
    stats: Arc<LeaseApiStats>,
) {
    let ctx = Ctx {
        api: Api::namespaced(client, &cfg.namespace),
        cfg: Arc::new(cfg),
        out,
        stats,
    };
    let mut running: HashMap<ServiceRef, Task> = HashMap::new();
    let mut stopping: HashMap<ServiceRef, JoinHandle<()>> = HashMap::new();
    loop {
        let wanted = plan.borrow_and_update().services_for(&ctx.cfg.node);
        let gone: Vec<ServiceRef> = running
            .keys()
            .filter(|s| !wanted.contains_key(*s))
            .cloned()
            .collect();
        for svc in gone {
            let t = running.remove(&svc).expect("listed above");
            t.stop.fire();
            stopping.insert(svc, t.task);
        }
        for (svc, vips) in wanted {
            if let Some(t) = running.get(&svc) {
                t.vips
                    .send_if_modified(|v| std::mem::replace(v, vips.clone()) != vips);
                continue;
            }
            if let Some(h) = stopping.remove(&svc) {
                // Back again while still releasing: let the release finish first.
                let _ = h.await;
            }
            let (vips_tx, vips_rx) = watch::channel(vips);
            let (stop_trigger, stop) = shutdown::channel();
            let task = tokio::spawn(contend(ctx.clone(), svc.clone(), vips_rx, stop));
            running.insert(
                svc,
                Task {
                    vips: vips_tx,
                    stop: stop_trigger,
                    task,
                },
            );
        }
        stopping.retain(|_, h| !h.is_finished());
        tokio::select! {
            biased;
            () = shutdown.recv() => break,
            r = plan.changed() => if r.is_err() { break },
        }
    }
    let mut all: Vec<JoinHandle<()>> = stopping.into_values().collect();
    for (_, t) in running {
        t.stop.fire();
        all.push(t.task);
    }
    for h in all {
        let _ = h.await;
    }
}

/// One Service's client-go loop.
async fn contend(
    ctx: Ctx,
    service: ServiceRef,
    mut vips: watch::Receiver<Vec<IpAddr>>,
    mut stop: Shutdown,
) {
    let name = lease_name(&service);
    let timing = ctx.cfg.timing;
    let mut c = Contender::new(&ctx.cfg.node, timing);
    let mut last: Option<Lease> = None;
    let mut owned = false;
    let mut tick = tokio::time::interval(timing.retry_period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let tell = |owned: bool, vips: Vec<IpAddr>| {
        let out = ctx.out.clone();
        let o = Ownership {
            service: service.clone(),
            vips,
            owned,
        };
        async move {
            // A closed receiver means the agent is going away: nothing to tell.
            let _ = out.send(o).await;
        }
    };
    loop {
        tokio::select! {
            biased;
            () = stop.recv() => break,
            r = vips.changed() => {
                if r.is_err() {
                    break;
                }
                let now = vips.borrow_and_update().clone();
                if owned {
                    tell(true, now).await;
                }
                continue;
            }
            _ = tick.tick() => {}
        }
        // Bound the round by the renew deadline, or by when our leadership lapses.
        let now = Instant::now();
        let limit = c.lapses_at().map_or(timing.renew_deadline, |t| {
            t.saturating_duration_since(now).min(timing.renew_deadline)
        });
        let round = attempt(&ctx, &name, &mut c, &mut last);
        if timeout(limit, round).await.is_err() {
            tracing::debug!(lease = %name, "Lease round timed out");
        }
        let lead = c.leading(Instant::now());
        if lead != owned {
            owned = lead;
            tracing::info!(service = %service, lease = %name, owned, "lease-per-service ownership changed");
            let now = vips.borrow().clone();
            tell(owned, now).await;
        }
    }
    if owned {
        let now = vips.borrow().clone();
        tell(false, now).await;
    }
    if let Some(w) = c.release()
        && let Some(l) = lease_object(
            last.as_ref(),
            &name,
            &ctx.cfg.node,
            &timing,
            &w,
            Timestamp::now(),
        )
    {
        ctx.stats.writes.fetch_add(1, Ordering::Relaxed);
        let pp = PostParams::default();
        match timeout(timing.renew_deadline, ctx.api.replace(&name, &pp, &l)).await {
            Ok(Ok(_)) => tracing::debug!(lease = %name, "released"),
            Ok(Err(e)) => {
                tracing::warn!(lease = %name, error = %e, "could not release Lease; it will expire")
            }
            Err(_) => {
                tracing::warn!(lease = %name, "releasing the Lease timed out; it will expire")
            }
        }
        c.released();
    }
}

/// One `tryAcquireOrRenew`: GET, decide, maybe write.
async fn attempt(ctx: &Ctx, name: &str, c: &mut Contender, last: &mut Option<Lease>) {
    let timing = ctx.cfg.timing;
    ctx.stats.gets.fetch_add(1, Ordering::Relaxed);
    let got = match ctx.api.get_opt(name).await {
        Ok(None) => Got::Missing,
        Ok(Some(l)) => match LeaseRecord::of(&l, timing.lease_duration) {
            Some(r) => {
                *last = Some(l);
                Got::Found(r)
            }
            None => Got::Error,
        },
        Err(e) => {
            tracing::debug!(lease = %name, error = %e, "GET Lease failed");
            Got::Error
        }
    };
    let sent = Instant::now();
    let action = c.on_get(sent, got);
    let create = action == Action::Create;
    let write = Write::Acquire(action);
    let Some(body) = lease_object(
        last.as_ref(),
        name,
        &ctx.cfg.node,
        &timing,
        &write,
        Timestamp::now(),
    ) else {
        return;
    };
    ctx.stats.writes.fetch_add(1, Ordering::Relaxed);
    let pp = PostParams::default();
    let res = if create {
        ctx.api.create(&pp, &body).await
    } else {
        ctx.api.replace(name, &pp, &body).await
    };
    let wrote = match res {
        Ok(l) => match LeaseRecord::of(&l, timing.lease_duration) {
            Some(r) => {
                *last = Some(l);
                Wrote::Ok(r)
            }
            None => Wrote::Failed,
        },
        Err(kube::Error::Api(s)) if s.code == 409 => {
            ctx.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            Wrote::Conflict
        }
        Err(e) => {
            tracing::debug!(lease = %name, error = %e, "Lease write failed");
            Wrote::Failed
        }
    };
    // Leadership counts from when the write was sent: conservative.
    c.on_write(sent, wrote);
}

#[cfg(test)]
mod tests;

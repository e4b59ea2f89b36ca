//! The node-lease mode: the tokio shell that feeds [`Core`] and carries out what it asks.
//!
//! Everything with a decision in it is in the core; this loop only translates, in two halves:
//! [`Shell::next_input`] waits for the next thing that happens and turns it into the core's
//! inputs, and [`Shell::execute`] carries out one of the core's outputs.
//!
//! Inputs: the core's timer, watch changes (the planner's, as [`Input::VipsChanged`]), Lease events,
//! verified heartbeats, probe answers, Lease-write results, link changes and SIGTERM. Outputs:
//! Lease writes (in a task, one at a time, the result fed back), sealed heartbeats to every
//! peer's advertised address, map writes and bursts ([`super::net::plane::Plane`]), probes,
//! Events. Along the way it records what only it can time: Lease write latency, probe round
//! trips, heartbeat loss and the takeover duration of each failover the core reports
//! ([`super::metrics::Recorder`]).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    net::{IpAddr, SocketAddr},
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use tokio::{sync::mpsc, task::JoinHandle};

use super::{
    context::{Context, IfaceFingerprint, config_fingerprint},
    error::AgentError,
    kube::{
        events::{announce_event_type, node_event_type},
        node_lease::{self, LeaseContents, NodeLease, PeerLease, WriteBody},
        watch::LeaseEvent,
    },
    metrics::{LossTracker, Recorder},
    net::{
        heartbeat_socket::{self, HeartbeatSocket, unix_ms_now},
        link_watch::{self, LinkWatch},
        probe::{Answer, ProbeKind, Probes},
    },
    persist,
    shutdown::Shutdown,
    unreachable::{self, DataPlane, DataPlaneTarget, Observer, PeerView, Unreachable},
};
use crate::{
    election::{Core, IfaceName, Input, LeaseWriteResult, NodeName, Output},
    heartbeat::{Keyring, PeerKeyChange, PublicKey, Sealer, Verified, Verifier},
    state::{AgentState, OwnedVip, PeerState},
    wire::MacAddr,
    withdraw::Report,
};

/// How often `/state` is refreshed when nothing happens.
const PUBLISH_EVERY: Duration = Duration::from_millis(250);

/// The unreachable report's rules are fed the election's view at most this often (the loop
/// turns for every heartbeat; a peer's silence only changes on the core's timers), and at
/// least this often while they are due.
const UNREACHABLE_EVERY: Duration = Duration::from_millis(20);

/// How often the VIPs a silent peer would hold are recomputed (a scan of every VIP): about
/// its re-probe interval.
const HOLDS_EVERY: Duration = Duration::from_secs(1);

/// The most heartbeats one turn of the loop takes ([`Shell::beat_inputs`]): a round from a
/// few hundred peers in one turn, yet a flood of them cannot keep the other sources waiting
/// long (each turn picks a ready source at random).
const BEATS_PER_TURN: usize = 256;

/// [`run`] on a thread of its own, with a single-threaded runtime of its own: the heartbeat
/// socket, the probe socket and the core's timers never wait for a worker that is decoding a
/// watch event or writing an Event. Everything that talks to the API (watches, Lease and
/// Event writes, the Announced condition) stays on the caller's runtime
/// ([`super::context::KubeSide::rt`]); the two sides meet only through channels and the
/// watch stores. Map writes and bursts run here: they are what the election decides.
pub(super) async fn run_on_own_thread(ctx: Context) -> Result<(), AgentError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("election".into())
        .spawn(move || {
            let r = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    let r = rt.block_on(run(ctx));
                    // Bursts still in flight end here; the handover is done.
                    rt.shutdown_timeout(Duration::from_millis(200));
                    r
                }
                Err(e) => Err(AgentError::ElectionThread(e)),
            };
            let _ = tx.send(r);
        })
        .map_err(AgentError::ElectionThread)?;
    rx.await.unwrap_or_else(|_| {
        Err(AgentError::ElectionThread(std::io::Error::other(
            "the election thread panicked",
        )))
    })
}

/// Runs the node-lease election until the handover after `ctx.term` is complete.
pub(super) async fn run(ctx: Context) -> Result<(), AgentError> {
    let mut shell = Shell::start(ctx)?;
    loop {
        let inputs = shell.next_input().await;
        let now = Instant::now();
        shell.core.handle_all(now, inputs);
        shell.unreachable_step(now);
        if shell.execute_all() {
            if let Some(w) = shell.pending_write.take() {
                let _ = tokio::time::timeout(Duration::from_secs(2), w).await;
            }
            tracing::info!("handover complete; exiting");
            return Ok(());
        }
        // Let the runtime's other tasks and its drivers run once per turn. Why: this loop is
        // the `block_on` future of a current-thread runtime, which polls its I/O and timer
        // drivers only when this future yields. Under a heartbeat backlog every turn found an
        // input ready and the loop hardly ever yielded (a profile showed no `epoll_wait` for
        // seconds), so the probe-answer listener, a task on this runtime, went unpolled: at
        // 2,000 peers on one CPU the agent judged none of 956,923 probe answers and took over
        // 10,603 live peers' VIPs; with this yield, 7 (`cargo xtask bench hollow -- --nodes
        // 2000`, still overloaded).
        tokio::task::yield_now().await;
    }
}

/// The loop's state: the core, what it talks through, and what the shell remembers between
/// inputs.
struct Shell {
    ctx: Context,
    core: Core,
    /// This node.
    node: NodeName,
    socket: HeartbeatSocket,
    lease: Arc<NodeLease>,
    /// Our heartbeat key, as written in our Lease.
    public: PublicKey,
    sealer: Sealer,
    keyring: Arc<RwLock<Keyring>>,
    verifier: Arc<Mutex<Verifier>>,
    probes: Probes,
    /// Peers' heartbeat addresses, from their Leases.
    peers: BTreeMap<NodeName, SocketAddr>,
    /// A round of sealed heartbeats, one per peer, sent in one batch; kept between rounds so
    /// that its room is allocated once.
    round: Vec<(Vec<u8>, SocketAddr)>,
    /// Each VIP's Service, for `/state`.
    services: BTreeMap<IpAddr, String>,
    /// Bumped whenever `services` is recomputed.
    services_version: u64,
    /// The core got a whole VIP set: later watch changes go to it as changes.
    specs_sent: bool,
    /// `/state`'s owned list.
    owned: OwnedCache,
    loss: LossTracker,
    /// Probes in flight, by the MAC asked: when each was sent, for the round trip.
    probes_sent: HashMap<MacAddr, Instant>,
    /// Announcements skipped because the entry was not written: made once a later write of
    /// it (the core refreshes every entry it holds) succeeds.
    owed: BTreeSet<(IpAddr, IfaceName)>,
    /// The Lease write in flight (one at a time), awaited before exiting.
    pending_write: Option<JoinHandle<()>>,
    write_tx: mpsc::Sender<LeaseWriteResult>,
    /// What the interfaces looked like at the last link check.
    last_plan_inputs: Option<Vec<IfaceFingerprint>>,
    /// The data plane went down or came back on an interface: check the links before
    /// anything else.
    plane_changed: bool,
    /// The unreachable report's rules (`None` with `--no-report-unreachable`).
    unreachable: Option<Unreachable>,
    /// The peers listed in [`Self::report`], for the conntrack sweeper
    /// ([`super::stale_flows`]).
    stale_listed: tokio::sync::watch::Sender<BTreeSet<NodeName>>,
    /// The report our Lease carries (from the next write on).
    report: Report,
    /// The report changed while a Lease write was in flight: renew once it is done.
    report_rewrite: bool,
    /// When the rules were last fed.
    unreachable_fed: Instant,
    /// A VIP each silent peer would hold (its data plane's probe target), and when the core
    /// was asked.
    holds: BTreeMap<NodeName, (Instant, Option<DataPlaneTarget>)>,
    last_publish: Instant,
    // What `next_input` waits on.
    term: Shutdown,
    shutdown_seen: bool,
    writes: mpsc::Receiver<LeaseWriteResult>,
    beats: mpsc::Receiver<Verified>,
    answers: mpsc::Receiver<Answer>,
    healthy: tokio::sync::watch::Receiver<bool>,
    changed: tokio::sync::watch::Receiver<u64>,
    links: LinkWatch,
}

impl Shell {
    /// Binds the heartbeat socket, loads this node's identity and incarnation, writes its
    /// Lease, and gives the core what is known before the first input: entries left from a
    /// previous run, the watches' health, the VIPs.
    fn start(mut ctx: Context) -> Result<Self, AgentError> {
        let node = NodeName::from(ctx.args.node_name.as_str());
        let hb_addr = SocketAddr::new(ctx.net.heartbeat_ip, ctx.args.heartbeat_port);
        let socket = HeartbeatSocket::bind(hb_addr)?.on_rejected_from({
            let recorder = ctx.report.recorder.clone();
            move |peer, reason| recorder.heartbeat_rejected_from(peer, reason)
        });
        ctx.report.sources.set_heartbeat(socket.stats());
        let lease = Arc::new(NodeLease::new(
            ctx.kube.client.clone(),
            &ctx.args.namespace,
            node.clone(),
            hb_addr,
            ctx.args.lease_duration,
        ));
        // This node's identity and incarnation live in its state directory, so that a restart
        // keeps its key (peers need not learn a new one, also during an API outage) and its
        // incarnation never goes backwards, whatever the wall clock does. A faulty directory
        // is worked around, never a reason to stop (see `persist`).
        let state = persist::load(&ctx.args.state_dir(), heartbeat_socket::incarnation_now());
        for problem in &state.problems {
            tracing::warn!(problem = problem.label(), "{problem}");
            ctx.report.recorder.state_dir_problem(problem.label());
            ctx.kube.events.record_on_node(
                kube::runtime::events::EventType::Warning,
                "StateDirectory",
                &problem.to_string(),
            );
        }
        let (identity, incarnation) = (state.identity, state.incarnation);
        tracing::info!(key = %identity.public(), incarnation, "this node's heartbeat identity");
        let keyring = Arc::new(RwLock::new(Keyring::new(identity)));
        let public = keyring.read().unwrap_or_else(|e| e.into_inner()).public();
        // The attach results of `Plane::prepare`: reported before the first Lease write, which
        // leaves out the links whose data plane is down.
        ctx.report_plane_changes();
        lease.set_contents(LeaseContents {
            key: Some(public.to_string()),
            links: ctx.links(),
            dataplane_down: ctx.dataplane_down(),
            unreachable: Report::default(),
        });
        let sealer = Sealer::new(node.clone(), incarnation)?;
        let verifier = Arc::new(Mutex::new(Verifier::new(node.clone())));
        let (beat_tx, beats) = mpsc::channel::<Verified>(1024);
        {
            // Its own thread: a flood on the heartbeat port must not hold up this one (see
            // `heartbeat_socket`'s docs).
            let stop = ctx.stop.clone();
            socket
                .spawn_receiver(verifier.clone(), keyring.clone(), beat_tx, move || {
                    stop.is_shutdown()
                })
                .map_err(AgentError::HeartbeatThread)?;
        }

        let mac = ctx.net.heartbeat_mac.unwrap_or(MacAddr([0; 6]));
        let mut config = ctx.args.election_config(mac);
        config.config_hash = config_fingerprint(&ctx.args);
        config.data_plane = ctx.net.plane.enabled();
        let mut core = Core::new(config, Instant::now(), incarnation);
        let existing = ctx.existing();
        if !existing.is_empty() {
            tracing::info!(
                count = existing.len(),
                "found live entries from a previous run; keeping them through warm-up"
            );
        }
        core.handle(Instant::now(), Input::Existing(existing));

        let (write_tx, writes) = mpsc::channel::<LeaseWriteResult>(4);
        let (probes, answers) = Probes::new(256);
        ctx.report.sources.set_probes(probes.stats());
        let mut services = BTreeMap::new();
        let (links, no_netlink) = LinkWatch::new();
        if let Some(e) = no_netlink {
            tracing::warn!(error = %e, every = ?link_watch::POLL, "cannot subscribe to link changes (rtnetlink); re-reading the interfaces periodically instead");
        }
        let mut healthy = ctx.kube.watches.healthy.clone();
        let changed = ctx.kube.watches.changed.clone();

        core.handle(
            Instant::now(),
            Input::WatchHealth(*healthy.borrow_and_update()),
        );
        let mut specs_sent = false;
        if let Some(specs) = ctx.specs(&core, &mut services) {
            core.handle(Instant::now(), Input::Vips(specs));
            specs_sent = true;
        }

        let term = ctx.term.clone();
        let loss = LossTracker::new(ctx.args.heartbeat_interval);
        let ctx_reports_off = ctx.args.no_report_unreachable;
        let (stale_listed, listed) = tokio::sync::watch::channel(BTreeSet::new());
        if !ctx_reports_off {
            super::stale_flows::spawn(
                &ctx.kube.rt,
                ctx.kube.watches.slices.clone(),
                listed,
                ctx.report.recorder.clone(),
                ctx.stop.clone(),
            );
        }
        Ok(Shell {
            ctx,
            core,
            node,
            socket,
            lease,
            public,
            sealer,
            keyring,
            verifier,
            probes,
            peers: BTreeMap::new(),
            round: Vec::new(),
            services,
            services_version: 0,
            specs_sent,
            owned: OwnedCache::default(),
            loss,
            probes_sent: HashMap::new(),
            owed: BTreeSet::new(),
            pending_write: None,
            write_tx,
            last_plan_inputs: None,
            plane_changed: false,
            unreachable: (!ctx_reports_off)
                .then(|| Unreachable::new(unreachable::Config::default())),
            stale_listed,
            report: Report::default(),
            report_rewrite: false,
            unreachable_fed: Instant::now(),
            holds: BTreeMap::new(),
            last_publish: Instant::now(),
            term,
            shutdown_seen: false,
            writes,
            beats,
            answers,
            healthy,
            changed,
            links,
        })
    }

    /// Waits for the next thing that happens and turns it into the core's inputs (none, one,
    /// or several: for a link change, and for heartbeats, which come with those queued behind
    /// them).
    ///
    /// Unbiased (tokio picks a ready branch at random): no source, not even a flood of
    /// heartbeats or probe answers, can starve the others (Lease events above all).
    async fn next_input(&mut self) -> Vec<Input> {
        if std::mem::take(&mut self.plane_changed) {
            return self.link_check();
        }
        let deadline = self.core.poll_timeout().map(tokio::time::Instant::from_std);
        let retry = self
            .ctx
            .net
            .plane
            .next_retry()
            .map(tokio::time::Instant::from_std);
        let unreachable_due = self.unreachable_due();
        tokio::select! {
            () = self.term.recv(), if !self.shutdown_seen => {
                self.shutdown_seen = true;
                tracing::info!("SIGTERM: handing VIPs over before exiting");
                vec![Input::Shutdown]
            }
            Some(r) = self.writes.recv() => vec![Input::LeaseWrite(r)],
            Some(v) = self.beats.recv() => self.beat_inputs(v),
            Some(a) = self.answers.recv() => self.answer_input(a).into_iter().collect(),
            Some(ev) = self.ctx.kube.watches.lease_events.recv() => {
                if let LeaseEvent::Deleted(l) = &ev
                    && let Some(n) = node_lease::node_of(l)
                {
                    self.loss.forget(&n);
                    self.ctx.report.recorder.forget_peer(&n);
                    self.keyring.write().unwrap_or_else(|e| e.into_inner()).remove_peer(&n);
                    self.verifier.lock().unwrap_or_else(|e| e.into_inner()).forget(&n);
                }
                self.lease_input(ev).into_iter().collect()
            }
            Ok(()) = self.healthy.changed() => {
                vec![Input::WatchHealth(*self.healthy.borrow_and_update())]
            }
            Ok(()) = self.changed.changed() => {
                self.changed.borrow_and_update();
                self.vip_changes()
            }
            () = self.links.changed() => self.link_check(),
            () = sleep_until(retry), if retry.is_some() => {
                // Attach where the data plane is down (see `Plane::retry_due`); an interface
                // that came back is published and ranked again by the link check.
                self.ctx.net.plane.retry_due(Instant::now());
                if self.ctx.report_plane_changes() {
                    self.link_check()
                } else {
                    Vec::new()
                }
            }
            () = sleep_until(unreachable_due) => Vec::new(),
            () = sleep_until(deadline) => {
                // Let the socket readers run first (tokio's yield resumes us after the I/O
                // driver is polled): a heartbeat or probe answer the kernel already holds is
                // proof of life, and a loop that woke late must not judge without it.
                tokio::task::yield_now().await;
                self.tick_inputs()
            }
        }
    }

    /// A deadline passed: the heartbeats and probe answers already received go first. The
    /// select above picks among ready branches at random, so without this a loop that woke
    /// late (a busy node) would judge a peer silent, or a probe unanswered, with the proof of
    /// the contrary waiting in a channel (or, before the yield above, in a socket): a slow
    /// node must look slow, not dead.
    fn tick_inputs(&mut self) -> Vec<Input> {
        let mut inputs = Vec::new();
        while let Ok(v) = self.beats.try_recv() {
            inputs.push(self.beat_input(v));
        }
        while let Ok(a) = self.answers.try_recv() {
            inputs.extend(self.answer_input(a));
        }
        inputs.push(Input::Tick);
        inputs
    }

    /// The VIPs from the watches ([`Context::specs`]), which also refreshes `services`.
    fn vip_specs(&mut self) -> Option<Vec<crate::election::VipSpec>> {
        self.services_version += 1;
        let specs = self.ctx.specs(&self.core, &mut self.services);
        self.specs_sent |= specs.is_some();
        specs
    }

    /// What the watches changed in the VIPs since the core last heard ([`Context::spec_changes`]):
    /// nothing if the placement did not change, the whole set if the core has none yet.
    fn vip_changes(&mut self) -> Vec<Input> {
        if !self.specs_sent {
            return self.vip_specs().map(Input::Vips).into_iter().collect();
        }
        match self.ctx.spec_changes(&self.core, &mut self.services) {
            Some((placed, gone)) => {
                self.services_version += 1;
                vec![Input::VipsChanged { placed, gone }]
            }
            None => Vec::new(),
        }
    }

    /// `first` and the heartbeats already queued behind it, up to [`BEATS_PER_TURN`]: a round
    /// from hundreds of peers arrives within milliseconds, and one turn of the loop per beat
    /// (the core's timers, the unreachable rules, the outputs, `/state`) cost the election's
    /// thread that many wakeups.
    fn beat_inputs(&mut self, first: Verified) -> Vec<Input> {
        let mut inputs = vec![self.beat_input(first)];
        while inputs.len() < BEATS_PER_TURN
            && let Ok(v) = self.beats.try_recv()
        {
            inputs.push(self.beat_input(v));
        }
        inputs
    }

    fn beat_input(&mut self, v: Verified) -> Input {
        record_beat(&self.ctx.report.recorder, &mut self.loss, &v);
        Input::Heartbeat(v.beat)
    }

    /// A probe answer: a data plane's goes to the core (and the unreachable rules), a
    /// kernel's to the unreachable rules only.
    fn answer_input(&mut self, a: Answer) -> Option<Input> {
        let now = Instant::now();
        if a.kind == ProbeKind::Kernel {
            self.ctx.report.recorder.kernel_probe_answered();
            if let Some(u) = &mut self.unreachable {
                u.handle_kernel_answer(now, a.vip);
            }
            return None;
        }
        if let Some(u) = &mut self.unreachable {
            u.handle_data_plane_answer(now, a.vip, a.mac);
        }
        if let Some(sent) = self.probes_sent.remove(&a.mac) {
            self.ctx.report.recorder.probe_rtt(sent.elapsed());
        }
        Some(a.into())
    }

    /// The contents of our Lease besides its renewal.
    fn contents(&self) -> LeaseContents {
        LeaseContents {
            key: Some(self.public.to_string()),
            links: self.ctx.links(),
            dataplane_down: self.ctx.dataplane_down(),
            unreachable: self.report.clone(),
        }
    }

    /// When the unreachable rules want to run next (never with reporting off).
    fn unreachable_due(&self) -> Option<tokio::time::Instant> {
        self.unreachable.as_ref()?.poll_timeout().map(|t| {
            tokio::time::Instant::from_std(t.max(self.unreachable_fed + UNREACHABLE_EVERY))
        })
    }

    /// Feeds the unreachable rules what the core and the watches know now, sends the probes
    /// they ask for, and writes the report into our Lease at once when it changed.
    fn unreachable_step(&mut self, now: Instant) {
        if self.unreachable.is_none() {
            return;
        }
        if self.report_rewrite && self.core.renew_now(now) {
            self.report_rewrite = false;
        }
        let due = self
            .unreachable
            .as_ref()
            .and_then(Unreachable::poll_timeout)
            .is_some_and(|t| t <= now);
        if !due && now < self.unreachable_fed + UNREACHABLE_EVERY {
            return;
        }
        self.unreachable_fed = now;
        let observer = Observer {
            connected: self.core.connected_peers(now),
            ready: self.core.is_ready(),
            standby: self.core.standby_or_links_down(),
            link_down: self.ctx.any_link_down(),
            shutting_down: self.shutdown_seen,
        };
        let views = if observer.blind().is_none() {
            self.peer_views(now)
        } else {
            Vec::new()
        };
        let Some(u) = &mut self.unreachable else {
            return;
        };
        if observer.blind().is_none() {
            u.handle_peers(now, views);
        }
        u.handle_observer(now, observer);
        u.handle_timeout(now);
        let mut probes = Vec::new();
        while let Some(p) = u.poll_probe() {
            probes.push(p);
        }
        let report = u.poll_report();
        let window = unreachable::Config::default().spacing;
        for p in probes {
            match p {
                unreachable::Probe::Kernel { node, target } => {
                    let sent = self.ctx.probe_source(&target.iface).map(|(index, src)| {
                        self.probes
                            .send_kernel(&target.iface, index, src, target.ip, None, window)
                    });
                    match sent {
                        Some(Ok(())) => self.ctx.report.recorder.kernel_probe_sent(),
                        Some(Err(e)) => {
                            // Unsent is no silence: count it as an answer.
                            tracing::warn!(%node, ip = %target.ip, iface = %target.iface, error = %e, "kernel probe not sent; the peer stays unlisted");
                            if let Some(u) = &mut self.unreachable {
                                u.handle_kernel_answer(now, target.ip);
                            }
                        }
                        None => {
                            if let Some(u) = &mut self.unreachable {
                                u.handle_kernel_answer(now, target.ip);
                            }
                        }
                    }
                }
                unreachable::Probe::DataPlane {
                    target: DataPlaneTarget { iface, vip, mac },
                    ..
                } => {
                    self.ctx.probe(&mut self.probes, &iface, vip, mac);
                }
            }
        }
        if let Some(report) = report {
            tracing::info!(unreachable = %report, "peers proven unreachable (heartbeats, data plane and kernel silent)");
            self.ctx
                .report
                .recorder
                .unreachable_listed(report.unreachable.len());
            self.stale_listed.send_replace(report.unreachable.clone());
            self.report = report;
            self.lease.set_contents(self.contents());
            // Written at once, not at the next renewal: the withdrawal controller waits on it.
            if !self.core.renew_now(now) {
                self.report_rewrite = true;
            }
        }
    }

    /// Every peer as the core and the watches see it, for the unreachable rules. What a silent
    /// peer holds is asked of the core once per [`HOLDS_EVERY`] (it scans every VIP).
    fn peer_views(&mut self, now: Instant) -> Vec<PeerView> {
        let cache = &self.holds;
        let stale = |n: &NodeName| cache.get(n).is_none_or(|(t, _)| now >= *t + HOLDS_EVERY);
        let silences = self.core.peer_silences(now, 1, stale);
        let fresh: Vec<bool> = silences
            .iter()
            .map(|s| s.heartbeats_quiet && stale(&s.node))
            .collect();
        self.holds
            .retain(|n, _| silences.iter().any(|s| s.node == *n && s.heartbeats_quiet));
        silences
            .into_iter()
            .zip(fresh)
            .map(|(s, fresh)| {
                if fresh {
                    let held = s.holds.first().map(|(vip, iface, mac)| DataPlaneTarget {
                        iface: iface.clone(),
                        vip: *vip,
                        mac: *mac,
                    });
                    self.holds.insert(s.node.clone(), (now, held));
                }
                let held = self.holds.get(&s.node).and_then(|(_, h)| h.clone());
                let data_plane = if s.data_plane_silent {
                    DataPlane::ProbedSilent
                } else if let Some(target) = held {
                    DataPlane::Holds(target)
                } else {
                    DataPlane::HoldsNone
                };
                let kernel = if s.heartbeats_quiet && !s.released {
                    self.ctx.kernel_targets(&s.node)
                } else {
                    Vec::new()
                };
                PeerView {
                    node: s.node,
                    heartbeats_quiet: s.heartbeats_quiet,
                    heartbeats_silent: s.heartbeats_silent,
                    released: s.released,
                    data_plane,
                    kernel,
                }
            })
            .collect()
    }

    /// Re-reads the interfaces; if anything the plan depends on changed, rewrites our links
    /// and gives the core the link states and the VIPs again.
    fn link_check(&mut self) -> Vec<Input> {
        self.ctx.refresh_interfaces();
        let fingerprint = self.ctx.iface_fingerprint();
        let mut inputs = Vec::new();
        if self.last_plan_inputs.as_ref() != Some(&fingerprint) {
            self.last_plan_inputs = Some(fingerprint);
            // Peers learn new links with our next renewal.
            self.lease.set_contents(self.contents());
            for (iface, up) in self.ctx.link_states() {
                inputs.push(Input::Link { iface, up });
            }
            if let Some(specs) = self.vip_specs() {
                inputs.push(Input::Vips(specs));
            }
        }
        inputs
    }

    /// Carries out everything the core asked for since the last input, then records the
    /// failovers that ended and refreshes `/state`. `true` when the core asked to exit.
    fn execute_all(&mut self) -> bool {
        let mut exit = false;
        let mut acted = false;
        let mut installed_at = None;
        loop {
            let outs: Vec<Output> = std::iter::from_fn(|| self.core.poll_output()).collect();
            if outs.is_empty() {
                break;
            }
            // The data plane first, in the core's order: when a node takes 5,000 VIPs at once
            // their map writes must not wait behind 5,000 Events and status claims.
            let (plane, rest): (Vec<Output>, Vec<Output>) =
                outs.into_iter().partition(Output::is_data_plane);
            for out in plane {
                acted |= !matches!(out, Output::SendHeartbeat(_));
                exit |= self.execute(out);
            }
            installed_at.get_or_insert_with(Instant::now);
            for out in rest {
                acted = true;
                exit |= self.execute(out);
            }
        }
        // A map write that found the data plane down took its interface down: act on it
        // before the next input.
        self.plane_changed |= self.ctx.report_plane_changes();
        // The map writes and first announcement rounds of this batch were done at
        // `installed_at`: the failovers among them ended then.
        let installed_at = installed_at.unwrap_or_else(Instant::now);
        for f in self.core.take_failovers() {
            let took = installed_at.saturating_duration_since(f.last_heard);
            self.ctx.report.recorder.takeover(took);
            tracing::info!(vip = %f.vip, from = %f.from, took_ms = took.as_millis() as u64, "took over");
        }
        // `/state` is for people and tests: rebuild it when something was done, else at most
        // every 250 ms (heartbeats arrive hundreds of times a second on large clusters).
        if acted || exit || self.last_publish.elapsed() >= PUBLISH_EVERY {
            let owned = self
                .owned
                .get(&self.core, &self.services, self.services_version);
            self.ctx.publish_state(state(&self.core, &self.ctx, owned));
            self.last_publish = Instant::now();
        }
        exit
    }

    /// Carries out one output of the core. `true` for [`Output::Exit`].
    fn execute(&mut self, out: Output) -> bool {
        let ctx = &mut self.ctx;
        match out {
            Output::WriteLease {
                resource_version,
                release,
                standby,
                connected,
            } => {
                let (lease, tx) = (self.lease.clone(), self.write_tx.clone());
                let recorder = ctx.report.recorder.clone();
                let body = WriteBody {
                    release,
                    standby,
                    connected,
                };
                self.pending_write = Some(ctx.kube.rt.spawn(async move {
                    let started = Instant::now();
                    let r = lease.write(resource_version, body).await;
                    recorder.lease_write(started.elapsed());
                    let _ = tx.send(r).await;
                }));
            }
            Output::SendHeartbeat(beat) => {
                // One datagram per peer, sealed with the key only it shares with us, and the
                // round sent in batches (a few system calls for hundreds of peers).
                let keys = self.keyring.read().unwrap_or_else(|e| e.into_inner());
                let now_ms = unix_ms_now();
                for (peer, addr) in self.peers.iter().filter(|(n, _)| **n != self.node) {
                    match self.sealer.seal(&keys, &beat, peer, now_ms) {
                        Ok(bytes) => self.round.push((bytes, *addr)),
                        Err(e) => tracing::debug!(%peer, error = %e, "heartbeat not sealed"),
                    }
                }
                drop(keys);
                self.socket.send_batch(&self.round);
                self.round.clear();
            }
            Output::Install { vip, iface, ttl } => {
                if let Err(e) = ctx.net.plane.install(vip, &iface, ttl) {
                    tracing::error!(%vip, %iface, error = %e, "map write failed");
                } else if self.owed.remove(&(vip, iface.clone())) {
                    tracing::info!(%vip, %iface, "entry written at last: announcing");
                    announce(ctx, vip, &iface);
                }
            }
            Output::Remove { vip, iface } => {
                self.owed.remove(&(vip, iface.clone()));
                if let Err(e) = ctx.net.plane.remove(vip, &iface) {
                    tracing::error!(%vip, %iface, error = %e, "map delete failed");
                } else {
                    tracing::info!(%vip, %iface, "released");
                }
                let services = ctx.kube.vip_services.get(&vip).cloned().unwrap_or_default();
                ctx.kube.announced.release(services, vip);
            }
            Output::Announce { vip, iface } => {
                // `Announced` says the entry answers: only once it is written (a failed
                // install takes the interface down, and the VIP goes to another node).
                if !ctx.net.plane.is_installed(vip, &iface) {
                    tracing::warn!(%vip, %iface, "not announcing yet: the entry is not written");
                    self.owed.insert((vip, iface));
                    return false;
                }
                announce(ctx, vip, &iface);
            }
            Output::Probe { vip, iface, mac } => {
                self.probes_sent.insert(mac, Instant::now());
                ctx.probe(&mut self.probes, &iface, vip, mac);
            }
            Output::Event {
                service,
                kind,
                message,
                ..
            } => {
                // Logged by `record`, also when the Event itself is not written.
                let (type_, reason) = announce_event_type(&kind);
                ctx.kube.events.record(&service, type_, reason, &message);
            }
            Output::NodeEvent { kind, message } => {
                // Logged by `record_on_node`.
                let (type_, reason) = node_event_type(&kind);
                ctx.kube.events.record_on_node(type_, reason, &message);
            }
            Output::Exit => return true,
        }
        false
    }

    /// A watched Lease as the core's input; remembers peers' heartbeat addresses and keys.
    fn lease_input(&mut self, ev: LeaseEvent) -> Option<Input> {
        lease_input(ev, &self.node, &mut self.peers, &self.keyring, &self.ctx)
    }
}

/// Sends `vip`'s burst on `iface` and claims it in the `Announced` condition.
fn announce(ctx: &mut Context, vip: IpAddr, iface: &IfaceName) {
    if let Err(e) = ctx.net.plane.announce(vip, iface) {
        tracing::error!(%vip, %iface, error = %e, "announcement failed");
    }
    let services = ctx.kube.vip_services.get(&vip).cloned().unwrap_or_default();
    ctx.kube.announced.claim(services, vip, iface);
}

/// Counts the heartbeats `v`'s sender sent since its previous one that never arrived, and the
/// one-way delay by the two wall clocks.
fn record_beat(recorder: &Recorder, loss: &mut LossTracker, v: &Verified) {
    let missed = loss.observe(&v.beat.node, v.beat.incarnation, v.sent_unix_ms);
    let delay_ms = unix_ms_now() as i128 - i128::from(v.sent_unix_ms);
    recorder.heartbeat(&v.beat.node, missed, delay_ms as f64 / 1000.0);
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A watched Lease as the core's input; remembers peers' heartbeat addresses and keys.
fn lease_input(
    ev: LeaseEvent,
    us: &NodeName,
    peers: &mut BTreeMap<NodeName, SocketAddr>,
    keyring: &RwLock<Keyring>,
    ctx: &Context,
) -> Option<Input> {
    match ev {
        LeaseEvent::Applied(l) => match node_lease::view(&l) {
            Ok(PeerLease {
                view,
                heartbeat,
                key,
            }) => {
                if view.node != *us {
                    if let Some(a) = heartbeat {
                        peers.insert(view.node.clone(), a);
                    }
                    learn_key(&view.node, key.as_deref(), keyring, ctx);
                }
                Some(Input::LeaseSeen(view))
            }
            Err(e) => {
                tracing::warn!(lease = ?l.metadata.name, error = %e, "ignoring malformed node Lease");
                None
            }
        },
        LeaseEvent::Deleted(l) => {
            let node = node_lease::node_of(&l)?;
            peers.remove(&node);
            Some(Input::LeaseGone(node))
        }
    }
}

/// Takes `node`'s published heartbeat key into the keyring. A key that changed is raised (an
/// Event on our Node and a metric): it happens when that node's state directory was wiped, and
/// also when someone with write access to its Lease replaced it.
fn learn_key(node: &NodeName, key: Option<&str>, keyring: &RwLock<Keyring>, ctx: &Context) {
    let mut keys = keyring.write().unwrap_or_else(|e| e.into_inner());
    let Some(text) = key else {
        if keys.remove_peer(node) {
            tracing::warn!(%node, "peer no longer publishes a heartbeat key; its heartbeats are ignored");
        }
        return;
    };
    let parsed = match text.parse::<PublicKey>() {
        Ok(k) => k,
        Err(e) => {
            keys.remove_peer(node);
            tracing::warn!(%node, error = %e, "ignoring the peer's heartbeats: its published key does not parse");
            return;
        }
    };
    match keys.set_peer(node.clone(), parsed) {
        Ok(PeerKeyChange::Changed) => {
            ctx.report.recorder.peer_key_changed(node);
            ctx.kube.events.record_on_node(
                kube::runtime::events::EventType::Warning,
                "PeerKeyChanged",
                &format!(
                    "{node} now publishes heartbeat key {parsed} (its state directory was reset, or its Lease was rewritten by someone else)"
                ),
            );
        }
        Ok(PeerKeyChange::Added | PeerKeyChange::Unchanged) => {}
        Err(e) => tracing::warn!(%node, error = %e, "ignoring the peer's heartbeats: unusable key"),
    }
}

/// The owned VIPs as `/state` shows them, rebuilt only when the core's owned set or the
/// Services' names changed ([`Core::owned_version`], [`Shell::services_version`]): the state is
/// republished every [`PUBLISH_EVERY`] for the peers' heartbeat ages, and with 1,000 VIPs
/// rebuilding this list each time was a tenth of an idle agent's CPU.
struct OwnedCache {
    key: Option<(u64, u64)>,
    vips: Arc<[OwnedVip]>,
}

impl Default for OwnedCache {
    fn default() -> Self {
        OwnedCache {
            key: None,
            vips: Arc::new([]),
        }
    }
}

impl OwnedCache {
    fn get(
        &mut self,
        core: &Core,
        services: &BTreeMap<IpAddr, String>,
        services_version: u64,
    ) -> Arc<[OwnedVip]> {
        let key = (core.owned_version(), services_version);
        if self.key != Some(key) {
            self.vips = core
                .owned()
                .into_iter()
                .map(|(vip, iface)| OwnedVip {
                    vip,
                    iface: iface.to_string(),
                    service: services.get(&vip).cloned(),
                })
                .collect();
            self.key = Some(key);
        }
        Arc::clone(&self.vips)
    }
}

fn state(core: &Core, ctx: &Context, owned: Arc<[OwnedVip]>) -> AgentState {
    let now = Instant::now();
    AgentState {
        node: ctx.args.node_name.clone(),
        election: "node-lease".into(),
        incarnation: core.incarnation(),
        ready: core.is_ready(),
        dataplane: ctx.net.plane.enabled(),
        owned,
        peers: core
            .peers(now)
            .into_iter()
            .map(|p| PeerState {
                node: p.node.to_string(),
                alive: p.alive,
                heartbeat_age_ms: p.heartbeat_age.map(|d| d.as_millis() as u64),
                lease_valid: p.lease_valid,
                leaving: p.leaving,
            })
            .collect(),
        stats: core.stats(),
        // What heartbeats say too: watches healthy and Lease writes succeeding (a hung API
        // server keeps its watches open and silent, so watch health alone says "ok").
        api_ok: *ctx.kube.watches.healthy.borrow() && core.trusts_api(),
        standby: core.is_standby(),
    }
}

//! The node-lease election core.
//!
//! # How a VIP gets its owner
//! The owner of a VIP is the top of its rendezvous ranking ([`super::rendezvous`]) among its
//! eligible nodes that are *candidates*:
//!
//! * this node, once its warm-up is over, unless it is shutting down, one of its announcing
//!   links is down, or it is fenced (see below);
//! * a peer whose Lease makes it a member (see `Peer::member`) and whose heartbeats arrive, and
//!   that did not say it is leaving, and that is ready or still within its warm-up (a
//!   restarting agent keeps its VIPs through its warm-up; one stuck before readiness stops
//!   counting after a few warm-ups, so it cannot hold VIPs that nobody announces).
//!
//! A node is ranked for a VIP only where it can announce it: this node if it has an interface
//! for it ([`VipSpec::local`]), a peer if the links it publishes in its Lease can
//! ([`super::Link::mac_for`]; a peer that publishes none is assumed to).
//!
//! Nobody writes anything per VIP: every agent sees the same Leases, heartbeats and
//! eligibility, so every agent computes the same owner. Heartbeats carry a fingerprint of the
//! sender's view (VIPs and eligible sets) and of its configuration, so agents notice when they
//! do not (a lagging watch, a ConfigMap roll): see *Keeping and giving up*.
//!
//! # Taking over
//! When this node becomes the owner of a VIP it does not answer yet, it first asks whether the
//! previous owner's *data plane* still answers. A peer ranked above us that is still a member
//! but whose heartbeats stopped ([`ElectionConfig::suspect_after`], one heartbeat overdue by half a
//! period) is a *suspect*: its agent may have died (SIGKILL, OOM) while its XDP entries keep
//! answering and its node keeps serving traffic. The node ranked next after the suspects asks
//! at once, although the owner still counts in the ranking (until [`ElectionConfig::dead_after`]): a
//! crash is taken over after one and a half periods and a probe, while a node that is only
//! slow (its heartbeat late, its data plane answering) moves nothing, and nodes further down
//! stay quiet. *Every* suspect ranked above
//! us is asked (two silent members above us may be a crashed node and, below it, the node that
//! took over from it and then lost its agent). We send a unicast ARP request or NS for the VIP
//! to the MAC that suspect answers the VIP with (its published link for the VIP's subnet, else
//! its heartbeat MAC) ([`Output::Probe`]); the shell counts only an answer to that very probe
//! (it carries a nonce only our XDP responder echoes):
//!
//! * silence for `probe_timeout` ([`FIRST_PROBES`] probes, any answer counts): the node is gone
//!   (crash, link down, partition): it counts as gone for us until its next heartbeat
//!   (`Peer::probed_silent`), and we take over now, one map write ([`Output::Install`]) then
//!   the burst ([`Output::Announce`]);
//! * an answer: only the agent died, clients are still served. Probe again every
//!   [`ElectionConfig::reprobe_interval`] until the entries lapse (at most [`ElectionConfig::entry_ttl`] after
//!   its last refresh), its agent returns, or its Lease expires. Taking over at once would make two
//!   nodes answer for the whole grace period. Once a suspect has answered, it takes
//!   [`PROBE_LOSSES_AFTER_ANSWER`] unanswered probes in a row to conclude it is gone: a single
//!   lost answer must not make two owners.
//!
//! The VIP is taken when every suspect is silent. A heartbeat from a suspect before then
//! cancels the takeover: silence of the heartbeats *and* of the data plane is required, so
//! a false takeover takes a late heartbeat and every probe answer lost, and a crash is taken
//! over about `suspect_after + probe_timeout` after the old owner's last heartbeat (187.5 ms
//! at the defaults). Should a quiet owner come back with the same incarnation after all, it never
//! stopped answering: we count an overlap and give the VIP back (see *Restarts, ...*).
//!
//! A VIP whose previous owner left gracefully, or that nobody owned, is taken without a probe.
//!
//! # Keeping and giving up
//! Owned entries are rewritten every [`ElectionConfig::refresh_interval`] (`grace / 5`) with a
//! lifetime of [`ElectionConfig::entry_ttl`] (`grace` plus one refresh interval), so a dead agent's
//! entries answer for at least `grace` after its death and stop at most `grace + grace / 5`
//! after it; an agent restarted within `grace` finds every entry alive. A VIP whose owner is now another node
//! is removed once that node's heartbeats say it is ready *and its data plane answers the VIP*
//! (a probe, every `probe_timeout`): make before break, checked where it matters. A joining
//! node first finishes its warm-up and announces, then we let go; a successor whose watch lags
//! behind ours, or that runs another configuration during a roll (a `ConfigMismatch` node Event
//! after [`CONFIG_MISMATCH_AFTER`]), may not have the VIP yet, and until it does we keep
//! answering, so the VIP is never dark. If it shares our view fingerprint and still does not
//! answer after [`ElectionConfig::view_hold`], its data plane is broken and we let go. A successor
//! ranked only because the API shows it alive (its frames do not reach us) is handed the VIP
//! at once.
//!
//! # Restarts, shutdowns, outages, partitions
//! * Restart: [`Input::Existing`] hands over the entries still in the pinned map; through the
//!   warm-up they are kept and refreshed, nothing is taken or announced, and then the node
//!   reconciles. Peers saw our heartbeats stop, probed our data plane, got answers and waited.
//! * SIGTERM ([`Input::Shutdown`]): our heartbeats say `leaving`; peers drop us from the ranking,
//!   take our VIPs without probing, announce them and ack us in their heartbeats. When every
//!   live peer acked (or `handover_timeout` passed) we remove our entries, release our Lease and
//!   [`Output::Exit`]. Clients never see a VIP unanswered. A VIP no other node can announce
//!   (eTP Local with every endpoint here) keeps its entry, which answers until its TTL
//!   (`grace`) runs out; a restart within it picks it up again.
//! * API outage: Lease writes fail and watches break. While the API cannot be trusted
//!   (watches unhealthy, or our own renewals failing), known Leases do not expire: membership
//!   freezes, heartbeats alone decide, so nothing flaps and a crash still fails over. When
//!   trust returns, peers get a full Lease duration to renew before their Leases can expire.
//! * Fencing: if our own Lease has not been renewed for a Lease duration while a live peer
//!   reports it reaches the API, the others see our Lease expired and take our VIPs; we stop
//!   being a candidate so that the cluster converges. The same holds when our watches have
//!   failed for a Lease duration while our writes still succeed: our Lease looks alive to the
//!   others, but our view is stale, so we say `leaving` and let them take over (a `Fenced`
//!   node Event).
//! * Isolation: a node whose heartbeats are not heard, or that hears none (its clock off by
//!   more than the skew window, UDP blocked one way, a peer key it lacks), while its Lease
//!   stays valid, would keep its VIPs while peers take them after a lost probe answer. Each
//!   node therefore publishes in its Lease renewals how many peers it exchanges heartbeats with
//!   both ways (`connected`). A node that exchanges them with none, for `dead_after`, while a
//!   peer whose Lease was renewed since then is strictly better connected (exchanges them with
//!   somebody: 0 against 0 is no better, names break no tie), *steps back*: it writes `standby` in its Lease, is no candidate, keeps answering
//!   its VIPs for [`ElectionConfig::standby_hold`] while peers (who treat a standby node like a leaving
//!   one) take them without probing, then lets go; an `Isolated` node Event says why. Bound:
//!   [`ElectionConfig::isolation_bound`] (about 5.3 s at the defaults) from the fault to a single owner.
//!   Peers that had taken a VIP from it meanwhile count an overlap. When heartbeats flow both
//!   ways again for [`ElectionConfig::rejoin_after`], it steps in (`Rejoined`). Two nodes that cannot
//!   hear each other do not step back at all, so a two-node split cannot darken a VIP; without
//!   the API nobody steps back (partition rules below).
//! * Heartbeats lost everywhere (a firewall on the heartbeat port, the API fine): every count
//!   is 0, nobody steps back, and while a node hears nobody, peers whose renewals say the same
//!   stay ranked by their Leases ([`Peer::alive_by_lease`]), so every node keeps what
//!   rendezvous gives it: no pile-up, one answerer per VIP. Only the node next below an owner
//!   probes it, and only probes of a VIP's first suspect are shared or mark a peer silent.
//! * An interface down or deleted withdraws only the VIPs on it; the node says `standby` only
//!   when every interface its VIPs are on is down, and forgets an interface no VIP is on.
//! * Partition between nodes: each side sees the other's heartbeats stop and its probes go
//!   unanswered, so a VIP can have an owner on both sides. When a peer we took a VIP from comes
//!   back with the *same* incarnation, it never stopped answering: we count an overlap, raise
//!   an Event and give the VIP back; the owner, seeing a peer return, re-announces the VIPs
//!   that peer could have claimed, so clients converge on one owner.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, VecDeque},
    net::IpAddr,
    rc::Rc,
    sync::Arc,
    time::Duration,
};

use announcer_ebpf::wire::MacAddr;

use super::{
    Beat, ElectionConfig, EventKind, FIRST_PROBES, IfaceName, Input, Instant, LeaseView,
    LeaseWriteResult, NodeEventKind, NodeName, NodeSet, Output, VipSpec,
    lease::Observed,
    peer::{Beaten, Peer},
    rendezvous::Ranking,
    stats::ElectionStats,
    timers::{Step, Timer, Timers},
};

/// One peer as this node sees it (for `announcer status` and the simulator).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    /// The peer.
    pub node: NodeName,
    /// Counted among the candidates right now.
    pub alive: bool,
    /// Time since its last heartbeat, if any was received.
    pub heartbeat_age: Option<Duration>,
    /// Its Lease is present and unexpired by our clock.
    pub lease_valid: bool,
    /// It announced it is leaving.
    pub leaving: bool,
}

/// A peer's silence as this node's election sees it ([`Core::peer_silences`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSilence {
    /// The peer.
    pub node: NodeName,
    /// Its heartbeats are overdue enough that the election asks its data plane (a suspect:
    /// [`ElectionConfig::suspect_after`] if it hears us, else `dead_after`); implied by
    /// `heartbeats_silent`.
    pub heartbeats_quiet: bool,
    /// No heartbeat for `dead_after`, or a probe of its data plane went unanswered since the
    /// last one ([`Peer::probed_silent`]).
    pub heartbeats_silent: bool,
    /// A probe of its data plane went unanswered since its last heartbeat.
    pub data_plane_silent: bool,
    /// Its Lease says it left for good.
    pub released: bool,
    /// VIPs it would hold, with our interface for them and the MAC it answers them with.
    pub holds: Vec<(IpAddr, IfaceName, MacAddr)>,
}

/// A failover: this node took a VIP that a peer ranked above it announced until that peer went
/// silent or said it was leaving. The shell turns these into the takeover-duration histogram:
/// from `last_heard` (the previous owner's last heartbeat) to when the map write and the first
/// announcement round are done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failover {
    /// The VIP taken.
    pub vip: IpAddr,
    /// Its previous owner.
    pub from: NodeName,
    /// When the previous owner's last heartbeat arrived (the start of the outage as this
    /// node can know it).
    pub last_heard: Instant,
    /// When this node decided to take it.
    pub decided: Instant,
}

/// Failovers kept for the shell to collect; older ones are dropped if it never does (the
/// simulator does not). As many as the data plane holds VIPs: the shell collects after each
/// batch, and one batch may take every VIP of a dead node (10,000 in issue 29's T4).
const MAX_FAILOVERS: usize = 16_384;

/// Once a suspect's data plane has answered a probe, this many probes in a row must go
/// unanswered before its VIP is taken: one lost answer must not make two owners.
pub const PROBE_LOSSES_AFTER_ANSWER: u32 = 3;

/// How late a peer's Lease renewal may be (beyond `lease_renew`) before a stepped-back node
/// stops counting on it to take a VIP ([`Core::healthy_for`]).
pub const RENEWAL_SLACK: Duration = Duration::from_secs(1);

/// A peer whose configuration fingerprint differs from ours for this long is reported: the
/// nodes may rank VIPs differently meanwhile (a ConfigMap roll in progress, or a node left on
/// an old configuration). One Event per node and episode, on that node.
pub const CONFIG_MISMATCH_AFTER: Duration = Duration::from_secs(1);

/// A takeover waiting on a probe of one suspect's data plane.
#[derive(Clone, Debug)]
struct Probe {
    target: NodeName,
    mac: MacAddr,
    /// Silence until then means this suspect is gone (or, if it answered before, one more
    /// loss).
    deadline: Instant,
    /// The last probe was answered; probe again at `deadline`.
    answered: bool,
    /// Some probe of this suspect was answered: its data plane was alive, so silence must
    /// repeat [`PROBE_LOSSES_AFTER_ANSWER`] times.
    heard: bool,
    /// Unanswered probes in a row since the last answer.
    losses: u32,
    /// Concluded: nobody answers at this MAC.
    silent: bool,
    /// The target is the first suspect in the VIP's ranking: the one that would hold it. Only
    /// such probes are shared between VIPs, and only their silence says the target's data
    /// plane is gone: a suspect ranked below another one does not hold the VIP when the one
    /// above does (a heartbeat blackout, where every peer is silent and alive), so its silence
    /// about this VIP says nothing about the VIPs it holds.
    first: bool,
}

/// A VIP handed to its new owner: we answer it until that owner's data plane does.
#[derive(Clone, Debug)]
struct Handoff {
    target: NodeName,
    /// The MAC the new owner answers the VIP with.
    mac: MacAddr,
    /// When the VIP became the new owner's.
    since: Instant,
    /// When to ask again.
    deadline: Instant,
}

/// This node stepped back: it cannot exchange heartbeats with peers that the API shows alive.
#[derive(Clone, Copy, Debug)]
struct Standby {
    /// When our Lease saying so was written: we keep answering our VIPs for
    /// [`ElectionConfig::standby_hold`] after it, while peers see it and take them.
    written: Option<Instant>,
}

/// Per-VIP state.
#[derive(Clone, Debug)]
struct Vip {
    spec: VipSpec,
    /// Eligible nodes, best first (rendezvous order), kept up to date with the spec: walk it
    /// with [`Vip::ranked`].
    ranking: Ranking,
    /// Its share of the view's fingerprint ([`view_part`]); 0 while not wanted.
    view_part: u64,
    /// The interface our entry is on, if we have one installed.
    installed: Option<IfaceName>,
    /// One per suspect ranked above us; the VIP is taken when all are silent.
    probes: Vec<Probe>,
    /// Installed here but owned by another node since then: released once that node's data
    /// plane answers it (make before break, checked where it matters).
    handoff: Option<Handoff>,
    /// We took it while this peer (incarnation) was still a member: if it comes back with the
    /// same incarnation, both of us answered.
    took_from: Option<(NodeName, u64, Instant)>,
    /// The last problem reported, so each is reported once.
    reported: Option<EventKind>,
    /// Listed in the last [`Input::Vips`]; false for entries only found at start.
    wanted: bool,
    /// When this node first learnt of the VIP: a peer silent since before then never
    /// announced it, so taking it is no failover.
    since: Instant,
    /// Found in the data plane at start and not yet reconciled: a peer may have taken it while
    /// this node was away (a crash with the link down), and clients may follow that peer's
    /// announcement, so the first reconcile after the warm-up that keeps it announces it.
    found: bool,
}

impl Vip {
    /// Its eligible nodes, best first.
    fn ranked(&self) -> impl Iterator<Item = &NodeName> {
        self.ranking
            .iter(self.spec.vip, &self.spec.eligible, &self.spec.preferred)
    }
}

/// How one eligible set became another: the nodes that joined it and those that left.
#[derive(Debug)]
struct SetChange {
    added: Vec<NodeName>,
    removed: Vec<NodeName>,
}

impl SetChange {
    /// Few enough to update a ranking in place rather than rank afresh.
    fn small(&self) -> bool {
        self.added.len() + self.removed.len() <= Ranking::KEPT
    }
}

/// The changes between eligible sets met in one [`Core::set_vips`], worked out once per pair
/// of sets. Keyed by address, so it holds both sets: an address is never reused meanwhile.
#[derive(Default)]
struct SetChanges {
    compared: HashMap<(usize, usize), Compared>,
    digests: HashMap<usize, (NodeSet, u64)>,
}

/// Two sets and how the first became the second (`None`: the same nodes).
struct Compared {
    _sets: (NodeSet, NodeSet),
    change: Option<Rc<SetChange>>,
}

impl SetChanges {
    /// How `old` became `new`; `None`: the same nodes.
    fn between(&mut self, old: &NodeSet, new: &NodeSet) -> Option<Rc<SetChange>> {
        if Arc::ptr_eq(old, new) {
            return None;
        }
        let key = (Arc::as_ptr(old) as usize, Arc::as_ptr(new) as usize);
        let entry = self.compared.entry(key).or_insert_with(|| {
            let added: Vec<NodeName> = new.difference(old).cloned().collect();
            let removed: Vec<NodeName> = old.difference(new).cloned().collect();
            let change = (!added.is_empty() || !removed.is_empty())
                .then(|| Rc::new(SetChange { added, removed }));
            Compared {
                _sets: (old.clone(), new.clone()),
                change,
            }
        });
        entry.change.clone()
    }

    /// The digest of a set's nodes, in order.
    fn digest(&mut self, set: &NodeSet) -> u64 {
        let entry = self
            .digests
            .entry(Arc::as_ptr(set) as usize)
            .or_insert_with(|| {
                let mut d = xxhash_rust::xxh3::Xxh3::new();
                for n in set.iter() {
                    d.update(n.as_str().as_bytes());
                    d.update(&[0]);
                }
                (set.clone(), d.digest())
            });
        entry.1
    }
}

/// How one node (a peer or this one) stood at a reconcile: what decides the VIPs' owners.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Standing {
    node: NodeName,
    /// Counted among the candidates ([`Core::candidate`]).
    candidate: bool,
    /// Past its warm-up (its Lease says so; ours: [`Core::is_ready`]).
    ready: bool,
    /// Silent with a Lease still valid: its VIPs wait on a probe.
    suspect: bool,
}

/// The state of a shutdown handover.
#[derive(Clone, Copy, Debug)]
struct Leaving {
    deadline: Instant,
    done: bool,
}

/// The election state machine. See the module docs.
#[derive(Debug)]
pub struct Core {
    config: ElectionConfig,
    incarnation: u64,
    started: Instant,
    ready: bool,
    synced: bool,
    vips_known: bool,
    peers: BTreeMap<NodeName, Peer>,
    vips: BTreeMap<IpAddr, Vip>,
    out: VecDeque<Output>,
    // Our Lease.
    own_rv: Option<String>,
    own_seen: bool,
    write_in_flight: bool,
    /// When the write in flight was asked for: one that takes longer than a renewal period
    /// counts as failed for trust ([`Core::write_hung`]).
    write_started: Option<Instant>,
    /// The write in flight says `standby` (so its success publishes our stepping back).
    write_says_standby: bool,
    next_write: Instant,
    last_write_ok: Option<Instant>,
    watch_ok: bool,
    trusted_since: Option<Instant>,
    // Timers.
    next_beat: Instant,
    next_refresh: Instant,
    /// Interfaces the shell reported down. One affects only the VIPs on it; only when every
    /// interface our VIPs are on is down does the node say `standby` ([`Core::links_all_down`]).
    /// Forgotten once no VIP is on it ([`Core::forget_links`]).
    links_down: BTreeSet<IfaceName>,
    leaving: Option<Leaving>,
    /// The candidate set at the last reconcile: a full reconcile runs only when it changes.
    last_view: Vec<Standing>,
    last_tick: Instant,
    /// Since when some live peer has reported reaching the API (for fencing).
    peers_api_ok_since: Option<Instant>,
    /// When the watches first listed everything. The warm-up counts from the later of this and
    /// the start: peers' Leases are only known from then, and their heartbeats must be heard
    /// for a while before this node may judge anyone dead (an agent whose first lists were
    /// slow would otherwise take every VIP at once).
    synced_at: Instant,
    /// VIPs with a probe pending, so that timers and probes do not scan every VIP.
    probing: BTreeSet<IpAddr>,
    /// Per MAC, the VIP whose first probe to it was sent or joined last: where
    /// [`Core::send_probe`] looks for a probe in flight before it scans every probing VIP
    /// (10,000 VIPs of one silent node would otherwise scan each other: 10⁸ steps).
    first_probes: HashMap<MacAddr, IpAddr>,
    stats: ElectionStats,
    /// Failovers not yet collected by [`Core::take_failovers`].
    failovers: VecDeque<Failover>,
    /// Fingerprint of the VIPs and their eligible sets ([`Beat::view`]).
    view: u64,
    /// Since when no peer exchanges heartbeats with us both ways (while peers exist).
    alone_since: Option<Instant>,
    /// Since when some peer does again (for leaving standby).
    connected_since: Option<Instant>,
    /// Set while this node stepped back.
    standby: Option<Standby>,
    /// This node exchanges heartbeats with no peer (while it has peers): peers whose Lease
    /// renewals say the same are ranked by their Leases ([`Core::alive_by_lease`]).
    blackout: bool,
    /// Since when our watches are unhealthy (for fencing on stale watches).
    watch_bad_since: Option<Instant>,
    /// Whether we were fenced at the last tick (to raise the Event once).
    was_fenced: bool,
    /// A configuration mismatch episode is under way and was counted.
    config_mismatch_reported: bool,
    /// VIPs with [`Vip::handoff`] set.
    holding: BTreeSet<IpAddr>,
    /// A Lease or link change that needs a full reconcile at the next tick.
    dirty: bool,
    /// VIPs new or changed by the last [`Input::Vips`] and not reconciled since: the next
    /// reconcile looks at these alone unless something else needs all of them (a VIP's owner
    /// depends on its own spec and the peers' standing only).
    respecced: Vec<IpAddr>,
    /// Bumped whenever a VIP is installed here or stops being ([`Core::owned_version`]).
    owned_version: u64,
    /// [`Core::poll_timeout`]'s answer since the last input that could change it (`None`:
    /// not computed yet). A steady heartbeat leaves it: it only moves a peer's silence
    /// deadline later, so the cached one is at worst early (a tick that finds nothing due).
    next_timeout: std::cell::Cell<Option<Option<Instant>>>,
}

impl Core {
    /// A core for `config`, started at `now`. `incarnation` must grow across restarts of the
    /// agent on this node (the shell uses the wall-clock start time in nanoseconds).
    pub fn new(config: ElectionConfig, now: Instant, incarnation: u64) -> Self {
        Core {
            incarnation,
            started: now,
            ready: false,
            synced: false,
            vips_known: false,
            peers: BTreeMap::new(),
            vips: BTreeMap::new(),
            out: VecDeque::new(),
            own_rv: None,
            own_seen: false,
            write_in_flight: false,
            write_started: None,
            write_says_standby: false,
            next_write: now,
            last_write_ok: None,
            watch_ok: false,
            trusted_since: None,
            next_beat: now,
            next_refresh: now + config.refresh_interval(),
            links_down: BTreeSet::new(),
            leaving: None,
            last_view: Vec::new(),
            last_tick: now,
            peers_api_ok_since: None,
            synced_at: now,
            probing: BTreeSet::new(),
            first_probes: HashMap::new(),
            stats: ElectionStats::default(),
            failovers: VecDeque::new(),
            view: 0,
            alone_since: None,
            connected_since: None,
            standby: None,
            blackout: false,
            watch_bad_since: Some(now),
            was_fenced: false,
            config_mismatch_reported: false,
            holding: BTreeSet::new(),
            dirty: false,
            respecced: Vec::new(),
            owned_version: 0,
            next_timeout: std::cell::Cell::new(None),
            config,
        }
    }

    /// Feed several events of the same moment `now`: what [`Self::handle`] does with each,
    /// except that a run of consecutive heartbeats is taken whole before the one tick it
    /// needs. Why: the shell hands over every beat queued while it was busy (hundreds at
    /// once on a large cluster, after a stall), and a tick after each of them made the
    /// catch-up cost beats × O(N log N): a loaded agent fell further behind, its peers turned
    /// suspects, and their beats changed, which cost more ticks. The one tick sees every
    /// beat of the run, the state the last of the per-beat ticks saw; the ticks in between
    /// could only act on a half-read queue. Any other input ticks the run first, so its own
    /// handling sees the state it always saw.
    pub fn handle_all(&mut self, now: Instant, inputs: impl IntoIterator<Item = Input>) {
        let mut pending = false;
        for input in inputs {
            if self.leaving.is_some_and(|l| l.done) {
                return;
            }
            match input {
                Input::Heartbeat(beat) => pending |= self.heartbeat(now, beat),
                other => {
                    if std::mem::take(&mut pending) {
                        self.next_timeout.set(None);
                        self.tick(now, false);
                    }
                    self.handle(now, other);
                }
            }
        }
        if pending {
            self.next_timeout.set(None);
            self.tick(now, false);
        }
    }

    /// Feed one event at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        if self.leaving.is_some_and(|l| l.done) {
            return;
        }
        let mut force = false;
        match input {
            Input::Tick => {}
            Input::VipsChanged { placed, gone } => {
                if !self.vips_known {
                    return;
                }
                self.change_vips(now, placed, gone);
            }
            Input::Vips(specs) => {
                self.set_vips(now, specs);
                // The first set reconciles everything (entries found at start included);
                // later ones only what they changed (`respecced`).
                force = !std::mem::replace(&mut self.vips_known, true);
            }
            Input::LeaseSeen(view) => {
                if !self.lease_seen(now, view) {
                    // A plain renewal of a beating peer: see `lease_seen`.
                    return;
                }
            }
            Input::LeaseGone(node) => {
                if node == self.config.node {
                    self.own_rv = None;
                    self.own_seen = true;
                } else {
                    // Forget it whole: state exists only for nodes with a Lease, so forged
                    // or departed names cost nothing.
                    self.peers.remove(&node);
                }
            }
            Input::LeaseWrite(result) => self.lease_written(now, result),
            Input::WatchHealth(ok) => {
                if ok && !self.watch_ok && !self.write_in_flight {
                    // Back from an outage: renew now rather than at the next retry, so that
                    // peers see us renewed before anyone could judge our Lease.
                    self.next_write = now;
                }
                self.watch_ok = ok;
                if ok {
                    self.watch_bad_since = None;
                } else if self.watch_bad_since.is_none() {
                    self.watch_bad_since = Some(now);
                }
                if ok && !self.synced {
                    self.synced = true;
                    self.synced_at = now;
                }
            }
            Input::Heartbeat(beat) => {
                if !self.heartbeat(now, beat) {
                    // Nothing a step acts on changed; the timers (`poll_timeout`) already
                    // say when the next step is due. This is most beats of a healthy
                    // cluster: without it every datagram ran a full tick, O(N + V).
                    return;
                }
            }
            Input::ProbeAnswered { vip, mac }
                if self
                    .vips
                    .get(&vip)
                    .and_then(|v| v.handoff.as_ref())
                    .is_some_and(|h| h.mac == mac) =>
            {
                // The new owner answers it: let go.
                self.stats.probes_answered += 1;
                self.release(vip);
            }
            Input::ProbeAnswered { vip, mac } => {
                // One answer proves the old owner's data plane alive for every VIP waiting on
                // it: probes to one MAC are shared (see `probe`).
                let asked = self
                    .vips
                    .get(&vip)
                    .is_some_and(|v| v.probes.iter().any(|p| p.mac == mac && !p.answered));
                if asked {
                    self.stats.probes_answered += 1;
                    let deadline = now + self.config.reprobe_interval();
                    for ip in &self.probing {
                        let Some(v) = self.vips.get_mut(ip) else {
                            continue;
                        };
                        for p in v.probes.iter_mut().filter(|p| p.mac == mac && !p.answered) {
                            p.answered = true;
                            p.heard = true;
                            p.losses = 0;
                            p.silent = false;
                            p.deadline = deadline;
                        }
                    }
                }
            }
            Input::Link { iface, up } => {
                let changed = if up {
                    self.links_down.remove(&iface)
                } else {
                    self.links_down.insert(iface)
                };
                // Renew at once: the Lease carries our links (the shell left the down one
                // out) or says `standby`, and peers take the VIPs we cannot answer from it.
                if changed && !self.write_in_flight {
                    self.next_write = now;
                }
                force = true;
            }
            Input::Existing(entries) => {
                // Rewrite them at once: the last refresh of our previous incarnation may be
                // almost a grace period old.
                for (vip, iface) in entries {
                    let v = self
                        .vips
                        .entry(vip)
                        .or_insert_with(|| Vip::placeholder(vip, now));
                    v.installed = Some(iface.clone());
                    v.found = true;
                    self.owned_version += 1;
                    let ttl = self.config.entry_ttl();
                    self.out.push_back(Output::Install { vip, iface, ttl });
                }
            }
            Input::Shutdown => {
                if self.leaving.is_none() {
                    self.leaving = Some(Leaving {
                        deadline: now + self.config.handover_timeout,
                        done: false,
                    });
                    self.next_beat = now;
                    force = true;
                }
            }
        }
        self.next_timeout.set(None);
        self.tick(now, force);
    }

    /// The next action, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When to call [`handle`](Self::handle) with [`Input::Tick`] next: the earliest of
    /// [`timers`](Self::timers).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.leaving.is_some_and(|l| l.done) {
            return None;
        }
        if let Some(cached) = self.next_timeout.get() {
            return cached;
        }
        let next = self.timers().earliest();
        self.next_timeout.set(Some(next));
        next
    }

    /// Every pending deadline, by kind. Anything due at or before the last tick was handled
    /// then (or waits for an input), so only later ones are armed.
    pub fn timers(&self) -> Timers {
        let mut timers = Timers::new(self.last_tick);
        for timer in Timer::ALL {
            self.deadlines(timer, &mut |at| timers.arm(timer, at));
        }
        timers
    }

    /// The deadlines of one kind. No `_` arm: each [`Timer`] says here when it is due, and in
    /// [`Timer::step`] which step of [`tick`](Self::tick) acts on it.
    fn deadlines(&self, timer: Timer, at: &mut impl FnMut(Instant)) {
        match timer {
            Timer::Beat => at(self.next_beat),
            Timer::LeaseWrite => {
                if !self.write_in_flight {
                    at(self.next_write);
                }
            }
            Timer::Refresh => {
                if self.vips.values().any(|v| v.installed.is_some()) {
                    at(self.next_refresh);
                }
            }
            Timer::Warmup => {
                if !self.ready {
                    at(self.started.max(self.synced_at) + self.config.warmup);
                }
            }
            Timer::Leaving => {
                if let Some(l) = self.leaving {
                    at(l.deadline);
                }
            }
            Timer::PeerSilent => {
                for after in [self.config.suspect_after(), self.config.dead_after()] {
                    self.peers
                        .values()
                        .filter_map(|p| p.beat_deadline(after))
                        .for_each(&mut *at);
                }
            }
            Timer::PeerLeaseExpiry => self
                .peers
                .values()
                .filter_map(|p| p.lease_deadline(self.trusted_since))
                .for_each(at),
            Timer::PeerPatience => self
                .peers
                .values()
                .filter_map(|p| p.patience_deadline(self.patience()))
                .for_each(at),
            Timer::PeerAliveByApi => self
                .peers
                .values()
                .filter_map(|p| p.alive_by_api_deadline(self.api_freshness()))
                .for_each(at),
            Timer::OwnLease => {
                if let Some(ok) = self.last_write_ok {
                    at(ok + self.config.lease_duration);
                }
                if let (true, Some(s)) = (self.write_in_flight, self.write_started) {
                    at(s + self.config.lease_renew);
                }
            }
            Timer::Probe => {
                for v in self.probing.iter().filter_map(|ip| self.vips.get(ip)) {
                    v.probes
                        .iter()
                        .filter(|p| !p.silent)
                        .for_each(|p| at(p.deadline));
                }
            }
            Timer::HandoffAsk | Timer::HandoffHold => {
                let hold = self.config.view_hold();
                let handoffs = self
                    .holding
                    .iter()
                    .filter_map(|ip| self.vips.get(ip).and_then(|v| v.handoff.as_ref()));
                for h in handoffs {
                    at(if timer == Timer::HandoffAsk {
                        h.deadline
                    } else {
                        h.since + hold
                    });
                }
            }
            Timer::StandbyHold => {
                if let Some(w) = self.standby.and_then(|s| s.written) {
                    at(w + self.config.standby_hold());
                }
            }
            Timer::Alone => {
                if let Some(t) = self.alone_since {
                    at(t + self.config.dead_after());
                }
            }
            Timer::Rejoin => {
                if let Some(t) = self.connected_since {
                    at(t + self.config.rejoin_after());
                }
            }
            Timer::Fence => {
                if let (Some(t), Some(ok)) = (self.watch_bad_since, self.peers_api_ok_since) {
                    at(t.max(ok) + self.config.watch_stale_after());
                }
            }
            Timer::ConfigMismatch => {
                if !self.config_mismatch_reported {
                    self.peers
                        .values()
                        .filter_map(|p| p.config_mismatch)
                        .for_each(|t| at(t + CONFIG_MISMATCH_AFTER));
                }
            }
        }
    }

    /// The VIPs this node has installed in its data plane, with their interface.
    pub fn owned(&self) -> Vec<(IpAddr, IfaceName)> {
        self.vips
            .iter()
            .filter_map(|(ip, v)| Some((*ip, v.installed.clone()?)))
            .collect()
    }

    /// Changes whenever [`owned`](Self::owned) may have: a caller that shows the owned VIPs
    /// rebuilds its copy only then (with 1,000 VIPs, rebuilding it four times a second was a
    /// tenth of an idle agent's CPU).
    pub fn owned_version(&self) -> u64 {
        self.owned_version
    }

    /// Peers as seen from here.
    pub fn peers(&self, now: Instant) -> Vec<PeerStatus> {
        self.peers
            .iter()
            .map(|(n, p)| PeerStatus {
                node: n.clone(),
                alive: self.candidate(n, now),
                heartbeat_age: p.last_beat.map(|t| now.saturating_duration_since(t)),
                lease_valid: p.member(now, self.trusted_since),
                leaving: p.leaving,
            })
            .collect()
    }

    /// Counters.
    pub fn stats(&self) -> ElectionStats {
        self.stats.clone()
    }

    /// The failovers since the last call, oldest first (at most the last 16,384).
    pub fn take_failovers(&mut self) -> Vec<Failover> {
        self.failovers.drain(..).collect()
    }

    /// Whether this node has stepped back (isolated; see the module docs).
    pub fn is_standby(&self) -> bool {
        self.standby.is_some()
    }

    /// Whether the warm-up is over (the readiness probe).
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    /// Whether this node should report cluster-wide problems about `key` (a VIP, a Service):
    /// the rendezvous top of the live nodes, so that one node reports each, not all of them.
    pub fn is_reporter(&self, key: &str, now: Instant) -> bool {
        let live = self
            .peers
            .keys()
            .filter(|n| self.candidate(n, now))
            .chain([&self.config.node]);
        super::rendezvous::owner_of_key(key.as_bytes(), live) == Some(&self.config.node)
    }

    /// Peers we exchange heartbeats with both ways right now (what our Lease renewals publish
    /// as `connected`). Read-only, for the unreachable report: with none, this node is blind.
    pub fn connected_peers(&self, now: Instant) -> u32 {
        self.connected(now)
    }

    /// Whether this node says `standby` in its Lease: stepped back (isolated), or every
    /// interface its VIPs are on is down. Read-only, for the unreachable report.
    pub fn standby_or_links_down(&self) -> bool {
        self.says_standby()
    }

    /// What the election knows of each peer's silence, for the unreachable report
    /// (`agent::unreachable`). Read-only; nothing here changes what the core decides.
    ///
    /// `holds` is computed only for peers whose heartbeats are quiet and for which
    /// `holds_for` says so (it scans every VIP: the caller caches it): the VIPs it would hold
    /// if it were alive (the top of the VIP's ranking among the candidates and itself, with a
    /// link for it), with the interface we announce the VIP on and the MAC its data plane
    /// answers the VIP with, at most `max_holds` of them. Empty: as far as we know it owned no
    /// VIP, so its XDP program had nothing to answer.
    pub fn peer_silences(
        &self,
        now: Instant,
        max_holds: usize,
        holds_for: impl Fn(&NodeName) -> bool,
    ) -> Vec<PeerSilence> {
        let dead_after = self.config.dead_after();
        self.peers
            .iter()
            .map(|(n, p)| {
                let heartbeats_silent = !p.beating(now, dead_after);
                let quiet = heartbeats_silent || !p.beating(now, self.quiet_after(p));
                let mut holds = Vec::new();
                if quiet && holds_for(n) {
                    for (ip, v) in &self.vips {
                        if holds.len() >= max_holds {
                            break;
                        }
                        let only = v.spec.interfaces.as_slice();
                        let top = v.ranked().find(|m| {
                            if *m == n {
                                p.can_announce(*ip, only)
                            } else {
                                self.candidate_for(m, *ip, now)
                            }
                        });
                        if top == Some(n)
                            && let (Some(iface), Some(mac)) =
                                (v.spec.local.clone(), p.probe_mac(*ip, only))
                        {
                            holds.push((*ip, iface, mac));
                        }
                    }
                }
                PeerSilence {
                    node: n.clone(),
                    heartbeats_quiet: quiet,
                    heartbeats_silent,
                    data_plane_silent: p.probed_silent(),
                    released: p.released,
                    holds,
                }
            })
            .collect()
    }

    /// Renew our Lease at the next tick rather than at the next renewal, so that what the
    /// shell changed in its contents reaches peers at once. `false` while a write is in flight
    /// (the caller asks again when its result is in) or while leaving.
    pub fn renew_now(&mut self, now: Instant) -> bool {
        if self.write_in_flight || self.leaving.is_some() {
            return false;
        }
        self.next_write = self.next_write.min(now);
        true
    }

    /// This node's configuration.
    pub fn config(&self) -> &ElectionConfig {
        &self.config
    }

    /// This agent's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    // ---- inputs ----

    /// The full VIP set: each spec upserted, every VIP not listed dropped.
    fn set_vips(&mut self, now: Instant, specs: Vec<VipSpec>) {
        let listed: BTreeSet<IpAddr> = specs.iter().map(|s| s.vip).collect();
        let unlisted: Vec<IpAddr> = self
            .vips
            .keys()
            .filter(|ip| !listed.contains(ip))
            .copied()
            .collect();
        self.change_vips(now, specs, unlisted);
    }

    /// Upserts `placed`, drops `gone`: O((placed + gone) · log V) plus the view's fingerprint.
    fn change_vips(&mut self, now: Instant, placed: Vec<VipSpec>, gone: Vec<IpAddr>) {
        // Most VIPs share their eligible set (one `Arc`), so the change between an old and a
        // new set is worked out once per pair of sets, not once per VIP.
        let mut changes = SetChanges::default();
        for spec in placed {
            self.upsert_vip(now, spec, &mut changes);
        }
        for ip in gone {
            // No longer wanted: drop the entry.
            let Some(v) = self.vips.remove(&ip) else {
                continue;
            };
            self.view = self.view.wrapping_sub(v.view_part);
            if let Some(iface) = v.installed {
                self.out.push_back(Output::Remove { vip: ip, iface });
                self.stats.releases += 1;
            }
        }
        self.forget_links();
        let vips = &self.vips;
        self.probing
            .retain(|ip| vips.get(ip).is_some_and(|v| !v.probes.is_empty()));
        self.holding
            .retain(|ip| vips.get(ip).is_some_and(|v| v.handoff.is_some()));
    }

    fn upsert_vip(&mut self, now: Instant, mut spec: VipSpec, changes: &mut SetChanges) {
        let part = view_part(spec.vip, changes.digest(&spec.eligible));
        let Some(v) = self.vips.get_mut(&spec.vip) else {
            self.respecced.push(spec.vip);
            self.view = self.view.wrapping_add(part);
            let v = Vip {
                ranking: Ranking::new(spec.vip, &spec.eligible, &spec.preferred),
                view_part: part,
                spec,
                installed: None,
                probes: Vec::new(),
                handoff: None,
                took_from: None,
                reported: None,
                wanted: true,
                since: now,
                found: false,
            };
            self.vips.insert(v.spec.vip, v);
            return;
        };
        // The ranking depends on the eligible and preferred nodes only: most re-plans change
        // neither for most VIPs, and ranking costs N hashes.
        let change = changes.between(&v.spec.eligible, &spec.eligible);
        let preferred_alike = v.spec.preferred == spec.preferred;
        let ranked_alike = change.is_none() && preferred_alike;
        if !ranked_alike || v.spec.local != spec.local || v.spec.interfaces != spec.interfaces {
            v.reported = None;
        }
        if change.is_none() {
            // Keep the set we had: equal, and likely shared with other VIPs.
            spec.eligible = v.spec.eligible.clone();
        }
        match change.as_deref() {
            None if preferred_alike => {}
            Some(c) if preferred_alike && c.small() => v.ranking.update(
                spec.vip,
                &spec.eligible,
                &spec.preferred,
                &c.added,
                &c.removed,
            ),
            _ => v.ranking = Ranking::new(spec.vip, &spec.eligible, &spec.preferred),
        }
        if v.spec != spec || !v.wanted {
            self.respecced.push(spec.vip);
        }
        self.view = self.view.wrapping_sub(v.view_part).wrapping_add(part);
        v.view_part = part;
        v.spec = spec;
        v.wanted = true;
    }

    /// Records a Lease; whether it is news a step acts on (then the caller ticks). A peer's
    /// plain renewal is not: it was beating (not even suspect), we are not alone, and the
    /// Lease says what it said (released, standby, connected, links, duration); only its
    /// `resourceVersion`, renew time and when we saw it move, which the timers read. Each peer
    /// renews every few seconds, so an agent sees N of these per renewal period.
    fn lease_seen(&mut self, now: Instant, view: LeaseView) -> bool {
        if view.node == self.config.node {
            self.own_rv = Some(view.resource_version);
            self.own_seen = true;
            return true;
        }
        let suspect_after = self.config.suspect_after();
        let alone = self.alone_since.is_some();
        if let Some(p) = self.peers.get_mut(&view.node)
            && let Some(o) = p.lease.as_mut()
            && !alone
            && p.last_beat.is_some_and(|b| now < b + suspect_after)
            && p.released == view.released
            && p.standby == view.standby
            && p.connected == view.connected
            && p.links == view.links
            && o.duration == view.duration
        {
            o.update(view.resource_version, view.renew_time, view.duration, now);
            return false;
        }
        let p = self
            .peers
            .entry(view.node.clone())
            .or_insert_with(Peer::new);
        p.released = view.released;
        let stepped_back = view.standby && !p.standby;
        if p.standby != view.standby || p.links != view.links {
            self.dirty = true;
        }
        p.standby = view.standby;
        p.connected = view.connected;
        p.links = view.links;
        let dead_after = self.config.dead_after();
        let silent = p.last_beat.is_some_and(|b| now >= b + dead_after);
        // Trusted since before its last heartbeat: this renewal came in time.
        let timely = self
            .trusted_since
            .is_some_and(|t| p.last_beat.is_some_and(|b| t <= b));
        match &mut p.lease {
            Some(o) => {
                if o.update(view.resource_version, view.renew_time, view.duration, now) && silent {
                    p.renewals_while_silent += 1;
                    if timely {
                        p.timely_renewals_while_silent += 1;
                    }
                }
            }
            None => {
                p.lease = Some(Observed::new(
                    view.resource_version,
                    view.renew_time,
                    view.duration,
                    now,
                ))
            }
        }
        if stepped_back {
            self.count_overlaps_with(now, &view.node);
        }
        true
    }

    /// `from` turned out to have been up and answering while we held VIPs we took from it as
    /// a silent member (it stepped back, isolated): both of us answered them meanwhile.
    fn count_overlaps_with(&mut self, now: Instant, from: &NodeName) {
        let me = self.config.node.clone();
        let ips: Vec<IpAddr> = self
            .vips
            .iter()
            .filter(|(_, v)| {
                v.installed.is_some() && v.took_from.as_ref().is_some_and(|(n, _, _)| n == from)
            })
            .map(|(ip, _)| *ip)
            .collect();
        for ip in ips {
            let v = self.vips.get_mut(&ip).expect("listed");
            let Some((_, _, since)) = v.took_from.take() else {
                continue;
            };
            self.stats.overlaps += 1;
            let secs = now.saturating_duration_since(since).as_secs_f64();
            self.report_always(ip, EventKind::Overlap, format!(
                "{from} and {me} both answered {ip} for up to {secs:.1}s: {from} could not exchange heartbeats with its peers and has stepped back; {me} keeps it"
            ));
        }
    }

    fn lease_written(&mut self, now: Instant, result: LeaseWriteResult) {
        self.write_in_flight = false;
        self.write_started = None;
        match result {
            LeaseWriteResult::Written { resource_version } => {
                self.own_rv = Some(resource_version);
                self.last_write_ok = Some(now);
                self.next_write = now + self.config.lease_renew;
                if let Some(s) = &mut self.standby
                    && s.written.is_none()
                {
                    if self.write_says_standby {
                        s.written = Some(now);
                    } else {
                        // A renewal from before we stepped back: publish it now.
                        self.next_write = now;
                    }
                } else if self.write_says_standby != self.says_standby() {
                    // Our standby changed while the write was in flight: correct it now.
                    self.next_write = now;
                }
            }
            LeaseWriteResult::Conflict => {
                // Someone (our previous incarnation, a racing create) wrote it. The watch brings
                // the fresh resourceVersion; try again shortly with whatever we know then.
                self.stats.lease_conflicts += 1;
                self.next_write = now + self.config.heartbeat_interval;
            }
            LeaseWriteResult::Failed => {
                self.stats.lease_failures += 1;
                self.next_write = now + self.config.lease_renew.min(Duration::from_secs(1));
            }
        }
    }

    /// Records a heartbeat; whether it changed anything a step acts on (then the caller
    /// ticks).
    fn heartbeat(&mut self, now: Instant, beat: Beat) -> bool {
        if beat.node == self.config.node {
            return false;
        }
        let ours = self.config.config_hash;
        let silent = (self.config.suspect_after(), self.config.dead_after());
        // Only nodes with a Lease have state: a beat from any other name allocates nothing.
        let Some(p) = self.peers.get_mut(&beat.node) else {
            return false;
        };
        match p.beat(now, &beat, &self.config.node, silent) {
            Beaten::Stale | Beaten::Steady => false,
            Beaten::Changed => {
                if p.config == ours {
                    p.config_mismatch = None;
                } else if p.config_mismatch.is_none() {
                    p.config_mismatch = Some(now);
                }
                true
            }
        }
    }

    // ---- the clockwork ----

    /// Runs every [`Step`] in [`Step::ORDER`]; each acts on its [`Timer`]s that are due (and
    /// on what the inputs since the last tick changed).
    fn tick(&mut self, now: Instant, force: bool) {
        self.last_tick = now;
        let mut force = force;
        for step in Step::ORDER {
            self.step(step, now, &mut force);
        }
    }

    fn step(&mut self, step: Step, now: Instant, force: &mut bool) {
        match step {
            Step::Trust => self.update_trust(now),
            Step::PeersApiOk => self.update_peers_api_ok(now),
            Step::Ready => self.update_ready(now),
            Step::Isolation => self.update_isolation(now),
            Step::NodeConditions => self.report_node_conditions(now),
            Step::Force => {
                *force = *force || std::mem::take(&mut self.dirty) || self.hold_due(now);
            }
            Step::WriteLease => self.write_lease(now),
            Step::Reconcile => self.reconcile(now, *force),
            Step::Probes => self.probes(now),
            Step::Handoffs => self.handoffs(now),
            Step::Refresh => self.refresh(now),
            Step::Handover => self.handover(now),
            Step::SendBeat => self.send_beat(now),
        }
    }

    /// Ready once the watches listed everything, the VIPs are known and the warm-up is over.
    fn update_ready(&mut self, now: Instant) {
        if !self.ready
            && self.leaving.is_none()
            && self.synced
            && now >= self.started.max(self.synced_at) + self.config.warmup
            && self.vips_known
        {
            self.ready = true;
        }
    }

    /// What our Lease says: stepped back (isolated), or an announcing link is down. Peers take
    /// the VIPs of a standby node without probing; when our link is down our heartbeats may not
    /// reach them to say `leaving`, and the API may still (a management network).
    fn says_standby(&self) -> bool {
        self.standby.is_some() || self.links_all_down()
    }

    /// Every interface our VIPs are on is down (and at least one is): the node can announce
    /// nothing, its heartbeats may not get out, so it says `standby` and `leaving` and peers
    /// take every VIP without probing. With one interface down among others, only the VIPs on
    /// it are affected ([`Core::can_announce`]).
    fn links_all_down(&self) -> bool {
        !self.links_down.is_empty()
            && !self.vips.values().any(|v| {
                v.wanted
                    && v.spec
                        .local
                        .as_ref()
                        .is_some_and(|i| !self.links_down.contains(i))
            })
    }

    /// Drops the down interfaces no VIP is on (in its spec or its installed entry): an
    /// interface deleted or no longer chosen is forgotten, not held against the node.
    fn forget_links(&mut self) {
        let vips = &self.vips;
        self.links_down.retain(|i| {
            vips.values()
                .any(|v| v.spec.local.as_ref() == Some(i) || v.installed.as_ref() == Some(i))
        });
    }

    /// Peers we exchange heartbeats with both ways right now.
    fn connected(&self, now: Instant) -> u32 {
        let dead_after = self.config.dead_after();
        let n = self
            .peers
            .values()
            .filter(|p| p.hears_us && p.beating(now, dead_after))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Steps back when this node cannot exchange heartbeats with any peer while the API shows
    /// a better-connected peer alive, and steps in again when heartbeats flow both ways.
    ///
    /// Why: a node whose heartbeats are not heard (its clock off by more than the skew
    /// window, UDP blocked one way, a key its peers do not have) but whose Lease stays valid
    /// would otherwise keep its VIPs while its peers, after a lost probe answer, take them
    /// too, for as long as the fault lasts. Heartbeats cannot settle it, so the API does: the
    /// Lease is written anyway every `lease_renew`, and carries how many peers each node
    /// hears both ways. A node that hears nobody steps back only for a peer that hears somebody
    /// (strictly better connected; 0 against 0 is a blackout or a split, where stepping back
    /// would pile every VIP onto one node or darken them, so nobody does). Only a peer
    /// whose Lease was renewed after we went deaf counts: a crashed peer's Lease stays valid
    /// for a while but is not renewed, and must not make the survivor step back.
    fn update_isolation(&mut self, now: Instant) {
        let has_peers = self
            .peers
            .values()
            .any(|p| p.lease.is_some() && !p.released);
        self.blackout = has_peers && self.connected(now) == 0;
        if !self.blackout {
            self.alone_since = None;
            if self.standby.is_some() {
                let since = *self.connected_since.get_or_insert(now);
                if now >= since + self.config.rejoin_after() {
                    self.standby = None;
                    self.connected_since = None;
                    self.next_write = now;
                    self.dirty = true;
                    let me = &self.config.node;
                    self.out.push_back(Output::NodeEvent {
                        kind: NodeEventKind::Rejoined,
                        message: format!(
                            "{me} exchanges heartbeats with its peers again and takes VIPs again"
                        ),
                    });
                }
            }
            return;
        }
        self.connected_since = None;
        if !self.ready {
            // Peers learn our key from our Lease and start hearing us during the warm-up:
            // count from readiness, not from start.
            self.alone_since = None;
            return;
        }
        let alone = *self.alone_since.get_or_insert(now);
        // A peer's heartbeats reach us again since a moment: a heal, most likely, and it has
        // not heard ours yet (that takes a heartbeat each way). Give it `dead_after` to say it
        // hears us rather than step back as the fault ends (a one-way fault, where its
        // heartbeats never stopped reaching us, is not deferred).
        let dead_after = self.config.dead_after();
        let resuming = self.peers.values().any(|p| {
            p.beating(now, dead_after)
                && p.beating_since
                    .is_some_and(|t| t > alone && now < t + dead_after)
        });
        if self.standby.is_some()
            || !self.ready
            || self.leaving.is_some()
            || self.trusted_since.is_none()
            || now < alone + dead_after
            || resuming
        {
            return;
        }
        let me = self.config.node.clone();
        let trusted = self.trusted_since;
        let settled = self.api_settled();
        let better = self.peers.iter().find(|(_, p)| {
            p.member(now, trusted)
                && !p.standby
                && p.better_connected_since(alone, now, dead_after, settled)
        });
        let Some((peer, p)) = better else { return };
        let message = format!(
            "{me} has exchanged no heartbeats with any of its {} peers for {:.1}s while the API shows them alive ({peer} exchanges them with {}): stepping back, its VIPs move to its peers (check clock sync, the heartbeat port between nodes both ways, and the peers' published heartbeat keys)",
            self.peers.len(),
            now.saturating_duration_since(alone).as_secs_f64(),
            p.connected.unwrap_or(0),
        );
        self.standby = Some(Standby { written: None });
        self.stats.standbys += 1;
        // VIPs we took from members that went silent may have been answered by them all
        // along (we are the deaf one): those were overlaps.
        let taken: Vec<(IpAddr, NodeName, Instant)> = self
            .vips
            .iter_mut()
            .filter(|(_, v)| v.installed.is_some())
            .filter_map(|(ip, v)| {
                let (from, _, since) = v.took_from.take()?;
                Some((*ip, from, since))
            })
            .collect();
        for (ip, from, since) in taken {
            self.stats.overlaps += 1;
            let secs = now.saturating_duration_since(since).as_secs_f64();
            self.report_always(ip, EventKind::Overlap, format!(
                "{from} and {me} may both have answered {ip} for up to {secs:.1}s: {me} could not exchange heartbeats with its peers and steps back; {from} keeps it"
            ));
        }
        self.next_write = now;
        self.dirty = true;
        self.out.push_back(Output::NodeEvent {
            kind: NodeEventKind::Isolated,
            message,
        });
    }

    /// Node-level conditions raised once per episode: a peer on another configuration, and
    /// our own fencing.
    fn report_node_conditions(&mut self, now: Instant) {
        let ours = self.config.config_hash;
        let dead_after = self.config.dead_after();
        let others: Vec<(NodeName, u64)> = self
            .peers
            .iter()
            .filter(|(_, p)| p.beating(now, dead_after))
            .filter(|(_, p)| {
                p.config_mismatch
                    .is_some_and(|since| now >= since + CONFIG_MISMATCH_AFTER)
            })
            .map(|(n, p)| (n.clone(), p.config))
            .collect();
        if others.is_empty() {
            self.config_mismatch_reported = false;
        } else if !self.config_mismatch_reported {
            self.config_mismatch_reported = true;
            self.stats.config_mismatches += 1;
            let list: Vec<String> = others
                .iter()
                .map(|(n, h)| format!("{n} ({h:016x})"))
                .collect();
            self.out.push_back(Output::NodeEvent {
                kind: NodeEventKind::ConfigMismatch,
                message: format!(
                    "peers run another configuration than {} ({ours:016x}): {}; nodes may rank VIPs differently until every agent runs the same one (expected while a ConfigMap change rolls out)",
                    self.config.node,
                    list.join(", ")
                ),
            });
        }
        let fenced = self.fenced(now);
        if fenced && !self.was_fenced {
            let me = &self.config.node;
            let why = if self.watch_bad_since.is_some() {
                "its watches of the API have failed"
            } else {
                "its Lease renewals have failed"
            };
            self.out.push_back(Output::NodeEvent {
                kind: NodeEventKind::Fenced,
                message: format!(
                    "{me} is fenced: {why} for a Lease duration while peers reach the API; it stops announcing so that the cluster converges"
                ),
            });
        }
        self.was_fenced = fenced;
    }

    /// Our standby hold is over while we still hold VIPs: reconcile them.
    fn hold_due(&self, now: Instant) -> bool {
        self.standby
            .and_then(|s| s.written)
            .is_some_and(|w| now >= w + self.config.standby_hold())
            && self.vips.values().any(|v| v.installed.is_some())
    }

    /// Drives handoffs: the new owner's data plane answered (release), or is asked again; if it
    /// still does not answer `view_hold` after the move although it shares our view (so it
    /// should have the VIP: its data plane may be broken), let go anyway. While its view
    /// differs (a lagging watch, a config roll) we keep answering: one owner, never none.
    fn handoffs(&mut self, now: Instant) {
        let hold = self.config.view_hold();
        let due: Vec<IpAddr> = self
            .holding
            .iter()
            .copied()
            .filter(|ip| {
                self.vips[ip]
                    .handoff
                    .as_ref()
                    .is_some_and(|h| now >= h.deadline || now >= h.since + hold)
            })
            .collect();
        for ip in due {
            let v = self.vips.get_mut(&ip).expect("holding");
            let Some(h) = v.handoff.clone() else { continue };
            // Asked every probe timeout: a lost answer only prolongs a (harmless) overlap.
            let same_view = self
                .peers
                .get(&h.target)
                .is_some_and(|p| p.view == self.view);
            if now >= h.since + hold && same_view {
                self.release(ip);
                continue;
            }
            if now >= h.deadline
                && let Some(iface) = v.installed.clone()
            {
                v.handoff = Some(Handoff {
                    deadline: now + self.config.probe_timeout,
                    ..h.clone()
                });
                self.stats.probes += 1;
                self.out.push_back(Output::Probe {
                    vip: ip,
                    iface,
                    mac: h.mac,
                });
            }
        }
    }

    /// A Lease write has been in flight for a renewal period: the API server hangs (stopped,
    /// overloaded, or its packets dropped) rather than refuses. Nothing fails then, and the
    /// watches stay open but silent, so without this the nodes would stop trusting the API
    /// only as their last writes aged, one by one, up to a renewal period apart, and the first
    /// to lapse would see its peers still trusting the API and fence itself. Counting a hung
    /// write as failed makes every node distrust the API within two renewal periods of the
    /// hang, before any Lease (written at most a renewal period before it) lapses, as long as
    /// the Lease lasts more than three renewal periods (the defaults: 10 s and 3 s).
    fn write_hung(&self, now: Instant) -> bool {
        self.write_in_flight
            && self
                .write_started
                .is_some_and(|s| now >= s + self.config.lease_renew)
    }

    /// Whether this node trusts the API: its watches are healthy and its Lease writes succeed
    /// (what heartbeats say as `api_ok`).
    pub fn trusts_api(&self) -> bool {
        self.trusted_since.is_some()
    }

    fn update_trust(&mut self, now: Instant) {
        let own_ok = self
            .last_write_ok
            .is_some_and(|t| now < t + self.config.lease_duration)
            && !self.write_hung(now);
        let trusted = self.watch_ok && own_ok;
        match (trusted, self.trusted_since) {
            (true, None) => self.trusted_since = Some(now),
            (false, Some(_)) => self.trusted_since = None,
            _ => {}
        }
    }

    fn write_lease(&mut self, now: Instant) {
        if self.write_in_flight || now < self.next_write || self.leaving.is_some() {
            return;
        }
        // Create only when we know there is none; otherwise wait for the watch to tell us the
        // resourceVersion to carry.
        if self.own_rv.is_none() && !self.own_seen && self.last_write_ok.is_none() && !self.synced {
            return;
        }
        self.write_in_flight = true;
        self.write_started = Some(now);
        self.write_says_standby = self.says_standby();
        self.stats.lease_writes += 1;
        self.out.push_back(Output::WriteLease {
            resource_version: self.own_rv.clone(),
            release: false,
            standby: self.says_standby(),
            connected: Some(self.connected(now)),
        });
    }

    /// Whether `node` counts in the ranking right now.
    fn candidate(&self, node: &NodeName, now: Instant) -> bool {
        if *node == self.config.node {
            return self.ready
                && self.leaving.is_none()
                && self.standby.is_none()
                && !self.links_all_down()
                && !self.fenced(now);
        }
        self.peers.get(node).is_some_and(|p| {
            !p.leaving
                && !p.standby
                && p.member(now, self.trusted_since)
                && (p.beating(now, self.config.dead_after())
                    || p.alive_by_api(now, self.api_settled(), self.api_freshness())
                    || self.alive_by_lease(node, now))
                && p.settled(now, self.patience())
        })
    }

    /// A heartbeat blackout: neither we nor `node` exchange heartbeats with anybody, and its
    /// Lease renewals say it is alive ([`Peer::alive_by_lease`]). It stays a candidate, so
    /// every node keeps what rendezvous gives it among the Leases and nothing piles onto one
    /// node (a peer with 0 connections is no better than us: nobody steps back). It is still
    /// a suspect: the next candidate below it probes its data plane, and takes its VIPs if it
    /// does not answer (a crash, or its link dead without losing carrier). When its renewals
    /// stop (a crash), it stops counting `2 × lease_renew` after the last one.
    fn alive_by_lease(&self, node: &NodeName, now: Instant) -> bool {
        self.blackout
            && self.peers.get(node).is_some_and(|p| {
                !p.beating(now, self.config.dead_after())
                    && p.alive_by_lease(now, self.api_settled(), self.api_freshness())
            })
    }

    /// How long a Lease renewal proves a peer alive whose heartbeats do not reach us: two of
    /// our renewal periods (agents of one cluster renew at the same period), so one late
    /// renewal is not a death.
    fn api_freshness(&self) -> Duration {
        self.config.lease_renew * 2
    }

    /// How long after a peer's last heartbeat here its Lease renewal must come to speak for
    /// its state after the cut (its own dead-after, plus a heartbeat of slack for the watch).
    fn api_settled(&self) -> Duration {
        self.config.dead_after() + self.config.heartbeat_interval
    }

    /// Whether `node` can take `vip` from a node that stepped back (which hears nobody, so
    /// judges by the Leases): eligible (ranked), a member that neither left nor stepped back,
    /// with a link for it, and healthy: a candidate, or renewing its Lease on time (its last
    /// renewal at most `lease_renew` + [`RENEWAL_SLACK`] ago). A member whose renewals
    /// stopped (crashed, its Lease not yet expired) cannot: counting it darkened the VIP until
    /// that Lease expired.
    fn healthy_for(&self, node: &NodeName, vip: IpAddr, now: Instant) -> bool {
        if self.candidate_for(node, vip, now) {
            return true;
        }
        let only = self.interfaces_for(vip);
        self.peers.get(node).is_some_and(|p| {
            p.member(now, self.trusted_since)
                && !p.standby
                && !p.leaving
                && p.can_announce(vip, only)
                && p.lease
                    .as_ref()
                    .is_some_and(|l| now < l.changed_at + self.config.lease_renew + RENEWAL_SLACK)
        })
    }

    /// A candidate that can announce `vip` (has an interface for it): only such a node is
    /// ranked for it, so a VIP never lands where it cannot be answered.
    fn candidate_for(&self, node: &NodeName, vip: IpAddr, now: Instant) -> bool {
        self.candidate(node, now) && self.can_announce(node, vip)
    }

    fn can_announce(&self, node: &NodeName, vip: IpAddr) -> bool {
        if *node == self.config.node {
            return self.vips.get(&vip).is_some_and(|v| {
                v.spec
                    .local
                    .as_ref()
                    .is_some_and(|i| !self.links_down.contains(i))
            });
        }
        let only = self.interfaces_for(vip);
        self.peers
            .get(node)
            .is_some_and(|p| p.can_announce(vip, only))
    }

    /// The interfaces `vip` is restricted to ([`VipSpec::interfaces`]; empty: any).
    fn interfaces_for(&self, vip: IpAddr) -> &[String] {
        self.vips
            .get(&vip)
            .map_or(&[][..], |v| v.spec.interfaces.as_slice())
    }

    /// How long a peer that is beating but not ready still counts (its warm-up, generously).
    fn patience(&self) -> Duration {
        (self.config.warmup * 4).max(Duration::from_secs(2))
    }

    /// Could still be answering although it is not a candidate: a member whose heartbeats
    /// stopped ([`Self::quiet_after`]) without it saying goodbye.
    fn suspect(&self, node: &NodeName, now: Instant) -> Option<MacAddr> {
        let p = self.peers.get(node)?;
        let silent = !p.beating(now, self.quiet_after(p))
            && !p.alive_by_api(now, self.api_settled(), self.api_freshness())
            && !p.leaving
            && !p.standby;
        (silent && p.member(now, self.trusted_since))
            .then_some(p.mac)
            .flatten()
    }

    /// How long `p`'s heartbeats must be silent before it is a suspect: one heartbeat overdue
    /// by half a period ([`ElectionConfig::suspect_after`]) if its last heartbeat said it hears ours,
    /// else the full [`ElectionConfig::dead_after`]. A peer that does not hear us may not receive our
    /// frames at all (a link that fails one way), and then neither does our probe: its silence
    /// would prove nothing, and two heartbeats lost on the way back would be enough for a false
    /// takeover. So it gets three periods before we ask, as before the early probe (a crash of
    /// such a peer is taken over `dead_after + probe_timeout` after its last heartbeat).
    fn quiet_after(&self, p: &Peer) -> Duration {
        if p.hears_us {
            self.config.suspect_after()
        } else {
            self.config.dead_after()
        }
    }

    /// [`suspect`](Self::suspect) for one VIP: the MAC its data plane answers `vip` with (by its
    /// published links), `None` if it is no suspect or cannot announce `vip` at all.
    fn suspect_for(&self, node: &NodeName, vip: IpAddr, now: Instant) -> Option<MacAddr> {
        self.suspect(node, now)?;
        let p = self.peers.get(node)?;
        let only = self.interfaces_for(vip);
        if !p.can_announce(vip, only) {
            return None;
        }
        p.probe_mac(vip, only)
    }

    /// Our Lease has lapsed in the eyes of peers that reach the API: they give us a full Lease
    /// duration from when they regained trust, so we count from the later of our last
    /// successful write and the moment some peer started reporting `api_ok`. (Counting from
    /// our last write alone fenced every node after a long cluster-wide outage.)
    fn fenced(&self, now: Instant) -> bool {
        let Some(peers_ok) = self.peers_api_ok_since else {
            return false;
        };
        let since = self.last_write_ok.unwrap_or(self.started).max(peers_ok);
        // Watches that fail while writes succeed: our Lease looks fine to peers, but our view
        // of the cluster is stale, so we fence too.
        let watch_stale = self.watch_bad_since.is_some_and(|t| {
            self.synced && now >= t.max(peers_ok) + self.config.watch_stale_after()
        });
        now >= since + self.config.lease_duration || watch_stale
    }

    fn update_peers_api_ok(&mut self, now: Instant) {
        let dead_after = self.config.dead_after();
        let any = self
            .peers
            .values()
            .any(|p| p.api_ok && p.beating(now, dead_after) && !p.leaving);
        match (any, self.peers_api_ok_since) {
            (true, None) => self.peers_api_ok_since = Some(now),
            (false, Some(_)) => self.peers_api_ok_since = None,
            _ => {}
        }
    }

    fn reconcile(&mut self, now: Instant, force: bool) {
        let view: Vec<_> = self
            .peers
            .iter()
            .map(|(n, p)| Standing {
                node: n.clone(),
                candidate: self.candidate(n, now),
                ready: p.ready,
                suspect: self.suspect(n, now).is_some(),
            })
            .chain([Standing {
                node: self.config.node.clone(),
                candidate: self.candidate(&self.config.node, now),
                ready: self.ready,
                suspect: false,
            }])
            .collect();
        let revived = self.revived(now);
        let respecced = std::mem::take(&mut self.respecced);
        if !force && view == self.last_view && revived.is_empty() {
            for ip in respecced {
                if self.vips.contains_key(&ip) {
                    self.reconcile_vip(now, ip, &[]);
                }
            }
            return;
        }
        self.last_view = view;
        let ips: Vec<IpAddr> = self.vips.keys().copied().collect();
        for ip in ips {
            self.reconcile_vip(now, ip, &revived);
        }
    }

    /// Peers that were not alive at the last look and are now, with the incarnation they
    /// had before (`Some`: a healed partition; `None`: new or restarted).
    fn revived(&mut self, now: Instant) -> Vec<(NodeName, bool)> {
        let mut out = Vec::new();
        let names: Vec<NodeName> = self.peers.keys().cloned().collect();
        let dead_after = self.config.dead_after();
        for n in names {
            let alive = self.candidate(&n, now);
            let p = self.peers.get_mut(&n).expect("listed");
            // Heartbeats resuming with the same incarnation: a healed partition or link, also
            // when the API kept the peer ranked meanwhile. Clients on its side may still
            // follow announcements it made, so count it as back (owners re-announce).
            let beating = p.beating(now, dead_after);
            match (beating, p.was_beating) {
                (true, false) if p.incarnation_when_silent == Some(p.incarnation) && alive => {
                    out.push((n.clone(), true));
                }
                (false, true) => p.incarnation_when_silent = Some(p.incarnation),
                _ => {}
            }
            p.was_beating = beating;
            match (alive, p.was_alive) {
                (true, None) => {
                    // Dead or unknown before: did it keep its incarnation? Ranked again by the
                    // API alone (its Lease renewed while its heartbeats are cut), the one we
                    // know is all there is; but heartbeats of an incarnation first heard just
                    // now are a new life, whatever number they carry.
                    let new_life = beating
                        && p.incarnation_since
                            .is_some_and(|t| now.saturating_duration_since(t) < dead_after);
                    let same = p.incarnation_at_death == Some(p.incarnation) && !new_life;
                    if !out.iter().any(|(m, _)| *m == n) {
                        out.push((n.clone(), same));
                    }
                    p.was_alive = Some(p.incarnation);
                }
                (false, Some(inc)) => {
                    p.was_alive = None;
                    p.incarnation_at_death = Some(inc);
                }
                _ => {}
            }
        }
        out
    }

    fn reconcile_vip(&mut self, now: Instant, ip: IpAddr, revived: &[(NodeName, bool)]) {
        let me = self.config.node.clone();
        let Some(v) = self.vips.get(&ip) else { return };
        if !self.ready && self.leaving.is_none() {
            // Warm-up: keep what we found, take nothing, until we know the cluster.
            return;
        }
        if !v.wanted {
            // Found in the data plane at start but not wanted by any Service.
            self.release(ip);
            return;
        }
        let owner = v.ranked().find(|n| self.candidate_for(n, ip, now)).cloned();
        // The owner is quiet (a heartbeat overdue by half a period) and we are next: ask its
        // data plane now rather than at `dead_after` (`reconcile_ours` probes every suspect
        // above us; silence marks it gone, a heartbeat cancels).
        // In a blackout every peer is a suspect ranked by its Lease: only the candidate next
        // below the owner asks, and a candidate ranked by its Lease counts as next (it asks).
        let early = owner
            .as_ref()
            .is_some_and(|o| *o != me && self.suspect(o, now).is_some())
            && v.ranked().find(|n| {
                Some(*n) != owner.as_ref()
                    && self.candidate_for(n, ip, now)
                    && (self.suspect(n, now).is_none() || self.alive_by_lease(n, now))
            }) == Some(&me);
        // Stepped back, but no other node can announce it: keep announcing it rather than
        // darken it. See `healthy_for`.
        let last_resort = self.standby.is_some()
            && self.can_announce(&me, ip)
            && v.spec.eligible.contains(&me)
            && !v.ranked().any(|n| *n != me && self.healthy_for(n, ip, now));
        if owner.as_ref() == Some(&me) || last_resort || early {
            self.reconcile_ours(now, ip, revived);
            return;
        }
        if v.spec.local.is_none() && v.ranked().find(|n| self.candidate(n, now)) == Some(&me) {
            // We would be its owner but cannot announce it: the next node that can does.
            let next = owner
                .as_ref()
                .map_or("no other node can either".to_owned(), |o| {
                    format!("{o} announces it")
                });
            self.report(ip, EventKind::NoInterface, format!(
                "{me} cannot announce {ip}: no subnet contains it and no configured interface fits; {next}"
            ));
        }
        self.reconcile_not_ours(now, ip, owner.as_ref(), revived);
    }

    /// `ip` is ours by the ranking.
    fn reconcile_ours(&mut self, now: Instant, ip: IpAddr, revived: &[(NodeName, bool)]) {
        let me = self.config.node.clone();
        let v = self.vips.get_mut(&ip).expect("present");
        let found = std::mem::take(&mut v.found);
        if v.handoff.take().is_some() {
            self.holding.remove(&ip);
        }
        if let Some(iface) = &v.installed {
            // Ours already. A peer back from a partition (same incarnation) may have claimed
            // it meanwhile, or one took it while we were away and have just come back with
            // the entry still pinned: announce again so that clients converge on us (to a
            // client that never left us this changes nothing).
            if found || revived.iter().any(|(_, same)| *same) {
                let iface = iface.clone();
                self.out.push_back(Output::Announce { vip: ip, iface });
            }
            if v.spec.local.as_ref().is_some_and(|l| l != iface) {
                // Interface changed: move the entry.
                self.release(ip);
                self.take(now, ip);
            }
            return;
        }
        if !v.probes.is_empty() {
            return; // `probes` drives it.
        }
        let v = &self.vips[&ip];
        // Who might still answer it? Every member ranked above us whose heartbeats stopped:
        // each one's data plane is asked, at the MAC it answers this VIP with.
        let suspects: Vec<(NodeName, MacAddr)> = v
            .ranked()
            .take_while(|n| **n != me)
            .filter_map(|n| Some((n.clone(), self.suspect_for(n, ip, now)?)))
            .collect();
        if suspects.is_empty() {
            self.take(now, ip);
        } else {
            for (i, (target, mac)) in suspects.into_iter().enumerate() {
                self.probe(now, ip, target, mac, i == 0);
            }
        }
    }

    /// `ip` is another node's by the ranking (or nobody's).
    fn reconcile_not_ours(
        &mut self,
        now: Instant,
        ip: IpAddr,
        owner: Option<&NodeName>,
        revived: &[(NodeName, bool)],
    ) {
        let me = self.config.node.clone();
        let v = self.vips.get_mut(&ip).expect("present");
        v.probes.clear();
        v.found = false;
        self.probing.remove(&ip);
        let v = self.vips.get(&ip).expect("present");
        if v.installed.is_none() || self.leaving.is_some() {
            return;
        }
        // Overlap: we took it while a member ranked above us was cut off, and a peer ranked
        // above us is back with the same incarnation (so it kept answering all along).
        let above: Vec<&NodeName> = v.ranked().take_while(|n| **n != me).collect();
        // Or the node we took it from owns it again with the same incarnation: it was only
        // quiet (heartbeats late, not dead) while its probe went unanswered, so it kept
        // answering too.
        let back = |from: &NodeName, inc: u64| {
            owner == Some(from) && self.peers.get(from).is_some_and(|p| p.incarnation == inc)
        };
        if let Some((from, _, since)) = v.took_from.clone().filter(|(from, inc, _)| {
            revived.iter().any(|(n, same)| *same && above.contains(&n)) || back(from, *inc)
        }) {
            self.vips.get_mut(&ip).expect("present").took_from = None;
            self.stats.overlaps += 1;
            let secs = now.saturating_duration_since(since).as_secs_f64();
            self.report_always(ip, EventKind::Overlap, format!(
                "{from} and {me} both answered {ip} for up to {secs:.1}s: heartbeats between them were lost while both were up; {from} keeps it"
            ));
        }
        if let Some(s) = self.standby {
            // Stepped back: keep answering until peers have seen our Lease say so and taken
            // over (make before break through the API), at most `standby_hold`.
            if s.written
                .is_some_and(|w| now >= w + self.config.standby_hold())
            {
                self.release(ip);
                return;
            }
            // If the new owner's heartbeats reach us after all (the fault healed just as we
            // stepped back), its data plane can tell us when it answers, as in any handoff
            // below: let go then, rather than answer beside it for the whole hold.
            let heard = owner.and_then(|o| self.peers.get(o)).is_some_and(|p| {
                p.ready && p.beating(now, self.config.dead_after()) && self.config.data_plane
            });
            if !heard {
                return;
            }
        }
        // Make before break: let go once the new owner is ready and its data plane answers
        // the VIP. Asking its data plane (a probe, as for a takeover) checks what matters
        // whatever the reason views differ (a lagging watch, a config roll): until it
        // answers, we do, so the VIP is never dark and has one answerer.
        let Some(o) = owner.cloned() else {
            self.release(ip);
            return;
        };
        if !self.peers.get(&o).is_some_and(|p| p.ready) {
            return;
        }
        let beating = self
            .peers
            .get(&o)
            .is_some_and(|p| p.beating(now, self.config.dead_after()));
        let Some(mac) = self
            .peers
            .get(&o)
            .and_then(|p| p.probe_mac(ip, self.interfaces_for(ip)))
            .filter(|_| beating && self.config.data_plane)
        else {
            // No MAC to ask, no data planes to ask (`--no-dataplane`), or ranked only because
            // the API shows it alive while its frames do not reach us (a probe answer would not
            // either): let go now.
            self.release(ip);
            return;
        };
        let v = self.vips.get_mut(&ip).expect("present");
        if v.handoff
            .as_ref()
            .is_some_and(|h| h.target == o && h.mac == mac)
        {
            return; // `handoffs` drives it.
        }
        let Some(iface) = v.installed.clone() else {
            return;
        };
        v.handoff = Some(Handoff {
            target: o,
            mac,
            since: now,
            deadline: now + self.config.probe_timeout,
        });
        self.holding.insert(ip);
        self.stats.probes += 1;
        self.out.push_back(Output::Probe {
            vip: ip,
            iface,
            mac,
        });
    }

    fn take(&mut self, now: Instant, ip: IpAddr) {
        let me = self.config.node.clone();
        let ttl = self.config.entry_ttl();
        // Who may still be answering it: the first member ranked above us that neither left
        // nor stepped back, and had finished its warm-up (one still in it was only starting
        // and has no entry to answer with, unless it found some in the map at start, which
        // its probe answers would have shown).
        let displaced = {
            let v = &self.vips[&ip];
            v.ranked()
                .take_while(|n| **n != me)
                .find(|n| {
                    self.peers.get(*n).is_some_and(|p| {
                        p.member(now, self.trusted_since) && !p.leaving && !p.standby
                    })
                })
                .filter(|n| self.peers[*n].ready)
                .map(|n| (n.clone(), self.peers[n].incarnation, now))
        };
        let failover = self.failover(now, ip);
        let v = self.vips.get_mut(&ip).expect("present");
        let Some(iface) = v.spec.local.clone() else {
            return;
        };
        if let Some(f) = failover {
            if self.failovers.len() == MAX_FAILOVERS {
                self.failovers.pop_front();
            }
            self.failovers.push_back(f);
        }
        v.probes.clear();
        v.handoff = None;
        v.installed = Some(iface.clone());
        v.took_from = displaced;
        self.owned_version += 1;
        self.probing.remove(&ip);
        self.holding.remove(&ip);
        v.reported = None;
        let svc = v.spec.service.clone();
        self.stats.takeovers += 1;
        self.out.push_back(Output::Install {
            vip: ip,
            iface: iface.clone(),
            ttl,
        });
        self.out.push_back(Output::Announce {
            vip: ip,
            iface: iface.clone(),
        });
        self.out.push_back(Output::Event {
            service: svc,
            vip: ip,
            kind: EventKind::Announcing,
            message: if iface.is_empty() {
                format!("announcing {ip} from {me} (no data plane: --no-dataplane)")
            } else {
                format!("announcing {ip} from {me} on {iface}")
            },
        });
    }

    /// Whether taking `ip` now is a failover: a peer ranked above us, a member or leaving,
    /// was heard since we learnt of the VIP (so it announced it), and is no candidate now.
    fn failover(&self, now: Instant, ip: IpAddr) -> Option<Failover> {
        let me = &self.config.node;
        let v = &self.vips[&ip];
        v.ranked().take_while(|n| *n != me).find_map(|n| {
            let p = self.peers.get(n)?;
            let heard = p.last_beat?;
            let owned =
                heard >= v.since && (p.leaving || p.standby || p.member(now, self.trusted_since));
            owned.then(|| Failover {
                vip: ip,
                from: n.clone(),
                last_heard: heard,
                decided: now,
            })
        })
    }

    fn release(&mut self, ip: IpAddr) {
        self.holding.remove(&ip);
        if let Some(v) = self.vips.get_mut(&ip) {
            v.took_from = None;
            v.handoff = None;
            if let Some(iface) = v.installed.take() {
                self.owned_version += 1;
                self.stats.releases += 1;
                self.out.push_back(Output::Remove { vip: ip, iface });
            }
        }
        if self.vips.get(&ip).is_some_and(|v| !v.wanted) {
            self.vips.remove(&ip);
        }
    }

    /// Probes the data plane at `mac` (suspect `target`) about `ip`. If a probe to the same
    /// MAC is already in flight, this VIP joins it instead of sending another frame: when a
    /// node with many VIPs goes silent, its successors send one probe per node and interval,
    /// not one per VIP.
    fn probe(&mut self, now: Instant, ip: IpAddr, target: NodeName, mac: MacAddr, first: bool) {
        let deadline = self.send_probe(now, ip, mac, self.config.first_probe_wait(), first);
        let v = self.vips.get_mut(&ip).expect("present");
        if v.spec.local.is_none() {
            return;
        }
        v.probes.retain(|p| p.target != target);
        v.probes.push(Probe {
            target,
            mac,
            deadline,
            answered: false,
            heard: false,
            losses: 0,
            silent: false,
            first,
        });
        self.probing.insert(ip);
    }

    /// Sends a probe of `mac` about `ip` unless one to that MAC is in flight (both asking the
    /// first suspect of their VIP, see [`Probe::first`]); the deadline (`now + wait`, or that
    /// of the one in flight).
    ///
    /// Amortised O(1): the VIP that last sent or joined a first probe to `mac` is asked first
    /// ([`Core::first_probes`]); only when its probe no longer counts are all probing VIPs
    /// scanned, which happens at most once per frame sent or VIP dropped.
    fn send_probe(
        &mut self,
        now: Instant,
        ip: IpAddr,
        mac: MacAddr,
        wait: Duration,
        first: bool,
    ) -> Instant {
        if first {
            let in_flight = match self.first_probes.get(&mac) {
                // No first probe was ever sent to this MAC: none can be in flight.
                None => None,
                Some(witness) => self.first_probe_in_flight(*witness, mac, now).or_else(|| {
                    self.probing
                        .iter()
                        .find_map(|other| self.first_probe_in_flight(*other, mac, now))
                }),
            };
            self.first_probes.insert(mac, ip);
            if let Some(d) = in_flight {
                return d;
            }
        }
        if let Some(iface) = self.vips.get(&ip).and_then(|v| v.spec.local.clone()) {
            self.stats.probes += 1;
            self.out.push_back(Output::Probe {
                vip: ip,
                iface,
                mac,
            });
        }
        now + wait
    }

    /// The deadline of `ip`'s first probe to `mac`, if one is in flight: sent, neither
    /// answered nor concluded, and its deadline still ahead.
    fn first_probe_in_flight(&self, ip: IpAddr, mac: MacAddr, now: Instant) -> Option<Instant> {
        self.vips
            .get(&ip)?
            .probes
            .iter()
            .find(|p| p.first && p.mac == mac && !p.answered && !p.silent && p.deadline > now)
            .map(|p| p.deadline)
    }

    /// Drive pending probes: an answered probe is repeated at its deadline; silence past the
    /// deadline concludes that suspect is gone (after [`PROBE_LOSSES_AFTER_ANSWER`] misses in
    /// a row if it ever answered); when every suspect of a VIP is gone, take it. A probe whose
    /// target is no longer a suspect is dropped, and the VIP re-decided when none is left.
    fn probes(&mut self, now: Instant) {
        let pending: Vec<IpAddr> = self.probing.iter().copied().collect();
        for ip in pending {
            let Some(v) = self.vips.get(&ip) else {
                self.probing.remove(&ip);
                continue;
            };
            let keep: Vec<bool> = v
                .probes
                .iter()
                .map(|p| self.suspect_for(&p.target, ip, now) == Some(p.mac))
                .collect();
            let v = self.vips.get_mut(&ip).expect("present");
            let mut k = keep.iter();
            v.probes.retain(|_| *k.next().expect("one per probe"));
            if v.probes.is_empty() {
                // Heartbeats returned, it left, or its Lease expired: decide afresh.
                self.probing.remove(&ip);
                self.reconcile_vip(now, ip, &[]);
                continue;
            }
            let mut resend = Vec::new();
            let mut silenced = Vec::new();
            let first_wait = self.config.first_probe_wait();
            let timeout = self.config.probe_timeout;
            for p in v
                .probes
                .iter_mut()
                .filter(|p| !p.silent && now >= p.deadline)
            {
                if p.answered {
                    p.answered = false;
                    resend.push((p.mac, timeout, p.first));
                } else if p.heard && p.losses + 1 < PROBE_LOSSES_AFTER_ANSWER {
                    p.losses += 1;
                    resend.push((p.mac, timeout, p.first));
                } else if !p.heard && p.losses + 1 < FIRST_PROBES {
                    p.losses += 1;
                    resend.push((p.mac, first_wait, p.first));
                } else {
                    p.silent = true;
                    if p.first {
                        silenced.push(p.target.clone());
                    }
                }
            }
            for n in silenced {
                if let Some(peer) = self.peers.get_mut(&n) {
                    peer.probed_silent_after = peer.last_beat;
                }
            }
            for (mac, wait, first) in resend {
                let deadline = self.send_probe(now, ip, mac, wait, first);
                let v = self.vips.get_mut(&ip).expect("present");
                for p in v.probes.iter_mut().filter(|p| p.mac == mac && !p.silent) {
                    p.deadline = deadline;
                }
            }
            if self.vips[&ip].probes.iter().all(|p| p.silent) {
                self.take(now, ip);
            }
        }
    }

    fn refresh(&mut self, now: Instant) {
        if now < self.next_refresh {
            return;
        }
        self.next_refresh = now + self.config.refresh_interval();
        let ttl = self.config.entry_ttl();
        for (ip, v) in &self.vips {
            if let Some(iface) = &v.installed {
                self.out.push_back(Output::Install {
                    vip: *ip,
                    iface: iface.clone(),
                    ttl,
                });
            }
        }
    }

    fn handover(&mut self, now: Instant) {
        let Some(l) = self.leaving else { return };
        let dead_after = self.config.dead_after();
        let all_acked = self.peers.iter().all(|(n, p)| {
            !p.beating(now, dead_after) || p.leaving || p.acked_us || !self.candidate(n, now)
        });
        if !all_acked && now < l.deadline {
            return;
        }
        let me = self.config.node.clone();
        let ips: Vec<IpAddr> = self.vips.keys().copied().collect();
        for ip in ips {
            let successor = self.vips[&ip]
                .ranked()
                .any(|n| *n != me && self.candidate_for(n, ip, now));
            if successor || !self.vips[&ip].wanted {
                self.release(ip);
            } else if let Some(v) = self.vips.get_mut(&ip) {
                // Nobody else can announce it (eTP Local with every endpoint here, or the
                // only node with a link to it): leave the entry to answer until its TTL
                // runs out rather than darken the VIP now. A restart within the grace picks
                // it up again.
                v.installed = None;
                self.owned_version += 1;
            }
        }
        if let Some(rv) = self.own_rv.clone() {
            self.stats.lease_writes += 1;
            self.out.push_back(Output::WriteLease {
                resource_version: Some(rv),
                release: true,
                standby: false,
                connected: Some(0),
            });
        }
        self.out.push_back(Output::Exit);
        self.leaving = Some(Leaving { done: true, ..l });
    }

    fn send_beat(&mut self, now: Instant) {
        if now < self.next_beat {
            return;
        }
        self.next_beat = now + self.config.heartbeat_interval;
        let acks = self
            .peers
            .iter()
            .filter(|(_, p)| p.leaving && p.beating(now, self.config.dead_after()))
            .map(|(n, _)| n.clone())
            .collect();
        let leaving = self.leaving.is_some()
            || self.standby.is_some()
            || self.links_all_down()
            || self.fenced(now);
        let dead_after = self.config.dead_after();
        let hears = self
            .peers
            .iter()
            .filter(|(_, p)| p.beating(now, dead_after))
            .map(|(n, _)| n.clone())
            .collect();
        self.out.push_back(Output::SendHeartbeat(Beat {
            node: self.config.node.clone(),
            incarnation: self.incarnation,
            mac: self.config.mac,
            leaving,
            api_ok: self.trusted_since.is_some(),
            ready: self.ready,
            acks,
            hears,
            config: self.config.config_hash,
            view: self.view,
        }));
    }

    fn report(&mut self, ip: IpAddr, kind: EventKind, message: String) {
        let Some(v) = self.vips.get_mut(&ip) else {
            return;
        };
        if v.reported.as_ref() == Some(&kind) {
            return;
        }
        v.reported = Some(kind.clone());
        self.report_always(ip, kind, message);
    }

    fn report_always(&mut self, ip: IpAddr, kind: EventKind, message: String) {
        let service = self.vips[&ip].spec.service.clone();
        self.out.push_back(Output::Event {
            service,
            vip: ip,
            kind,
            message,
        });
    }
}

impl Vip {
    /// An entry found in the data plane before the watches said whether it is wanted.
    fn placeholder(vip: IpAddr, now: Instant) -> Self {
        Vip {
            spec: VipSpec {
                vip,
                service: super::ServiceRef {
                    namespace: String::new(),
                    name: String::new(),
                },
                eligible: NodeSet::default(),
                local: None,
                interfaces: Vec::new(),
                preferred: NodeSet::default(),
            },
            ranking: Ranking::default(),
            view_part: 0,
            installed: None,
            probes: Vec::new(),
            handoff: None,
            took_from: None,
            reported: None,
            wanted: false,
            since: now,
            found: false,
        }
    }
}

/// One wanted VIP's share of the view's fingerprint ([`Beat::view`]): the view is the
/// wrapping sum of the shares, so that a change to one VIP updates it in O(1). Two agents with
/// the same view rank every VIP the same way (up to a 2^-64 chance).
///
/// The formula changed with issue 29 (it hashed every VIP's every eligible node in order, O(V·N)
/// per change): during a roll from an older version, old and new agents see different views,
/// so a handoff between them waits for the new owner's probe answer rather than the hold (see
/// `handoffs`), and no longer.
fn view_part(vip: IpAddr, eligible_digest: u64) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    match vip {
        IpAddr::V4(a) => h.update(&a.octets()),
        IpAddr::V6(a) => h.update(&a.octets()),
    }
    h.update(&eligible_digest.to_le_bytes());
    h.digest()
}

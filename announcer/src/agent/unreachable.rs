//! Which peers this node has proven unreachable: the rules behind its
//! [`UNREACHABLE_ANNOTATION`](crate::withdraw::UNREACHABLE_ANNOTATION) report (issue 28),
//! sans-IO. The shell feeds what the election and the watches know ([`Unreachable::handle_peers`],
//! [`Unreachable::handle_observer`]) and the probe answers, sends the probes it takes from
//! [`Unreachable::poll_probe`], wakes it at [`Unreachable::poll_timeout`], and writes the report
//! it takes from [`Unreachable::poll_report`] into its own node Lease.
//!
//! A peer is listed only when all of these hold, as this node observes them:
//!
//! 1. **Its heartbeats are silent**: none for the election's `dead_after`, or a probe of its
//!    data plane went unanswered since the last one ([`crate::election::PeerSilence`]).
//! 2. **Its data plane does not answer**: the election saw a nonce'd probe of it go
//!    unanswered, or our own nonce'd probe of a VIP it would hold goes unanswered in the rounds
//!    below, or, as far as we know, it holds no VIP: then its XDP program has nothing to answer
//!    for, and only its kernel can speak for the node.
//! 3. **Its kernel does not answer**: an ARP request (IPv4, RFC 826) or Neighbor Solicitation
//!    (IPv6, RFC 4861 §7.2.2, to the solicited-node group) for the node's own InternalIP, taken
//!    from its Node object and never from anything the peer publishes. This depends on neither
//!    our agent nor our XDP program, so an agent in a crash loop on a live node, or a heartbeat
//!    port blocked everywhere, never gets a node listed. The kernel echoes no nonce, so anyone
//!    on the segment can forge its answer; that only keeps a node off the report (a withdrawal
//!    that does not happen: the node lifecycle controller still acts, later). Silence cannot be
//!    forged: one answer from the live kernel is enough.
//!
//! Probing starts as soon as the peer's heartbeats are overdue enough for the election to
//! suspect it (one and a half periods: alongside the election's own data-plane probe), so that
//! the proof is ready when rule 1 holds: [`Config::rounds`] rounds [`Config::spacing`] apart
//! (each a kernel probe of every InternalIP, plus a data-plane probe when 2 needs one). If
//! nothing answered by [`Config::spacing`] after the last round, the peer is listed once (or
//! as soon as) its heartbeats are silent; a proof not used within [`Config::reprobe`] is made
//! again. While listed it is probed again every [`Config::reprobe`]. Any sign of life unlists it at once: a heartbeat
//! (1 no longer holds), a kernel or data-plane answer, its Lease released or deleted (it left).
//! A peer that answered while its heartbeats stay silent (an agent down on a live node) is
//! asked again every [`Config::reprobe`].
//!
//! **Never from a blind observer.** While this node exchanges heartbeats with no peer, has
//! stepped back, has an announcing link down, is not ready or is shutting down
//! ([`Observer::blind`]), it lists nobody and forgets what it had proven: a partition that
//! isolates the observer makes every peer look silent, and its own silent link makes every
//! kernel look silent too. Once it sees again, every peer is proven afresh.

use std::{
    collections::{BTreeMap, VecDeque},
    net::IpAddr,
    time::{Duration, Instant},
};

use crate::{
    election::{IfaceName, NodeName},
    wire::MacAddr,
    withdraw::Report,
};

/// The rules' timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Unanswered rounds that prove a peer unreachable.
    pub rounds: u32,
    /// Between rounds, and from the last round to the verdict: each probe's answer window.
    pub spacing: Duration,
    /// How often a listed peer, or one that answered while silent, is asked again.
    pub reprobe: Duration,
}

impl Default for Config {
    /// 3 rounds 50 ms apart: a lost frame or two must not list a live node, and 150 ms is
    /// within the election's own takeover time (heartbeats + data-plane probe, about 0.19 s),
    /// so the report follows the VIP move closely. 1 s between re-probes: a node that comes
    /// back is unlisted within about a second even if its agent is not running yet (its kernel
    /// answers first), at a cost of three small frames a second per listed peer.
    fn default() -> Self {
        Config {
            rounds: 3,
            spacing: Duration::from_millis(50),
            reprobe: Duration::from_secs(1),
        }
    }
}

/// How this node observes the segment right now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observer {
    /// Peers it exchanges heartbeats with both ways.
    pub connected: u32,
    /// Past its warm-up.
    pub ready: bool,
    /// Stepped back (isolated), or every interface its VIPs are on is down.
    pub standby: bool,
    /// One of its announcing links is down.
    pub link_down: bool,
    /// Shutting down (SIGTERM).
    pub shutting_down: bool,
}

/// Why an observer is blind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blind {
    /// It exchanges heartbeats with no peer: it may be the one cut off.
    NoPeerConnected,
    /// Its warm-up is not over: it has not heard its peers long enough.
    NotReady,
    /// It stepped back, or every announcing link is down.
    Standby,
    /// An announcing link is down.
    LinkDown,
    /// It is shutting down.
    ShuttingDown,
}

impl Observer {
    /// Why it must list nobody, if it must.
    pub fn blind(&self) -> Option<Blind> {
        if self.shutting_down {
            Some(Blind::ShuttingDown)
        } else if self.standby {
            Some(Blind::Standby)
        } else if self.link_down {
            Some(Blind::LinkDown)
        } else if !self.ready {
            Some(Blind::NotReady)
        } else if self.connected == 0 {
            Some(Blind::NoPeerConnected)
        } else {
            None
        }
    }
}

/// A data-plane probe target: `vip` at `mac`, asked from our interface `iface`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataPlaneTarget {
    /// Our interface for the VIP.
    pub iface: IfaceName,
    /// A VIP the peer would hold.
    pub vip: IpAddr,
    /// The MAC its data plane answers the VIP with.
    pub mac: MacAddr,
}

/// What is known of the peer's data plane (rule 2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataPlane {
    /// The election saw a probe of it go unanswered since its last heartbeat.
    ProbedSilent,
    /// As far as we know it holds no VIP: its XDP program has nothing to answer.
    HoldsNone,
    /// It would hold this VIP: our rounds ask its data plane too.
    Holds(DataPlaneTarget),
}

/// A kernel probe target: the peer's InternalIP `ip`, asked from our interface `iface`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelTarget {
    /// Our interface whose subnet contains `ip` (or that carries our InternalIP).
    pub iface: IfaceName,
    /// The peer's InternalIP, from its Node object.
    pub ip: IpAddr,
}

/// One peer as the election and the watches see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerView {
    /// The peer.
    pub node: NodeName,
    /// Its heartbeats are overdue enough for the election to suspect it: probing starts.
    pub heartbeats_quiet: bool,
    /// Rule 1 (implies `heartbeats_quiet`).
    pub heartbeats_silent: bool,
    /// Its Lease says it left for good.
    pub released: bool,
    /// Rule 2.
    pub data_plane: DataPlane,
    /// Rule 3's targets. Empty (no Node object, no InternalIP, no interface to ask from):
    /// its kernel cannot be asked, so it is never listed.
    pub kernel: Vec<KernelTarget>,
}

impl PeerView {
    /// Probing may start.
    fn quiet(&self) -> bool {
        self.heartbeats_quiet || self.heartbeats_silent
    }
}

/// A probe to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Ask the peer's kernel for its own address (no nonce; broadcast ARP or solicited-node
    /// NS).
    Kernel {
        /// The peer.
        node: NodeName,
        /// The target.
        target: KernelTarget,
    },
    /// Ask the peer's data plane for a VIP (nonce'd, unicast to its MAC).
    DataPlane {
        /// The peer.
        node: NodeName,
        /// The target.
        target: DataPlaneTarget,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Heartbeats arrive, or nothing to ask: not listed, not probed.
    Quiet,
    /// Silent: `sent` rounds out so far, the next step at `next`.
    Probing { sent: u32, next: Instant },
    /// Answered a probe while its heartbeats stay silent: asked again at `again`.
    Answered { again: Instant },
    /// Nothing answered, but its heartbeats are only overdue, not yet silent: listed if they
    /// are silent before `until`, asked again then.
    Proven { until: Instant },
    /// Proven unreachable; asked again at `next`.
    Listed { next: Instant },
}

#[derive(Clone, Debug)]
struct Tracked {
    view: PeerView,
    state: State,
}

/// The rules' state. See the module docs.
#[derive(Debug)]
pub struct Unreachable {
    config: Config,
    peers: BTreeMap<NodeName, Tracked>,
    blind: Option<Blind>,
    probes: VecDeque<Probe>,
    /// The report last taken by [`poll_report`](Self::poll_report).
    reported: Report,
    /// [`poll_timeout`](Self::poll_timeout)'s answer, kept until a `handle_*` call changes a
    /// peer's state: the shell asks on every turn of its loop (every batch of heartbeats), and
    /// the answer is a scan of every peer.
    next_timeout: std::cell::Cell<Option<Option<Instant>>>,
}

impl Unreachable {
    /// No peer known; blind until told otherwise (so nothing is listed before the shell has
    /// said how this node observes).
    pub fn new(config: Config) -> Self {
        Unreachable {
            config,
            peers: BTreeMap::new(),
            blind: Some(Blind::NotReady),
            probes: VecDeque::new(),
            reported: Report::default(),
            next_timeout: std::cell::Cell::new(None),
        }
    }

    /// How this node observes now. Turning blind forgets every proof.
    pub fn handle_observer(&mut self, now: Instant, observer: Observer) {
        self.next_timeout.set(None);
        self.blind = observer.blind();
        if self.blind.is_some() {
            for t in self.peers.values_mut() {
                t.state = State::Quiet;
            }
        }
        self.drive(now);
    }

    /// Why this node lists nobody right now, if it does not.
    pub fn blind(&self) -> Option<Blind> {
        self.blind
    }

    /// Every peer as the election and the watches see it now. A peer left out (its Lease
    /// deleted) or released is forgotten; one whose heartbeats arrive, or whose kernel cannot
    /// be asked, is unlisted.
    pub fn handle_peers(&mut self, now: Instant, views: Vec<PeerView>) {
        self.next_timeout.set(None);
        let mut next = BTreeMap::new();
        for view in views.into_iter().filter(|v| !v.released) {
            let state = match self.peers.remove(&view.node) {
                Some(t) if view.quiet() && !view.kernel.is_empty() => t.state,
                _ => State::Quiet,
            };
            next.insert(view.node.clone(), Tracked { view, state });
        }
        self.peers = next;
        self.drive(now);
    }

    /// A kernel answered for `ip`: its node is alive.
    pub fn handle_kernel_answer(&mut self, now: Instant, ip: IpAddr) {
        self.next_timeout.set(None);
        let nodes: Vec<NodeName> = self
            .peers
            .iter()
            .filter(|(_, t)| t.view.kernel.iter().any(|k| k.ip == ip))
            .map(|(n, _)| n.clone())
            .collect();
        for n in nodes {
            self.life(now, &n);
        }
    }

    /// A data plane answered for `vip` at `mac`: that peer is alive.
    pub fn handle_data_plane_answer(&mut self, now: Instant, vip: IpAddr, mac: MacAddr) {
        self.next_timeout.set(None);
        let nodes: Vec<NodeName> = self
            .peers
            .iter()
            .filter(|(_, t)| {
                matches!(&t.view.data_plane, DataPlane::Holds(d) if d.vip == vip && d.mac == mac)
            })
            .map(|(n, _)| n.clone())
            .collect();
        for n in nodes {
            self.life(now, &n);
        }
    }

    /// Time passed: send the rounds that are due and give the verdicts.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.next_timeout.set(None);
        self.drive(now);
    }

    /// When to call [`handle_timeout`](Self::handle_timeout) next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if let Some(known) = self.next_timeout.get() {
            return known;
        }
        let next = self
            .peers
            .values()
            .filter_map(|t| match t.state {
                State::Quiet => None,
                State::Probing { next, .. } | State::Listed { next } => Some(next),
                State::Answered { again } => Some(again),
                State::Proven { until } => Some(until),
            })
            .min();
        self.next_timeout.set(Some(next));
        next
    }

    /// The next probe to send.
    pub fn poll_probe(&mut self) -> Option<Probe> {
        self.probes.pop_front()
    }

    /// The report, when it differs from the one last taken.
    pub fn poll_report(&mut self) -> Option<Report> {
        let now = self.report();
        (now != self.reported).then(|| {
            self.reported = now.clone();
            now
        })
    }

    /// The peers listed right now (none while blind).
    pub fn report(&self) -> Report {
        if self.blind.is_some() {
            return Report::default();
        }
        Report::of(
            self.peers
                .iter()
                .filter(|(_, t)| matches!(t.state, State::Listed { .. }))
                .map(|(n, _)| n.clone()),
        )
    }

    fn life(&mut self, now: Instant, node: &NodeName) {
        let again = now + self.config.reprobe;
        if let Some(t) = self.peers.get_mut(node)
            && t.state != State::Quiet
        {
            t.state = State::Answered { again };
        }
    }

    fn drive(&mut self, now: Instant) {
        if self.blind.is_some() {
            return;
        }
        let Config {
            rounds,
            spacing,
            reprobe,
        } = self.config;
        let mut due = Vec::new();
        for t in self.peers.values_mut() {
            if !t.view.quiet() || t.view.kernel.is_empty() {
                t.state = State::Quiet;
                continue;
            }
            let silent = t.view.heartbeats_silent;
            t.state = match t.state {
                State::Quiet => {
                    due.push(t.view.clone());
                    State::Probing {
                        sent: 1,
                        next: now + spacing,
                    }
                }
                State::Answered { again: until } | State::Proven { until } if now >= until => {
                    due.push(t.view.clone());
                    State::Probing {
                        sent: 1,
                        next: now + spacing,
                    }
                }
                State::Proven { until } if silent => State::Listed { next: until },
                State::Probing { sent, next } if now >= next => {
                    if sent >= rounds && silent {
                        State::Listed {
                            next: now + reprobe,
                        }
                    } else if sent >= rounds {
                        State::Proven {
                            until: now + reprobe,
                        }
                    } else {
                        due.push(t.view.clone());
                        State::Probing {
                            sent: sent + 1,
                            next: now + spacing,
                        }
                    }
                }
                State::Listed { next } if now >= next => {
                    due.push(t.view.clone());
                    State::Listed {
                        next: now + reprobe,
                    }
                }
                s => s,
            };
        }
        for view in due {
            self.round(view);
        }
    }

    /// One round of probes of `view`'s peer.
    fn round(&mut self, view: PeerView) {
        for target in view.kernel {
            self.probes.push_back(Probe::Kernel {
                node: view.node.clone(),
                target,
            });
        }
        if let DataPlane::Holds(target) = view.data_plane {
            self.probes.push_back(Probe::DataPlane {
                node: view.node,
                target,
            });
        }
    }
}

#[cfg(test)]
mod tests;

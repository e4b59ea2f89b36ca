//! The agent's Prometheus metrics, served on `/metrics` next to `/healthz`, `/readyz` and
//! `/state` (the `--http-address` port, 9746 by default).
//!
//! Why two kinds of metric: most numbers already exist somewhere — the election core counts
//! takeovers, handovers and overlaps ([`crate::election::ElectionStats`]), the heartbeat socket
//! counts what it sent and rejected, the Event recorder and the watches count their failures,
//! and the XDP program counts every answer in per-CPU maps. Copying them into metric objects
//! on a timer would add a loop and a lag, so [`collect::Collector`] reads them *at scrape
//! time* (the per-CPU map values summed over CPUs, as `announcer status` does). What exists
//! nowhere else — durations (takeover, Lease renewal, probe round trip) and per-peer heartbeat
//! loss — is recorded as it happens through a [`Recorder`].
//!
//! Every name starts with `announcer_` and carries its unit (`_seconds`, `_total`). With
//! `--no-dataplane` the `announcer_dataplane_*` families are absent rather than zero, so a
//! dashboard cannot mistake "no data plane" for "nothing answered".
//!
//! Heartbeat RTT: heartbeats carry no echo of the peer's last one, and adding one would change
//! the authenticated wire format (a version bump every peer must understand during an
//! upgrade). Two faithful numbers come without it: `announcer_probe_rtt_seconds`, the true
//! round trip of the unicast ARP/NS probes sent to a silent owner's data plane (over the
//! announcing network, answered by the peer's XDP program), and
//! `announcer_heartbeat_delay_seconds{peer}`, the one-way delay of the last heartbeat by the
//! two wall clocks (it includes their offset, which NTP keeps to milliseconds; the verifier
//! already rejects more than 5 s of skew).

pub mod collect;
#[cfg(test)]
mod tests;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use prometheus_client::{
    encoding::{EncodeLabelSet, text},
    metrics::{counter::Counter, family::Family, gauge::Gauge, histogram::Histogram},
    registry::Registry,
};

use crate::{
    election::NodeName,
    placement::{eligibility::Problem, refusal::Refusal},
};

pub use self::collect::Sources;

/// The `Content-Type` of [`Metrics::encode`]'s output (the OpenMetrics text format, which
/// Prometheus negotiates and parses).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A `peer` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PeerLabel {
    /// The peer's node name.
    pub peer: String,
}

/// Takeover durations: from tens of milliseconds (a handover on SIGTERM) to the grace period
/// (an agent killed while its data plane kept answering).
const TAKEOVER_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Lease writes: a healthy API server answers in milliseconds; seconds mean trouble.
const LEASE_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0];
/// Probe round trips on a LAN: tens of microseconds to a few milliseconds.
const RTT_BUCKETS: [f64; 10] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25,
];

/// What the agent records as it happens (cheap to clone; clones share the metrics).
#[derive(Clone, Debug)]
pub struct Recorder {
    takeover: Histogram,
    lease_renew: Histogram,
    probe_rtt: Histogram,
    heartbeat_missed: Family<PeerLabel, Counter>,
    heartbeat_delay: Family<PeerLabel, Gauge<f64, AtomicU64>>,
    peer_key_changes: Family<PeerLabel, Counter>,
    heartbeats_rejected_from: Family<RejectLabel, Counter>,
    refused: Family<ReasonLabel, Gauge>,
    refused_on_link: Counter,
    state_dir_problems: Family<ProblemLabel, Counter>,
    dataplane_up: Family<IfaceLabel, Gauge>,
    attach_failures: Family<AttachFailureLabel, Counter>,
    other_announcers: Family<OtherAnnouncerLabel, Gauge>,
    unreachable_listed: Gauge,
    kernel_probes_sent: Counter,
    kernel_probes_answered: Counter,
    stale_flows_deleted: Counter,
    stale_flow_sweep_failures: Counter,
}

/// An `iface` label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IfaceLabel {
    /// The interface.
    pub iface: String,
}

/// An `iface` and `reason` label: an XDP attach that failed
/// ([`crate::agent::net::plane::failure_reason`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttachFailureLabel {
    /// The interface.
    pub iface: String,
    /// `foreign_program`, `unsupported`, `privileges`, ...
    pub reason: String,
}

/// An `announcer` and `classless` label: another announcer found at start, and whether this
/// agent serves class-less Services anyway ([`crate::agent::kube::other_announcers`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OtherAnnouncerLabel {
    /// [`crate::agent::kube::other_announcers::OtherAnnouncer::label`].
    pub announcer: String,
    /// `refused` (left to it) or `forced` (`forceClassless`).
    pub classless: String,
}

/// A `reason` label: which rule refused an address.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// [`crate::placement::refusal::Refusal::label`], or `sharing_conflict`.
    pub reason: String,
}

/// A `problem` label: a state-directory fault worked around
/// ([`crate::agent::persist::StateProblem::label`]).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProblemLabel {
    /// The fault.
    pub problem: String,
}

/// A `peer` and `reason` label: authenticated heartbeats rejected (clock skew, replay).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabel {
    /// The peer's node name (authenticated: only its own key could have sealed it).
    pub peer: String,
    /// The reason ([`crate::heartbeat::Reject::reason`]).
    pub reason: String,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            takeover: Histogram::new(TAKEOVER_BUCKETS),
            lease_renew: Histogram::new(LEASE_BUCKETS),
            probe_rtt: Histogram::new(RTT_BUCKETS),
            heartbeat_missed: Family::default(),
            heartbeat_delay: Family::default(),
            peer_key_changes: Family::default(),
            heartbeats_rejected_from: Family::default(),
            refused: Family::default(),
            refused_on_link: Counter::default(),
            state_dir_problems: Family::default(),
            dataplane_up: Family::default(),
            attach_failures: Family::default(),
            other_announcers: Family::default(),
            unreachable_listed: Gauge::default(),
            kernel_probes_sent: Counter::default(),
            kernel_probes_answered: Counter::default(),
            stale_flows_deleted: Counter::default(),
            stale_flow_sweep_failures: Counter::default(),
        }
    }

    /// This node now reports `n` peers proven unreachable in its Lease.
    pub fn unreachable_listed(&self, n: usize) {
        self.unreachable_listed
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// A kernel probe (ARP/NS for a silent peer's InternalIP) was sent.
    pub fn kernel_probe_sent(&self) {
        self.kernel_probes_sent.inc();
    }

    /// A peer's kernel answered a kernel probe.
    pub fn kernel_probe_answered(&self) {
        self.kernel_probes_answered.inc();
    }

    /// `n` unreplied conntrack entries towards an unreachable peer's Pods were deleted.
    pub fn stale_flows_deleted(&self, n: u64) {
        self.stale_flows_deleted.inc_by(n);
    }

    /// A conntrack sweep failed (no CAP_NET_ADMIN, no conntrack).
    pub fn stale_flow_sweep_failed(&self) {
        self.stale_flow_sweep_failures.inc();
    }

    /// Whether the data plane is attached on `iface`.
    pub fn dataplane_up(&self, iface: &str, up: bool) {
        self.dataplane_up
            .get_or_create(&IfaceLabel {
                iface: iface.to_owned(),
            })
            .set(i64::from(up));
    }

    /// An XDP attach on `iface` failed for `reason`.
    pub fn attach_failed(&self, iface: &str, reason: &str) {
        self.attach_failures
            .get_or_create(&AttachFailureLabel {
                iface: iface.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// The addresses the last plan refuses, by rule (from its problems; every rule's series is
    /// set, to zero when nothing is refused by it, so a refusal that ends is seen to end).
    pub fn refusals(&self, problems: &[Problem]) {
        let mut counts: BTreeMap<&str, i64> = Refusal::LABELS
            .iter()
            .chain(&["sharing_conflict"])
            .filter(|l| **l != "link_network_or_broadcast")
            .map(|l| (*l, 0))
            .collect();
        for label in problems.iter().filter_map(|p| p.reason.refusal_label()) {
            *counts.entry(label).or_default() += 1;
        }
        for (reason, n) in counts {
            let label = ReasonLabel {
                reason: reason.to_owned(),
            };
            self.refused.get_or_create(&label).set(n);
        }
    }

    /// This node refused to announce an address on the link it would use (its subnet's
    /// network or broadcast address); counted once per address and link.
    pub fn refused_on_link(&self) {
        self.refused_on_link.inc();
    }

    /// `peer` published a different heartbeat key than the one we had (its state directory
    /// was wiped, or someone rewrote its Lease).
    pub fn peer_key_changed(&self, peer: &NodeName) {
        let label = PeerLabel {
            peer: peer.to_string(),
        };
        self.peer_key_changes.get_or_create(&label).inc();
    }

    /// A state-directory fault was worked around at start (`problem`: its label).
    pub fn state_dir_problem(&self, problem: &str) {
        let label = ProblemLabel {
            problem: problem.to_owned(),
        };
        self.state_dir_problems.get_or_create(&label).inc();
    }

    /// The class-less decision at start: one series per other announcer found, set to 1.
    pub fn other_announcers(&self, decision: &crate::agent::kube::other_announcers::Classless) {
        let classless = if decision.served() {
            "forced"
        } else {
            "refused"
        };
        for a in decision.others() {
            let label = OtherAnnouncerLabel {
                announcer: a.label().to_owned(),
                classless: classless.to_owned(),
            };
            self.other_announcers.get_or_create(&label).set(1);
        }
    }

    /// An authenticated heartbeat from `peer` was rejected for `reason`.
    pub fn heartbeat_rejected_from(&self, peer: &NodeName, reason: &str) {
        let label = RejectLabel {
            peer: peer.to_string(),
            reason: reason.to_owned(),
        };
        self.heartbeats_rejected_from.get_or_create(&label).inc();
    }

    /// A failover took `d`: from the old owner's last heartbeat to our map write and first
    /// announcement round.
    pub fn takeover(&self, d: Duration) {
        self.takeover.observe(d.as_secs_f64());
    }

    /// One Lease write (renewal, creation or release) took `d`, whatever its result.
    pub fn lease_write(&self, d: Duration) {
        self.lease_renew.observe(d.as_secs_f64());
    }

    /// A probe of a peer's data plane was answered after `d`.
    pub fn probe_rtt(&self, d: Duration) {
        self.probe_rtt.observe(d.as_secs_f64());
    }

    /// A heartbeat from `peer` arrived, `missed` heartbeats after the previous one, sent
    /// `delay_s` seconds ago by the two wall clocks (negative if the peer's clock is ahead).
    pub fn heartbeat(&self, peer: &NodeName, missed: u64, delay_s: f64) {
        let label = PeerLabel {
            peer: peer.to_string(),
        };
        self.heartbeat_missed.get_or_create(&label).inc_by(missed);
        self.heartbeat_delay.get_or_create(&label).set(delay_s);
    }

    /// `peer` left the cluster (its Lease was deleted): drop its series.
    pub fn forget_peer(&self, peer: &NodeName) {
        let label = PeerLabel {
            peer: peer.to_string(),
        };
        self.heartbeat_missed.remove(&label);
        self.heartbeat_delay.remove(&label);
        self.peer_key_changes.remove(&label);
    }
}

/// Estimates the heartbeats lost per peer from the gaps between the send times of those that
/// arrive: a gap of `k` heartbeat intervals means `k - 1` beats lost (rounded, so jitter of up to
/// half an interval counts nothing). Both times are the sender's clock, so a skew between the
/// nodes cancels out; a step of the sender's clock distorts one sample, and a peer with another
/// heartbeat interval (a configuration roll) is estimated against ours.
///
/// Not from sequence numbers: a sender's sequence grows by one per *datagram*, across all of its
/// recipients (one sealed datagram each, see [`crate::heartbeat`]), so with `n` peers each sees
/// it grow by `n` per beat, which once counted every heartbeat of a three-node cluster as lost.
/// A new incarnation starts afresh: a restart is not loss.
#[derive(Debug)]
pub struct LossTracker {
    interval: Duration,
    /// Per peer: the incarnation and send time (ms since the epoch) of its last heartbeat.
    last: HashMap<NodeName, (u64, u64)>,
}

impl LossTracker {
    /// A tracker for heartbeats sent every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval: interval.max(Duration::from_millis(1)),
            last: HashMap::new(),
        }
    }

    /// Records the heartbeat of `peer`'s `incarnation` sent at `sent_unix_ms`; returns how
    /// many of its heartbeats since the previous one are estimated lost. Only verified
    /// heartbeats are fed in, and the verifier drops reordered ones.
    pub fn observe(&mut self, peer: &NodeName, incarnation: u64, sent_unix_ms: u64) -> u64 {
        let missed = match self.last.get(peer) {
            Some(&(inc, at)) if inc == incarnation && sent_unix_ms > at => {
                let gap = Duration::from_millis(sent_unix_ms - at);
                let periods = (gap.as_secs_f64() / self.interval.as_secs_f64()).round() as u64;
                periods.saturating_sub(1)
            }
            _ => 0,
        };
        self.last.insert(peer.clone(), (incarnation, sent_unix_ms));
        missed
    }

    /// Forgets `peer`.
    pub fn forget(&mut self, peer: &NodeName) {
        self.last.remove(peer);
    }
}

/// The registry: the recorded metrics plus the scrape-time collector.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    recorder: Recorder,
    sources: Sources,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered; the scrape-time ones read from [`Metrics::sources`], which
    /// the agent fills in as it starts its parts.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let recorder = Recorder::new();
        registry.register(
            "announcer_takeover_duration_seconds",
            "Failovers: from the previous owner's last heartbeat to this node's map write and first announcement",
            recorder.takeover.clone(),
        );
        registry.register(
            "announcer_lease_renew_duration_seconds",
            "Latency of this node's Lease writes (renewals, creation, release), whatever their result",
            recorder.lease_renew.clone(),
        );
        registry.register(
            "announcer_probe_rtt_seconds",
            "Round trip of answered ARP/NS probes of a silent owner's data plane",
            recorder.probe_rtt.clone(),
        );
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "announcer_heartbeat_missed",
            "Heartbeats from a peer estimated lost, from the gaps between the send times of those that arrived (a gap of k heartbeat intervals counts k - 1)",
            recorder.heartbeat_missed.clone(),
        );
        registry.register(
            "announcer_heartbeat_delay_seconds",
            "One-way delay of the peer's last heartbeat by the two wall clocks (includes their offset)",
            recorder.heartbeat_delay.clone(),
        );
        registry.register(
            "announcer_peer_key_changes",
            "Times a peer's published heartbeat key changed (state directory wiped, or its Lease rewritten)",
            recorder.peer_key_changes.clone(),
        );
        registry.register(
            "announcer_heartbeats_rejected_from",
            "Authenticated heartbeats from a peer rejected, by reason (clock_skew: its clock is off by more than 5 s)",
            recorder.heartbeats_rejected_from.clone(),
        );
        registry.register(
            "announcer_addresses_refused",
            "Addresses named in Services' status that the agent refuses to announce, by rule (node_address, link_local, outside_pools, sharing_conflict, ...)",
            recorder.refused.clone(),
        );
        registry.register(
            "announcer_addresses_refused_on_link",
            "Addresses this node refused to announce because they are the network or broadcast address of the link it would announce them on",
            recorder.refused_on_link.clone(),
        );
        registry.register(
            "announcer_state_dir_problems",
            "State-directory faults worked around at start, by problem (identity_leaked, incarnation_corrupt, ...; see the StateDirectory Event)",
            recorder.state_dir_problems.clone(),
        );
        registry.register(
            "announcer_dataplane_up",
            "Whether the XDP program is attached on the interface (0: the attach failed, see the DataplaneDown Event on the Node; this node is then not ranked for VIPs there)",
            recorder.dataplane_up.clone(),
        );
        registry.register(
            "announcer_dataplane_attach_failures",
            "Failed XDP attach attempts on the interface, by reason (foreign_program: another XDP program is attached there; unsupported, privileges, ...)",
            recorder.attach_failures.clone(),
        );
        registry.register(
            "announcer_other_announcer_detected",
            "Another layer-2 announcer found through API discovery at start (1), by announcer (metallb, cilium-l2) and what this agent does with class-less Services (refused: left to it; forced: forceClassless)",
            recorder.other_announcers.clone(),
        );
        registry.register(
            "announcer_unreachable_peers",
            "Peers this node reports proven unreachable in its Lease (heartbeats, data plane and kernel all silent; announcer.dev/unreachable)",
            recorder.unreachable_listed.clone(),
        );
        registry.register(
            "announcer_kernel_probes_sent",
            "ARP/NS probes sent for a silent peer's InternalIP (answered by its kernel, not by our agent or XDP program)",
            recorder.kernel_probes_sent.clone(),
        );
        registry.register(
            "announcer_kernel_probes_answered",
            "Kernel probes answered: the silent peer's node is alive",
            recorder.kernel_probes_answered.clone(),
        );
        registry.register(
            "announcer_stale_flows_deleted",
            "Unreplied TCP conntrack entries deleted because kube-proxy had DNATed them to a Pod of a peer this node lists unreachable (a client reusing the source port would follow them to the dead Pod)",
            recorder.stale_flows_deleted.clone(),
        );
        registry.register(
            "announcer_stale_flow_sweep_failures",
            "Conntrack sweeps that failed (no CAP_NET_ADMIN in the host network namespace, or no conntrack)",
            recorder.stale_flow_sweep_failures.clone(),
        );
        let sources = Sources::default();
        registry.register_collector(Box::new(collect::Collector::new(sources.clone())));
        Metrics {
            registry,
            recorder,
            sources,
        }
    }

    /// The handle the agent records durations and heartbeat loss with.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Where the scrape-time families read from.
    pub fn sources(&self) -> &Sources {
        &self.sources
    }

    /// Every family in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics failed");
        }
        out
    }
}

/// Shared by the HTTP server and the agent.
pub type SharedMetrics = Arc<Metrics>;

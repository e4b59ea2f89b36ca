//! What one node knows of another: its Lease and its heartbeats.
//!
//! Two signals, two jobs. The Lease (written every few seconds through the API server) is
//! membership and the authority: a node whose Lease expired, was released or deleted is out,
//! whatever its heartbeats say. Heartbeats (every 75 ms, straight over the announcing network)
//! are the fast failure detector: a member whose heartbeats stop is out of the ranking at once,
//! long before its Lease could expire.

use std::time::Duration;

use announcer_ebpf::wire::MacAddr;

use std::net::IpAddr;

use super::{Beat, Instant, Link, NodeName, lease::Observed};

/// One peer.
#[derive(Clone, Debug)]
pub(crate) struct Peer {
    /// Its Lease, if one is known.
    pub lease: Option<Observed>,
    /// Its Lease says it left for good.
    pub released: bool,
    /// When its last heartbeat arrived (local clock).
    pub last_beat: Option<Instant>,
    /// When its heartbeats started arriving again: the first after a silence of `dead_after`
    /// (or ever).
    pub beating_since: Option<Instant>,
    /// A probe of its data plane went unanswered while it was silent after the heartbeat of
    /// this time: it counts as gone until another heartbeat arrives (see
    /// [`Peer::probed_silent`]).
    pub probed_silent_after: Option<Instant>,
    /// The incarnation of its last heartbeat.
    pub incarnation: u64,
    /// Where to probe its data plane.
    pub mac: Option<MacAddr>,
    /// Its last heartbeat said it is leaving (or cannot announce).
    pub leaving: bool,
    /// Its last heartbeat said it reaches the API server.
    pub api_ok: bool,
    /// Its last heartbeat said its warm-up is over.
    pub ready: bool,
    /// Its last heartbeat acknowledged our leaving.
    pub acked_us: bool,
    /// Whether it was counted alive at the last evaluation, and with which incarnation (to
    /// tell a healed partition, same incarnation, from a restart).
    pub was_alive: Option<u64>,
    /// The incarnation it had when it was last counted dead.
    pub incarnation_at_death: Option<u64>,
    /// Whether its heartbeats arrived at the last evaluation, and the incarnation they had
    /// when they stopped (a heal: they resume with the same one).
    pub was_beating: bool,
    /// The incarnation its heartbeats had when they last stopped arriving.
    pub incarnation_when_silent: Option<u64>,
    /// Lease renewals seen since its heartbeats stopped arriving here.
    pub renewals_while_silent: u32,
    /// Of those, the ones seen while we had trusted the API since before its last heartbeat:
    /// delivered in time, so written after the heartbeats stopped.
    pub timely_renewals_while_silent: u32,
    /// When the first heartbeat of its current incarnation arrived.
    pub incarnation_since: Option<Instant>,
    /// Its last heartbeat said it hears ours: heartbeats flow both ways.
    pub hears_us: bool,
    /// Its configuration fingerprint ([`Beat::config`]).
    pub config: u64,
    /// Its view fingerprint ([`Beat::view`]).
    pub view: u64,
    /// Since when its configuration fingerprint differs from ours.
    pub config_mismatch: Option<Instant>,
    /// Its Lease says it stepped back (isolated).
    pub standby: bool,
    /// Its Lease's count of peers it exchanges heartbeats with both ways, if it publishes one.
    pub connected: Option<u32>,
    /// Its published links, if any.
    pub links: Option<Vec<Link>>,
}

/// What a heartbeat did to a peer's record ([`Peer::beat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Beaten {
    /// From an older incarnation: ignored.
    Stale,
    /// It was beating and the beat says nothing new: only the time of its last beat moved,
    /// which no step acts on before its timer ([`Timer::PeerSilent`](super::timers::Timer)).
    Steady,
    /// It started beating again, or something it says changed.
    Changed,
}

impl Peer {
    pub fn new() -> Self {
        Peer {
            lease: None,
            released: false,
            last_beat: None,
            beating_since: None,
            probed_silent_after: None,
            incarnation: 0,
            mac: None,
            leaving: false,
            api_ok: false,
            ready: false,
            acked_us: false,
            was_alive: None,
            incarnation_at_death: None,
            was_beating: false,
            incarnation_when_silent: None,
            renewals_while_silent: 0,
            timely_renewals_while_silent: 0,
            incarnation_since: None,
            hears_us: false,
            config: 0,
            view: 0,
            config_mismatch: None,
            standby: false,
            connected: None,
            links: None,
        }
    }

    /// Whether it can announce `vip` (on one of `interfaces`, if any: see
    /// [`Link::mac_for`]): by its published links, or, if it publishes none (an older agent),
    /// assumed, except where `interfaces` restricts it (names it cannot be shown to have).
    pub fn can_announce(&self, vip: IpAddr, interfaces: &[String]) -> bool {
        match self.links.as_deref() {
            Some(l) => Link::mac_for(l, vip, interfaces).is_some(),
            None => interfaces.is_empty(),
        }
    }

    /// The MAC to probe about `vip`: the one its data plane answers that VIP with (by its
    /// published links), else the MAC it sends heartbeats from.
    pub fn probe_mac(&self, vip: IpAddr, interfaces: &[String]) -> Option<MacAddr> {
        self.links
            .as_deref()
            .and_then(|l| Link::mac_for(l, vip, interfaces))
            .or(self.mac)
    }

    /// Record a verified heartbeat. A beat from an older incarnation than the last one seen
    /// is ignored (the replay check in the codec already drops those; this keeps the core
    /// safe on its own).
    /// The beat is [`Beaten::Steady`] only if the last one came within `suspect_after`: a
    /// suspect that beats again is news (it is a candidate again).
    pub fn beat(
        &mut self,
        now: Instant,
        beat: &Beat,
        us: &NodeName,
        (suspect_after, dead_after): (Duration, Duration),
    ) -> Beaten {
        if beat.incarnation < self.incarnation {
            return Beaten::Stale;
        }
        let acked_us = beat.acks.iter().any(|n| n == us);
        let hears_us = beat.hears.iter().any(|n| n == us);
        let beating = self.last_beat.is_some_and(|t| now < t + dead_after);
        let steady = self.last_beat.is_some_and(|t| now < t + suspect_after)
            && self.incarnation_since.is_some()
            && beat.incarnation == self.incarnation
            && self.renewals_while_silent == 0
            && self.timely_renewals_while_silent == 0
            && self.mac == Some(beat.mac)
            && self.leaving == beat.leaving
            && self.api_ok == beat.api_ok
            && self.ready == beat.ready
            && self.acked_us == acked_us
            && self.hears_us == hears_us
            && self.view == beat.view
            && self.config == beat.config;
        self.last_beat = Some(now);
        if steady {
            return Beaten::Steady;
        }
        if !beating {
            self.beating_since = Some(now);
        }
        self.renewals_while_silent = 0;
        self.timely_renewals_while_silent = 0;
        if beat.incarnation != self.incarnation || self.incarnation_since.is_none() {
            self.incarnation_since = Some(now);
        }
        self.incarnation = beat.incarnation;
        self.mac = Some(beat.mac);
        self.leaving = beat.leaving;
        self.api_ok = beat.api_ok;
        self.ready = beat.ready;
        self.acked_us = acked_us;
        self.hears_us = hears_us;
        self.view = beat.view;
        if self.config != beat.config {
            self.config = beat.config;
            self.config_mismatch = None;
        }
        Beaten::Changed
    }

    /// Alive by the API although its heartbeats do not reach us: its Lease was renewed since
    /// its heartbeats stopped arriving here, the last time at least `settled` after the last
    /// heartbeat (so its count no longer includes peers it heard just before a cut: a node
    /// whose link died silently counts none by then), that renewal says other peers hear it
    /// (`connected > 0`), and it is recent (within `fresh`). Then heartbeats are lost only
    /// between it and us (a one-way or pairwise link fault), the rest of the cluster ranks it,
    /// and so must we: its VIPs taken meanwhile are handed back (an overlap, counted).
    ///
    /// One renewal suffices if we trusted the API throughout (it reached us in time, so it was
    /// written after the heartbeats stopped); otherwise it takes two. A slow or stopped API
    /// server may complete a renewal its writer sent before it died, and we see it only after
    /// the heartbeats stopped (while we distrusted the API, since our own writes hung too):
    /// one late write is no proof of life, a node that is alive renews again.
    pub fn alive_by_api(&self, now: Instant, settled: Duration, fresh: Duration) -> bool {
        self.connected.is_some_and(|c| c > 0) && self.renewed_since_silent(now, settled, fresh)
    }

    /// Alive by its Lease in a heartbeat blackout: like [`alive_by_api`](Self::alive_by_api),
    /// but its renewal says it exchanges heartbeats with nobody (`connected == 0`), and it is
    /// no candidate once a probe of its data plane went unanswered. The caller asks only while
    /// this node exchanges heartbeats with nobody either: then no node is better connected
    /// than another, and the Leases are all that say who is alive.
    pub fn alive_by_lease(&self, now: Instant, settled: Duration, fresh: Duration) -> bool {
        self.connected == Some(0)
            && !self.probed_silent()
            && self.renewed_since_silent(now, settled, fresh)
    }

    /// Its Lease was renewed `settled` after its last heartbeat here (see
    /// [`alive_by_api`](Self::alive_by_api)), within `fresh`, and it did not step back.
    fn renewed_since_silent(&self, now: Instant, settled: Duration, fresh: Duration) -> bool {
        let (Some(l), Some(beat)) = (&self.lease, self.last_beat) else {
            return false;
        };
        !self.standby
            && (self.timely_renewals_while_silent >= 1 || self.renewals_while_silent >= 2)
            && l.changed_at >= beat + settled
            && now < l.changed_at + fresh
    }

    /// Strictly better connected than a node that has exchanged heartbeats with nobody since
    /// `alone`: a Lease renewal seen after then says it exchanges them with some peer
    /// (`connected > 0`; 0 against 0 is no better, whatever the names). If its heartbeats do
    /// not reach us either, the renewal must also come `settled` after its last heartbeat
    /// here, so that its count no longer includes peers it heard before the cut: in a
    /// cluster-wide blackout every count falls to 0 within a heartbeat period of ours, and a
    /// renewal written in that period must not make us step back (nobody would be better
    /// connected than us, and peers would take our VIPs from a standby node without probing).
    pub fn better_connected_since(
        &self,
        alone: Instant,
        now: Instant,
        dead_after: Duration,
        settled: Duration,
    ) -> bool {
        let Some(l) = &self.lease else {
            return false;
        };
        let fresh = if self.beating(now, dead_after) {
            l.changed_at > alone
        } else {
            l.changed_at > alone && self.last_beat.is_none_or(|b| l.changed_at >= b + settled)
        };
        fresh && self.connected.is_some_and(|c| c > 0)
    }

    /// When [`alive_by_api`](Self::alive_by_api) lapses unless the Lease is renewed again.
    pub fn alive_by_api_deadline(&self, fresh: Duration) -> Option<Instant> {
        let (l, beat) = (self.lease.as_ref()?, self.last_beat?);
        (l.changed_at > beat).then_some(l.changed_at + fresh)
    }

    /// Heartbeats arrive: the last one is younger than `dead_after`, and no probe of its
    /// data plane went unanswered since.
    pub fn beating(&self, now: Instant, dead_after: Duration) -> bool {
        self.last_beat.is_some_and(|t| now < t + dead_after) && !self.probed_silent()
    }

    /// Its heartbeats stopped and a probe of its data plane went unanswered since the last
    /// one: it is gone, although `dead_after` has not passed yet. Cleared by its next
    /// heartbeat.
    pub fn probed_silent(&self) -> bool {
        self.probed_silent_after.is_some() && self.probed_silent_after == self.last_beat
    }

    /// Counts in the ranking although not ready: only during its warm-up (`patience` after the
    /// first heartbeat of this incarnation), so that a restarting agent keeps its VIPs while a
    /// node stuck before readiness does not hold VIPs nobody announces.
    pub fn settled(&self, now: Instant, patience: Duration) -> bool {
        self.ready || self.incarnation_since.is_some_and(|t| now < t + patience)
    }

    /// When it stops counting unless it becomes ready.
    pub fn patience_deadline(&self, patience: Duration) -> Option<Instant> {
        if self.ready {
            None
        } else {
            self.incarnation_since.map(|t| t + patience)
        }
    }

    /// When it stops beating unless another heartbeat arrives.
    pub fn beat_deadline(&self, dead_after: Duration) -> Option<Instant> {
        self.last_beat.map(|t| t + dead_after)
    }

    /// Its Lease makes it a member. While the API cannot be trusted from here (`trusted_since`
    /// is `None`), a known Lease never expires: an outage must not empty the cluster. When
    /// trust returns, expiry counts from then at the earliest, so peers get a full Lease
    /// duration to renew before anyone judges them.
    pub fn member(&self, now: Instant, trusted_since: Option<Instant>) -> bool {
        match (&self.lease, trusted_since) {
            (None, _) => false,
            _ if self.released => false,
            (Some(_), None) => true,
            (Some(l), Some(since)) => now < l.changed_at.max(since) + l.duration,
        }
    }

    /// When its Lease expires by our clock, if we trust the API.
    pub fn lease_deadline(&self, trusted_since: Option<Instant>) -> Option<Instant> {
        let l = self.lease.as_ref()?;
        trusted_since.map(|since| l.changed_at.max(since) + l.duration)
    }
}

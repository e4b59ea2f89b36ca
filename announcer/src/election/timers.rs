//! The election's timers as one typed table: every kind of deadline is a [`Timer`], and each
//! kind names the [`Step`] of a tick that acts on it.
//!
//! Why: the core sleeps until its earliest deadline ([`Core::poll_timeout`]) and, when woken,
//! runs the steps of a tick, each of which checks its own deadlines against the clock. The two
//! sides used to be kept in step by hand, so a deadline added to one and forgotten on the other
//! failed silently (a decision taken late, or a wake-up that does nothing). Now
//! [`Core::poll_timeout`] is the minimum over a [`Timers`] table filled by one function with an
//! exhaustive `match` over [`Timer`], and [`Timer::step`] is an exhaustive `match` too, while
//! the tick runs exactly [`Step::ORDER`]: a new kind of deadline does not compile until both
//! sides say what it is. Most deadlines derive from per-peer or per-VIP state, so the table is
//! computed when asked rather than stored.
//!
//! [`Core::poll_timeout`]: super::Core::poll_timeout

use super::Instant;

/// One kind of deadline the core wakes up for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Timer {
    /// Our next heartbeat is due. Always armed: it is also the first wake-up after start.
    Beat,
    /// Our Lease is due to be written (none is in flight).
    LeaseWrite,
    /// Our installed entries' TTLs are due to be refreshed.
    Refresh,
    /// The warm-up ends (not ready yet).
    Warmup,
    /// The shutdown handover gives up waiting for acknowledgements.
    Leaving,
    /// A peer's heartbeats count as stopped unless another arrives.
    PeerSilent,
    /// A peer's Lease expires by our clock (while we trust the API).
    PeerLeaseExpiry,
    /// A peer that is not ready stops counting in the ranking.
    PeerPatience,
    /// A peer alive only by its Lease renewals stops counting so unless renewed again.
    PeerAliveByApi,
    /// Our own Lease expires unless a write succeeds, or the write in flight has hung for a
    /// renewal period (either way we stop trusting the API).
    OwnLease,
    /// A probe of a suspect's data plane times out.
    Probe,
    /// A handoff asks the new owner's data plane again.
    HandoffAsk,
    /// A handoff lets go although the new owner's data plane never answered.
    HandoffHold,
    /// Our standby hold is over while we still hold VIPs.
    StandbyHold,
    /// We have exchanged heartbeats with no peer for long enough to consider stepping back.
    Alone,
    /// We have exchanged heartbeats again for long enough to leave standby.
    Rejoin,
    /// Our watches or Lease renewals have failed for a Lease duration while peers reach the API.
    Fence,
    /// A peer has run another configuration for long enough to report it.
    ConfigMismatch,
}

impl Timer {
    /// Every kind, in declaration order (`ALL[t as usize] == t`).
    pub const ALL: [Timer; 18] = [
        Timer::Beat,
        Timer::LeaseWrite,
        Timer::Refresh,
        Timer::Warmup,
        Timer::Leaving,
        Timer::PeerSilent,
        Timer::PeerLeaseExpiry,
        Timer::PeerPatience,
        Timer::PeerAliveByApi,
        Timer::OwnLease,
        Timer::Probe,
        Timer::HandoffAsk,
        Timer::HandoffHold,
        Timer::StandbyHold,
        Timer::Alone,
        Timer::Rejoin,
        Timer::Fence,
        Timer::ConfigMismatch,
    ];

    /// How many kinds there are.
    pub const COUNT: usize = Self::ALL.len();

    /// Its slot in a [`Timers`] table.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The step of a tick that acts when this deadline passes.
    pub const fn step(self) -> Step {
        match self {
            Timer::Beat => Step::SendBeat,
            Timer::LeaseWrite => Step::WriteLease,
            Timer::Refresh => Step::Refresh,
            Timer::Warmup => Step::Ready,
            Timer::Leaving => Step::Handover,
            // A peer's standing decides the owners: the reconcile notices it changed.
            Timer::PeerSilent
            | Timer::PeerLeaseExpiry
            | Timer::PeerPatience
            | Timer::PeerAliveByApi => Step::Reconcile,
            Timer::OwnLease => Step::Trust,
            Timer::Probe => Step::Probes,
            Timer::HandoffAsk | Timer::HandoffHold => Step::Handoffs,
            Timer::StandbyHold => Step::Force,
            Timer::Alone | Timer::Rejoin => Step::Isolation,
            Timer::Fence | Timer::ConfigMismatch => Step::NodeConditions,
        }
    }
}

/// One step of a tick. A tick runs every step, in [`Step::ORDER`]: inputs (a Lease, a
/// heartbeat) change what the steps decide as much as the clock does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Whether the API can be trusted (watches healthy and our Lease unexpired).
    Trust,
    /// Since when some live peer reaches the API (for fencing).
    PeersApiOk,
    /// Readiness after the warm-up.
    Ready,
    /// Stepping back when isolated, and in again.
    Isolation,
    /// Node-level Events (configuration mismatch, fenced).
    NodeConditions,
    /// Whether this tick reconciles every VIP regardless of the view.
    Force,
    /// Writing our Lease.
    WriteLease,
    /// Deciding each VIP's owner.
    Reconcile,
    /// Probes of suspects' data planes.
    Probes,
    /// Handoffs to new owners.
    Handoffs,
    /// Refreshing our entries' TTLs.
    Refresh,
    /// The shutdown handover.
    Handover,
    /// Our heartbeat.
    SendBeat,
}

impl Step {
    /// The order a tick runs the steps in (the simulator's traces depend on it).
    pub const ORDER: [Step; 13] = [
        Step::Trust,
        Step::PeersApiOk,
        Step::Ready,
        Step::Isolation,
        Step::NodeConditions,
        Step::Force,
        Step::WriteLease,
        Step::Reconcile,
        Step::Probes,
        Step::Handoffs,
        Step::Refresh,
        Step::Handover,
        Step::SendBeat,
    ];
}

/// The earliest pending deadline of each kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timers {
    /// Deadlines at or before this instant were handled by the tick then (or wait for an
    /// input) and are not armed.
    after: Instant,
    deadlines: [Option<Instant>; Timer::COUNT],
}

impl Timers {
    /// An empty table for a core whose last tick was at `after`.
    pub fn new(after: Instant) -> Self {
        Timers {
            after,
            deadlines: [None; Timer::COUNT],
        }
    }

    /// Arms `timer` at `at` unless an earlier deadline of its kind is armed. Deadlines not
    /// after the last tick are ignored, except [`Timer::Beat`]'s: it is always armed, so a
    /// core that never ticked yet wakes up at once.
    pub fn arm(&mut self, timer: Timer, at: Instant) {
        if timer != Timer::Beat && at <= self.after {
            return;
        }
        let slot = &mut self.deadlines[timer.index()];
        *slot = Some(slot.map_or(at, |t| t.min(at)));
    }

    /// The earliest deadline of this kind, if armed.
    pub fn get(&self, timer: Timer) -> Option<Instant> {
        self.deadlines[timer.index()]
    }

    /// The armed kinds with their earliest deadline.
    pub fn iter(&self) -> impl Iterator<Item = (Timer, Instant)> + '_ {
        Timer::ALL
            .iter()
            .filter_map(|t| self.get(*t).map(|at| (*t, at)))
    }

    /// The earliest deadline of all.
    pub fn earliest(&self) -> Option<Instant> {
        self.deadlines.iter().flatten().min().copied()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Its position in [`Timer::ALL`]. No `_` arm: a new variant does not compile until it is
    /// placed here, and the test below then fails until [`Timer::ALL`] lists it.
    fn position(t: Timer) -> usize {
        match t {
            Timer::Beat => 0,
            Timer::LeaseWrite => 1,
            Timer::Refresh => 2,
            Timer::Warmup => 3,
            Timer::Leaving => 4,
            Timer::PeerSilent => 5,
            Timer::PeerLeaseExpiry => 6,
            Timer::PeerPatience => 7,
            Timer::PeerAliveByApi => 8,
            Timer::OwnLease => 9,
            Timer::Probe => 10,
            Timer::HandoffAsk => 11,
            Timer::HandoffHold => 12,
            Timer::StandbyHold => 13,
            Timer::Alone => 14,
            Timer::Rejoin => 15,
            Timer::Fence => 16,
            Timer::ConfigMismatch => 17,
        }
    }

    #[test]
    fn all_lists_every_timer_in_its_slot() {
        for (i, t) in Timer::ALL.iter().enumerate() {
            assert_eq!(t.index(), i, "{t:?}");
            assert_eq!(position(*t), i, "{t:?}");
        }
    }

    #[test]
    fn every_timer_is_acted_on_by_a_step_the_tick_runs() {
        for t in Timer::ALL {
            assert!(Step::ORDER.contains(&t.step()), "{t:?}");
        }
    }

    #[test]
    fn the_table_keeps_the_earliest_deadline_after_the_last_tick() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut timers = Timers::new(t0 + s);
        timers.arm(Timer::Probe, t0 + 3 * s);
        timers.arm(Timer::Probe, t0 + 2 * s);
        timers.arm(Timer::Alone, t0 + s);
        timers.arm(Timer::Beat, t0);
        assert_eq!(timers.get(Timer::Probe), Some(t0 + 2 * s));
        assert_eq!(timers.get(Timer::Alone), None);
        assert_eq!(timers.earliest(), Some(t0));
        assert_eq!(
            timers.iter().collect::<Vec<_>>(),
            [(Timer::Beat, t0), (Timer::Probe, t0 + 2 * s)]
        );
    }
}

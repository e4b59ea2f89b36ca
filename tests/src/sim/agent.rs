//! What the simulator drives on each node: anything shaped like the election core.
//!
//! Why a trait: the simulator must be testable on its own (before and independently of the
//! real [`Core`]), so its own tests drive a deliberately naive core ([`super::naive`]) through
//! the same world and check that the invariants catch what that naive core gets wrong.

use announcer::election::{
    Core, ElectionConfig, Input, Instant, Output, stats::ElectionStats as Stats,
};

/// A sans-IO election state machine, as the simulated shell sees it.
pub trait Agent {
    /// Start an agent at `now` (a new process: fresh state, a higher `incarnation`).
    fn start(config: ElectionConfig, now: Instant, incarnation: u64) -> Self;
    /// Feed one event.
    fn handle(&mut self, now: Instant, input: Input);
    /// The next action, if any.
    fn poll_output(&mut self) -> Option<Output>;
    /// When to tick next.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Counters (the simulator reads `overlaps` and the Lease write counts).
    fn stats(&self) -> Stats;
    /// How many peers it keeps state for (bounded memory: never more than the Leases).
    fn peer_count(&self, now: Instant) -> usize;
}

impl Agent for Core {
    fn start(config: ElectionConfig, now: Instant, incarnation: u64) -> Self {
        Core::new(config, now, incarnation)
    }

    fn handle(&mut self, now: Instant, input: Input) {
        Core::handle(self, now, input)
    }

    fn poll_output(&mut self) -> Option<Output> {
        Core::poll_output(self)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        Core::poll_timeout(self)
    }

    fn stats(&self) -> Stats {
        Core::stats(self)
    }

    fn peer_count(&self, now: Instant) -> usize {
        Core::peers(self, now).len()
    }
}

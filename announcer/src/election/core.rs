//! The node-lease election core. (Being written; the public API below is fixed.)

use std::{net::IpAddr, time::Duration};

use super::{Config, IfaceName, Input, Instant, NodeName, Output};

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

/// Counters the shell exports as metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// VIPs taken over (installed and announced).
    pub takeovers: u64,
    /// VIPs released to another node.
    pub releases: u64,
    /// Probes of an old owner's data plane sent.
    pub probes: u64,
    /// Probes answered (takeover deferred).
    pub probes_answered: u64,
    /// Overlaps detected (two owners during a partition).
    pub overlaps: u64,
    /// Lease writes attempted.
    pub lease_writes: u64,
    /// Lease writes that hit 409.
    pub lease_conflicts: u64,
    /// Lease writes that failed otherwise.
    pub lease_failures: u64,
}

/// The election state machine. See the module docs.
#[derive(Debug)]
pub struct Core {
    config: Config,
    incarnation: u64,
}

impl Core {
    /// A core for `config`, started at `now`. `incarnation` must grow across restarts of the
    /// agent on this node (the shell uses the wall-clock start time in nanoseconds).
    pub fn new(config: Config, now: Instant, incarnation: u64) -> Self {
        let _ = now;
        Core { config, incarnation }
    }

    /// Feed one event at `now`.
    pub fn handle(&mut self, now: Instant, input: Input) {
        let _ = (now, input);
    }

    /// The next action, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        None
    }

    /// When to call [`handle`](Self::handle) with [`Input::Tick`] next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// The VIPs this node has installed in its data plane, with their interface.
    pub fn owned(&self) -> Vec<(IpAddr, IfaceName)> {
        Vec::new()
    }

    /// Peers as seen from here.
    pub fn peers(&self, now: Instant) -> Vec<PeerStatus> {
        let _ = now;
        Vec::new()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        Stats::default()
    }

    /// Whether the warm-up is over (the readiness probe).
    pub fn is_ready(&self) -> bool {
        false
    }

    /// This node's configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// This agent's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }
}

//! The election's counters ([`ElectionStats`]): what the core did (takeovers, probes, Lease
//! writes, overlaps), kept in the core and read by the agent's metrics and `/state`.
//!
//! Why a module of its own: the counters are part of the core's interface (the shell exports
//! them, the simulator checks them), not of its state machine.

/// Counters the shell exports as metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ElectionStats {
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
    /// Times this node stepped back because it could exchange heartbeats with no peer.
    #[serde(default)]
    pub standbys: u64,
    /// Peers reported running another configuration.
    #[serde(default)]
    pub config_mismatches: u64,
}

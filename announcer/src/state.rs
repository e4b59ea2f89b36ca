//! The agent's `/state` document: what a running agent announces, whom it sees, and its
//! election counters, as JSON.
//!
//! Why a module of its own, above the data plane and the election but below the agent and the
//! CLI: the agent writes this document and `announcer status` reads it, and neither side should
//! need the other's internals to agree on it. A field added later carries `#[serde(default)]` (as
//! [`AgentState::standby`] does), so a newer `status` still reads an older agent.

pub mod announced;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::election::ElectionStats;

/// The path the agent serves the document on.
pub const PATH: &str = "/state";

/// One VIP this node announces.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct OwnedVip {
    /// The VIP.
    pub vip: std::net::IpAddr,
    /// The interface it is answered on.
    pub iface: String,
    /// `namespace/name` of its Service, if known.
    pub service: Option<String>,
}

/// One peer as this agent sees it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerState {
    /// Node name.
    pub node: String,
    /// Counted in the ranking.
    pub alive: bool,
    /// Milliseconds since its last heartbeat.
    pub heartbeat_age_ms: Option<u64>,
    /// Its Lease is valid by our clock.
    pub lease_valid: bool,
    /// It said it is leaving.
    pub leaving: bool,
}

/// The agent's state as served on `/state` (and read back by `announcer status`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AgentState {
    /// This node.
    pub node: String,
    /// `node-lease` or `lease-per-service`.
    pub election: String,
    /// This agent's incarnation.
    pub incarnation: u64,
    /// Warm-up over, taking VIPs.
    pub ready: bool,
    /// Whether the data plane is real (`false` with `--no-dataplane`).
    pub dataplane: bool,
    /// VIPs announced here (shared: the agent republishes its state every 250 ms and copies
    /// this list only when it changed).
    pub owned: Arc<[OwnedVip]>,
    /// Peers.
    pub peers: Vec<PeerState>,
    /// Election counters.
    pub stats: ElectionStats,
    /// The API is trusted: watches healthy and (node-lease mode) this node's Lease writes
    /// succeed, none hung for a renewal period.
    pub api_ok: bool,
    /// Stepped back: this node exchanges heartbeats with no peer (see the `Isolated` Event).
    #[serde(default)]
    pub standby: bool,
}

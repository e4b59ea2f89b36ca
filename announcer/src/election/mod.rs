//! Who announces which VIP: the election, as a deterministic state machine (sans-IO).
//!
//! Why sans-IO: failover behaviour is the product, and it must be tested over thousands of
//! crash / partition / outage schedules without sleeping. [`Core`] therefore does no I/O and
//! reads no clock: the agent (or the simulator in `tests/src/sim`) feeds it the current
//! [`Instant`] and [`Input`] events, then drains [`Output`] actions with [`Core::poll_output`]
//! and sleeps until [`Core::poll_timeout`]. The same inputs always give the same outputs.
//!
//! The design (one Lease per node, UDP heartbeats, rendezvous hashing, probing the old
//! owner's data plane) is described in [`core`]; the ranking in [`rendezvous`]; the Lease
//! timing rules shared with the lease-per-service mode in [`lease`]; its deadlines, one
//! [`timers::Timer`] per kind, in [`timers`]; its counters in [`stats`].

pub mod core;
pub mod lease;
mod peer;
pub mod rendezvous;
pub mod stats;
pub mod timers;
mod types;

pub use self::core::{Core, Failover, PeerSilence};
pub use stats::ElectionStats;
pub use types::*;

/// Time as the core sees it. The agent passes `Instant::now()`; the simulator passes a fixed
/// origin plus virtual time, so runs are reproducible.
pub use std::time::Instant;
#[cfg(test)]
mod tests;

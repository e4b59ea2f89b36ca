//! The benchmarks, one module each with its own report and plot, and what they share.
//!
//! * [`xdp`]: `cargo xtask bench xdp`, what the XDP responder costs per frame and answers per
//!   CPU second under an ARP flood.
//! * [`control_plane`]: `cargo xtask bench control-plane`.
//! * [`failover`]: `cargo xtask bench failover`.
//! * [`hollow`]: the hollow-peer generator of `cargo xtask bench hollow` (one real agent
//!   among N−1 synthetic peers).
//! * Shared: [`stats`] (summaries, nearest-rank percentiles), [`verdict`] (targets met or
//!   not), [`cpu`] (CPU time of processes). The raw packet socket the XDP benchmark floods and
//!   answers with is the test worlds' ([`crate::env::packet`]).

pub mod control_plane;
pub mod cpu;
pub mod failover;
pub mod hollow;
pub mod stats;
pub mod verdict;
pub mod xdp;

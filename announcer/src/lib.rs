//! The announcer agent, loader and CLI library.
//!
//! * [`loader`]: attach the XDP responder to an interface and pin it.
//! * [`dataplane`]: the VIP table the responder answers from, and its counters.
//! * [`announce`]: gratuitous ARP and unsolicited NA bursts over AF_PACKET.
//! * [`logs`]: the program's rare events, forwarded into `tracing`.
//! * [`netif`], [`clock`]: interface facts and the monotonic clock expiry is judged on.
//! * [`error`]: typed errors with exit codes and fixes.
//! * [`metrics`]: the agent's Prometheus metrics; [`status`]: `announcer status`, the node's view.

pub mod announce;
pub mod clock;
pub mod dataplane;
pub mod error;
pub mod linkinfo;
pub mod loader;
pub mod logs;
pub mod metrics;
pub mod netif;
pub mod packet;
pub mod status;

pub use announcer_ebpf::{maps, wire};
pub mod agent;
pub mod election;
pub mod heartbeat;

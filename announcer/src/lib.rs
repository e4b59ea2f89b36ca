//! The announcer agent, loader and CLI library.
//!
//! * [`dataplane`]: the XDP responder from userspace: pins, loader, VIP table, bursts, logs.
//! * [`state`]: the agent's `/state` document.
//! * [`agent`]: the Kubernetes agent; [`cli`]: the `announcer` subcommands.

pub mod dataplane;
pub mod state;

// `agent/config.rs` still names these two by their paths before the data plane became one
// module; it moves in a later step of issue 12, and these re-exports go with it.
pub(crate) use dataplane::{announce, loader};

pub use announcer_ebpf::{maps, wire};
pub mod agent;
pub mod cli;
pub mod election;
pub mod heartbeat;

#[cfg(test)]
mod layers;

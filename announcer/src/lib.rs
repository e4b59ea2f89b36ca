//! The announcer agent, loader and CLI library.
//!
//! * [`dataplane`]: the XDP responder from userspace: pins, loader, VIP table, bursts, logs.
//! * [`state`]: the agent's `/state` document; [`status`]: `announcer status`, the node's view.
//! * [`agent`]: the Kubernetes agent.

pub mod dataplane;
pub mod state;
pub mod status;

// `agent/config.rs` still names these two by their paths before the data plane became one
// module; it moves in a later step of issue 12, and these re-exports go with it.
pub(crate) use dataplane::{announce, loader};

pub use announcer_ebpf::{maps, wire};
pub mod agent;
pub mod election;
pub mod heartbeat;

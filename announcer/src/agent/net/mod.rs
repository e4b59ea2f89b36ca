//! The agent's side of the node's network: what it learns from the interfaces and what it
//! sends on them.
//!
//! * [`iface`]: this node's interfaces and addresses, and which one a VIP is announced on.
//! * [`link_watch`]: when they change (the kernel's rtnetlink announcements).
//! * [`heartbeat_socket`]: the UDP socket heartbeats travel on (the codec is
//!   [`crate::heartbeat`]).
//! * [`probe`]: ARP/NS probes of a silent owner's data plane before taking over.
//! * [`plane`]: the agent's handle on the data plane: map writes, bursts, entries left from a
//!   previous run.
//! * [`announcements`]: the bursts' rounds, sent at a paced rate (a mass takeover must not
//!   flood the gateway's control plane).
//!
//! Why together: these work without the API server, which is what lets failover go on during
//! an API outage; none of them decides anything, the election core does.

pub mod announcements;
pub mod conntrack;
pub mod heartbeat_socket;
pub mod iface;
pub mod link_watch;
pub mod plane;
pub mod probe;

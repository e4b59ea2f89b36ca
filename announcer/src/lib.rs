//! The announcer: an XDP responder that answers ARP and NDP for Kubernetes LoadBalancer IPs,
//! the agent that elects which node answers for each, and the `announcer` CLI.
//!
//! The modules are layers, each using only the ones before it in this list (the layering check
//! in `xtask`, `xtask/src/layers.rs`, holds them to it, and to no sibling modules naming each
//! other in a cycle):
//!
//! 1. [`dataplane`]: the XDP program from userspace: pins, loader, the VIP table and its
//!    counters, announcement bursts, the program's log, the system calls underneath. No
//!    Kubernetes, no election. ([`maps`] and [`wire`], the types shared with the program, are
//!    re-exported from `announcer-ebpf`.)
//! 2. The protocols and rules, sans-IO (no sockets; time is an argument): [`election`], the
//!    core that decides who owns each VIP, and [`heartbeat`], the authenticated heartbeat codec
//!    (which carries the election's types); [`ipam`], the `AddressPool` resource and the pure
//!    address-allocation rules; [`placement`], the pure rules for which VIPs are announced and
//!    which nodes may announce each (and the label-selector parser they filter by);
//!    [`withdraw`], the rules that prove a node gone and bound the withdrawal of its Pods'
//!    readiness.
//! 3. [`state`]: the agent's `/state` document, which the agent writes and the CLI reads.
//! 4. [`agent`]: the tokio shell that connects the election to Kubernetes, the network and
//!    the data plane.
//! 5. [`allocator`] and [`withdrawer`]: the Deployments' controllers, beside the agent (each
//!    uses of it only the shutdown signal and the API helpers): the address allocator, and the
//!    withdrawal controller that acts on [`withdraw`]'s decisions.
//! 6. [`cli`]: the subcommands; `status` reads the data plane and [`state`], never the agent's
//!    internals.

pub mod dataplane;
pub use announcer_ebpf::{maps, wire};

pub mod election;
pub mod heartbeat;

pub mod ipam;
pub mod placement;
pub mod withdraw;

pub mod state;

pub mod agent;

pub mod allocator;
pub mod withdrawer;

pub mod cli;

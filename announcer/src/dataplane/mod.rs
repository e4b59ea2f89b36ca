//! The data plane, seen from userspace: everything that touches the XDP program, its pinned
//! maps and the interfaces it answers on, and nothing about who should answer.
//!
//! Why a layer of its own: the CLI drives it by hand (`load`, `vip add`, `announce`), the agent
//! drives it for the elected owner, and both must get the same checks and the same errors. It
//! knows no Kubernetes and no election, so it can be tested against the kernel alone.
//!
//! * [`pins`]: where a program, its link and maps are pinned, per interface.
//! * [`loader`]: attach the program to an interface, swap it in place, detach it.
//! * [`table`]: the VIP entries the program answers from, and its counters ([`Dataplane`]).
//! * [`announce`]: gratuitous ARP and unsolicited NA bursts over `AF_PACKET`.
//! * [`pace`]: the rate announcements go out at, first rounds before repeats.
//! * [`mcast`]: the solicited-node multicast groups of IPv6 VIPs, joined so that NIC filters
//!   and MLD-snooping switches deliver their Neighbor Solicitations.
//! * [`logs`]: the program's rare events, forwarded into `tracing`.
//! * [`sys`]: the system calls underneath: interface facts, link info, packet sockets, the
//!   clock expiry is judged on.
//! * [`error`]: what can go wrong here, each with the exit code and the fix the CLI prints.

pub mod announce;
pub mod error;
pub mod loader;
pub mod logs;
pub mod mcast;
pub mod pace;
pub mod pins;
pub mod sys;
pub mod table;

pub use self::{
    error::{Error, Result},
    table::{Dataplane, Lifetime, Vip, VipStatus},
};

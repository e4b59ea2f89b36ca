//! The few system calls the data plane needs that neither aya nor `nix` wraps the way it is
//! needed, each behind a safe function: kept apart so the `unsafe` is in one place and the
//! modules above read as policy.
//!
//! * [`netif`]: an interface's index and MAC, and whether its NIC strips VLAN tags.
//! * [`linkinfo`]: which interface a pinned XDP link is attached to.
//! * [`bpfobj`]: pinned objects by path or id: program tags, map shapes and entries, detach.
//! * [`packet`]: binding `AF_PACKET` sockets, raw `setsockopt`.
//! * [`xdp_query`]: which XDP program (id, name, mode) is attached to an interface (rtnetlink).
//! * [`clock`]: `CLOCK_MONOTONIC_COARSE`, the clock the program judges expiry on.

pub mod bpfobj;
pub mod clock;
pub mod linkinfo;
pub mod netif;
pub mod packet;
pub mod xdp_query;

//! Everything the XDP program and the agent must agree on, in one `no_std` place.
//!
//! * [`wire`]: packet layouts (`#[repr(C)]`, byte arrays only, so alignment is 1 and there is
//!   no padding) for Ethernet, 802.1Q, ARP, IPv6 and Neighbor Discovery, with zero-copy checked
//!   views and `Repr`s (parse/emit) in the style of smoltcp.
//! * [`maps`]: the BPF map keys, values and counters, with their sizes pinned by
//!   compile-time assertions.
//! * [`version`]: the program's version (which changes its tag) and the maps' layout version.
//!
//! The XDP program (`src/main.rs`, built for `bpfel-unknown-none`) reads packets through the
//! same layouts the agent uses to build announcements and that the tests use to check answers,
//! so a field cannot move in one place and not the other.
#![no_std]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod maps;
pub mod version;
pub mod wire;

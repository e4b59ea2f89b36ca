//! `cargo xtask bench xdp`: what the XDP responder costs per frame, and how many answers it
//! gives per CPU second under an ARP flood compared with the kernel and a userspace responder.
//!
//! * [`cost`]: nanoseconds per frame with `BPF_PROG_TEST_RUN`, against the `reflect` floor.
//! * [`plot`]: the per-kind latency CDFs as an SVG.
//! * [`flood`]: an ARP flood across a namespace pair, one responder at a time (the `reflect`
//!   floor among them), each run several times; the median trial is reported.
//! * [`report`]: targets, the table and the JSON document.
//! * [`attach`], [`userspace`], [`bpfstats`]: the pieces those are built from, with the shared
//!   [`crate::bench::packet`], [`crate::bench::cpu`] and [`crate::bench::stats`].

pub mod attach;
pub mod bpfstats;
pub mod cost;
pub mod flood;
pub mod plot;
pub mod report;
pub mod userspace;

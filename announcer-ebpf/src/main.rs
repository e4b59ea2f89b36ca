//! The XDP program. Built only for `bpfel-unknown-none` (see `announcer/build.rs`); on any other
//! target this file is an empty binary so that `cargo build --workspace` keeps working.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]

#[cfg(target_arch = "bpf")]
mod program;

#[cfg(not(target_arch = "bpf"))]
fn main() {}

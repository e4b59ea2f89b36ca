//! Kernel tests: the XDP program under `BPF_PROG_TEST_RUN` (rules, fuzz), the loaded responder
//! between two network namespaces, the reachability probe, the stale-flow sweep (conntrack),
//! the agent's link watch, and the
//! namespace harness itself; the program following the binary (swap, mode, map layouts) and
//! `announcer cleanup`; `announcer load` beside another XDP program.
//! Needs root; never skips.
//!
//! One binary so that kube, axum and aya are linked once, not once per file.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

mod cleanup;
mod conntrack;
mod e2e_responder;
mod foreign;
mod link_watch;
mod mld;
mod netns_harness;
mod probe;
mod upgrade;
mod xdp_fuzz;
mod xdp_rules;

/// Tests of this binary run in parallel threads of one process. The harness test that checks
/// "no namespace of this pid remains" takes the write side; every test that creates a
/// namespace holds the read side, so that none owns a namespace meanwhile.
static NAMESPACES: RwLock<()> = RwLock::new(());

/// Held by a test for as long as it may own a namespace.
fn shared() -> RwLockReadGuard<'static, ()> {
    NAMESPACES.read().unwrap_or_else(|e| e.into_inner())
}

/// Held by the test that needs no other test to own a namespace.
fn exclusive() -> RwLockWriteGuard<'static, ()> {
    NAMESPACES.write().unwrap_or_else(|e| e.into_inner())
}

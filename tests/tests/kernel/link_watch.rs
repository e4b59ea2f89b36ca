//! The agent's link watch (needs root): the kernel's rtnetlink messages, not a periodic
//! re-read, wake it when a link in its namespace goes down or up or gains an address.

use std::time::Duration;

use announcer::agent::net::link_watch::LinkWatch;
use announcer_tests::netns::{NODE_IF, Netns, Pair};

/// Far longer than any test: a wake-up can only come from the kernel.
const NO_FALLBACK: Duration = Duration::from_secs(3600);
/// How long a message may take to arrive (returned as soon as it does).
const ARRIVES: Duration = Duration::from_secs(10);

/// Runs `change` (an `ip` command in `ns`) while a link watch in `ns` waits; whether the watch
/// woke up.
fn wakes_on(ns: &Netns, change: &[&str]) -> bool {
    ns.enter(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut watch, err) = LinkWatch::with_fallback(NO_FALLBACK);
            assert!(watch.subscribed(), "no rtnetlink socket: {err:?}");
            // The first call returns at once (the caller reads the interfaces at start).
            watch.changed().await;
            ns.ip(change);
            tokio::time::timeout(ARRIVES, watch.changed()).await.is_ok()
        })
    })
}

#[test]
fn a_link_going_down_wakes_the_watch() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("lwdown");
    assert!(wakes_on(
        &pair.node,
        &["link", "set", "dev", NODE_IF, "down"]
    ));
}

#[test]
fn a_new_address_wakes_the_watch() {
    let _ns = crate::shared();
    let pair = Pair::new("lwaddr");
    assert!(wakes_on(
        &pair.node,
        &["addr", "add", "10.78.0.9/24", "dev", NODE_IF]
    ));
}

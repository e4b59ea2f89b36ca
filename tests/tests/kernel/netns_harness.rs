//! Tests of the namespace testbed itself (no XDP). Requires root.

use std::process::Command;
use std::time::Duration;

use announcer_tests::netns::{
    self, CLIENT_IF, CLIENT_MAC, NODE_IF, NODE_MAC, NODE_V4, NODE_V6, Netns, Pair,
};
use announcer_tests::tools;

use crate::{exclusive, shared};

fn ns_exists(name: &str) -> bool {
    netns::list_namespaces(netns::NS_PREFIX)
        .iter()
        .any(|n| n == name)
}

#[test]
fn kernel_answers_arp_and_nd_between_namespaces() {
    netns::require_root();
    let _g = shared();
    let pair = Pair::new("h-arp");

    assert_eq!(netns::mac_of(&pair.node, NODE_IF), NODE_MAC);
    assert_eq!(netns::mac_of(&pair.client, CLIENT_IF), CLIENT_MAC);

    let r = tools::arping(&pair.client, CLIENT_IF, NODE_V4, 1, Duration::from_secs(1));
    assert_eq!(r.replies, 1, "arping output:\n{}\n{}", r.stdout, r.stderr);
    assert_eq!(r.macs, vec![NODE_MAC], "arping output:\n{}", r.stdout);

    let r = tools::arping_probe(&pair.client, CLIENT_IF, NODE_V4, 1, Duration::from_secs(1));
    assert_eq!(
        r.unique_macs(),
        vec![NODE_MAC],
        "arping -0 output:\n{}",
        r.stdout
    );

    // Nobody owns 10.77.0.9: no reply, and no panic.
    let r = tools::arping(
        &pair.client,
        CLIENT_IF,
        "10.77.0.9".parse().unwrap(),
        1,
        Duration::from_millis(300),
    );
    assert_eq!(r.replies, 0, "arping output:\n{}", r.stdout);

    let mac = tools::ndisc6(&pair.client, NODE_V6, CLIENT_IF, Duration::from_secs(1));
    assert_eq!(mac, Some(NODE_MAC));
    let none = tools::ndisc6(
        &pair.client,
        "fd77::9".parse().unwrap(),
        CLIENT_IF,
        Duration::from_millis(300),
    );
    assert_eq!(none, None);

    tools::neigh_flush(&pair.client, CLIENT_IF);
    tools::neigh_flush(&pair.node, NODE_IF);
}

#[test]
fn enter_and_nsenter_see_the_namespace() {
    netns::require_root();
    let _g = shared();
    let pair = Pair::new("h-enter");
    let want = netns::ifindex_of(&pair.node, NODE_IF);

    let (idx, ns_link) = pair.node.enter(|| {
        let idx = nix::net::if_::if_nametoindex(NODE_IF).expect("if_nametoindex in netns");
        let link = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        (idx, link)
    });
    assert_eq!(idx, want);
    let host_link = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
    assert_ne!(ns_link, host_link, "enter() must run in another netns");

    // Panics inside enter() propagate with their message.
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        pair.client.enter(|| panic!("boom-inside"))
    }))
    .unwrap_err();
    assert_eq!(err.downcast_ref::<&str>(), Some(&"boom-inside"));

    // nsenter keeps the host mount namespace: same mnt ns, different net ns.
    let out = pair
        .node
        .nsenter_cmd("readlink")
        .args(["/proc/self/ns/net", "/proc/self/ns/mnt"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], ns_link.to_string_lossy());
    assert_eq!(
        lines[1],
        std::fs::read_link("/proc/self/ns/mnt")
            .unwrap()
            .to_string_lossy()
    );

    let addrs = pair.node.run(&["ip", "-o", "addr", "show", "dev", NODE_IF]);
    assert!(
        addrs.contains("10.77.0.1/24") && addrs.contains("fd77::1/64"),
        "{addrs}"
    );
    let sysctl = pair
        .node
        .run(&["sysctl", "-n", "net.ipv4.conf.all.arp_ignore"]);
    assert_eq!(sysctl.trim(), "1");
}

#[test]
fn namespaces_are_removed_on_drop_and_on_panic() {
    netns::require_root();
    let _g = exclusive();

    let pair = Pair::new("h-drop");
    let names = pair.names();
    assert!(names.iter().all(|n| ns_exists(n)));
    drop(pair);
    assert!(names.iter().all(|n| !ns_exists(n)), "{names:?} still exist");

    let mut names = Vec::new();
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let pair = Pair::new("h-panic");
        names.extend(pair.names());
        panic!("simulated test failure");
    }));
    assert!(res.is_err());
    assert_eq!(names.len(), 2);
    assert!(
        names.iter().all(|n| !ns_exists(n)),
        "{names:?} survived a panic"
    );

    let left = netns::namespaces_of_this_process();
    assert!(left.is_empty(), "leftover namespaces of this pid: {left:?}");
}

#[test]
fn sweep_removes_namespaces_of_dead_processes_only() {
    netns::require_root();
    let _g = shared();
    let live = Netns::new("h-live");

    // A pid that has exited: spawn and reap `true`.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = format!("{}h-stale-{dead}-1-0", netns::NS_PREFIX);
    let out = Command::new("ip")
        .args(["netns", "add", &stale])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let removed = netns::sweep_stale(netns::NS_PREFIX);
    let still = ns_exists(&stale);
    if still {
        // Never leave it behind, even if the assertion below fails.
        let _ = Command::new("ip").args(["netns", "del", &stale]).status();
    }
    assert!(
        !still && removed.contains(&stale),
        "stale ns not swept: {removed:?}"
    );
    assert!(ns_exists(live.name()), "sweep removed a live namespace");
}

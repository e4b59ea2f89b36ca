//! The unreachable report (issue 28, the agents' side), on the real kernel: three testbed
//! nodes ([`Testbed`]) with their real agents and XDP programs, each agent writing the peers
//! it has proven unreachable in `announcer.dev/unreachable` on its own node Lease. A node is
//! listed only when its heartbeats, its data plane and its *kernel* (ARP for its InternalIP)
//! are all silent, and never by a blind observer. Each test fails if a healthy node is listed,
//! or a crashed one is not. Needs root; never skips.
//!
//! Waits are generous (10 s where the agents take well under a second): speed is for the
//! benches; here a loaded host must not fail a test.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    time::{Duration, Instant},
};

use announcer::withdraw::{Report, UNREACHABLE_ANNOTATION};
use announcer_tests::env::{
    cluster::rendezvous_owner,
    lan::{HEARTBEAT_PORT, Testbed, TestbedConfig, vip4},
};
use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, api::ListParams};

/// Agents start, attach, warm up and converge in a few seconds on a loaded host.
const T: Duration = Duration::from_secs(30);
/// How long to wait for a report the agents make in well under a second.
const REPORTED: Duration = Duration::from_secs(10);
/// How long "never listed" is watched.
const WATCH: Duration = Duration::from_secs(10);

/// Every node Lease's report, by its holder (an absent annotation is an empty report).
fn reports(tb: &Testbed) -> BTreeMap<String, Report> {
    let client = tb.kube();
    tb.block_on(async move {
        let leases: Api<Lease> = Api::all(client);
        let list = leases
            .list(&ListParams::default().labels("announcer.dev/lease=node"))
            .await
            .expect("list the node Leases");
        list.items
            .into_iter()
            .filter_map(|l| {
                let holder = l.spec?.holder_identity?;
                let value = l
                    .metadata
                    .annotations
                    .and_then(|a| a.get(UNREACHABLE_ANNOTATION).cloned())
                    .unwrap_or_default();
                let report = value
                    .parse::<Report>()
                    .unwrap_or_else(|e| panic!("{holder}'s report {value:?}: {e}"));
                Some((holder, report))
            })
            .collect()
    })
}

/// Who `observer` lists right now.
fn listed_by(tb: &Testbed, observer: &str) -> Vec<String> {
    reports(tb)
        .remove(observer)
        .map(|r| r.unreachable.iter().map(ToString::to_string).collect())
        .unwrap_or_default()
}

/// Every report that lists somebody, as `observer: listed`.
fn any_listing(tb: &Testbed) -> Vec<String> {
    reports(tb)
        .into_iter()
        .filter(|(_, r)| !r.is_empty())
        .map(|(n, r)| format!("{n}: {r}"))
        .collect()
}

/// Three nodes, one VIP, the agents settled (the VIP on its rendezvous owner). Returns the
/// testbed, the VIP's owner and the two other nodes.
async fn settled(tag: &str) -> (Testbed, String, Vec<String>) {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: tag.into(),
        ..Default::default()
    })
    .await;
    let vip = IpAddr::V4(vip4(28));
    let nodes = tb.nodes();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let owner = rendezvous_owner(&vip.to_string(), &names);
    tb.add_service("web", &[vip], false, &names).await;
    tb.start_agents(&[]);
    assert_eq!(
        tb.wait_owner(vip, T),
        owner,
        "the VIP on its rendezvous owner"
    );
    tb.wait_for("every agent ready", T, Testbed::all_ready);
    let others = nodes.iter().filter(|n| **n != owner).cloned().collect();
    (tb, owner, others)
}

/// Watches every report for `how_long`: panics naming the first that lists anybody.
fn assert_nobody_listed_for(tb: &Testbed, how_long: Duration, why: &str) {
    let end = Instant::now() + how_long;
    while Instant::now() < end {
        let listing = any_listing(tb);
        assert!(listing.is_empty(), "{why}, but: {listing:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Drops the agents' heartbeats on `node` (nftables, in its namespace): nothing reaches its
/// heartbeat port.
fn block_heartbeats(tb: &Testbed, node: &str) {
    let ns = tb.node_ns(node);
    ns.run(&["nft", "add", "table", "inet", "blackout"]);
    ns.run(&[
        "nft",
        "add chain inet blackout input { type filter hook input priority 0 ; }",
    ]);
    ns.run(&[
        "nft",
        &format!("add rule inet blackout input udp dport {HEARTBEAT_PORT} drop"),
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_is_listed_by_both_surviving_peers() {
    let (mut tb, owner, others) = settled("unreach-crash").await;
    let crashed = Instant::now();
    tb.crash(&owner);
    for o in &others {
        tb.wait_for(&format!("{o} lists {owner}"), REPORTED, |tb| {
            listed_by(tb, o) == [owner.clone()]
        });
        // For the record (not a target): crash to the report as the API serves it.
        eprintln!("{o} lists {owner} {:?} after the crash", crashed.elapsed());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_whose_link_comes_back_is_unlisted_by_its_kernels_answer() {
    let (mut tb, owner, others) = settled("unreach-back").await;
    tb.crash(&owner);
    for o in &others {
        tb.wait_for(&format!("{o} lists {owner}"), REPORTED, |tb| {
            listed_by(tb, o) == [owner.clone()]
        });
    }
    // Its agent stays down: only its kernel answers, and that is enough.
    tb.revive(&owner);
    tb.wait_for("nobody listed once its link is back", REPORTED, |tb| {
        any_listing(tb).is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_again_and_again_on_a_live_node_is_never_listed() {
    let (mut tb, _owner, others) = settled("unreach-crashloop").await;
    // A node that owns no VIP: its XDP program has nothing to answer, so only its kernel's
    // answer keeps it off the reports.
    let victim = others[0].clone();
    let end = Instant::now() + WATCH;
    while Instant::now() < end {
        tb.kill_agent(&victim);
        // Down for well past the peers' `dead_after` and their three probe rounds.
        let down = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < down {
            let listing = any_listing(&tb);
            assert!(
                listing.is_empty(),
                "{victim}'s agent is down but its node is alive, yet: {listing:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        tb.restart_agent(&victim);
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_nobody_listed_for(&tb, Duration::from_secs(1), "the node never died");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_heartbeat_port_blocked_on_every_node_nobody_is_listed() {
    let (tb, _owner, _others) = settled("unreach-blackout").await;
    for n in tb.nodes() {
        block_heartbeats(&tb, &n);
    }
    assert_nobody_listed_for(&tb, WATCH, "every node is alive (only heartbeats are lost)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_whose_link_is_down_lists_nobody() {
    let (tb, owner, others) = settled("unreach-blind").await;
    // Not the VIP's owner, so that the VIP stays put; its agent keeps running.
    let observer = others[0].clone();
    tb.link_down(&observer);
    // Its peers, who see its kernel silent, list it: the fault is real.
    for o in others.iter().filter(|o| **o != observer).chain([&owner]) {
        tb.wait_for(&format!("{o} lists {observer}"), REPORTED, |tb| {
            listed_by(tb, o) == [observer.clone()]
        });
    }
    std::thread::sleep(Duration::from_secs(3));
    tb.link_up(&observer);
    // Back on the LAN its agent writes its Lease again: it must not have listed anybody
    // while it saw nothing.
    let end = Instant::now() + WATCH;
    while Instant::now() < end {
        let listed = listed_by(&tb, &observer);
        assert!(
            listed.is_empty(),
            "{observer} saw nobody with its link down, yet listed {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    tb.wait_for("its peers unlist it", REPORTED, |tb| {
        any_listing(tb).is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn survivors_count_the_peers_they_list_and_their_kernel_probes() {
    let (mut tb, owner, others) = settled("unreach-metrics").await;
    for o in &others {
        assert_eq!(tb.metric(o, "announcer_unreachable_peers"), Some(0.0));
    }
    tb.crash(&owner);
    for o in &others {
        tb.wait_for(&format!("{o} counts {owner} listed"), REPORTED, |tb| {
            tb.metric(o, "announcer_unreachable_peers") == Some(1.0)
        });
        let sent = tb
            .metric(o, "announcer_kernel_probes_sent_total")
            .unwrap_or_default();
        assert!(
            sent >= 3.0,
            "{o} sent {sent} kernel probes, expected 3 rounds"
        );
        // (Answers are not asserted: on a loaded host a late heartbeat may get a live peer
        // asked, and answered, before the crash.)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unreplied_flows_towards_a_listed_nodes_endpoints_are_swept_on_its_peers() {
    let (mut tb, owner, others) = settled("unreach-flows").await;
    let observer = others[0].clone();
    // The Service's endpoint on the owner is its node address (a host-network Pod's).
    let dead = tb.node_ip4(&owner);
    tb.crash(&owner);
    tb.wait_for(&format!("{observer} lists {owner}"), REPORTED, |tb| {
        listed_by(tb, &observer) == [owner.clone()]
    });
    // kube-proxy's DNAT on the observer, still sending a Service's connections to the dead
    // endpoint, and a connection through it that is never answered (a `SYN_SENT` entry).
    let ns = tb.node_ns(&observer);
    ns.ip(&["route", "add", "10.99.0.1/32", "dev", "eth0"]);
    ns.run(&["nft", "add", "table", "ip", "kp"]);
    ns.run(&[
        "nft",
        "add chain ip kp out { type nat hook output priority -100 ; }",
    ]);
    ns.run(&[
        "nft",
        &format!("add rule ip kp out ip daddr 10.99.0.1 tcp dport 80 dnat to {dead}:80"),
    ]);
    let connected = ns.enter(|| {
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([10, 99, 0, 1], 80)),
            Duration::from_millis(200),
        )
        .is_ok()
    });
    assert!(!connected, "the dead endpoint answered");
    tb.wait_for(&format!("{observer} swept the flow"), REPORTED, |tb| {
        tb.metric(&observer, "announcer_stale_flows_deleted_total")
            .is_some_and(|n| n >= 1.0)
    });
    let left = ns.enter(|| {
        announcer::agent::net::conntrack::Conntrack::open()
            .expect("ctnetlink")
            .delete_unreplied_tcp(IpAddr::V4(dead))
            .expect("a sweep")
    });
    assert_eq!(left.deleted, 0, "an unreplied flow was left: {left:?}");
}

//! Another XDP program on a node's interface (issue 27, item 2), on the real kernel: the
//! testbed's nodes ([`Testbed`]), one of which has a foreign XDP program on `eth0` before its
//! agent starts (the announcer's own object, loaded un-pinned by this test, as a CNI's
//! acceleration would sit there). The kernel runs one XDP program per interface, so that
//! node's agent cannot attach: it must say so (a Warning Event on its Node naming the other
//! program, `announcer_dataplane_up` at 0), never replace it, stay ready (a DaemonSet roll
//! must not stall on it), and not be ranked for the VIP by any node, so that the VIP is
//! answered by another node instead of going dark. Once the foreign program is removed, the
//! agent's retry attaches and the node is a candidate again. Needs root; never skips.
//!
//! The last test takes the other path to the same failure: an interface the agent attaches to
//! only when a VIP first lands on it (`eth1`, allowed by a glob), so the node has already won
//! the VIP when its map write fails. It must give the VIP up to a node that can answer it, and
//! never have said `Announced` for it.

use std::{net::IpAddr, time::Duration};

use announcer::state::announced::{self, CONDITION_TYPE};
use announcer_ebpf::maps::PROGRAM;
use announcer_tests::{
    cli::ForeignXdp,
    env::{
        cluster::rendezvous_owner,
        lan::{AGENT_HTTP_PORT, IFACE2, Testbed, TestbedConfig, metric_sum, nic2_vip4, vip4},
    },
};
use k8s_openapi::api::{core::v1::Service, events::v1::Event};
use kube::Api;

use crate::world::SHORT_LEASE;

/// Generous: agents start, attach, warm up and converge in a few seconds on a loaded host.
const T: Duration = Duration::from_secs(30);
/// How long "never the owner" must hold once the others have settled.
const HOLD: Duration = Duration::from_secs(3);

/// `GET path` on `node`'s agent: its status code (`None` if it does not answer).
fn http_status(tb: &Testbed, node: &str, path: &str) -> Option<u16> {
    tb.node_ns(node).enter(|| {
        match ureq::get(&format!("http://127.0.0.1:{AGENT_HTTP_PORT}{path}"))
            .timeout(Duration::from_secs(2))
            .call()
        {
            Ok(r) => Some(r.status()),
            Err(ureq::Error::Status(code, _)) => Some(code),
            Err(_) => None,
        }
    })
}

/// `announcer_dataplane_up` of `node`'s agent (its one series: the testbed's nodes announce
/// on `eth0` only).
fn dataplane_up(tb: &Testbed, node: &str) -> Option<f64> {
    metric_sum(&tb.metrics(node)?, "announcer_dataplane_up")
}

/// An Event on Node `node` with this type and reason.
fn node_event(node: &str, type_: &'static str, reason: &'static str) -> impl Fn(&Event) -> bool {
    let node = node.to_owned();
    move |e| {
        e.type_.as_deref() == Some(type_)
            && e.reason.as_deref() == Some(reason)
            && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("Node")
            && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node.as_str())
    }
}

/// Three nodes, Service `web` with one VIP; a foreign XDP program on `eth0` of the VIP's
/// rendezvous owner, then the agents. Returns the testbed, the VIP, that node, the node that
/// must answer instead, and the foreign program.
async fn owner_with_foreign_program(tag: &str) -> (Testbed, IpAddr, String, String, ForeignXdp) {
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: tag.into(),
        ..Default::default()
    })
    .await;
    let vip = IpAddr::V4(vip4(27));
    let nodes = tb.nodes();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let top = rendezvous_owner(&vip.to_string(), &names);
    let rest: Vec<&str> = names.iter().copied().filter(|n| *n != top).collect();
    let next = rendezvous_owner(&vip.to_string(), &rest);
    let foreign = ForeignXdp::attach(tb.node_ns(&top), "eth0");
    tb.add_service("web", &[vip], false, &names).await;
    tb.start_agents(&SHORT_LEASE);
    (tb, vip, top, next, foreign)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_xdp_program_on_its_interface_never_owns_the_vip_and_says_why() {
    let (tb, vip, top, next, foreign) = owner_with_foreign_program("foreign-xdp").await;
    assert_eq!(
        tb.wait_owner(vip, T),
        next,
        "the VIP goes to the next node, not to {top} whose data plane is down"
    );
    tb.wait_for(
        &format!("the client's traffic to {vip} reaching {next}"),
        T,
        |tb| tb.ask(vip, Duration::from_millis(800)).as_deref() == Some(next.as_str()),
    );
    assert_eq!(
        tb.arp_nodes(vip, Duration::from_millis(800)),
        std::slice::from_ref(&next),
        "ARP for {vip} is answered by {next} alone"
    );
    let end = std::time::Instant::now() + HOLD;
    while std::time::Instant::now() < end {
        assert_eq!(
            tb.owners(vip),
            std::slice::from_ref(&next),
            "{top} owned {vip}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Said on the Node, naming the other program and the ways out.
    let e = tb
        .wait_for_event(
            &format!("a DataplaneDown Warning on Node {top}"),
            T,
            node_event(&top, "Warning", "DataplaneDown"),
        )
        .await;
    let note = e.note.unwrap_or_default();
    for part in [
        format!("id {}", foreign.id),
        format!("{PROGRAM:?}"),
        "eth0".to_owned(),
        "xdp off".to_owned(),
        "another interface".to_owned(),
    ] {
        assert!(note.contains(&part), "the Event says {part:?}: {note}");
    }
    assert_eq!(
        dataplane_up(&tb, &top),
        Some(0.0),
        "announcer_dataplane_up on {top}"
    );
    assert!(
        tb.metric(&top, "announcer_dataplane_attach_failures_total")
            .is_some_and(|n| n >= 1.0),
        "announcer_dataplane_attach_failures_total on {top}"
    );
    assert_eq!(
        dataplane_up(&tb, &next),
        Some(1.0),
        "announcer_dataplane_up on {next}"
    );
    assert_eq!(
        http_status(&tb, &top, "/readyz"),
        Some(200),
        "{top}'s agent stays ready"
    );
    // Never replaced: the foreign program is still the one attached.
    let attached = tb.node_ns(&top).enter(|| {
        let ix = nix::net::if_::if_nametoindex("eth0").expect("eth0");
        announcer::dataplane::sys::xdp_query::attached(ix).expect("query")
    });
    assert_eq!(
        attached.map(|p| p.id),
        Some(foreign.id),
        "the foreign program was replaced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_becomes_a_candidate_again_once_the_other_xdp_program_is_removed() {
    let (tb, vip, top, next, foreign) = owner_with_foreign_program("foreign-xdp-gone").await;
    assert_eq!(tb.wait_owner(vip, T), next);
    drop(foreign);
    tb.wait_for(
        &format!("{top}, the rendezvous owner, owning {vip} again"),
        T,
        |tb| tb.owners(vip) == std::slice::from_ref(&top),
    );
    tb.wait_for(
        &format!("the client's traffic to {vip} reaching {top}"),
        T,
        |tb| tb.ask(vip, Duration::from_millis(800)).as_deref() == Some(top.as_str()),
    );
    assert_eq!(
        dataplane_up(&tb, &top),
        Some(1.0),
        "announcer_dataplane_up on {top}"
    );
    tb.wait_for_event(
        &format!("a DataplaneUp Event on Node {top}"),
        T,
        node_event(&top, "Normal", "DataplaneUp"),
    )
    .await;
}

/// The `Announced` condition of Service `web`: its entries as "ip node".
async fn announced_entries(tb: &Testbed) -> Vec<String> {
    let svc = Api::<Service>::namespaced(tb.kube(), "default")
        .get("web")
        .await
        .expect("Service web");
    svc.status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .filter(|c| c.type_ == CONDITION_TYPE)
        .flat_map(|c| announced::parse(&c.message))
        .map(|e| format!("{} {}", e.ip, e.node))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vip_whose_map_write_fails_moves_to_a_node_that_answers_it_and_is_never_announced_there()
{
    let mut tb = Testbed::start(TestbedConfig {
        nodes: 3,
        tag: "foreign-xdp-lazy".into(),
        ..Default::default()
    })
    .await;
    tb.add_second_nic();
    let vip = IpAddr::V4(nic2_vip4(27));
    let nodes = tb.nodes();
    let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let top = rendezvous_owner(&vip.to_string(), &names);
    let rest: Vec<&str> = names.iter().copied().filter(|n| *n != top).collect();
    let next = rendezvous_owner(&vip.to_string(), &rest);
    let _foreign = ForeignXdp::attach(tb.node_ns(&top), IFACE2);
    tb.add_service("web", &[vip], false, &names).await;
    // A glob: `eth1` is attached to only when a VIP lands on it, not at start.
    let mut args = SHORT_LEASE.to_vec();
    args.extend(["--interface", "eth*"]);
    tb.start_agents(&args);
    // Watched from the start: the condition must never name the node that cannot answer.
    let want = vec![format!("{vip} {next}")];
    let mut named_top = Vec::new();
    let end = std::time::Instant::now() + T;
    loop {
        let got = announced_entries(&tb).await;
        if got.iter().any(|e| e.ends_with(&format!(" {top}"))) {
            named_top.push(got.clone());
        }
        if got == want && tb.owners(vip) == std::slice::from_ref(&next) {
            break;
        }
        assert!(
            std::time::Instant::now() < end,
            "the Announced condition says {got:?} and /state says {:?} own {vip}; wanted {next}\n{}",
            tb.owners(vip),
            tb.log_tails()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        named_top.is_empty(),
        "the Announced condition named {top}, whose map write failed: {named_top:?}"
    );
    tb.wait_for(
        &format!("the client's traffic to {vip} reaching {next}"),
        T,
        |tb| tb.ask(vip, Duration::from_millis(800)).as_deref() == Some(next.as_str()),
    );
}

//! Probing a node's data plane (needs root): the XDP responder runs on the node end of a veth
//! pair, the prober on the client end asks it, by unicast ARP and Neighbor Solicitation,
//! whether it still answers for a VIP.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::Duration,
};

use announcer::{
    agent::probe::{Answer, Prober},
    wire::MacAddr,
};
use announcer_tests::{
    cli::Cli,
    netns::{CLIENT_IF, CLIENT_MAC, CLIENT_V4, NODE_IF, NODE_MAC, Netns, Pair, ifindex_of},
};
use tokio::sync::{mpsc, oneshot};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
const NODE: MacAddr = MacAddr(NODE_MAC);
const ELSEWHERE: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x99]);
/// How long to wait for an answer that should come (returned as soon as it does).
const ANSWERED: Duration = Duration::from_secs(3);
/// How long silence has to last to count as no answer.
const SILENCE: Duration = Duration::from_millis(500);

/// The client's link-local address on its end of the veth.
fn link_local(ns: &Netns, ifname: &str) -> Ipv6Addr {
    let text = ns.ip(&["-j", "-6", "addr", "show", "dev", ifname, "scope", "link"]);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    // `ip -j` may list an empty object for addresses filtered out by the scope.
    json[0]["addr_info"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|a| a["local"].as_str())
        .unwrap_or_else(|| panic!("no link-local address on {ifname}: {text}"))
        .parse()
        .unwrap()
}

/// Runs `f` with a prober on the client's interface, inside the client namespace, on a
/// current-thread runtime.
fn with_prober<R: Send>(
    pair: &Pair,
    ipv4: Option<Ipv4Addr>,
    f: impl AsyncFnOnce(Prober) -> R + Send,
) -> R {
    let ifindex = ifindex_of(&pair.client, CLIENT_IF);
    let ll = link_local(&pair.client, CLIENT_IF);
    pair.client.enter(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let prober = Prober::open(ifindex, MacAddr(CLIENT_MAC), ipv4, Some(ll)).unwrap();
            f(prober).await
        })
    })
}

fn answered(pair: &Pair, vip: IpAddr, target: MacAddr) -> bool {
    let wait = if target == NODE { ANSWERED } else { SILENCE };
    with_prober(pair, Some(CLIENT_V4), async move |p: Prober| {
        p.probe(vip, target, wait).await.unwrap()
    })
}

fn responder_with_vips(pair: &Pair) -> Cli<'_> {
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    cli.add_vip(VIP6, NODE_IF, &["--permanent"]);
    cli
}

#[test]
fn the_owner_answers_and_nobody_else_does() {
    let pair = Pair::new("probe");
    let cli = responder_with_vips(&pair);

    assert!(answered(&pair, VIP4.into(), NODE), "ARP probe unanswered");
    assert!(answered(&pair, VIP6.into(), NODE), "NS probe unanswered");

    let not_in_map4 = Ipv4Addr::new(10, 77, 0, 99);
    let not_in_map6 = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x99);
    assert!(!answered(&pair, not_in_map4.into(), NODE));
    assert!(!answered(&pair, not_in_map6.into(), NODE));

    // Unicast to another MAC: the responder ignores it (and so does the node's kernel).
    assert!(!answered(&pair, VIP4.into(), ELSEWHERE));
    assert!(!answered(&pair, VIP6.into(), ELSEWHERE));

    assert!(cli.counter(NODE_IF, "arp_answered") >= 1);
    assert!(cli.counter(NODE_IF, "ns_answered") >= 1);

    for vip in [VIP4.to_string(), VIP6.to_string()] {
        cli.ok(&["vip", "del", &vip, "--iface", NODE_IF]);
    }
    assert!(
        !answered(&pair, VIP4.into(), NODE),
        "answered after vip del"
    );
    assert!(
        !answered(&pair, VIP6.into(), NODE),
        "answered after vip del"
    );
}

#[test]
fn answers_arrive_on_the_channel_for_the_election() {
    let pair = Pair::new("probe-chan");
    let _cli = responder_with_vips(&pair);

    // No IPv4 address of ours: the ARP probe goes out from 0.0.0.0 (RFC 5227 probe).
    let got = with_prober(&pair, None, async |p: Prober| {
        let (tx, mut rx) = mpsc::channel(8);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(p.listen().unwrap().forward(tx, async {
            let _ = stopped.await;
        }));
        p.send(VIP4.into(), NODE).unwrap();
        let first = rx.recv().await.unwrap();
        p.send(VIP6.into(), NODE).unwrap();
        let second = rx.recv().await.unwrap();
        stop.send(()).unwrap();
        task.await.unwrap().unwrap();
        [first, second]
    });
    assert_eq!(
        got,
        [
            Answer {
                vip: VIP4.into(),
                mac: NODE
            },
            Answer {
                vip: VIP6.into(),
                mac: NODE
            },
        ]
    );
}

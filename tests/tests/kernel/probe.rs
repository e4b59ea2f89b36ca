//! Probing a node's data plane (needs root): the XDP responder runs on the node end of a veth
//! pair, the prober on the client end asks it, by unicast ARP and Neighbor Solicitation,
//! whether it still answers for a VIP.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    sync::atomic::{AtomicBool, Ordering},
    time::Duration,
};

use announcer::{
    agent::net::probe::{Answer, ProbeKind, ProbeSource, Prober, Probes},
    election::IfaceName,
    wire::MacAddr,
};
use announcer_tests::{
    cli::Cli,
    frames,
    netns::{
        CLIENT_IF, CLIENT_MAC, CLIENT_V4, CLIENT_V6, Lan, LanHost, NODE_IF, NODE_MAC, NODE_V4,
        NODE_V6, Netns, Pair, ifindex_of,
    },
};
use tokio::sync::mpsc;

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
    with_prober_in(&pair.client, ipv4, f)
}

/// Runs `f` with a prober on `eth0` (MAC [`CLIENT_MAC`]) inside `ns`.
fn with_prober_in<R: Send>(
    ns: &Netns,
    ipv4: Option<Ipv4Addr>,
    f: impl AsyncFnOnce(Prober) -> R + Send,
) -> R {
    let ifindex = ifindex_of(ns, CLIENT_IF);
    let ll = link_local(ns, CLIENT_IF);
    ns.enter(move || {
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
    let _ns = crate::shared(); // see main.rs
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

/// Runs `f` with a [`Probes`] set (and its answer receiver) inside the client namespace, on
/// a current-thread runtime; `f` gets the interface index and our side of the link.
fn with_probes<R: Send>(
    ns: &Netns,
    ipv4: Option<Ipv4Addr>,
    f: impl AsyncFnOnce(Probes, mpsc::Receiver<Answer>, u32, ProbeSource) -> R + Send,
) -> R {
    let ifindex = ifindex_of(ns, CLIENT_IF);
    let src = ProbeSource {
        mac: MacAddr(CLIENT_MAC),
        ipv4,
        ipv6: Some(link_local(ns, CLIENT_IF)),
        vlan: None,
    };
    ns.enter(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let (probes, rx) = Probes::new(8);
            f(probes, rx, ifindex, src).await
        })
    })
}

#[test]
fn answers_arrive_on_the_channel_for_the_election_with_the_nonce_echoed() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("probe-chan");
    let _cli = responder_with_vips(&pair);

    // No IPv4 address of ours: the ARP probe goes out from 0.0.0.0 (RFC 5227 probe).
    let (got, stats) = with_probes(
        &pair.client,
        None,
        async |mut probes, mut rx, ifindex, src| {
            let iface = IfaceName::from(CLIENT_IF);
            probes
                .send(&iface, ifindex, src, VIP4.into(), NODE, ANSWERED)
                .unwrap();
            let first = rx.recv().await.unwrap();
            probes
                .send(&iface, ifindex, src, VIP6.into(), NODE, ANSWERED)
                .unwrap();
            let second = rx.recv().await.unwrap();
            assert_eq!(probes.in_flight(), 0, "an answered probe is forgotten");
            ([first, second], probes.stats().snapshot())
        },
    );
    assert_eq!(
        got,
        [
            Answer {
                vip: VIP4.into(),
                mac: NODE,
                kind: ProbeKind::DataPlane,
            },
            Answer {
                vip: VIP6.into(),
                mac: NODE,
                kind: ProbeKind::DataPlane,
            },
        ]
    );
    // Only an answer carrying the probe's nonce is accepted: the responder echoed it, for
    // ARP (in the padding) and NS (in a Nonce option).
    assert_eq!(stats.answers_accepted, 2);
    assert_eq!(stats.dropped_bad_nonce, 0, "{stats:?}");
}

const SPOOFER: LanHost = LanHost {
    mac: [0x02, 0, 0, 0, 0, 0x03],
    v4: Ipv4Addr::new(10, 77, 0, 3),
    v6: Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 3),
};
const PROBER: LanHost = LanHost {
    mac: CLIENT_MAC,
    v4: CLIENT_V4,
    v6: CLIENT_V6,
};

/// Sends forged "VIP is-at NODE" ARP replies and NAs to the prober (`to_ll` its link-local
/// address) from inside `ns`, one pair every `every`, until `stop` or `max` pairs; each
/// carries 8 random bytes where the nonce sits (a blind guess at it). Returns the pairs sent.
fn spoof(ns: &Netns, to_ll: Ipv6Addr, every: Duration, max: usize, stop: &AtomicBool) -> usize {
    let ifindex = ifindex_of(ns, "eth0");
    ns.enter(|| {
        let sock = announcer::dataplane::announce::PacketSocket::open(ifindex).unwrap();
        let mut sent = 0;
        while sent < max && !stop.load(Ordering::Relaxed) {
            let arp = frames::forged_arp_reply(NODE, VIP4, PROBER_MAC, CLIENT_V4, rand::random());
            let na = frames::forged_na(NODE, VIP6, PROBER_MAC, to_ll, rand::random());
            // A full send buffer (EAGAIN) just means: try again.
            while sock.send(&arp).is_err() || sock.send(&na).is_err() {
                std::thread::yield_now();
            }
            sent += 1;
            if !every.is_zero() {
                std::thread::sleep(every);
            }
        }
        sent
    })
}

const PROBER_MAC: MacAddr = MacAddr(CLIENT_MAC);

const OWNER: LanHost = LanHost {
    mac: NODE_MAC,
    v4: Ipv4Addr::new(10, 77, 0, 2),
    v6: Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 2),
};

#[test]
fn an_ns_probe_across_a_bridge_that_trims_ipv6_frames_is_answered() {
    let _ns = crate::shared(); // see main.rs
    // Prober and owner on a Linux bridge with br_netfilter's IPv6 hook on (the default once the
    // module is loaded, and what many Kubernetes nodes and hypervisors run), which trims every
    // IPv6 frame to its payload length: a nonce after the payload would never arrive.
    let lan = Lan::new("trim", &[PROBER, OWNER]);
    lan.bridge
        .sysctl("net.bridge.bridge-nf-call-ip6tables", "1");
    let owner = Cli::new(&lan.hosts[1]);
    owner.load("eth0", "generic");
    owner.add_vip(VIP4, "eth0", &["--permanent"]);
    owner.add_vip(VIP6, "eth0", &["--permanent"]);
    let (answered, stats) =
        with_prober_in(&lan.hosts[0], Some(CLIENT_V4), async move |p: Prober| {
            let answered = [
                p.probe(VIP4.into(), NODE, ANSWERED).await.unwrap(),
                p.probe(VIP6.into(), NODE, ANSWERED).await.unwrap(),
            ];
            (answered, p.stats())
        });
    assert_eq!(answered, [true, true], "{stats:?}");
    assert_eq!(stats.dropped_bad_nonce, 0, "{stats:?}");
}

#[test]
fn forged_replies_from_a_spoofer_do_not_answer_a_probe_of_a_dead_owner() {
    let _ns = crate::shared(); // see main.rs
    // The old owner (NODE) is gone from the segment; a third host sprays forged unicast
    // replies in its name at the prober every 5 ms.
    let lan = Lan::new("spoof", &[PROBER, SPOOFER]);
    let ll = link_local(&lan.hosts[0], "eth0");
    let stop = AtomicBool::new(false);
    let answered = std::thread::scope(|s| {
        let spoofer = s.spawn(|| {
            spoof(
                &lan.hosts[1],
                ll,
                Duration::from_millis(5),
                usize::MAX,
                &stop,
            )
        });
        std::thread::sleep(Duration::from_millis(50));
        let answered = with_prober_in(&lan.hosts[0], Some(CLIENT_V4), async move |p: Prober| {
            let answered = [
                p.probe(VIP4.into(), NODE, SILENCE).await.unwrap(),
                p.probe(VIP6.into(), NODE, SILENCE).await.unwrap(),
            ];
            let stats = p.stats();
            assert!(
                stats.dropped_bad_nonce > 0,
                "the forged replies reached the prober and were refused: {stats:?}"
            );
            assert_eq!(stats.answers_accepted, 0);
            answered
        });
        stop.store(true, Ordering::Relaxed);
        assert!(spoofer.join().unwrap() > 10, "the spoofer ran");
        answered
    });
    assert_eq!(
        answered,
        [false, false],
        "a forged reply counted as the answer"
    );
}

#[test]
fn a_flood_of_forged_replies_delivers_no_answer_to_the_channel() {
    let _ns = crate::shared(); // see main.rs
    // 100k forged replies (50k ARP, 50k NA) as fast as the spoofer can send, while the prober
    // keeps probes of the (absent) old owner in flight the whole time.
    let lan = Lan::new("flood", &[PROBER, SPOOFER]);
    let ll = link_local(&lan.hosts[0], "eth0");
    let stop = AtomicBool::new(false);
    let (delivered, stats, sent) = std::thread::scope(|s| {
        let spoofer = s.spawn(|| spoof(&lan.hosts[1], ll, Duration::ZERO, 50_000, &stop));
        let stop = &stop;
        let spoofer_done = || spoofer.is_finished();
        let (delivered, stats) = with_probes(
            &lan.hosts[0],
            Some(CLIENT_V4),
            async |mut probes, mut rx, ifindex, src| {
                let iface = IfaceName::from(CLIENT_IF);
                let window = Duration::from_millis(100);
                let mut delivered = 0;
                let give_up = std::time::Instant::now() + Duration::from_secs(60);
                while !spoofer_done() && std::time::Instant::now() < give_up {
                    probes
                        .send(&iface, ifindex, src, VIP4.into(), NODE, window)
                        .unwrap();
                    probes
                        .send(&iface, ifindex, src, VIP6.into(), NODE, window)
                        .unwrap();
                    let wait = tokio::time::sleep(Duration::from_millis(20));
                    tokio::pin!(wait);
                    loop {
                        tokio::select! {
                            Some(_) = rx.recv() => delivered += 1,
                            () = &mut wait => break,
                        }
                    }
                }
                stop.store(true, Ordering::Relaxed);
                // What is still queued in the socket.
                let drain = tokio::time::sleep(SILENCE);
                tokio::pin!(drain);
                loop {
                    tokio::select! {
                        Some(_) = rx.recv() => delivered += 1,
                        () = &mut drain => break,
                    }
                }
                (delivered, probes.stats().snapshot())
            },
        );
        (delivered, stats, spoofer.join().unwrap())
    });
    eprintln!("flood: {sent} pairs sent, {delivered} answers delivered, {stats:?}");
    assert_eq!(sent, 50_000, "the spoofer sent all its pairs");
    assert_eq!(
        delivered, 0,
        "forged answers reached the election: {stats:?}"
    );
    assert_eq!(stats.answers_accepted, 0);
    assert!(
        stats.dropped_bad_nonce + stats.dropped_no_probe > 1000,
        "the flood reached the userspace check: {stats:?}"
    );
}

/// Kernel probes (the unreachable report's rule 3): a broadcast ARP request and a
/// solicited-node NS for the node's own address, answered by its kernel (no nonce), with and
/// without our XDP responder on the node's interface; an address nobody holds stays silent.
#[test]
fn a_nodes_kernel_answers_kernel_probes_for_its_own_address() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("probe-kernel");
    let ask = |ip: IpAddr| {
        with_probes(
            &pair.client,
            Some(CLIENT_V4),
            async move |mut probes, mut rx, ifindex, src| {
                let iface = IfaceName::from(CLIENT_IF);
                probes
                    .send_kernel(&iface, ifindex, src, ip, None, ANSWERED)
                    .unwrap();
                let wait = if ip == IpAddr::from(NODE_V4) || ip == IpAddr::from(NODE_V6) {
                    ANSWERED
                } else {
                    SILENCE
                };
                tokio::time::timeout(wait, rx.recv()).await.ok().flatten()
            },
        )
    };
    let kernel = |ip: IpAddr| {
        Some(Answer {
            vip: ip,
            mac: NODE,
            kind: ProbeKind::Kernel,
        })
    };
    for ip in [IpAddr::from(NODE_V4), IpAddr::from(NODE_V6)] {
        assert_eq!(ask(ip), kernel(ip), "no XDP program: the kernel answers");
    }
    let _cli = responder_with_vips(&pair);
    for ip in [IpAddr::from(NODE_V4), IpAddr::from(NODE_V6)] {
        assert_eq!(
            ask(ip),
            kernel(ip),
            "our XDP program passes them to the kernel"
        );
    }
    let nobody4 = Ipv4Addr::new(10, 77, 0, 77);
    let nobody6 = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x77);
    for ip in [IpAddr::from(nobody4), IpAddr::from(nobody6)] {
        assert_eq!(ask(ip), None, "nobody holds {ip}");
    }
}

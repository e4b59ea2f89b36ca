//! Periodic gratuitous ARP / unsolicited NA while owning (`announcement.refreshInterval`), seen
//! as a neighbour on the LAN would: a real agent owns a VIP on a node namespace (real XDP,
//! generic mode), and a sniffer on the client's end of the veth counts the gratuitous ARP
//! Announcements (RFC 5227 §3) or unsolicited Neighbor Advertisements (RFC 4861 §7.2.6) for the
//! VIP once the takeover burst is over. With the refresh on they keep coming, one round per
//! interval; with it off (the default) the segment stays silent. Needs root; never skips.

use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::{Duration, Instant},
};

use announcer_tests::{
    cli::Cli,
    env::{
        ApiKind,
        cluster::{owned_vips, state_at},
        node::{Proc, wait},
        packet::PacketSocket,
    },
    netns::{CLIENT_IF, NODE_MAC, Netns, Pair, require_root},
};

use crate::dataplane::{HTTP, NodeApi, start_node_agent_with, start_node_api};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
/// ETH_P_ARP.
const ARP: u16 = 0x0806;
/// ETH_P_IPV6.
const IPV6: u16 = 0x86dd;
/// How long the sniffer listens, after the takeover burst.
const LISTEN: Duration = Duration::from_secs(5);

/// What keeps the world up: the agent, the API server, the pins' cleanup.
type Owner<'a> = (Proc, NodeApi, Cli<'a>);

/// Starts node-a's agent on `pair` with a one-round takeover burst and `extra` flags; returns
/// once it owns `vip`.
async fn owner<'a>(pair: &'a Pair, tag: &str, vip: IpAddr, extra: &[&str]) -> Owner<'a> {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&pair.node);
    let api = start_node_api(ApiKind::InRepo, tag, &pair.node, &dir, &[vip]).await;
    let mut args = vec!["--burst-count", "1"];
    args.extend_from_slice(extra);
    let agent = start_node_agent_with(&pair.node, &cli, &dir, &args);
    let log = agent.log.clone();
    wait(
        "the agent to own the VIP",
        Duration::from_secs(20),
        &log,
        || {
            pair.node
                .enter(|| state_at(HTTP))
                .is_some_and(|s| s["dataplane"] == true && owned_vips(&s).contains(&vip))
        },
    );
    (agent, api, cli)
}

/// Whether frame `f` announces `vip` from the node's MAC: a gratuitous ARP (sender and target
/// address the VIP), or an unsolicited Neighbor Advertisement (ICMPv6 type 136, Solicited flag
/// clear, target the VIP).
fn announces(f: &[u8], vip: IpAddr) -> bool {
    match vip {
        IpAddr::V4(v) => {
            f.len() >= 42 && f[12..14] == ARP.to_be_bytes() && {
                let (sha, spa, tpa) = (&f[22..28], &f[28..32], &f[38..42]);
                sha == NODE_MAC && spa == v.octets() && tpa == v.octets()
            }
        }
        IpAddr::V6(v) => {
            f.len() >= 78
                && f[12..14] == IPV6.to_be_bytes()
                && f[6..12] == NODE_MAC
                && f[20] == 58 // ICMPv6, no extension header
                && f[54] == 136 // Neighbor Advertisement
                && f[58] & 0x40 == 0 // not Solicited
                && f[62..78] == v.octets()
        }
    }
}

/// Frames announcing `vip` from the node's MAC that the client sees in [`LISTEN`].
fn announcements_seen(client: &Netns, vip: IpAddr) -> usize {
    let proto = if vip.is_ipv4() { ARP } else { IPV6 };
    client.enter(|| {
        let sock = PacketSocket::open(CLIENT_IF, proto).expect("sniffer");
        sock.set_recv_timeout(Duration::from_millis(200))
            .expect("timeout");
        let end = Instant::now() + LISTEN;
        let mut buf = [0u8; 1514];
        let mut n = 0;
        while Instant::now() < end {
            let Ok(Some(len)) = sock.recv(&mut buf) else {
                continue;
            };
            if announces(&buf[..len], vip) {
                n += 1;
            }
        }
        n
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_re_announces_its_vip_every_refresh_interval() {
    require_root();
    let pair = Pair::new("ann-refresh-on");
    let _owner = owner(
        &pair,
        "ann-refresh-on",
        VIP.into(),
        &["--announce-refresh-interval", "1s"],
    )
    .await;
    let seen = announcements_seen(&pair.client, VIP.into());
    // One round a second (a round is one or two frames): at least 3 in 5 s, allowing for a
    // slow start of the cycle; and not a flood.
    assert!(
        (3..=12).contains(&seen),
        "{seen} gratuitous ARPs for {VIP} in {LISTEN:?} with a 1s refresh"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_is_silent_after_its_burst_without_a_refresh_interval() {
    require_root();
    let pair = Pair::new("ann-refresh-off");
    let _owner = owner(&pair, "ann-refresh-off", VIP.into(), &[]).await;
    // The one-round burst went out at the takeover; give it a moment to pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = announcements_seen(&pair.client, VIP.into());
    assert_eq!(seen, 0, "gratuitous ARPs for {VIP} with the refresh off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_re_sends_unsolicited_neighbor_advertisements_for_its_ipv6_vip_every_refresh_interval()
 {
    require_root();
    let pair = Pair::new("ann-refresh-6");
    let _owner = owner(
        &pair,
        "ann-refresh-6",
        VIP6.into(),
        &["--announce-refresh-interval", "1s"],
    )
    .await;
    let seen = announcements_seen(&pair.client, VIP6.into());
    assert!(
        (3..=12).contains(&seen),
        "{seen} unsolicited NAs for {VIP6} in {LISTEN:?} with a 1s refresh"
    );
}

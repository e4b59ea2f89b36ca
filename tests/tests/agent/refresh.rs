//! Periodic gratuitous ARP while owning (`announcement.refreshInterval`), seen as a neighbour
//! on the LAN would: a real agent owns a VIP on a node namespace (real XDP, generic mode), and
//! a sniffer on the client's end of the veth counts the gratuitous ARP Announcements for the
//! VIP once the takeover burst is over. With the refresh on they keep coming, one per interval;
//! with it off (the default) the segment stays silent. Needs root; never skips.

use std::{
    net::{IpAddr, Ipv4Addr},
    time::{Duration, Instant},
};

use announcer_tests::{
    cli::Cli,
    env::{
        ApiKind,
        agent_cmd::AgentCommand,
        cluster::{owned_vips, state_at},
        node::{Proc, wait},
        packet::PacketSocket,
    },
    netns::{CLIENT_IF, NODE_MAC, Netns, Pair, require_root},
};

use crate::dataplane::{HTTP, NodeApi, start_node_api};

const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
/// ETH_P_ARP.
const ARP: u16 = 0x0806;
/// How long the sniffer listens, after the takeover burst.
const LISTEN: Duration = Duration::from_secs(5);

/// What keeps the world up: the agent, the API server, the pins' cleanup.
type Owner<'a> = (Proc, NodeApi, Cli<'a>);

/// Starts node-a's agent on `pair` with a one-round takeover burst and `extra` flags; returns
/// once it owns [`VIP`].
async fn owner<'a>(pair: &'a Pair, tag: &str, extra: &[&str]) -> Owner<'a> {
    let dir = std::env::temp_dir().join(format!("{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let cli = Cli::new(&pair.node);
    let api = start_node_api(ApiKind::InRepo, tag, &pair.node, &dir, &[VIP.into()]).await;
    let log = dir.join("agent.log");
    let mut args = vec!["--burst-count", "1"];
    args.extend_from_slice(extra);
    let cmd = AgentCommand::new(
        "node-a",
        &dir.join("kubeconfig.node-a"),
        &dir.join("state-node-a"),
    )
    .pin_root(cli.root())
    .xdp_mode("generic")
    .http_address(format!("127.0.0.1:{HTTP}"))
    .extra(&args);
    let agent = Proc {
        child: cmd.spawn(Some(&pair.node), &log),
        log: log.clone(),
    };
    wait(
        "the agent to own the VIP",
        Duration::from_secs(20),
        &log,
        || {
            pair.node.enter(|| state_at(HTTP)).is_some_and(|s| {
                s["dataplane"] == true && owned_vips(&s).contains(&IpAddr::V4(VIP))
            })
        },
    );
    (agent, api, cli)
}

/// Gratuitous ARP frames for [`VIP`] from the node's MAC that the client sees in [`LISTEN`].
fn announcements_seen(client: &Netns) -> usize {
    client.enter(|| {
        let sock = PacketSocket::open(CLIENT_IF, ARP).expect("sniffer");
        sock.set_recv_timeout(Duration::from_millis(200))
            .expect("timeout");
        let end = Instant::now() + LISTEN;
        let mut buf = [0u8; 1514];
        let mut n = 0;
        while Instant::now() < end {
            let Ok(Some(len)) = sock.recv(&mut buf) else {
                continue;
            };
            let f = &buf[..len];
            if len < 42 || f[12..14] != ARP.to_be_bytes() {
                continue;
            }
            let (sha, spa, tpa) = (&f[22..28], &f[28..32], &f[38..42]);
            if sha == NODE_MAC && spa == VIP.octets() && tpa == VIP.octets() {
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
        &["--announce-refresh-interval", "1s"],
    )
    .await;
    let seen = announcements_seen(&pair.client);
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
    let _owner = owner(&pair, "ann-refresh-off", &[]).await;
    // The one-round burst went out at the takeover; give it a moment to pass.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = announcements_seen(&pair.client);
    assert_eq!(seen, 0, "gratuitous ARPs for {VIP} with the refresh off");
}

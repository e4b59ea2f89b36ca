//! Merging the maps with the agent's view, and the table an operator reads.

use std::path::Path;

use super::*;
use crate::state::OwnedVip;

fn map_row(vip: &str, answered: u64) -> VipRow {
    VipRow {
        vip: vip.parse().unwrap(),
        iface: "eth0".into(),
        vlan: 0,
        mac: Some("02:00:00:00:00:01".into()),
        live: true,
        expires_in_s: Some(4.5),
        permanent: false,
        answered,
        expired: 0,
        malformed: 0,
        owner: None,
        service: None,
        in_dataplane: true,
    }
}

fn eth0() -> InterfaceReport {
    InterfaceReport {
        iface: "eth0".into(),
        ifindex: 3,
        counters: [("arp_answered".to_string(), 7)].into(),
        vips: vec![map_row("192.0.2.1", 7), map_row("192.0.2.9", 0)],
    }
}

fn agent() -> AgentReport {
    let owned = |vip: &str, iface: &str| OwnedVip {
        vip: vip.parse().unwrap(),
        iface: iface.into(),
        service: Some("default/web".into()),
    };
    AgentReport {
        url: DEFAULT_AGENT.into(),
        reachable: true,
        error: None,
        state: Some(AgentState {
            node: "node-a".into(),
            election: "node-lease".into(),
            ready: true,
            dataplane: true,
            api_ok: true,
            standby: false,
            owned: vec![owned("192.0.2.1", "eth0"), owned("192.0.2.2", "eth1")].into(),
            peers: vec![
                PeerState {
                    node: "node-b".into(),
                    alive: true,
                    heartbeat_age_ms: Some(42),
                    lease_valid: true,
                    leaving: false,
                },
                PeerState {
                    node: "node-c".into(),
                    alive: false,
                    heartbeat_age_ms: None,
                    lease_valid: true,
                    leaving: false,
                },
            ],
            ..Default::default()
        }),
    }
}

#[test]
fn map_rows_get_the_agents_owner_and_owned_vips_missing_from_the_maps_get_rows() {
    let r = merge(
        Path::new("/sys/fs/bpf/announcer"),
        vec![eth0()],
        Some(agent()),
    );
    assert_eq!(r.node.as_deref(), Some("node-a"));
    let vips: Vec<(String, Option<&str>, bool)> = r
        .vips
        .iter()
        .map(|v| (v.vip.to_string(), v.owner.as_deref(), v.in_dataplane))
        .collect();
    assert_eq!(
        vips,
        vec![
            ("192.0.2.1".into(), Some("node-a"), true),
            // Owned on eth1, which has no data plane here.
            ("192.0.2.2".into(), Some("node-a"), false),
            // In the map but not the agent's (added by hand, or left to expire).
            ("192.0.2.9".into(), None, true),
        ]
    );
    assert_eq!(r.vips[0].service.as_deref(), Some("default/web"));
    assert_eq!(r.interfaces[0].vips[0].owner.as_deref(), Some("node-a"));
    assert_eq!(r.peers.len(), 2);
    assert!(!r.agent_unreachable());
}

#[test]
fn the_table_has_a_row_per_vip_and_per_peer() {
    let r = merge(
        Path::new("/sys/fs/bpf/announcer"),
        vec![eth0()],
        Some(agent()),
    );
    let t = render(&r);
    let row = |start: &str| {
        t.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start} row:\n{t}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row("192.0.2.1"),
        [
            "192.0.2.1",
            "eth0",
            "0",
            "02:00:00:00:00:01",
            "node-a",
            "default/web",
            "4.5s",
            "7",
            "0",
            "0"
        ]
    );
    assert_eq!(
        row("192.0.2.2"),
        [
            "192.0.2.2",
            "eth1",
            "0",
            "-",
            "node-a",
            "default/web",
            "-",
            "-",
            "-",
            "-"
        ]
    );
    assert_eq!(row("node-b"), ["node-b", "alive", "42ms", "valid", "no"]);
    assert_eq!(row("node-c"), ["node-c", "out", "never", "valid", "no"]);
    assert!(
        t.starts_with("agent: node node-a (node-lease, ready"),
        "{t}"
    );
}

#[test]
fn an_unreachable_agent_is_said_and_the_maps_still_shown() {
    let down = AgentReport {
        url: DEFAULT_AGENT.into(),
        reachable: false,
        error: Some("connection refused".into()),
        state: None,
    };
    let r = merge(Path::new("/sys/fs/bpf/announcer"), vec![eth0()], Some(down));
    assert!(r.agent_unreachable());
    assert_eq!(r.vips.len(), 2);
    assert!(r.vips.iter().all(|v| v.owner.is_none()));
    let t = render(&r);
    assert!(
        t.starts_with("agent: UNREACHABLE at http://127.0.0.1:9746 (connection refused)"),
        "{t}"
    );
    assert!(t.contains("192.0.2.9"), "{t}");
    // Not asked at all: no agent line.
    let r = merge(Path::new("/x"), vec![], None);
    assert_eq!(
        render(&r),
        "data plane: not loaded on any interface (pin root /x)\n"
    );
}

/// A report with a row of every kind: VIPs owned here, owned on an interface without a data
/// plane, added by hand, permanent on a VLAN, expired; peers alive, out, leaving.
fn every_kind_of_row() -> Report {
    let mut eth0 = eth0();
    let mut permanent = map_row("192.0.2.20", 123_456);
    permanent.permanent = true;
    permanent.expires_in_s = None;
    permanent.vlan = 100;
    let mut lapsed = map_row("198.51.100.7", 3);
    lapsed.expires_in_s = Some(-0.2);
    lapsed.expired = 12;
    lapsed.malformed = 1;
    eth0.vips.extend([permanent, lapsed]);
    let mut a = agent();
    if let Some(s) = a.state.as_mut() {
        s.peers.push(PeerState {
            node: "node-d".into(),
            alive: true,
            heartbeat_age_ms: Some(1_250),
            lease_valid: false,
            leaving: true,
        });
    }
    merge(Path::new("/sys/fs/bpf/announcer"), vec![eth0], Some(a))
}

/// [`every_kind_of_row`] as `announcer status` printed it when it padded columns by hand
/// (golden: byte for byte, trailing spaces included).
const TABLE: &str = concat!(
    "agent: node node-a (node-lease, ready, data plane, API ok), 2 VIPs owned, 0 takeovers, 0 handovers, 0 overlaps [http://127.0.0.1:9746]\n",
    "eth0 (ifindex 3): 4 VIPs; arp_answered=7\n",
    "\n",
    "VIP                          IFACE      VLAN MAC               OWNER            SERVICE                     EXPIRES  ANSWERED  EXPIRED MALFORMED\n",
    "192.0.2.1                    eth0          0 02:00:00:00:00:01 node-a           default/web                    4.5s         7        0         0\n",
    "192.0.2.2                    eth1          0 -                 node-a           default/web                       -         -        -         -\n",
    "192.0.2.9                    eth0          0 02:00:00:00:00:01 -                -                              4.5s         0        0         0\n",
    "192.0.2.20                   eth0        100 02:00:00:00:00:01 -                -                         permanent    123456        0         0\n",
    "198.51.100.7                 eth0          0 02:00:00:00:00:01 -                -                           EXPIRED         3       12         1\n",
    "\n",
    "PEER                             STATE     HEARTBEAT LEASE   LEAVING\n",
    "node-b                           alive          42ms valid   no     \n",
    "node-c                           out           never valid   no     \n",
    "node-d                           alive        1250ms expired yes    \n",
);

#[test]
fn the_table_of_ipv4_rows_prints_byte_for_byte_as_before() {
    assert_eq!(render(&every_kind_of_row()), TABLE);
}

#[test]
fn a_long_ipv6_vip_widens_its_column_and_every_row_stays_in_line() {
    const LONG: &str = "2001:db8:1234:5678:9abc:def0:1234:5678";
    let mut eth0 = eth0();
    eth0.vips.push(map_row(LONG, 5));
    let t = render(&merge(
        Path::new("/sys/fs/bpf/announcer"),
        vec![eth0],
        Some(agent()),
    ));
    let table: Vec<&str> = t
        .lines()
        .skip_while(|l| !l.starts_with("VIP "))
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(table.iter().any(|l| l.starts_with(LONG)), "{t}");
    // Each cell's (start, end) in its line; no cell here contains a space.
    let cells = |line: &str| -> Vec<(usize, usize)> {
        line.split(' ')
            .scan(0, |at, word| {
                let start = *at;
                *at += word.len() + 1;
                Some((start, start + word.len()))
            })
            .filter(|(start, end)| end > start)
            .collect()
    };
    // VIP IFACE VLAN MAC OWNER SERVICE EXPIRES ANSWERED EXPIRED MALFORMED
    let right_aligned = [
        false, false, true, false, false, false, true, true, true, true,
    ];
    let header = cells(table[0]);
    for row in &table[1..] {
        let row_cells = cells(row);
        assert_eq!(row_cells.len(), header.len(), "{row:?}");
        for ((h, c), right) in header.iter().zip(&row_cells).zip(right_aligned) {
            if right {
                assert_eq!(c.1, h.1, "a right-aligned cell ends under its header:\n{t}");
            } else {
                assert_eq!(
                    c.0, h.0,
                    "a left-aligned cell starts under its header:\n{t}"
                );
            }
        }
    }
}

/// An agent that refuses `/state` (asked from off the node: it serves it on loopback only)
/// says why, and the CLI passes that on instead of a bare status code.
#[test]
fn a_refused_state_request_says_why() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = conn.read(&mut buf);
        let body = "/state is served on loopback only: run `announcer status` on the node\n";
        let _ = write!(
            conn,
            "HTTP/1.1 403 Forbidden\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
    });
    let err = fetch_agent(&format!("http://{addr}")).unwrap_err();
    server.join().unwrap();
    assert!(err.contains("403"), "{err}");
    assert!(err.contains("loopback only"), "{err}");
}

//! The responder on real veths in network namespaces, driven through the `announcer` CLI and
//! checked with the tools an operator would use (`arping`, `ndisc6`, `ip link`).

use std::{
    net::{Ipv4Addr, Ipv6Addr},
    thread,
    time::Duration,
};

use announcer_tests::{
    cli::Cli,
    netns::{CLIENT_IF, NODE_IF, NODE_MAC, NODE_V4, NODE_V6, Pair},
    tools::{arping, arping_probe, capture, ndisc6, neigh_flush},
};

const VIP4: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
const VIP6: Ipv6Addr = Ipv6Addr::new(0xfd77, 0, 0, 0, 0, 0, 0, 0x100);
const T: Duration = Duration::from_millis(600);

fn xdp_mode(pair: &Pair) -> String {
    let out = pair.node.ip(&["-d", "link", "show", NODE_IF]);
    if out.contains("xdpgeneric") {
        "generic".into()
    } else if out.contains(" xdp ") || out.contains("xdp/id") || out.contains("prog/xdp") {
        "native".into()
    } else {
        "none".into()
    }
}

fn answers_in_mode(mode: &str) {
    let pair = Pair::new(&format!("resp-{mode}"));
    let cli = Cli::new(&pair.node);
    let peer = Cli::new(&pair.client);
    let out = cli.load(NODE_IF, mode);
    assert!(out.contains(&format!("in {mode} mode")), "{out}");
    if mode == "native" {
        // veth delivers native-mode XDP_TX only if the peer runs XDP too: the responder with no
        // VIPs passes everything, so load it on the client end.
        peer.load(CLIENT_IF, "native");
    }
    assert_eq!(xdp_mode(&pair), mode);
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    cli.add_vip(VIP6, NODE_IF, &["--permanent"]);

    let r = arping(&pair.client, CLIENT_IF, VIP4, 3, T);
    assert_eq!(
        r.replies, 3,
        "every ARP request for the VIP answered: {r:?}"
    );
    assert_eq!(r.unique_macs(), vec![NODE_MAC]);
    let probe = arping_probe(&pair.client, CLIENT_IF, VIP4, 1, T);
    assert_eq!(
        probe.unique_macs(),
        vec![NODE_MAC],
        "RFC 5227 probe answered"
    );
    assert_eq!(ndisc6(&pair.client, VIP6, CLIENT_IF, T), Some(NODE_MAC));

    // The kernel still answers for the node's own addresses (they pass through XDP).
    assert_eq!(
        arping(&pair.client, CLIENT_IF, NODE_V4, 1, T).unique_macs(),
        vec![NODE_MAC]
    );
    assert_eq!(ndisc6(&pair.client, NODE_V6, CLIENT_IF, T), Some(NODE_MAC));
    // Nobody answers for an address that is neither.
    assert_eq!(
        arping(&pair.client, CLIENT_IF, Ipv4Addr::new(10, 77, 0, 99), 1, T).replies,
        0
    );

    assert!(cli.counter(NODE_IF, "arp_answered") >= 4);
    assert!(cli.counter(NODE_IF, "ns_answered") >= 1);
    assert!(cli.counter(NODE_IF, "passed") >= 1);
    drop(peer);
}

#[test]
fn answers_arping_and_ndisc6_in_generic_mode() {
    let _ns = crate::shared(); // see main.rs
    answers_in_mode("generic");
}

#[test]
fn answers_arping_and_ndisc6_in_native_mode() {
    let _ns = crate::shared(); // see main.rs
    answers_in_mode("native");
}

#[test]
fn expired_and_deleted_vips_go_unanswered() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("expiry");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP4, NODE_IF, &["--ttl", "1s"]);
    cli.add_vip(VIP6, NODE_IF, &["--ttl", "1s"]);
    assert_eq!(arping(&pair.client, CLIENT_IF, VIP4, 1, T).replies, 1);
    assert_eq!(ndisc6(&pair.client, VIP6, CLIENT_IF, T), Some(NODE_MAC));

    // Nobody refreshes: within the grace it stops being answered by itself.
    thread::sleep(Duration::from_millis(1200));
    neigh_flush(&pair.client, CLIENT_IF);
    assert_eq!(
        arping(&pair.client, CLIENT_IF, VIP4, 2, T).replies,
        0,
        "expired VIP answered"
    );
    assert_eq!(
        ndisc6(&pair.client, VIP6, CLIENT_IF, T),
        None,
        "expired VIP answered"
    );
    let list: serde_json::Value =
        serde_json::from_str(&cli.ok(&["vip", "list", "--json"])).unwrap();
    assert!(
        list.as_array().unwrap().iter().all(|v| v["live"] == false),
        "{list}"
    );
    assert!(cli.counter(NODE_IF, "expired") >= 3);

    // A refresh revives it; a delete ends it at once.
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    assert_eq!(arping(&pair.client, CLIENT_IF, VIP4, 1, T).replies, 1);
    cli.ok(&["vip", "del", &VIP4.to_string(), "--iface", NODE_IF]);
    assert_eq!(
        arping(&pair.client, CLIENT_IF, VIP4, 2, T).replies,
        0,
        "deleted VIP answered"
    );
}

#[test]
fn reload_and_in_place_upgrade_leave_no_gap() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("reload");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    let prog_id = || {
        let out = pair.node.ip(&["-d", "link", "show", NODE_IF]);
        out.split("prog/xdp id ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no XDP program id in: {out}"))
    };
    let first = prog_id();

    // 60 requests over 1.5 s while the loader runs again, swaps the program in place, and runs
    // again.
    let r = thread::scope(|s| {
        let probe = s.spawn(|| {
            arping(
                &pair.client,
                CLIENT_IF,
                VIP4,
                60,
                Duration::from_millis(1500),
            )
        });
        let out = cli.load(NODE_IF, "generic");
        assert!(out.contains("already attached"), "{out}");
        thread::sleep(Duration::from_millis(300));
        let out = cli.ok(&["load", "--iface", NODE_IF, "--replace"]);
        assert!(out.contains("replaced the program"), "{out}");
        thread::sleep(Duration::from_millis(300));
        let out = cli.load(NODE_IF, "generic");
        assert!(out.contains("already attached"), "{out}");
        probe.join().unwrap()
    });
    assert_eq!(
        r.replies, 60,
        "a request went unanswered during reloads: {r:?}"
    );
    assert_ne!(prog_id(), first, "--replace swapped the program");
    // The VIP survived (maps reused) and so did its counters.
    let list: serde_json::Value =
        serde_json::from_str(&cli.ok(&["vip", "list", "--json"])).unwrap();
    assert_eq!(list[0]["vip"], VIP4.to_string());
    assert!(list[0]["answered"].as_u64().unwrap() >= 60, "{list}");
}

#[test]
fn unload_detaches_and_removes_exactly_its_pins() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("unload");
    let cli = Cli::new(&pair.node);
    cli.ok(&["load", "--iface", NODE_IF]);
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    let dir = cli.root().join(NODE_IF);
    let mut pins: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pins.sort();
    assert_eq!(
        pins,
        [
            "COUNTERS", "LAYOUT", "STATS_V4", "STATS_V6", "VIPS_V4", "VIPS_V6", "link", "prog"
        ]
    );

    let out = cli.ok(&["unload", "--iface", NODE_IF]);
    assert!(out.contains("removed 8 pins"), "{out}");
    assert!(!dir.exists());
    assert_eq!(xdp_mode(&pair), "none");
    assert_eq!(arping(&pair.client, CLIENT_IF, VIP4, 1, T).replies, 0);
    assert_eq!(arping(&pair.client, CLIENT_IF, NODE_V4, 1, T).replies, 1);
}

#[test]
fn errors_name_the_problem_the_fix_and_the_exit_code() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("errors");
    let cli = Cli::new(&pair.node);
    let cases: [(&[&str], i32, &str); 5] = [
        (&["load", "--iface", "nosuch0"], 66, "no such interface"),
        (
            &["vip", "add", "10.77.0.100", "--iface", NODE_IF],
            69,
            "announcer load --iface eth0",
        ),
        (
            &["vip", "add", "224.0.0.5", "--iface", NODE_IF],
            64,
            "multicast",
        ),
        (
            &[
                "vip",
                "add",
                "10.77.0.100",
                "--iface",
                NODE_IF,
                "--vlan",
                "4095",
            ],
            64,
            "VLAN id 4095",
        ),
        (
            &["vip", "add", "::ffff:10.0.0.5", "--iface", NODE_IF],
            64,
            "IPv4-mapped",
        ),
    ];
    for (args, code, text) in cases {
        let o = cli.output(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(text), "{args:?}: {err}");
    }
    let o = cli.output(&[
        "vip",
        "add",
        "10.77.0.100",
        "--iface",
        NODE_IF,
        "--mac",
        "02:00:zz:00:00:01",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("MAC address"));

    // Full map: a tiny map cannot be made from the CLI, so fill the real one partly and check
    // the error type through the library instead (tests/tests/kernel/xdp_rules.rs covers the rest).
    cli.load(NODE_IF, "generic");
    let o = cli.output(&[
        "vip",
        "add",
        "10.77.0.100",
        "--iface",
        NODE_IF,
        "--mac",
        "01:00:5e:00:00:01",
    ]);
    assert_eq!(
        o.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn load_under_ip_netns_exec_refuses_a_bpffs_that_would_vanish_and_says_how_to_fix_it() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("ephemeral");
    // `ip netns exec` remounts /sys in a private mount namespace: /sys/fs/bpf there is empty.
    let root = format!("/sys/fs/bpf/anntest-{}-ephemeral", std::process::id());
    let bin = announcer_tests::cli::announcer_bin();
    let o = pair.node.exec(&[
        bin.to_str().unwrap(),
        "--pin-root",
        &root,
        "load",
        "--iface",
        NODE_IF,
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(72), "{err}");
    assert!(err.contains("private mount namespace"), "{err}");
    assert!(err.contains("nsenter --net"), "{err}");
    assert!(err.contains("mount -t bpf bpf /sys/fs/bpf"), "{err}");
}

#[test]
fn program_events_reach_the_log() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("logs");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    cli.add_vip(VIP4, NODE_IF, &["--permanent"]);
    // Another host announces our VIP (gratuitous ARP): not answered, and logged as a conflict.
    let other = Cli::new(&pair.client);
    let before = cli.counter(NODE_IF, "arp_answered");
    other.ok(&[
        "announce",
        &VIP4.to_string(),
        "--iface",
        CLIENT_IF,
        "--count",
        "1",
    ]);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        cli.counter(NODE_IF, "arp_answered"),
        before,
        "a gratuitous ARP is not a question"
    );
    let o = cli.output(&["logs", "--iface", NODE_IF, "--duration", "300ms"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("10.77.0.100") && err.contains("address conflict"),
        "log was:\n{err}"
    );
}

#[test]
fn native_mode_failure_is_explained_and_auto_falls_back() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("modes");
    let cli = Cli::new(&pair.node);
    // The loopback device has no native XDP support.
    let o = cli.output(&["load", "--iface", "lo", "--mode", "native"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(69), "{err}");
    assert!(
        err.contains("native mode") && err.contains("--mode generic"),
        "{err}"
    );
    let out = cli.load("lo", "auto");
    assert!(
        out.contains("in generic mode") && out.contains("native failed"),
        "{out}"
    );
}

#[test]
fn missing_privileges_are_named() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("noperm");
    let cli = Cli::new(&pair.node);
    let mut cmd = pair.node.nsenter_cmd("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ])
    .arg(announcer_tests::cli::announcer_bin())
    .arg("--pin-root")
    .arg(cli.root())
    .args(["load", "--iface", NODE_IF]);
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(77), "{err}");
    assert!(
        err.contains("permission denied") && err.contains("CAP_BPF"),
        "{err}"
    );
}

#[test]
fn takeover_burst_moves_existing_neighbor_entries() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("burst");
    let cli = Cli::new(&pair.node);
    cli.load(NODE_IF, "generic");
    // The client believes the VIPs live at an old owner's MAC.
    for vip in [VIP4.to_string(), VIP6.to_string()] {
        pair.client.ip(&[
            "neigh",
            "replace",
            &vip,
            "lladdr",
            "02:00:00:00:00:99",
            "dev",
            CLIENT_IF,
            "nud",
            "stale",
        ]);
    }
    for vip in [VIP4.to_string(), VIP6.to_string()] {
        let out = cli.ok(&[
            "vip",
            "add",
            &vip,
            "--iface",
            NODE_IF,
            "--permanent",
            "--announce",
            "--count",
            "1",
        ]);
        assert!(out.contains("0 failed"), "{out}");
    }
    thread::sleep(Duration::from_millis(200));
    for vip in [VIP4.to_string(), VIP6.to_string()] {
        let n = pair.client.ip(&["neigh", "show", &vip, "dev", CLIENT_IF]);
        assert!(
            n.contains("lladdr 02:00:00:00:00:01"),
            "{vip} not moved by the burst: {n}"
        );
    }
}

#[test]
fn a_recreated_interface_gets_a_fresh_attachment_and_keeps_its_vips() {
    let _ns = crate::shared(); // see main.rs
    let pair = Pair::new("recreate");
    let cli = Cli::new(&pair.node);
    // (No dummy driver on every kernel: a veth pair inside the namespace serves.)
    let make = || {
        pair.node.ip(&[
            "link", "add", "dum0", "type", "veth", "peer", "name", "dum1",
        ]);
        pair.node.ip(&["link", "set", "dum0", "up"]);
    };
    make();
    cli.load("dum0", "generic");
    cli.add_vip(VIP4, "dum0", &["--permanent"]);
    let before = cli.status()["interfaces"][0]["ifindex"].as_u64().unwrap();

    pair.node.ip(&["link", "del", "dum0"]);
    make();
    assert!(
        !pair
            .node
            .ip(&["-d", "link", "show", "dum0"])
            .contains("xdpgeneric")
    );

    let out = cli.load("dum0", "generic");
    assert!(out.contains("replaced a stale attachment"), "{out}");
    assert!(
        pair.node
            .ip(&["-d", "link", "show", "dum0"])
            .contains("xdpgeneric")
    );
    let s = cli.status();
    let after = s["interfaces"][0]["ifindex"].as_u64().unwrap();
    assert_ne!(before, after);
    assert_eq!(
        s["interfaces"][0]["vips"][0]["vip"],
        VIP4.to_string(),
        "{s}"
    );
    let dump = std::process::Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned"])
        .arg(cli.root().join("dum0/VIPS_V4"))
        .output()
        .unwrap();
    let dump: serde_json::Value = serde_json::from_slice(&dump.stdout).unwrap();
    assert_eq!(
        dump[0]["formatted"]["key"]["ifindex"].as_u64(),
        Some(after),
        "entry re-keyed: {dump}"
    );
    // The new interface has a new MAC; the CLI said so.
    assert!(out.contains("answers with"), "{out}");
}

#[test]
fn tagged_requests_on_the_wire_are_answered_on_their_vlan() {
    let _ns = crate::shared(); // see main.rs
    use announcer::dataplane::announce::PacketSocket;
    use announcer_tests::frames;
    for mode in ["native", "generic"] {
        let pair = Pair::new(&format!("vlan-{mode}"));
        let cli = Cli::new(&pair.node);
        let peer = Cli::new(&pair.client);
        cli.load(NODE_IF, mode);
        if mode == "native" {
            peer.load(CLIENT_IF, "native");
        }
        cli.add_vip(VIP4, NODE_IF, &["--vlan", "100", "--permanent"]);
        let capture = capture(&pair.client, CLIENT_IF, 1, "vlan 100 and arp[6:2] = 2");
        // No 802.1Q module here: the tagged request is written raw, as a switch would deliver it.
        pair.client.enter(|| {
            let ifindex = announcer::dataplane::sys::netif::ifindex(CLIENT_IF).unwrap();
            let sock = PacketSocket::open(ifindex).unwrap();
            let mut req = frames::arp_request(Ipv4Addr::new(10, 77, 0, 2), VIP4, Some(100));
            req[6..12].copy_from_slice(&announcer_tests::netns::CLIENT_MAC);
            req[26..32].copy_from_slice(&announcer_tests::netns::CLIENT_MAC); // ar$sha, after the tag
            sock.send(&req).unwrap();
        });
        let seen = capture.finish();
        let list: serde_json::Value =
            serde_json::from_str(&cli.ok(&["vip", "list", "--json"])).unwrap();
        assert_eq!(
            list[0]["answered"],
            1,
            "{mode}: not answered on VLAN 100: {list}\n{}",
            cli.ok(&["status"])
        );
        assert!(
            seen.contains("vlan 100") && seen.contains("is-at 02:00:00:00:00:01"),
            "{mode}: client saw: {seen}"
        );
        drop(peer);
    }
}

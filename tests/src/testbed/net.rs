//! The wiring: bridge, veths, addresses, sysctls, VIP local routes, and the link-level faults
//! (link down, partitions by bridge port isolation).
//!
//! Why port isolation for partitions: without 802.1Q, tc flower or nftables on the machine, the
//! bridge's `isolated` port flag is the one switch-level cut available — isolated ports cannot
//! forward to each other but still reach every non-isolated port (the client, the other nodes,
//! the bridge's own address where the API server listens). It is one isolation group, so one
//! partitioned pair at a time.

use std::{process::Command, time::Duration};

use super::{
    BRIDGE_V4, BRIDGE_V6, CLIENT_MAC, CLIENT_V4, CLIENT_V6, IFACE, Node, PREFIX_V4, PREFIX_V6,
    Testbed, TestbedConfig, VIP_NET4, VIP_NET6, node_mac_of, node_name, node_v4, node_v6,
};
use crate::netns::{Netns, add_addr, output_of, set_mac, veth, wait_oper_up};

/// The bridge in the bridge namespace.
pub const BRIDGE: &str = "br0";

/// The namespaces, before the API server and agents exist.
pub(super) struct Topology {
    pub bridge: Netns,
    pub client: Netns,
    pub nodes: Vec<Node>,
}

/// Bridge-side name of a node's (or the client's) veth: `v-node-a`, `v-client`.
pub fn port_name(node: &str) -> String {
    format!("v-{node}")
}

fn no_dad(ns: &Netns) {
    // Before any veth arrives, so no address is ever tentative.
    ns.sysctl("net.ipv6.conf.all.accept_dad", "0");
    ns.sysctl("net.ipv6.conf.default.accept_dad", "0");
}

/// Creates the namespace `name`, links its `eth0` to the bridge and configures it.
fn attach(bridge: &Netns, ns: &Netns, port: &str, mac: [u8; 6], v4: &str, v6: &str) {
    no_dad(ns);
    veth(ns, IFACE, bridge, port);
    bridge.ip(&["link", "set", "dev", port, "master", BRIDGE]);
    set_mac(ns, IFACE, mac);
    add_addr(ns, IFACE, v4);
    add_addr(ns, IFACE, v6);
}

pub(super) fn build(cfg: &TestbedConfig) -> Topology {
    let tag = &cfg.tag;
    let bridge = Netns::new(&format!("tb-{tag}-br"));
    no_dad(&bridge);
    bridge.ip(&[
        "link",
        "add",
        BRIDGE,
        "type",
        "bridge",
        "stp_state",
        "0",
        "forward_delay",
        "0",
        "mcast_snooping",
        "0",
    ]);
    bridge.ip(&["link", "set", "dev", BRIDGE, "up"]);
    bridge.ip(&["link", "set", "dev", "lo", "up"]);
    add_addr(&bridge, BRIDGE, &format!("{BRIDGE_V4}/{PREFIX_V4}"));
    add_addr(&bridge, BRIDGE, &format!("{BRIDGE_V6}/{PREFIX_V6}"));

    let client = Netns::new(&format!("tb-{tag}-client"));
    attach(
        &bridge,
        &client,
        &port_name("client"),
        CLIENT_MAC,
        &format!("{CLIENT_V4}/{PREFIX_V4}"),
        &format!("{CLIENT_V6}/{PREFIX_V6}"),
    );

    let mut nodes = Vec::new();
    for i in 0..cfg.nodes {
        let name = node_name(i);
        let ns = Netns::new(&format!("tb-{tag}-{name}"));
        for conf in ["all", "default"] {
            ns.sysctl(&format!("net.ipv4.conf.{conf}.arp_ignore"), "1");
            ns.sysctl(&format!("net.ipv4.conf.{conf}.arp_announce"), "2");
        }
        attach(
            &bridge,
            &ns,
            &port_name(&name),
            node_mac_of(i),
            &format!("{}/{PREFIX_V4}", node_v4(i)),
            &format!("{}/{PREFIX_V6}", node_v6(i)),
        );
        ns.sysctl(&format!("net.ipv4.conf.{IFACE}.arp_ignore"), "1");
        ns.sysctl(&format!("net.ipv4.conf.{IFACE}.arp_announce"), "2");
        local_routes(&ns, true);
        nodes.push(Node {
            name,
            ns,
            v4: node_v4(i),
            v6: node_v6(i),
            mac: node_mac_of(i),
        });
    }
    for ns in nodes.iter().map(|n| &n.ns).chain([&client]) {
        wait_oper_up(ns, IFACE, Duration::from_secs(5));
    }
    Topology {
        bridge,
        client,
        nodes,
    }
}

/// Adds (or removes) the VIP local routes of a node namespace (see the module docs of
/// [`super`]).
fn local_routes(ns: &Netns, on: bool) {
    let verb = if on { "add" } else { "del" };
    for (family, net) in [("-4", VIP_NET4), ("-6", VIP_NET6)] {
        let out = output_of(Command::new("ip").args([
            "-n",
            ns.name(),
            family,
            "route",
            verb,
            "local",
            net,
            "dev",
            "lo",
            "table",
            "local",
        ]));
        let err = String::from_utf8_lossy(&out.stderr);
        // Idempotent: adding an existing route or deleting a missing one is fine.
        assert!(
            out.status.success() || err.contains("File exists") || err.contains("No such process"),
            "ip route {verb} local {net} in {}: {err}",
            ns.name()
        );
    }
}

/// Attaches the (VIP-less, so pass-everything) responder in native mode to every node's
/// bridge-side veth: native XDP_TX on a veth only delivers when the peer has XDP too.
pub(super) fn attach_bridge_pass(tb: &Testbed) {
    let root = tb.pin_root.join("bridge");
    for n in &tb.nodes {
        let mut cmd = tb
            .bridge
            .nsenter_cmd(crate::cli::announcer_bin().to_str().expect("utf-8 path"));
        cmd.arg("--pin-root").arg(&root).args([
            "load",
            "--iface",
            &port_name(&n.name),
            "--mode",
            "native",
        ]);
        crate::netns::run_checked(&mut cmd);
    }
}

/// Kills every process in the namespace `name` and deletes it (for the Ctrl-C cleanup, which
/// cannot reach the [`Netns`] values).
pub(super) fn delete_namespace_by_name(name: &str) {
    let out = output_of(Command::new("ip").args(["netns", "pids", name]));
    let me = std::process::id();
    for pid in String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
        .filter(|&p| p != me as i32)
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = output_of(Command::new("ip").args(["netns", "del", name]));
}

impl Testbed {
    /// Sets the node's `eth0` down (the node drops off the LAN; its agent keeps running).
    pub fn link_down(&self, node: &str) {
        self.node_ns(node)
            .ip(&["link", "set", "dev", IFACE, "down"]);
    }

    /// Sets the node's `eth0` up again.
    pub fn link_up(&self, node: &str) {
        let ns = self.node_ns(node);
        ns.ip(&["link", "set", "dev", IFACE, "up"]);
        wait_oper_up(ns, IFACE, Duration::from_secs(5));
    }

    /// Cuts `a` <-> `b` at the bridge (port isolation); both still reach everyone else. Only
    /// one pair can be partitioned at a time (panics otherwise).
    pub fn partition(&self, a: &str, b: &str) {
        self.node(a);
        self.node(b);
        assert_ne!(a, b, "partition needs two different nodes");
        let pair = ordered(a, b);
        let mut parts = self.partitions.lock().expect("partitions");
        assert!(
            parts.is_empty() || parts.contains(&pair),
            "only one partitioned pair at a time (bridge port isolation is one group); \
             active: {parts:?}"
        );
        for n in [a, b] {
            self.set_isolated(n, true);
        }
        parts.insert(pair);
    }

    /// Bridge port isolation of `node`'s port: isolated ports reach only non-isolated ones.
    fn set_isolated(&self, node: &str, on: bool) {
        let state = if on { "on" } else { "off" };
        self.bridge.ip(&[
            "link",
            "set",
            "dev",
            &port_name(node),
            "type",
            "bridge_slave",
            "isolated",
            state,
        ]);
    }

    /// Ends the partition between `a` and `b`.
    pub fn heal(&self, a: &str, b: &str) {
        let mut parts = self.partitions.lock().expect("partitions");
        for n in [a, b] {
            self.set_isolated(n, false);
        }
        parts.remove(&ordered(a, b));
    }

    /// Adds (`on`) or removes the node's VIP local routes. Keepalived runs remove them:
    /// keepalived puts its VIPs on `eth0` itself, and a node must then accept only the VIPs it
    /// holds.
    pub fn add_local_routes(&self, node: &str, on: bool) {
        local_routes(self.node_ns(node), on);
    }
}

fn ordered(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.into(), b.into())
    } else {
        (b.into(), a.into())
    }
}

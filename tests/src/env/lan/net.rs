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
    BRIDGE_V4, BRIDGE_V6, CLIENT_MAC, CLIENT_V4, CLIENT_V6, CLIENT2_MAC, CLIENT2_V4, CLIENT2_V6,
    IFACE, Node, PREFIX_V4, PREFIX_V6, Testbed, TestbedConfig, VIP_NET4, VIP_NET6, node_mac_of,
    node_name, node_v4, node_v6, node2_mac_of, node2_v4, node2_v6,
};
use crate::netns::{
    Netns, add_addr, add_bridge, add_bridge_port, output_of, set_mac, wait_oper_up,
};

/// The bridge in the bridge namespace.
pub const BRIDGE: &str = "br0";
/// The second bridge ([`Testbed::add_second_nic`]), in the same namespace.
pub const BRIDGE2: &str = "br1";
/// Interface name of the second NIC of the nodes and the client.
pub const IFACE2: &str = "eth1";
/// Prefix length of the second NIC's IPv4 subnet 10.79.0.0/16.
pub const NIC2_PREFIX_V4: u8 = 16;
/// Prefix length of the second NIC's IPv6 subnet fd79::/64.
pub const NIC2_PREFIX_V6: u8 = 64;
/// The VIP range of the second NIC's subnet accepted by every node (IPv4): 10.79.128.0/17.
pub const NIC2_VIP_NET4: &str = "10.79.128.0/17";
/// The VIP range of the second NIC's subnet accepted by every node (IPv6): fd79::8000:0/113.
pub const NIC2_VIP_NET6: &str = "fd79::8000:0/113";
/// The bridge's own address on [`BRIDGE2`] (IPv4).
const BRIDGE2_V4: &str = "10.79.0.254/16";
/// The bridge's own address on [`BRIDGE2`] (IPv6).
const BRIDGE2_V6: &str = "fd79::fe/64";

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

/// Bridge-side name of a node's (or the client's) second veth: `w-node-a`, `w-client`.
pub fn port2_name(node: &str) -> String {
    format!("w-{node}")
}

/// Links `ns`'s `eth0` to `br0` (port `port`) and configures it.
pub(super) fn attach(bridge: &Netns, ns: &Netns, port: &str, mac: [u8; 6], v4: &str, v6: &str) {
    ns.disable_dad();
    attach_to(bridge, BRIDGE, ns, IFACE, port, mac, v4, v6);
}

/// Links `ns`'s `ifname` to `br` (port `port`) and configures it.
#[allow(clippy::too_many_arguments)]
fn attach_to(
    bridge: &Netns,
    br: &str,
    ns: &Netns,
    ifname: &str,
    port: &str,
    mac: [u8; 6],
    v4: &str,
    v6: &str,
) {
    add_bridge_port(bridge, br, port, ns, ifname);
    ns.sysctl(&format!("net.ipv6.conf.{ifname}.accept_dad"), "0");
    set_mac(ns, ifname, mac);
    add_addr(ns, ifname, v4);
    add_addr(ns, ifname, v6);
}

pub(super) fn build(cfg: &TestbedConfig) -> Topology {
    let tag = &cfg.tag;
    let bridge = Netns::new(&format!("tb-{tag}-br"));
    bridge.disable_dad();
    add_bridge(&bridge, BRIDGE);
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
            mac2: node2_mac_of(i),
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
    local_routes_for(ns, on, &[("-4", VIP_NET4), ("-6", VIP_NET6)]);
}

fn local_routes_for(ns: &Netns, on: bool, nets: &[(&str, &str)]) {
    let verb = if on { "add" } else { "del" };
    for &(family, net) in nets {
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
    attach_bridge_pass_on(tb, &port_name, "bridge");
}

fn attach_bridge_pass_on(tb: &Testbed, port: &dyn Fn(&str) -> String, pins: &str) {
    let root = tb.pin_root.join(pins);
    for n in &tb.nodes {
        let mut cmd = tb
            .bridge
            .nsenter_cmd(crate::cli::announcer_bin().to_str().expect("utf-8 path"));
        cmd.arg("--pin-root").arg(&root).args([
            "load",
            "--iface",
            &port(&n.name),
            "--mode",
            "native",
        ]);
        crate::netns::run_checked(&mut cmd);
    }
}

impl Testbed {
    /// Gives every node and the client a second NIC: `eth1` on a second bridge `br1` (same
    /// bridge namespace), subnet 10.79.0.0/16 and fd79::/64 (node `i` at `10.79.0.(i+1)`,
    /// `fd79::(i+1)`, MAC `02:79:00:00:00:(i+1)`; client `.250`/`::fa`, `02:79:00:00:00:fa`),
    /// and every node local routes for the VIPs of that subnet ([`NIC2_VIP_NET4`],
    /// [`NIC2_VIP_NET6`]; [`super::nic2_vip4`]). The agents then start with `--interface
    /// eth0,eth1`, so a VIP of that subnet is announced on `eth1` with its MAC (the agent picks
    /// the interface whose subnet contains the VIP), while heartbeats stay on `eth0`.
    ///
    /// Call before any agent starts.
    pub fn add_second_nic(&mut self) {
        assert!(
            self.agents.is_empty(),
            "add_second_nic must come before the agents start"
        );
        if self.second_nic {
            return;
        }
        let b = &self.bridge;
        add_bridge(b, BRIDGE2);
        add_addr(b, BRIDGE2, BRIDGE2_V4);
        add_addr(b, BRIDGE2, BRIDGE2_V6);
        attach_to(
            b,
            BRIDGE2,
            &self.client,
            IFACE2,
            &port2_name("client"),
            CLIENT2_MAC,
            &format!("{CLIENT2_V4}/{NIC2_PREFIX_V4}"),
            &format!("{CLIENT2_V6}/{NIC2_PREFIX_V6}"),
        );
        for (i, n) in self.nodes.iter().enumerate() {
            attach_to(
                b,
                BRIDGE2,
                &n.ns,
                IFACE2,
                &port2_name(&n.name),
                node2_mac_of(i),
                &format!("{}/{NIC2_PREFIX_V4}", node2_v4(i)),
                &format!("{}/{NIC2_PREFIX_V6}", node2_v6(i)),
            );
            n.ns.sysctl(&format!("net.ipv4.conf.{IFACE2}.arp_ignore"), "1");
            n.ns.sysctl(&format!("net.ipv4.conf.{IFACE2}.arp_announce"), "2");
            local_routes_for(&n.ns, true, &[("-4", NIC2_VIP_NET4), ("-6", NIC2_VIP_NET6)]);
        }
        for ns in self.nodes.iter().map(|n| &n.ns).chain([&self.client]) {
            wait_oper_up(ns, IFACE2, Duration::from_secs(5));
        }
        if self.cfg.native_xdp {
            attach_bridge_pass_on(self, &port2_name, "bridge2");
        }
        self.second_nic = true;
    }

    /// Whether [`Self::add_second_nic`] ran.
    pub fn has_second_nic(&self) -> bool {
        self.second_nic
    }

    /// Sets the node's `eth0` (and `eth1`, with [`Self::add_second_nic`]) down (the node drops
    /// off the LAN; its agent keeps running).
    pub fn link_down(&self, node: &str) {
        for ifname in self.node_ifaces() {
            self.node_ns(node)
                .ip(&["link", "set", "dev", ifname, "down"]);
        }
    }

    /// Sets the node's `eth0` (and `eth1`) up again.
    pub fn link_up(&self, node: &str) {
        let ns = self.node_ns(node);
        for ifname in self.node_ifaces() {
            ns.ip(&["link", "set", "dev", ifname, "up"]);
            wait_oper_up(ns, ifname, Duration::from_secs(5));
        }
    }

    /// The LAN interfaces of a node: `eth0`, and `eth1` with [`Self::add_second_nic`].
    pub fn node_ifaces(&self) -> &'static [&'static str] {
        if self.second_nic {
            &[IFACE, IFACE2]
        } else {
            &[IFACE]
        }
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

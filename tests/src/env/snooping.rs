//! Segments whose multicast filtering is real, for IPv6 VIPs: a bridge doing MLD snooping as a
//! switch does, and a macvlan port with its own multicast filter.
//!
//! Why: the other worlds' bridges ([`crate::netns::add_bridge`]) flood every multicast frame,
//! and a veth has no receive filter, so a Neighbor Solicitation reaches XDP whether or not
//! anything joined the VIP's solicited-node group. Here it does only if the owner's kernel
//! reported the group (the bridge) or put its MAC in the device's filter (the macvlan).
//!
//! Both worlds put the client's and the owner's `eth0` on one link with the addresses and MACs
//! of a [`crate::netns::Pair`]; dropping a world deletes its namespaces (and so its links).

use std::{
    net::Ipv6Addr,
    time::{Duration, Instant},
};

use crate::{
    netns::{
        CLIENT_IF, CLIENT_MAC, CLIENT_V4, CLIENT_V6, NODE_IF, NODE_MAC, NODE_V4, NODE_V6, Netns,
        PREFIX_V4, PREFIX_V6, add_addr, link_json, set_mac, veth, wait_oper_up,
    },
    tools,
};

/// The bridge, in [`SnoopingLan::bridge`].
pub const BRIDGE: &str = "br0";
/// The bridge's port towards the owner.
pub const OWNER_PORT: &str = "pow";
/// The bridge's port towards the client.
pub const CLIENT_PORT: &str = "pcl";

/// How long the bridge's own querier takes to be the querier (its first query goes out after
/// it is up; until then the bridge floods multicast, except to `mcast_flood off` ports).
const QUERIER_TIMEOUT: Duration = Duration::from_secs(20);

/// Client and owner on a Linux bridge with `mcast_snooping 1` and its own MLD querier
/// (`mcast_querier 1`), both ports `mcast_flood off`: multicast reaches a port only if the host
/// behind it reported the group, as on a switch that does not flood unregistered multicast.
#[derive(Debug)]
pub struct SnoopingLan {
    /// Holds [`BRIDGE`].
    pub bridge: Netns,
    /// `eth0`: [`CLIENT_MAC`], [`CLIENT_V4`], [`CLIENT_V6`].
    pub client: Netns,
    /// `eth0`: [`NODE_MAC`], [`NODE_V4`], [`NODE_V6`]; where the XDP program and the VIPs go.
    pub owner: Netns,
}

impl SnoopingLan {
    /// Builds the segment and waits until the bridge is the querier (the client's solicitation
    /// for the owner's own address is answered: the owner's kernel reported that group).
    pub fn new(tag: &str) -> SnoopingLan {
        let bridge = Netns::new(&format!("{tag}-br"));
        let client = Netns::new(&format!("{tag}-cl"));
        let owner = Netns::new(&format!("{tag}-ow"));
        for ns in [&bridge, &client, &owner] {
            ns.disable_dad();
        }
        #[rustfmt::skip]
        bridge.ip(&[
            "link", "add", BRIDGE, "type", "bridge", "stp_state", "0", "forward_delay", "0",
            "mcast_snooping", "1", "mcast_querier", "1",
        ]);
        bridge.ip(&["link", "set", "dev", BRIDGE, "up"]);
        bridge.ip(&["link", "set", "dev", "lo", "up"]);
        for (ns, ifname, port) in [
            (&client, CLIENT_IF, CLIENT_PORT),
            (&owner, NODE_IF, OWNER_PORT),
        ] {
            veth(ns, ifname, &bridge, port);
            bridge.ip(&["link", "set", "dev", port, "master", BRIDGE]);
            #[rustfmt::skip]
            bridge.ip(&["link", "set", "dev", port, "type", "bridge_slave", "mcast_flood", "off"]);
        }
        set_mac(&owner, NODE_IF, NODE_MAC);
        set_mac(&client, CLIENT_IF, CLIENT_MAC);
        add_addr(&owner, NODE_IF, &format!("{NODE_V6}/{PREFIX_V6}"));
        add_addr(&client, CLIENT_IF, &format!("{CLIENT_V6}/{PREFIX_V6}"));
        // IPv4 too, as on a node: the agent's heartbeats go from the Node's InternalIP.
        add_addr(&owner, NODE_IF, &format!("{NODE_V4}/{PREFIX_V4}"));
        add_addr(&client, CLIENT_IF, &format!("{CLIENT_V4}/{PREFIX_V4}"));
        wait_oper_up(&owner, NODE_IF, Duration::from_secs(5));
        wait_oper_up(&client, CLIENT_IF, Duration::from_secs(5));
        let lan = SnoopingLan {
            bridge,
            client,
            owner,
        };
        let deadline = Instant::now() + QUERIER_TIMEOUT;
        while lan.solicit(NODE_V6).is_none() {
            assert!(
                Instant::now() < deadline,
                "the owner's own address is not answered after {QUERIER_TIMEOUT:?} behind the snooping bridge; mdb:\n{}",
                lan.bridge.run(&["bridge", "mdb", "show"])
            );
        }
        lan
    }

    /// The client resolves `target` as a host does: up to [`MAX_MULTICAST_SOLICIT`]
    /// solicitations to its solicited-node group; the MAC that answered, if any.
    pub fn solicit(&self, target: Ipv6Addr) -> Option<[u8; 6]> {
        resolve(&self.client, target)
    }

    /// The bridge ports the snooping table forwards `group` to.
    pub fn mdb_ports(&self, group: Ipv6Addr) -> Vec<String> {
        mdb_ports(&self.bridge, group)
    }
}

/// Solicitations a host sends before it gives up on an address, [`RETRANS_TIMER`] apart
/// (RFC 4861 §10): a join's MLD report may reach the switch after the first one.
pub const MAX_MULTICAST_SOLICIT: usize = 3;
/// RFC 4861 §10 `RETRANS_TIMER`.
pub const RETRANS_TIMER: Duration = Duration::from_secs(1);

/// `target` resolved from `client`'s `eth0` as a host does (see [`MAX_MULTICAST_SOLICIT`]).
fn resolve(client: &Netns, target: Ipv6Addr) -> Option<[u8; 6]> {
    (0..MAX_MULTICAST_SOLICIT).find_map(|_| tools::ndisc6(client, target, CLIENT_IF, RETRANS_TIMER))
}

/// The ports `bridge mdb show` lists for `group` in `bridge`.
pub fn mdb_ports(bridge: &Netns, group: Ipv6Addr) -> Vec<String> {
    let text = bridge.run(&["bridge", "-j", "mdb", "show"]);
    let json: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("cannot parse `bridge -j mdb show` {text:?}: {e}"));
    let mut ports = Vec::new();
    for dev in json.as_array().into_iter().flatten() {
        for e in dev["mdb"].as_array().into_iter().flatten() {
            let grp = e["grp"].as_str().and_then(|g| g.parse::<Ipv6Addr>().ok());
            if grp == Some(group)
                && let Some(p) = e["port"].as_str()
            {
                ports.push(p.to_owned());
            }
        }
    }
    ports
}

/// Client and owner on one wire where the owner's `eth0` is a macvlan (mode bridge) whose
/// lower device, `up0` in [`MacvlanLan::lower`], is the veth peer of the client's `eth0`: the
/// macvlan driver hands the owner only the multicast frames its filter has the MAC of.
#[derive(Debug)]
pub struct MacvlanLan {
    /// Holds `up0`, the macvlan's lower device.
    pub lower: Netns,
    /// `eth0`: [`CLIENT_MAC`], [`CLIENT_V6`].
    pub client: Netns,
    /// `eth0` (the macvlan): [`NODE_MAC`], [`NODE_V6`].
    pub owner: Netns,
}

impl MacvlanLan {
    /// Builds the link and waits until the owner's own address is answered.
    pub fn new(tag: &str) -> MacvlanLan {
        let lower = Netns::new(&format!("{tag}-lo"));
        let client = Netns::new(&format!("{tag}-cl"));
        let owner = Netns::new(&format!("{tag}-ow"));
        for ns in [&lower, &client, &owner] {
            ns.disable_dad();
        }
        veth(&client, CLIENT_IF, &lower, "up0");
        // Created in `lower` on its lower device, then moved: a macvlan keeps its lower
        // device across namespaces.
        #[rustfmt::skip]
        lower.ip(&["link", "add", "link", "up0", "name", "mv0", "type", "macvlan", "mode", "bridge"]);
        lower.ip(&["link", "set", "dev", "mv0", "netns", owner.name()]);
        owner.ip(&["link", "set", "dev", "mv0", "name", NODE_IF]);
        set_mac(&owner, NODE_IF, NODE_MAC);
        owner.ip(&["link", "set", "dev", NODE_IF, "up"]);
        owner.ip(&["link", "set", "dev", "lo", "up"]);
        set_mac(&client, CLIENT_IF, CLIENT_MAC);
        add_addr(&owner, NODE_IF, &format!("{NODE_V6}/{PREFIX_V6}"));
        add_addr(&client, CLIENT_IF, &format!("{CLIENT_V6}/{PREFIX_V6}"));
        wait_oper_up(&owner, NODE_IF, Duration::from_secs(5));
        wait_oper_up(&client, CLIENT_IF, Duration::from_secs(5));
        let lan = MacvlanLan {
            lower,
            client,
            owner,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while lan.solicit(NODE_V6).is_none() {
            assert!(
                Instant::now() < deadline,
                "the owner's own address is not answered through the macvlan"
            );
        }
        lan
    }

    /// The client resolves `target` as a host does: up to [`MAX_MULTICAST_SOLICIT`]
    /// solicitations to its solicited-node group; the MAC that answered, if any.
    pub fn solicit(&self, target: Ipv6Addr) -> Option<[u8; 6]> {
        resolve(&self.client, target)
    }
}

/// How `ifname` in `ns` receives multicast beyond its filter: its `PROMISC` and `ALLMULTI`
/// flags, and the kernel's promiscuity and allmulti counts (`ip -d link`).
#[derive(Debug, PartialEq, Eq)]
pub struct RxModes {
    /// `PROMISC` flag set, or a promiscuity count above zero.
    pub promisc: bool,
    /// `ALLMULTI` flag set, or an allmulti count above zero.
    pub allmulti: bool,
}

/// The receive modes of `ifname` in `ns`.
pub fn rx_modes(ns: &Netns, ifname: &str) -> RxModes {
    let link = link_json(ns, ifname);
    let detailed: serde_json::Value =
        serde_json::from_str(&ns.ip(&["-d", "-j", "link", "show", "dev", ifname]))
            .expect("ip -d -j link");
    let d = &detailed[0];
    let flag = |f: &str| {
        link["flags"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(f)))
    };
    let count = |k: &str| d[k].as_u64().unwrap_or(0) > 0;
    RxModes {
        promisc: flag("PROMISC") || count("promiscuity"),
        allmulti: flag("ALLMULTI") || count("allmulti"),
    }
}

/// The IPv6 groups `ip -6 maddr show dev IFNAME` lists in `ns`.
pub fn maddr_groups(ns: &Netns, ifname: &str) -> Vec<Ipv6Addr> {
    ns.ip(&["-6", "maddr", "show", "dev", ifname])
        .lines()
        .filter_map(|l| l.trim().strip_prefix("inet6 "))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|a| a.parse().ok())
        .collect()
}

//! Which addresses an agent refuses to announce, whatever a Service's status says.
//!
//! Why a rule of its own: the agents announce what they read in `status.loadBalancer.ingress`,
//! and whoever can write that status (any IPAM, any account with `services/status` patch) could
//! otherwise make a healthy node answer ARP/NDP for the segment's gateway, another node's own
//! address or a link-local one, and hijack traffic that is not a Service's. MetalLB's speakers
//! refuse addresses in no pool for the same reason. The rules here are pure: the addresses
//! that can never be a Service's ([`Refusal::of_address`]), the cluster's own node addresses
//! ([`node_addresses`]), and the network and broadcast addresses of the link that would
//! announce ([`Refusal::on_link`]). The pool rule (an address outside every `AddressPool`
//! once one exists) is applied by [`super::eligibility::plan_placed`], which knows the pools.
//!
//! The link's default gateway is not a rule of its own: the agent reads no routing table, and
//! a gateway is either a node address (refused), outside every pool (refused once a pool
//! exists, unless `announceOutsidePools` says otherwise) or, without any pool, an address an
//! operator must keep out of their own IPAM's ranges.

use std::{
    borrow::Borrow,
    collections::BTreeMap,
    fmt,
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
};

use k8s_openapi::api::core::v1::Node;

use crate::election::NodeName;

/// Why an address is not announced although a Service's status names it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    /// `0.0.0.0` or `::`.
    Unspecified,
    /// `127.0.0.0/8` or `::1`.
    Loopback,
    /// `224.0.0.0/4` or `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `169.254.0.0/16` or `fe80::/10`: every link has its own; they are never routed to a VIP.
    LinkLocal,
    /// An `InternalIP` or `ExternalIP` of this Node of the cluster.
    NodeAddress(NodeName),
    /// Outside every `AddressPool`, while at least one exists and `announceOutsidePools` is
    /// off.
    OutsidePools,
    /// The network address of the announcing link's subnet (for IPv6, its Subnet-Router
    /// anycast address, which the link's routers answer).
    LinkNetwork(IpAddr, u8),
    /// The broadcast address of the announcing link's IPv4 subnet.
    LinkBroadcast(IpAddr, u8),
}

impl Refusal {
    /// Every metric label, in a fixed order (so that a gauge can be reset to zero for rules
    /// that no longer apply).
    pub const LABELS: [&'static str; 8] = [
        "unspecified",
        "loopback",
        "multicast",
        "broadcast",
        "link_local",
        "node_address",
        "outside_pools",
        "link_network_or_broadcast",
    ];

    /// The addresses that can never be a Service's, by their scope alone (IPv4 and IPv6).
    pub fn of_address(ip: IpAddr) -> Option<Refusal> {
        match ip {
            IpAddr::V4(a) => v4_scope(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(v4) => v4_scope(v4),
                None => v6_scope(a),
            },
        }
    }

    /// Whether `ip` is the network or broadcast address of a subnet of the link that would
    /// announce it. `link` is that link's addresses with their prefix lengths; host routes
    /// (`/32`, `/128`) and point-to-point subnets (`/31`, `/127`) have neither.
    pub fn on_link(ip: IpAddr, link: &[(IpAddr, u8)]) -> Option<Refusal> {
        link.iter().find_map(|&(addr, prefix)| match (ip, addr) {
            (IpAddr::V4(v), IpAddr::V4(a)) if prefix <= 30 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
                let net = u32::from(a) & mask;
                if u32::from(v) & mask != net {
                    None
                } else if u32::from(v) == net {
                    Some(Refusal::LinkNetwork(ip, prefix))
                } else if u32::from(v) == net | !mask {
                    Some(Refusal::LinkBroadcast(ip, prefix))
                } else {
                    None
                }
            }
            (IpAddr::V6(v), IpAddr::V6(a)) if prefix <= 126 => {
                let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
                let net = u128::from(a) & mask;
                (u128::from(v) == net).then_some(Refusal::LinkNetwork(ip, prefix))
            }
            _ => None,
        })
    }

    /// Whether the rule refuses a unicast address (the others refuse addresses that are never
    /// unicast: unspecified, loopback, multicast, broadcast).
    pub fn unicast(&self) -> bool {
        !matches!(
            self,
            Refusal::Unspecified | Refusal::Loopback | Refusal::Multicast | Refusal::Broadcast
        )
    }

    /// The metric label (one of [`Refusal::LABELS`]).
    pub fn label(&self) -> &'static str {
        match self {
            Refusal::Unspecified => "unspecified",
            Refusal::Loopback => "loopback",
            Refusal::Multicast => "multicast",
            Refusal::Broadcast => "broadcast",
            Refusal::LinkLocal => "link_local",
            Refusal::NodeAddress(_) => "node_address",
            Refusal::OutsidePools => "outside_pools",
            Refusal::LinkNetwork(..) | Refusal::LinkBroadcast(..) => "link_network_or_broadcast",
        }
    }
}

/// For people: the rule, as the Event and the log line say it.
impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unspecified => write!(f, "the unspecified address is never announced"),
            Refusal::Loopback => write!(f, "a loopback address is never announced"),
            Refusal::Multicast => write!(f, "a multicast address is never announced"),
            Refusal::Broadcast => write!(f, "the broadcast address is never announced"),
            Refusal::LinkLocal => write!(f, "a link-local address is never announced"),
            Refusal::NodeAddress(n) => write!(
                f,
                "it is an address of Node {n}: a node's own address is never announced"
            ),
            Refusal::OutsidePools => write!(
                f,
                "it is in no AddressPool (set announceOutsidePools: true in the agent's configuration to announce addresses another IPAM assigns)"
            ),
            Refusal::LinkNetwork(ip, p) => write!(
                f,
                "it is the network address of the announcing link's subnet ({ip}/{p})"
            ),
            Refusal::LinkBroadcast(ip, p) => write!(
                f,
                "it is the broadcast address of the announcing link's subnet (/{p} containing {ip})"
            ),
        }
    }
}

fn v4_scope(a: Ipv4Addr) -> Option<Refusal> {
    if a.is_unspecified() {
        Some(Refusal::Unspecified)
    } else if a.is_loopback() {
        Some(Refusal::Loopback)
    } else if a.is_multicast() {
        Some(Refusal::Multicast)
    } else if a.is_broadcast() {
        Some(Refusal::Broadcast)
    } else if a.is_link_local() {
        Some(Refusal::LinkLocal)
    } else {
        None
    }
}

fn v6_scope(a: Ipv6Addr) -> Option<Refusal> {
    if a.is_unspecified() {
        Some(Refusal::Unspecified)
    } else if a.is_loopback() {
        Some(Refusal::Loopback)
    } else if a.is_multicast() {
        Some(Refusal::Multicast)
    } else if a.is_unicast_link_local() {
        Some(Refusal::LinkLocal)
    } else {
        None
    }
}

/// The `InternalIP` and `ExternalIP` addresses of every Node (Ready or not: a node that is
/// down still owns its address), with the Node's name. An address two Nodes list goes to the
/// first by name.
pub fn node_addresses<N: Borrow<Node>>(nodes: &[N]) -> BTreeMap<IpAddr, NodeName> {
    let mut out = BTreeMap::new();
    let mut sorted: Vec<&Node> = nodes.iter().map(Borrow::borrow).collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for n in sorted {
        let Some(name) = n.metadata.name.as_deref() else {
            continue;
        };
        let addrs = n.status.as_ref().and_then(|s| s.addresses.as_ref());
        for a in addrs.into_iter().flatten() {
            if a.type_ != "InternalIP" && a.type_ != "ExternalIP" {
                continue;
            }
            if let Ok(ip) = a.address.parse::<IpAddr>() {
                out.entry(ip).or_insert_with(|| NodeName::from(name));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;

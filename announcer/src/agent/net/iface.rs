//! Which local interface announces a VIP.
//!
//! Why a rule and not a flag per VIP: VIPs come and go with Services, so the agent must find
//! the right link by itself. ARP (RFC 826) and Neighbor Discovery (RFC 4861 §7.2) are resolved
//! on the link where the requester sits, which is the link whose subnet contains the VIP; when
//! no local subnet contains it (VIPs from a separate pool routed onto the node network), the
//! link carrying the node's InternalIP is the one other nodes and the router reach us on.
//!
//! The choice is a pure function over a [`snapshot`] of the interfaces, so it is tested on
//! hand-built snapshots; only [`snapshot`] touches the system (via `getifaddrs`, which honours
//! the caller's network namespace, like [`crate::dataplane::sys::netif`]).

use std::{fmt, net::IpAddr};

use announcer_ebpf::wire::MacAddr;
use k8s_openapi::api::core::v1::Node;
use nix::net::if_::InterfaceFlags;

use crate::{
    dataplane::{
        error::{Error, Result},
        sys::netif,
    },
    election::{IfaceName, Link, Subnet},
};

/// An address on an interface, with its prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Prefix length (`/24`, `/64`...).
    pub prefix: u8,
}

impl IfAddr {
    /// Whether `other` is in this address's subnet (same family only).
    pub fn contains(&self, other: IpAddr) -> bool {
        match (self.ip, other) {
            (IpAddr::V4(a), IpAddr::V4(b)) => same_prefix(&a.octets(), &b.octets(), self.prefix),
            (IpAddr::V6(a), IpAddr::V6(b)) => same_prefix(&a.octets(), &b.octets(), self.prefix),
            _ => false,
        }
    }

    /// A host route (`/32`, `/128`): an address, not a subnet (kube-proxy's IPVS mode and other
    /// announcers put VIPs on interfaces that way; that says nothing about the link).
    pub fn is_host(&self) -> bool {
        match self.ip {
            IpAddr::V4(_) => self.prefix >= 32,
            IpAddr::V6(_) => self.prefix >= 128,
        }
    }
}

/// Whether the first `prefix` bits of `a` and `b` agree.
fn same_prefix(a: &[u8], b: &[u8], prefix: u8) -> bool {
    let bits = usize::from(prefix).min(a.len() * 8);
    let (full, rest) = (bits / 8, bits % 8);
    if a[..full] != b[..full] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    a[full] & mask == b[full] & mask
}

/// One local interface, as [`snapshot`] saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalIface {
    /// Name.
    pub name: String,
    /// Interface index.
    pub index: u32,
    /// Hardware address (`None` for interfaces without one, such as `lo` or tunnels).
    pub mac: Option<MacAddr>,
    /// Administratively up (`IFF_UP`) and operationally running (`IFF_RUNNING`: carrier).
    pub up: bool,
    /// The loopback interface.
    pub loopback: bool,
    /// IPv4 and IPv6 addresses.
    pub addrs: Vec<IfAddr>,
}

/// How to choose interfaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IfaceConfig {
    /// Only these interfaces (exact names, or globs where `*` matches any run of characters,
    /// such as `eth*`), in order of preference for the last-resort rule. Empty: any.
    pub allow: Vec<String>,
    /// The node's InternalIP addresses (one per family on dual-stack nodes).
    pub internal_ips: Vec<IpAddr>,
}

/// Why an interface was chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChoiceReason {
    /// Its subnet (of this prefix length) contains the VIP.
    Subnet(u8),
    /// It carries the node's InternalIP.
    InternalIp,
    /// The first configured interface that exists.
    AllowList,
}

/// The interface for a VIP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// Name, as the election core passes it around.
    pub iface: IfaceName,
    /// Index.
    pub index: u32,
    /// Hardware address, if any.
    pub mac: Option<MacAddr>,
    /// Why this one.
    pub reason: ChoiceReason,
}

/// No interface fits a VIP; the `Display` says why, for Events and logs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct NoInterface {
    /// The VIP.
    pub vip: IpAddr,
    /// Interfaces that were up, not loopback and allowed.
    pub candidates: Vec<String>,
    /// Interfaces left out because they were down.
    pub down: Vec<String>,
    /// The allow list, if any.
    pub allow: Vec<String>,
    /// The node's InternalIPs.
    pub internal_ips: Vec<IpAddr>,
}

impl fmt::Display for NoInterface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no interface to announce {} on: ", self.vip)?;
        if self.candidates.is_empty() {
            if self.allow.is_empty() {
                f.write_str("no interface is up (other than loopback)")?;
            } else {
                write!(f, "no interface matching {:?} is up", self.allow)?;
            }
            if !self.down.is_empty() {
                write!(f, " (down: {})", self.down.join(", "))?;
            }
            return Ok(());
        }
        write!(
            f,
            "none of {} has a subnet containing it",
            self.candidates.join(", ")
        )?;
        if self.internal_ips.is_empty() {
            f.write_str(", the node's InternalIP is unknown")
        } else {
            let ips: Vec<String> = self.internal_ips.iter().map(ToString::to_string).collect();
            write!(f, " or carries the node's InternalIP {}", ips.join(", "))
        }
    }
}

pub use crate::election::glob_match;

impl IfaceConfig {
    /// The position in the allow list of the first entry matching `name` (`Some(0)` if there
    /// is no allow list), or `None` if not allowed.
    fn rank(&self, name: &str) -> Option<usize> {
        if self.allow.is_empty() {
            return Some(0);
        }
        self.allow.iter().position(|p| glob_match(p, name))
    }
}

/// Chooses the interface for `vip`: among interfaces that are up, not loopback and allowed,
/// the one whose subnet contains the VIP (longest prefix first; host routes do not count),
/// else the one carrying the node's InternalIP (the VIP's family first), else, if an allow
/// list is configured, the first entry that exists. Ties go to allow-list order, then name.
pub fn choose(
    vip: IpAddr,
    ifaces: &[LocalIface],
    cfg: &IfaceConfig,
) -> Result<Choice, NoInterface> {
    let mut candidates: Vec<(usize, &LocalIface)> = ifaces
        .iter()
        .filter(|i| !i.loopback && i.up)
        .filter_map(|i| cfg.rank(&i.name).map(|r| (r, i)))
        .collect();
    candidates.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    let pick = |i: &LocalIface, reason| Choice {
        iface: IfaceName::from(i.name.as_str()),
        index: i.index,
        mac: i.mac,
        reason,
    };

    let subnet = |i: &LocalIface| {
        i.addrs
            .iter()
            .filter(|a| !a.is_host() && a.contains(vip))
            .map(|a| a.prefix)
            .max()
    };
    if let Some(prefix) = candidates.iter().filter_map(|(_, i)| subnet(i)).max() {
        let (_, first) = candidates
            .iter()
            .find(|(_, i)| subnet(i) == Some(prefix))
            .expect("the best prefix belongs to a candidate");
        return Ok(pick(first, ChoiceReason::Subnet(prefix)));
    }

    let mut internal = cfg.internal_ips.clone();
    internal.sort_by_key(|ip| ip.is_ipv4() != vip.is_ipv4()); // the VIP's family first
    for ip in &internal {
        if let Some((_, i)) = candidates
            .iter()
            .find(|(_, i)| i.addrs.iter().any(|a| a.ip == *ip))
        {
            return Ok(pick(i, ChoiceReason::InternalIp));
        }
    }

    if !cfg.allow.is_empty()
        && let Some((_, i)) = candidates.first()
    {
        return Ok(pick(i, ChoiceReason::AllowList));
    }

    Err(NoInterface {
        vip,
        candidates: candidates.iter().map(|(_, i)| i.name.clone()).collect(),
        down: ifaces
            .iter()
            .filter(|i| !i.loopback && !i.up && cfg.rank(&i.name).is_some())
            .map(|i| i.name.clone())
            .collect(),
        allow: cfg.allow.clone(),
        internal_ips: cfg.internal_ips.clone(),
    })
}

/// The links this node can announce on, as published in its Lease for peers: every interface
/// [`choose`] could pick, with its MAC and subnets; the fallback link is the one `choose` picks
/// for a VIP in no subnet (the InternalIP's, IPv4 first, else the first allowed). Peers rank
/// this node only for VIPs one of these links can announce, and probe the MAC that answers.
pub fn links(ifaces: &[LocalIface], cfg: &IfaceConfig) -> Vec<Link> {
    let mut candidates: Vec<(usize, &LocalIface)> = ifaces
        .iter()
        .filter(|i| !i.loopback && i.up && i.mac.is_some())
        .filter_map(|i| cfg.rank(&i.name).map(|r| (r, i)))
        .collect();
    candidates.sort_by(|a, b| (a.0, &a.1.name).cmp(&(b.0, &b.1.name)));
    let mut internal = cfg.internal_ips.clone();
    internal.sort_by_key(|ip| !ip.is_ipv4());
    let fallback = internal
        .iter()
        .find_map(|ip| {
            candidates
                .iter()
                .position(|(_, i)| i.addrs.iter().any(|a| a.ip == *ip))
        })
        .or_else(|| (!cfg.allow.is_empty() && !candidates.is_empty()).then_some(0));
    candidates
        .iter()
        .enumerate()
        .map(|(n, (_, i))| Link {
            name: Some(IfaceName::from(i.name.as_str())),
            mac: i.mac.expect("filtered"),
            subnets: i
                .addrs
                .iter()
                .filter(|a| !a.is_host())
                .map(|a| Subnet {
                    addr: a.ip,
                    prefix: a.prefix,
                })
                .collect(),
            fallback: fallback == Some(n),
            down: false,
        })
        .collect()
}

/// The node's `InternalIP` addresses from `status.addresses` (both families on dual-stack
/// nodes), in the order listed; entries that do not parse are skipped.
pub fn internal_ips(node: &Node) -> Vec<IpAddr> {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect()
}

/// The prefix length of a netmask, or `None` if its ones are not contiguous.
fn prefix_len(mask: &[u8]) -> Option<u8> {
    let ones: u32 = mask.iter().map(|b| b.count_ones()).sum();
    let full = ones as usize / 8;
    let rest = (ones % 8) as u8;
    let expect = |i: usize| match i.cmp(&full) {
        std::cmp::Ordering::Less => 0xff,
        std::cmp::Ordering::Equal if rest > 0 => 0xffu8 << (8 - rest),
        _ => 0,
    };
    mask.iter()
        .enumerate()
        .all(|(i, b)| *b == expect(i))
        .then_some(ones as u8)
}

/// The interfaces of the current network namespace, in the order the kernel lists them.
pub fn snapshot() -> Result<Vec<LocalIface>> {
    let addrs = nix::ifaddrs::getifaddrs()
        .map_err(|e| Error::io("listing interfaces", std::io::Error::from(e)))?;
    let mut out: Vec<LocalIface> = Vec::new();
    for a in addrs {
        let pos = match out.iter().position(|i| i.name == a.interface_name) {
            Some(p) => p,
            None => {
                out.push(LocalIface {
                    name: a.interface_name.clone(),
                    index: 0,
                    mac: None,
                    up: a
                        .flags
                        .contains(InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING),
                    loopback: a.flags.contains(InterfaceFlags::IFF_LOOPBACK),
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        let iface = &mut out[pos];
        let Some(addr) = &a.address else { continue };
        if let Some(ll) = addr.as_link_addr() {
            iface.index = u32::try_from(ll.ifindex()).unwrap_or(0);
            iface.mac = ll.addr().map(MacAddr).filter(|m| m.0 != [0; 6]);
            continue;
        }
        let mask = a.netmask.as_ref();
        let ip_prefix = if let Some(v4) = addr.as_sockaddr_in() {
            let p = mask
                .and_then(|m| m.as_sockaddr_in())
                .map(|m| m.ip().octets());
            (IpAddr::V4(v4.ip()), p.and_then(|m| prefix_len(&m)))
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            let p = mask
                .and_then(|m| m.as_sockaddr_in6())
                .map(|m| m.ip().octets());
            (IpAddr::V6(v6.ip()), p.and_then(|m| prefix_len(&m)))
        } else {
            continue;
        };
        if let (ip, Some(prefix)) = ip_prefix {
            iface.addrs.push(IfAddr { ip, prefix });
        }
    }
    for iface in &mut out {
        if iface.index == 0 {
            iface.index = netif::ifindex(&iface.name).unwrap_or(0);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    use super::*;

    fn iface(name: &str, up: bool, addrs: &[&str]) -> LocalIface {
        LocalIface {
            name: name.into(),
            index: name.len() as u32,
            mac: Some(MacAddr([2, 0, 0, 0, 0, name.len() as u8])),
            up,
            loopback: name == "lo",
            addrs: addrs
                .iter()
                .map(|a| {
                    let (ip, p) = a.split_once('/').unwrap();
                    IfAddr {
                        ip: ip.parse().unwrap(),
                        prefix: p.parse().unwrap(),
                    }
                })
                .collect(),
        }
    }

    fn host() -> Vec<LocalIface> {
        vec![
            iface("lo", true, &["127.0.0.1/8", "::1/128"]),
            iface(
                "eth0",
                true,
                &["192.168.1.10/24", "fd00:1::10/64", "fe80::1/64"],
            ),
            iface("eth1", true, &["10.0.0.2/16", "10.0.5.2/24"]),
            iface("eth2", false, &["172.16.0.2/24"]),
            iface("kube-ipvs0", true, &["10.1.0.5/32"]),
            iface("bond0", true, &[]),
        ]
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn name(c: &Result<Choice, NoInterface>) -> &str {
        &c.as_ref().unwrap().iface
    }

    #[test]
    fn published_links_answer_each_vip_with_the_mac_choose_picks() {
        let vips = [
            "192.168.1.200",
            "10.0.9.1",
            "10.0.5.77",
            "fd00:1::99",
            "203.0.113.5",
            "172.16.0.9",
        ];
        let configs = [
            IfaceConfig {
                internal_ips: vec![ip("192.168.1.10")],
                ..Default::default()
            },
            IfaceConfig {
                allow: vec!["eth1".into()],
                internal_ips: vec![ip("192.168.1.10")],
            },
            IfaceConfig::default(),
        ];
        for cfg in &configs {
            let links = links(&host(), cfg);
            for v in vips {
                let chosen = choose(ip(v), &host(), cfg).ok().and_then(|c| c.mac);
                assert_eq!(
                    Link::mac_for(&links, ip(v), &[]),
                    chosen,
                    "{v} with {cfg:?}"
                );
            }
        }
    }

    #[test]
    fn the_subnet_containing_the_vip_wins_longest_prefix_first() {
        let cfg = IfaceConfig {
            internal_ips: vec![ip("192.168.1.10")],
            ..Default::default()
        };
        let c = choose(ip("192.168.1.200"), &host(), &cfg);
        assert_eq!(name(&c), "eth0");
        assert_eq!(c.unwrap().reason, ChoiceReason::Subnet(24));
        assert_eq!(name(&choose(ip("10.0.9.1"), &host(), &cfg)), "eth1");
        let c = choose(ip("10.0.5.77"), &host(), &cfg).unwrap();
        assert_eq!((&*c.iface, c.reason), ("eth1", ChoiceReason::Subnet(24)));
        assert_eq!(name(&choose(ip("fd00:1::99"), &host(), &cfg)), "eth0");
    }

    #[test]
    fn otherwise_the_internal_ip_interface_of_the_vip_family_first() {
        let mut ifaces = host();
        ifaces.push(iface("eth3", true, &["fd00:9::3/64"]));
        let cfg = IfaceConfig {
            internal_ips: vec![ip("192.168.1.10"), ip("fd00:9::3")],
            ..Default::default()
        };
        let c = choose(ip("203.0.113.7"), &ifaces, &cfg).unwrap();
        assert_eq!((&*c.iface, c.reason), ("eth0", ChoiceReason::InternalIp));
        assert_eq!(c.mac, Some(MacAddr([2, 0, 0, 0, 0, 4])));
        assert_eq!(name(&choose(ip("2001:db8::7"), &ifaces, &cfg)), "eth3");
    }

    #[test]
    fn host_routes_down_links_and_loopback_never_match() {
        let cfg = IfaceConfig::default();
        // kube-ipvs0 carries the VIP as a /32; eth2's subnet matches but it is down; lo's /8.
        for vip in ["10.1.0.5", "172.16.0.9", "127.0.0.9"] {
            let err = choose(ip(vip), &host(), &cfg).unwrap_err();
            assert_eq!(err.down, vec!["eth2"], "{vip}");
        }
    }

    #[test]
    fn allow_list_restricts_candidates_and_is_the_last_resort() {
        let cfg = IfaceConfig {
            allow: vec!["bond*".into(), "eth1".into()],
            internal_ips: vec![ip("192.168.1.10")],
        };
        // eth0 holds the subnet but is not allowed; no allowed interface holds the InternalIP.
        let c = choose(ip("192.168.1.200"), &host(), &cfg).unwrap();
        assert_eq!((&*c.iface, c.reason), ("bond0", ChoiceReason::AllowList));
        // Subnets still win among the allowed.
        assert_eq!(name(&choose(ip("10.0.0.9"), &host(), &cfg)), "eth1");
    }

    #[test]
    fn no_interface_says_why() {
        let cfg = IfaceConfig {
            internal_ips: vec![ip("192.168.9.9")],
            ..Default::default()
        };
        let err = choose(ip("203.0.113.7"), &host(), &cfg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no interface to announce 203.0.113.7 on: none of bond0, eth0, eth1, kube-ipvs0 has a \
             subnet containing it or carries the node's InternalIP 192.168.9.9"
        );
        let cfg = IfaceConfig {
            allow: vec!["eth2".into(), "wlan*".into()],
            ..Default::default()
        };
        let err = choose(ip("172.16.0.9"), &host(), &cfg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no interface to announce 172.16.0.9 on: no interface matching [\"eth2\", \"wlan*\"] \
             is up (down: eth2)"
        );
    }

    #[test]
    fn globs() {
        assert!(glob_match("eth*", "eth0"));
        assert!(glob_match("eth*", "eth"));
        assert!(!glob_match("eth*", "veth0"));
        assert!(glob_match("*0", "bond0"));
        assert!(glob_match("en*s*", "enp3s0"));
        assert!(!glob_match("en*s*", "enp3"));
        assert!(glob_match("eth0", "eth0"));
        assert!(!glob_match("eth0", "eth0.100"));
        assert!(glob_match("a*a", "aa"));
        assert!(!glob_match("a*a", "a"));
        assert!(glob_match("*", "anything"));
    }

    #[test]
    fn subnet_containment() {
        let a = IfAddr {
            ip: ip("10.0.0.2"),
            prefix: 20,
        };
        assert!(a.contains(ip("10.0.15.255")));
        assert!(!a.contains(ip("10.0.16.0")));
        assert!(!a.contains(ip("::a00:2")));
        let b = IfAddr {
            ip: ip("fd00::1"),
            prefix: 0,
        };
        assert!(b.contains(ip("2001:db8::1")));
    }

    #[test]
    fn netmask_prefix_lengths() {
        assert_eq!(prefix_len(&[255, 255, 255, 0]), Some(24));
        assert_eq!(prefix_len(&[255, 255, 240, 0]), Some(20));
        assert_eq!(prefix_len(&[0; 4]), Some(0));
        assert_eq!(prefix_len(&[255; 16]), Some(128));
        assert_eq!(prefix_len(&[255, 0, 255, 0]), None);
    }

    #[test]
    fn internal_ips_of_a_dual_stack_node() {
        let addr = |t: &str, a: &str| NodeAddress {
            type_: t.into(),
            address: a.into(),
        };
        let node = Node {
            status: Some(NodeStatus {
                addresses: Some(vec![
                    addr("Hostname", "node-a"),
                    addr("ExternalIP", "203.0.113.1"),
                    addr("InternalIP", "192.168.1.10"),
                    addr("InternalIP", "fd00:1::10"),
                    addr("InternalIP", "not-an-ip"),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            internal_ips(&node),
            vec![ip("192.168.1.10"), ip("fd00:1::10")]
        );
        assert!(internal_ips(&Node::default()).is_empty());
    }

    #[test]
    fn snapshot_sees_loopback() {
        let ifaces = snapshot().unwrap();
        let lo = ifaces.iter().find(|i| i.name == "lo").expect("lo exists");
        assert!(lo.loopback);
        assert!(lo.index > 0);
        assert!(lo.addrs.contains(&IfAddr {
            ip: ip("127.0.0.1"),
            prefix: 8
        }));
    }
}

//! Solicited-node multicast memberships for IPv6 VIPs: what lets a Neighbor Solicitation for
//! a VIP reach the XDP program at all.
//!
//! Why: a host resolving a VIP sends its NS to the VIP's solicited-node group
//! (`ff02::1:ffXX:XXXX`, the low 24 bits of the address; RFC 4291 §2.7.1, RFC 4861 §7.2.1).
//! XDP runs after the NIC's multicast filter, and a switch doing MLD snooping forwards such a
//! frame only to ports that reported the group. Nothing reports a VIP's group (the kernel does
//! only for its own addresses), so without a membership the solicitation is dropped before
//! the program sees it. Joining with `IPV6_ADD_MEMBERSHIP` makes the kernel send MLD reports
//! (and answer queries) and add the group's MAC (`33:33:ff:XX:XX:XX`) to the device's filter,
//! which `ip maddr show` lists; the interface stays neither promiscuous nor allmulti.
//!
//! One UDP socket per interface holds the memberships (it is bound to no port, so it never
//! receives a datagram). VIPs sharing the low 24 bits share a group: the group is joined for
//! the first and left with the last ([`Memberships`] counts them). A membership lives as
//! long as the socket: when the process exits the kernel leaves the group (MLD Done), and a
//! restarted agent joins again for the entries it finds in the pinned maps; see
//! `docs/design.md` ("Solicited-node groups") for what a restart costs behind a snooping switch.
//!
//! Each join or leave is one `setsockopt`, cheap enough for the event loop.

use std::{
    collections::{BTreeMap, BTreeSet},
    io,
    net::{IpAddr, Ipv6Addr},
    os::fd::{AsRawFd, OwnedFd},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};

use crate::dataplane::{
    error::{Error, Result},
    sys::{netif, packet},
};

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1): `ff02::1:ff00:0/104`
/// with the low 24 bits of `addr`.
pub fn solicited_node(addr: Ipv6Addr) -> Ipv6Addr {
    Ipv6Addr::from(announcer_ebpf::wire::solicited_node(&addr.octets()))
}

/// Counters for the metrics endpoint (read at scrape time).
#[derive(Debug, Default)]
pub struct MembershipStats {
    /// Groups joined now, over all interfaces.
    pub groups: AtomicU64,
    /// Joins that failed (the VIP is answered, but NS may not reach the program).
    pub join_failures: AtomicU64,
    /// Leaves that failed (the group stays joined until the agent exits).
    pub leave_failures: AtomicU64,
}

/// One interface's memberships.
#[derive(Debug)]
struct IfaceGroups {
    sock: OwnedFd,
    /// Per group joined: the interface index it was joined on, and the VIPs that need it.
    groups: BTreeMap<Ipv6Addr, (u32, BTreeSet<Ipv6Addr>)>,
}

/// The solicited-node groups joined for the owned IPv6 VIPs, per interface, counted by VIP.
#[derive(Debug, Default)]
pub struct Memberships {
    ifaces: BTreeMap<String, IfaceGroups>,
    stats: Arc<MembershipStats>,
}

impl Memberships {
    /// No memberships yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters (shared: clone the `Arc` into the metrics collector).
    pub fn stats(&self) -> Arc<MembershipStats> {
        self.stats.clone()
    }

    /// `vip` is answered on `iface`: joins its solicited-node group there unless another VIP
    /// of the group already did. Returns whether a group was joined now. IPv4 addresses and
    /// VIPs already counted are no-ops (`Ok(false)`), so calling it on every refresh costs a
    /// map lookup and retries a join that failed before.
    pub fn join(&mut self, iface: &str, vip: IpAddr) -> Result<bool> {
        let IpAddr::V6(vip) = vip else {
            return Ok(false);
        };
        let group = solicited_node(vip);
        if let Some(g) = self
            .ifaces
            .get_mut(iface)
            .and_then(|i| i.groups.get_mut(&group))
        {
            g.1.insert(vip);
            return Ok(false);
        }
        let r = self.join_group(iface, group, vip);
        if r.is_err() {
            self.stats.join_failures.fetch_add(1, Ordering::Relaxed);
        }
        r.map(|()| true)
    }

    fn join_group(&mut self, iface: &str, group: Ipv6Addr, vip: Ipv6Addr) -> Result<()> {
        let ifindex = netif::ifindex(iface)?;
        if !self.ifaces.contains_key(iface) {
            let sock = socket::socket(
                AddressFamily::Inet6,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                None,
            )
            .map_err(|e| {
                Error::io(
                    format!("opening the multicast membership socket for {iface}"),
                    io::Error::from(e),
                )
            })?;
            self.ifaces.insert(
                iface.to_owned(),
                IfaceGroups {
                    sock,
                    groups: BTreeMap::new(),
                },
            );
        }
        let i = self.ifaces.get_mut(iface).expect("inserted");
        match membership(&i.sock, libc::IPV6_ADD_MEMBERSHIP, group, ifindex) {
            // Already a member through this socket: nothing to undo.
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => {}
            Err(e) => {
                return Err(Error::io(
                    format!("joining {group} on {iface} (for {vip})"),
                    e,
                ));
            }
        }
        i.groups.insert(group, (ifindex, BTreeSet::from([vip])));
        self.stats.groups.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%iface, %group, %vip, "joined the solicited-node group");
        Ok(())
    }

    /// `vip` is no longer answered on `iface`: leaves its group if no other VIP needs it.
    /// Returns whether a group was left now (`Ok(false)` for IPv4 and for VIPs never joined).
    pub fn leave(&mut self, iface: &str, vip: IpAddr) -> Result<bool> {
        let IpAddr::V6(vip) = vip else {
            return Ok(false);
        };
        let group = solicited_node(vip);
        let Some(i) = self.ifaces.get_mut(iface) else {
            return Ok(false);
        };
        let Some((ifindex, vips)) = i.groups.get_mut(&group) else {
            return Ok(false);
        };
        if !vips.remove(&vip) || !vips.is_empty() {
            return Ok(false);
        }
        let ifindex = *ifindex;
        i.groups.remove(&group);
        self.stats.groups.fetch_sub(1, Ordering::Relaxed);
        let r = membership(&i.sock, libc::IPV6_DROP_MEMBERSHIP, group, ifindex);
        if i.groups.is_empty() {
            // Closing the socket would leave anyway; no socket is kept for an idle interface.
            self.ifaces.remove(iface);
        }
        match r {
            Ok(()) => {
                tracing::debug!(%iface, %group, %vip, "left the solicited-node group");
                Ok(true)
            }
            // The interface went away, and the membership with it.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENODEV | libc::EADDRNOTAVAIL)) => {
                Ok(true)
            }
            Err(e) => {
                self.stats.leave_failures.fetch_add(1, Ordering::Relaxed);
                Err(Error::io(
                    format!("leaving {group} on {iface} (for {vip})"),
                    e,
                ))
            }
        }
    }

    /// The groups joined on `iface`, sorted.
    pub fn groups(&self, iface: &str) -> Vec<Ipv6Addr> {
        self.ifaces
            .get(iface)
            .map(|i| i.groups.keys().copied().collect())
            .unwrap_or_default()
    }
}

/// `IPV6_ADD_MEMBERSHIP` / `IPV6_DROP_MEMBERSHIP` of `group` on interface `ifindex`.
fn membership(sock: &impl AsRawFd, op: i32, group: Ipv6Addr, ifindex: u32) -> io::Result<()> {
    let mreq = libc::ipv6_mreq {
        ipv6mr_multiaddr: libc::in6_addr {
            s6_addr: group.octets(),
        },
        ipv6mr_interface: ifindex,
    };
    packet::setsockopt(sock, libc::IPPROTO_IPV6, op, &mreq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solicited_node_keeps_the_low_24_bits() {
        let vip: Ipv6Addr = "fd77::ab:cdef".parse().unwrap();
        assert_eq!(
            solicited_node(vip),
            "ff02::1:ffab:cdef".parse::<Ipv6Addr>().unwrap()
        );
    }

    #[test]
    fn ipv4_and_unknown_vips_are_no_ops() {
        let mut m = Memberships::new();
        assert!(!m.join("eth0", "10.0.0.1".parse().unwrap()).unwrap());
        assert!(!m.leave("eth0", "fd77::1".parse().unwrap()).unwrap());
        assert!(m.groups("eth0").is_empty());
    }
}

//! Raw ARP/NDP from the client: every MAC that claims a VIP, for many VIPs at once.
//!
//! Why raw frames and not `arping`/`ndisc6`: the question "how many nodes answer for this
//! VIP" needs *every* reply in a window, for several VIPs in the same second (a clock or
//! election fault shows as two MACs for the same VIP). One `AF_PACKET` socket per client
//! interface sends a broadcast ARP request (IPv4) or a multicast Neighbor Solicitation (IPv6)
//! for each VIP a few times across the window and collects every ARP reply / Neighbor
//! Advertisement that names one of them, whoever it was addressed to.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::{IpAddr, Ipv4Addr, Ipv6Addr},
    time::{Duration, Instant},
};

use announcer_ebpf::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetFrame, Ipv6Packet, MacAddr, NdiscPacket, NdiscRepr,
    ethernet::ethertype, frame,
};

use super::{
    CLIENT_MAC, CLIENT_V4, CLIENT_V6, CLIENT2_MAC, CLIENT2_V4, CLIENT2_V6, IFACE, IFACE2, Testbed,
};
use crate::{
    env::packet::PacketSocket,
    frames::{write_arp_request, write_ns_multicast},
};

/// What [`Testbed::resolve_all`] returns: every distinct MAC that claimed each VIP, sorted.
pub type Answers = BTreeMap<IpAddr, Vec<[u8; 6]>>;

/// VIPs to resolve on one client interface, with the client's MAC and addresses there.
type Group = (Vec<IpAddr>, [u8; 6], Ipv4Addr, Ipv6Addr);

/// `ETH_P_ALL`.
const ETH_P_ALL: u16 = 0x0003;
/// Requests per VIP in one window.
const ROUNDS: u32 = 3;

/// Whether `vip` is in the second NIC's subnet (10.79.0.0/16, fd79::/64).
pub fn on_second_nic(vip: IpAddr) -> bool {
    match vip {
        IpAddr::V4(v4) => v4.octets()[..2] == [10, 79],
        IpAddr::V6(v6) => v6.segments()[..4] == [0xfd79, 0, 0, 0],
    }
}

/// The client interface a VIP is resolved on, with the client's MAC and addresses there.
fn client_side(vip: IpAddr) -> (&'static str, [u8; 6], Ipv4Addr, Ipv6Addr) {
    if on_second_nic(vip) {
        (IFACE2, CLIENT2_MAC, CLIENT2_V4, CLIENT2_V6)
    } else {
        (IFACE, CLIENT_MAC, CLIENT_V4, CLIENT_V6)
    }
}

/// The VIP an ARP reply or Neighbor Advertisement claims, and the MAC it claims it for.
pub fn claim(frame: &[u8]) -> Option<(IpAddr, [u8; 6])> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    match eth.ethertype() {
        ethertype::ARP => {
            let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
            (arp.operation == ArpOperation::Reply)
                .then_some((arp.sender_ip.into(), arp.sender_mac.0))
        }
        ethertype::IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            let nd = NdiscPacket::new_checked(ip.payload()).ok()?;
            match NdiscRepr::parse(&nd).ok()? {
                NdiscRepr::NeighborAdvert { target, lladdr, .. } => {
                    Some((target.into(), lladdr.unwrap_or(eth.src()).0))
                }
                NdiscRepr::NeighborSolicit { .. } => None,
            }
        }
        _ => None,
    }
}

/// On the calling thread (inside the client namespace): resolves `vips` on `ifname`.
fn resolve_on(
    ifname: &str,
    mac: [u8; 6],
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    vips: &[IpAddr],
    window: Duration,
) -> BTreeMap<IpAddr, BTreeSet<[u8; 6]>> {
    let sock = PacketSocket::open(ifname, ETH_P_ALL)
        .unwrap_or_else(|e| panic!("AF_PACKET socket on the client's {ifname}: {e:#}"));
    sock.set_recv_timeout(Duration::from_millis(10))
        .expect("receive timeout");
    let wanted: BTreeSet<IpAddr> = vips.iter().copied().collect();
    let mut out: BTreeMap<IpAddr, BTreeSet<[u8; 6]>> =
        vips.iter().map(|v| (*v, BTreeSet::new())).collect();
    let start = Instant::now();
    let mut sent_rounds = 0;
    let mut buf = [0u8; 2048];
    let mut req = [0u8; frame::MAX_FRAME];
    loop {
        let now = start.elapsed();
        if now >= window {
            break;
        }
        if sent_rounds < ROUNDS && now >= window * sent_rounds / ROUNDS {
            for vip in vips {
                let (n, proto) = match *vip {
                    IpAddr::V4(t) => (
                        write_arp_request(&mut req, MacAddr(mac), v4, t, None),
                        ethertype::ARP,
                    ),
                    IpAddr::V6(t) => (
                        write_ns_multicast(&mut req, MacAddr(mac), v6, t, Some(MacAddr(mac))),
                        ethertype::IPV6,
                    ),
                };
                let _ = sock.send(&req[..n], proto);
            }
            sent_rounds += 1;
        }
        if let Ok(Some(n)) = sock.recv(&mut buf)
            && let Some((vip, m)) = claim(&buf[..n])
            && wanted.contains(&vip)
            && m != mac
        {
            out.entry(vip).or_default().insert(m);
        }
    }
    out
}

impl Testbed {
    /// From the client, asks ARP (IPv4) / NDP (IPv6) for every VIP in `vips` a few times
    /// during `window` (each on the client interface of its subnet: `eth1` for the second
    /// NIC's VIPs) and returns every distinct MAC that claimed each VIP, sorted (empty: no
    /// answer).
    pub fn resolve_all(&self, vips: &[IpAddr], window: Duration) -> Answers {
        let mut groups: BTreeMap<&'static str, Group> = BTreeMap::new();
        for &vip in vips {
            let (ifname, mac, v4, v6) = client_side(vip);
            groups
                .entry(ifname)
                .or_insert_with(|| (Vec::new(), mac, v4, v6))
                .0
                .push(vip);
        }
        let ns = &self.client;
        let results: Vec<BTreeMap<IpAddr, BTreeSet<[u8; 6]>>> = std::thread::scope(|s| {
            let handles: Vec<_> = groups
                .iter()
                .map(|(ifname, (vips, mac, v4, v6))| {
                    let file = ns.open();
                    s.spawn(move || {
                        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                            .expect("setns into the client namespace");
                        drop(file);
                        resolve_on(ifname, *mac, *v4, *v6, vips, window)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        results
            .into_iter()
            .flatten()
            .map(|(vip, macs)| (vip, macs.into_iter().collect()))
            .collect()
    }

    /// The node names for MACs (`unknown xx:..` for a MAC of no node).
    pub fn names_of_macs(&self, macs: &[[u8; 6]]) -> Vec<String> {
        macs.iter()
            .map(|m| {
                self.node_by_mac(*m)
                    .unwrap_or_else(|| format!("unknown {}", crate::netns::fmt_mac(*m)))
            })
            .collect()
    }
}

/// When each VIP was first answered, after the start of [`Testbed::first_answers`], and by
/// which MAC (`None`: never within the window).
pub type FirstAnswers = BTreeMap<IpAddr, Option<(Duration, [u8; 6])>>;

impl Testbed {
    /// From the client's `eth0`, asks ARP for every IPv4 VIP in `vips` every `every` for
    /// `window`, a fresh broadcast request each time, and records for each VIP the first
    /// reply *addressed to the client* (an answer to our request, not a gratuitous ARP) from a
    /// MAC other than `except`: how long after `t0` it arrived, and the MAC. What a data plane
    /// answers now, not what a cache remembers. Runs on a thread of its own (join it for the
    /// answers), so the failure can be caused meanwhile.
    pub fn first_answers(
        &self,
        vips: &[IpAddr],
        except: [u8; 6],
        t0: Instant,
        every: Duration,
        window: Duration,
    ) -> std::thread::JoinHandle<FirstAnswers> {
        let file = self.client.open();
        let vips = vips.to_vec();
        std::thread::spawn(move || {
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("setns into the client namespace");
            drop(file);
            first_answers_on(&vips, except, t0, every, window)
        })
    }
}

/// [`Testbed::first_answers`] on the calling thread, inside the client namespace.
fn first_answers_on(
    vips: &[IpAddr],
    except: [u8; 6],
    t0: Instant,
    every: Duration,
    window: Duration,
) -> FirstAnswers {
    let sock = PacketSocket::open(IFACE, ETH_P_ALL)
        .unwrap_or_else(|e| panic!("AF_PACKET socket on the client's {IFACE}: {e:#}"));
    sock.set_recv_timeout(Duration::from_millis(2))
        .expect("receive timeout");
    let mut out: FirstAnswers = vips.iter().map(|v| (*v, None)).collect();
    let mut buf = [0u8; 2048];
    let mut req = [0u8; frame::MAX_FRAME];
    let start = Instant::now();
    let mut next_round = start;
    while start.elapsed() < window && out.values().any(Option::is_none) {
        if Instant::now() >= next_round {
            for (vip, _) in out.iter().filter(|(_, a)| a.is_none()) {
                let IpAddr::V4(t) = *vip else {
                    panic!("first_answers asks IPv4 VIPs only, not {vip}");
                };
                let n = write_arp_request(&mut req, MacAddr(CLIENT_MAC), CLIENT_V4, t, None);
                let _ = sock.send(&req[..n], ethertype::ARP);
            }
            next_round += every;
        }
        if let Ok(Some(n)) = sock.recv(&mut buf)
            && EthernetFrame::new_checked(&buf[..n]).is_ok_and(|e| e.dst().0 == CLIENT_MAC)
            && let Some((vip, m)) = claim(&buf[..n])
            && m != except
            && m != CLIENT_MAC
            && let Some(slot @ None) = out.get_mut(&vip)
        {
            *slot = Some((t0.elapsed(), m));
        }
    }
    out
}

//! Request frames as clients send them, built with the shared wire code.

use std::net::{Ipv4Addr, Ipv6Addr};

use announcer_ebpf::wire::{
    ArpOperation, ArpRepr, EthernetRepr, MacAddr, NdiscRepr, frame, solicited_node,
};

/// The client's MAC in these frames.
pub const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 0x02]);
/// The MAC VIPs answer with in these tests.
pub const VIP_MAC: MacAddr = MacAddr([0x02, 0x0a, 0, 0, 0, 0x01]);

/// The Ethernet header of a frame from `src` to `dst` (the writer fills in the EtherType).
fn ether(src: MacAddr, dst: MacAddr, vlan: Option<u16>) -> EthernetRepr {
    EthernetRepr {
        src,
        dst,
        vlan,
        ethertype: 0,
    }
}

/// The frame `write` writes into a buffer of [`frame::MAX_FRAME`] bytes (returning its length).
fn built(write: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut buf = [0u8; frame::MAX_FRAME];
    let n = write(&mut buf);
    buf[..n].to_vec()
}

/// Writes a Neighbor Solicitation for `target` (IPv6 `src` → `dst`, Source Link-Layer Address
/// option `sllao`, Nonce option `nonce`) under `eth` into `buf`; returns its length.
fn write_ns(
    buf: &mut [u8],
    eth: &EthernetRepr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    sllao: Option<MacAddr>,
    nonce: Option<[u8; 8]>,
) -> usize {
    let ns = NdiscRepr::NeighborSolicit {
        target,
        lladdr: sllao,
        nonce,
    };
    frame::ndisc(buf, eth, src, dst, &ns)
}

/// A broadcast ARP request from `sender` for `target`.
pub fn arp_request(sender: Ipv4Addr, target: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    built(|buf| write_arp_request(buf, CLIENT_MAC, sender, target, vlan))
}

/// Writes a broadcast ARP request from `mac`/`sender` for `target` into `buf` (at least
/// [`frame::MAX_FRAME`] bytes); returns its length. For loops that must not allocate.
pub fn write_arp_request(
    buf: &mut [u8],
    mac: MacAddr,
    sender: Ipv4Addr,
    target: Ipv4Addr,
    vlan: Option<u16>,
) -> usize {
    frame::arp(
        buf,
        &ether(mac, MacAddr::BROADCAST, vlan),
        &ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: mac,
            sender_ip: sender,
            target_mac: MacAddr::ZERO,
            target_ip: target,
        },
    )
}

/// An NS for `target` from `src` to the solicited-node address, with a Source Link-Layer
/// Address option, as a host resolving an address sends it.
pub fn ns_multicast(src: Ipv6Addr, target: Ipv6Addr, vlan: Option<u16>) -> Vec<u8> {
    let dst = Ipv6Addr::from(solicited_node(&target.octets()));
    ns(src, dst, target, Some(CLIENT_MAC), vlan)
}

/// A liveness probe as the agent sends it: a unicast NS for `target` from `src` to the VIP's
/// MAC, with a Source Link-Layer Address option (if `sllao`) and `nonce` in a Nonce option
/// (RFC 3971 §5.3.2).
pub fn ns_probe(
    src: Ipv6Addr,
    target: Ipv6Addr,
    sllao: Option<MacAddr>,
    vlan: Option<u16>,
    nonce: [u8; 8],
) -> Vec<u8> {
    let eth = ether(CLIENT_MAC, VIP_MAC, vlan);
    built(|buf| write_ns(buf, &eth, src, target, target, sllao, Some(nonce)))
}

/// A DAD probe for `target` (source ::, no SLLAO, RFC 4862 §5.4.2).
pub fn ns_dad(target: Ipv6Addr, vlan: Option<u16>) -> Vec<u8> {
    let dst = Ipv6Addr::from(solicited_node(&target.octets()));
    ns(Ipv6Addr::UNSPECIFIED, dst, target, None, vlan)
}

/// Any NS; the Ethernet destination follows the IPv6 destination.
pub fn ns(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    target: Ipv6Addr,
    sllao: Option<MacAddr>,
    vlan: Option<u16>,
) -> Vec<u8> {
    let edst = if dst.is_multicast() {
        MacAddr::from_ipv6_multicast(&dst.octets())
    } else {
        VIP_MAC
    };
    let eth = ether(CLIENT_MAC, edst, vlan);
    built(|buf| write_ns(buf, &eth, src, dst, target, sllao, None))
}

/// Writes an ARP reply into `buf` (at least [`frame::MAX_FRAME`] bytes) from Ethernet `src` to
/// `dst`, claiming `sender_ip` is at `sender_mac`, addressed to `target_mac`/`target_ip`;
/// returns its length. The sender fields need not be the Ethernet source's: that is how a
/// forged reply looks.
pub fn write_arp_reply(
    buf: &mut [u8],
    src: MacAddr,
    dst: MacAddr,
    sender_mac: MacAddr,
    sender_ip: Ipv4Addr,
    target_mac: MacAddr,
    target_ip: Ipv4Addr,
) -> usize {
    frame::arp(
        buf,
        &ether(src, dst, None),
        &ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac,
            sender_ip,
            target_mac,
            target_ip,
        },
    )
}

/// Writes a Neighbor Advertisement into `buf` (at least [`frame::MAX_FRAME`] bytes): Ethernet
/// `src` → `dst`, IPv6 `ip_src` → `ip_dst`, "`target` is at `lladdr`" (Target Link-Layer
/// Address option) with the given flags; returns its length.
#[allow(clippy::too_many_arguments)]
pub fn write_na(
    buf: &mut [u8],
    src: MacAddr,
    dst: MacAddr,
    ip_src: Ipv6Addr,
    ip_dst: Ipv6Addr,
    target: Ipv6Addr,
    lladdr: Option<MacAddr>,
    flags: announcer_ebpf::wire::NaFlags,
) -> usize {
    let na = NdiscRepr::NeighborAdvert {
        flags,
        target,
        lladdr,
        nonce: None,
    };
    frame::ndisc(buf, &ether(src, dst, None), ip_src, ip_dst, &na)
}

/// Writes a multicast Neighbor Solicitation for `target` from `mac`/`src` (to the
/// solicited-node group, with a Source Link-Layer Address option `sllao`) into `buf`; returns
/// its length.
pub fn write_ns_multicast(
    buf: &mut [u8],
    mac: MacAddr,
    src: Ipv6Addr,
    target: Ipv6Addr,
    sllao: Option<MacAddr>,
) -> usize {
    let dst = Ipv6Addr::from(solicited_node(&target.octets()));
    let eth = ether(mac, MacAddr::from_ipv6_multicast(&dst.octets()), None);
    write_ns(buf, &eth, src, dst, target, sllao, None)
}

/// Writes an Ethernet + IPv4 + UDP frame (`src_ip:src_port` → `dst_ip:dst_port`, UDP checksum
/// 0, which IPv4 allows) carrying `payload` into `buf`; returns its length (padded to
/// [`frame::MIN_FRAME`]).
///
/// # Panics
/// If `buf` is shorter than `42 + payload.len()` bytes (or 60).
#[allow(clippy::too_many_arguments)]
pub fn write_udp4(
    buf: &mut [u8],
    src: MacAddr,
    dst: MacAddr,
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    payload: &[u8],
) -> usize {
    let n = EthernetRepr {
        src,
        dst,
        vlan: None,
        ethertype: announcer_ebpf::wire::ethernet::ethertype::IPV4,
    }
    .emit(buf);
    let total = 20 + 8 + payload.len();
    let ip = &mut buf[n..n + 20];
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    ip[4..8].copy_from_slice(&[0, 0, 0x40, 0]); // id 0, DF
    ip[8] = 64;
    ip[9] = 17;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&src_ip.octets());
    ip[16..20].copy_from_slice(&dst_ip.octets());
    let mut sum: u32 = ip
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    let udp = &mut buf[n + 20..n + 28];
    udp[0..2].copy_from_slice(&src_port.to_be_bytes());
    udp[2..4].copy_from_slice(&dst_port.to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    udp[6..8].fill(0);
    buf[n + 28..n + 28 + payload.len()].copy_from_slice(payload);
    let len = n + total;
    if len < frame::MIN_FRAME {
        buf[len..frame::MIN_FRAME].fill(0);
        frame::MIN_FRAME
    } else {
        len
    }
}

/// A forged ARP reply "`vip` is-at `claimed`", sent unicast to `to_mac`/`to_ip` with Ethernet
/// source `claimed` (as a spoofer impersonating a dead owner writes it), and `trailer` in the
/// Ethernet padding right after the ARP packet (where a probe's nonce sits).
pub fn forged_arp_reply(
    claimed: MacAddr,
    vip: Ipv4Addr,
    to_mac: MacAddr,
    to_ip: Ipv4Addr,
    trailer: [u8; 8],
) -> Vec<u8> {
    built(|buf| {
        let n = write_arp_reply(buf, claimed, to_mac, claimed, vip, to_mac, to_ip);
        buf[42..50].copy_from_slice(&trailer);
        n
    })
}

/// A forged solicited Neighbor Advertisement "`vip` is-at `claimed`" (TLLAO `claimed`,
/// Ethernet source `claimed`) to `to_mac`/`to_ip`, carrying `guess` where a probe's nonce sits
/// (a Nonce option, RFC 3971 §5.3.2).
pub fn forged_na(
    claimed: MacAddr,
    vip: Ipv6Addr,
    to_mac: MacAddr,
    to_ip: Ipv6Addr,
    guess: [u8; 8],
) -> Vec<u8> {
    let na = NdiscRepr::NeighborAdvert {
        flags: announcer_ebpf::wire::NaFlags {
            router: false,
            solicited: true,
            override_: true,
        },
        target: vip,
        lladdr: Some(claimed),
        nonce: Some(guess),
    };
    built(|buf| frame::ndisc(buf, &ether(claimed, to_mac, None), vip, to_ip, &na))
}

//! Request frames as clients send them, built with the shared wire code.

use std::net::{Ipv4Addr, Ipv6Addr};

use announcer_ebpf::wire::{
    ArpOperation, ArpRepr, EthernetRepr, MacAddr, NdiscRepr, frame, solicited_node,
};

/// The client's MAC in these frames.
pub const CLIENT_MAC: MacAddr = MacAddr([0x02, 0xc1, 0, 0, 0, 0x02]);
/// The MAC VIPs answer with in these tests.
pub const VIP_MAC: MacAddr = MacAddr([0x02, 0x0a, 0, 0, 0, 0x01]);

fn eth(dst: MacAddr, vlan: Option<u16>) -> EthernetRepr {
    EthernetRepr {
        src: CLIENT_MAC,
        dst,
        vlan,
        ethertype: 0,
    }
}

/// A broadcast ARP request from `sender` for `target`.
pub fn arp_request(sender: Ipv4Addr, target: Ipv4Addr, vlan: Option<u16>) -> Vec<u8> {
    let mut buf = [0u8; frame::MAX_FRAME];
    let n = write_arp_request(&mut buf, CLIENT_MAC, sender, target, vlan);
    buf[..n].to_vec()
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
        &EthernetRepr {
            src: mac,
            dst: MacAddr::BROADCAST,
            vlan,
            ethertype: 0,
        },
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
    let mut buf = [0u8; frame::MAX_FRAME];
    let n = frame::ndisc(
        &mut buf,
        &eth(edst, vlan),
        src,
        dst,
        &NdiscRepr::NeighborSolicit {
            target,
            lladdr: sllao,
        },
    );
    buf[..n].to_vec()
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
    let mut buf = [0u8; frame::MAX_FRAME];
    let n = frame::arp(
        &mut buf,
        &EthernetRepr {
            src: claimed,
            dst: to_mac,
            vlan: None,
            ethertype: 0,
        },
        &ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac: claimed,
            sender_ip: vip,
            target_mac: to_mac,
            target_ip: to_ip,
        },
    );
    buf[42..50].copy_from_slice(&trailer);
    buf[..n].to_vec()
}

/// A forged solicited Neighbor Advertisement "`vip` is-at `claimed`" (TLLAO `claimed`,
/// Ethernet source `claimed`) to `to_mac`/`to_ip`, followed by `trailer` after the IPv6
/// payload (where a probe's nonce sits).
pub fn forged_na(
    claimed: MacAddr,
    vip: Ipv6Addr,
    to_mac: MacAddr,
    to_ip: Ipv6Addr,
    trailer: [u8; 8],
) -> Vec<u8> {
    let mut buf = [0u8; frame::MAX_FRAME];
    let n = frame::ndisc(
        &mut buf,
        &EthernetRepr {
            src: claimed,
            dst: to_mac,
            vlan: None,
            ethertype: 0,
        },
        vip,
        to_ip,
        &NdiscRepr::NeighborAdvert {
            flags: announcer_ebpf::wire::NaFlags {
                router: false,
                solicited: true,
                override_: true,
            },
            target: vip,
            lladdr: Some(claimed),
        },
    );
    let mut f = buf[..n].to_vec();
    f.extend_from_slice(&trailer);
    f
}

//! Whole Ethernet frames: ARP and Neighbor Discovery messages with their L2 (and L3) headers.
//!
//! Used by the agent for its announcements and by the tests to build requests and check answers.

use core::net::Ipv6Addr;

use super::{
    ArpRepr, EthernetRepr, Header, Ipv6Repr, NdiscRepr,
    ethernet::ethertype,
    ipv6::{Ipv6Hdr, NEXT_HEADER_ICMPV6},
    ndisc::{self, HOP_LIMIT},
};

/// Shortest Ethernet frame without FCS; shorter frames are zero-padded to it (IEEE 802.3).
pub const MIN_FRAME: usize = 60;

/// A buffer big enough for any frame built here.
pub const MAX_FRAME: usize = 128;

/// Builds `eth` + `arp` into `buf` (the EtherType of `eth` is forced to ARP), zero-padded to
/// [`MIN_FRAME`]. Returns the frame length.
///
/// # Panics
/// If `buf` is shorter than the frame.
pub fn arp(buf: &mut [u8], eth: &EthernetRepr, arp: &ArpRepr) -> usize {
    let eth = EthernetRepr {
        ethertype: ethertype::ARP,
        ..*eth
    };
    let off = eth.emit(buf);
    arp.emit(&mut buf[off..]);
    let len = off + arp.buffer_len();
    pad(buf, len)
}

/// Builds `eth` + IPv6 (`src` → `dst`, hop limit 255) + `nd` with its checksum into `buf`.
/// Returns the frame length.
///
/// # Panics
/// If `buf` is shorter than the frame.
pub fn ndisc(
    buf: &mut [u8],
    eth: &EthernetRepr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    nd: &NdiscRepr,
) -> usize {
    let eth = EthernetRepr {
        ethertype: ethertype::IPV6,
        ..*eth
    };
    let off = eth.emit(buf);
    let len = nd.buffer_len();
    Ipv6Repr {
        src,
        dst,
        next_header: NEXT_HEADER_ICMPV6,
        payload_len: len as u16,
        hop_limit: HOP_LIMIT,
    }
    .emit(&mut buf[off..]);
    let icmp = off + Ipv6Hdr::LEN;
    nd.emit(&mut buf[icmp..icmp + len]);
    ndisc::fill_checksum(&mut buf[icmp..icmp + len], &src, &dst);
    pad(buf, icmp + len)
}

fn pad(buf: &mut [u8], len: usize) -> usize {
    if len < MIN_FRAME {
        buf[len..MIN_FRAME].fill(0);
        MIN_FRAME
    } else {
        len
    }
}

#[cfg(test)]
mod tests {
    use core::net::Ipv4Addr;

    use proptest::prelude::*;

    use super::*;
    use crate::wire::{
        ArpOperation, ArpPacket, EthernetFrame, Ipv6Packet, MacAddr, NaFlags, NdiscPacket,
    };

    fn mac() -> impl Strategy<Value = MacAddr> {
        any::<[u8; 6]>().prop_map(MacAddr)
    }

    fn eth() -> impl Strategy<Value = EthernetRepr> {
        (mac(), mac(), proptest::option::of(0u16..4095)).prop_map(|(src, dst, vlan)| EthernetRepr {
            src,
            dst,
            vlan,
            ethertype: 0,
        })
    }

    proptest! {
        #[test]
        fn arp_frames_round_trip(eth in eth(), op in 0u16..4, sm in mac(), tm in mac(),
                                 si in any::<[u8; 4]>(), ti in any::<[u8; 4]>()) {
            let repr = ArpRepr {
                operation: ArpOperation::from(op),
                sender_mac: sm, sender_ip: Ipv4Addr::from(si),
                target_mac: tm, target_ip: Ipv4Addr::from(ti),
            };
            let mut buf = [0u8; MAX_FRAME];
            let n = arp(&mut buf, &eth, &repr);
            prop_assert_eq!(n, MIN_FRAME);
            let f = EthernetFrame::new_checked(&buf[..n]).unwrap();
            prop_assert_eq!(EthernetRepr::parse(&f), EthernetRepr { ethertype: ethertype::ARP, ..eth });
            let p = ArpPacket::new_checked(f.payload()).unwrap();
            prop_assert_eq!(ArpRepr::parse(&p).unwrap(), repr);
        }

        #[test]
        fn ndisc_frames_round_trip(eth in eth(), src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(),
                                   target in any::<[u8; 16]>(), ll in proptest::option::of(mac()),
                                   na in any::<bool>(), flags in any::<u8>(),
                                   nonce in proptest::option::of(any::<[u8; 8]>())) {
            let target = Ipv6Addr::from(target);
            let repr = if na {
                NdiscRepr::NeighborAdvert { flags: NaFlags::from_bits(flags), target, lladdr: ll, nonce }
            } else {
                NdiscRepr::NeighborSolicit { target, lladdr: ll, nonce }
            };
            let (src, dst) = (Ipv6Addr::from(src), Ipv6Addr::from(dst));
            let mut buf = [0u8; MAX_FRAME];
            let n = ndisc(&mut buf, &eth, src, dst, &repr);
            let f = EthernetFrame::new_checked(&buf[..n]).unwrap();
            prop_assert_eq!(f.ethertype(), ethertype::IPV6);
            let ip = Ipv6Packet::new_checked(f.payload()).unwrap();
            prop_assert_eq!(ip.header().hop_limit, 255);
            let nd = NdiscPacket::new_checked(ip.payload()).unwrap();
            prop_assert!(nd.verify_checksum(&src, &dst));
            prop_assert_eq!(NdiscRepr::parse(&nd).unwrap(), repr);
        }

        #[test]
        fn views_never_panic_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            if let Ok(f) = EthernetFrame::new_checked(&bytes[..]) {
                let _ = f.payload();
                if let Ok(a) = ArpPacket::new_checked(f.payload()) { let _ = ArpRepr::parse(&a); }
                if let Ok(ip) = Ipv6Packet::new_checked(f.payload())
                    && let Ok(nd) = NdiscPacket::new_checked(ip.payload())
                {
                    let _ = NdiscRepr::parse(&nd);
                    let _ = nd.options().count();
                }
            }
        }
    }
}

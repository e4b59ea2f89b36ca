//! A reference model of the XDP responder, written against the RFCs with the host-side wire
//! views instead of the program's pointer code. The kernel tests run both on the same frames and
//! require identical verdicts and bytes: any frame the model would not answer must not be
//! answered by the program, and every answer must match the model's to the byte.

use std::{
    collections::HashMap,
    net::{IpAddr, Ipv6Addr},
};

use announcer_ebpf::wire::{
    ALL_NODES, ArpPacket, EthernetFrame, Header, Ipv6Hdr, Ipv6Packet, Ipv6Repr, MacAddr, NaFlags,
    NdiscHdr, NdiscPacket, NdiscRepr,
    arp::OP_REQUEST,
    ethernet::ethertype,
    ipv6::NEXT_HEADER_ICMPV6,
    ndisc::{self, HOP_LIMIT, OPT_SOURCE_LLADDR, TYPE_NS},
    solicited_node,
};

/// What the responder does with a frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Passed to the kernel unchanged.
    Pass,
    /// Sent back out with these bytes.
    Tx(Vec<u8>),
}

/// A VIP entry as the model sees it.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// MAC to answer with.
    pub mac: MacAddr,
    /// Whether it is live (not expired).
    pub live: bool,
}

/// The VIP table: (ifindex, vlan, address) → entry.
pub type Table = HashMap<(u32, u16, IpAddr), Entry>;

/// Longest NS the program validates.
pub const MAX_ND_LEN: usize = 64;

/// What the program should do with `frame` received on `ifindex`.
pub fn respond(frame: &[u8], ifindex: u32, table: &Table) -> Verdict {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Verdict::Pass;
    };
    let vlan = eth.vlan().unwrap_or(0);
    let l3 = eth.header_len();
    let lookup = |a: IpAddr| table.get(&(ifindex, vlan, a)).copied().filter(|e| e.live);
    match eth.ethertype() {
        ethertype::ARP => {
            let Ok(p) = ArpPacket::new_checked(eth.payload()) else {
                return Verdict::Pass;
            };
            let h = p.header();
            if !h.is_ethernet_ipv4() || u16::from_be_bytes(h.oper) != OP_REQUEST {
                return Verdict::Pass;
            }
            let Some(e) = lookup(IpAddr::from(h.tpa)) else {
                return Verdict::Pass;
            };
            let sha = MacAddr(h.sha);
            if !sha.is_unicast() || eth.src().is_multicast() || h.spa == h.tpa {
                return Verdict::Pass;
            }
            if !(eth.dst() == MacAddr::BROADCAST || eth.dst() == e.mac) {
                return Verdict::Pass;
            }
            // RFC 826: swap, fill in our hardware address, op = reply.
            let mut out = frame.to_vec();
            out[0..6].copy_from_slice(&h.sha);
            out[6..12].copy_from_slice(&e.mac.0);
            let a = l3;
            out[a + 6..a + 8].copy_from_slice(&2u16.to_be_bytes());
            out[a + 8..a + 14].copy_from_slice(&e.mac.0);
            out[a + 14..a + 18].copy_from_slice(&h.tpa);
            out[a + 18..a + 24].copy_from_slice(&h.sha);
            out[a + 24..a + 28].copy_from_slice(&h.spa);
            Verdict::Tx(out)
        }
        ethertype::IPV6 => ns(frame, &eth, l3, lookup),
        _ => Verdict::Pass,
    }
}

fn ns(
    frame: &[u8],
    eth: &EthernetFrame<&[u8]>,
    l3: usize,
    lookup: impl Fn(IpAddr) -> Option<Entry>,
) -> Verdict {
    let payload = eth.payload();
    let Some(ip) = Ipv6Hdr::ref_from_prefix(payload) else {
        return Verdict::Pass;
    };
    if ip.version() != 6 || ip.next_header != NEXT_HEADER_ICMPV6 {
        return Verdict::Pass;
    }
    let Some(nd) = NdiscHdr::ref_from_prefix(&payload[Ipv6Hdr::LEN..]) else {
        return Verdict::Pass;
    };
    if nd.ty != TYPE_NS {
        return Verdict::Pass;
    }
    let target = Ipv6Addr::from(nd.target);
    let Some(e) = lookup(IpAddr::V6(target)) else {
        return Verdict::Pass;
    };
    // RFC 4861 §7.1.1.
    let Ok(ip) = Ipv6Packet::new_checked(payload) else {
        return Verdict::Pass;
    };
    let repr = Ipv6Repr::parse(&ip);
    let plen = usize::from(repr.payload_len);
    if repr.hop_limit != HOP_LIMIT || nd.code != 0 || plen > MAX_ND_LEN || plen % 8 != 0 {
        return Verdict::Pass;
    }
    if target.is_multicast() {
        return Verdict::Pass;
    }
    let Ok(msg) = NdiscPacket::new_checked(ip.payload()) else {
        return Verdict::Pass;
    };
    if !msg.verify_checksum(&repr.src, &repr.dst) {
        return Verdict::Pass;
    }
    // The first Source Link-Layer Address option counts; on Ethernet it must be 8 bytes.
    let first_sllao = msg.options().find(|(t, _)| *t == OPT_SOURCE_LLADDR);
    if first_sllao.is_some_and(|(_, o)| o.len() != 8) {
        return Verdict::Pass;
    }
    let sllao = first_sllao.map(|(_, o)| MacAddr(o[2..8].try_into().unwrap()));
    if repr.src.is_multicast() || repr.src == target {
        return Verdict::Pass;
    }
    let sn = Ipv6Addr::from(solicited_node(&target.octets()));
    let dad = repr.src.is_unspecified();
    if dad && (repr.dst != sn || sllao.is_some()) {
        return Verdict::Pass;
    }
    if !(dad || repr.dst == target || repr.dst == sn) {
        return Verdict::Pass;
    }
    let edst = eth.dst();
    if !((edst.0[0] == 0x33 && edst.0[1] == 0x33) || edst == e.mac) || !eth.src().is_unicast() {
        return Verdict::Pass;
    }
    if !dad && !sllao.unwrap_or(eth.src()).is_unicast() {
        return Verdict::Pass;
    }
    // RFC 4861 §7.2.4.
    let (ip_dst, mac_dst, flags) = if dad {
        let all = Ipv6Addr::from(ALL_NODES);
        (
            all,
            MacAddr::from_ipv6_multicast(&ALL_NODES),
            NaFlags {
                router: false,
                solicited: false,
                override_: true,
            },
        )
    } else {
        (
            repr.src,
            sllao.unwrap_or(eth.src()),
            NaFlags {
                router: false,
                solicited: true,
                override_: true,
            },
        )
    };
    // The first Nonce option, if it has a probe's shape, is echoed (RFC 3971 §5.3.2).
    let na = NdiscRepr::NeighborAdvert {
        flags,
        target,
        lladdr: Some(e.mac),
        nonce: msg.nonce_option(),
    };
    let mut out = frame[..l3].to_vec();
    out[0..6].copy_from_slice(&mac_dst.0);
    out[6..12].copy_from_slice(&e.mac.0);
    let mut l3buf = vec![0u8; Ipv6Hdr::LEN + na.buffer_len()];
    Ipv6Repr {
        src: target,
        dst: ip_dst,
        next_header: NEXT_HEADER_ICMPV6,
        payload_len: na.buffer_len() as u16,
        hop_limit: HOP_LIMIT,
    }
    .emit(&mut l3buf);
    na.emit(&mut l3buf[Ipv6Hdr::LEN..]);
    ndisc::fill_checksum(&mut l3buf[Ipv6Hdr::LEN..], &target, &ip_dst);
    out.extend_from_slice(&l3buf);
    // Behind an NS of exactly NS + one 8-byte option (the shape of a liveness probe before the
    // Nonce option, the size of an NA + TLLAO written over it), up to PROBE_NONCE_LEN trailer
    // bytes stay: that probe's nonce.
    let na_end = l3 + Ipv6Hdr::LEN + na.buffer_len();
    if plen == NdiscHdr::LEN + 8 && frame.len() > na_end {
        let keep = (frame.len() - na_end).min(announcer_ebpf::wire::PROBE_NONCE_LEN);
        out.extend_from_slice(&frame[na_end..na_end + keep]);
    }
    Verdict::Tx(out)
}

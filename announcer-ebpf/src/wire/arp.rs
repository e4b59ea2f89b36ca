//! ARP for IPv4 over Ethernet (RFC 826).

use core::net::Ipv4Addr;

use super::{Error, Header, MacAddr, Result, assert_layout};

/// `ar$hrd` for Ethernet.
pub const HTYPE_ETHERNET: u16 = 1;
/// `ar$pro` for IPv4.
pub const PTYPE_IPV4: u16 = 0x0800;
/// `ar$op` of a request.
pub const OP_REQUEST: u16 = 1;
/// `ar$op` of a reply.
pub const OP_REPLY: u16 = 2;

/// An ARP packet for IPv4 over Ethernet (28 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpHdr {
    /// Hardware type (`ar$hrd`), big-endian; 1 for Ethernet.
    pub htype: [u8; 2],
    /// Protocol type (`ar$pro`), big-endian; 0x0800 for IPv4.
    pub ptype: [u8; 2],
    /// Hardware address length (`ar$hln`); 6.
    pub hlen: u8,
    /// Protocol address length (`ar$pln`); 4.
    pub plen: u8,
    /// Operation (`ar$op`), big-endian.
    pub oper: [u8; 2],
    /// Sender hardware address (`ar$sha`).
    pub sha: [u8; 6],
    /// Sender protocol address (`ar$spa`).
    pub spa: [u8; 4],
    /// Target hardware address (`ar$tha`).
    pub tha: [u8; 6],
    /// Target protocol address (`ar$tpa`).
    pub tpa: [u8; 4],
}
assert_layout!(ArpHdr, 28);
// SAFETY: repr(C), bytes only.
unsafe impl Header for ArpHdr {}

impl ArpHdr {
    /// Whether the fixed fields say "Ethernet hardware, IPv4 protocol, 6- and 4-byte addresses".
    #[inline(always)]
    pub fn is_ethernet_ipv4(&self) -> bool {
        u16::from_be_bytes(self.htype) == HTYPE_ETHERNET
            && u16::from_be_bytes(self.ptype) == PTYPE_IPV4
            && self.hlen == 6
            && self.plen == 4
    }
}

/// ARP operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArpOperation {
    /// 1.
    Request,
    /// 2.
    Reply,
    /// Anything else (RARP, InARP, ...).
    Unknown(u16),
}

impl From<u16> for ArpOperation {
    fn from(v: u16) -> Self {
        match v {
            OP_REQUEST => ArpOperation::Request,
            OP_REPLY => ArpOperation::Reply,
            o => ArpOperation::Unknown(o),
        }
    }
}

impl From<ArpOperation> for u16 {
    fn from(v: ArpOperation) -> u16 {
        match v {
            ArpOperation::Request => OP_REQUEST,
            ArpOperation::Reply => OP_REPLY,
            ArpOperation::Unknown(o) => o,
        }
    }
}

/// A checked view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buffer` after checking it holds a whole Ethernet/IPv4 ARP header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < ArpHdr::LEN {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// The header fields.
    pub fn header(&self) -> &ArpHdr {
        ArpHdr::ref_from_prefix(self.buffer.as_ref()).expect("checked in new_checked")
    }
}

/// The parsed form of an Ethernet/IPv4 ARP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpRepr {
    /// Operation.
    pub operation: ArpOperation,
    /// `ar$sha`.
    pub sender_mac: MacAddr,
    /// `ar$spa`.
    pub sender_ip: Ipv4Addr,
    /// `ar$tha`.
    pub target_mac: MacAddr,
    /// `ar$tpa`.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// Parses a checked packet; anything but Ethernet/IPv4 is [`Error::Unrecognized`].
    pub fn parse<T: AsRef<[u8]>>(packet: &ArpPacket<T>) -> Result<Self> {
        let h = packet.header();
        if !h.is_ethernet_ipv4() {
            return Err(Error::Unrecognized);
        }
        Ok(Self {
            operation: u16::from_be_bytes(h.oper).into(),
            sender_mac: MacAddr(h.sha),
            sender_ip: Ipv4Addr::from(h.spa),
            target_mac: MacAddr(h.tha),
            target_ip: Ipv4Addr::from(h.tpa),
        })
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        ArpHdr::LEN
    }

    /// Writes the packet to the start of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than 28 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let h = ArpHdr::mut_from_prefix(buf).expect("buffer too short for ARP");
        *h = ArpHdr {
            htype: HTYPE_ETHERNET.to_be_bytes(),
            ptype: PTYPE_IPV4.to_be_bytes(),
            hlen: 6,
            plen: 4,
            oper: u16::from(self.operation).to_be_bytes(),
            sha: self.sender_mac.0,
            spa: self.sender_ip.octets(),
            tha: self.target_mac.0,
            tpa: self.target_ip.octets(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A request from 10.0.0.1 (02:00:00:00:00:01) for 10.0.0.5, as tcpdump -x shows it.
    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0,
        0, 1, 0, 0, 0, 0, 0, 0, 10, 0, 0, 5,
    ];

    #[test]
    fn parses_a_request() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let r = ArpRepr::parse(&p).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.sender_ip, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(r.target_ip, Ipv4Addr::new(10, 0, 0, 5));
        assert_eq!(r.sender_mac, MacAddr([2, 0, 0, 0, 0, 1]));
        let mut out = [0u8; 28];
        r.emit(&mut out);
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn rejects_short_and_foreign() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut other = REQUEST;
        other[5] = 16; // plen 16
        let p = ArpPacket::new_checked(&other[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p).unwrap_err(), Error::Unrecognized);
    }
}

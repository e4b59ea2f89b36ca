//! Ethernet II framing with at most one 802.1Q tag.

use super::{Error, Header, MacAddr, Result, assert_layout};

/// EtherType values used here.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP (RFC 826).
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// 802.1Q customer VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// 802.1ad service tag (QinQ); not handled, passed to the kernel.
    pub const QINQ: u16 = 0x88a8;
}

/// The Ethernet II header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthHdr {
    /// Destination hardware address.
    pub dst: [u8; 6],
    /// Source hardware address.
    pub src: [u8; 6],
    /// EtherType, big-endian (0x8100 when a VLAN tag follows).
    pub ethertype: [u8; 2],
}
assert_layout!(EthHdr, 14);
// SAFETY: repr(C), byte arrays only.
unsafe impl Header for EthHdr {}

/// The 802.1Q tag that follows [`EthHdr`] when its EtherType is 0x8100.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VlanHdr {
    /// Priority (3 bits), drop eligible (1 bit), VLAN id (12 bits), big-endian.
    pub tci: [u8; 2],
    /// EtherType of the payload.
    pub ethertype: [u8; 2],
}
assert_layout!(VlanHdr, 4);
// SAFETY: repr(C), byte arrays only.
unsafe impl Header for VlanHdr {}

impl VlanHdr {
    /// The 12-bit VLAN id.
    #[inline(always)]
    pub const fn vid(&self) -> u16 {
        u16::from_be_bytes(self.tci) & 0x0fff
    }
}

/// A checked view of an Ethernet frame, looking through one 802.1Q tag.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` after checking that the headers it announces are all there.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let frame = Self { buffer };
        let b = frame.buffer.as_ref();
        let eth = EthHdr::ref_from_prefix(b).ok_or(Error::Truncated)?;
        if u16::from_be_bytes(eth.ethertype) == ethertype::VLAN
            && b.len() < EthHdr::LEN + VlanHdr::LEN
        {
            return Err(Error::Truncated);
        }
        Ok(frame)
    }

    fn eth(&self) -> &EthHdr {
        EthHdr::ref_from_prefix(self.buffer.as_ref()).expect("checked in new_checked")
    }

    fn vlan_hdr(&self) -> Option<&VlanHdr> {
        if u16::from_be_bytes(self.eth().ethertype) == ethertype::VLAN {
            VlanHdr::ref_from_prefix(&self.buffer.as_ref()[EthHdr::LEN..])
        } else {
            None
        }
    }

    /// Destination address.
    pub fn dst(&self) -> MacAddr {
        MacAddr(self.eth().dst)
    }

    /// Source address.
    pub fn src(&self) -> MacAddr {
        MacAddr(self.eth().src)
    }

    /// The 802.1Q VLAN id, if the frame is tagged.
    pub fn vlan(&self) -> Option<u16> {
        self.vlan_hdr().map(VlanHdr::vid)
    }

    /// The EtherType of the payload (inside the tag, if any).
    pub fn ethertype(&self) -> u16 {
        match self.vlan_hdr() {
            Some(v) => u16::from_be_bytes(v.ethertype),
            None => u16::from_be_bytes(self.eth().ethertype),
        }
    }

    /// Length of the Ethernet header(s).
    pub fn header_len(&self) -> usize {
        EthHdr::LEN
            + if self.vlan_hdr().is_some() {
                VlanHdr::LEN
            } else {
                0
            }
    }

    /// The payload after the header(s), including any trailing padding.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The parsed form of an Ethernet header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source address.
    pub src: MacAddr,
    /// Destination address.
    pub dst: MacAddr,
    /// 802.1Q VLAN id (priority 0), or `None` for untagged.
    pub vlan: Option<u16>,
    /// Payload EtherType.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Reads the header of a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Self {
        Self {
            src: frame.src(),
            dst: frame.dst(),
            vlan: frame.vlan(),
            ethertype: frame.ethertype(),
        }
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub const fn header_len(&self) -> usize {
        EthHdr::LEN + if self.vlan.is_some() { VlanHdr::LEN } else { 0 }
    }

    /// Writes the header to the start of `buf`; returns its length.
    ///
    /// # Panics
    /// If `buf` is shorter than [`header_len`](Self::header_len) or the VLAN id exceeds 12 bits.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        let eth = EthHdr::mut_from_prefix(buf).expect("buffer too short for Ethernet header");
        eth.dst = self.dst.0;
        eth.src = self.src.0;
        match self.vlan {
            None => {
                eth.ethertype = self.ethertype.to_be_bytes();
                EthHdr::LEN
            }
            Some(vid) => {
                // Any 12-bit id round-trips (4095 is reserved but can be on the wire); which ids
                // are usable is policy for the callers.
                assert!(vid <= 0x0fff, "VLAN id {vid} does not fit 12 bits");
                eth.ethertype = ethertype::VLAN.to_be_bytes();
                let tag = VlanHdr::mut_from_prefix(&mut buf[EthHdr::LEN..])
                    .expect("buffer too short for 802.1Q tag");
                tag.tci = vid.to_be_bytes();
                tag.ethertype = self.ethertype.to_be_bytes();
                EthHdr::LEN + VlanHdr::LEN
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_round_trip() {
        let repr = EthernetRepr {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr::BROADCAST,
            vlan: Some(42),
            ethertype: ethertype::ARP,
        };
        let mut buf = [0u8; 18];
        assert_eq!(repr.emit(&mut buf), 18);
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x00, 42, 0x08, 0x06]);
        let f = EthernetFrame::new_checked(&buf[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f), repr);
        assert_eq!(f.header_len(), 18);
    }

    #[test]
    fn truncated_tag_is_rejected() {
        let mut buf = [0u8; 16];
        buf[12] = 0x81;
        assert_eq!(
            EthernetFrame::new_checked(&buf[..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            EthernetFrame::new_checked(&buf[..13]).unwrap_err(),
            Error::Truncated
        );
    }
}

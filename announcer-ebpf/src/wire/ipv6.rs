//! The fixed IPv6 header (RFC 8200 §3).

use core::net::Ipv6Addr;

use super::{Error, Header, Result, assert_layout};

/// Next-header value of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = 58;

/// The 40-byte IPv6 header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Hdr {
    /// Version (4 bits), traffic class (8), flow label (20), big-endian.
    pub vtcfl: [u8; 4],
    /// Payload length, big-endian.
    pub payload_len: [u8; 2],
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
}
assert_layout!(Ipv6Hdr, 40);
// SAFETY: repr(C), bytes only.
unsafe impl Header for Ipv6Hdr {}

impl Ipv6Hdr {
    /// The version field.
    #[inline(always)]
    pub const fn version(&self) -> u8 {
        self.vtcfl[0] >> 4
    }
}

/// A checked view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps `buffer` after checking the header and the payload it announces are present.
    /// Bytes past the payload (Ethernet padding) are allowed and ignored.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        let h = Ipv6Hdr::ref_from_prefix(b).ok_or(Error::Truncated)?;
        if h.version() != 6 {
            return Err(Error::Malformed);
        }
        if b.len() < Ipv6Hdr::LEN + usize::from(u16::from_be_bytes(h.payload_len)) {
            return Err(Error::Truncated);
        }
        Ok(Self { buffer })
    }

    /// The header fields.
    pub fn header(&self) -> &Ipv6Hdr {
        Ipv6Hdr::ref_from_prefix(self.buffer.as_ref()).expect("checked in new_checked")
    }

    /// The payload, exactly `payload_len` bytes.
    pub fn payload(&self) -> &[u8] {
        let len = usize::from(u16::from_be_bytes(self.header().payload_len));
        &self.buffer.as_ref()[Ipv6Hdr::LEN..Ipv6Hdr::LEN + len]
    }
}

/// The parsed form of an IPv6 header without extension headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length.
    pub payload_len: u16,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Reads a checked packet's header.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Self {
        let h = packet.header();
        Self {
            src: Ipv6Addr::from(h.src),
            dst: Ipv6Addr::from(h.dst),
            next_header: h.next_header,
            payload_len: u16::from_be_bytes(h.payload_len),
            hop_limit: h.hop_limit,
        }
    }

    /// Writes the header (traffic class and flow label zero) to the start of `buf`.
    ///
    /// # Panics
    /// If `buf` is shorter than 40 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let h = Ipv6Hdr::mut_from_prefix(buf).expect("buffer too short for IPv6");
        *h = Ipv6Hdr {
            vtcfl: [0x60, 0, 0, 0],
            payload_len: self.payload_len.to_be_bytes(),
            next_header: self.next_header,
            hop_limit: self.hop_limit,
            src: self.src.octets(),
            dst: self.dst.octets(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_length_checks() {
        let repr = Ipv6Repr {
            src: "fe80::1".parse().unwrap(),
            dst: "ff02::1:ff00:5".parse().unwrap(),
            next_header: NEXT_HEADER_ICMPV6,
            payload_len: 8,
            hop_limit: 255,
        };
        let mut buf = [0u8; 50];
        repr.emit(&mut buf);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p), repr);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(
            Ipv6Packet::new_checked(&buf[..47]).unwrap_err(),
            Error::Truncated
        );
        buf[0] = 0x40;
        assert_eq!(
            Ipv6Packet::new_checked(&buf[..]).unwrap_err(),
            Error::Malformed
        );
    }
}

//! Packet layouts and views for the frames the responder reads and writes.
//!
//! Each protocol has one `#[repr(C)]` header struct made only of `u8` and byte arrays (alignment
//! 1, no padding): that struct *is* the list of field offsets, used as-is by the XDP program
//! through bounds-checked pointers and by the agent through the checked views here
//! (`Packet::new_checked` then accessors), in the style of smoltcp's `wire` module. `Repr` types
//! parse a view into plain values and emit them back.

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod frame;
pub mod ipv6;
pub mod ndisc;

pub use arp::{ArpHdr, ArpOperation, ArpPacket, ArpRepr};
pub use ethernet::{EthHdr, EthernetFrame, EthernetRepr, VlanHdr};
pub use ipv6::{Ipv6Hdr, Ipv6Packet, Ipv6Repr};
pub use ndisc::{LinkLayerOpt, NaFlags, NdiscHdr, NdiscPacket, NdiscRepr};

use core::fmt;

/// Why a buffer could not be read as a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header, or than the length a header field claims.
    Truncated,
    /// The header is complete but a field has a value this protocol forbids.
    Malformed,
    /// A well-formed packet of a kind this crate does not handle (other hardware or protocol
    /// type, other ICMPv6 type, ...).
    Unrecognized,
    /// The checksum does not match the contents.
    Checksum,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "packet truncated",
            Error::Malformed => "malformed packet",
            Error::Unrecognized => "unrecognized packet",
            Error::Checksum => "bad checksum",
        })
    }
}

impl core::error::Error for Error {}

/// Result of parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// An Ethernet (EUI-48) hardware address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: MacAddr = MacAddr([0xff; 6]);
    /// 00:00:00:00:00:00 (the unknown target hardware address in ARP requests).
    pub const ZERO: MacAddr = MacAddr([0; 6]);

    /// Whether the group bit is set (multicast or broadcast).
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether this is a usable unicast source address: not group, not all-zero.
    pub const fn is_unicast(&self) -> bool {
        !self.is_multicast() && !matches!(self.0, [0, 0, 0, 0, 0, 0])
    }

    /// The Ethernet multicast address an IPv6 multicast group maps to (RFC 2464 §7).
    pub const fn from_ipv6_multicast(group: &[u8; 16]) -> MacAddr {
        MacAddr([0x33, 0x33, group[12], group[13], group[14], group[15]])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

impl fmt::Debug for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Error of [`MacAddr::from_str`](core::str::FromStr).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseMacError;

impl fmt::Display for ParseMacError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected a MAC address of six hex octets, like 02:00:5e:10:00:01")
    }
}

impl core::error::Error for ParseMacError {}

impl core::str::FromStr for MacAddr {
    type Err = ParseMacError;

    fn from_str(s: &str) -> core::result::Result<Self, Self::Err> {
        let mut out = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for byte in out.iter_mut() {
            let part = parts.next().ok_or(ParseMacError)?;
            if part.is_empty() || part.len() > 2 {
                return Err(ParseMacError);
            }
            *byte = u8::from_str_radix(part, 16).map_err(|_| ParseMacError)?;
        }
        if parts.next().is_some() {
            return Err(ParseMacError);
        }
        Ok(MacAddr(out))
    }
}

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1): ff02::1:ffXX:XXXX.
#[inline(always)]
pub const fn solicited_node(addr: &[u8; 16]) -> [u8; 16] {
    [
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, addr[13], addr[14], addr[15],
    ]
}

/// ff02::1, the all-nodes multicast address.
pub const ALL_NODES: [u8; 16] = [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// Bytes of a liveness probe's nonce: the agent's probes carry a random one and the
/// responder's answers carry it back. ARP: in the padding of the 60-byte frame, after the
/// 28-byte packet (the answer is rewritten in place). NS: in a Nonce option (RFC 3971 §5.3.2,
/// [`ndisc::OPT_NONCE`]), which the NA answer echoes. (Probes before the option carried it in
/// the Ethernet trailer after the IPv6 payload, and the responder still echoes up to this
/// many trailer bytes behind a 32-byte NS; but a Linux bridge with `br_netfilter` trims IPv6
/// frames to their payload length, trailer and all.)
pub const PROBE_NONCE_LEN: usize = 8;

/// A header layout that may be read from any byte buffer of at least its size.
///
/// # Safety
/// Implementors are `#[repr(C)]`, contain only `u8` and arrays of `u8` (so alignment is 1 and
/// there is no padding), and every bit pattern is a valid value.
pub unsafe trait Header: Sized {
    /// Size of the header on the wire.
    const LEN: usize = core::mem::size_of::<Self>();

    /// The header at the start of `bytes`, if it is long enough.
    fn ref_from_prefix(bytes: &[u8]) -> Option<&Self> {
        if bytes.len() < Self::LEN {
            return None;
        }
        // SAFETY: length checked; alignment is 1 and all bit patterns are valid (trait contract).
        Some(unsafe { &*bytes.as_ptr().cast::<Self>() })
    }

    /// The header at the start of `bytes`, mutably, if it is long enough.
    fn mut_from_prefix(bytes: &mut [u8]) -> Option<&mut Self> {
        if bytes.len() < Self::LEN {
            return None;
        }
        // SAFETY: as above, and the borrow of `bytes` is exclusive.
        Some(unsafe { &mut *bytes.as_mut_ptr().cast::<Self>() })
    }
}

/// Asserts at compile time that a header has alignment 1 and the expected wire size.
macro_rules! assert_layout {
    ($t:ty, $len:expr) => {
        const _: () = assert!(core::mem::size_of::<$t>() == $len);
        const _: () = assert!(core::mem::align_of::<$t>() == 1);
    };
}
pub(crate) use assert_layout;

#[cfg(test)]
mod tests {
    use super::*;
    use core::str::FromStr;

    #[test]
    fn mac_parses_and_prints() {
        let m = MacAddr::from_str("02:00:5E:10:00:0a").unwrap();
        assert_eq!(m.0, [2, 0, 0x5e, 0x10, 0, 0x0a]);
        assert_eq!(std::format!("{m}"), "02:00:5e:10:00:0a");
        for bad in [
            "",
            "02:00:5e:10:00",
            "02:00:5e:10:00:0a:01",
            "0g:00:00:00:00:00",
            "002:0:0:0:0:0",
        ] {
            assert!(MacAddr::from_str(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn solicited_node_matches_rfc4291() {
        let a: [u8; 16] = "2001:db8::abcd:1234"
            .parse::<core::net::Ipv6Addr>()
            .unwrap()
            .octets();
        let s = core::net::Ipv6Addr::from(solicited_node(&a));
        assert_eq!(
            s,
            "ff02::1:ffcd:1234".parse::<core::net::Ipv6Addr>().unwrap()
        );
    }
}

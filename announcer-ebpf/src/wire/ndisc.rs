//! Neighbor Solicitation and Advertisement (RFC 4861 §4.3, §4.4) with link-layer address
//! options (§4.6.1) and the Nonce option of RFC 3971 §5.3.2, which carries a liveness probe's
//! nonce ([`super::PROBE_NONCE_LEN`]).

use core::net::Ipv6Addr;

use super::{Error, Header, MacAddr, PROBE_NONCE_LEN, Result, assert_layout, checksum};

/// ICMPv6 type of a Neighbor Solicitation.
pub const TYPE_NS: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const TYPE_NA: u8 = 136;
/// Option type: Source Link-Layer Address.
pub const OPT_SOURCE_LLADDR: u8 = 1;
/// Option type: Target Link-Layer Address.
pub const OPT_TARGET_LLADDR: u8 = 2;
/// Option type: Nonce (RFC 3971 §5.3.2, also used by RFC 7527). Receivers that do not know it
/// ignore it (RFC 4861 §4.6); our responder echoes it from an NS into its NA.
pub const OPT_NONCE: u8 = 14;
/// The hop limit every ND message must carry (RFC 4861 §7.1.1).
pub const HOP_LIMIT: u8 = 255;

/// The fixed part shared by NS and NA: ICMPv6 header, flags/reserved word, target (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NdiscHdr {
    /// ICMPv6 type (135 or 136).
    pub ty: u8,
    /// ICMPv6 code; must be 0.
    pub code: u8,
    /// ICMPv6 checksum, big-endian.
    pub checksum: [u8; 2],
    /// NA: R, S, O flags in the top bits of the first byte; NS: reserved (zero).
    pub flags: [u8; 4],
    /// Target address.
    pub target: [u8; 16],
}
assert_layout!(NdiscHdr, 24);
// SAFETY: repr(C), bytes only.
unsafe impl Header for NdiscHdr {}

/// A (Source or Target) Link-Layer Address option for Ethernet (8 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkLayerOpt {
    /// Option type (1 or 2).
    pub ty: u8,
    /// Length in units of 8 bytes; 1.
    pub len: u8,
    /// The hardware address.
    pub addr: [u8; 6],
}
assert_layout!(LinkLayerOpt, 8);
// SAFETY: repr(C), bytes only.
unsafe impl Header for LinkLayerOpt {}

/// The Nonce option as probes carry it (16 bytes, length 2): the probe nonce in the first
/// [`PROBE_NONCE_LEN`] of its 14 nonce bytes, the rest zero. RFC 3971 asks for at least 6
/// random bytes and a multiple of 8 for the whole option; 8 random bytes need length 2.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NonceOpt {
    /// [`OPT_NONCE`].
    pub ty: u8,
    /// Length in units of 8 bytes: [`NonceOpt::UNITS`].
    pub len: u8,
    /// The probe nonce.
    pub nonce: [u8; PROBE_NONCE_LEN],
    /// Zero.
    pub rest: [u8; 6],
}
assert_layout!(NonceOpt, 16);
// SAFETY: repr(C), bytes only.
unsafe impl Header for NonceOpt {}

impl NonceOpt {
    /// The option's length field.
    pub const UNITS: u8 = 2;

    /// The option carrying `nonce`.
    pub const fn new(nonce: [u8; PROBE_NONCE_LEN]) -> Self {
        Self {
            ty: OPT_NONCE,
            len: Self::UNITS,
            nonce,
            rest: [0; 6],
        }
    }
}

/// Neighbor Advertisement flags (RFC 4861 §4.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NaFlags {
    /// R: the sender is a router.
    pub router: bool,
    /// S: sent in response to a solicitation.
    pub solicited: bool,
    /// O: override an existing cache entry.
    pub override_: bool,
}

impl NaFlags {
    /// R bit in the first flags byte.
    pub const ROUTER: u8 = 0x80;
    /// S bit.
    pub const SOLICITED: u8 = 0x40;
    /// O bit.
    pub const OVERRIDE: u8 = 0x20;

    /// The first byte of the flags word.
    pub const fn bits(self) -> u8 {
        (if self.router { Self::ROUTER } else { 0 })
            | (if self.solicited { Self::SOLICITED } else { 0 })
            | (if self.override_ { Self::OVERRIDE } else { 0 })
    }

    /// Reads the flags from the first byte of the flags word.
    pub const fn from_bits(b: u8) -> Self {
        Self {
            router: b & Self::ROUTER != 0,
            solicited: b & Self::SOLICITED != 0,
            override_: b & Self::OVERRIDE != 0,
        }
    }
}

/// A checked view of an NS or NA message (the ICMPv6 payload of an IPv6 packet).
#[derive(Debug, Clone)]
pub struct NdiscPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> NdiscPacket<T> {
    /// Wraps an ICMPv6 message of exactly the IPv6 payload length, after checking that the fixed
    /// part is present and that the options are well-formed (RFC 4861 §7.1.1: every option has a
    /// non-zero length and none runs past the end).
    pub fn new_checked(buffer: T) -> Result<Self> {
        let b = buffer.as_ref();
        if b.len() < NdiscHdr::LEN {
            return Err(Error::Truncated);
        }
        let mut opts = &b[NdiscHdr::LEN..];
        while !opts.is_empty() {
            if opts.len() < 2 {
                return Err(Error::Malformed);
            }
            let len = usize::from(opts[1]) * 8;
            if len == 0 || len > opts.len() {
                return Err(Error::Malformed);
            }
            opts = &opts[len..];
        }
        Ok(Self { buffer })
    }

    /// The fixed fields.
    pub fn header(&self) -> &NdiscHdr {
        NdiscHdr::ref_from_prefix(self.buffer.as_ref()).expect("checked in new_checked")
    }

    /// Iterates over the options as `(type, whole option bytes)`. `new_checked` has rejected
    /// zero-length and overrunning options, so every item is at least 8 bytes.
    pub fn options(&self) -> impl Iterator<Item = (u8, &[u8])> {
        let mut rest = &self.buffer.as_ref()[NdiscHdr::LEN..];
        core::iter::from_fn(move || {
            if rest.len() < 2 {
                return None;
            }
            let len = usize::from(rest[1]) * 8;
            let (opt, tail) = rest.split_at(len.min(rest.len()));
            rest = tail;
            Some((opt[0], opt))
        })
    }

    /// The link-layer address carried in the first option of type `ty`, if there is one and it
    /// is Ethernet-sized (8 bytes); a first option of another size yields `None`.
    pub fn lladdr_option(&self, ty: u8) -> Option<MacAddr> {
        self.options()
            .find(|(t, _)| *t == ty)
            .filter(|(_, o)| o.len() == LinkLayerOpt::LEN)
            .and_then(|(_, o)| LinkLayerOpt::ref_from_prefix(o))
            .map(|o| MacAddr(o.addr))
    }

    /// The probe nonce carried in the first Nonce option, if there is one of the probes'
    /// shape ([`NonceOpt`]); a first Nonce option of another length yields `None`.
    pub fn nonce_option(&self) -> Option<[u8; PROBE_NONCE_LEN]> {
        self.options()
            .find(|(t, _)| *t == OPT_NONCE)
            .filter(|(_, o)| o.len() == NonceOpt::LEN)
            .and_then(|(_, o)| NonceOpt::ref_from_prefix(o))
            .map(|o| o.nonce)
    }

    /// Whether the ICMPv6 checksum is right for this message between `src` and `dst`.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        let b = self.buffer.as_ref();
        let sum = checksum::pseudo_header_v6(
            &src.octets(),
            &dst.octets(),
            b.len() as u32,
            super::ipv6::NEXT_HEADER_ICMPV6,
        );
        checksum::finish(checksum::add_bytes(sum, b)) == 0
    }
}

/// Writes the ICMPv6 checksum of the ND message `msg` sent from `src` to `dst`.
///
/// # Panics
/// If `msg` is shorter than the fixed header.
pub fn fill_checksum(msg: &mut [u8], src: &Ipv6Addr, dst: &Ipv6Addr) {
    let h = NdiscHdr::mut_from_prefix(msg).expect("buffer too short for ND");
    h.checksum = [0, 0];
    let sum = checksum::pseudo_header_v6(
        &src.octets(),
        &dst.octets(),
        msg.len() as u32,
        super::ipv6::NEXT_HEADER_ICMPV6,
    );
    let c = checksum::finish(checksum::add_bytes(sum, msg));
    msg[2..4].copy_from_slice(&c.to_be_bytes());
}

/// The parsed form of an NS or NA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdiscRepr {
    /// Neighbor Solicitation (§4.3).
    NeighborSolicit {
        /// The address being resolved.
        target: Ipv6Addr,
        /// Source Link-Layer Address option, if present.
        lladdr: Option<MacAddr>,
        /// A probe nonce in a Nonce option ([`NonceOpt`]), if present.
        nonce: Option<[u8; PROBE_NONCE_LEN]>,
    },
    /// Neighbor Advertisement (§4.4).
    NeighborAdvert {
        /// R, S, O.
        flags: NaFlags,
        /// The address being advertised.
        target: Ipv6Addr,
        /// Target Link-Layer Address option, if present.
        lladdr: Option<MacAddr>,
        /// The echoed probe nonce in a Nonce option ([`NonceOpt`]), if present.
        nonce: Option<[u8; PROBE_NONCE_LEN]>,
    },
}

impl NdiscRepr {
    /// Parses a checked message. Only code 0 NS and NA are recognized; the checksum is not
    /// checked here (see [`NdiscPacket::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]>>(packet: &NdiscPacket<T>) -> Result<Self> {
        let h = packet.header();
        if h.code != 0 {
            return Err(Error::Malformed);
        }
        let target = Ipv6Addr::from(h.target);
        match h.ty {
            TYPE_NS => Ok(NdiscRepr::NeighborSolicit {
                target,
                lladdr: packet.lladdr_option(OPT_SOURCE_LLADDR),
                nonce: packet.nonce_option(),
            }),
            TYPE_NA => Ok(NdiscRepr::NeighborAdvert {
                flags: NaFlags::from_bits(h.flags[0]),
                target,
                lladdr: packet.lladdr_option(OPT_TARGET_LLADDR),
                nonce: packet.nonce_option(),
            }),
            _ => Err(Error::Unrecognized),
        }
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        let (lladdr, nonce) = match self {
            NdiscRepr::NeighborSolicit { lladdr, nonce, .. }
            | NdiscRepr::NeighborAdvert { lladdr, nonce, .. } => (lladdr, nonce),
        };
        NdiscHdr::LEN
            + if lladdr.is_some() {
                LinkLayerOpt::LEN
            } else {
                0
            }
            + if nonce.is_some() { NonceOpt::LEN } else { 0 }
    }

    /// Writes the message to the start of `buf` with a zero checksum (see [`fill_checksum`]).
    ///
    /// # Panics
    /// If `buf` is shorter than [`buffer_len`](Self::buffer_len).
    /// The link-layer address option comes first, then the Nonce option.
    pub fn emit(&self, buf: &mut [u8]) {
        let (ty, flags, target, opt_ty, lladdr, nonce) = match *self {
            NdiscRepr::NeighborSolicit {
                target,
                lladdr,
                nonce,
            } => (TYPE_NS, 0, target, OPT_SOURCE_LLADDR, lladdr, nonce),
            NdiscRepr::NeighborAdvert {
                flags,
                target,
                lladdr,
                nonce,
            } => (
                TYPE_NA,
                flags.bits(),
                target,
                OPT_TARGET_LLADDR,
                lladdr,
                nonce,
            ),
        };
        let h = NdiscHdr::mut_from_prefix(buf).expect("buffer too short for ND");
        *h = NdiscHdr {
            ty,
            code: 0,
            checksum: [0; 2],
            flags: [flags, 0, 0, 0],
            target: target.octets(),
        };
        if let Some(mac) = lladdr {
            let o = LinkLayerOpt::mut_from_prefix(&mut buf[NdiscHdr::LEN..])
                .expect("buffer too short for ND option");
            *o = LinkLayerOpt {
                ty: opt_ty,
                len: 1,
                addr: mac.0,
            };
        }
        if let Some(nonce) = nonce {
            let at = NdiscHdr::LEN + lladdr.map_or(0, |_| LinkLayerOpt::LEN);
            let o =
                NonceOpt::mut_from_prefix(&mut buf[at..]).expect("buffer too short for ND option");
            *o = NonceOpt::new(nonce);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn na_round_trip_with_checksum() {
        let repr = NdiscRepr::NeighborAdvert {
            flags: NaFlags {
                router: false,
                solicited: true,
                override_: true,
            },
            target: "2001:db8::5".parse().unwrap(),
            lladdr: Some(MacAddr([2, 0, 0, 0, 0, 9])),
            nonce: None,
        };
        let mut buf = [0u8; 32];
        assert_eq!(repr.buffer_len(), 32);
        repr.emit(&mut buf);
        let (s, d) = (
            "2001:db8::5".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        );
        fill_checksum(&mut buf, &s, &d);
        let p = NdiscPacket::new_checked(&buf[..]).unwrap();
        assert!(p.verify_checksum(&s, &d));
        let other: Ipv6Addr = "2001:db8::2".parse().unwrap();
        assert!(!p.verify_checksum(&s, &other));
        assert_eq!(NdiscRepr::parse(&p).unwrap(), repr);
        assert_eq!(buf[4], 0x60);
    }

    #[test]
    fn ns_with_a_nonce_option_round_trips_and_the_option_reads_as_rfc_3971_says() {
        let repr = NdiscRepr::NeighborSolicit {
            target: "2001:db8::5".parse().unwrap(),
            lladdr: Some(MacAddr([2, 0, 0, 0, 0, 9])),
            nonce: Some(*b"12345678"),
        };
        let mut buf = [0u8; 48];
        assert_eq!(repr.buffer_len(), 48);
        repr.emit(&mut buf);
        // Type 14, length 2 (16 bytes), then the nonce, then zeros.
        assert_eq!(buf[32..34], [OPT_NONCE, 2]);
        assert_eq!(&buf[34..42], b"12345678");
        assert_eq!(buf[42..48], [0; 6]);
        let p = NdiscPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p).unwrap(), repr);
    }

    /// An NS without options, followed by 8 zero bytes to write one into.
    fn ns_with_room_for_one_option() -> [u8; 32] {
        let mut buf = [0u8; 32];
        NdiscRepr::NeighborSolicit {
            target: "2001:db8::5".parse().unwrap(),
            lladdr: None,
            nonce: None,
        }
        .emit(&mut buf);
        buf
    }

    #[test]
    fn a_nonce_option_of_another_length_is_no_probe_nonce() {
        let mut buf = ns_with_room_for_one_option();
        buf[24..32].copy_from_slice(&[OPT_NONCE, 1, 1, 2, 3, 4, 5, 6]);
        let p = NdiscPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(p.nonce_option(), None);
    }

    #[test]
    fn zero_length_and_overrunning_options_are_malformed() {
        let mut buf = ns_with_room_for_one_option();
        buf[24] = OPT_SOURCE_LLADDR;
        buf[25] = 0;
        assert_eq!(
            NdiscPacket::new_checked(&buf[..]).unwrap_err(),
            Error::Malformed
        );
        buf[25] = 2;
        assert_eq!(
            NdiscPacket::new_checked(&buf[..]).unwrap_err(),
            Error::Malformed
        );
        assert_eq!(
            NdiscPacket::new_checked(&buf[..25]).unwrap_err(),
            Error::Malformed
        );
        assert_eq!(
            NdiscPacket::new_checked(&buf[..23]).unwrap_err(),
            Error::Truncated
        );
    }
}

//! The heartbeat datagram, version 1: a checked zero-copy view ([`Packet`]) and its parsed
//! form ([`Repr`]), in the style of smoltcp's `wire` modules (and of
//! [`announcer_ebpf::wire`]): every field range is defined once, in [`field`], and
//! [`Packet::new_checked`] validates every length before any accessor can read, so accessors
//! never panic.
//!
//! The layout is in the [module documentation of `heartbeat`](super). This module only knows
//! the structure; authentication (the trailing tag) is checked in [`super::Verifier`].

use std::ops::Range;

use announcer_ebpf::wire::MacAddr;

use super::Reject;
use crate::election::NodeName;

/// The first four bytes of every heartbeat: ASCII `ANHB` ("announcer heartbeat").
pub const MAGIC: [u8; 4] = *b"ANHB";
/// The version this module reads and writes.
pub const VERSION: u8 = 1;
/// Length of the authentication tag: HMAC-SHA256 truncated to its leftmost 128 bits
/// (RFC 2104 §5 allows truncation to no less than half the hash length; 128 bits is the
/// truncation RFC 4868 uses for HMAC-SHA-256-128 in IPsec).
pub const TAG_LEN: usize = 16;
/// Longest node name: a DNS-1123 subdomain (Kubernetes node names are one).
pub const MAX_NAME_LEN: usize = 253;
/// Most acks in one heartbeat.
pub const MAX_ACKS: usize = 8;
/// Largest heartbeat, tag included: 1232 bytes, the IPv6 minimum link MTU of 1280
/// (RFC 8200 §5) less 40 for the IPv6 header and 8 for UDP, so a heartbeat is never
/// fragmented on any link that carries IPv6 at all. The sender packs acks to stay within it (see
/// [`super::Sealer::seal`]); the receiver rejects anything larger.
pub const MAX_DATAGRAM: usize = 1232;
/// Size of a heartbeat with a one-byte name and no acks: the shortest one possible.
pub const MIN_DATAGRAM: usize = field::acks(field::NAME + 1) + TAG_LEN;

/// Flag bits (byte [`field::FLAGS`]).
pub mod flags {
    /// The sender is shutting down and hands its VIPs over.
    pub const LEAVING: u8 = 0x01;
    /// The sender can reach the API server.
    pub const API_OK: u8 = 0x02;
    /// The sender has finished its warm-up.
    pub const READY: u8 = 0x04;
    /// Every bit version 1 defines; the others must be zero (new flags come with a new
    /// version, so an old receiver never misreads them).
    pub const ALL: u8 = LEAVING | API_OK | READY;
}

/// Field offsets. Fields after the node name are at fixed offsets from the name's end `n`
/// (`n = NAME + name length`); the acks follow at [`acks(n)`](field::acks), then the tag.
pub mod field {
    use std::ops::Range;

    /// `ANHB`.
    pub const MAGIC: Range<usize> = 0..4;
    /// Version (1).
    pub const VERSION: usize = 4;
    /// Flag bits.
    pub const FLAGS: usize = 5;
    /// Length of the node name in bytes.
    pub const NAME_LEN: usize = 6;
    /// Start of the node name.
    pub const NAME: usize = 7;

    /// Incarnation, u64 big-endian.
    pub const fn incarnation(n: usize) -> Range<usize> {
        n..n + 8
    }
    /// Sequence number, u64 big-endian.
    pub const fn sequence(n: usize) -> Range<usize> {
        n + 8..n + 16
    }
    /// Sender wall-clock time, Unix milliseconds, u64 big-endian.
    pub const fn timestamp(n: usize) -> Range<usize> {
        n + 16..n + 24
    }
    /// Sender MAC.
    pub const fn mac(n: usize) -> Range<usize> {
        n + 24..n + 30
    }
    /// Number of acks.
    pub const fn ack_count(n: usize) -> usize {
        n + 30
    }
    /// Start of the acks: each a one-byte length and that many bytes of node name.
    pub const fn acks(n: usize) -> usize {
        n + 31
    }
}

/// A checked view of a heartbeat datagram, tag included.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    /// End of the acks = start of the tag (computed once, in `new_checked`).
    signed_len: usize,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` after checking the structure: magic, version, every length field, and
    /// that exactly [`TAG_LEN`] bytes follow the acks. Names and flags are checked by
    /// [`Repr::parse`]; the tag by [`super::Verifier`].
    ///
    /// Every proper prefix of a valid heartbeat is [`Reject::Truncated`].
    pub fn new_checked(buffer: T) -> Result<Self, Reject> {
        let b = buffer.as_ref();
        let magic = b.get(field::MAGIC).ok_or(Reject::Truncated)?;
        if magic != MAGIC {
            return Err(Reject::BadMagic);
        }
        let &version = b.get(field::VERSION).ok_or(Reject::Truncated)?;
        if version != VERSION {
            return Err(Reject::UnsupportedVersion);
        }
        let &name_len = b.get(field::NAME_LEN).ok_or(Reject::Truncated)?;
        let name_len = usize::from(name_len);
        if name_len == 0 || name_len > MAX_NAME_LEN {
            return Err(Reject::Malformed);
        }
        let n = field::NAME + name_len;
        let &count = b.get(field::ack_count(n)).ok_or(Reject::Truncated)?;
        if usize::from(count) > MAX_ACKS {
            return Err(Reject::Malformed);
        }
        let mut off = field::acks(n);
        for _ in 0..count {
            let &len = b.get(off).ok_or(Reject::Truncated)?;
            let len = usize::from(len);
            if len == 0 || len > MAX_NAME_LEN {
                return Err(Reject::Malformed);
            }
            off += 1 + len;
        }
        let end = off + TAG_LEN;
        if b.len() < end {
            return Err(Reject::Truncated);
        }
        if b.len() > end || b.len() > MAX_DATAGRAM {
            return Err(Reject::Malformed);
        }
        Ok(Self {
            buffer,
            signed_len: off,
        })
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    fn name_end(&self) -> usize {
        field::NAME + usize::from(self.bytes()[field::NAME_LEN])
    }

    fn u64_at(&self, r: Range<usize>) -> u64 {
        let mut v = [0u8; 8];
        v.copy_from_slice(&self.bytes()[r]);
        u64::from_be_bytes(v)
    }

    /// The flag byte.
    pub fn flags(&self) -> u8 {
        self.bytes()[field::FLAGS]
    }

    /// The sender's node name, unvalidated.
    pub fn name(&self) -> &[u8] {
        &self.bytes()[field::NAME..self.name_end()]
    }

    /// The sender's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.u64_at(field::incarnation(self.name_end()))
    }

    /// The sequence number.
    pub fn sequence(&self) -> u64 {
        self.u64_at(field::sequence(self.name_end()))
    }

    /// The sender's wall-clock time, Unix milliseconds.
    pub fn timestamp_ms(&self) -> u64 {
        self.u64_at(field::timestamp(self.name_end()))
    }

    /// The sender's MAC.
    pub fn mac(&self) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.bytes()[field::mac(self.name_end())]);
        MacAddr(m)
    }

    /// The acked node names, unvalidated.
    pub fn acks(&self) -> impl Iterator<Item = &[u8]> {
        let n = self.name_end();
        let mut rest = &self.bytes()[field::acks(n)..self.signed_len];
        std::iter::from_fn(move || {
            let (&len, tail) = rest.split_first()?;
            let (name, tail) = tail.split_at(usize::from(len));
            rest = tail;
            Some(name)
        })
    }

    /// Everything the tag covers: the datagram up to the tag.
    pub fn signed(&self) -> &[u8] {
        &self.bytes()[..self.signed_len]
    }

    /// The tag.
    pub fn tag(&self) -> &[u8] {
        &self.bytes()[self.signed_len..]
    }
}

/// Whether `name` is a DNS-1123 subdomain (what Kubernetes requires of node names):
/// 1 to 253 characters, dot-separated labels of lowercase letters, digits and `-`, each label
/// non-empty and starting and ending with a letter or digit.
pub fn is_dns1123_subdomain(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.split(|&b| b == b'.').all(|label| {
            let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
            match (label.first(), label.last()) {
                (Some(first), Some(last)) => {
                    alnum(first) && alnum(last) && label.iter().all(|b| alnum(b) || *b == b'-')
                }
                _ => false,
            }
        })
}

/// A node name as checked on the wire.
fn node_name(bytes: &[u8]) -> Result<NodeName, Reject> {
    if !is_dns1123_subdomain(bytes) {
        return Err(Reject::BadName);
    }
    // DNS-1123 names are ASCII, so this cannot fail.
    let s = std::str::from_utf8(bytes).map_err(|_| Reject::BadName)?;
    Ok(NodeName::from(s))
}

/// The parsed form of a heartbeat (everything but the tag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repr {
    /// Sender.
    pub node: NodeName,
    /// Flag bits (see [`flags`]).
    pub flags: u8,
    /// Sender's incarnation.
    pub incarnation: u64,
    /// Sequence number within the incarnation.
    pub sequence: u64,
    /// Sender's wall clock, Unix milliseconds.
    pub timestamp_ms: u64,
    /// Sender's MAC.
    pub mac: MacAddr,
    /// Acked node names (at most [`MAX_ACKS`]).
    pub acks: Vec<NodeName>,
}

impl Repr {
    /// Reads a checked packet: rejects undefined flag bits ([`Reject::Malformed`]) and names
    /// that are not DNS-1123 subdomains ([`Reject::BadName`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, Reject> {
        if p.flags() & !flags::ALL != 0 {
            return Err(Reject::Malformed);
        }
        Ok(Self {
            node: node_name(p.name())?,
            flags: p.flags(),
            incarnation: p.incarnation(),
            sequence: p.sequence(),
            timestamp_ms: p.timestamp_ms(),
            mac: p.mac(),
            acks: p.acks().map(node_name).collect::<Result<_, _>>()?,
        })
    }

    /// Bytes [`emit`](Self::emit) writes (without the tag).
    pub fn buffer_len(&self) -> usize {
        field::acks(field::NAME + self.node.as_str().len())
            + self
                .acks
                .iter()
                .map(|a| 1 + a.as_str().len())
                .sum::<usize>()
    }

    /// Appends the heartbeat, without its tag, to `out`.
    ///
    /// # Panics
    /// If a name is empty or longer than [`MAX_NAME_LEN`], or there are more than
    /// [`MAX_ACKS`] acks: the [`super::Sealer`] never builds such a `Repr`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let name_len = |n: &NodeName| {
            let len = n.as_str().len();
            assert!((1..=MAX_NAME_LEN).contains(&len), "bad name length {len}");
            len as u8
        };
        assert!(self.acks.len() <= MAX_ACKS, "too many acks");
        out.reserve(self.buffer_len() + TAG_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.flags);
        out.push(name_len(&self.node));
        out.extend_from_slice(self.node.as_str().as_bytes());
        out.extend_from_slice(&self.incarnation.to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        out.extend_from_slice(&self.mac.0);
        out.push(self.acks.len() as u8);
        for a in &self.acks {
            out.push(name_len(a));
            out.extend_from_slice(a.as_str().as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `node-a`, ready + api_ok, incarnation 0x0102030405060708, sequence 9, time 1000 ms,
    /// MAC 02:00:00:00:00:01, one ack `b`; then a dummy tag.
    const BEAT: [u8; 62] = [
        b'A', b'N', b'H', b'B', // magic
        1,    // version
        0x06, // api_ok | ready
        6, b'n', b'o', b'd', b'e', b'-', b'a', // name
        1, 2, 3, 4, 5, 6, 7, 8, // incarnation
        0, 0, 0, 0, 0, 0, 0, 9, // sequence
        0, 0, 0, 0, 0, 0, 0x03, 0xe8, // timestamp
        2, 0, 0, 0, 0, 1, // mac
        1, 1, b'b', // acks
        0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, // tag
        0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
    ];

    fn repr() -> Repr {
        Repr {
            node: "node-a".into(),
            flags: flags::API_OK | flags::READY,
            incarnation: 0x0102_0304_0506_0708,
            sequence: 9,
            timestamp_ms: 1000,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            acks: vec!["b".into()],
        }
    }

    #[test]
    fn parses_and_emits_the_reference_bytes() {
        let p = Packet::new_checked(&BEAT[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        assert_eq!(p.tag(), &[0xaa; TAG_LEN]);
        assert_eq!(p.signed(), &BEAT[..BEAT.len() - TAG_LEN]);
        let mut out = Vec::new();
        repr().emit(&mut out);
        assert_eq!(out.len(), repr().buffer_len());
        assert_eq!(out, &BEAT[..BEAT.len() - TAG_LEN]);
    }

    #[test]
    fn every_prefix_is_truncated_and_extra_bytes_malformed() {
        for len in 0..BEAT.len() {
            assert_eq!(
                Packet::new_checked(&BEAT[..len]).unwrap_err(),
                Reject::Truncated,
                "prefix of {len} bytes"
            );
        }
        let mut long = BEAT.to_vec();
        long.push(0);
        assert_eq!(
            Packet::new_checked(&long[..]).unwrap_err(),
            Reject::Malformed
        );
    }

    #[test]
    fn structural_rejects() {
        let with = |i: usize, v: u8| {
            let mut b = BEAT;
            b[i] = v;
            b
        };
        let check = |b: [u8; 62]| Packet::new_checked(b).and_then(|p| Repr::parse(&p));
        assert_eq!(check(with(0, b'X')).unwrap_err(), Reject::BadMagic);
        assert_eq!(check(with(4, 2)).unwrap_err(), Reject::UnsupportedVersion);
        assert_eq!(check(with(5, 0x08)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(6, 0)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(6, 254)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(7, b'N')).unwrap_err(), Reject::BadName);
        assert_eq!(check(with(44, 0)).unwrap_err(), Reject::Malformed); // ack len 0
        assert_eq!(check(with(45, b'-')).unwrap_err(), Reject::BadName);
        assert_eq!(check(with(43, 9)).unwrap_err(), Reject::Malformed); // 9 acks
    }

    #[test]
    fn dns1123() {
        for good in ["a", "node-1", "ip-10-0-0-1.ec2.internal", &"a".repeat(253)] {
            assert!(is_dns1123_subdomain(good.as_bytes()), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a..b",
            ".a",
            "a.",
            "a_b",
            "ä",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(bad.as_bytes()), "{bad}");
        }
    }

    #[test]
    fn the_largest_heartbeat_fits() {
        // The sender packs acks under MAX_DATAGRAM; the shortest is what MIN_DATAGRAM says.
        let mut r = repr();
        r.acks.clear();
        r.node = "a".into();
        assert_eq!(r.buffer_len() + TAG_LEN, MIN_DATAGRAM);
        const { assert!(MAX_DATAGRAM <= 1280 - 48) };
    }
}

//! The heartbeat datagram, version 2: a checked zero-copy view ([`Packet`]) and its parsed
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
/// The version this module reads and writes. Version 1 (one cluster-wide key, an ack list)
/// is refused as [`Reject::UnsupportedVersion`].
pub const VERSION: u8 = 2;
/// Length of the authentication tag: HMAC-SHA256 truncated to its leftmost 128 bits
/// (RFC 2104 §5 allows truncation to no less than half the hash length; 128 bits is the
/// truncation RFC 4868 uses for HMAC-SHA-256-128 in IPsec).
pub const TAG_LEN: usize = 16;
/// Longest node name: a DNS-1123 subdomain (Kubernetes node names are one).
pub const MAX_NAME_LEN: usize = 253;
/// Largest datagram accepted: 1232 bytes, the IPv6 minimum link MTU of 1280 (RFC 8200 §5) less
/// 40 for the IPv6 header and 8 for UDP, so a heartbeat is never fragmented on any link that
/// carries IPv6 at all. Version 2 has no variable list, so even two 253-byte names make only
/// [`LONGEST`] bytes; the receiver still rejects anything larger than this bound.
pub const MAX_DATAGRAM: usize = 1232;
/// Bytes of everything but the two names.
pub const FIXED_LEN: usize = field::NAME + 1 + field::AFTER_NAMES + TAG_LEN;
/// Size of a heartbeat with two one-byte names: the shortest one possible.
pub const MIN_DATAGRAM: usize = FIXED_LEN + 2;
/// Size of a heartbeat with two 253-byte names: the longest one possible.
pub const LONGEST: usize = FIXED_LEN + 2 * MAX_NAME_LEN;
const _: () = assert!(LONGEST <= MAX_DATAGRAM);

/// Flag bits (byte [`field::FLAGS`]).
pub mod flags {
    /// The sender is shutting down and hands its VIPs over.
    pub const LEAVING: u8 = 0x01;
    /// The sender can reach the API server.
    pub const API_OK: u8 = 0x02;
    /// The sender has finished its warm-up.
    pub const READY: u8 = 0x04;
    /// The sender has taken over the recipient's VIPs (handover ack).
    pub const ACK: u8 = 0x08;
    /// The sender hears the recipient's heartbeats.
    pub const HEARS: u8 = 0x10;
    /// Every bit version 2 defines; the others must be zero (new flags come with a new
    /// version, so an old receiver never misreads them).
    pub const ALL: u8 = LEAVING | API_OK | READY | ACK | HEARS;
}

/// Field offsets. The recipient's length byte follows the sender's name at `s`
/// (`s = SENDER + sender length`); the fields after the recipient are at fixed offsets from
/// its end `n` (`n = s + 1 + recipient length`), the tag last.
pub mod field {
    use std::ops::Range;

    /// `ANHB`.
    pub const MAGIC: Range<usize> = 0..4;
    /// Version (2).
    pub const VERSION: usize = 4;
    /// Flag bits.
    pub const FLAGS: usize = 5;
    /// Length of the sender's node name in bytes.
    pub const SENDER_LEN: usize = 6;
    /// Start of the sender's node name.
    pub const SENDER: usize = 7;
    /// Start of the first name (what [`super::FIXED_LEN`] counts from).
    pub const NAME: usize = SENDER;
    /// Bytes from the end of the recipient's name to the tag.
    pub const AFTER_NAMES: usize = 46;

    /// Length of the recipient's node name, after the sender's name ending at `s`.
    pub const fn recipient_len(s: usize) -> usize {
        s
    }
    /// Start of the recipient's node name.
    pub const fn recipient(s: usize) -> usize {
        s + 1
    }
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
    /// Configuration fingerprint, u64 big-endian.
    pub const fn config(n: usize) -> Range<usize> {
        n + 30..n + 38
    }
    /// View fingerprint, u64 big-endian.
    pub const fn view(n: usize) -> Range<usize> {
        n + 38..n + 46
    }
    /// The tag.
    pub const fn tag(n: usize) -> Range<usize> {
        n + AFTER_NAMES..n + AFTER_NAMES + super::TAG_LEN
    }
}

/// A checked view of a heartbeat datagram, tag included.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
    /// End of the sender's name (computed once, in `new_checked`).
    sender_end: usize,
    /// End of the recipient's name.
    names_end: usize,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` after checking the structure: magic, version, both name lengths, and
    /// that the datagram ends exactly with the tag. Names and flags are checked by
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
        let name_len = |at: usize| -> Result<usize, Reject> {
            let &len = b.get(at).ok_or(Reject::Truncated)?;
            let len = usize::from(len);
            if len == 0 || len > MAX_NAME_LEN {
                return Err(Reject::Malformed);
            }
            Ok(len)
        };
        let sender_end = field::SENDER + name_len(field::SENDER_LEN)?;
        let names_end = field::recipient(sender_end) + name_len(field::recipient_len(sender_end))?;
        let end = field::tag(names_end).end;
        if b.len() < end {
            return Err(Reject::Truncated);
        }
        if b.len() > end || b.len() > MAX_DATAGRAM {
            return Err(Reject::Malformed);
        }
        Ok(Self {
            buffer,
            sender_end,
            names_end,
        })
    }

    fn bytes(&self) -> &[u8] {
        self.buffer.as_ref()
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
    pub fn sender(&self) -> &[u8] {
        &self.bytes()[field::SENDER..self.sender_end]
    }

    /// The recipient's node name, unvalidated.
    pub fn recipient(&self) -> &[u8] {
        &self.bytes()[field::recipient(self.sender_end)..self.names_end]
    }

    /// The sender's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.u64_at(field::incarnation(self.names_end))
    }

    /// The sequence number.
    pub fn sequence(&self) -> u64 {
        self.u64_at(field::sequence(self.names_end))
    }

    /// The sender's wall-clock time, Unix milliseconds.
    pub fn timestamp_ms(&self) -> u64 {
        self.u64_at(field::timestamp(self.names_end))
    }

    /// The sender's MAC.
    pub fn mac(&self) -> MacAddr {
        let mut m = [0u8; 6];
        m.copy_from_slice(&self.bytes()[field::mac(self.names_end)]);
        MacAddr(m)
    }

    /// The sender's configuration fingerprint.
    pub fn config(&self) -> u64 {
        self.u64_at(field::config(self.names_end))
    }

    /// The sender's view fingerprint.
    pub fn view(&self) -> u64 {
        self.u64_at(field::view(self.names_end))
    }

    /// Everything the tag covers: the datagram up to the tag.
    pub fn signed(&self) -> &[u8] {
        &self.bytes()[..field::tag(self.names_end).start]
    }

    /// The tag.
    pub fn tag(&self) -> &[u8] {
        &self.bytes()[field::tag(self.names_end)]
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

/// A node name as checked on the wire, still borrowed.
pub(super) fn name_str(bytes: &[u8]) -> Result<&str, Reject> {
    if !is_dns1123_subdomain(bytes) {
        return Err(Reject::BadName);
    }
    // DNS-1123 names are ASCII, so this cannot fail.
    std::str::from_utf8(bytes).map_err(|_| Reject::BadName)
}

/// The parsed form of a heartbeat (everything but the tag).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Repr {
    /// Sender.
    pub sender: NodeName,
    /// The one node this datagram is for.
    pub recipient: NodeName,
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
    /// Sender's configuration fingerprint.
    pub config: u64,
    /// Sender's view fingerprint.
    pub view: u64,
}

impl Repr {
    /// Reads a checked packet: rejects undefined flag bits ([`Reject::Malformed`]) and names
    /// that are not DNS-1123 subdomains ([`Reject::BadName`]).
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, Reject> {
        if p.flags() & !flags::ALL != 0 {
            return Err(Reject::Malformed);
        }
        Ok(Self {
            sender: name_str(p.sender())?.into(),
            recipient: name_str(p.recipient())?.into(),
            flags: p.flags(),
            incarnation: p.incarnation(),
            sequence: p.sequence(),
            timestamp_ms: p.timestamp_ms(),
            mac: p.mac(),
            config: p.config(),
            view: p.view(),
        })
    }

    /// Bytes [`emit`](Self::emit) writes (without the tag).
    pub fn buffer_len(&self) -> usize {
        FIXED_LEN - TAG_LEN + self.sender.as_str().len() + self.recipient.as_str().len()
    }

    /// Appends the heartbeat, without its tag, to `out`.
    ///
    /// # Panics
    /// If a name is empty or longer than [`MAX_NAME_LEN`]: the [`super::Sealer`] never builds
    /// such a `Repr`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        let name = |out: &mut Vec<u8>, n: &NodeName| {
            let len = n.as_str().len();
            assert!((1..=MAX_NAME_LEN).contains(&len), "bad name length {len}");
            out.push(len as u8);
            out.extend_from_slice(n.as_str().as_bytes());
        };
        out.reserve(self.buffer_len() + TAG_LEN);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.flags);
        name(out, &self.sender);
        name(out, &self.recipient);
        out.extend_from_slice(&self.incarnation.to_be_bytes());
        out.extend_from_slice(&self.sequence.to_be_bytes());
        out.extend_from_slice(&self.timestamp_ms.to_be_bytes());
        out.extend_from_slice(&self.mac.0);
        out.extend_from_slice(&self.config.to_be_bytes());
        out.extend_from_slice(&self.view.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `node-a` to `b`, ready + api_ok + hears, incarnation 0x0102030405060708, sequence 9,
    /// time 1000 ms, MAC 02:00:00:00:00:01, config 0x11.., view 0x22..; then a dummy tag.
    const BEAT: [u8; 77] = [
        b'A', b'N', b'H', b'B', // magic
        2,    // version
        0x16, // api_ok | ready | hears
        6, b'n', b'o', b'd', b'e', b'-', b'a', // sender
        1, b'b', // recipient
        1, 2, 3, 4, 5, 6, 7, 8, // incarnation
        0, 0, 0, 0, 0, 0, 0, 9, // sequence
        0, 0, 0, 0, 0, 0, 0x03, 0xe8, // timestamp
        2, 0, 0, 0, 0, 1, // mac
        0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, // config
        0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, // view
        0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, // tag
        0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa,
    ];

    fn repr() -> Repr {
        Repr {
            sender: "node-a".into(),
            recipient: "b".into(),
            flags: flags::API_OK | flags::READY | flags::HEARS,
            incarnation: 0x0102_0304_0506_0708,
            sequence: 9,
            timestamp_ms: 1000,
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            config: 0x1111_1111_1111_1111,
            view: 0x2222_2222_2222_2222,
        }
    }

    #[test]
    fn parses_and_emits_the_reference_bytes() {
        let p = Packet::new_checked(&BEAT[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        assert_eq!(p.sender(), b"node-a");
        assert_eq!(p.recipient(), b"b");
        assert_eq!(p.tag(), &[0xaa; TAG_LEN]);
        assert_eq!(p.signed(), &BEAT[..BEAT.len() - TAG_LEN]);
        let mut out = Vec::new();
        repr().emit(&mut out);
        assert_eq!(out.len(), repr().buffer_len());
        assert_eq!(out, &BEAT[..BEAT.len() - TAG_LEN]);
    }

    #[test]
    fn every_proper_prefix_is_truncated_and_extra_bytes_malformed() {
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
        let check = |b: [u8; 77]| Packet::new_checked(b).and_then(|p| Repr::parse(&p));
        assert_eq!(check(with(0, b'X')).unwrap_err(), Reject::BadMagic);
        assert_eq!(check(with(5, 0x20)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(5, 0x80)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(6, 0)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(6, 254)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(7, b'N')).unwrap_err(), Reject::BadName);
        assert_eq!(check(with(13, 0)).unwrap_err(), Reject::Malformed); // recipient len 0
        assert_eq!(check(with(13, 254)).unwrap_err(), Reject::Malformed);
        assert_eq!(check(with(14, b'-')).unwrap_err(), Reject::BadName);
        // A longer recipient than the bytes hold: the datagram is a prefix of a longer one.
        assert_eq!(check(with(13, 2)).unwrap_err(), Reject::Truncated);
    }

    #[test]
    fn other_versions_are_unsupported() {
        for v in [0, 1, 3, 255] {
            let mut b = BEAT;
            b[field::VERSION] = v;
            assert_eq!(
                Packet::new_checked(&b[..]).unwrap_err(),
                Reject::UnsupportedVersion,
                "version {v}"
            );
        }
    }

    #[test]
    fn every_flag_round_trips() {
        for f in [
            flags::LEAVING,
            flags::API_OK,
            flags::READY,
            flags::ACK,
            flags::HEARS,
            flags::ALL,
            0,
        ] {
            let r = Repr { flags: f, ..repr() };
            let mut out = Vec::new();
            r.emit(&mut out);
            out.extend_from_slice(&[0; TAG_LEN]);
            let p = Packet::new_checked(&out[..]).unwrap();
            assert_eq!(Repr::parse(&p).unwrap(), r);
        }
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
    fn the_shortest_and_longest_heartbeats_are_what_the_constants_say() {
        let mut r = repr();
        r.sender = "a".into();
        r.recipient = "b".into();
        assert_eq!(r.buffer_len() + TAG_LEN, MIN_DATAGRAM);
        assert_eq!(MIN_DATAGRAM, 72);
        r.sender = "a".repeat(253).into();
        r.recipient = "b".repeat(253).into();
        let mut out = Vec::new();
        r.emit(&mut out);
        out.extend_from_slice(&[0; TAG_LEN]);
        assert_eq!(out.len(), LONGEST);
        assert!(Packet::new_checked(&out[..]).is_ok());
        const { assert!(LONGEST <= MAX_DATAGRAM && MAX_DATAGRAM <= 1280 - 48) };
    }
}

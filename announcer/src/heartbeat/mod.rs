//! Heartbeats between agents: the wire format, authentication and replay protection (sans-IO).
//!
//! Why: the Lease in the API server is the authority on membership, but at one renewal every
//! few seconds it is far too slow to notice a crashed node. Agents therefore send each other
//! small UDP heartbeats over the announcing network (every 100 ms by default; a peer is dead
//! after 3 misses, see [`crate::election::Config`]). A heartbeat claims "I am alive", "I am
//! leaving" or "I took over your VIPs", so a forged or replayed one could keep a dead node's
//! VIPs unannounced or force a takeover. Every heartbeat is therefore authenticated with a key
//! shared through a Kubernetes Secret, and replay-protected.
//!
//! This module does no I/O and reads no clock: [`Sealer::seal`] and [`Verifier::open`] take
//! the wall-clock time as an argument. The socket side is [`crate::agent::heartbeat`].
//!
//! # Wire format, version 1
//!
//! All integers are big-endian (network byte order). `n` = 7 + name length.
//!
//! | Offset     | Size | Field        | Contents                                                    |
//! |------------|------|--------------|-------------------------------------------------------------|
//! | 0          | 4    | magic        | ASCII `ANHB`                                                |
//! | 4          | 1    | version      | 1                                                           |
//! | 5          | 1    | flags        | bit 0 `leaving`, bit 1 `api_ok`, bit 2 `ready`; others 0    |
//! | 6          | 1    | name length  | 1..=253                                                     |
//! | 7          | len  | node name    | the sender, a DNS-1123 subdomain                            |
//! | n          | 8    | incarnation  | grows on every agent start (start time, ns since the epoch) |
//! | n + 8      | 8    | sequence     | grows by one per heartbeat within an incarnation            |
//! | n + 16     | 8    | timestamp    | sender's wall clock, milliseconds since the Unix epoch      |
//! | n + 24     | 6    | MAC          | the interface the sender sends from (where to probe it)     |
//! | n + 30     | 1    | ack count    | 0..=8 ([`wire::MAX_ACKS`])                                  |
//! | n + 31     | …    | acks         | per ack: 1-byte length (1..=253), then a DNS-1123 node name |
//! | end − 16   | 16   | tag          | HMAC-SHA256 over every byte before it, leftmost 128 bits    |
//!
//! A heartbeat is at most 1232 bytes ([`wire::MAX_DATAGRAM`]: the IPv6 minimum MTU less the
//! IPv6 and UDP headers), so it is never fragmented. The shortest is 55 bytes, a typical one
//! (30-byte name, no acks) 84. The sender fits acks under that bound (see
//! [`Sealer::seal`]); the receiver rejects anything that breaks any rule above.
//!
//! The tag is truncated to 16 bytes: 128 bits leave a forger a 2⁻¹²⁸ chance per attempt (the
//! same truncation as HMAC-SHA-256-128 in IPsec, RFC 4868 §2.3; RFC 2104 §5 allows down to
//! half the hash length), and save 16 bytes on each of the ten heartbeats per second per
//! peer. It is compared in constant time ([`hmac::Mac::verify_truncated_left`]).
//!
//! # Replay protection
//!
//! A [`Verifier`] remembers, per peer, the highest (incarnation, sequence) it accepted, and
//! accepts only a newer incarnation, or the same incarnation with a higher sequence. Late,
//! reordered heartbeats are therefore dropped ([`Reject::Replayed`]) rather than accepted
//! within a window: heartbeats are idempotent statements of current state, so a late one
//! carries nothing the next one will not, and the simplest rule is the strongest.
//!
//! A receiver that has just started has no replay state. The timestamp covers that case: a
//! heartbeat whose time is more than the maximum skew (5 s by default) away from the
//! receiver's clock is rejected ([`Reject::ClockSkew`]), so captured traffic can be replayed
//! to a fresh receiver for at most that long after it was sent. This assumes node clocks
//! agree within the skew (NTP); a node whose clock is off by more is not heard, and falls
//! back to what the Lease says. The Lease stays the authority on membership: heartbeats only
//! make failover fast, they never keep a node whose Lease expired in the cluster.
//!
//! Incarnations are the agent's start time in nanoseconds, so they grow across restarts as
//! long as the node's clock does not step back past the previous start; a sender whose
//! incarnation went backwards is rejected ([`Reject::OldIncarnation`]) by receivers that
//! remember it, until they [`forget`](Verifier::forget) it (when its Lease goes).
//!
//! # Keys
//!
//! A [`Key`] is at least 16 bytes of Secret data. During a rotation receivers accept the
//! current and the previous key ([`Keys`]); senders always use the current one.

pub mod wire;

#[cfg(test)]
mod tests;

use std::{collections::HashMap, fmt, time::Duration};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::election::{Beat, NodeName};
pub use wire::{MAX_DATAGRAM, Packet, Repr};

type HmacSha256 = Hmac<Sha256>;

/// Shortest accepted key, in bytes (128 bits, the tag's strength).
pub const MIN_KEY_LEN: usize = 16;

/// The default largest difference between sender and receiver clocks.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(5);

/// Why a key or a sender identity was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The Secret holds fewer than [`MIN_KEY_LEN`] bytes.
    #[error(
        "the heartbeat key is {len} bytes long; at least {MIN_KEY_LEN} are needed \
         (generate one with `head -c 32 /dev/urandom`)"
    )]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// The node name is not a DNS-1123 subdomain of at most 253 characters, so it cannot be a
    /// Kubernetes node name nor be sent.
    #[error("{name:?} is not a valid node name (a DNS-1123 subdomain of at most 253 characters)")]
    BadNodeName {
        /// The name.
        name: String,
    },
}

/// A heartbeat authentication key (HMAC-SHA256).
#[derive(Clone)]
pub struct Key {
    /// HMAC state keyed once; cloned per message.
    mac: HmacSha256,
}

impl Key {
    /// A key from Secret bytes; at least [`MIN_KEY_LEN`] of them.
    pub fn new(secret: &[u8]) -> Result<Self, KeyError> {
        if secret.len() < MIN_KEY_LEN {
            return Err(KeyError::TooShort { len: secret.len() });
        }
        let mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
        Ok(Self { mac })
    }

    /// The full tag of `data`, to be truncated to [`wire::TAG_LEN`].
    fn tag(&self, data: &[u8]) -> [u8; wire::TAG_LEN] {
        let full = self.mac.clone().chain_update(data).finalize().into_bytes();
        let mut tag = [0u8; wire::TAG_LEN];
        tag.copy_from_slice(&full[..wire::TAG_LEN]);
        tag
    }

    /// Whether `tag` is the truncated tag of `data`, compared in constant time.
    fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        self.mac
            .clone()
            .chain_update(data)
            .verify_truncated_left(tag)
            .is_ok()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The keys a receiver accepts: the current one and, during a rotation, the previous one.
#[derive(Clone, Debug)]
pub struct Keys {
    /// Used to send, and tried first.
    pub current: Key,
    /// Also accepted while peers still send with it.
    pub previous: Option<Key>,
}

impl Keys {
    /// Only `current`.
    pub fn new(current: Key) -> Self {
        Self {
            current,
            previous: None,
        }
    }

    /// `current`, and `previous` accepted too.
    pub fn rotating(current: Key, previous: Key) -> Self {
        Self {
            current,
            previous: Some(previous),
        }
    }
}

/// Which key authenticated a heartbeat (to see when a rotation has finished).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyUsed {
    /// [`Keys::current`].
    Current,
    /// [`Keys::previous`].
    Previous,
}

fn check_node_name(node: &NodeName) -> Result<(), KeyError> {
    if wire::is_dns1123_subdomain(node.as_str().as_bytes()) {
        Ok(())
    } else {
        Err(KeyError::BadNodeName {
            name: node.as_str().to_owned(),
        })
    }
}

/// Seals this node's heartbeats: one per agent run.
#[derive(Debug)]
pub struct Sealer {
    key: Key,
    node: NodeName,
    incarnation: u64,
    /// The last sequence number used (0: none yet).
    sequence: u64,
}

impl Sealer {
    /// A sealer for `node` in `incarnation` (the agent's start time in ns since the epoch).
    pub fn new(key: Key, node: NodeName, incarnation: u64) -> Result<Self, KeyError> {
        check_node_name(&node)?;
        Ok(Self {
            key,
            node,
            incarnation,
            sequence: 0,
        })
    }

    /// Switches to a new key (the Secret changed); the sequence goes on.
    pub fn set_key(&mut self, key: Key) {
        self.key = key;
    }

    /// The sequence number of the last sealed heartbeat (0 before the first).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Builds, numbers and authenticates one heartbeat carrying `beat`'s flags, MAC and acks,
    /// stamped with `unix_ms` (the wall clock now). The node and incarnation are the sealer's;
    /// those in `beat` are ignored.
    ///
    /// Acks are sent while they fit: at most [`wire::MAX_ACKS`], within
    /// [`wire::MAX_DATAGRAM`]. Acks that are not valid node names are skipped. If not all fit,
    /// each heartbeat starts from a different one (rotating with the sequence number), so
    /// acks the core keeps repeating all reach their node within a few periods.
    pub fn seal(&mut self, beat: &Beat, unix_ms: u64) -> Vec<u8> {
        self.sequence += 1;
        let mut repr = Repr {
            node: self.node.clone(),
            flags: flag_bits(beat),
            incarnation: self.incarnation,
            sequence: self.sequence,
            timestamp_ms: unix_ms,
            mac: beat.mac,
            acks: Vec::new(),
        };
        let valid: Vec<&NodeName> = beat
            .acks
            .iter()
            .filter(|a| wire::is_dns1123_subdomain(a.as_str().as_bytes()))
            .collect();
        let budget = MAX_DATAGRAM - wire::TAG_LEN;
        let mut len = repr.buffer_len();
        let fits_all = valid.len() <= wire::MAX_ACKS
            && len + valid.iter().map(|a| 1 + a.as_str().len()).sum::<usize>() <= budget;
        let start = if fits_all || valid.is_empty() {
            0
        } else {
            (self.sequence % valid.len() as u64) as usize
        };
        for a in valid.iter().cycle().skip(start).take(valid.len()) {
            let need = 1 + a.as_str().len();
            if repr.acks.len() < wire::MAX_ACKS && len + need <= budget {
                repr.acks.push((*a).clone());
                len += need;
            }
        }
        let mut out = Vec::with_capacity(len + wire::TAG_LEN);
        repr.emit(&mut out);
        let tag = self.key.tag(&out);
        out.extend_from_slice(&tag);
        out
    }
}

fn flag_bits(beat: &Beat) -> u8 {
    (if beat.leaving {
        wire::flags::LEAVING
    } else {
        0
    }) | (if beat.api_ok { wire::flags::API_OK } else { 0 })
        | (if beat.ready { wire::flags::READY } else { 0 })
}

/// Why a datagram was not accepted as a heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Reject {
    /// Shorter than its length fields say.
    #[error("truncated")]
    Truncated,
    /// Does not start with `ANHB`: not a heartbeat at all.
    #[error("not a heartbeat (bad magic)")]
    BadMagic,
    /// A heartbeat of a version this agent does not speak (mixed versions during an upgrade).
    #[error("unsupported heartbeat version")]
    UnsupportedVersion,
    /// A length, count or flag out of range, or bytes after the tag.
    #[error("malformed heartbeat")]
    Malformed,
    /// A node name that is not a DNS-1123 subdomain.
    #[error("malformed node name")]
    BadName,
    /// The tag does not match under any accepted key: forged, corrupted, or sent with a key
    /// this node does not have.
    #[error("bad authentication tag (wrong key or forged)")]
    BadTag,
    /// Our own heartbeat (looped back, or another node configured with our name).
    #[error("sent by this node")]
    FromSelf,
    /// Not newer than the last accepted heartbeat of this incarnation.
    #[error("replayed or reordered")]
    Replayed,
    /// From an incarnation older than the last one accepted from that node.
    #[error("from an old incarnation")]
    OldIncarnation,
    /// Sender and receiver clocks differ by more than the maximum skew.
    #[error("timestamp outside the allowed clock skew")]
    ClockSkew,
}

impl Reject {
    /// Every reason, in a fixed order (for registering metrics up front).
    pub const ALL: [Reject; 10] = [
        Reject::Truncated,
        Reject::BadMagic,
        Reject::UnsupportedVersion,
        Reject::Malformed,
        Reject::BadName,
        Reject::BadTag,
        Reject::FromSelf,
        Reject::Replayed,
        Reject::OldIncarnation,
        Reject::ClockSkew,
    ];

    /// A short snake_case label for metrics.
    pub const fn reason(self) -> &'static str {
        match self {
            Reject::Truncated => "truncated",
            Reject::BadMagic => "bad_magic",
            Reject::UnsupportedVersion => "unsupported_version",
            Reject::Malformed => "malformed",
            Reject::BadName => "bad_name",
            Reject::BadTag => "bad_tag",
            Reject::FromSelf => "from_self",
            Reject::Replayed => "replayed",
            Reject::OldIncarnation => "old_incarnation",
            Reject::ClockSkew => "clock_skew",
        }
    }

    /// This reason's position in [`ALL`](Self::ALL) (for arrays of counters).
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// An authenticated, fresh heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// What the election core takes ([`crate::election::Input::Heartbeat`]).
    pub beat: Beat,
    /// Its sequence number.
    pub sequence: u64,
    /// The sender's wall clock when it sent it, Unix milliseconds.
    pub sent_unix_ms: u64,
    /// Which key authenticated it.
    pub key: KeyUsed,
}

/// Verifies the heartbeats this node receives, and remembers what it accepted from whom.
#[derive(Debug)]
pub struct Verifier {
    keys: Keys,
    own: NodeName,
    max_skew_ms: u64,
    /// Per peer: the last accepted (incarnation, sequence).
    seen: HashMap<NodeName, (u64, u64)>,
}

impl Verifier {
    /// A verifier for node `own`, with the default maximum skew ([`DEFAULT_MAX_SKEW`]).
    pub fn new(keys: Keys, own: NodeName) -> Self {
        Self {
            keys,
            own,
            max_skew_ms: DEFAULT_MAX_SKEW.as_millis() as u64,
            seen: HashMap::new(),
        }
    }

    /// Sets the largest accepted difference between a heartbeat's timestamp and now.
    pub fn with_max_skew(mut self, max_skew: Duration) -> Self {
        self.max_skew_ms = u64::try_from(max_skew.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Replaces the accepted keys (the Secret changed).
    pub fn set_keys(&mut self, keys: Keys) {
        self.keys = keys;
    }

    /// Drops the replay state of `node` (its Lease is gone): its next heartbeat is accepted
    /// whatever its incarnation.
    pub fn forget(&mut self, node: &NodeName) {
        self.seen.remove(node);
    }

    /// The last accepted (incarnation, sequence) of `node`.
    pub fn last_seen(&self, node: &NodeName) -> Option<(u64, u64)> {
        self.seen.get(node).copied()
    }

    /// Checks one datagram received at wall-clock time `now_unix_ms`: structure, tag, sender,
    /// freshness, then replay. Only a datagram that passes every check updates the replay
    /// state.
    pub fn open(&mut self, datagram: &[u8], now_unix_ms: u64) -> Result<Verified, Reject> {
        let packet = Packet::new_checked(datagram)?;
        let key = if self.keys.current.verify(packet.signed(), packet.tag()) {
            KeyUsed::Current
        } else if self
            .keys
            .previous
            .as_ref()
            .is_some_and(|k| k.verify(packet.signed(), packet.tag()))
        {
            KeyUsed::Previous
        } else {
            return Err(Reject::BadTag);
        };
        let repr = Repr::parse(&packet)?;
        if repr.node == self.own {
            return Err(Reject::FromSelf);
        }
        if repr.timestamp_ms.abs_diff(now_unix_ms) > self.max_skew_ms {
            return Err(Reject::ClockSkew);
        }
        let now = (repr.incarnation, repr.sequence);
        if let Some(&(inc, seq)) = self.seen.get(&repr.node) {
            if repr.incarnation < inc {
                return Err(Reject::OldIncarnation);
            }
            if repr.incarnation == inc && repr.sequence <= seq {
                return Err(Reject::Replayed);
            }
        }
        self.seen.insert(repr.node.clone(), now);
        Ok(Verified {
            beat: Beat {
                node: repr.node,
                incarnation: repr.incarnation,
                mac: repr.mac,
                leaving: repr.flags & wire::flags::LEAVING != 0,
                api_ok: repr.flags & wire::flags::API_OK != 0,
                ready: repr.flags & wire::flags::READY != 0,
                acks: repr.acks,
                hears: Vec::new(),
                config: 0,
                view: 0,
            },
            sequence: repr.sequence,
            sent_unix_ms: repr.timestamp_ms,
            key,
        })
    }
}

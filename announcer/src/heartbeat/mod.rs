//! Heartbeats between agents: the wire format, per-node authentication and replay protection
//! (sans-IO).
//!
//! Why: the Lease in the API server is the authority on membership, but at one renewal every
//! few seconds it is far too slow to notice a crashed node. Agents therefore send each other
//! small UDP heartbeats over the announcing network (every 75 ms by default; a peer is dead
//! after 3 misses, see [`crate::election::ElectionConfig`]). A heartbeat claims "I am alive", "I am
//! leaving", "I took over your VIPs" or "I hear you", so a forged or replayed one could keep a
//! dead node's VIPs unannounced or force a takeover. Every heartbeat is therefore
//! authenticated with a key only its sender and its recipient hold, and replay-protected.
//!
//! This module does no I/O and reads no clock: [`Sealer::seal`] and [`Verifier::open`] take
//! the wall-clock time as an argument. The socket side is [`crate::agent::net::heartbeat_socket`].
//!
//! # Threat model
//!
//! Each node has its own X25519 key pair ([`Identity`]); the secret never leaves the node (a
//! 0600 file, [`Identity::load_or_create`]), the public key is published in the node's Lease
//! ([`LEASE_ANNOTATION`]). Two nodes derive a pairwise key from their key pair and the peer's
//! public key ([`Keyring`]), and each heartbeat is sent to one peer, authenticated with that
//! pair's key. So:
//!
//! - A host on the segment without a node secret can forge nothing: every heartbeat it makes
//!   fails the tag ([`Reject::BadTag`]), and names it makes up cost the receiver a hash look-up
//!   and no memory ([`Reject::UnknownSender`]).
//! - A compromised node can forge only its own heartbeats. It cannot speak as another node,
//!   even to itself as recipient: the pair (X, Y) key needs X's or Y's secret. A huge
//!   incarnation in its own beats (`u64::MAX` with `leaving` locked *every* node out in
//!   version 1, once the cluster-wide key leaked) now locks out only its own later beats under
//!   that same key, and only until it gets a new one: replay state belongs to the peer's key
//!   (see "Replay protection").
//! - Remaining gap: until an admission policy restricts Lease writes to each node's own Lease,
//!   a compromised node with its API credentials can rewrite a peer's published key in that
//!   peer's Lease and then speak as the peer. A key change is never silent:
//!   [`Keyring::set_peer`] returns [`PeerKeyChange::Changed`], which the agent turns into an
//!   Event and a metric; the real peer's heartbeats then fail ([`Reject::BadTag`]) at every
//!   receiver, which is visible too.
//!
//! # Why one datagram per recipient
//!
//! A heartbeat used to be one datagram sent to every peer under the shared key. With pairwise
//! keys each peer needs its own tag, so each gets its own datagram, naming it as the recipient
//! (a datagram for B replayed to C is [`Reject::WrongRecipient`]). That costs one HMAC-SHA256
//! per beat per peer, the same as verifying; X25519 and HKDF run only when a peer's key is
//! added or changes, and the keyed HMAC state is kept. It also makes the per-peer statements
//! one bit each: "I took over your VIPs" (ACK) and "I hear you" (HEARS) replace the ack list
//! of version 1.
//!
//! # Wire format, version 2
//!
//! All integers are big-endian (network byte order). `s` = 7 + sender length,
//! `n` = `s` + 1 + recipient length.
//!
//! | Offset     | Size | Field         | Contents                                                   |
//! |------------|------|---------------|------------------------------------------------------------|
//! | 0          | 4    | magic         | ASCII `ANHB`                                               |
//! | 4          | 1    | version       | 2                                                          |
//! | 5          | 1    | flags         | bit 0 `LEAVING`, bit 1 `API_OK`, bit 2 `READY`, bit 3 `ACK` (the sender has taken over your VIPs: handover ack), bit 4 `HEARS` (the sender hears your heartbeats); others 0 |
//! | 6          | 1    | sender length | 1..=253                                                    |
//! | 7          | len  | sender        | a DNS-1123 subdomain                                       |
//! | s          | 1    | recipient len | 1..=253                                                    |
//! | s + 1      | len  | recipient     | the one node this datagram is for, a DNS-1123 subdomain    |
//! | n          | 8    | incarnation   | grows on every agent start under one key (a stored counter, see [`crate::agent::persist`]) |
//! | n + 8      | 8    | sequence      | grows by one per datagram within an incarnation            |
//! | n + 16     | 8    | timestamp     | sender's wall clock, milliseconds since the Unix epoch     |
//! | n + 24     | 6    | MAC           | the interface the sender sends from (where to probe it)    |
//! | n + 30     | 8    | config        | fingerprint of the sender's ranking configuration          |
//! | n + 38     | 8    | view          | fingerprint of the sender's view of the cluster            |
//! | n + 46     | 16   | tag           | HMAC-SHA256 under the pair's key over every byte before it, leftmost 128 bits |
//!
//! A heartbeat is 70 bytes plus the two names: at least 72, typically (two 30-byte names) 130,
//! at most 576, well under the 1232 bytes of [`wire::MAX_DATAGRAM`] (the IPv6 minimum MTU less
//! the IPv6 and UDP headers), so it is never fragmented. The receiver rejects anything that
//! breaks any rule above.
//!
//! The tag is truncated to 16 bytes: 128 bits leave a forger a 2⁻¹²⁸ chance per attempt (the
//! same truncation as HMAC-SHA-256-128 in IPsec, RFC 4868 §2.3; RFC 2104 §5 allows down to
//! half the hash length). It is compared in constant time
//! ([`hmac::Mac::verify_truncated_left`]).
//!
//! Version 1 datagrams (one cluster-wide key) are rejected as [`Reject::UnsupportedVersion`],
//! and version 1 agents reject version 2 the same way: during an upgrade, old and new agents
//! do not hear each other. That is acceptable because heartbeats only speed failover up; the
//! upgrade path is the rolling restart itself, where each agent hands its VIPs over on
//! SIGTERM and the Lease stays the authority on who is alive, so an upgraded node's peers
//! learn of it through its Lease.
//!
//! # Replay protection
//!
//! A [`Verifier`] remembers, per peer in the keyring *and that peer's current key*, the highest
//! (incarnation, sequence) it accepted, and accepts only a newer incarnation, or the same
//! incarnation with a higher sequence. Late, reordered heartbeats are therefore dropped ([`Reject::Replayed`]) rather
//! than accepted within a window: heartbeats are idempotent statements of current state, so a
//! late one carries nothing the next one will not, and the simplest rule is the strongest.
//!
//! A receiver that has just started has no replay state. The timestamp covers that case: a
//! heartbeat whose time is more than the maximum skew (5 s by default) away from the
//! receiver's clock is rejected ([`Reject::ClockSkew`], with the skew, so the agent can say
//! whose clock is off and by how much), so captured traffic can be replayed to a fresh
//! receiver for at most that long after it was sent. This assumes node clocks agree within
//! the skew (NTP); a node whose clock is off by more is not heard, and falls back to what the
//! Lease says. The Lease stays the authority on membership: heartbeats only make failover
//! fast, they never keep a node whose Lease expired in the cluster.
//!
//! Incarnations grow on every agent start: the stored counter plus one, or the wall clock in
//! ns if that is larger ([`crate::agent::persist`]), so they grow across restarts whatever
//! the clock does. A sender whose incarnation went backwards under the same key is rejected
//! ([`Reject::OldIncarnation`]) by receivers that remember it, until they
//! [`forget`](Verifier::forget) it (when its Lease goes) or it publishes a new key.
//!
//! # Why no check of the incarnation against the clock
//!
//! Version 1 rejected an incarnation more than the maximum skew ahead of the receiver's clock.
//! With one cluster-wide key that guarded something: anyone holding the key could send
//! `u64::MAX` in any node's name and lock that node out for good. With per-node keys only the
//! node itself can seal its beats, so the check protected nobody else, and it cost an honest
//! node dearly (issue 25, finding 7): an agent started while its clock ran far ahead stored an
//! incarnation from that clock, and since the counter only grows, every later run, also after
//! NTP corrected the clock, was rejected until the real clock caught up (an hour ahead: an
//! hour unheard, restarts or not). So the incarnation is compared with nothing but the last
//! one accepted under the same key, and replay protection is unchanged:
//!
//! - Under one key, (incarnation, sequence) only grows, whatever its distance from any
//!   clock: a replayed or older beat is [`Reject::Replayed`] or [`Reject::OldIncarnation`].
//! - A fresh receiver is protected by the timestamp ([`Reject::ClockSkew`]), which is still
//!   checked against the receiver's clock: a node whose clock is off is unheard exactly while
//!   it is off, and heard again as soon as it is corrected, with the incarnation it has.
//! - A new key (a new identity epoch: the identity file was lost, leaked or replaced) starts
//!   a new history: the receiver's state for the old key is dropped, so the node may start
//!   its counter afresh, and no beat sealed under the old key verifies any more
//!   ([`Reject::BadTag`]), so none can be replayed. The agent uses this to recover when its
//!   stored counter is lost ([`crate::agent::persist`]). The election core, which ignores a
//!   peer's incarnations below the last it saw, still sees a later one: the verifier shifts
//!   the new key's incarnations past the old key's ([`Verified::beat`]).

pub mod identity;
pub mod keyring;
pub mod wire;

#[cfg(test)]
mod tests;

use std::{collections::HashMap, fmt, time::Duration};

use crate::election::{Beat, NodeName};
pub use identity::{Identity, IdentityError, KEY_LEN, LEASE_ANNOTATION, PublicKey, PublicKeyError};
pub use keyring::{Keyring, PeerKeyChange};
pub use wire::{MAX_DATAGRAM, Packet, Repr};

/// The default largest difference between sender and receiver clocks.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(5);

/// Why a sender identity or a peer key was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The node name is not a DNS-1123 subdomain of at most 253 characters, so it cannot be a
    /// Kubernetes node name nor be sent.
    #[error("{name:?} is not a valid node name (a DNS-1123 subdomain of at most 253 characters)")]
    BadNodeName {
        /// The name.
        name: String,
    },
    /// The peer's published key is a low-order point: the X25519 shared secret is all zeros,
    /// which anyone can compute, so no pairwise key can come from it.
    #[error(
        "the heartbeat key {key} is a low-order X25519 point (the shared secret would be all \
         zeros); the peer's Lease annotation {LEASE_ANNOTATION} is corrupt or malicious"
    )]
    LowOrderPoint {
        /// The key.
        key: PublicKey,
    },
}

/// Why a heartbeat could not be sealed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// The recipient has no key in the keyring (no Lease, or no published key yet).
    #[error("no heartbeat key for {node} (its Lease has no {LEASE_ANNOTATION} yet)")]
    NoKey {
        /// The recipient.
        node: NodeName,
    },
}

pub(crate) fn check_node_name(node: &NodeName) -> Result<(), KeyError> {
    if wire::is_dns1123_subdomain(node.as_str().as_bytes()) {
        Ok(())
    } else {
        Err(KeyError::BadNodeName {
            name: node.as_str().to_owned(),
        })
    }
}

/// Seals this node's heartbeats: one per agent run, one datagram per recipient.
#[derive(Debug)]
pub struct Sealer {
    node: NodeName,
    incarnation: u64,
    /// The last sequence number used (0: none yet).
    sequence: u64,
}

impl Sealer {
    /// A sealer for `node` in `incarnation` (the agent's start time in ns since the epoch).
    pub fn new(node: NodeName, incarnation: u64) -> Result<Self, KeyError> {
        check_node_name(&node)?;
        Ok(Self {
            node,
            incarnation,
            sequence: 0,
        })
    }

    /// The sequence number of the last sealed datagram (0 before the first).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Builds, numbers and authenticates the datagram of `beat` for peer `to`, stamped with
    /// `unix_ms` (the wall clock now), under the pairwise key of `keyring`. The node and
    /// incarnation are the sealer's; those in `beat` are ignored. `ACK` is set iff
    /// `beat.acks` holds `to`, `HEARS` iff `beat.hears` does.
    ///
    /// Every sealed datagram takes the next sequence number (one sequence across all
    /// recipients); a refused one takes none.
    pub fn seal(
        &mut self,
        keyring: &Keyring,
        beat: &Beat,
        to: &NodeName,
        unix_ms: u64,
    ) -> Result<Vec<u8>, SealError> {
        let peer = keyring
            .peer(to.as_str())
            .ok_or_else(|| SealError::NoKey { node: to.clone() })?;
        self.sequence += 1;
        let repr = Repr {
            sender: self.node.clone(),
            recipient: peer.node.clone(),
            flags: flag_bits(beat, to),
            incarnation: self.incarnation,
            sequence: self.sequence,
            timestamp_ms: unix_ms,
            mac: beat.mac,
            config: beat.config,
            view: beat.view,
        };
        let mut out = Vec::with_capacity(repr.buffer_len() + wire::TAG_LEN);
        repr.emit(&mut out);
        let tag = peer.tag(&out);
        out.extend_from_slice(&tag);
        Ok(out)
    }
}

/// The flags of `beat` for recipient `to`. `acks` and `hears` are sorted (the core builds
/// them from its ordered peers), so each lookup is a binary search: a beat is sealed once per
/// peer, and a scan would make a beat period cost O(N²).
fn flag_bits(beat: &Beat, to: &NodeName) -> u8 {
    debug_assert!(beat.acks.is_sorted() && beat.hears.is_sorted());
    let bit = |on: bool, b: u8| if on { b } else { 0 };
    bit(beat.leaving, wire::flags::LEAVING)
        | bit(beat.api_ok, wire::flags::API_OK)
        | bit(beat.ready, wire::flags::READY)
        | bit(beat.acks.binary_search(to).is_ok(), wire::flags::ACK)
        | bit(beat.hears.binary_search(to).is_ok(), wire::flags::HEARS)
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
    /// A heartbeat of a version this agent does not speak (mixed versions during an upgrade:
    /// version 1 agents are not heard by version 2 ones, and the other way round).
    #[error("unsupported heartbeat version")]
    UnsupportedVersion,
    /// A length or flag out of range, or bytes after the tag.
    #[error("malformed heartbeat")]
    Malformed,
    /// A node name that is not a DNS-1123 subdomain.
    #[error("malformed node name")]
    BadName,
    /// The sender has no key here: no Lease, or its Lease publishes no heartbeat key yet.
    #[error("unknown sender (no Lease or no published heartbeat key)")]
    UnknownSender,
    /// Addressed to another node (a datagram for a peer, replayed or misrouted to us).
    #[error("addressed to another node")]
    WrongRecipient,
    /// The tag does not match the pairwise key: forged, corrupted, or the sender's key changed
    /// and its Lease has not told us yet.
    #[error("bad authentication tag (forged, or the sender's key changed)")]
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
    pub const ALL: [Reject; 12] = [
        Reject::Truncated,
        Reject::BadMagic,
        Reject::UnsupportedVersion,
        Reject::Malformed,
        Reject::BadName,
        Reject::UnknownSender,
        Reject::WrongRecipient,
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
            Reject::UnknownSender => "unknown_sender",
            Reject::WrongRecipient => "wrong_recipient",
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

/// A rejected datagram: why, and what can be said about it safely.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// Why.
    pub reason: Reject,
    /// The sender, only when the tag verified (so the name is not made up): rejections that
    /// name a node are that node's problem (its clock, its incarnation) and worth an Event.
    pub sender: Option<NodeName>,
    /// For [`Reject::ClockSkew`]: the sender's clock minus ours, in milliseconds.
    pub skew_ms: Option<i64>,
}

impl From<Reject> for Rejected {
    fn from(reason: Reject) -> Self {
        Self {
            reason,
            sender: None,
            skew_ms: None,
        }
    }
}

impl fmt::Display for Rejected {
    /// E.g. "heartbeats from node-b are rejected: timestamp outside the allowed clock skew
    /// (its clock is 10.2 s ahead)".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.sender {
            Some(s) => write!(f, "heartbeats from {s} are rejected: {}", self.reason)?,
            None => write!(f, "heartbeat rejected: {}", self.reason)?,
        }
        if let Some(ms) = self.skew_ms {
            let side = if ms >= 0 { "ahead" } else { "behind" };
            write!(
                f,
                " (its clock is {:.1} s {side}; it is heard again as soon as its clock is \
                 corrected, without a restart)",
                ms.unsigned_abs() as f64 / 1000.0
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejected {}

/// An authenticated, fresh heartbeat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// What the election core takes ([`crate::election::Input::Heartbeat`]). `acks` and
    /// `hears` hold this node alone or nothing, as the datagram's ACK and HEARS bits say.
    /// Its `incarnation` is the datagram's, except after the sender's key changed: then it is
    /// shifted, if need be, past the last one reported under the old key, so that the core
    /// (which ignores incarnations below the last it saw) takes a new identity epoch that
    /// counts from a lower value as the new life it is.
    pub beat: Beat,
    /// Its sequence number.
    pub sequence: u64,
    /// The sender's wall clock when it sent it, Unix milliseconds.
    pub sent_unix_ms: u64,
}

/// The last accepted heartbeat of one peer.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The key it verified under. State under another key than the peer's current one is not
    /// replay state any more (a new identity epoch).
    key: PublicKey,
    /// Its incarnation and sequence, as sent.
    incarnation: u64,
    sequence: u64,
    /// What this key's incarnations are shifted by in [`Verified`]: 0, or enough to order the
    /// first incarnation of this key after the last one reported under the previous key.
    offset: u64,
}

/// Verifies the heartbeats this node receives, and remembers what it accepted from whom.
#[derive(Debug)]
pub struct Verifier {
    own: NodeName,
    max_skew_ms: u64,
    /// Per keyring peer: what its last accepted heartbeat was.
    seen: HashMap<NodeName, Seen>,
}

impl Verifier {
    /// A verifier for node `own`, with the default maximum skew ([`DEFAULT_MAX_SKEW`]).
    pub fn new(own: NodeName) -> Self {
        Self {
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

    /// Drops the replay state of `node` (its Lease is gone): its next heartbeat is accepted
    /// whatever its incarnation.
    pub fn forget(&mut self, node: &NodeName) {
        self.seen.remove(node);
    }

    /// The last accepted (incarnation, sequence) of `node`.
    pub fn last_seen(&self, node: &NodeName) -> Option<(u64, u64)> {
        self.seen.get(node).map(|s| (s.incarnation, s.sequence))
    }

    /// Peers with replay state. Never more than the keyring's peers plus those removed from
    /// it since the last accepted heartbeat: state is created only for authenticated senders,
    /// and dropped for peers no longer in the keyring.
    pub fn tracked(&self) -> usize {
        self.seen.len()
    }

    /// Checks one datagram received at wall-clock time `now_unix_ms`, in this order:
    /// structure; the sender's key in `keyring` (looked up without allocating); the recipient
    /// is us; the tag; flags; not from ourselves; freshness (clock skew); replay (against the
    /// state kept for the sender's current key). Only a datagram that passes every check updates the
    /// replay state.
    pub fn open(
        &mut self,
        keyring: &Keyring,
        datagram: &[u8],
        now_unix_ms: u64,
    ) -> Result<Verified, Rejected> {
        let packet = Packet::new_checked(datagram)?;
        let sender = wire::name_str(packet.sender())?;
        let peer = keyring.peer(sender).ok_or(Reject::UnknownSender)?;
        if packet.recipient() != self.own.as_str().as_bytes() {
            return Err(Reject::WrongRecipient.into());
        }
        if !peer.verify(packet.signed(), packet.tag()) {
            return Err(Reject::BadTag.into());
        }
        let node = &peer.node;
        let named = |reason, skew_ms| Rejected {
            reason,
            sender: Some(node.clone()),
            skew_ms,
        };
        let flags = packet.flags();
        if flags & !wire::flags::ALL != 0 {
            return Err(named(Reject::Malformed, None));
        }
        if *node == self.own {
            return Err(named(Reject::FromSelf, None));
        }
        let sent = packet.timestamp_ms();
        if sent.abs_diff(now_unix_ms) > self.max_skew_ms {
            let skew = i128::from(sent) - i128::from(now_unix_ms);
            let skew = i64::try_from(skew).unwrap_or(if skew < 0 { i64::MIN } else { i64::MAX });
            return Err(named(Reject::ClockSkew, Some(skew)));
        }
        let incarnation = packet.incarnation();
        let sequence = packet.sequence();
        let key = peer.public();
        let offset = match self.seen.get(node) {
            Some(s) if s.key == key => {
                if incarnation < s.incarnation {
                    return Err(named(Reject::OldIncarnation, None));
                }
                if incarnation == s.incarnation && sequence <= s.sequence {
                    return Err(named(Reject::Replayed, None));
                }
                s.offset
            }
            // A new identity epoch: its counter may start lower, but the election must see a
            // later incarnation than any of the old key (a new life, not an old one).
            Some(s) => {
                let last = s.incarnation.saturating_add(s.offset);
                (last.saturating_add(1)).saturating_sub(incarnation)
            }
            None => 0,
        };
        if self.seen.len() >= keyring.len() && !self.seen.contains_key(node) {
            // Peers left the keyring without being forgotten: drop their state now, so it
            // stays bounded by the keyring.
            self.seen.retain(|n, _| keyring.contains(n.as_str()));
        }
        self.seen.insert(
            node.clone(),
            Seen {
                key,
                incarnation,
                sequence,
                offset,
            },
        );
        let only_own = |bit| {
            if flags & bit != 0 {
                vec![self.own.clone()]
            } else {
                Vec::new()
            }
        };
        Ok(Verified {
            beat: Beat {
                node: node.clone(),
                incarnation: incarnation.saturating_add(offset),
                mac: packet.mac(),
                leaving: flags & wire::flags::LEAVING != 0,
                api_ok: flags & wire::flags::API_OK != 0,
                ready: flags & wire::flags::READY != 0,
                acks: only_own(wire::flags::ACK),
                hears: only_own(wire::flags::HEARS),
                config: packet.config(),
                view: packet.view(),
            },
            sequence,
            sent_unix_ms: sent,
        })
    }
}

//! The pairwise heartbeat keys: one per peer, derived from this node's [`Identity`] and the
//! peer's published [`PublicKey`].
//!
//! For nodes X and Y the key is HKDF-SHA256 (RFC 5869) with
//! salt [`KDF_SALT`], input keying material X25519(own secret, peer public), and info the two
//! public keys concatenated, the lower (bytewise) first, expanded to 32 bytes. Both ends
//! compute the same key, and nobody else can: it takes one of the two secrets. The info binds
//! the key to the pair of public keys, so it is also distinct per pair even if two nodes were
//! given the same secret.
//!
//! X25519 and HKDF run only when a peer's key is added or changes ([`Keyring::set_peer`]); the
//! keyed HMAC state is kept, so each heartbeat costs one HMAC-SHA256 (two compression
//! functions for a short message, plus the keyed state's copy).
//!
//! Only peers the caller adds (from their Leases) get an entry: a stranger's datagram costs a
//! hash-map look-up and allocates nothing, so memory is bounded by the cluster's size.

use std::collections::HashMap;

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{
    KeyError,
    identity::{Identity, KEY_LEN, PublicKey},
    wire,
};
use crate::election::NodeName;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// The HKDF salt of heartbeat version 2 (a new protocol version gets a new salt, so keys are
/// never shared across versions).
pub const KDF_SALT: &[u8] = b"announcer heartbeat v2";

/// What [`Keyring::set_peer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerKeyChange {
    /// A peer that had no key now has one.
    Added,
    /// The peer already had this key: nothing derived.
    Unchanged,
    /// The peer's key is a different one now. Legitimate when its identity file was lost or
    /// replaced, but also what a node rewriting a peer's Lease would cause: the caller must
    /// make it visible (an Event and a metric).
    Changed,
}

/// One peer's key and the HMAC state keyed with the pairwise key.
#[derive(Clone)]
pub(super) struct PeerKey {
    /// The name, as the keyring holds it (handed out without allocating).
    pub(super) node: NodeName,
    public: PublicKey,
    mac: HmacSha256,
}

impl PeerKey {
    /// The full tag of `data`, truncated to [`wire::TAG_LEN`].
    pub(super) fn tag(&self, data: &[u8]) -> [u8; wire::TAG_LEN] {
        let full = self.mac.clone().chain_update(data).finalize().into_bytes();
        let mut tag = [0u8; wire::TAG_LEN];
        tag.copy_from_slice(&full[..wire::TAG_LEN]);
        tag
    }

    /// The peer's published key.
    pub(super) fn public(&self) -> PublicKey {
        self.public
    }

    /// Whether `tag` is the truncated tag of `data`, compared in constant time.
    pub(super) fn verify(&self, data: &[u8], tag: &[u8]) -> bool {
        self.mac
            .clone()
            .chain_update(data)
            .verify_truncated_left(tag)
            .is_ok()
    }
}

/// The pairwise key of `own` and `peer`: HKDF-SHA256 over their X25519 shared secret. `Err`
/// for a low-order peer key (the shared secret is all zeros, which anyone can compute).
pub fn pairwise_key(own: &Identity, peer: &PublicKey) -> Result<[u8; KEY_LEN], KeyError> {
    let shared = own.diffie_hellman(peer);
    if !shared.was_contributory() {
        return Err(KeyError::LowOrderPoint { key: *peer });
    }
    let (lo, hi) = if own.public() <= *peer {
        (own.public(), *peer)
    } else {
        (*peer, own.public())
    };
    let mut info = [0u8; 2 * KEY_LEN];
    info[..KEY_LEN].copy_from_slice(lo.as_bytes());
    info[KEY_LEN..].copy_from_slice(hi.as_bytes());
    let mut okm = [0u8; KEY_LEN];
    Hkdf::<Sha256>::new(Some(KDF_SALT), shared.as_bytes())
        .expand(&info, &mut okm)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    Ok(okm)
}

/// This node's identity and the keys of the peers it talks to.
pub struct Keyring {
    identity: Identity,
    peers: HashMap<NodeName, PeerKey>,
}

impl Keyring {
    /// A keyring with no peers yet.
    pub fn new(identity: Identity) -> Self {
        Self {
            identity,
            peers: HashMap::new(),
        }
    }

    /// Our public key (to publish in our Lease, [`super::LEASE_ANNOTATION`]).
    pub fn public(&self) -> PublicKey {
        self.identity.public()
    }

    /// Sets `node`'s published key, deriving the pairwise key only if it is new or changed.
    ///
    /// Refused, with the peer then removed (its old key is no longer the published one and the
    /// new one is unusable): a name that is not a DNS-1123 subdomain, and a low-order key.
    pub fn set_peer(&mut self, node: NodeName, key: PublicKey) -> Result<PeerKeyChange, KeyError> {
        let change = match self.peers.get(&node) {
            Some(p) if p.public == key => return Ok(PeerKeyChange::Unchanged),
            Some(_) => PeerKeyChange::Changed,
            None => PeerKeyChange::Added,
        };
        let derived =
            super::check_node_name(&node).and_then(|()| pairwise_key(&self.identity, &key));
        let okm = match derived {
            Ok(k) => k,
            Err(e) => {
                self.peers.remove(&node);
                return Err(e);
            }
        };
        let mac = HmacSha256::new_from_slice(&okm).expect("HMAC takes keys of any length");
        self.peers.insert(
            node.clone(),
            PeerKey {
                node,
                public: key,
                mac,
            },
        );
        Ok(change)
    }

    /// Forgets `node` (its Lease is gone). Whether it had a key.
    pub fn remove_peer(&mut self, node: &NodeName) -> bool {
        self.peers.remove(node).is_some()
    }

    /// The key `node` published, if it is a peer.
    pub fn peer_key(&self, node: &str) -> Option<PublicKey> {
        self.peers.get(node).map(|p| p.public)
    }

    /// Peers with a key.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// No peer has a key.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Whether `node` has a key.
    pub fn contains(&self, node: &str) -> bool {
        self.peers.contains_key(node)
    }

    /// The peers, by name.
    pub fn peers(&self) -> impl Iterator<Item = (&NodeName, PublicKey)> {
        self.peers.iter().map(|(n, p)| (n, p.public))
    }

    /// Looks a peer up by name, without allocating.
    pub(super) fn peer(&self, node: &str) -> Option<&PeerKey> {
        self.peers.get(node)
    }
}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyring")
            .field("public", &self.public())
            .field("peers", &self.peers.len())
            .finish()
    }
}

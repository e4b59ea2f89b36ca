//! A node's heartbeat identity: an X25519 static key pair.
//!
//! Why per-node keys: with one cluster-wide secret, any node that holds it (a compromised one
//! included) can speak for every other node. With a key pair per node, a node can
//! authenticate only heartbeats that a peer's pairwise key (see [`super::Keyring`]) accepts as
//! its own, so it can forge no other node's liveness, leaving, acks or MAC.
//!
//! The secret stays on the node, in a file readable by root only
//! ([`Identity::load_or_create`]); the public half is published in the node's Lease, in the
//! annotation [`LEASE_ANNOTATION`], as base64 ([`PublicKey`]'s `Display`/`FromStr`).
//! The agent keeps the file across restarts, so peers do not see a key change on every
//! restart; a lost file only means a new key (peers see a [`super::PeerKeyChange::Changed`]).

use std::{
    fmt,
    fs::{self, File, OpenOptions},
    io::{self, Read, Write},
    os::unix::fs::{OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
    str::FromStr,
};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use rand::TryRngCore as _;
use x25519_dalek::StaticSecret;

/// The Lease annotation that carries a node's heartbeat [`PublicKey`] (base64).
pub const LEASE_ANNOTATION: &str = "announcer.dev/heartbeat-key";

/// Size of a secret or public key, in bytes.
pub const KEY_LEN: usize = 32;

/// A node's public heartbeat key: 32 bytes, published as standard base64 (44 characters).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicKey(pub [u8; KEY_LEN]);

impl PublicKey {
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&STANDARD.encode(self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// Why a published heartbeat key does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PublicKeyError {
    /// Not standard base64.
    #[error(
        "the heartbeat key {text:?} (annotation {LEASE_ANNOTATION}) is not standard base64: \
         {reason}"
    )]
    Base64 {
        /// The text, cut to 64 characters.
        text: String,
        /// What the decoder said.
        reason: String,
    },
    /// Base64, but not 32 bytes.
    #[error(
        "the heartbeat key (annotation {LEASE_ANNOTATION}) decodes to {len} bytes; an X25519 \
         public key is {KEY_LEN} bytes (44 base64 characters)"
    )]
    WrongLength {
        /// The decoded length.
        len: usize,
    },
}

impl FromStr for PublicKey {
    type Err = PublicKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = STANDARD
            .decode(s.trim())
            .map_err(|e| PublicKeyError::Base64 {
                text: s.chars().take(64).collect(),
                reason: e.to_string(),
            })?;
        let key: [u8; KEY_LEN] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| PublicKeyError::WrongLength { len: bytes.len() })?;
        Ok(Self(key))
    }
}

/// Why the identity file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// Reading, creating or renaming failed.
    #[error("heartbeat identity {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The file is not exactly 32 bytes: not a key this agent wrote.
    #[error(
        "heartbeat identity {path} is {len} bytes long, not {KEY_LEN}: it is not a key file \
         (move it away and the agent creates a new key; peers then see the node's key change)"
    )]
    WrongSize {
        /// The file.
        path: PathBuf,
        /// Its length.
        len: u64,
    },
    /// Group or others may read or write the file: the secret may have leaked.
    #[error(
        "heartbeat identity {path} has mode {mode:04o}: group or others can access it, so the \
         secret may have leaked; if it has not, `chmod 600 {path}`, otherwise delete it so the \
         agent creates a new key"
    )]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// This node's heartbeat key pair. Never printed, compared or serialised except through
/// [`load_or_create`](Self::load_or_create).
#[derive(Clone)]
pub struct Identity {
    secret: StaticSecret,
    public: PublicKey,
}

impl Identity {
    /// A fresh key pair from the operating system's random source.
    ///
    /// # Panics
    /// If the OS random source fails (`getrandom(2)`), where no key is safe to make.
    pub fn generate() -> Self {
        let mut bytes = [0u8; KEY_LEN];
        rand::rngs::OsRng
            .try_fill_bytes(&mut bytes)
            .expect("the OS random source failed");
        Self::from_secret_bytes(bytes)
    }

    /// The key pair of a given secret (any 32 bytes: X25519 clamps them). For tests and
    /// benchmarks that need reproducible keys; agents use [`generate`](Self::generate) or
    /// [`load_or_create`](Self::load_or_create).
    pub fn from_secret_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let secret = StaticSecret::from(bytes);
        let public = PublicKey(x25519_dalek::PublicKey::from(&secret).to_bytes());
        Self { secret, public }
    }

    /// The public half, to publish.
    pub fn public(&self) -> PublicKey {
        self.public
    }

    /// X25519 with a peer's public key (not yet checked for a low-order point).
    pub(super) fn diffie_hellman(&self, peer: &PublicKey) -> x25519_dalek::SharedSecret {
        self.secret
            .diffie_hellman(&x25519_dalek::PublicKey::from(peer.0))
    }

    /// Loads the secret from `path`, or creates one there if there is no file. The bool is
    /// true when it was created (log it: peers will see a new key).
    ///
    /// A new file is written whole or not at all: to a temporary file beside it, created with
    /// mode 0600, synced, then renamed over `path` (and the directory synced), so a crash
    /// never leaves a half-written key that would be refused on the next start.
    ///
    /// Refused: a file that is not 32 bytes, and one that group or others can access (the
    /// secret may have leaked; the error says how to fix it).
    pub fn load_or_create(path: &Path) -> Result<(Identity, bool), IdentityError> {
        let io = |source| IdentityError::Io {
            path: path.to_owned(),
            source,
        };
        match File::open(path) {
            Ok(file) => Self::load(path, file).map(|id| (id, false)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let id = Self::generate();
                id.store(path).map_err(io)?;
                Ok((id, true))
            }
            Err(e) => Err(io(e)),
        }
    }

    fn load(path: &Path, mut file: File) -> Result<Identity, IdentityError> {
        let io = |source| IdentityError::Io {
            path: path.to_owned(),
            source,
        };
        let meta = file.metadata().map_err(io)?;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(IdentityError::Permissions {
                path: path.to_owned(),
                mode,
            });
        }
        if meta.len() != KEY_LEN as u64 {
            return Err(IdentityError::WrongSize {
                path: path.to_owned(),
                len: meta.len(),
            });
        }
        let mut bytes = [0u8; KEY_LEN];
        file.read_exact(&mut bytes).map_err(io)?;
        // The file grew between the metadata and the read: refuse rather than guess.
        let mut extra = [0u8; 1];
        if file.read(&mut extra).map_err(io)? != 0 {
            return Err(IdentityError::WrongSize {
                path: path.to_owned(),
                len: KEY_LEN as u64 + 1,
            });
        }
        Ok(Self::from_secret_bytes(bytes))
    }

    /// Writes the secret to `path` (mode 0600), replacing any file there, whole or not at all
    /// (see [`load_or_create`](Self::load_or_create)).
    pub fn store(&self, path: &Path) -> io::Result<()> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
        let mut tmp_name = name.to_owned();
        tmp_name.push(format!(".tmp.{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let result = (|| {
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&self.secret.to_bytes())?;
            f.sync_all()?;
            fs::rename(&tmp, path)?;
            File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("public", &self.public)
            .finish_non_exhaustive()
    }
}

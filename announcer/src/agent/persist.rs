//! What the agent keeps on its node between runs: the incarnation counter and the heartbeat
//! identity (see [`crate::heartbeat`]), and what it does when either is unusable.
//!
//! Why a counter on disk: peers tell a restarted agent from a healed partition, and old
//! heartbeats from new ones, by the incarnation, so under one key it must never go backwards.
//! The wall clock is not enough: a clock that steps back (NTP correcting a node that ran ahead)
//! made a restarted agent's incarnation smaller than its last one, and peers rejected its
//! heartbeats for good. The next incarnation is therefore the larger of the stored one plus one
//! and the wall clock in nanoseconds (so a fresh directory still starts above any earlier run),
//! written before it is used. It may run ahead of the wall clock (a node started while its
//! clock was far ahead keeps counting from there): peers compare it with nothing but the last
//! one they accepted under the same key, so that costs nothing (issue 25, finding 7).
//!
//! # Failing safe
//!
//! The directory used to fail closed: a full disk, a corrupt `incarnation` file or an
//! `identity` file whose mode a `chmod -R` changed stopped the agent, and the kubelet restarted
//! it into the same error, over and over, while its VIPs moved away. Nothing here is worth
//! that: [`load`] never fails. Each fault is worked around, raised as a `StateDirectory`
//! Warning Event on the node and counted in `announcer_state_dir_problems_total{problem}`
//! ([`StateProblem`]). One rule makes each workaround sound for replay protection: **an
//! incarnation may be used under a key only if every later run that can load that key will
//! count above it.** A key nobody can load again (in memory only), or one no peer has seen (a
//! new identity epoch: peers drop the replay state of the old key, see [`crate::heartbeat`]),
//! satisfies it with any incarnation.
//!
//! | fault | what the agent does | why that is safe |
//! |---|---|---|
//! | directory cannot be created or used | a key in memory, incarnation = wall clock | nobody can load that key again |
//! | `identity` readable by group or others | treated as leaked: a new key, stored 0600, published in the Lease (peers raise `PeerKeyChanged`) | the old key may be known to others; keeping it would let them speak as this node |
//! | `identity` of the wrong size or unreadable | a new key, stored 0600, published | it is no key this agent wrote |
//! | a new key cannot be stored | that key in memory for this run | as the first row |
//! | `incarnation` corrupt (not a number, or exhausted at `u64::MAX`) | a new identity epoch: a new key, stored, counter rewritten from the wall clock | the old key's history is lost, so it is not used again |
//! | `incarnation` cannot be read or stored (full or read-only disk) | a key in memory, incarnation = wall clock; the stored key is left for later runs | nothing records this run's incarnation, so its key must be one no later run loads |
//!
//! The cost of a key in memory is a `PeerKeyChanged` at every peer on each restart, and
//! heartbeats unheard until the peers read the new key from this node's Lease (about a second;
//! the Lease stays the authority meanwhile). That is visible and self-limiting; a crash loop
//! is neither.

use std::{
    fs,
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

use crate::heartbeat::{Identity, IdentityError};

/// The file holding the last incarnation, as decimal text.
pub const INCARNATION_FILE: &str = "incarnation";
/// The file holding the heartbeat identity's secret.
pub const IDENTITY_FILE: &str = "identity";

/// Why the state directory could not be used.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    /// The directory cannot be created or the file not read or written.
    #[error(
        "cannot use the state directory {path}: {source} (mount a hostPath there, or set --state-dir)"
    )]
    Io {
        /// The path concerned.
        path: PathBuf,
        /// The failing call's error.
        #[source]
        source: io::Error,
    },
    /// The incarnation file holds something other than a number.
    #[error(
        "{path} does not hold an incarnation (a decimal number): {content:?}; delete it to start over"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What it holds (first 40 bytes).
        content: String,
    },
}

/// The agent's state directory on the node, opened: the handle its files are read and written
/// through (the configured path is [`StateDirPath`](crate::agent::config::file::StateDirPath)).
#[derive(Clone, Debug)]
pub struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// Opens (creating, mode 0700) the directory at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Self, PersistError> {
        let path = path.into();
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path)
            .map_err(|source| PersistError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(Self { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Where the heartbeat identity lives.
    pub fn identity_path(&self) -> PathBuf {
        self.path.join(IDENTITY_FILE)
    }

    /// The incarnation for this run: `max(stored + 1, wall_ns)`, stored (atomically and
    /// synced) before it is returned.
    pub fn next_incarnation(&self, wall_ns: u64) -> Result<u64, PersistError> {
        let file = self.path.join(INCARNATION_FILE);
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| PersistError::Io { path, source }
        };
        let stored = match fs::read_to_string(&file) {
            Ok(s) => Some(s.trim().parse::<u64>().map_err(|_| PersistError::Corrupt {
                path: file.clone(),
                content: s.chars().take(40).collect(),
            })?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&file)(e)),
        };
        if stored == Some(u64::MAX) {
            // Exhausted: it cannot grow any more.
            return Err(PersistError::Corrupt {
                path: file,
                content: u64::MAX.to_string(),
            });
        }
        let next = stored.map_or(wall_ns, |s| (s + 1).max(wall_ns));
        self.store_incarnation(next)?;
        Ok(next)
    }

    /// Stores `incarnation` (atomically and synced).
    fn store_incarnation(&self, incarnation: u64) -> Result<(), PersistError> {
        let io_err = |path: &Path| {
            let path = path.to_owned();
            move |source| PersistError::Io { path, source }
        };
        let file = self.path.join(INCARNATION_FILE);
        let tmp = self.path.join(format!("{INCARNATION_FILE}.tmp"));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(format!("{incarnation}\n").as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io_err(&tmp))?;
        fs::rename(&tmp, &file).map_err(io_err(&file))
    }
}

/// A state-directory fault the agent worked around (a Warning Event on its Node, a metric and
/// a log line each; see the module docs for why each workaround is safe).
#[derive(Debug, thiserror::Error)]
pub enum StateProblem {
    /// The directory cannot be created or used.
    #[error(
        "cannot use the state directory {path}: {source}; running with a heartbeat key and an \
         incarnation in memory (peers see a new key on every restart until it is fixed: mount \
         a hostPath there, or set --state-dir)"
    )]
    DirUnusable {
        /// The directory.
        path: PathBuf,
        /// The failing call's error.
        #[source]
        source: io::Error,
    },
    /// The identity file could be read by group or others: the key may have leaked.
    #[error(
        "heartbeat identity {path} had mode {mode:04o} (group or others could read it): treated \
         as leaked and replaced by a new key (0600), published in this node's Lease"
    )]
    IdentityLeaked {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The identity file is not a key (wrong size) or cannot be read.
    #[error("{source}: replaced by a new key, published in this node's Lease")]
    IdentityCorrupt {
        /// What was wrong with it.
        #[source]
        source: IdentityError,
    },
    /// A new key could not be stored: this run's key lives in memory only.
    #[error(
        "cannot store the heartbeat identity at {path}: {source}; running with a key in memory \
         (peers see a new key on every restart until the directory is writable)"
    )]
    IdentityUnwritable {
        /// The file.
        path: PathBuf,
        /// The failing call's error.
        #[source]
        source: io::Error,
    },
    /// The incarnation file holds no usable counter.
    #[error(
        "{path} does not hold a usable incarnation: {content:?}; started a new heartbeat key \
         (a new identity epoch, so the counter may start again) and rewrote it"
    )]
    IncarnationCorrupt {
        /// The file.
        path: PathBuf,
        /// What it holds (first 40 bytes).
        content: String,
    },
    /// The incarnation cannot be read or stored.
    #[error(
        "cannot read or store the incarnation at {path}: {source}; this run uses a heartbeat key \
         in memory, which needs no stored incarnation (peers see a new key)"
    )]
    IncarnationUnusable {
        /// The file.
        path: PathBuf,
        /// The failing call's error.
        #[source]
        source: io::Error,
    },
}

impl StateProblem {
    /// A short snake_case label (the metric's `problem` label).
    pub const fn label(&self) -> &'static str {
        match self {
            StateProblem::DirUnusable { .. } => "dir_unusable",
            StateProblem::IdentityLeaked { .. } => "identity_leaked",
            StateProblem::IdentityCorrupt { .. } => "identity_corrupt",
            StateProblem::IdentityUnwritable { .. } => "identity_unwritable",
            StateProblem::IncarnationCorrupt { .. } => "incarnation_corrupt",
            StateProblem::IncarnationUnusable { .. } => "incarnation_unusable",
        }
    }
}

/// What the state directory gives one run of the agent.
#[derive(Debug)]
pub struct Loaded {
    /// This run's heartbeat identity.
    pub identity: Identity,
    /// This run's incarnation.
    pub incarnation: u64,
    /// What had to be worked around.
    pub problems: Vec<StateProblem>,
}

/// Loads this run's identity and incarnation from the directory at `path` (`wall_ns`: the
/// wall clock now, ns since the epoch). Never fails: whatever is wrong with the directory is
/// worked around as the module docs say and reported in [`Loaded::problems`].
pub fn load(path: &Path, wall_ns: u64) -> Loaded {
    let mut problems = Vec::new();
    let dir = match StateDir::open(path) {
        Ok(d) => d,
        Err(e) => {
            let source = match e {
                PersistError::Io { source, .. } => source,
                PersistError::Corrupt { .. } => io::Error::other(e.to_string()),
            };
            problems.push(StateProblem::DirUnusable {
                path: path.to_owned(),
                source,
            });
            return Loaded {
                identity: Identity::generate(),
                incarnation: wall_ns,
                problems,
            };
        }
    };
    let id_path = dir.identity_path();
    let replace = |problems: &mut Vec<StateProblem>| {
        let id = Identity::generate();
        if let Err(source) = id.store(&id_path) {
            problems.push(StateProblem::IdentityUnwritable {
                path: id_path.clone(),
                source,
            });
        }
        id
    };
    let mut identity = match Identity::load_or_create(&id_path) {
        Ok((id, _)) => id,
        Err(IdentityError::Permissions { path, mode }) => {
            problems.push(StateProblem::IdentityLeaked { path, mode });
            replace(&mut problems)
        }
        // Creating it failed: the same write would fail again.
        Err(IdentityError::Io { path, source }) if !path.exists() => {
            problems.push(StateProblem::IdentityUnwritable { path, source });
            Identity::generate()
        }
        Err(source) => {
            problems.push(StateProblem::IdentityCorrupt { source });
            replace(&mut problems)
        }
    };
    let incarnation = match dir.next_incarnation(wall_ns) {
        Ok(i) => Ok(i),
        Err(PersistError::Corrupt { path, content }) => {
            // A new identity epoch: the counter starts again, under a key no peer has seen.
            problems.push(StateProblem::IncarnationCorrupt { path, content });
            identity = replace(&mut problems);
            dir.store_incarnation(wall_ns).map(|()| wall_ns)
        }
        Err(e) => Err(e),
    };
    let incarnation = match incarnation {
        Ok(i) => i,
        Err(e) => {
            let (path, source) = match e {
                PersistError::Io { path, source } => (path, source),
                PersistError::Corrupt { ref path, .. } => {
                    (path.clone(), io::Error::other(e.to_string()))
                }
            };
            problems.push(StateProblem::IncarnationUnusable { path, source });
            // Nothing records what this run uses: a key no later run can load needs nothing.
            identity = Identity::generate();
            wall_ns
        }
    };
    Loaded {
        identity,
        incarnation,
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Removes the directory when dropped.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> (Scratch, StateDir) {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "announcer-persist-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let d = StateDir::open(root.join("node-a")).unwrap();
        (Scratch(root), d)
    }

    #[test]
    fn incarnations_never_go_backwards_when_the_wall_clock_steps_back() {
        let (_t, d) = dir();
        let first = d.next_incarnation(2_000_000_000_000_000_000).unwrap();
        // The clock stepped back by an hour.
        let second = d
            .next_incarnation(2_000_000_000_000_000_000 - 3_600_000_000_000)
            .unwrap();
        assert!(second > first, "{second} <= {first}");
    }

    #[test]
    fn a_fresh_directory_starts_at_the_wall_clock() {
        let (_t, d) = dir();
        assert_eq!(d.next_incarnation(42).unwrap(), 42);
        assert_eq!(d.next_incarnation(100).unwrap(), 100);
        assert_eq!(d.next_incarnation(7).unwrap(), 101);
    }

    #[test]
    fn a_corrupt_incarnation_file_is_reported_with_its_path() {
        let (_t, d) = dir();
        fs::write(d.path().join(INCARNATION_FILE), "garbage").unwrap();
        let e = d.next_incarnation(1).unwrap_err().to_string();
        assert!(e.contains("incarnation") && e.contains("garbage"), "{e}");
    }

    // --- failing safe (issue 25, finding 12) ----------------------------------------------

    const WALL: u64 = 1_800_000_000_000_000_000;

    fn root() -> (Scratch, PathBuf) {
        let (t, d) = dir();
        let p = d.path().to_owned();
        (t, p)
    }

    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_corrupt_incarnation_starts_a_new_identity_epoch_with_a_warning() {
        let (_t, p) = root();
        let before = load(&p, WALL).identity.public();
        fs::write(p.join(INCARNATION_FILE), "garbage").unwrap();
        let got = load(&p, WALL + 5);
        assert_ne!(
            got.identity.public(),
            before,
            "a new key: the old one's history is lost"
        );
        assert_eq!(got.incarnation, WALL + 5);
        assert!(
            matches!(got.problems.as_slice(), [StateProblem::IncarnationCorrupt { content, .. }] if content == "garbage"),
            "{:?}",
            got.problems
        );
        // Stored: the next run keeps the new key and continues the counter.
        let next = load(&p, WALL);
        assert_eq!(next.identity.public(), got.identity.public());
        assert_eq!(next.incarnation, WALL + 6);
        assert!(next.problems.is_empty(), "{:?}", next.problems);
    }

    #[test]
    fn an_unusable_incarnation_file_runs_on_an_in_memory_key_with_a_warning() {
        let (_t, p) = root();
        let stored = load(&p, WALL).identity.public();
        // Neither readable nor replaceable (what a full or read-only disk does to the write).
        fs::remove_file(p.join(INCARNATION_FILE)).unwrap();
        fs::create_dir(p.join(INCARNATION_FILE)).unwrap();
        let got = load(&p, WALL + 7);
        assert!(
            matches!(
                got.problems.as_slice(),
                [StateProblem::IncarnationUnusable { .. }]
            ),
            "{:?}",
            got.problems
        );
        assert_eq!(got.incarnation, WALL + 7);
        // A key no later run can load, since nothing records the incarnation used under it.
        assert_ne!(got.identity.public(), stored);
        let (on_disk, _) = Identity::load_or_create(&p.join(IDENTITY_FILE)).unwrap();
        assert_eq!(on_disk.public(), stored, "the stored key is left alone");
    }

    #[test]
    fn an_identity_readable_by_others_is_replaced_stored_0600_and_reported_as_leaked() {
        use std::os::unix::fs::PermissionsExt;
        let (_t, p) = root();
        let leaked = load(&p, WALL).identity.public();
        let file = p.join(IDENTITY_FILE);
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        let got = load(&p, WALL + 1);
        assert!(
            matches!(
                got.problems.as_slice(),
                [StateProblem::IdentityLeaked { mode: 0o644, .. }]
            ),
            "{:?}",
            got.problems
        );
        assert_ne!(got.identity.public(), leaked);
        assert_eq!(mode(&file), 0o600);
        let again = load(&p, WALL + 2);
        assert_eq!(
            again.identity.public(),
            got.identity.public(),
            "the new key is stored"
        );
        assert!(again.problems.is_empty(), "{:?}", again.problems);
    }

    #[test]
    fn an_identity_of_the_wrong_size_is_replaced_with_a_warning() {
        let (_t, p) = root();
        load(&p, WALL);
        fs::write(p.join(IDENTITY_FILE), b"short").unwrap();
        let got = load(&p, WALL + 1);
        assert!(
            matches!(
                got.problems.as_slice(),
                [StateProblem::IdentityCorrupt { .. }]
            ),
            "{:?}",
            got.problems
        );
        assert_eq!(mode(&p.join(IDENTITY_FILE)), 0o600);
        assert_eq!(load(&p, WALL + 2).identity.public(), got.identity.public());
    }

    #[test]
    fn an_identity_that_cannot_be_stored_runs_in_memory_with_a_warning() {
        let (_t, p) = root();
        // The file system refuses the new key's file (here: its temporary name is taken by
        // a directory; on a node, a full or read-only disk).
        fs::create_dir(p.join(format!("{IDENTITY_FILE}.tmp.{}", std::process::id()))).unwrap();
        let got = load(&p, WALL);
        assert!(
            matches!(
                got.problems.as_slice(),
                [StateProblem::IdentityUnwritable { .. }]
            ),
            "{:?}",
            got.problems
        );
        assert!(!p.join(IDENTITY_FILE).exists());
        assert_eq!(got.incarnation, WALL);
    }

    #[test]
    fn an_unusable_state_directory_runs_on_an_in_memory_key_and_the_wall_clock() {
        let (_t, p) = root();
        let file = p.join("not-a-directory");
        fs::write(&file, "").unwrap();
        let got = load(&file.join("node-a"), WALL);
        assert!(
            matches!(got.problems.as_slice(), [StateProblem::DirUnusable { .. }]),
            "{:?}",
            got.problems
        );
        assert_eq!(got.incarnation, WALL);
    }

    #[test]
    fn an_exhausted_incarnation_counter_starts_a_new_identity_epoch() {
        let (_t, p) = root();
        let before = load(&p, WALL).identity.public();
        fs::write(p.join(INCARNATION_FILE), format!("{}\n", u64::MAX)).unwrap();
        let got = load(&p, WALL);
        assert_ne!(got.identity.public(), before);
        assert_eq!(got.incarnation, WALL);
    }
}

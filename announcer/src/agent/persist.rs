//! What the agent keeps on its node between runs: the incarnation counter (and, next to it,
//! the heartbeat identity, see [`crate::heartbeat`]).
//!
//! Why a counter on disk: peers tell a restarted agent from a healed partition, and old
//! heartbeats from new ones, by the incarnation, so it must never go backwards. The wall
//! clock is not enough: a clock that steps back (NTP correcting a node that ran ahead) made a
//! restarted agent's incarnation smaller than its last one, and peers rejected its heartbeats
//! for good. The next incarnation is therefore the larger of the stored one plus one and the
//! wall clock in nanoseconds (so a fresh directory still starts above any earlier run), written
//! before it is used.

use std::{
    fs,
    io::{self, Write},
    os::unix::fs::{DirBuilderExt, OpenOptionsExt},
    path::{Path, PathBuf},
};

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
        let next = stored.map_or(wall_ns, |s| s.saturating_add(1).max(wall_ns));
        let tmp = self.path.join(format!("{INCARNATION_FILE}.tmp"));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(format!("{next}\n").as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io_err(&tmp))?;
        fs::rename(&tmp, &file).map_err(io_err(&file))?;
        Ok(next)
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
}

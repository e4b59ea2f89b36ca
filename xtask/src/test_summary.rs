//! Runs `cargo test`, passing its output through, and ends with one line that totals every
//! test binary's result (`tests: N passed, N failed, N skipped`).
//!
//! Why not just cargo's output: cargo's own last line is the result of whichever binary ran
//! last (often a doc-test run of zero tests), which says nothing about the suite; a test binary
//! killed by a signal prints no `test result:` line at all, so a total of those lines alone
//! would hide it; and libtest has no timeout, so one hung test would hang CI instead of
//! failing. So this reads cargo's stdout and stderr as one ordered stream and:
//!
//! * counts every binary that started (`Running ...`, `Doc-tests ...`) but printed no result
//!   as one failure, by name ("crashed");
//! * collects the names of failed tests, to list them at the end;
//! * kills a test binary whose test has been running longer than the per-test timeout (libtest
//!   itself announces a test once it has run for 60 s, which is how a long test is known by
//!   name), or a binary that runs longer than the per-binary timeout, and counts it as failed
//!   with the test's name.

use std::{
    collections::BTreeMap,
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Command, ExitStatus},
    sync::{Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

/// How long libtest lets a test run before it prints "has been running for over 60 seconds".
const LIBTEST_WARN: Duration = Duration::from_secs(60);

/// Timeouts of one suite run.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// Longest a single test may run.
    pub test: Duration,
    /// Longest a test binary may run (catches a hang outside any test, e.g. at exit).
    pub binary: Duration,
}

impl Timeouts {
    /// The defaults (the longest test, the simulator sweep, takes about 200 s on 2 cores), or
    /// `ANNOUNCER_TEST_TIMEOUT_S` (per test; a binary gets 3× that, and at least 2 minutes
    /// more than a test).
    pub fn from_env() -> Self {
        let test = std::env::var("ANNOUNCER_TEST_TIMEOUT_S")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map_or(Duration::from_secs(600), Duration::from_secs);
        Self {
            test,
            binary: (test * 3).max(test + Duration::from_secs(120)),
        }
    }
}

/// Totals of libtest's result lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl Totals {
    /// Adds a libtest line like `test result: ok. 14 passed; 0 failed; 1 ignored; ...`;
    /// whether it was one.
    fn add(&mut self, line: &str) -> bool {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return false;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
        true
    }
}

/// A test binary cargo started.
#[derive(Debug)]
struct Binary {
    /// E.g. `tests/agent/main.rs (agent)`, `doc-tests announcer`.
    label: String,
    /// The executable, for killing it (none for doc-tests, which rustdoc runs).
    path: Option<PathBuf>,
    started: Instant,
    result_seen: bool,
    /// Tests libtest announced as long-running, with their estimated start.
    long: BTreeMap<String, Instant>,
    /// Set when this binary was killed, with why.
    killed: Option<String>,
}

/// What a suite run found, besides the totals.
#[derive(Debug, Default)]
pub struct Findings {
    pub totals: Totals,
    /// One line per failure, by name: failed tests, crashed or killed binaries.
    pub failures: Vec<String>,
    /// Binaries that printed no result (crashed or killed): each counts as one failed test.
    pub crashed: u64,
}

#[derive(Debug, Default)]
struct State {
    current: Option<Binary>,
    findings: Findings,
}

impl State {
    /// Closes the current binary: one that printed no result line crashed (or was killed).
    fn close(&mut self) {
        let Some(b) = self.current.take() else { return };
        if !b.result_seen {
            self.findings.crashed += 1;
            let why = b
                .killed
                .unwrap_or_else(|| "crashed: no `test result:` line (killed by a signal?)".into());
            self.findings.failures.push(format!("{}: {why}", b.label));
        }
    }

    /// Feeds one line of cargo's output.
    fn line(&mut self, line: &str, now: Instant) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ") {
            self.close();
            self.current = Some(Binary::from_running(rest, now));
        } else if let Some(krate) = t.strip_prefix("Doc-tests ") {
            self.close();
            self.current = Some(Binary {
                label: format!("doc-tests {krate}"),
                path: None,
                started: now,
                result_seen: false,
                long: BTreeMap::new(),
                killed: None,
            });
        } else if self.findings.totals.add(t) {
            if let Some(b) = &mut self.current {
                b.result_seen = true;
            }
        } else if let Some(rest) = t.strip_prefix("test ") {
            let label = self.current.as_ref().map_or("?", |b| b.label.as_str());
            if let Some(name) = rest.strip_suffix(" has been running for over 60 seconds") {
                if let Some(b) = &mut self.current {
                    b.long.insert(
                        name.to_owned(),
                        now.checked_sub(LIBTEST_WARN).unwrap_or(now),
                    );
                }
            } else if let Some((name, verdict)) = rest.split_once(" ... ") {
                if verdict.starts_with("FAILED") {
                    self.findings
                        .failures
                        .push(format!("{label}: {name} FAILED"));
                }
                if let Some(b) = &mut self.current {
                    b.long.remove(name);
                }
            }
        }
    }

    /// The binary to kill now, if its test or itself ran past the timeouts, and why.
    fn overdue(&mut self, t: Timeouts, now: Instant) -> Option<PathBuf> {
        let b = self.current.as_mut()?;
        if b.killed.is_some() {
            return None;
        }
        let why = if let Some((name, since)) = b
            .long
            .iter()
            .find(|(_, s)| now.duration_since(**s) > t.test)
        {
            format!(
                "{name} TIMED OUT: still running after {} s (per-test timeout {} s, ANNOUNCER_TEST_TIMEOUT_S)",
                now.duration_since(*since).as_secs(),
                t.test.as_secs()
            )
        } else if now.duration_since(b.started) > t.binary {
            format!(
                "TIMED OUT: the binary ran for over {} s (tests still running: {})",
                t.binary.as_secs(),
                if b.long.is_empty() {
                    "none announced".to_owned()
                } else {
                    b.long.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            )
        } else {
            return None;
        };
        b.killed = Some(why);
        b.path.clone()
    }
}

impl Binary {
    /// From the rest of `Running tests/foo.rs (target/debug/deps/foo-0123abcd)`.
    fn from_running(rest: &str, now: Instant) -> Self {
        let (what, path) = match rest.rsplit_once(" (") {
            Some((what, p)) => (what, p.strip_suffix(')').map(PathBuf::from)),
            None => (rest, None),
        };
        let stem = path
            .as_ref()
            .and_then(|p| p.file_name())
            .and_then(|f| f.to_str())
            .map(|f| f.rsplit_once('-').map_or(f, |(s, _)| s).to_owned());
        Self {
            label: match stem {
                Some(s) => format!("{what} ({s})"),
                None => what.to_owned(),
            },
            path,
            started: now,
            result_seen: false,
            long: BTreeMap::new(),
            killed: None,
        }
    }
}

/// Runs `cargo <args>` in `root` with the timeouts; cargo's exit status and the findings.
pub fn run(root: &Path, args: &[&str], timeouts: Timeouts) -> Result<(ExitStatus, Findings)> {
    let (reader, writer) = std::io::pipe().context("creating a pipe")?;
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(args)
        .current_dir(root)
        .stdout(writer.try_clone()?)
        .stderr(writer);
    let mut child = cmd.spawn().context("running cargo test")?;
    // The parent's ends of the pipe's write side went into `cmd`; drop it so EOF arrives.
    drop(cmd);
    let state = Arc::new(Mutex::new(State::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let (state, done, root) = (state.clone(), done.clone(), root.to_owned());
        thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                thread::sleep(Duration::from_secs(1));
                let overdue = state
                    .lock()
                    .expect("state lock")
                    .overdue(timeouts, Instant::now());
                if let Some(path) = overdue {
                    kill_binary(&root.join(path));
                }
            }
        })
    };
    let mut out = std::io::stdout().lock();
    for line in BufReader::new(reader).lines() {
        let line = line?;
        state
            .lock()
            .expect("state lock")
            .line(&line, Instant::now());
        writeln!(out, "{line}")?;
        // A killed binary says why in the log too, next to its output.
        if let Some(b) = &state.lock().expect("state lock").current
            && let Some(why) = &b.killed
            && line.contains("process didn't exit successfully")
        {
            writeln!(out, "xtask: {}: {why}", b.label)?;
        }
    }
    let status = child.wait()?;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = watchdog.join();
    let mut s = state.lock().expect("state lock");
    s.close();
    Ok((status, std::mem::take(&mut s.findings)))
}

/// SIGKILLs the processes running `exe` and everything they started (agents, probers), children
/// first. The test harness reaps namespaces of dead test processes on its next run.
fn kill_binary(exe: &Path) {
    let exe = fs::canonicalize(exe).unwrap_or_else(|_| exe.to_owned());
    let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
    let mut roots = vec![];
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            })
        {
            parent.insert(pid, ppid);
        }
        if fs::read_link(entry.path().join("exe")).is_ok_and(|p| p == exe) {
            roots.push(pid);
        }
    }
    let mut doomed = roots.clone();
    let mut i = 0;
    while i < doomed.len() {
        let p = doomed[i];
        doomed.extend(parent.iter().filter(|(_, pp)| **pp == p).map(|(c, _)| *c));
        i += 1;
    }
    for pid in doomed.iter().rev() {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc_kill(*pid as i32, 9) };
    }
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(lines: &[&str]) -> Findings {
        let mut s = State::default();
        let now = Instant::now();
        for l in lines {
            s.line(l, now);
        }
        s.close();
        s.findings
    }

    #[test]
    fn totals_add_every_result_line() {
        let f = feed(&[
            "     Running tests/a.rs (target/debug/deps/a-0123)",
            "test result: ok. 14 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.78s",
            "     Running tests/b.rs (target/debug/deps/b-4567)",
            "running 3 tests",
            "test result: FAILED. 2 passed; 3 failed; 0 ignored; 0 measured; 0 filtered out",
        ]);
        assert_eq!(
            f.totals,
            Totals {
                passed: 16,
                failed: 3,
                ignored: 1
            }
        );
    }

    #[test]
    fn binary_without_a_result_line_counts_as_crashed_by_name() {
        let f = feed(&[
            "     Running tests/a.rs (target/debug/deps/a-0123)",
            "running 2 tests",
            "test one ... ok",
            "error: test failed, to rerun pass `--test a`",
            "     Running tests/b.rs (target/debug/deps/b-4567)",
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
            "   Doc-tests announcer",
        ]);
        assert_eq!(f.crashed, 2);
        assert!(
            f.failures[0].starts_with("tests/a.rs (a): crashed"),
            "{f:?}"
        );
        assert!(
            f.failures[1].starts_with("doc-tests announcer: crashed"),
            "{f:?}"
        );
    }

    #[test]
    fn failed_tests_are_listed_by_name() {
        let f = feed(&[
            "     Running tests/a.rs (target/debug/deps/a-0123)",
            "test outage::keeps_answering ... FAILED",
            "test other ... ok",
            "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        ]);
        assert_eq!(
            f.failures,
            ["tests/a.rs (a): outage::keeps_answering FAILED"]
        );
        assert_eq!(f.crashed, 0);
    }

    #[test]
    fn test_running_past_the_timeout_is_overdue_by_name() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.line("     Running tests/a.rs (target/debug/deps/a-0123)", t0);
        s.line("test slow::hangs has been running for over 60 seconds", t0);
        let t = Timeouts {
            test: Duration::from_secs(100),
            binary: Duration::from_secs(1000),
        };
        assert_eq!(s.overdue(t, t0 + Duration::from_secs(30)), None);
        assert_eq!(
            s.overdue(t, t0 + Duration::from_secs(50)),
            Some(PathBuf::from("target/debug/deps/a-0123"))
        );
        // Killed once; the binary then ends without a result line, named with its test.
        assert_eq!(s.overdue(t, t0 + Duration::from_secs(51)), None);
        s.close();
        assert!(
            s.findings.failures[0].contains("slow::hangs TIMED OUT"),
            "{:?}",
            s.findings.failures
        );
    }

    #[test]
    fn finished_long_test_is_not_overdue() {
        let mut s = State::default();
        let t0 = Instant::now();
        s.line("     Running tests/a.rs (target/debug/deps/a-0123)", t0);
        s.line("test slow has been running for over 60 seconds", t0);
        s.line("test slow ... ok", t0);
        let t = Timeouts {
            test: Duration::from_secs(100),
            binary: Duration::from_secs(1000),
        };
        assert_eq!(s.overdue(t, t0 + Duration::from_secs(500)), None);
    }
}

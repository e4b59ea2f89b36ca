//! A node whose wall clock is off: the agent runs under libfaketime.
//!
//! Why libfaketime and not a time namespace: Linux time namespaces (`unshare --time`) offset
//! only `CLOCK_MONOTONIC` and `CLOCK_BOOTTIME`, never `CLOCK_REALTIME`; a skewed wall clock is
//! exactly what a misconfigured NTP gives a real node, and what the agent reads through
//! `SystemTime::now()` (heartbeat timestamps, Lease times). libfaketime (Debian `libfaketime`,
//! installed by `cargo xtask setup`) intercepts `clock_gettime` and friends in the process via
//! `LD_PRELOAD`. Only the wall clock moves: `FAKETIME_DONT_FAKE_MONOTONIC=1` leaves
//! `CLOCK_MONOTONIC` (Tokio's timers, `Instant`) alone, so the agent's own pacing is untouched.
//!
//! The preload is set on the `nsenter` that launches the agent and is inherited by the agent
//! itself (nsenter's own clock being off is harmless).

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use super::{AGENT_HTTP_PORT, Testbed};
use crate::env::agent_cmd::AgentCommand;

/// Where Debian puts the library, per multiarch triplet.
const CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
];

/// Path of `libfaketime.so.1`; panics with the install hint if it is missing (tests never
/// skip).
pub fn faketime_library() -> PathBuf {
    if let Some(p) = std::env::var_os("ANNOUNCER_FAKETIME_LIB") {
        return p.into();
    }
    CANDIDATES
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            panic!(
                "libfaketime.so.1 not found (looked in {CANDIDATES:?}); install Debian's \
                 `libfaketime` (`cargo xtask setup` does) or set ANNOUNCER_FAKETIME_LIB"
            )
        })
}

/// Makes the agent run with its wall clock offset by `offset` (a libfaketime `FAKETIME` value
/// such as `+10s` or `-2.5s`); the monotonic clock is not faked.
pub(super) fn apply(cmd: AgentCommand, offset: &str) -> AgentCommand {
    cmd.env("LD_PRELOAD", faketime_library())
        .env("FAKETIME", offset)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
}

impl Testbed {
    /// Runs `node`'s agent with its wall clock offset by `offset` (libfaketime syntax: `"+10s"`,
    /// `"-3s"`), or normally with `None`. Applies to the next [`Self::start_agent`] or
    /// [`Self::restart_agent`] of that node (an agent already running keeps its clock).
    pub fn set_clock_offset(&mut self, node: &str, offset: Option<&str>) {
        self.node(node);
        match offset {
            Some(o) => {
                faketime_library();
                self.clock_offsets.insert(node.into(), o.into());
            }
            None => {
                self.clock_offsets.remove(node);
            }
        }
    }

    /// `GET /metrics` of `node`'s agent (inside its namespace), if it answers.
    pub fn metrics(&self, node: &str) -> Option<String> {
        self.node_ns(node).enter(|| {
            ureq::get(&format!("http://127.0.0.1:{AGENT_HTTP_PORT}/metrics"))
                .timeout(Duration::from_secs(2))
                .call()
                .ok()?
                .into_string()
                .ok()
        })
    }

    /// `announcer_heartbeat_delay_seconds{peer="<peer>"}` as `node`'s agent reports it: the
    /// one-way delay of `peer`'s last heartbeat by the two wall clocks, so about `-10` when
    /// `peer`'s clock runs 10 s ahead. `None` if the agent or the series is not there (the
    /// current agent rejects heartbeats with a skew beyond its limit before recording it).
    pub fn heartbeat_delay(&self, node: &str, peer: &str) -> Option<f64> {
        metric_value(
            &self.metrics(node)?,
            "announcer_heartbeat_delay_seconds",
            &format!("peer=\"{peer}\""),
        )
    }

    /// How far ahead `node`'s agent's wall clock runs, as its own log shows it: the timestamp
    /// of the log's last line (written by the agent with its `SystemTime::now()`) minus the
    /// log file's modification time (set by the kernel, with the real clock, by that same
    /// write). About `+10` under [`Self::set_clock_offset`]`(node, Some("+10s"))`, about 0
    /// without; `None` if the log has no timestamped line yet.
    pub fn agent_clock_offset(&self, node: &str) -> Option<f64> {
        let path = self.agent_log(node)?;
        // Read the mtime first: a line written after it only makes the offset look larger.
        let mtime = std::fs::metadata(&path).ok()?.modified().ok()?;
        let text = std::fs::read_to_string(&path).ok()?;
        let stamp = text
            .lines()
            .rev()
            .filter_map(|l| l.split_whitespace().next())
            .find_map(|w| humantime::parse_rfc3339_weak(w).ok())?;
        Some(match stamp.duration_since(mtime) {
            Ok(ahead) => ahead.as_secs_f64(),
            Err(behind) => -behind.duration().as_secs_f64(),
        })
    }

    /// Waits up to `timeout` until `node`'s agent logs with its wall clock about `expect_s`
    /// seconds ahead (within 2 s; [`Self::agent_clock_offset`]); panics otherwise. The check
    /// that a [`Self::set_clock_offset`] really reaches the agent's `SystemTime::now()`.
    pub fn wait_clock_offset_effective(&self, node: &str, expect_s: f64, timeout: Duration) {
        let end = Instant::now() + timeout;
        loop {
            let last = self.agent_clock_offset(node);
            if last.is_some_and(|d| (d - expect_s).abs() < 2.0) {
                return;
            }
            if Instant::now() >= end {
                panic!(
                    "{node}'s agent does not log with its wall clock {expect_s:+} s off after \
                     {timeout:?} (last seen offset {last:?}): is libfaketime effective?\n{}",
                    self.agent_log_tail(node)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The value of the first sample of `name` whose labels contain `label` (e.g. `peer="a"`).
pub fn metric_value(text: &str, name: &str, label: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            (rest.starts_with('{') && rest.contains(label)).then(|| value.trim().parse().ok())?
        })
        .next()
}

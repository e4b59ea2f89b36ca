//! CPU time: the whole machine's busy time from `/proc/stat`, this process's and one thread's
//! from `getrusage`.
//!
//! The flood's packet processing mostly runs in softirq context on whichever CPU sent the frame,
//! not in any one thread, so only the machine-wide figure sees all of a responder's cost. The
//! process figure is a cross-check: when it is far below the machine's, something else was busy.

use anyhow::{Context, Result, bail};

/// Busy CPU seconds of the whole machine since boot (user + nice + system + irq + softirq).
pub fn machine_busy_s() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat").context("reading /proc/stat")?;
    let line = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .context("no `cpu` line in /proc/stat")?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    if f.len() < 7 {
        bail!("short `cpu` line in /proc/stat: {line:?}");
    }
    // user nice system idle iowait irq softirq ...
    let busy = f[0] + f[1] + f[2] + f[5] + f[6];
    Ok(busy as f64 / clk_tck())
}

fn clk_tck() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

fn rusage_s(who: libc::c_int) -> f64 {
    // SAFETY: getrusage fills the zeroed struct; RUSAGE_SELF/RUSAGE_THREAD are valid selectors.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// User + system CPU seconds of this process (all threads).
pub fn process_s() -> f64 {
    rusage_s(libc::RUSAGE_SELF)
}

/// User + system CPU seconds of the calling thread.
pub fn thread_s() -> f64 {
    rusage_s(libc::RUSAGE_THREAD)
}

/// Busy cores of the whole machine, averaged over `window`.
pub fn busy_cores(window: std::time::Duration) -> Result<f64> {
    let a = machine_busy_s()?;
    std::thread::sleep(window);
    Ok((machine_busy_s()? - a) / window.as_secs_f64())
}

/// Waits, up to `max_wait`, until the machine is quiet (under `limit` busy cores over half a
/// second), telling `progress` while it waits; returns the last reading. Another process's
/// load would be counted as the responder's, since only the machine-wide figure sees softirq
/// work.
pub fn wait_quiet(
    limit: f64,
    max_wait: std::time::Duration,
    progress: &dyn Fn(&str),
) -> Result<f64> {
    let start = std::time::Instant::now();
    let mut told = false;
    loop {
        let busy = busy_cores(std::time::Duration::from_millis(500))?;
        if busy < limit || start.elapsed() >= max_wait {
            if busy >= limit {
                progress(&format!(
                    "warning: machine still busy ({busy:.2} cores) after {max_wait:?}; measuring anyway"
                ));
            }
            return Ok(busy);
        }
        if !told {
            progress(&format!(
                "waiting for the machine to go quiet ({busy:.2} cores busy elsewhere)"
            ));
            told = true;
        }
    }
}

/// CPU ticks (utime + stime) of every other userspace process, by pid. Kernel threads are left
/// out: ksoftirqd and the like may be doing this benchmark's packet work.
fn others_ticks() -> std::collections::HashMap<u32, u64> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let me = std::process::id();
    let mut out = std::collections::HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name (which may contain spaces): state is field 3.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let f: Vec<u64> = rest
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // flags = field 9, utime = 14, stime = 15 (f[0] is field 4).
        if f.len() > 11 && f[5] & PF_KTHREAD == 0 {
            out.insert(pid, f[10] + f[11]);
        }
    }
    out
}

/// A point in time to measure CPU from.
#[derive(Clone, Debug)]
pub struct Snapshot {
    machine: f64,
    process: f64,
    others: std::collections::HashMap<u32, u64>,
    at: std::time::Instant,
}

/// CPU used between two snapshots.
#[derive(Clone, Copy, Debug, Default)]
pub struct Used {
    /// Busy seconds of the whole machine.
    pub machine_s: f64,
    /// CPU seconds of this process.
    pub process_s: f64,
    /// CPU seconds of other userspace processes (those alive at the end; a process that came
    /// and went inside the window is missed, but still shows in `machine_s - process_s`).
    pub others_s: f64,
    /// Wall-clock seconds.
    pub wall_s: f64,
}

impl Snapshot {
    /// Now.
    pub fn take() -> Result<Self> {
        let others = others_ticks();
        Ok(Self {
            machine: machine_busy_s()?,
            process: process_s(),
            others,
            at: std::time::Instant::now(),
        })
    }

    /// CPU used since `self`.
    pub fn since(&self) -> Result<Used> {
        let now = Self::take()?;
        let others: u64 = now
            .others
            .iter()
            .map(|(pid, t)| t.saturating_sub(self.others.get(pid).copied().unwrap_or(0)))
            .sum();
        Ok(Used {
            machine_s: now.machine - self.machine,
            process_s: now.process - self.process,
            others_s: others as f64 / clk_tck(),
            wall_s: now.at.duration_since(self.at).as_secs_f64(),
        })
    }
}

//! What an idle agent costs with many VIPs: resident memory (`VmRSS` of
//! `/proc/<pid>/status`) and CPU (`utime + stime` of `/proc/<pid>/stat`, fields 14 and 15 as
//! proc(5) numbers them, over a window). Idle is the common case of an announcer: what it
//! costs while nothing fails is what every node pays all the time.

use std::time::{Duration, Instant};

use serde::Serialize;

/// One process over the window.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ProcUsage {
    pub node: String,
    pub pid: u32,
    /// Resident set at the end of the window (KiB).
    pub rss_kib: u64,
    /// Share of one core over the window (percent).
    pub cpu_percent: f64,
}

/// `VmRSS` in KiB from the text of `/proc/<pid>/status`.
pub fn parse_vmrss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `utime + stime` (clock ticks) from the text of `/proc/<pid>/stat`. The command name (field
/// 2) may contain spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ")": field 3 (state) is f[0], so field n is f[n - 3].
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks(pid: u32) -> Option<u64> {
    parse_cpu_ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Samples every `(node, pid)` over `window`: CPU share and the final RSS. Processes that
/// vanished are left out.
pub fn measure(procs: &[(String, u32)], window: Duration) -> Vec<ProcUsage> {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let start: Vec<Option<u64>> = procs.iter().map(|(_, p)| ticks(*p)).collect();
    let t0 = Instant::now();
    std::thread::sleep(window);
    let secs = t0.elapsed().as_secs_f64();
    procs
        .iter()
        .zip(start)
        .filter_map(|((node, pid), t_start)| {
            let used = ticks(*pid)?.checked_sub(t_start?)?;
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            Some(ProcUsage {
                node: node.clone(),
                pid: *pid,
                rss_kib: parse_vmrss_kib(&status)?,
                cpu_percent: used as f64 / hz / secs * 100.0,
            })
        })
        .collect()
}

/// The idle part's result.
#[derive(Clone, Debug, Serialize)]
pub struct IdleReport {
    pub system: String,
    pub vips: usize,
    pub services: usize,
    pub window_s: f64,
    pub agents: Vec<ProcUsage>,
}

impl IdleReport {
    /// Lines for the table.
    pub fn text(&self) -> String {
        let mut s = format!(
            "Idle {} with {} VIPs in {} Services, over {:.0} s (RSS at the end, CPU as % of one core):\n",
            self.system, self.vips, self.services, self.window_s
        );
        for a in &self.agents {
            s.push_str(&format!(
                "  {:<8} pid {:<8} RSS {:>7.1} MiB  CPU {:>6.2} %\n",
                a.node,
                a.pid,
                a.rss_kib as f64 / 1024.0,
                a.cpu_percent
            ));
        }
        s
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let status = "Name:\tannouncer\nVmPeak:\t  100 kB\nVmRSS:\t   23456 kB\nThreads:\t4\n";
        assert_eq!(parse_vmrss_kib(status), Some(23456));
        assert_eq!(parse_vmrss_kib("Name: x\n"), None);
        let stat = "1234 (an nouncer) S 1 1234 1234 0 -1 4194560 500 0 0 0 17 5 0 0 20 0 4 0";
        assert_eq!(parse_cpu_ticks(stat), Some(22));
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn measures_this_process() {
        let me = std::process::id();
        let u = measure(&[("self".into(), me)], Duration::from_millis(50));
        assert_eq!(u.len(), 1);
        assert!(u[0].rss_kib > 0);
        assert!(measure(&[("gone".into(), u32::MAX)], Duration::ZERO).is_empty());
    }
}

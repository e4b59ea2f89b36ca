//! The kernel's own per-program run-time statistics (`run_time_ns`, `run_cnt` of
//! `bpf_prog_info`), counted only while `kernel.bpf_stats_enabled` is 1.
//!
//! With statistics on, the kernel brackets every run of every BPF program with two
//! `sched_clock()` reads and a per-CPU counter update, so `run_time_ns / run_cnt` is the exact
//! CPU time spent inside the program, plus about one clock read. That bracketing is itself a
//! cost paid on the packet path while statistics are on; [`overhead_ns`] measures it. The flood
//! therefore measures machine CPU only with statistics off and reads the program statistics in
//! separate trials (see `flood`).

use std::time::Duration;

use announcer_ebpf::{
    maps::REFLECTOR,
    wire::{MacAddr, frame},
};
use anyhow::{Context, Result, bail};
use aya::programs::{TestRun, TestRunOptions, Xdp, loaded_programs};

use crate::bench::stats::percentile;

const SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

fn read_sysctl() -> Result<String> {
    Ok(std::fs::read_to_string(SYSCTL)
        .with_context(|| format!("reading {SYSCTL}"))?
        .trim()
        .to_owned())
}

fn write_sysctl(value: &str) -> Result<()> {
    std::fs::write(SYSCTL, value).with_context(|| format!("writing {value} to {SYSCTL}"))
}

/// The current `kernel.bpf_stats_enabled` setting (`"0"` or `"1"`).
pub fn setting() -> Result<String> {
    read_sysctl()
}

/// Writes `value` back to `kernel.bpf_stats_enabled` if it differs (the benchmark's last line of
/// defence, after the guards below have run).
pub fn restore(value: &str) -> Result<()> {
    if read_sysctl()? != value {
        write_sysctl(value)?;
    }
    Ok(())
}

/// `kernel.bpf_stats_enabled` held at one value while alive; the previous value is written back
/// on drop (also while a panic unwinds).
pub struct StatsSetting {
    previous: String,
    value: &'static str,
}

impl StatsSetting {
    /// Sets statistics on (`true`) or off, remembering the current setting.
    pub fn set(on: bool) -> Result<Self> {
        let value = if on { "1" } else { "0" };
        let previous = read_sysctl()?;
        if previous != value {
            write_sysctl(value)?;
        }
        Ok(Self { previous, value })
    }

    /// Turns statistics on.
    pub fn enable() -> Result<Self> {
        Self::set(true)
    }

    /// Turns statistics off (the kernel's default).
    pub fn disable() -> Result<Self> {
        Self::set(false)
    }
}

impl Drop for StatsSetting {
    fn drop(&mut self) {
        if self.previous != self.value
            && let Err(e) = write_sysctl(&self.previous)
        {
            eprintln!(
                "warning: restoring kernel.bpf_stats_enabled={}: {e:#}",
                self.previous
            );
        }
    }
}

/// A program's counters at one moment (or their difference over an interval).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProgStats {
    /// Runs counted (`run_cnt`).
    pub runs: u64,
    /// Nanoseconds spent in the program over those runs (`run_time_ns`).
    pub run_time_ns: u64,
}

impl ProgStats {
    /// The counters of the loaded program with kernel id `id`.
    pub fn of(id: u32) -> Result<Self> {
        for info in loaded_programs() {
            let info = info.context("listing loaded BPF programs")?;
            if info.id() == id {
                return Ok(Self {
                    runs: info.run_count(),
                    run_time_ns: info.run_time().as_nanos() as u64,
                });
            }
        }
        bail!("no loaded BPF program with id {id}")
    }

    /// What was counted between `before` and `self`.
    pub fn since(self, before: Self) -> Self {
        Self {
            runs: self.runs - before.runs,
            run_time_ns: self.run_time_ns - before.run_time_ns,
        }
    }

    /// Nanoseconds per run (`None` without runs).
    pub fn ns_per_run(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.run_time_ns as f64 / self.runs as f64)
    }
}

/// Measures what statistics add to one program run: the `reflect` program's
/// `BPF_PROG_TEST_RUN` duration (repeat = 1, a fresh ARP request each run) with statistics on
/// minus off, in alternating blocks so drift hits both alike; the difference of the medians.
/// Leaves the setting as it found it. `None` when statistics are already on (nothing to
/// compare with).
pub fn overhead_ns(runs_per_block: u32, blocks: u32) -> Result<Option<f64>> {
    if read_sysctl()? == "1" {
        return Ok(None);
    }
    let ebpf = super::attach::load_reflect()?;
    let prog: &Xdp = ebpf
        .program(REFLECTOR)
        .expect("loaded")
        .try_into()
        .expect("XDP");
    let mut req = [0u8; frame::MAX_FRAME];
    let mac = MacAddr([0x02, 0, 0, 0, 0, 0x99]);
    let len = crate::frames::write_arp_request(
        &mut req,
        mac,
        [10, 77, 0, 10].into(),
        [10, 77, 0, 100].into(),
        None,
    );
    let mut out = [0u8; 512];
    let mut time = |n: u32, into: &mut Vec<u64>| -> Result<()> {
        for _ in 0..n {
            let r = prog
                .test_run(TestRunOptions {
                    data_in: Some(&req[..len]),
                    data_out: Some(&mut out),
                    ..Default::default()
                })
                .context("BPF_PROG_TEST_RUN")?;
            into.push(r.duration.as_nanos() as u64);
        }
        Ok(())
    };
    let (mut off, mut on) = (Vec::new(), Vec::new());
    time(runs_per_block, &mut Vec::new())?; // warm-up
    for _ in 0..blocks {
        time(runs_per_block, &mut off)?;
        let guard = StatsSetting::enable()?;
        // Flipping the static key patches code on every CPU; let that settle.
        std::thread::sleep(Duration::from_millis(5));
        time(runs_per_block, &mut on)?;
        drop(guard);
    }
    off.sort_unstable();
    on.sort_unstable();
    Ok(Some(
        percentile(&on, 50.0) as f64 - percentile(&off, 50.0) as f64,
    ))
}

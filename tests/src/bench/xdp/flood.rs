//! ARP flood across a namespace pair, answered by one responder at a time: the XDP program
//! (generic and native mode), the kernel (VIP configured on the interface), and a userspace
//! `AF_PACKET` responder like MetalLB's.
//!
//! The client floods broadcast ARP requests for the VIP from an `AF_PACKET` socket for a fixed
//! time, as fast as one core sends. Answers are the frames arriving at the client's veth (its
//! `rx_packets`), cross-checked with the responder's own count.
//!
//! CPU: on a veth, the node's receive path (and everything the kernel or XDP does with the
//! request) runs in softirq context on the *sender's* core, so the sender, not the responder,
//! sets the pace, and a costlier responder shows up as fewer requests sent in the same busy
//! time; subtracting a baseline's busy *seconds* would leave about nothing. A responder's CPU is
//! therefore the machine's busy time during the run minus `requests sent × (busy time per
//! request of the baseline)`. The baseline is the same flood (ARP requests for an address
//! nobody answers) with the node's eth0 set `NOARP`, so the kernel discards each request on
//! arrival: it holds the sender's, the veth's and the skb's cost and nothing else, and is
//! measured before and after the others (averaged; both printed as a drift check). What is
//! left for a responder is what answering cost: the responder itself (for the userspace one,
//! also the kernel's own processing of each request, which it does not skip), sending the
//! reply, and the client discarding it on arrival (the same for every responder). A second
//! reference run, the kernel processing and ignoring requests for an address nobody has, is
//! reported for comparison but not subtracted. Only a machine-wide figure sees softirq work, so
//! a run during which other processes were busy is repeated (see [`Run::disturbed`]).
//!
//! The floor: the `reflect` program (swap the Ethernet addresses, `XDP_TX`, nothing else) is
//! one more responder, attached like the XDP responder in both modes. Every flood frame's
//! Ethernet source is [`FLOOD_MAC`], so the reflected frames, like the answers, go to a MAC the
//! client discards on arrival; the ratio of the responder's CPU per answer to the reflector's
//! per frame is the flood's reading of "an answer costs at most 1.2x the floor".
//!
//! Program statistics: with `kernel.bpf_stats_enabled` = 1 the kernel also reports the node
//! program's own run time and run count: the program's exact CPU per run, without the veth, skb
//! and sender costs around it. But statistics cost two clock reads per program run
//! ([`bpfstats::overhead_ns`] measures how much), paid by the XDP rows only, twice per answer in
//! native mode (node and peer program). So the two are measured in separate runs
//! ([`Measure`]): every run the machine-CPU figures come from, of every row, has statistics off
//! ([`Measure::MachineCpu`], held off by a [`StatsSetting`] guard); and each round runs every XDP
//! row once more with statistics on ([`Measure::ProgStats`]), right after the machine-CPU runs
//! of the same mode. Those runs give the `prog_*` figures only; their machine CPU is kept for
//! comparison but never used for the machine-CPU figures.
//!
//! Noise: the rounds (every step once, in [`ORDER`]) are repeated `trials` times; each row
//! reports its median machine-CPU trial by CPU per answer (per request for the references), and
//! its median statistics trial by the program's ns per run.

use std::{
    net::Ipv4Addr,
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use announcer::dataplane::loader::Mode;
use announcer_ebpf::wire::{MacAddr, frame};
use anyhow::{Context, Result, anyhow};

use super::{
    attach::{Attached, Reflector},
    bpfstats::{self, ProgStats, StatsSetting},
    userspace::Responder,
};
use crate::bench::cpu::{self, Snapshot, Used};
use crate::env::packet::{ETH_P_ARP, PacketSocket};
use crate::netns::{NODE_MAC, Netns, Pair};

/// The VIP flooded for.
pub const VIP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 100);
/// An address nobody answers (the baselines).
pub const NOBODY: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 200);
/// Sender MAC of the flood: a host behind the client, not the client's own MAC, so the client
/// discards each answer on arrival (`PACKET_OTHERHOST`) instead of processing it. The answers
/// still count in its veth's `rx_packets`, and the receiving end's cost stays out of the
/// responders' figures (on a real segment it is another host's CPU).
pub const FLOOD_MAC: MacAddr = MacAddr([0x02, 0, 0, 0, 0, 0x99]);
/// Distinct sender addresses the flood cycles through (10.77.0.10 and up).
const SENDERS: u8 = 64;

/// Who answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    /// The baseline: the node's eth0 is `NOARP`, so the kernel discards the requests (for
    /// [`NOBODY`]) on arrival. Sender, veth and skb cost only; subtracted from every other run.
    Baseline,
    /// Nobody answers, but the kernel processes each request (for [`NOBODY`]) and ignores it:
    /// what a request costs the node when no one answers. Reported, not subtracted.
    KernelIgnores,
    /// The XDP program, generic (skb) mode.
    XdpGeneric,
    /// The XDP program, native (driver) mode. The client veth runs the same program without
    /// VIPs (it passes every frame), because veth delivers native `XDP_TX` frames only to a peer
    /// that runs XDP; that pass run per answer is counted against this row.
    XdpNative,
    /// The `reflect` floor in generic mode: swaps the MACs of every request and sends it back.
    ReflectGeneric,
    /// The `reflect` floor in native mode, with the same pass-through peer as [`Who::XdpNative`].
    ReflectNative,
    /// The kernel: VIP as a /32 on the node's eth0.
    Kernel,
    /// [`Responder`] on a thread in the node namespace.
    Userspace,
}

impl Who {
    /// Whether this run has a responder (the others are references without answers).
    pub fn answers(self) -> bool {
        !matches!(self, Who::Baseline | Who::KernelIgnores)
    }

    /// Whether an XDP program answers (the responder or the reflector).
    pub fn is_xdp(self) -> bool {
        matches!(
            self,
            Who::XdpGeneric | Who::XdpNative | Who::ReflectGeneric | Who::ReflectNative
        )
    }

    /// Whether this is the `reflect` floor.
    pub fn is_reflector(self) -> bool {
        matches!(self, Who::ReflectGeneric | Who::ReflectNative)
    }

    /// Row name.
    pub fn name(self) -> &'static str {
        match self {
            Who::Baseline => "flood_baseline_discard",
            Who::KernelIgnores => "flood_kernel_ignores",
            Who::XdpGeneric => "flood_xdp_generic",
            Who::XdpNative => "flood_xdp_native",
            Who::ReflectGeneric => "flood_xdp_reflect_generic",
            Who::ReflectNative => "flood_xdp_reflect_native",
            Who::Kernel => "flood_kernel",
            Who::Userspace => "flood_userspace_af_packet",
        }
    }
}

/// What a run is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Machine CPU, with `kernel.bpf_stats_enabled` off: the row's busy/cpu figures (every row).
    MachineCpu,
    /// The program's run-time statistics, with `kernel.bpf_stats_enabled` on (XDP rows only):
    /// the row's `prog_*` figures; the run's machine CPU is not used for the row's.
    ProgStats,
}

impl Measure {
    /// Whether `kernel.bpf_stats_enabled` is on during the run.
    pub fn stats_on(self) -> bool {
        self == Measure::ProgStats
    }
}

/// One flood run.
#[derive(Clone, Debug, Default)]
pub struct Run {
    /// Requests written by the sender.
    pub sent: u64,
    /// Sends the kernel refused.
    pub send_errors: u64,
    /// How long the sender ran.
    pub send_s: f64,
    /// Frames that arrived at the client (the answers).
    pub answers: u64,
    /// Answers by the responder's own count (`None` for the references; for the reflector, its
    /// program's run count in statistics runs, the node's eth0 `tx_packets` otherwise).
    pub responder_count: Option<u64>,
    /// CPU used during the run (sender start to 100 ms after it stopped).
    pub cpu: Used,
    /// For the userspace responder: its thread's own CPU seconds.
    pub thread_cpu_s: Option<f64>,
    /// Busy cores of the machine just before the run (should be about 0).
    pub background_busy_cores: f64,
    /// For XDP statistics runs ([`Measure::ProgStats`]): the node program's kernel run-time
    /// statistics over the run (`None` in machine-CPU runs, which have statistics off).
    pub prog: Option<ProgStats>,
    /// For native XDP statistics runs: those of the client veth's pass-through program.
    pub peer_prog: Option<ProgStats>,
}

impl Run {
    /// Busy cores of the machine outside this process during the run: ~0 unless something
    /// else ran (or the kernel did much of the work in its own threads).
    pub fn outside_process_cores(&self) -> f64 {
        (self.cpu.machine_s - self.cpu.process_s) / self.cpu.wall_s.max(1e-9)
    }

    /// Cores used by other userspace processes during the run.
    pub fn others_cores(&self) -> f64 {
        self.cpu.others_s / self.cpu.wall_s.max(1e-9)
    }

    /// Whether other load ran during the run (its CPU figure would be inflated).
    pub fn disturbed(&self) -> bool {
        self.outside_process_cores() > MAX_OUTSIDE_CORES || self.others_cores() > MAX_OTHERS_CORES
    }
}

/// One trial of a row.
#[derive(Clone, Debug)]
pub struct Trial {
    /// The run.
    pub run: Run,
    /// CPU seconds attributed to answering; `None` for the baseline.
    pub net_cpu_s: Option<f64>,
}

impl Trial {
    /// CPU ns attributed to the responder per answer (per request for the references; machine
    /// busy ns per request for the baseline): what the median trial is chosen by.
    pub fn key_ns(&self, who: Who) -> f64 {
        let r = &self.run;
        match self.net_cpu_s {
            Some(net) if who.answers() && r.answers > 0 => net * 1e9 / r.answers as f64,
            Some(net) => net * 1e9 / r.sent.max(1) as f64,
            None => r.cpu.machine_s * 1e9 / r.sent.max(1) as f64,
        }
    }
}

/// A responder's row: its median trial, or why it could not run.
#[derive(Clone, Debug)]
pub struct Row {
    /// Who answered.
    pub who: Who,
    /// The median machine-CPU trial's run (statistics off), or the error that prevented every
    /// trial.
    pub run: Result<Run, String>,
    /// CPU seconds attributed to answering (see the module docs); `None` for the baseline.
    pub net_cpu_s: Option<f64>,
    /// Every machine-CPU trial that ran, in order.
    pub trials: Vec<Trial>,
    /// Index of the reported (median) trial in `trials`.
    pub chosen: usize,
    /// Errors of machine-CPU trials that failed (their rows use the remaining trials).
    pub failed_trials: Vec<String>,
    /// XDP rows: every statistics trial ([`Measure::ProgStats`]) that ran, in order. Only their
    /// program statistics are reported; their CPU figures are for comparison only.
    pub stats_trials: Vec<Trial>,
    /// Index of the reported (median by program ns per run) trial in `stats_trials`.
    pub stats_chosen: Option<usize>,
    /// Errors of statistics trials that failed.
    pub stats_failed: Vec<String>,
}

impl Row {
    /// The median statistics trial's run (XDP rows).
    pub fn stats_run(&self) -> Option<&Run> {
        Some(&self.stats_trials.get(self.stats_chosen?)?.run)
    }

    /// The node program's statistics over the median statistics trial.
    pub fn prog(&self) -> Option<ProgStats> {
        self.stats_run()?.prog
    }

    /// The peer's pass-through program's statistics over the median statistics trial.
    pub fn peer_prog(&self) -> Option<ProgStats> {
        self.stats_run()?.peer_prog
    }

    /// Kernel-counted ns per run of the node's XDP program (median statistics trial).
    pub fn prog_ns_per_run(&self) -> Option<f64> {
        self.prog()?.ns_per_run()
    }

    /// Runs of the node's XDP program per CPU second of the program alone (each run answers).
    pub fn prog_answers_per_cpu_s(&self) -> Option<f64> {
        self.prog_ns_per_run()
            .filter(|&ns| ns > 0.0)
            .map(|ns| 1e9 / ns)
    }

    /// The userspace responder thread's own CPU ns per reply it wrote.
    pub fn thread_cpu_ns_per_answer(&self) -> Option<f64> {
        let r = self.run.as_ref().ok()?;
        let answered = r.responder_count.filter(|&n| n > 0)?;
        Some(r.thread_cpu_s? * 1e9 / answered as f64)
    }

    /// Replies per CPU second of the userspace responder thread alone.
    pub fn thread_answers_per_cpu_s(&self) -> Option<f64> {
        self.thread_cpu_ns_per_answer()
            .filter(|&ns| ns > 0.0)
            .map(|ns| 1e9 / ns)
    }

    /// Answers per second of flood.
    pub fn answers_per_s(&self) -> Option<f64> {
        self.run
            .as_ref()
            .ok()
            .map(|r| r.answers as f64 / r.send_s.max(1e-9))
    }

    /// CPU ns attributed to the responder per request sent.
    pub fn cpu_ns_per_request(&self) -> Option<f64> {
        let r = self.run.as_ref().ok()?;
        Some(self.net_cpu_s? * 1e9 / r.sent.max(1) as f64)
    }

    /// CPU ns attributed to the responder per answer.
    pub fn cpu_ns_per_answer(&self) -> Option<f64> {
        let r = self
            .run
            .as_ref()
            .ok()
            .filter(|r| self.who.answers() && r.answers > 0)?;
        Some(self.net_cpu_s? * 1e9 / r.answers as f64)
    }

    /// Answers per CPU second spent answering.
    pub fn answers_per_cpu_s(&self) -> Option<f64> {
        let r = self.run.as_ref().ok().filter(|_| self.who.answers())?;
        let cpu = self.net_cpu_s?;
        (cpu > 0.0).then(|| r.answers as f64 / cpu)
    }
}

/// All flood rows, baseline first.
pub struct FloodReport {
    /// One per responder, and the baselines.
    pub rows: Vec<Row>,
    /// Machine busy seconds per request sent in the baseline (the subtracted cost).
    pub base_cpu_per_request_s: f64,
    /// The two baseline figures, before and after (drift check).
    pub base_runs: [f64; 2],
    /// Trials per row.
    pub trials: u32,
    /// What `kernel.bpf_stats_enabled` adds per program run (ns), `None` if not measured.
    pub bpf_stats_overhead_ns: Option<f64>,
}

impl FloodReport {
    /// The row of `who` (the last one for the baseline).
    pub fn get(&self, who: Who) -> Option<&Row> {
        self.rows.iter().rev().find(|r| r.who == who)
    }
}

/// The `i`-th request of the flood for `target`.
fn request(i: u32, target: Ipv4Addr, buf: &mut [u8]) -> usize {
    let sender = Ipv4Addr::new(10, 77, 0, 10 + (i % u32::from(SENDERS)) as u8);
    crate::frames::write_arp_request(buf, FLOOD_MAC, sender, target, None)
}

/// Floods `target` from the client's eth0 for `dur`; returns (sent, errors, seconds).
fn send_flood(client: &Netns, target: Ipv4Addr, dur: Duration) -> Result<(u64, u64, f64)> {
    client.enter(|| {
        let sock = PacketSocket::open("eth0", 0)?;
        sock.bypass_qdisc()?;
        let frames: Vec<Vec<u8>> = (0..u32::from(SENDERS))
            .map(|i| {
                let mut b = [0u8; frame::MAX_FRAME];
                let n = request(i, target, &mut b);
                b[..n].to_vec()
            })
            .collect();
        let (mut sent, mut errors) = (0u64, 0u64);
        let start = Instant::now();
        // The clock is read once per pass over the frames, not per frame.
        while start.elapsed() < dur {
            for f in &frames {
                match sock.send(f, ETH_P_ARP) {
                    Ok(()) => sent += 1,
                    Err(_) => errors += 1,
                }
            }
        }
        Ok((sent, errors, start.elapsed().as_secs_f64()))
    })
}

/// `stats64.<dir>.packets` of eth0 in `ns`.
fn packets(ns: &Netns, dir: &str) -> Result<u64> {
    let text = ns.ip(&["-s", "-j", "link", "show", "eth0"]);
    let v: serde_json::Value = serde_json::from_str(&text).context("parsing `ip -s -j link`")?;
    v[0]["stats64"][dir]["packets"]
        .as_u64()
        .ok_or_else(|| anyhow!("no stats64.{dir}.packets in {text}"))
}

/// Runs one flood with whatever responder is in place; `count` reads the responder's own
/// answer counter (if it has one that can be read while it runs).
fn measure_run(
    pair: &Pair,
    target: Ipv4Addr,
    dur: Duration,
    count: &dyn Fn() -> Result<Option<u64>>,
) -> Result<Run> {
    let (rx0, c0) = (packets(&pair.client, "rx")?, count()?);
    let snap = Snapshot::take()?;
    let (sent, send_errors, send_s) = send_flood(&pair.client, target, dur)?;
    // Let whatever is still queued (the userspace responder's socket) drain inside the window.
    std::thread::sleep(Duration::from_millis(100));
    let cpu = snap.since()?;
    let (rx1, c1) = (packets(&pair.client, "rx")?, count()?);
    let responder_count = c0.zip(c1).map(|(a, b)| b - a);
    Ok(Run {
        sent,
        send_errors,
        send_s,
        answers: rx1 - rx0,
        responder_count,
        cpu,
        ..Run::default()
    })
}

fn none() -> Result<Option<u64>> {
    Ok(None)
}

/// The XDP responder or the reflector; kernel statistics on for [`Measure::ProgStats`], off
/// (whatever the setting was) for [`Measure::MachineCpu`].
fn run_xdp(pair: &Pair, who: Who, measure: Measure, dur: Duration) -> Result<Run> {
    let mode = if matches!(who, Who::XdpNative | Who::ReflectNative) {
        Mode::Native
    } else {
        Mode::Generic
    };
    // Native XDP_TX on veth is delivered only if the peer runs XDP too (see `attach`).
    let peer = if mode == Mode::Native {
        Some(Attached::pass(&pair.client)?)
    } else {
        None
    };
    let peer_id = peer.as_ref().map(Attached::program_id);
    let _stats = StatsSetting::set(measure.stats_on())
        .context("setting kernel.bpf_stats_enabled for the run")?;
    let node_tx = || packets(&pair.node, "tx").map(Some);
    if who.is_reflector() {
        let reflector = Reflector::attach(&pair.node, mode)?;
        if measure.stats_on() {
            let mut run = timed_xdp(pair, reflector.program_id(), peer_id, dur, &none)?;
            run.responder_count = run.prog.map(|p| p.runs);
            Ok(run)
        } else {
            measure_run(pair, VIP, dur, &node_tx)
        }
    } else {
        let xdp = Attached::responder(&pair.node, mode, VIP, MacAddr(NODE_MAC))?;
        let count = || xdp.arp_answered().map(Some);
        if measure.stats_on() {
            timed_xdp(pair, xdp.program_id(), peer_id, dur, &count)
        } else {
            measure_run(pair, VIP, dur, &count)
        }
    }
}

/// [`measure_run`], bracketed by the programs' run-time statistics.
fn timed_xdp(
    pair: &Pair,
    id: u32,
    peer: Option<u32>,
    dur: Duration,
    count: &dyn Fn() -> Result<Option<u64>>,
) -> Result<Run> {
    let p0 = ProgStats::of(id)?;
    let q0 = peer.map(ProgStats::of).transpose()?;
    let mut run = measure_run(pair, VIP, dur, count)?;
    run.prog = Some(ProgStats::of(id)?.since(p0));
    if let (Some(id), Some(q0)) = (peer, q0) {
        run.peer_prog = Some(ProgStats::of(id)?.since(q0));
    }
    Ok(run)
}

fn run_kernel(pair: &Pair, dur: Duration) -> Result<Run> {
    let addr = format!("{VIP}/32");
    pair.node.ip(&["addr", "add", &addr, "dev", "eth0"]);
    let result = measure_run(pair, VIP, dur, &|| packets(&pair.node, "tx").map(Some));
    pair.node.ip(&["addr", "del", &addr, "dev", "eth0"]);
    result
}

/// Sets the flag when dropped, so the responder thread ends even if the run fails.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn run_userspace(pair: &Pair, dur: Duration) -> Result<Run> {
    let stop = AtomicBool::new(false);
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    std::thread::scope(|s| {
        let node = &pair.node;
        let stop_ref = &stop;
        let server = s.spawn(move || {
            node.enter(move || {
                let r = match Responder::bind("eth0", VIP, MacAddr(NODE_MAC)) {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("{e:#}")));
                        return Err(e);
                    }
                };
                let _ = ready_tx.send(Ok(()));
                r.serve(stop_ref)
            })
        });
        let guard = StopOnDrop(&stop);
        let run = match ready_rx.recv() {
            Ok(Ok(())) => measure_run(pair, VIP, dur, &none),
            Ok(Err(e)) => Err(anyhow!("starting the userspace responder: {e}")),
            Err(_) => Err(anyhow!("the userspace responder thread died")),
        };
        drop(guard);
        let served = server
            .join()
            .map_err(|_| anyhow!("the userspace responder panicked"))??;
        let mut run = run?;
        run.responder_count = Some(served.answered);
        run.thread_cpu_s = Some(served.thread_cpu_s);
        Ok(run)
    })
}

fn run_discard(pair: &Pair, dur: Duration) -> Result<Run> {
    pair.node.ip(&["link", "set", "eth0", "arp", "off"]);
    let result = measure_run(pair, NOBODY, dur, &none);
    pair.node.ip(&["link", "set", "eth0", "arp", "on"]);
    result
}

/// Busy cores outside this process above which a run counts as disturbed by other load. Clean
/// runs show up to about 0.15 (softirq work the kernel does outside our threads' context).
pub const MAX_OUTSIDE_CORES: f64 = 0.3;
/// Cores used by other userspace processes above which a run counts as disturbed.
pub const MAX_OTHERS_CORES: f64 = 0.03;
/// Runs per responder when other load disturbs them.
pub const ATTEMPTS: u32 = 3;

/// One responder's run, repeated (up to [`ATTEMPTS`]) while other processes' load disturbs it:
/// the machine-wide CPU figure would count that load as the responder's.
fn run_undisturbed(
    pair: &Pair,
    who: Who,
    measure: Measure,
    dur: Duration,
    progress: &dyn Fn(&str),
) -> Result<Run> {
    let label = match measure {
        Measure::MachineCpu => who.name().to_owned(),
        Measure::ProgStats => format!("{} (bpf_stats on)", who.name()),
    };
    let mut attempt = 1;
    loop {
        let background = cpu::wait_quiet(0.15, Duration::from_secs(60), progress)?;
        progress(&format!("flood: {label} for {} s", dur.as_secs_f64()));
        // Machine-CPU runs of every row with statistics off, whatever the setting was.
        let run = if who.is_xdp() {
            run_xdp(pair, who, measure, dur)
        } else {
            let _off = StatsSetting::disable().context("turning kernel.bpf_stats_enabled off")?;
            match who {
                Who::Baseline => run_discard(pair, dur),
                Who::KernelIgnores => measure_run(pair, NOBODY, dur, &none),
                Who::Kernel => run_kernel(pair, dur),
                _ => run_userspace(pair, dur),
            }
        }?;
        let run = Run {
            background_busy_cores: background,
            ..run
        };
        let (outside, others) = (run.outside_process_cores(), run.others_cores());
        let what =
            format!("{outside:.2} cores outside this process, {others:.2} in other processes");
        if !run.disturbed() || attempt == ATTEMPTS {
            if run.disturbed() {
                progress(&format!("warning: {label} still disturbed ({what})"));
            }
            return Ok(run);
        }
        progress(&format!(
            "flood: {label} disturbed by other load ({what}); again"
        ));
        attempt += 1;
    }
}

/// One round: the baseline, every responder, and the baseline again, all with statistics off;
/// each reflector right after the responder in the same mode, so drift hits the pair alike.
/// After the machine-CPU runs of each XDP mode, the statistics runs of the same pair, in the same
/// order.
pub const ORDER: [(Who, Measure); 13] = [
    (Who::Baseline, Measure::MachineCpu),
    (Who::KernelIgnores, Measure::MachineCpu),
    (Who::XdpGeneric, Measure::MachineCpu),
    (Who::ReflectGeneric, Measure::MachineCpu),
    (Who::XdpGeneric, Measure::ProgStats),
    (Who::ReflectGeneric, Measure::ProgStats),
    (Who::XdpNative, Measure::MachineCpu),
    (Who::ReflectNative, Measure::MachineCpu),
    (Who::XdpNative, Measure::ProgStats),
    (Who::ReflectNative, Measure::ProgStats),
    (Who::Kernel, Measure::MachineCpu),
    (Who::Userspace, Measure::MachineCpu),
    (Who::Baseline, Measure::MachineCpu),
];

/// Index of the median of `keys` (the lower one for an even count): always a measured trial.
pub fn median_index(keys: &[f64]) -> usize {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    idx.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    idx[(keys.len().max(1) - 1) / 2]
}

/// Runs `trials` rounds of [`ORDER`]; `progress` gets one line per run.
pub fn run(seconds: f64, trials: u32, progress: impl Fn(&str)) -> Result<FloodReport> {
    let dur = Duration::from_secs_f64(seconds);
    let bpf_stats_overhead_ns = match bpfstats::overhead_ns(5_000, 10) {
        Ok(Some(ns)) => {
            progress(&format!(
                "flood: kernel.bpf_stats_enabled adds {ns:.0} ns per program run (test_run, on - off)"
            ));
            Some(ns)
        }
        Ok(None) => {
            progress("flood: kernel.bpf_stats_enabled was already 1; its overhead is not measured");
            None
        }
        Err(e) => {
            progress(&format!(
                "flood: measuring the bpf_stats overhead failed: {e:#}"
            ));
            None
        }
    };
    let pair = Pair::new("bench");
    let mut runs: Vec<(Vec<Run>, Vec<String>)> =
        ORDER.iter().map(|_| (Vec::new(), Vec::new())).collect();
    for t in 1..=trials {
        let say = |line: &str| progress(&format!("[trial {t}/{trials}] {line}"));
        for (slot, &(who, measure)) in ORDER.iter().enumerate() {
            let (ok, failed) = &mut runs[slot];
            // A responder that failed without ever running would fail again: skip it.
            if ok.is_empty() && !failed.is_empty() {
                continue;
            }
            match run_undisturbed(&pair, who, measure, dur, &say) {
                Ok(r) => {
                    if who.is_xdp() && r.answers < r.sent / 100 * 99 {
                        say(&format!(
                            "warning: {} returned only {} of {} requests",
                            who.name(),
                            r.answers,
                            r.sent
                        ));
                    }
                    ok.push(r);
                }
                Err(e) => {
                    say(&format!("flood: {} failed: {e:#}", who.name()));
                    failed.push(format!("{e:#}"));
                }
            }
        }
    }
    let trials_of = |ok: Vec<Run>| -> Vec<Trial> {
        ok.into_iter()
            .map(|run| Trial {
                run,
                net_cpu_s: None,
            })
            .collect()
    };
    let mut rows = Vec::new();
    let mut stats = Vec::new();
    for (&(who, measure), (ok, failed)) in ORDER.iter().zip(runs) {
        match measure {
            Measure::MachineCpu => rows.push(Row {
                who,
                run: Err(failed
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "no trials".to_owned())),
                net_cpu_s: None,
                trials: trials_of(ok),
                chosen: 0,
                failed_trials: failed,
                stats_trials: Vec::new(),
                stats_chosen: None,
                stats_failed: Vec::new(),
            }),
            Measure::ProgStats => stats.push((who, trials_of(ok), failed)),
        }
    }
    for (who, trials, failed) in stats {
        let row = rows
            .iter_mut()
            .find(|r| r.who == who)
            .expect("every statistics step has a machine-CPU step of the same row");
        row.stats_trials = trials;
        row.stats_failed = failed;
    }
    // The baselines first: each one's median trial gives its busy CPU per request.
    let mut base = Vec::new();
    for row in rows.iter_mut().filter(|r| r.who == Who::Baseline) {
        if row.trials.is_empty() {
            return Err(anyhow!(
                "baseline run failed: {}",
                row.run.as_ref().err().map_or("", |e| e.as_str())
            ));
        }
        choose(row);
        let b = row.run.as_ref().expect("chosen");
        base.push(b.cpu.machine_s / b.sent.max(1) as f64);
    }
    let base_cpu_per_request_s = base.iter().sum::<f64>() / base.len() as f64;
    for row in rows
        .iter_mut()
        .filter(|r| r.who != Who::Baseline && !r.trials.is_empty())
    {
        for t in &mut row.trials {
            t.net_cpu_s = Some(t.run.cpu.machine_s - t.run.sent as f64 * base_cpu_per_request_s);
        }
        choose(row);
    }
    for row in rows.iter_mut().filter(|r| !r.stats_trials.is_empty()) {
        // For comparison only: what the same accounting gives with statistics on.
        for t in &mut row.stats_trials {
            t.net_cpu_s = Some(t.run.cpu.machine_s - t.run.sent as f64 * base_cpu_per_request_s);
        }
        let keys: Vec<f64> = row
            .stats_trials
            .iter()
            .map(|t| {
                t.run
                    .prog
                    .and_then(|p| p.ns_per_run())
                    .unwrap_or(f64::INFINITY)
            })
            .collect();
        row.stats_chosen = Some(median_index(&keys));
    }
    Ok(FloodReport {
        rows,
        base_cpu_per_request_s,
        base_runs: [base[0], base[1]],
        trials,
        bpf_stats_overhead_ns,
    })
}

/// Makes the row report its median trial.
fn choose(row: &mut Row) {
    let keys: Vec<f64> = row.trials.iter().map(|t| t.key_ns(row.who)).collect();
    row.chosen = median_index(&keys);
    let t = &row.trials[row.chosen];
    row.run = Ok(t.run.clone());
    row.net_cpu_s = t.net_cpu_s;
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn median_is_a_measured_trial() {
        assert_eq!(median_index(&[3.0, 1.0, 2.0]), 2);
        assert_eq!(median_index(&[5.0]), 0);
        assert_eq!(median_index(&[4.0, 1.0, 3.0, 2.0]), 3);
    }

    #[test]
    fn flood_frames_come_from_the_discarded_mac() {
        // The reflector swaps the Ethernet addresses: its frames go to the flood's source MAC,
        // which must not be the client's own (the client discards them on arrival like answers).
        let mut b = [0u8; frame::MAX_FRAME];
        let n = request(7, VIP, &mut b);
        assert!(n >= 42);
        assert_eq!(b[6..12], FLOOD_MAC.0);
        assert_eq!(b[22..28], FLOOD_MAC.0);
        assert_ne!(FLOOD_MAC.0, crate::netns::CLIENT_MAC);
    }
}

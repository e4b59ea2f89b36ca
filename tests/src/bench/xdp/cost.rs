//! Cost per frame of the responder, measured with `BPF_PROG_TEST_RUN` against a floor.
//!
//! Why one `test_run` per frame (repeat = 1): with `repeat > 1` the kernel reruns the program on
//! the frame the previous run left, so after the first answer (which rewrites the request into a
//! reply) every further run times the *pass* path. Here each timed run gets a fresh request, the
//! action it returned is checked, and a cost figure counts only if every timed run of an answer
//! kind really answered (`XDP_TX`) with a well-formed reply.
//!
//! The kernel's figure for one run includes the fixed overhead of its timer (two clock reads and
//! the run loop), the same for every kind. That is why every kind is compared with the `reflect`
//! floor (swap MACs, `XDP_TX`) measured the same way, in the same loop, interleaved round-robin
//! so that frequency changes and other drift hit all kinds alike.

use std::net::{Ipv4Addr, Ipv6Addr};

use announcer::dataplane::{Dataplane, Lifetime, Vip, loader::OBJECT};
use announcer_ebpf::{
    maps::{Outcome, PROGRAM, REFLECTOR},
    wire::{MacAddr, frame},
};
use anyhow::{Context, Result, bail, ensure};
use aya::{
    Ebpf, EbpfLoader,
    programs::{TestRun, TestRunOptions, Xdp},
};

use crate::bench::stats::{Summary, summarize};
use crate::frames::VIP_MAC;
use crate::testrun::{IFINDEX, XDP_PASS, XDP_TX};

/// VIPs of each family in the map while timing.
pub const VIPS: u32 = 1_000;
/// Untimed rounds before timing starts (warms caches and the map's buckets).
pub const WARMUP: u32 = 2_000;

/// What is timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An ARP request for a VIP, answered.
    Arp,
    /// A Neighbor Solicitation for a VIP, answered with an NA.
    Na,
    /// An ARP request for an address that is not a VIP, passed.
    Pass,
    /// The `reflect` program on the same ARP requests: the floor.
    Floor,
}

impl Kind {
    /// In loop (and report) order.
    pub const ALL: [Kind; 4] = [Kind::Arp, Kind::Na, Kind::Pass, Kind::Floor];

    /// Row name.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Arp => "arp_answer",
            Kind::Na => "na_answer",
            Kind::Pass => "pass_non_vip",
            Kind::Floor => "reflect_floor",
        }
    }

    /// The action every run of this kind must return.
    fn expected(self) -> u32 {
        if self == Kind::Pass { XDP_PASS } else { XDP_TX }
    }
}

/// One kind's result.
#[derive(Clone, Debug)]
pub struct KindResult {
    /// What was timed.
    pub kind: Kind,
    /// Timed runs.
    pub runs: u64,
    /// Timed runs that returned `XDP_TX`.
    pub answered: u64,
    /// Timed runs that returned the expected action (and, for answers, a correct reply).
    pub as_expected: u64,
    /// ns per run, sorted ascending (for the plot).
    pub samples: Vec<u64>,
    /// Order statistics of `samples`.
    pub summary: Summary,
}

/// The whole part-1 result.
#[derive(Clone, Debug)]
pub struct CostReport {
    /// In [`Kind::ALL`] order.
    pub kinds: Vec<KindResult>,
    /// Outcome counters of the program over the timed runs: (name, delta).
    pub counters: Vec<(&'static str, u64)>,
}

impl CostReport {
    /// The result of `kind`.
    pub fn get(&self, kind: Kind) -> &KindResult {
        self.kinds
            .iter()
            .find(|k| k.kind == kind)
            .expect("every kind is measured")
    }

    /// Median of `kind` over the floor's median.
    pub fn ratio_to_floor(&self, kind: Kind) -> f64 {
        self.get(kind).summary.median as f64 / self.get(Kind::Floor).summary.median.max(1) as f64
    }
}

/// The object with both programs loaded (not attached) and the VIP table.
struct Rig {
    ebpf: Ebpf,
    dp: Dataplane,
}

impl Rig {
    fn load() -> Result<Self> {
        let mut ebpf = EbpfLoader::new()
            .load(OBJECT)
            .context("loading the XDP object")?;
        for name in [PROGRAM, REFLECTOR] {
            let prog: &mut Xdp = ebpf
                .program_mut(name)
                .with_context(|| format!("no program {name} in the object"))?
                .try_into()
                .with_context(|| format!("{name} is not XDP"))?;
            prog.load().with_context(|| format!("verifying {name}"))?;
        }
        let dp = Dataplane::from_ebpf(&mut ebpf, "test_run", IFINDEX)?;
        Ok(Self { ebpf, dp })
    }

    fn prog(&self, name: &str) -> &Xdp {
        self.ebpf
            .program(name)
            .expect("loaded")
            .try_into()
            .expect("XDP")
    }
}

fn vip4(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(10, 200, (i >> 8) as u8, i as u8)
}

fn vip6(i: u32) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0xbe, 0, 0, 0, 0, (i >> 16) as u16, i as u16)
}

/// A unicast sender MAC that differs per frame.
fn sender_mac(i: u32) -> MacAddr {
    let b = i.to_be_bytes();
    MacAddr([0x02, 0xc1, b[1], b[2], b[3], 0x02])
}

fn arp_request(i: u32, target: Ipv4Addr, buf: &mut [u8]) -> usize {
    let b = i.to_be_bytes();
    let sender = Ipv4Addr::new(10, 1 + b[1] % 8, b[2], b[3]);
    crate::frames::write_arp_request(buf, sender_mac(i), sender, target, None)
}

fn ns_request(i: u32, target: Ipv6Addr, buf: &mut [u8]) -> usize {
    let mac = sender_mac(i);
    let src = Ipv6Addr::new(0xfd00, 0xc1, 0, 0, 0, 0, (i >> 16) as u16, i as u16 | 1);
    crate::frames::write_ns_multicast(buf, mac, src, target, Some(mac))
}

/// Builds the `i`-th request of `kind` into `buf`; returns its length and, for answers, the
/// address the reply must claim.
fn request(kind: Kind, i: u32, buf: &mut [u8]) -> usize {
    match kind {
        Kind::Arp | Kind::Floor => arp_request(i, vip4(i % VIPS), buf),
        Kind::Na => ns_request(i, vip6(i % VIPS), buf),
        // Same shape as an answered request, for an address the map does not hold.
        Kind::Pass => arp_request(i, Ipv4Addr::new(10, 201, (i >> 8) as u8, i as u8), buf),
    }
}

/// Whether `out` is the reply the program must have made of request `i` of `kind`.
fn reply_ok(kind: Kind, i: u32, out: &[u8]) -> bool {
    match kind {
        Kind::Arp => {
            out.len() >= 42
                && out[12..14] == [0x08, 0x06]
                && out[20..22] == [0, 2]
                && out[0..6] == sender_mac(i).0
                && out[22..28] == VIP_MAC.0
                && out[28..32] == vip4(i % VIPS).octets()
        }
        // Ethernet to the SLLAO, IPv6 from the target, ICMPv6 type 136 for that target.
        Kind::Na => {
            out.len() >= 14 + 40 + 24
                && out[12..14] == [0x86, 0xdd]
                && out[0..6] == sender_mac(i).0
                && out[54] == 136
                && out[22..38] == vip6(i % VIPS).octets()
        }
        Kind::Floor => out.len() >= 12 && out[0..6] == sender_mac(i).0,
        Kind::Pass => true,
    }
}

/// Times `frames` fresh requests of each kind (round-robin) and checks every action.
pub fn run(frames: u32, progress: impl Fn(&str)) -> Result<CostReport> {
    let mut rig = Rig::load()?;
    for i in 0..VIPS {
        rig.dp.upsert(
            Vip::new(vip4(i).into(), None)?,
            VIP_MAC,
            Lifetime::Permanent,
        )?;
        rig.dp.upsert(
            Vip::new(vip6(i).into(), None)?,
            VIP_MAC,
            Lifetime::Permanent,
        )?;
    }
    progress(&format!(
        "cost: {VIPS} IPv4 + {VIPS} IPv6 VIPs in the map; {WARMUP} warm-up rounds"
    ));
    let announcer = rig.prog(PROGRAM);
    let reflect = rig.prog(REFLECTOR);
    let mut buf = [0u8; frame::MAX_FRAME];
    let mut out = [0u8; 512];
    let mut results: Vec<KindResult> = Kind::ALL
        .iter()
        .map(|&kind| KindResult {
            kind,
            runs: 0,
            answered: 0,
            as_expected: 0,
            samples: Vec::with_capacity(frames as usize),
            summary: Summary::default(),
        })
        .collect();
    let mut before = None;
    for round in 0..WARMUP + frames {
        if round == WARMUP {
            before = Some(rig.dp.counters()?);
            progress(&format!(
                "cost: timing {frames} fresh requests per kind, interleaved"
            ));
        }
        // Rotate which kind goes first so no kind always follows the same one.
        for k in 0..Kind::ALL.len() {
            let slot = (k + round as usize) % Kind::ALL.len();
            let kind = Kind::ALL[slot];
            // Distinct frame numbers per kind and round: every request is new to the program.
            let i = round * 4 + slot as u32;
            let len = request(kind, i, &mut buf);
            let prog = if kind == Kind::Floor {
                reflect
            } else {
                announcer
            };
            let r = prog
                .test_run(TestRunOptions {
                    data_in: Some(&buf[..len]),
                    data_out: Some(&mut out),
                    ..Default::default()
                })
                .context("BPF_PROG_TEST_RUN")?;
            if round < WARMUP {
                continue;
            }
            let res = &mut results[slot];
            res.runs += 1;
            res.samples.push(r.duration.as_nanos() as u64);
            if r.return_value == XDP_TX {
                res.answered += 1;
            }
            let out_len = (r.data_size_out as usize).min(out.len());
            if r.return_value == kind.expected() && reply_ok(kind, i, &out[..out_len]) {
                res.as_expected += 1;
            }
        }
    }
    let after = rig.dp.counters()?;
    let before = before.context("no timed rounds (--frames 0?)")?;
    let counters: Vec<(&'static str, u64)> = after
        .iter()
        .zip(before.iter())
        .map(|((o, a), (_, b))| (o.name(), a - b))
        .collect();
    for r in &mut results {
        r.summary = summarize(&mut r.samples);
    }
    let report = CostReport {
        kinds: results,
        counters,
    };
    check(&report, frames)?;
    Ok(report)
}

/// Fails unless every timed run did what its kind must do; the program's own counters must
/// agree with the actions seen.
fn check(report: &CostReport, frames: u32) -> Result<()> {
    for r in &report.kinds {
        ensure!(
            r.runs == u64::from(frames) && r.as_expected == r.runs,
            "{}: only {} of {} timed runs returned the expected action and frame ({} XDP_TX); \
             the cost figures would not be of the path they claim to be",
            r.kind.name(),
            r.as_expected,
            r.runs,
            r.answered
        );
    }
    let count = |o: Outcome| {
        report
            .counters
            .iter()
            .find(|(n, _)| *n == o.name())
            .map_or(0, |c| c.1)
    };
    let (arp, ns) = (count(Outcome::ArpAnswered), count(Outcome::NsAnswered));
    if arp != u64::from(frames) || ns != u64::from(frames) {
        bail!(
            "program counters disagree: arp_answered {arp}, ns_answered {ns}, expected {frames} each"
        );
    }
    Ok(())
}

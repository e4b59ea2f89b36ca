//! `cargo xtask bench failover`: how long a VIP is unanswered when its node fails, for this
//! agent and the systems it replaces, side by side on the same multi-node testbed
//! ([`crate::env::lan`]), every one on the real control plane (kube-apiserver and its
//! controllers, [`ApiKind::Kube`]): keepalived with default and tuned VRRP timings, MetalLB
//! and kube-vip themselves (the upstream binaries, kube-vip at two timings), and this agent
//! with its defaults and its fastest settings ([`systems`]). A scenario a system cannot run
//! here is reported as unsupported, with why ([`Scenario::supported_by`]).
//!
//! Why a client-side measurement: what matters is what a client on the same L2 segment sees,
//! not when a system's log says it took over (ARP caches, GARP timing and a dead node's data
//! plane that keeps answering all sit between the two).
//!
//! # Definitions
//! * The failure is injected at T (one mark on the prober's timeline), at a random point of
//!   the system's heartbeat cycle: each trial waits a random fraction of a second
//!   ([`trial::PHASE_SPREAD`]) before it, so the figures are those of a crash at any moment,
//!   not of the one phase a fixed schedule would hit.
//! * *Failover time*: the send time of the first probe after T answered by a node other than
//!   the one answering before T, minus T. If no other node answered but probes were lost (the
//!   same node came back), the send time of the first answer after the last lost probe, minus
//!   T; zero if the client noticed nothing. With several VIPs, the slowest VIP counts: the
//!   time until the *last* of them answered again. Where the old node keeps serving (SIGKILL
//!   without restart: a dead agent's XDP entries answer for the grace period), the client may
//!   lose nothing while the failover time says when the successor took over.
//! * *Lost probes*: UDP probes (every 10 ms per VIP, see [`trial::PROBE_INTERVAL`]) sent after
//!   T that were never answered (within 1 s).
//! * Partition: *overlap* is how long two nodes both announced the VIP (agents' `/state`,
//!   keepalived's addresses on `eth0`, polled every ~50 ms); *time to a single owner* runs
//!   from the heal to the first poll with exactly one owner.
//! * *Owner check* ([`measure::OwnerCheck`]): every scenario but partition expects an owner
//!   change, or none ([`scenarios::Scenario::expected_owner`]): after a crash, link down,
//!   SIGKILL or SIGTERM every probed VIP must be taken over (another node announced it and
//!   answered it, to the end of the trial); after a restart within the grace the restarted
//!   agent must keep it (nobody else answered). A trial without it fails the targets however
//!   little the client lost: an agent that ignores SIGTERM loses nothing and moves nothing.
//! * Percentiles are nearest-rank ([`crate::bench::stats`]) over the trials that recovered;
//!   trials in which a VIP never answered again are counted apart.
//! * Targets are judged against what was selected: a selected row with a target and no
//!   trials fails, and so does every system given up ([`report::verdicts`]); the binary exits
//!   non-zero on any FAIL.
//!
//! One testbed per system is reused across trials; between trials every fault is undone,
//! stopped agents are restarted and the bench waits until every VIP has one owner that
//! answers the client ([`scenarios::Bed::restore`]).
//!
//! * *Freeze*: the owner's agent is SIGSTOPped for 0.5 s, then resumes; for the agents the VIP
//!   must stay (its data plane kept answering), keepalived is not judged.
//! * *Rejoin*: the owner crashes, the VIP moves and settles, then the node comes back (link
//!   up, agent restarted); its failover time and lost probes are those of the rejoin window
//!   (from the link coming up), with whether the VIP moved back to the returning node and the
//!   longest gap the client saw ([`measure::RejoinOutcome`]). Reported, not judged.
//!
//! Besides the scenarios: `crash-100` (the node owning most VIPs of a larger set crashes;
//! the time until the last of its VIPs answers), the idle cost of the agent with 1,000
//! VIPs ([`idle`]), and, only when `--scenarios` names it, `stress` ([`stress`]): one long run
//! per system with every CPU busy and the API slow, counting ownership changes.
//!
//! Also opt-in: `crash-e2e-local` and `crash-e2e-cluster` ([`e2e`]): the owner's node crashes
//! under a Service with `externalTrafficPolicy: Local` (`Cluster`), measured end to end by HTTP
//! through the real kube-proxy to real Pods; selecting them puts every testbed of the run on
//! the real control plane. At most [`e2e::E2E_TRIALS`] trials a cell (about a minute each).

pub mod e2e;
pub mod idle;
pub mod measure;
pub mod merge;
pub mod plot;
pub mod report;
pub mod safety;
pub mod scenarios;
pub mod stress;
pub mod systems;
pub mod trial;

use std::{
    net::{IpAddr, Ipv4Addr},
    time::{Duration, Instant},
};

use report::Row;
use scenarios::{Bed, Scenario};
use systems::System;
use tokio::runtime::Handle;

use crate::env::{
    ApiKind,
    lan::{Testbed, TestbedConfig},
};

/// How long a restore may take before the system is given up for this run.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(90);
/// First VIP index of the crash-100 set and of the idle set.
const MASS_BASE: u32 = 10_000;
const IDLE_BASE: u32 = 20_000;
/// VIPs per Service in the crash-100 and idle sets.
const VIPS_PER_SERVICE: usize = 10;

/// What to run.
#[derive(Clone, Debug)]
pub struct Settings {
    pub trials: usize,
    pub nodes: usize,
    /// VIPs of the main set (one Service each).
    pub vips: usize,
    pub systems: Vec<System>,
    pub scenarios: Vec<Scenario>,
    /// Trials of crash-100.
    pub mass_trials: usize,
    /// VIPs of the idle measurement (0: skip it).
    pub idle_vips: usize,
    pub idle_window: Duration,
    /// The flags of `announcer-fast` (default [`systems::FAST_ARGS`]).
    pub fast_args: Vec<String>,
    /// How long the stress scenario stresses each system, and how long each e2e safety run
    /// ([`safety`]) lasts.
    pub stress_duration: Duration,
}

/// Everything measured.
pub struct Results {
    pub rows: Vec<Row>,
    pub idle: Option<idle::IdleReport>,
    /// Systems given up (restore failed), with why.
    pub aborted: Vec<(System, String)>,
    /// The stress runs, one per system.
    pub stress: Vec<stress::StressRun>,
    /// The e2e safety runs ([`safety`]), one per withdrawing system and scenario.
    pub safety: Vec<safety::SafetyRun>,
}

/// `10.78.128.0 + k`, the testbed's VIP numbering.
pub fn vip(k: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 78, 128, 0)) + k))
}

fn agent_args(system: System, s: &Settings) -> Vec<String> {
    if system == System::AnnouncerFast {
        s.fast_args.clone()
    } else {
        system.agent_args().into_iter().map(String::from).collect()
    }
}

fn settings_text(system: System, args: &[String]) -> String {
    if !system.is_agent() || system.withdraws() {
        system.settings()
    } else if args.is_empty() {
        "announcer (defaults)".into()
    } else {
        format!("announcer {}", args.join(" "))
    }
}

/// The `k`-th VIP of `system`: [`vip`] for the agents and keepalived, the `k`-th of its own
/// range for a real peer (its IPAddressPool, its class).
pub(crate) fn system_vip(system: System, k: u32) -> IpAddr {
    match system.peer() {
        Some(kind) => IpAddr::V4(kind.vip4(k)),
        None => vip(k),
    }
}

/// The 1-minute load average (`/proc/loadavg`), if readable.
fn load1() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Creates `count` VIPs from `base` as Services of `per` VIPs named `prefix-N`.
fn add_services(
    rt: &Handle,
    tb: &Testbed,
    prefix: &str,
    base: u32,
    count: usize,
    per: usize,
) -> Vec<IpAddr> {
    let nodes = tb.nodes();
    let on: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let all: Vec<IpAddr> = (0..count as u32).map(|k| vip(base + k)).collect();
    for (i, chunk) in all.chunks(per.max(1)).enumerate() {
        rt.block_on(tb.add_service(&format!("{prefix}-{i}"), chunk, false, &on));
    }
    all
}

/// Runs every selected system through every selected scenario. Blocking: call it from a
/// blocking context (e.g. `tokio::task::block_in_place`) of a multi-threaded runtime.
pub fn run(s: &Settings, rt: &Handle, progress: &dyn Fn(&str)) -> Results {
    let mut out = Results {
        rows: vec![],
        idle: None,
        aborted: vec![],
        stress: vec![],
        safety: vec![],
    };
    let started = Instant::now();
    for (si, &system) in s.systems.iter().enumerate() {
        let args = agent_args(system, s);
        let settings = settings_text(system, &args);
        progress(&format!(
            "system {}/{}: {} ({settings}); starting the testbed",
            si + 1,
            s.systems.len(),
            system.name()
        ));
        let tb = rt.block_on(Testbed::start(TestbedConfig {
            nodes: s.nodes,
            tag: format!("fo{si}"),
            // Every row on the real kube-apiserver and its controllers (the e2e scenarios need
            // them for kube-proxy, the peers for their own controllers).
            api: ApiKind::Kube,
            ..TestbedConfig::default()
        }));
        // A peer's Services are its own (class, range): Bed::new creates them.
        let main: Vec<IpAddr> = if system.peer().is_some() {
            (0..s.vips as u32).map(|k| system_vip(system, k)).collect()
        } else {
            add_services(rt, &tb, "bench", 0, s.vips, 1)
        };
        progress(&format!("{}: starting it on every node", system.name()));
        let mut bed = Bed::new(tb, system, &args, &main, &format!("{si}"));
        let ctx = Ctx {
            s,
            rt,
            main: &main,
            settings: &settings,
            progress,
            started,
        };
        if let Err(why) = run_system(&mut bed, &ctx, &mut out) {
            progress(&format!("{}: GIVEN UP: {why}", system.name()));
            out.aborted.push((system, why));
        }
    }
    out
}

/// [`Bed::restore`]; if that does not converge, every agent (keepalived) is restarted and it
/// is tried once more (a stuck system should not end the whole run; the progress says so).
fn restore_or_restart(
    bed: &mut Bed,
    vips: &[IpAddr],
    progress: &dyn Fn(&str),
) -> Result<std::collections::BTreeMap<IpAddr, String>, String> {
    match restore(bed, vips) {
        Ok(o) => Ok(o),
        Err(why) => {
            progress(&format!(
                "{}: RESTORE STUCK, restarting every agent: {}",
                bed.system.name(),
                why.lines().next().unwrap_or("")
            ));
            bed.restart_all();
            restore(bed, vips)
        }
    }
}

fn restore(
    bed: &mut Bed,
    vips: &[IpAddr],
) -> Result<std::collections::BTreeMap<IpAddr, String>, String> {
    bed.restore(vips, RESTORE_TIMEOUT).ok_or_else(|| {
        let owners = bed.owners(vips);
        let bad: Vec<String> = owners
            .iter()
            .filter(|(_, o)| o.len() != 1)
            .take(5)
            .map(|(v, o)| format!("{v}: {o:?}"))
            .collect();
        format!(
            "no single owner per VIP within {RESTORE_TIMEOUT:?} ({})\nlogs:\n{}",
            bad.join(", "),
            bed.log_tails()
        )
    })
}

/// What every part of one system's run needs.
struct Ctx<'a> {
    s: &'a Settings,
    rt: &'a Handle,
    /// The main VIP set.
    main: &'a [IpAddr],
    /// The system's settings in words.
    settings: &'a str,
    progress: &'a dyn Fn(&str),
    started: Instant,
}

fn run_system(bed: &mut Bed, c: &Ctx, out: &mut Results) -> Result<(), String> {
    let Ctx {
        s,
        rt,
        main,
        settings,
        progress,
        started,
    } = *c;
    let name = bed.system.name();
    // The e2e scenarios' data path, set up by their first trial on this bed.
    let mut e2e_bed = None;
    for &scenario in &s.scenarios {
        if let Err(why) = scenario.supported_by(bed.system) {
            progress(&format!("[{}] {name}: UNSUPPORTED: {why}", scenario.name()));
            continue;
        }
        if safety::is_safety(scenario) {
            let run = safety::run(bed, &mut e2e_bed, scenario, s.stress_duration, progress)?;
            progress(&format!(
                "[{}] {name}: {} healthy Pods withdrawn in {:.0} s ({} faults, {} Pod checks)",
                scenario.name(),
                run.healthy_withdrawn.len(),
                run.duration_s,
                run.faults,
                run.polls
            ));
            out.safety.push(run);
            continue;
        }
        if !scenario.has_trials() {
            let run = stress::run(bed, s, rt, main, settings, progress)?;
            progress(&format!(
                "[stress] {name}: {} ownership changes ({} VIPs), {} overlap samples, {} Overlap Events in {:.0} s, load {:.1}",
                run.ownership_changes,
                run.vips_changed,
                run.overlap_samples,
                run.overlap_events.map_or("-".into(), |e| e.to_string()),
                run.duration_s,
                run.load1_mean
            ));
            out.stress.push(run);
            continue;
        }
        let (vips, trials) = if scenario == Scenario::Crash100 {
            progress(&format!("{name}: adding the crash-100 VIPs"));
            let mass = if bed.system.is_keepalived() {
                let m: Vec<IpAddr> = (0..trial::MASS_PROBED as u32)
                    .map(|k| vip(MASS_BASE + k))
                    .collect();
                let all: Vec<IpAddr> = main.iter().chain(&m).copied().collect();
                bed.set_keepalived_vips(&all);
                m
            } else {
                let count = trial::MASS_PROBED * s.nodes;
                add_services(rt, &bed.tb, "mass", MASS_BASE, count, VIPS_PER_SERVICE)
            };
            (mass, s.mass_trials)
        } else if e2e::is_e2e(scenario) {
            (main.to_vec(), e2e::trials(s.trials))
        } else {
            (main.to_vec(), s.trials)
        };
        let mut row = Row {
            system: bed.system,
            settings: settings.to_owned(),
            scenario,
            trials: vec![],
        };
        let mut failed = None;
        for i in 0..trials {
            let restore_started = Instant::now();
            let owners = match restore_or_restart(bed, &vips, progress) {
                Ok(o) => o,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            let restored_s = restore_started.elapsed().as_secs_f64();
            let t = if e2e::is_e2e(scenario) {
                match e2e::run(bed, &mut e2e_bed, scenario) {
                    Ok(t) => t,
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            } else {
                trial::run(bed, scenario, &vips, &owners)
            };
            let load = load1().map_or("-".into(), |l| format!("{l:.1}"));
            let line = format!(
                "[{} {}/{}] {name}: victim {}, {} VIPs, failover {}, lost {}, now {}, owner {} (restore {restored_s:.1} s, load {load}, {:.0} s elapsed)",
                scenario.name(),
                i + 1,
                trials,
                t.victim,
                t.vips,
                t.failover.map_or("NONE".into(), |d| format!(
                    "{:.0} ms",
                    d.as_secs_f64() * 1e3
                )),
                t.lost,
                t.after.as_deref().unwrap_or("nobody"),
                t.owner.name(),
                started.elapsed().as_secs_f64()
            );
            let split = t
                .split
                .map(|sp| {
                    format!(
                        ", overlap {:.0} ms, single owner after heal {}",
                        sp.overlap.as_secs_f64() * 1e3,
                        sp.single_owner_after_heal
                            .map_or("never".into(), |d| format!(
                                "{:.0} ms",
                                d.as_secs_f64() * 1e3
                            ))
                    )
                })
                .unwrap_or_default();
            let rejoin = t
                .rejoin
                .as_ref()
                .map(|r| {
                    format!(
                        ", moved back {}, max gap {:.0} ms{}",
                        r.moved_back,
                        r.max_gap.as_secs_f64() * 1e3,
                        if r.taken_over {
                            ""
                        } else {
                            " (the crash was NOT taken over)"
                        }
                    )
                })
                .unwrap_or_default();
            let http = t
                .e2e
                .as_ref()
                .map(|e| {
                    let h = &e.http;
                    let f = |d: Option<Duration>| {
                        d.map_or("never".into(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3))
                    };
                    format!(
                        ", HTTP first ok {}, 99% ok {}, all ok {}, failed {:.1} % of {}, endpoint not ready after {} ({} failed after that), errors {:?}, late failures {:?}",
                        f(h.first_ok),
                        f(h.ok_99pct),
                        f(h.all_ok),
                        h.failed_share_pct,
                        h.sent,
                        f(e.endpoints_not_ready),
                        e.failed_after_endpoint_removal
                            .map_or("-".into(), |n| n.to_string()),
                        e.errors,
                        e.late_failures
                            .iter()
                            .map(|(at, why)| format!("{:.2} s {why:?}", at.as_secs_f64()))
                            .collect::<Vec<_>>()
                    )
                })
                .unwrap_or_default();
            progress(&(line + &split + &rejoin + &http));
            row.trials.push(t);
        }
        out.rows.push(row);
        if let Some(e) = failed {
            return Err(e);
        }
    }
    if bed.system == System::AnnouncerDefault && s.idle_vips > 0 {
        out.idle = Some(run_idle(bed, s, rt, main, progress)?);
    }
    Ok(())
}

fn run_idle(
    bed: &mut Bed,
    s: &Settings,
    rt: &Handle,
    main: &[IpAddr],
    progress: &dyn Fn(&str),
) -> Result<idle::IdleReport, String> {
    if s.scenarios.contains(&Scenario::Crash100) {
        let services = (trial::MASS_PROBED * s.nodes).div_ceil(VIPS_PER_SERVICE);
        for i in 0..services {
            rt.block_on(bed.tb.delete_service(&format!("mass-{i}")));
        }
    }
    progress(&format!(
        "idle: {} VIPs in {} Services",
        s.idle_vips,
        s.idle_vips.div_ceil(VIPS_PER_SERVICE)
    ));
    let idle_vips = add_services(
        rt,
        &bed.tb,
        "idle",
        IDLE_BASE,
        s.idle_vips,
        VIPS_PER_SERVICE,
    );
    let all: Vec<IpAddr> = main.iter().chain(&idle_vips).copied().collect();
    restore(bed, &all)?;
    std::thread::sleep(Duration::from_secs(3));
    let procs: Vec<(String, u32)> = bed
        .tb
        .nodes()
        .into_iter()
        .filter_map(|n| bed.tb.agent_pid(&n).map(|p| (n, p)))
        .collect();
    progress(&format!(
        "idle: measuring {} agents for {:?}",
        procs.len(),
        s.idle_window
    ));
    Ok(idle::IdleReport {
        system: bed.system.name().into(),
        vips: all.len(),
        services: main.len() + s.idle_vips.div_ceil(VIPS_PER_SERVICE),
        window_s: s.idle_window.as_secs_f64(),
        agents: idle::measure(&procs, s.idle_window),
    })
}

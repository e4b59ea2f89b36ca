//! The stress scenario: no false takeover under load. One long run per system, not trials:
//! [`STRESS_VIPS`] VIPs (one Service each), every core busy with `stress-ng --cpu 0` and, for
//! the agents, every API request of theirs delayed by [`STRESS_API_LATENCY`] on the in-repo
//! API server. Nothing fails, so nothing should move: the owners of every VIP are polled every
//! [`POLL_INTERVAL`] (the agents' `/state`; keepalived's addresses on `eth0`) and counted:
//!
//! * *ownership changes*: per VIP and poll, an owner set that differs from the previous
//!   complete poll's (a VIP that goes from one owner to none and back counts twice);
//! * *overlap samples*: per VIP and poll, two or more owners;
//! * for the agents, *Overlap Events* (Kubernetes Events with reason `Overlap` in the Services'
//!   namespace) and the agents' `announcer_partition_overlaps_total`, both as the increase over
//!   the run;
//! * for the agents, their own counters from `/state` over the run: *takeovers* (a VIP taken
//!   and given back between two polls still counts here) and the *probes* of an owner's data
//!   plane that late heartbeats set off, with how many were answered: how often a busy node
//!   looked quiet, and was found alive.
//!
//! A poll in which some agent did not answer `/state` is counted as incomplete and not compared
//! (a missing answer is not a lost VIP). The CPU load seen is reported with the figures: the
//! 1-minute load average (`/proc/loadavg`, sampled every poll) and the busy share of all CPUs
//! over the run (`/proc/stat`).
//!
//! Target ([`verdicts`]): no ownership change, no overlap sample and no Overlap Event for the
//! agent at its defaults and at its fastest settings. keepalived is shown next to them (tuned,
//! its 0.3 s master-down interval is expected to flap on a saturated machine): counted, not
//! judged.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    os::unix::process::CommandExt,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};
use tokio::runtime::Handle;

use super::{
    Settings, add_services, restore_or_restart,
    scenarios::{Bed, STRESS_API_LATENCY, STRESS_VIPS, Scenario},
    systems::{System, keepalived_owners},
    vip,
};
use crate::{bench::verdict::Verdict, env::process::Guarded};

/// How often the owners are polled.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// First VIP index of the stress set (after the main, crash-100 and idle sets).
const STRESS_BASE: u32 = 24_000;
/// The agents' overlap counter.
pub const OVERLAP_METRIC: &str = "announcer_partition_overlaps_total";
/// How often the run reports its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// What one system's stress run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StressRun {
    /// [`System::name`].
    pub system: String,
    /// The system's settings in words.
    pub settings: String,
    /// How long the machine was stressed.
    pub duration_s: f64,
    /// VIPs watched.
    pub vips: usize,
    /// Owner polls (the one before the stress included).
    pub polls: u64,
    /// Polls not compared because some agent did not answer `/state`.
    pub incomplete_polls: u64,
    /// VIP × poll where the owner set differed from the previous complete poll's.
    pub ownership_changes: u64,
    /// VIPs that changed owner at least once.
    pub vips_changed: usize,
    /// VIP × poll with two or more owners.
    pub overlap_samples: u64,
    /// VIP × poll with no owner.
    pub unowned_samples: u64,
    /// Overlap Events raised during the run (agents only).
    pub overlap_events: Option<u64>,
    /// Increase of the agents' `announcer_partition_overlaps_total`, summed over the nodes
    /// (agents only; `None` if some agent did not expose it).
    pub overlap_counter: Option<f64>,
    /// Takeovers the agents counted during the run, summed over the nodes (agents only;
    /// `None` if some agent did not answer `/state` at the start or the end).
    #[serde(default)]
    pub takeovers: Option<u64>,
    /// Probes of a quiet owner's data plane sent during the run, summed over the nodes.
    #[serde(default)]
    pub probes: Option<u64>,
    /// Of those, answered (the owner was alive: nothing moved).
    #[serde(default)]
    pub probes_answered: Option<u64>,
    /// The latency added to every API request of the agents (none for keepalived).
    pub api_latency_ms: Option<u64>,
    /// The command that loaded the CPUs.
    pub cpu_hog: String,
    /// Mean and maximum of the 1-minute load average over the polls.
    pub load1_mean: f64,
    pub load1_max: f64,
    /// Busy share of all CPUs over the run (100 = saturated).
    pub cpu_busy_pct: Option<f64>,
    /// CPUs of the machine.
    pub cpus: usize,
    /// When each change was seen (s from the start of the stress), one entry per VIP changed.
    pub change_times_s: Vec<f64>,
}

impl StressRun {
    /// The system it measured, if the name is known.
    pub fn system(&self) -> Option<System> {
        System::parse(&self.system)
    }
}

/// Who announces each VIP in one poll (owner lists sorted).
pub type Owners = BTreeMap<IpAddr, Vec<String>>;

/// The VIPs whose owner set differs between two polls (a VIP in only one of them counts).
pub fn changed(prev: &Owners, cur: &Owners) -> Vec<IpAddr> {
    let keys: BTreeSet<&IpAddr> = prev.keys().chain(cur.keys()).collect();
    keys.into_iter()
        .filter(|v| prev.get(v) != cur.get(v))
        .copied()
        .collect()
}

/// The counts of one run, poll by poll.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    prev: Option<Owners>,
    pub polls: u64,
    pub incomplete: u64,
    pub changes: u64,
    pub changed_vips: BTreeSet<IpAddr>,
    pub overlaps: u64,
    pub unowned: u64,
    pub change_times_s: Vec<f64>,
}

impl Tally {
    /// Records one poll at `at_s`; `None`: incomplete (not compared, not counted).
    pub fn record(&mut self, at_s: f64, owners: Option<Owners>) {
        self.polls += 1;
        let Some(mut cur) = owners else {
            self.incomplete += 1;
            return;
        };
        for o in cur.values_mut() {
            o.sort();
        }
        self.overlaps += cur.values().filter(|o| o.len() >= 2).count() as u64;
        self.unowned += cur.values().filter(|o| o.is_empty()).count() as u64;
        if let Some(prev) = &self.prev {
            for v in changed(prev, &cur) {
                self.changes += 1;
                self.changed_vips.insert(v);
                self.change_times_s.push(at_s);
            }
        }
        self.prev = Some(cur);
    }
}

/// The first field of `/proc/loadavg` (1-minute load average).
pub fn parse_loadavg(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// Busy and total jiffies of all CPUs from `/proc/stat` (the `cpu` line: idle and iowait are
/// idle; user, nice, system, irq, softirq and steal are busy).
pub fn parse_cpu_times(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 5 {
        return None;
    }
    let total: u64 = f.iter().sum();
    Some((total - f[3] - f[4], total))
}

/// The busy share (%) between two [`parse_cpu_times`] readings.
pub fn busy_pct(a: (u64, u64), b: (u64, u64)) -> Option<f64> {
    let total = b.1.checked_sub(a.1).filter(|t| *t > 0)?;
    let busy = b.0.checked_sub(a.0)?;
    Some(busy as f64 * 100.0 / total as f64)
}

fn cpu_times() -> Option<(u64, u64)> {
    parse_cpu_times(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn load1() -> Option<f64> {
    parse_loadavg(&std::fs::read_to_string("/proc/loadavg").ok()?)
}

/// `stress-ng --cpu 0` (one worker per CPU) in the bridge namespace, in a process group of
/// its own; the whole group is SIGKILLed on drop (also when the run panics), and its workers
/// die with it (stress-ng gives them a parent-death signal); `--timeout` is the backstop. In a
/// testbed namespace, the Ctrl-C cleanup of the binaries kills it too.
pub struct CpuHog {
    child: Guarded,
    /// The command line, for the report.
    pub command: String,
}

impl CpuHog {
    /// Starts it for at most `timeout`; an error if it cannot start or exits at once.
    pub fn start(bed: &Bed, timeout: Duration) -> Result<CpuHog, String> {
        let args = [
            "--cpu".to_string(),
            "0".into(),
            "--timeout".into(),
            format!("{}s", timeout.as_secs().max(1)),
            "--quiet".into(),
        ];
        let command = format!("stress-ng {}", args.join(" "));
        let log = std::fs::File::create(bed.tb.dir().join("stress-ng.log"))
            .map_err(|e| format!("stress-ng log: {e}"))?;
        let mut cmd: Command = bed.tb.bridge_ns().nsenter_cmd("stress-ng");
        cmd.args(&args)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let mut child = Guarded::spawn(&mut cmd).map_err(|e| format!("spawn {command}: {e}"))?;
        std::thread::sleep(Duration::from_millis(500));
        if let Some(status) = child.try_exited() {
            return Err(format!(
                "{command} exited at once ({status}; is stress-ng installed? `cargo xtask setup` installs it)"
            ));
        }
        Ok(CpuHog { child, command })
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        if self.child.try_exited().is_none() {
            let pgid = nix::unistd::Pid::from_raw(self.child.id() as i32);
            let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        }
        self.child.kill();
    }
}

/// One poll of the owners of `vips`; `None` if some agent did not answer `/state`.
fn poll(bed: &Bed, vips: &[IpAddr]) -> Option<Owners> {
    if bed.system.is_keepalived() {
        return Some(keepalived_owners(&bed.tb, vips));
    }
    let mut out: Owners = vips.iter().map(|v| (*v, vec![])).collect();
    for node in bed.tb.nodes() {
        let state = bed.tb.state(&node)?;
        for o in state["owned"].as_array().into_iter().flatten() {
            let vip = o["vip"].as_str().and_then(|s| s.parse::<IpAddr>().ok());
            if let Some(v) = vip.and_then(|v| out.get_mut(&v)) {
                v.push(node.clone());
            }
        }
    }
    Some(out)
}

/// Overlap Events in the Services' namespace so far (an Event's series counts each time).
fn overlap_events(bed: &Bed, rt: &Handle) -> u64 {
    rt.block_on(bed.tb.events())
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Overlap"))
        .map(|e| {
            e.series
                .as_ref()
                .map(|s| s.count.max(1) as u64)
                .or(e.deprecated_count.map(|c| c.max(1) as u64))
                .unwrap_or(1)
        })
        .sum()
}

/// The agents' overlap counter summed over the nodes; `None` if some agent lacks it.
fn overlap_counter(bed: &Bed) -> Option<f64> {
    bed.tb
        .nodes()
        .iter()
        .map(|n| bed.tb.metric(n, OVERLAP_METRIC))
        .sum()
}

/// The agents' election counters from `/state`, summed over the nodes; `None` if some agent
/// did not answer.
fn agent_counters(bed: &Bed) -> Option<Counters> {
    let mut c = Counters::default();
    for node in bed.tb.nodes() {
        let state = bed.tb.state(&node)?;
        let stat = |k: &str| state["stats"][k].as_u64().unwrap_or(0);
        c.takeovers += stat("takeovers");
        c.probes += stat("probes");
        c.probes_answered += stat("probes_answered");
    }
    Some(c)
}

/// [`agent_counters`]: what the cores counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub takeovers: u64,
    pub probes: u64,
    pub probes_answered: u64,
}

impl Counters {
    /// The increase from `self` to `later` (an agent that restarted meanwhile counts from 0).
    pub fn since(self, later: Counters) -> Counters {
        Counters {
            takeovers: later.takeovers.saturating_sub(self.takeovers),
            probes: later.probes.saturating_sub(self.probes),
            probes_answered: later.probes_answered.saturating_sub(self.probes_answered),
        }
    }
}

/// Runs the stress scenario on `bed` (the main set `main` already announced): adds VIPs up to
/// [`STRESS_VIPS`], waits for one owner each, stresses and polls for `s.stress_duration`,
/// then removes the VIPs it added.
pub fn run(
    bed: &mut Bed,
    s: &Settings,
    rt: &Handle,
    main: &[IpAddr],
    settings: &str,
    progress: &dyn Fn(&str),
) -> Result<StressRun, String> {
    let name = bed.system.name();
    let extra = STRESS_VIPS.saturating_sub(main.len());
    progress(&format!(
        "{name}: stress: adding {extra} VIPs (one Service each)"
    ));
    let added: Vec<IpAddr> = if bed.system.is_keepalived() {
        let v: Vec<IpAddr> = (0..extra as u32).map(|k| vip(STRESS_BASE + k)).collect();
        let all: Vec<IpAddr> = main.iter().chain(&v).copied().collect();
        bed.set_keepalived_vips(&all);
        v
    } else {
        add_services(rt, &bed.tb, "stress", STRESS_BASE, extra, 1)
    };
    let all: Vec<IpAddr> = main.iter().chain(&added).copied().collect();
    // keepalived may never settle with this many VIPs (at 0.1 s adverts its one thread falls
    // behind its GARPs and two nodes stay master): it is counted, not judged, so it is measured
    // anyway; an agent that does not settle is a failure.
    let result = match restore_or_restart(bed, &all, progress) {
        Err(why) if bed.system.is_keepalived() => {
            progress(&format!(
                "{name}: stress: no single owner per VIP before the stress, measuring anyway: {}",
                why.lines().next().unwrap_or("")
            ));
            Ok(())
        }
        r => r.map(drop),
    }
    .and_then(|()| measure(bed, s, rt, &all, settings, progress));
    progress(&format!("{name}: stress: removing the {extra} VIPs"));
    if bed.system.is_keepalived() {
        bed.set_keepalived_vips(main);
    } else {
        for i in 0..extra {
            rt.block_on(bed.tb.delete_service(&format!("stress-{i}")));
        }
    }
    result
}

fn measure(
    bed: &mut Bed,
    s: &Settings,
    rt: &Handle,
    vips: &[IpAddr],
    settings: &str,
    progress: &dyn Fn(&str),
) -> Result<StressRun, String> {
    let name = bed.system.name();
    let agents = !bed.system.is_keepalived();
    let events0 = agents.then(|| overlap_events(bed, rt));
    let counter0 = overlap_counter(bed).filter(|_| agents);
    let counters0 = agent_counters(bed).filter(|_| agents);
    let mut tally = Tally::default();
    tally.record(0.0, poll(bed, vips));
    let hog = CpuHog::start(bed, s.stress_duration + Duration::from_secs(30))?;
    let latency = agents.then_some(STRESS_API_LATENCY);
    bed.api_latency(latency);
    progress(&format!(
        "{name}: stress: {} for {:?}{}, polling {} VIPs every {POLL_INTERVAL:?}",
        hog.command,
        s.stress_duration,
        latency.map_or(String::new(), |l| format!(", API latency {l:?}")),
        vips.len()
    ));
    let cpu0 = cpu_times();
    let start = Instant::now();
    let mut loads: Vec<f64> = vec![];
    let mut next_progress = start + PROGRESS_EVERY;
    while start.elapsed() < s.stress_duration {
        let tick = Instant::now();
        tally.record(start.elapsed().as_secs_f64(), poll(bed, vips));
        loads.extend(load1());
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            progress(&format!(
                "{name}: stress: {:.0}/{:.0} s, {} ownership changes, {} overlap samples, {} incomplete polls, load {:.1}",
                start.elapsed().as_secs_f64(),
                s.stress_duration.as_secs_f64(),
                tally.changes,
                tally.overlaps,
                tally.incomplete,
                loads.last().copied().unwrap_or(0.0)
            ));
        }
        let next = tick + POLL_INTERVAL;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
    let duration_s = start.elapsed().as_secs_f64();
    let cpu1 = cpu_times();
    drop(hog);
    bed.api_latency(None);
    let overlap_events = events0.map(|e0| overlap_events(bed, rt).saturating_sub(e0));
    let counters = counters0.zip(agent_counters(bed)).map(|(a, b)| a.since(b));
    let overlap_counter = counter0
        .zip(overlap_counter(bed))
        .map(|(a, b)| (b - a).max(0.0));
    let load1_max = loads.iter().copied().fold(0.0, f64::max);
    let load1_mean = if loads.is_empty() {
        0.0
    } else {
        loads.iter().sum::<f64>() / loads.len() as f64
    };
    Ok(StressRun {
        system: name.into(),
        settings: settings.into(),
        duration_s,
        vips: vips.len(),
        polls: tally.polls,
        incomplete_polls: tally.incomplete,
        ownership_changes: tally.changes,
        vips_changed: tally.changed_vips.len(),
        overlap_samples: tally.overlaps,
        unowned_samples: tally.unowned,
        overlap_events,
        overlap_counter,
        takeovers: counters.map(|c| c.takeovers),
        probes: counters.map(|c| c.probes),
        probes_answered: counters.map(|c| c.probes_answered),
        api_latency_ms: latency.map(|l| l.as_millis() as u64),
        cpu_hog: "stress-ng --cpu 0".into(),
        load1_mean,
        load1_max,
        cpu_busy_pct: cpu0.zip(cpu1).and_then(|(a, b)| busy_pct(a, b)),
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        change_times_s: tally.change_times_s,
    })
}

/// The systems whose stress runs are judged: the agent at its defaults and its fastest
/// settings.
pub const JUDGED: [System; 2] = [System::AnnouncerDefault, System::AnnouncerFast];

/// One verdict per judged system selected with the stress scenario: no ownership change, no
/// overlap sample, no Overlap Event and no takeover counted by the agents (a VIP taken and
/// given back between two polls); a selected one without a run fails (as the other
/// scenarios' missing rows do). keepalived gets an informational line.
pub fn verdicts(
    systems: &[System],
    scenarios: &[Scenario],
    runs: &[StressRun],
    aborted: &[(System, String)],
) -> Vec<Verdict> {
    if !scenarios.contains(&Scenario::Stress) {
        return vec![];
    }
    let mut v = vec![];
    for &system in systems {
        let name = format!("{}_stress_ownership_changes", system.name());
        let run = runs.iter().find(|r| r.system() == Some(system));
        let judged = JUDGED.contains(&system);
        let Some(r) = run else {
            if judged {
                let why = match aborted.iter().find(|(s, _)| *s == system) {
                    Some((_, why)) => {
                        format!("system given up: {}", why.lines().next().unwrap_or(""))
                    }
                    None => "no run".into(),
                };
                v.push(Verdict {
                    name,
                    text: format!("{} stress: no run: {why}", system.name()),
                    value: None,
                    limit: Some(0.0),
                    pass: Some(false),
                });
            }
            continue;
        };
        let events = r.overlap_events.unwrap_or(0);
        let takeovers = r.takeovers.unwrap_or(0);
        v.push(Verdict {
            name,
            text: format!(
                "{} stress: {} ownership changes ({} VIPs), {} overlap samples, {} Overlap Events, {} takeovers ({} probes, {} answered) in {:.0} s, load {:.1} (max {:.1}), {}{}",
                system.name(),
                r.ownership_changes,
                r.vips_changed,
                r.overlap_samples,
                r.overlap_events.map_or("-".into(), |e| e.to_string()),
                r.takeovers.map_or("-".into(), |e| e.to_string()),
                r.probes.map_or("-".into(), |e| e.to_string()),
                r.probes_answered.map_or("-".into(), |e| e.to_string()),
                r.duration_s,
                r.load1_mean,
                r.load1_max,
                if judged {
                    "target 0 changes, 0 overlaps, 0 takeovers"
                } else {
                    "not judged"
                },
                if r.incomplete_polls > 0 {
                    format!(" ({} incomplete polls)", r.incomplete_polls)
                } else {
                    String::new()
                },
            ),
            value: Some(r.ownership_changes as f64),
            limit: judged.then_some(0.0),
            pass: judged.then_some(
                r.ownership_changes == 0 && r.overlap_samples == 0 && events == 0 && takeovers == 0,
            ),
        });
    }
    v
}

/// The stress table (empty without runs).
pub fn table(runs: &[StressRun]) -> String {
    use std::fmt::Write as _;
    if runs.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Stress: {STRESS_VIPS} VIPs, every CPU busy (stress-ng --cpu 0), agents' API requests delayed; owners polled every {} ms",
        POLL_INTERVAL.as_millis()
    );
    let _ = writeln!(
        s,
        "{:<27} {:>10} {:>5} {:>6} {:>8} {:>7} {:>8} {:>8} {:>7} {:>7} {:>6} {:>7} {:>8} {:>7} {:>6} {:>6} {:>5}",
        "system",
        "duration_s",
        "vips",
        "polls",
        "changes",
        "changed",
        "overlaps",
        "unowned",
        "events",
        "counter",
        "takes",
        "probes",
        "answered",
        "api_ms",
        "load1",
        "l1max",
        "busy%"
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for r in runs {
        let _ = writeln!(
            s,
            "{:<27} {:>10.0} {:>5} {:>6} {:>8} {:>7} {:>8} {:>8} {:>7} {:>7} {:>6} {:>7} {:>8} {:>7} {:>6.1} {:>6.1} {:>5}",
            r.system,
            r.duration_s,
            r.vips,
            r.polls,
            r.ownership_changes,
            r.vips_changed,
            r.overlap_samples,
            r.unowned_samples,
            opt(r.overlap_events.map(|e| e.to_string())),
            opt(r.overlap_counter.map(|c| format!("{c:.0}"))),
            opt(r.takeovers.map(|c| c.to_string())),
            opt(r.probes.map(|c| c.to_string())),
            opt(r.probes_answered.map(|c| c.to_string())),
            opt(r.api_latency_ms.map(|l| l.to_string())),
            r.load1_mean,
            r.load1_max,
            opt(r.cpu_busy_pct.map(|b| format!("{b:.0}"))),
        );
    }
    s.push_str(FOOTER);
    s
}

const FOOTER: &str = "\
changes = VIP x poll whose owner set differed from the previous complete poll (changed = VIPs that did at least once);
overlaps / unowned = VIP x poll with two or more / no owners; events = Overlap Events raised during the run, counter =
increase of announcer_partition_overlaps_total over the nodes (agents only); takes / probes / answered = takeovers,
probes of a quiet owner's data plane and probe answers the agents counted during the run (a move shorter than a poll
shows in takes); api_ms = latency added to every API request of the agents; load1 / l1max = mean / max 1-minute load average over the polls; busy% = CPU busy share.
";

#[cfg(test)]
mod unit {
    use super::*;

    fn v(k: u8) -> IpAddr {
        IpAddr::from([10, 78, 128, k])
    }

    fn owners(of: &[(u8, &[&str])]) -> Owners {
        of.iter()
            .map(|(k, o)| (v(*k), o.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_changed_owner_set_counts_once_per_vip() {
        let a = owners(&[(0, &["node-a"]), (1, &["node-b"]), (2, &["node-c"])]);
        let b = owners(&[(0, &["node-b"]), (1, &["node-b"]), (2, &[])]);
        assert_eq!(changed(&a, &b), vec![v(0), v(2)]);
        assert!(changed(&a, &a).is_empty());
    }

    #[test]
    fn the_tally_counts_changes_against_the_previous_complete_poll() {
        let mut t = Tally::default();
        t.record(0.0, Some(owners(&[(0, &["node-a"]), (1, &["node-b"])])));
        t.record(0.25, None);
        t.record(0.5, Some(owners(&[(0, &["node-a"]), (1, &["node-b"])])));
        assert_eq!((t.changes, t.incomplete, t.polls), (0, 1, 3));
        t.record(0.75, Some(owners(&[(0, &["node-a", "node-c"]), (1, &[])])));
        t.record(1.0, Some(owners(&[(0, &["node-c"]), (1, &["node-b"])])));
        assert_eq!(t.changes, 4);
        assert_eq!(t.changed_vips.len(), 2);
        assert_eq!((t.overlaps, t.unowned), (1, 1));
        assert_eq!(t.change_times_s, vec![0.75, 0.75, 1.0, 1.0]);
    }

    #[test]
    fn owner_order_within_a_poll_is_no_change() {
        let mut t = Tally::default();
        t.record(0.0, Some(owners(&[(0, &["node-a", "node-b"])])));
        t.record(0.25, Some(owners(&[(0, &["node-b", "node-a"])])));
        assert_eq!(t.changes, 0);
        assert_eq!(t.overlaps, 2);
    }

    #[test]
    fn reads_the_load_average_and_the_cpu_busy_share() {
        assert_eq!(parse_loadavg("2.50 1.20 0.80 3/400 1234\n"), Some(2.5));
        let a = parse_cpu_times("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!(a, (150, 1000));
        let b = parse_cpu_times("cpu  150 0 50 840 60 0 0 0 0 0\n").unwrap();
        assert_eq!(busy_pct(a, b), Some(50.0));
        assert_eq!(busy_pct(a, a), None);
        assert_eq!(parse_cpu_times("intr 1 2 3\n"), None);
    }

    fn run(system: System, changes: u64, overlaps: u64) -> StressRun {
        StressRun {
            system: system.name().into(),
            settings: String::new(),
            duration_s: 60.0,
            vips: STRESS_VIPS,
            polls: 240,
            incomplete_polls: 0,
            ownership_changes: changes,
            vips_changed: changes.min(300) as usize,
            overlap_samples: overlaps,
            unowned_samples: 0,
            overlap_events: (!system.is_keepalived()).then_some(0),
            overlap_counter: None,
            takeovers: (!system.is_keepalived()).then_some(0),
            probes: None,
            probes_answered: None,
            api_latency_ms: Some(200),
            cpu_hog: "stress-ng --cpu 0".into(),
            load1_mean: 3.0,
            load1_max: 4.0,
            cpu_busy_pct: Some(99.0),
            cpus: 2,
            change_times_s: vec![],
        }
    }

    fn pass_of(v: &[Verdict], name: &str) -> Option<bool> {
        v.iter()
            .find(|x| x.name == name)
            .unwrap_or_else(|| panic!("no verdict {name} in {v:#?}"))
            .pass
    }

    #[test]
    fn the_agent_passes_stress_only_without_changes_or_overlaps() {
        let systems = [System::AnnouncerDefault, System::AnnouncerFast];
        let runs = [
            run(System::AnnouncerDefault, 0, 0),
            run(System::AnnouncerFast, 0, 3),
        ];
        let v = verdicts(&systems, &[Scenario::Stress], &runs, &[]);
        assert_eq!(
            pass_of(&v, "announcer-default_stress_ownership_changes"),
            Some(true)
        );
        assert_eq!(
            pass_of(&v, "announcer-fast_stress_ownership_changes"),
            Some(false)
        );
        let runs = [run(System::AnnouncerDefault, 2, 0)];
        let v = verdicts(&systems[..1], &[Scenario::Stress], &runs, &[]);
        assert_eq!(
            pass_of(&v, "announcer-default_stress_ownership_changes"),
            Some(false)
        );
    }

    #[test]
    fn a_takeover_between_two_polls_fails_the_agent() {
        let mut r = run(System::AnnouncerFast, 0, 0);
        r.takeovers = Some(1);
        let v = verdicts(&[System::AnnouncerFast], &[Scenario::Stress], &[r], &[]);
        assert_eq!(
            pass_of(&v, "announcer-fast_stress_ownership_changes"),
            Some(false)
        );
        assert!(v[0].text.contains("1 takeovers"), "{v:#?}");
    }

    #[test]
    fn counters_count_the_increase_and_a_restarted_agent_from_zero() {
        let a = Counters {
            takeovers: 5,
            probes: 10,
            probes_answered: 9,
        };
        let b = Counters {
            takeovers: 5,
            probes: 14,
            probes_answered: 13,
        };
        let d = a.since(b);
        assert_eq!((d.takeovers, d.probes, d.probes_answered), (0, 4, 4));
        assert_eq!(b.since(a).probes, 0);
    }

    #[test]
    fn keepalived_flapping_under_stress_is_counted_not_judged() {
        let runs = [run(System::KeepalivedTuned, 900, 40)];
        let v = verdicts(&[System::KeepalivedTuned], &[Scenario::Stress], &runs, &[]);
        assert_eq!(
            pass_of(&v, "keepalived-tuned_stress_ownership_changes"),
            None
        );
        assert!(v[0].text.contains("900 ownership changes"), "{v:#?}");
    }

    #[test]
    fn a_selected_agent_without_a_stress_run_fails() {
        let v = verdicts(&[System::AnnouncerDefault], &[Scenario::Stress], &[], &[]);
        assert_eq!(
            pass_of(&v, "announcer-default_stress_ownership_changes"),
            Some(false)
        );
        assert!(verdicts(&[System::AnnouncerDefault], &[Scenario::Crash], &[], &[]).is_empty());
    }

    #[test]
    fn the_stress_table_and_json_carry_the_counts() {
        let r = run(System::AnnouncerDefault, 0, 0);
        let t = table(std::slice::from_ref(&r));
        assert!(
            t.contains("announcer-default") && t.contains("changes"),
            "{t}"
        );
        assert!(table(&[]).is_empty());
        let j = serde_json::to_value(&r).unwrap();
        for k in [
            "duration_s",
            "ownership_changes",
            "overlap_samples",
            "overlap_events",
            "load1_mean",
            "cpu_busy_pct",
        ] {
            assert!(j.get(k).is_some(), "{k} in {j}");
        }
        let back: StressRun = serde_json::from_value(j).unwrap();
        assert_eq!(back, r);
    }
}

//! `stress-e2e`, `partition-e2e`, `blackout-e2e` and `agent-crashloop-e2e`: the bad days on
//! which fast endpoint withdrawal (issue 28) must never mark a healthy Pod not ready. No node
//! crashes in any of them, so *every* Pod seen with `Ready` False for our reason is a false
//! withdrawal. Each is one long run per system (`--stress-duration`, 10 min in the full run) on
//! the end-to-end bed ([`super::e2e::E2eBed`]: kube-proxy, one Pod per node, the Services'
//! namespace opted in, the withdrawer replicas), polling the Pods every [`POLL`]:
//!
//! * `stress-e2e`: every CPU busy (`stress-ng --cpu 0`) and every API request of the nodes (the
//!   agents' and the withdrawers') delayed by [`STRESS_API_LATENCY`]: late heartbeats, slow
//!   probes, stale watches;
//! * `partition-e2e`: two nodes cut from each other at the bridge (both still reach the third),
//!   [`PARTITION_ON`] on and [`PARTITION_OFF`] off in turn: each side reports the other, and a
//!   single reporter is never a quorum;
//! * `blackout-e2e`: the heartbeat port dropped on every node (nftables in each node
//!   namespace), the API fine: every agent hears silence, but every kernel answers;
//! * `agent-crashloop-e2e`: one node's agent SIGKILLed [`CRASHLOOP_UP`] after each start and
//!   started again [`CRASHLOOP_DOWN`] later, the node itself fine: its data plane and kernel
//!   answer.
//!
//! Only systems that withdraw run them ([`System::withdraws`]).

use std::{
    collections::BTreeSet,
    time::{Duration, Instant},
};

use serde::Serialize;

use super::{
    e2e::{self, E2eBed},
    report::Verdict,
    scenarios::{Bed, STRESS_API_LATENCY, Scenario},
    stress::CpuHog,
    systems::System,
};
use crate::env::lan::{SERVICE_NAMESPACE, withdrawn_pods};

/// The scenarios of this module.
pub const SCENARIOS: [Scenario; 4] = Scenario::SAFETY;
/// How often the Pods are checked.
pub const POLL: Duration = Duration::from_millis(250);
/// partition-e2e: how long each partition lasts, and the pause between two.
pub const PARTITION_ON: Duration = Duration::from_secs(10);
pub const PARTITION_OFF: Duration = Duration::from_secs(5);
/// agent-crashloop-e2e: how long the agent runs before each SIGKILL, and how long it stays down.
pub const CRASHLOOP_UP: Duration = Duration::from_secs(2);
pub const CRASHLOOP_DOWN: Duration = Duration::from_secs(1);
/// The agents' heartbeat port (their default `--heartbeat-port`).
pub const HEARTBEAT_PORT: u16 = announcer::agent::net::heartbeat_socket::DEFAULT_PORT;

/// One long run of one of [`SCENARIOS`].
#[derive(Clone, Debug, Serialize)]
pub struct SafetyRun {
    pub system: String,
    pub scenario: String,
    /// What was done, in words.
    pub fault: String,
    pub duration_s: f64,
    /// Pod checks made.
    pub polls: usize,
    /// Pod checks that failed (API slow or down): not counted as clean.
    pub failed_polls: usize,
    /// Faults injected (partitions, kills).
    pub faults: usize,
    /// Every Pod seen withdrawn (`pod on node`): all false withdrawals.
    pub healthy_withdrawn: Vec<String>,
}

/// Whether `s` is one of [`SCENARIOS`].
pub fn is_safety(s: Scenario) -> bool {
    s.is_safety()
}

/// The nftables table of the blackout, in every node namespace.
const NFT_TABLE: &str = "announcer_bench_blackout";

fn nft(bed: &Bed, node: &str, script: &str) -> Result<(), String> {
    let out = bed
        .tb
        .node_ns(node)
        .nsenter_cmd("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin
                .take()
                .expect("piped stdin")
                .write_all(script.as_bytes())?;
            c.wait_with_output()
        })
        .map_err(|e| format!("nft in {node}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "nft in {node}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn blackout(bed: &Bed, on: bool) -> Result<(), String> {
    for n in bed.tb.nodes() {
        let script = if on {
            format!(
                "table inet {NFT_TABLE} {{\n  chain in {{ type filter hook input priority -300; udp dport {HEARTBEAT_PORT} drop; }}\n  chain out {{ type filter hook output priority -300; udp dport {HEARTBEAT_PORT} drop; }}\n}}\n"
            )
        } else {
            format!("delete table inet {NFT_TABLE}\n")
        };
        nft(bed, &n, &script)?;
    }
    Ok(())
}

/// Runs `scenario` on `bed` for `duration`, setting the e2e data path up first if `state` has
/// none. The bed is left restored (faults undone, agents running).
pub fn run(
    bed: &mut Bed,
    state: &mut Option<E2eBed>,
    scenario: Scenario,
    duration: Duration,
    progress: &dyn Fn(&str),
) -> Result<SafetyRun, String> {
    if state.is_none() {
        *state = Some(E2eBed::setup(bed)?);
    }
    let nodes = bed.tb.nodes();
    let (a, b, c) = (
        nodes[0].clone(),
        nodes[1].clone(),
        nodes[nodes.len() - 1].clone(),
    );
    let mut hog = None;
    let fault = match scenario {
        Scenario::StressE2e => {
            hog = Some(CpuHog::start(bed, duration + Duration::from_secs(30))?);
            bed.api_latency(Some(STRESS_API_LATENCY));
            format!(
                "stress-ng --cpu 0, API requests of every node delayed {} ms",
                STRESS_API_LATENCY.as_millis()
            )
        }
        Scenario::PartitionE2e => format!(
            "{a} and {b} cut from each other {} s on, {} s off",
            PARTITION_ON.as_secs(),
            PARTITION_OFF.as_secs()
        ),
        Scenario::BlackoutE2e => {
            blackout(bed, true)?;
            format!("UDP port {HEARTBEAT_PORT} dropped on every node")
        }
        Scenario::AgentCrashloopE2e => format!(
            "the agent of {c} SIGKILLed {} s after each start, restarted {} s later",
            CRASHLOOP_UP.as_secs(),
            CRASHLOOP_DOWN.as_secs()
        ),
        other => return Err(format!("{} is not a safety scenario", other.name())),
    };
    progress(&format!(
        "[{}] {}: {fault} for {} s",
        scenario.name(),
        bed.system.name(),
        duration.as_secs()
    ));
    let t0 = Instant::now();
    let (mut polls, mut failed_polls, mut faults) = (0, 0, 0);
    let mut seen = BTreeSet::new();
    // The injector's next step: (when, what).
    let mut next = t0;
    let mut on = false;
    let mut last_progress = t0;
    while t0.elapsed() < duration {
        let now = Instant::now();
        if now >= next {
            match scenario {
                Scenario::PartitionE2e => {
                    if on {
                        bed.heal_all();
                        next = now + PARTITION_OFF;
                    } else {
                        bed.partition(&a, &b);
                        faults += 1;
                        next = now + PARTITION_ON;
                    }
                    on = !on;
                }
                Scenario::AgentCrashloopE2e => {
                    if on {
                        bed.restart(&c);
                        next = now + CRASHLOOP_UP;
                    } else {
                        bed.kill(&c);
                        faults += 1;
                        next = now + CRASHLOOP_DOWN;
                    }
                    on = !on;
                }
                _ => next = now + duration,
            }
        }
        let client = bed.tb.kube();
        match bed
            .tb
            .block_on(async move { withdrawn_pods(client, SERVICE_NAMESPACE).await })
        {
            Ok(w) => seen.extend(w.into_iter().map(|(pod, node)| format!("{pod} on {node}"))),
            Err(_) => failed_polls += 1,
        }
        polls += 1;
        if last_progress.elapsed() >= Duration::from_secs(60) {
            last_progress = Instant::now();
            progress(&format!(
                "[{}] {}: {:.0}/{} s, {} false withdrawals so far",
                scenario.name(),
                bed.system.name(),
                t0.elapsed().as_secs_f64(),
                duration.as_secs(),
                seen.len()
            ));
        }
        std::thread::sleep(POLL);
    }
    let duration_s = t0.elapsed().as_secs_f64();
    // Undo.
    drop(hog);
    match scenario {
        Scenario::StressE2e => bed.api_latency(None),
        Scenario::PartitionE2e => bed.heal_all(),
        Scenario::BlackoutE2e => blackout(bed, false)?,
        Scenario::AgentCrashloopE2e if !on => {}
        Scenario::AgentCrashloopE2e => bed.restart(&c),
        _ => {}
    }
    e2e::wait_all_ready(bed)?;
    Ok(SafetyRun {
        system: bed.system.name().into(),
        scenario: scenario.name().into(),
        fault,
        duration_s,
        polls,
        failed_polls,
        faults,
        healthy_withdrawn: seen.into_iter().collect(),
    })
}

/// One verdict per selected system that withdraws and selected scenario of [`SCENARIOS`]: no
/// Pod withdrawn, over a run with Pod checks.
pub fn verdicts(
    systems: &[System],
    scenarios: &[Scenario],
    runs: &[SafetyRun],
    aborted: &[(System, String)],
) -> Vec<Verdict> {
    let mut v = Vec::new();
    for &system in systems.iter().filter(|s| s.withdraws()) {
        for &sc in scenarios.iter().filter(|s| is_safety(**s)) {
            let name = format!("{}_{}_healthy_withdrawn", system.name(), sc.name());
            let run = runs
                .iter()
                .find(|r| r.system == system.name() && r.scenario == sc.name());
            let Some(r) = run else {
                let why = match aborted.iter().find(|(s, _)| *s == system) {
                    Some((_, why)) => {
                        format!("system given up: {}", why.lines().next().unwrap_or(""))
                    }
                    None => "no run".into(),
                };
                v.push(Verdict {
                    name,
                    text: format!("{} {}: no run: {why}", system.name(), sc.name()),
                    value: None,
                    limit: Some(0.0),
                    pass: Some(false),
                });
                continue;
            };
            let clean = r.polls - r.failed_polls;
            v.push(Verdict {
                name,
                text: format!(
                    "{} {}: {} healthy Pods withdrawn in {:.0} s ({}; {} faults, {clean} Pod checks){}, target 0",
                    system.name(),
                    sc.name(),
                    r.healthy_withdrawn.len(),
                    r.duration_s,
                    r.fault,
                    r.faults,
                    if r.healthy_withdrawn.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", r.healthy_withdrawn.join(", "))
                    }
                ),
                value: Some(r.healthy_withdrawn.len() as f64),
                limit: Some(0.0),
                pass: Some(r.healthy_withdrawn.is_empty() && clean > 0),
            });
        }
    }
    v
}

/// The runs' table.
pub fn table(runs: &[SafetyRun]) -> String {
    use std::fmt::Write as _;
    if runs.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "Fast endpoint withdrawal on bad days (no node crashes: every withdrawn Pod is a false one)\n",
    );
    let _ = writeln!(
        s,
        "{:<20} {:<21} {:>10} {:>7} {:>7} {:>9}  fault",
        "system", "scenario", "duration_s", "faults", "polls", "withdrawn"
    );
    for r in runs {
        let _ = writeln!(
            s,
            "{:<20} {:<21} {:>10.0} {:>7} {:>7} {:>9}  {}",
            r.system,
            r.scenario,
            r.duration_s,
            r.faults,
            r.polls,
            r.healthy_withdrawn.len(),
            r.fault
        );
    }
    s
}

#[cfg(test)]
mod unit {
    use super::*;

    fn run(withdrawn: &[&str], polls: usize) -> SafetyRun {
        SafetyRun {
            system: System::AnnouncerWithdraw.name().into(),
            scenario: Scenario::BlackoutE2e.name().into(),
            fault: "x".into(),
            duration_s: 600.0,
            polls,
            failed_polls: 0,
            faults: 1,
            healthy_withdrawn: withdrawn.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_run_without_withdrawals_passes() {
        let v = verdicts(
            &[System::AnnouncerWithdraw],
            &[Scenario::BlackoutE2e],
            &[run(&[], 10)],
            &[],
        );
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pass, Some(true));
    }

    #[test]
    fn one_false_withdrawal_fails_the_run() {
        let v = verdicts(
            &[System::AnnouncerWithdraw],
            &[Scenario::BlackoutE2e],
            &[run(&["web-node-a on node-a"], 10)],
            &[],
        );
        assert_eq!(v[0].pass, Some(false));
        assert!(v[0].text.contains("web-node-a on node-a"), "{}", v[0].text);
    }

    #[test]
    fn a_missing_run_fails_and_systems_that_do_not_withdraw_are_not_judged() {
        let v = verdicts(
            &[System::AnnouncerDefault, System::AnnouncerWithdraw],
            &[Scenario::AgentCrashloopE2e],
            &[],
            &[],
        );
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].pass, Some(false));
    }

    #[test]
    fn a_run_whose_pod_checks_all_failed_does_not_pass() {
        let mut r = run(&[], 10);
        r.failed_polls = 10;
        let v = verdicts(
            &[System::AnnouncerWithdraw],
            &[Scenario::BlackoutE2e],
            &[r],
            &[],
        );
        assert_eq!(v[0].pass, Some(false));
    }
}

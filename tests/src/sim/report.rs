//! Per-scenario statistics over many runs: the soak binary's table and JSON.
//!
//! Why: invariants say "never worse than"; the distribution (p50/p99/max failover, lost
//! samples, overlaps) shows how close to the bounds the core runs and whether a change made
//! it better or worse.

use std::{collections::BTreeMap, fmt::Write};

use serde_json::json;

use super::{check::RunReport, scenario::Scenario};

/// Accumulated results of one scenario.
#[derive(Clone, Debug, Default)]
pub struct ScenarioStats {
    /// Runs.
    pub runs: u64,
    /// Runs with at least one violated invariant.
    pub failed: u64,
    /// Every failover time measured (ms).
    pub failover_ms: Vec<f64>,
    /// Runs that measured at least one.
    pub failover_runs: u64,
    /// Lost (VIP, sample) pairs.
    pub lost_samples: u64,
    /// (VIP, sample) pairs waiting for a first owner ([`RunReport::unserved_samples`]).
    pub unserved_samples: u64,
    /// Overlap episodes.
    pub overlaps: u64,
    /// … that an Overlap Event had to count (over 1 s).
    pub overlaps_required: u64,
    /// … that none of its own counted.
    pub overlaps_uncounted: u64,
    /// Overlaps the agents counted.
    pub overlaps_counted: u64,
    /// Overlap Events that counted no observed episode.
    pub overlap_events_unseen: u64,
    /// Highest steady-state Lease write rate seen (per node, per second).
    pub max_lease_writes_per_s: f64,
    /// Runs whose fault has a victim.
    pub victim_runs: u64,
    /// … of which the run tested nothing of it: it answered no VIP another node could take
    /// (a joiner or lagging node: took none). See [`MAX_IDLE_VICTIMS`].
    pub idle_victims: u64,
    /// The longest a servable VIP was dark (ms).
    pub max_dark_ms: f64,
}

impl ScenarioStats {
    /// The `q` quantile (0..=1) of the failover times, nearest rank.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.failover_ms.is_empty() {
            return None;
        }
        let mut v = self.failover_ms.clone();
        v.sort_by(f64::total_cmp);
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        Some(v[i])
    }
}

/// Statistics of many runs, by scenario.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// By scenario.
    pub by_scenario: BTreeMap<Scenario, ScenarioStats>,
}

/// The share of a scenario's victim runs that may have an idle victim, as (numerator,
/// denominator): 1 in 20. Plans pick a victim that owns a VIP another node can take whenever
/// the cluster has one (see `Plan::generate`); the rest are clusters with no such VIP at all
/// (every VIP with at most one eligible node), a few per cent of seeds.
pub const MAX_IDLE_VICTIMS: (u64, u64) = (1, 20);

/// How many of `runs` victim runs may be idle: [`MAX_IDLE_VICTIMS`] of them, rounded up.
pub fn max_idle_victims(runs: u64) -> u64 {
    (runs * MAX_IDLE_VICTIMS.0).div_ceil(MAX_IDLE_VICTIMS.1)
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn ms(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.0}"))
}

impl Summary {
    /// Add one run.
    pub fn add(&mut self, r: &RunReport) {
        let s = self
            .by_scenario
            .entry(r.scenario.unwrap_or(Scenario::Crash))
            .or_default();
        s.runs += 1;
        s.failed += u64::from(!r.violations.is_empty());
        s.failover_ms.extend(&r.failover_ms);
        s.failover_runs += u64::from(!r.failover_ms.is_empty());
        s.lost_samples += r.lost_samples;
        s.unserved_samples += r.unserved_samples;
        s.overlaps += r.overlaps;
        s.overlaps_required += r.overlaps_required;
        s.overlaps_uncounted += r.overlaps_uncounted;
        s.overlaps_counted += r.overlaps_counted;
        s.overlap_events_unseen += r.overlap_events_unseen;
        s.max_lease_writes_per_s = s.max_lease_writes_per_s.max(r.lease_writes_per_s);
        if let Some(idle) = r.victim_idle {
            s.victim_runs += 1;
            s.idle_victims += u64::from(idle);
        }
        s.max_dark_ms = s.max_dark_ms.max(r.max_dark_ms);
    }

    /// Runs in all.
    pub fn runs(&self) -> u64 {
        self.by_scenario.values().map(|s| s.runs).sum()
    }

    /// Scenarios in which more runs than [`MAX_IDLE_VICTIMS`] allows had an idle victim (it
    /// owned nothing, so the run tested no failover, handover or restart), with the counts
    /// (idle, victim runs).
    pub fn idle_victim_scenarios(&self) -> Vec<(Scenario, u64, u64)> {
        self.by_scenario
            .iter()
            .filter(|(_, s)| s.idle_victims > max_idle_victims(s.victim_runs))
            .map(|(sc, s)| (*sc, s.idle_victims, s.victim_runs))
            .collect()
    }

    /// A fixed-width table, one line per scenario.
    pub fn table(&self) -> String {
        let mut t = format!(
            "{:<31} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>9}\n",
            "scenario",
            "runs",
            "failed",
            "p50 ms",
            "p99 ms",
            "max ms",
            "lost",
            "unserved",
            "overlaps",
            "to count",
            "counted",
            "lease/s",
            "dark ms",
            "idle vic"
        );
        for (sc, s) in &self.by_scenario {
            let _ = writeln!(
                t,
                "{:<31} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9.2} {:>8.0} {:>9}",
                sc.name(),
                s.runs,
                s.failed,
                ms(s.quantile_ms(0.5)),
                ms(s.quantile_ms(0.99)),
                ms(s.quantile_ms(1.0)),
                s.lost_samples,
                s.unserved_samples,
                s.overlaps,
                s.overlaps_required,
                s.overlaps_counted,
                s.max_lease_writes_per_s,
                s.max_dark_ms,
                if s.victim_runs > 0 {
                    format!("{}/{}", s.idle_victims, s.victim_runs)
                } else {
                    "-".into()
                }
            );
        }
        t
    }

    /// One JSON document; field names carry their units.
    pub fn json(&self) -> serde_json::Value {
        let scenarios: Vec<_> = self
            .by_scenario
            .iter()
            .map(|(sc, s)| {
                json!({
                    "scenario": sc.name(),
                    "runs": s.runs,
                    "failed_runs": s.failed,
                    "failovers": s.failover_ms.len(),
                    "p50_ms": s.quantile_ms(0.5).map(round1),
                    "p99_ms": s.quantile_ms(0.99).map(round1),
                    "max_ms": s.quantile_ms(1.0).map(round1),
                    "lost_samples": s.lost_samples,
                    "lost_ms": s.lost_samples * 10,
                    "unserved_samples": s.unserved_samples,
                    "unserved_ms": s.unserved_samples * 10,
                    "overlaps": s.overlaps,
                    "overlaps_required": s.overlaps_required,
                    "overlaps_uncounted": s.overlaps_uncounted,
                    "overlaps_counted": s.overlaps_counted,
                    "overlap_events_unseen": s.overlap_events_unseen,
                    "max_lease_writes_per_s": (s.max_lease_writes_per_s * 1000.0).round() / 1000.0,
                    "max_dark_ms": round1(s.max_dark_ms),
                    "victim_runs": s.victim_runs,
                    "idle_victims": s.idle_victims,
                })
            })
            .collect();
        json!({ "sample_interval_ms": 10, "scenarios": scenarios })
    }
}

//! Running seeds: one (with an optional full trace) or many on every core.
//!
//! Why threads here and not in the callers: the test and the soak binary both want "run these
//! seeds, give me the reports in seed order", and each run is independent and deterministic,
//! so a shared work counter over scoped threads is all it takes.

use std::{
    ops::{Range, RangeInclusive},
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    thread,
};

use announcer::election::Core;

use super::{
    agent::Agent,
    check::{RunReport, check},
    scenario::{DEFAULT_NODES, Plan, Scenario},
    world::World,
};

/// Run `seed` (its own scenario unless `scenario` is given) with agent type `A`; with
/// `trace`, also return a line per input and output.
pub fn run_with<A: Agent>(
    seed: u64,
    scenario: Option<Scenario>,
    trace: bool,
) -> (RunReport, Vec<String>) {
    run_sized::<A>(seed, scenario, DEFAULT_NODES, trace)
}

/// [`run_with`] on a cluster of a size drawn from `nodes` ([`Plan::generate_sized`]).
pub fn run_sized<A: Agent>(
    seed: u64,
    scenario: Option<Scenario>,
    nodes: RangeInclusive<usize>,
    trace: bool,
) -> (RunReport, Vec<String>) {
    let scenario = scenario.unwrap_or_else(|| Scenario::for_seed(seed));
    let plan = Plan::generate_sized(seed, scenario, nodes);
    let mut world: World<A> = World::new(plan, trace);
    world.run();
    (check(&world), world.trace.take().unwrap_or_default())
}

/// Run `seed` with the real election core.
pub fn run_seed(seed: u64, scenario: Option<Scenario>) -> RunReport {
    run_with::<Core>(seed, scenario, false).0
}

/// A sweep over no seeds: refused, because it would pass having tested nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no seeds to run (seeds {start}..{end}): a sweep of nothing tests nothing")]
pub struct NoSeeds {
    /// The first seed asked for.
    pub start: u64,
    /// One past the last.
    pub end: u64,
}

/// Run every seed of `seeds` with agent type `A` on `threads` threads; `progress(done)` is
/// called after each run. Reports come back in seed order, one per seed; an empty range is
/// an error.
pub fn run_many<A: Agent>(
    seeds: Range<u64>,
    scenario: Option<Scenario>,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<RunReport>, NoSeeds> {
    run_many_sized::<A>(seeds, scenario, DEFAULT_NODES, threads, progress)
}

/// [`run_many`] on clusters of sizes drawn from `nodes`.
pub fn run_many_sized<A: Agent>(
    seeds: Range<u64>,
    scenario: Option<Scenario>,
    nodes: RangeInclusive<usize>,
    threads: usize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<RunReport>, NoSeeds> {
    if seeds.is_empty() {
        return Err(NoSeeds {
            start: seeds.start,
            end: seeds.end,
        });
    }
    let next = AtomicU64::new(seeds.start);
    let done = AtomicU64::new(0);
    let out = Mutex::new(Vec::new());
    thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end {
                        break;
                    }
                    let r = run_sized::<A>(seed, scenario, nodes.clone(), false).0;
                    out.lock().expect("no panics while locked").push(r);
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1);
                }
            });
        }
    });
    let mut v = out.into_inner().expect("no panics while locked");
    v.sort_by_key(|r| r.seed);
    Ok(v)
}

/// Threads to use: what the machine offers.
pub fn default_threads() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

//! `soak`: run the election simulator over many seeds and print per-scenario statistics, or
//! replay one seed with a full trace.
//!
//! Why a binary next to the test: the test runs a few thousand seeds on every `cargo test`;
//! soaking (hundreds of thousands, in release) and replaying a failure with every input and
//! output shown are jobs for a person at a terminal.
//!
//! ```text
//! cargo run --release -p announcer-tests --bin soak -- --seeds 100000
//! cargo run -p announcer-tests --bin soak -- --seed 1234 --trace
//! cargo run --release -p announcer-tests --bin soak -- --nodes 100-128 --seeds 200
//! ```

use std::{
    io::Write,
    ops::RangeInclusive,
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

use announcer::election::Core;
use announcer_tests::sim::{
    naive::NaiveCore,
    report::{MAX_IDLE_VICTIMS, Summary},
    run::{default_threads, run_many_sized, run_sized},
    scenario::{MAX_NODES, Scenario},
};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Soak-test the election core in the discrete-event simulator")]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Run only this scenario (default: seeds cycle through all of them).
    #[arg(long)]
    scenario: Option<Scenario>,
    /// Replay this single seed (with `--trace`, print every input and output).
    #[arg(long)]
    seed: Option<u64>,
    /// With `--seed`: print the full trace.
    #[arg(long)]
    trace: bool,
    /// Print one JSON document as the last line.
    #[arg(long)]
    json: bool,
    /// Worker threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Drive the simulator's deliberately naive core instead of the real one (to see the
    /// invariants catch it).
    #[arg(long)]
    naive: bool,
    /// How many violation messages to print in full.
    #[arg(long, default_value_t = 3)]
    show: usize,
    /// Cluster sizes, `MIN-MAX` nodes (each seed draws one; at most 128). The default is what
    /// `cargo xtask test` runs; `--nodes 100-128` is issue 29's large-cluster soak.
    #[arg(long, default_value = "3-7", value_parser = parse_nodes)]
    nodes: RangeInclusive<usize>,
}

fn parse_nodes(s: &str) -> Result<RangeInclusive<usize>, String> {
    let (lo, hi) = s.split_once('-').unwrap_or((s, s));
    let parse = |x: &str| x.trim().parse::<usize>().map_err(|e| format!("{x:?}: {e}"));
    let (lo, hi) = (parse(lo)?, parse(hi)?);
    if lo < 2 || hi < lo || hi > MAX_NODES {
        return Err(format!("{s}: sizes from 2 to {MAX_NODES} nodes, MIN-MAX"));
    }
    Ok(lo..=hi)
}

fn main() {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let (rep, trace) = if args.naive {
            run_sized::<NaiveCore>(seed, args.scenario, args.nodes.clone(), args.trace)
        } else {
            run_sized::<Core>(seed, args.scenario, args.nodes.clone(), args.trace)
        };
        for l in &trace {
            println!("{l}");
        }
        println!(
            "seed {seed} scenario {}: {} violation(s), failovers {:?} ms, lost samples {} (+{} unserved before a first owner), overlaps {} ({} to count, counted {}), lease writes {:.2}/s, hash {:016x}",
            rep.scenario.map_or("?", |s| s.name()),
            rep.violations.len(),
            rep.failover_ms
                .iter()
                .map(|x| x.round() as u64)
                .collect::<Vec<_>>(),
            rep.lost_samples,
            rep.unserved_samples,
            rep.overlaps,
            rep.overlaps_required,
            rep.overlaps_counted,
            rep.lease_writes_per_s,
            rep.trace_hash
        );
        for v in &rep.violations {
            println!("{v}");
        }
        std::process::exit(i32::from(!rep.violations.is_empty()));
    }

    let threads = args.threads.unwrap_or_else(default_threads);
    let total = args.seeds;
    let started = Instant::now();
    let last = AtomicU64::new(0);
    let progress = |done: u64| {
        let step = (total / 20).max(1);
        if done.is_multiple_of(step) && last.fetch_max(done, Ordering::Relaxed) < done {
            eprint!(
                "\r{done}/{total} seeds, {:.0} s ",
                started.elapsed().as_secs_f64()
            );
            let _ = std::io::stderr().flush();
        }
    };
    let range = args.start..args.start + total;
    let reports = if args.naive {
        run_many_sized::<NaiveCore>(range, args.scenario, args.nodes.clone(), threads, &progress)
    } else {
        run_many_sized::<Core>(range, args.scenario, args.nodes.clone(), threads, &progress)
    };
    let reports = reports.unwrap_or_else(|e| {
        eprintln!("--seeds {total}: {e}");
        std::process::exit(2);
    });
    eprintln!();
    let mut summary = Summary::default();
    let mut failed = Vec::new();
    for r in &reports {
        summary.add(r);
        if !r.violations.is_empty() {
            failed.push(r);
        }
    }
    for r in failed.iter().take(args.show) {
        println!("{}\n", r.violations[0]);
    }
    // Which invariants broke, by scenario.
    let mut kinds: std::collections::BTreeMap<(String, String), u64> = Default::default();
    for r in &failed {
        for inv in r.broken_invariants() {
            let scenario = r.scenario.map_or("?", |s| s.name()).to_string();
            *kinds.entry((scenario, inv)).or_default() += 1;
        }
    }
    for ((sc, inv), n) in &kinds {
        println!("{n:>6} x {sc}: invariant {inv}");
    }
    if !failed.is_empty() {
        let seeds: Vec<String> = failed
            .iter()
            .take(50)
            .map(|r| r.seed_and_scenario())
            .collect();
        println!(
            "{} of {} runs failed; first seeds: {}",
            failed.len(),
            reports.len(),
            seeds.join(" ")
        );
    }
    print!("{}", summary.table());
    let idle = summary.idle_victim_scenarios();
    for (sc, n, of) in &idle {
        println!(
            "{sc}: in {n} of {of} runs the victim owned nothing (more than {} in {} of them: too few tested it)",
            MAX_IDLE_VICTIMS.0, MAX_IDLE_VICTIMS.1
        );
    }
    println!(
        "{} runs in {:.1} s on {threads} threads",
        reports.len(),
        started.elapsed().as_secs_f64()
    );
    if args.json {
        println!("{}", summary.json());
    }
    std::process::exit(i32::from(!failed.is_empty() || !idle.is_empty()));
}

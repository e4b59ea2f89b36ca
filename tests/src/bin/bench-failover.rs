//! `cargo xtask bench failover`: failover time and lost probes of this agent against keepalived,
//! MetalLB and kube-vip, per failure scenario, on the multi-node testbed (see
//! `announcer_tests::bench::failover` for the definitions). Progress on stderr, a table and the
//! verdicts on stdout, CDF plots (SVG), and with `--json` one JSON document as the last stdout
//! line. Any FAIL (a missed target, a selected system × scenario without trials, a system
//! given up) makes the run exit non-zero after everything is printed; so does `--merge` when
//! a merged run had one.

use std::{path::PathBuf, time::Duration, time::Instant};

use announcer_tests::{
    bench::{
        failover::{
            self, Settings,
            plot::{path_for, write_cdf, write_stress},
            report, safety,
            scenarios::Scenario,
            stress,
            systems::{FAST_ARGS, System},
        },
        verdict::{any_failed, failed_names},
    },
    cli::announcer_bin,
    env::lan::install_ctrlc_cleanup,
    netns::require_root,
};
use anyhow::{Result, bail, ensure};
use clap::Parser;
use serde_json::json;

#[derive(Parser)]
#[command(about = "Benchmark failover against keepalived, MetalLB and kube-vip")]
struct Args {
    /// Trials per system and scenario.
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Node namespaces in the testbed (at least 2).
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// VIPs in the main set (one Service each); a trial probes those its victim owns.
    #[arg(long, default_value_t = 1)]
    vips: usize,
    /// Systems to run, comma-separated (default all): keepalived-default, keepalived-tuned,
    /// metallb, kube-vip, kube-vip-fast, announcer-default, announcer-fast, announcer-withdraw
    /// (the defaults plus fast endpoint withdrawal; end-to-end scenarios only).
    #[arg(long, value_delimiter = ',', value_parser = parse_system)]
    systems: Vec<System>,
    /// Scenarios to run, comma-separated (default all but stress): crash, link-down, sigkill,
    /// restart-in-grace, freeze, sigterm, api-outage-crash, partition, rejoin, crash-100; and
    /// only when named here: stress (one `--stress-duration` run per system), crash-e2e-local,
    /// crash-e2e-cluster, and fast endpoint withdrawal's safety runs stress-e2e, partition-e2e,
    /// blackout-e2e, agent-crashloop-e2e (one `--stress-duration` run each).
    #[arg(long, value_delimiter = ',', value_parser = parse_scenario)]
    scenarios: Vec<Scenario>,
    /// How long the stress scenario stresses each system, and how long each e2e safety run
    /// lasts, in seconds (the full run uses 1800 for stress, 600 for the safety runs).
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    stress_duration: u64,
    /// Trials of crash-100 (100 VIPs of one node crash together).
    #[arg(long, default_value_t = 3)]
    mass_trials: usize,
    /// VIPs for the idle RSS/CPU measurement of announcer-default (0: skip).
    #[arg(long, default_value_t = 1000)]
    idle_vips: usize,
    /// Idle measurement window.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "20s")]
    idle_window: Duration,
    /// The flags of announcer-fast, space-separated (default: the fastest reliable ones).
    #[arg(long, allow_hyphen_values = true)]
    fast_args: Option<String>,
    /// Judge the crash-like scenarios only against the 1 s regression bound, not the targets
    /// (p99 ≤ 250 ms and median ≤ 200 ms at the defaults, median ≤ 50 ms at the fastest
    /// settings): what `cargo xtask test` ends with, on a machine that may be busy.
    #[arg(long)]
    regression: bool,
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Where to write the crash CDF (SVG); the other scenarios go next to it as
    /// `<stem>-<scenario>.svg`.
    #[arg(long, default_value = "target/bench/failover.svg")]
    plot: PathBuf,
    /// Run nothing: merge the `--json` outputs of earlier runs (files) into one table, one
    /// JSON document and CDF plots with every system side by side.
    #[arg(long, num_args = 1.., value_name = "FILE")]
    merge: Vec<PathBuf>,
}

fn parse_system(s: &str) -> Result<System, String> {
    System::parse(s).ok_or_else(|| format!("unknown system {s:?}"))
}

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::parse(s).ok_or_else(|| format!("unknown scenario {s:?}"))
}

fn progress(line: &str) {
    eprintln!("[bench-failover] {line}");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> Result<()> {
    let args = Args::parse();
    if !args.merge.is_empty() {
        let doc = failover::merge::merge(&args.merge, &args.plot)?;
        if args.json {
            println!("{doc}");
        }
        let failed = failover::merge::failed_targets(&doc);
        if !failed.is_empty() {
            bail!("targets failed in the merged runs: {}", failed.join(", "));
        }
        return Ok(());
    }
    require_root();
    install_ctrlc_cleanup();
    ensure!(args.nodes >= 2, "--nodes must be at least 2");
    ensure!(
        args.trials >= 1 && args.vips >= 1,
        "--trials and --vips must be at least 1"
    );
    ensure!(
        args.stress_duration >= 1,
        "--stress-duration must be at least 1 (s)"
    );
    let settings = Settings {
        trials: args.trials,
        nodes: args.nodes,
        vips: args.vips,
        systems: if args.systems.is_empty() {
            System::ALL.to_vec()
        } else {
            args.systems.clone()
        },
        scenarios: if args.scenarios.is_empty() {
            Scenario::ALL.to_vec()
        } else {
            let mut s = args.scenarios.clone();
            s.sort();
            s.dedup();
            s
        },
        mass_trials: args.mass_trials,
        idle_vips: args.idle_vips,
        idle_window: args.idle_window,
        fast_args: match &args.fast_args {
            Some(a) => a.split_whitespace().map(String::from).collect(),
            None => FAST_ARGS.iter().map(|s| s.to_string()).collect(),
        },
        stress_duration: Duration::from_secs(args.stress_duration),
    };
    progress(&format!("agents run {}", announcer_bin().display()));
    let started = Instant::now();
    let rt = tokio::runtime::Handle::current();
    let results = tokio::task::block_in_place(|| failover::run(&settings, &rt, &progress));
    let total_s = started.elapsed().as_secs_f64();

    let mut plots = Vec::new();
    for &sc in &settings.scenarios {
        let path = path_for(&args.plot, sc);
        let written = if sc == Scenario::Stress {
            write_stress(&results.stress, &path)
        } else {
            write_cdf(&results.rows, sc, &path)
        };
        match written {
            Ok(false) => {}
            Err(e) => progress(&format!("plot {}: {e:#}", path.display())),
            Ok(true) => plots.push(
                std::fs::canonicalize(&path)
                    .unwrap_or(path)
                    .display()
                    .to_string(),
            ),
        }
    }
    let mut verdicts = report::verdicts(
        &settings.systems,
        &settings.scenarios,
        &results.rows,
        &results.aborted,
        if args.regression {
            report::Limits::REGRESSION
        } else {
            report::Limits::TARGETS
        },
    );
    verdicts.extend(stress::verdicts(
        &settings.systems,
        &settings.scenarios,
        &results.stress,
        &results.aborted,
    ));
    verdicts.extend(safety::verdicts(
        &settings.systems,
        &settings.scenarios,
        &results.safety,
        &results.aborted,
    ));
    print!("{}", stress::table(&results.stress));
    print!("{}", safety::table(&results.safety));
    print!("{}", report::table(&results.rows, &verdicts, &plots));
    if let Some(idle) = &results.idle {
        print!("{}", idle.text());
    }
    println!("total: {total_s:.0} s");
    if args.json {
        let extra = json!({
            "plots": plots,
            "idle": results.idle,
            "aborted": results.aborted.iter().map(|(s, w)| json!({"system": s.name(), "why": w})).collect::<Vec<_>>(),
            "total_s": total_s,
            "trials": settings.trials,
            "nodes": settings.nodes,
            "vips": settings.vips,
            "stress": results.stress,
            "safety": results.safety,
            "stress_duration_s": settings.scenarios.contains(&Scenario::Stress).then_some(args.stress_duration),
        });
        let main_plot = plots.first().cloned().unwrap_or_default();
        println!(
            "{}",
            report::json(&results.rows, &verdicts, &main_plot, extra)
        );
    }
    if any_failed(&verdicts) {
        bail!("targets failed: {}", failed_names(&verdicts).join(", "));
    }
    Ok(())
}

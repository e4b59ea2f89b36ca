//! `cargo xtask bench xdp`: the XDP responder's cost per frame against the `reflect` floor
//! (BPF_PROG_TEST_RUN), and an ARP flood answered by XDP, the `reflect` floor, the kernel and a
//! userspace AF_PACKET responder in a namespace pair, each run `--flood-trials` times (median
//! reported) with `kernel.bpf_stats_enabled` off, plus as many separate runs of the XDP rows with
//! it on for the kernel's per-program run-time statistics. Progress on stderr, a table on stdout
//! and, with `--json`, one JSON document as the last stdout line. A target missed (FAIL) or not
//! measured (N/A) makes the run exit non-zero after everything is printed; a measurement that
//! cannot be trusted (an answer kind that did not answer every timed frame) stops it at once.

use std::path::PathBuf;

use announcer_tests::bench::xdp::{
    attach::{self, Attached},
    bpfstats, cost, flood, plot, report,
};
use anyhow::{Context, Result, bail, ensure};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Benchmark the XDP ARP/NDP responder")]
struct Args {
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Fresh requests timed per kind in the cost part.
    #[arg(long, default_value_t = 200_000)]
    frames: u32,
    /// Duration of each flood run, in seconds.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Flood runs per responder; the median trial is reported.
    #[arg(long, default_value_t = 3)]
    flood_trials: u32,
    /// Where to write the latency CDF plot (SVG).
    #[arg(long, default_value = "target/bench/xdp-cost.svg")]
    plot: PathBuf,
}

fn progress(line: &str) {
    eprintln!("[bench-xdp] {line}");
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(args.frames > 0, "--frames must be at least 1");
    ensure!(args.seconds > 0.0, "--seconds must be positive");
    ensure!(args.flood_trials > 0, "--flood-trials must be at least 1");
    ensure!(
        nix::unistd::geteuid().is_root(),
        "run as root: the benchmark loads BPF programs and creates network namespaces"
    );

    attach::sweep_stale();
    progress("cost: loading announcer + reflect for BPF_PROG_TEST_RUN");
    let cost = cost::run(args.frames, progress)?;
    plot::write_cdf(&cost, &args.plot)
        .with_context(|| format!("writing {}", args.plot.display()))?;
    let plot_path = std::fs::canonicalize(&args.plot)
        .unwrap_or(args.plot.clone())
        .display()
        .to_string();
    progress(&format!("cost: done; plot written to {plot_path}"));

    let stats_setting = bpfstats::setting().context("reading kernel.bpf_stats_enabled")?;
    let flood = flood::run(args.seconds, args.flood_trials, progress);
    // Pins are removed by the responder's guard; make sure, also after a failure.
    for root in Attached::pin_roots() {
        attach::cleanup(&root);
    }
    // The flood's guards restore kernel.bpf_stats_enabled; make sure, also after a failure.
    if let Err(e) = bpfstats::restore(&stats_setting) {
        progress(&format!(
            "warning: restoring kernel.bpf_stats_enabled={stats_setting}: {e:#}"
        ));
    }
    let flood = flood?;

    let targets = report::targets(&cost, &flood);
    print!("{}", report::table(&cost, &flood, &targets, &plot_path));
    if args.json {
        println!("{}", report::json(&cost, &flood, &targets, &plot_path));
    }
    let unmet = report::unmet(&targets);
    if !unmet.is_empty() {
        bail!("targets not met: {}", unmet.join(", "));
    }
    Ok(())
}

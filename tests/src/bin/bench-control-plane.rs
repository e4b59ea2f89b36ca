//! `cargo xtask bench control-plane`: the agents' API reads and writes per second against the
//! in-repo API server, for 3, 10 and 50 agents (`--no-dataplane`) and 10, 100 and 1,000
//! Services, node-lease and lease-per-service election side by side. Each case gets a fresh
//! server and fresh agent processes; the counters are reset once every VIP has one owner and
//! read after `--window`. Progress on stderr, a table and the verdicts on stdout, an SVG plot,
//! and with `--json` one JSON document as the last stdout line. Any FAIL (a missed target, a
//! case that did not converge) makes the run exit non-zero after everything is printed. The
//! heavy cases (lease-per-service demanding over 10,000 GETs/s: 50 agents × 1,000 Services)
//! run only with `--include-heavy`.
//!
//! `--apiserver kube` runs the cases against a real control plane instead (etcd,
//! kube-apiserver, controllers, `deploy/` applied; one per case; node-lease mode unless
//! `--mode` says otherwise): requests from kube-apiserver's audit log, the agents' watch
//! traffic from a counting TCP relay per agent. `--apiserver both` runs both and prints them
//! side by side.

use std::{path::PathBuf, time::Duration, time::Instant};

use announcer_tests::{
    bench::{
        control_plane::{self, Mode, Settings, plot, report},
        verdict::{any_failed, failed_names},
    },
    cli::announcer_bin,
    env::ApiKind,
};
use anyhow::{Context, Result, bail, ensure};
use clap::Parser;

#[derive(Parser)]
#[command(about = "Benchmark the agents' Kubernetes API cost in both election modes")]
struct Args {
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// A short run: 6 s windows, {3, 10} agents × {10, 100} Services.
    #[arg(long)]
    quick: bool,
    /// Measurement window per case (default 20s; 6s with --quick).
    #[arg(long, value_parser = humantime::parse_duration)]
    window: Option<Duration>,
    /// Most to wait per case for every agent ready and every VIP with exactly one owner;
    /// after it the case is measured anyway and fails (default 60s on the in-repo server,
    /// 120s on kube-apiserver).
    #[arg(long, value_parser = humantime::parse_duration)]
    converge_timeout: Option<Duration>,
    /// The API server: `in-repo` (in-process, counts every request), `kube` (a real
    /// kube-apiserver per case: audit log and per-agent byte-counting relays) or `both`.
    #[arg(long, default_value = "in-repo", value_parser = parse_apiservers)]
    apiserver: Apiservers,
    /// Election modes to run (default both on the in-repo server; node-lease on kube).
    #[arg(long = "mode", value_delimiter = ',', value_parser = parse_mode)]
    modes: Vec<Mode>,
    /// Agent counts (default 3,10,50; 3,10 with --quick).
    #[arg(long, value_delimiter = ',')]
    agents: Vec<usize>,
    /// Service counts (default 10,100,1000; 10,100 with --quick).
    #[arg(long, value_delimiter = ',')]
    services: Vec<usize>,
    /// Skip cases with more agents than this.
    #[arg(long)]
    max_agents: Option<usize>,
    /// Skip cases with more Services than this.
    #[arg(long)]
    max_services: Option<usize>,
    /// Also run the heavy cases: lease-per-service demanding more than 10,000 GETs/s (50
    /// agents × 1,000 Services: 25,000/s), which on a small machine only measure how
    /// saturated it gets. Left out by default.
    #[arg(long)]
    include_heavy: bool,
    /// Concurrent requests while creating Nodes and Services.
    #[arg(long, default_value_t = 32)]
    create_concurrency: usize,
    /// A flag for every agent, after the mode's (repeatable), e.g.
    /// `--agent-arg=--heartbeat-interval=300ms`.
    #[arg(long = "agent-arg", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Where to write the plot (SVG).
    #[arg(long, default_value = "target/bench/control-plane.svg")]
    plot: PathBuf,
}

#[derive(Clone, Debug)]
struct Apiservers(Vec<ApiKind>);

fn parse_apiservers(s: &str) -> Result<Apiservers, String> {
    match s {
        "both" => Ok(Apiservers(vec![ApiKind::InRepo, ApiKind::Kube])),
        other => other
            .parse::<ApiKind>()
            .map(|k| Apiservers(vec![k]))
            .map_err(|_| format!("unknown API server {s:?}: in-repo, kube or both")),
    }
}

/// `target/bench/control-plane.svg` → `target/bench/control-plane-kube.svg`.
fn plot_path_for(plot: &std::path::Path, api: ApiKind) -> PathBuf {
    match api {
        ApiKind::InRepo => plot.to_path_buf(),
        ApiKind::Kube => {
            let stem = plot
                .file_stem()
                .map_or("control-plane".into(), |s| s.to_string_lossy().into_owned());
            let ext = plot
                .extension()
                .map_or("svg".into(), |e| e.to_string_lossy().into_owned());
            plot.with_file_name(format!("{stem}-kube.{ext}"))
        }
    }
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    Mode::parse(s).ok_or_else(|| format!("unknown mode {s:?}: node-lease or lease-per-service"))
}

fn progress(line: &str) {
    eprintln!("[bench-control-plane] {line}");
}

/// 50 agents with hundreds of pooled connections each, all to the in-process server: raise
/// the open-file limit (inherited by the agents) as far as allowed.
fn raise_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid resource and a pointer to a live struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        let want = lim.rlim_max.max(262_144);
        let raised = libc::rlimit {
            rlim_cur: want,
            rlim_max: want,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    let window = args.window.unwrap_or(if args.quick {
        Duration::from_secs(6)
    } else {
        Duration::from_secs(20)
    });
    ensure!(!window.is_zero(), "--window must be positive");
    let or = |v: &[usize], full: &[usize], quick: &[usize]| -> Vec<usize> {
        match (v.is_empty(), args.quick) {
            (false, _) => v.to_vec(),
            (true, false) => full.to_vec(),
            (true, true) => quick.to_vec(),
        }
    };
    let agents = or(&args.agents, &[3, 10, 50], &[3, 10]);
    let services = or(&args.services, &[10, 100, 1000], &[10, 100]);
    ensure!(
        agents.iter().chain(&services).all(|&n| n > 0),
        "agent and Service counts must be at least 1"
    );
    let bin = announcer_bin();
    progress(&format!("agents run {}", bin.display()));
    raise_nofile();

    let mut plans = Vec::new();
    for &api in &args.apiserver.0 {
        let modes = match (args.modes.is_empty(), api) {
            (false, _) => args.modes.clone(),
            (true, ApiKind::InRepo) => Mode::ALL.to_vec(),
            (true, ApiKind::Kube) => vec![Mode::NodeLease],
        };
        let m = control_plane::matrix(
            &modes,
            &agents,
            &services,
            args.max_agents,
            args.max_services,
            args.include_heavy,
        );
        for (c, why) in &m.skipped {
            progress(&format!("skipping {} on {api}: {why}", c.label()));
        }
        let converge_timeout = args.converge_timeout.unwrap_or(match api {
            ApiKind::InRepo => Duration::from_secs(60),
            ApiKind::Kube => Duration::from_secs(120),
        });
        plans.push((api, m, converge_timeout));
    }
    ensure!(
        plans.iter().any(|(_, m, _)| !m.cases.is_empty()),
        "every case was skipped"
    );
    if !args.agent_args.is_empty() {
        progress(&format!("extra agent flags: {}", args.agent_args.join(" ")));
    }
    let total_cases: usize = plans.iter().map(|(_, m, _)| m.cases.len()).sum();
    let started = Instant::now();
    let mut results = Vec::new();
    let mut i = 0;
    for (api, m, converge_timeout) in &plans {
        let settings = Settings {
            window,
            converge_timeout: *converge_timeout,
            create_concurrency: args.create_concurrency,
            agent_args: args.agent_args.clone(),
        };
        for case in &m.cases {
            i += 1;
            progress(&format!(
                "[{i}/{total_cases}] {api}: {}: starting",
                case.label()
            ));
            let r = control_plane::run_case(*case, *api, &settings, &progress).await;
            progress(&format!(
                "[{i}/{total_cases}] {api}: {}: {:.1} reads/s, {:.2} writes/s ({:.3}/node){}, owners {}{} ({:.0} s elapsed)",
                case.label(),
                r.reads_per_s(),
                r.writes_per_s(),
                r.writes_per_s_per_node(),
                r.from_api_bytes_per_s_per_node()
                    .map_or(String::new(), |b| format!(
                        ", {b:.0} B/s from the API server per agent"
                    )),
                if r.end.single_owner() {
                    "ok"
                } else {
                    "NOT one each"
                },
                if !r.converged() {
                    ", NOT CONVERGED"
                } else if r.saturated() {
                    ", SATURATED"
                } else {
                    ""
                },
                started.elapsed().as_secs_f64()
            ));
            results.push(r);
        }
    }
    let total_s = started.elapsed().as_secs_f64();

    let mut all_verdicts = Vec::new();
    let mut all_skipped = Vec::new();
    let mut plots = Vec::new();
    for (api, m, _) in &plans {
        let rows: Vec<_> = results.iter().filter(|r| r.api == *api).cloned().collect();
        if rows.is_empty() {
            continue;
        }
        let path = plot_path_for(&args.plot, *api);
        plot::write(&rows, &path).with_context(|| format!("writing {}", path.display()))?;
        let plot_path = std::fs::canonicalize(&path)
            .unwrap_or(path.clone())
            .display()
            .to_string();
        let verdicts = report::verdicts_on(*api, &rows);
        let text = match api {
            ApiKind::InRepo => report::table(
                &rows,
                &m.skipped,
                &verdicts,
                &plot_path,
                window.as_secs_f64(),
            ),
            ApiKind::Kube => report::kube_table(
                &rows,
                &m.skipped,
                &verdicts,
                &plot_path,
                window.as_secs_f64(),
            ),
        };
        print!("{text}");
        println!();
        all_verdicts.extend(verdicts);
        all_skipped.extend(m.skipped.iter().cloned());
        plots.push(plot_path);
    }
    print!("{}", report::compare_table(&results));
    println!("total: {total_s:.0} s for {} cases", results.len());
    if args.json {
        println!(
            "{}",
            report::json(
                &results,
                &all_skipped,
                &all_verdicts,
                &plots.join(" "),
                total_s
            )
        );
    }
    if any_failed(&all_verdicts) {
        bail!("targets failed: {}", failed_names(&all_verdicts).join(", "));
    }
    Ok(())
}

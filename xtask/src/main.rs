//! `cargo xtask`: the developer's and CI's entry point.
//!
//! It depends on nothing of the project itself, so it builds on a fresh machine before the eBPF
//! toolchain exists, and its first job is to install that toolchain (see `setup`). Everything
//! else runs the workspace's own binaries and tests.

mod docs_links;
mod image;
mod kube_env;
#[cfg(test)]
mod layers;
mod setup;
mod test_summary;
mod upgrade_from;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use setup::Need;

#[derive(Parser)]
#[command(about = "Build, load, test and benchmark announcer")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// The XDP program version of the "newer build" the upgrade test rolls to (this tree's is 1).
const NEXT_XDP_VERSION: u32 = 2;

#[derive(Subcommand)]
enum Cmd {
    /// Install the eBPF toolchain and test tools (idempotent; every other command runs it).
    Setup,
    /// Build the agent (with the XDP program embedded), release profile.
    Build,
    /// Build the image: an OCI archive in target/image/ (the release binary and the Debian
    /// files it needs; no Docker daemon, registry or base image), for `skopeo copy
    /// oci-archive:...`, `podman load` or `ctr images import`.
    Image {
        /// Build a binary whose XDP program carries this version constant instead (tagged
        /// `<version>-xdp<N>`): a newer build whose program differs, for upgrade drills.
        #[arg(long, value_name = "N")]
        xdp_version: Option<u32>,
    },
    /// Build everything and load the responder on an interface with the given VIPs.
    BuildAndLoad {
        /// Interface to attach to.
        #[arg(long)]
        iface: String,
        /// VIPs to answer for (repeatable), added as permanent entries and announced.
        #[arg(long = "vip", required = true)]
        vips: Vec<String>,
        /// auto, native or generic.
        #[arg(long, default_value = "auto")]
        mode: String,
    },
    /// Run the whole test suite: unit, kernel (BPF_PROG_TEST_RUN) and network-namespace tests.
    /// Needs root; privileged tests never skip.
    /// Ends with a smoke run of the failover benchmark (see `SMOKE_ARGS`).
    Test {
        /// Skip the failover smoke run (for a quick local run; CI never passes it).
        #[arg(long)]
        no_smoke: bool,
        /// Extra arguments for `cargo test` (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run a benchmark: `xdp` (responder cost and flood throughput), `control-plane` (API
    /// reads and writes per second for 3/10/50 agents and 10/100/1,000 Services, both election
    /// modes), `failover` (failover time as a client feels it, against keepalived and
    /// lease-per-service, on the namespace testbed), `heartbeat` (sealing and verifying),
    /// `core` (the election core's cost per agent against cluster size, in virtual time),
    /// `allocator` (10,000 new Services allocated on the real kube-apiserver, T6) or `scale`
    /// (issue 29's targets T1–T6 in one table, from the others' measurements).
    /// Arguments after the name go to the
    /// benchmark, e.g. `cargo xtask bench failover --trials 5 --json`.
    Bench {
        /// Which benchmark.
        which: String,
        /// Also print one JSON document on the last line.
        #[arg(long)]
        json: bool,
        /// Arguments for the benchmark binary (`--help` lists them).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The demo: 3 nodes and a client on a namespace LAN; the busiest node crashes and the
    /// client's traffic moves, with the timeline printed and plotted.
    Demo {
        /// `in-repo` (the embedded API server: starts at once) or `kube` (a real
        /// kube-apiserver, etcd, kube-controller-manager and kube-scheduler, `deploy/`
        /// applied; about 10 s more).
        #[arg(long, default_value = "in-repo")]
        apiserver: String,
    },
    /// A real control plane (`deploy/` applied) plus the 3-node testbed with agents, left
    /// running for kubectl (`up` prints the kubeconfig and kubectl paths); `down` removes it.
    Kube {
        /// `up`, `down` or `status`.
        action: kube_env::Action,
    },
    /// Run the election simulator over many more seeds than the test suite (arguments go to
    /// the `soak` binary, e.g. `cargo xtask soak -- --seeds 100000`).
    Soak {
        /// Also print one JSON document on the last line.
        #[arg(long)]
        json: bool,
        /// Extra arguments for the soak binary.
        #[arg(last = true)]
        args: Vec<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let root = workspace_root();
    match cli.cmd {
        Cmd::Setup => setup::ensure(Need::Everything),
        Cmd::Build => {
            setup::ensure(Need::Build)?;
            cargo(&root, &["build", "--release", "-p", "announcer"])
        }
        Cmd::Image { xdp_version } => {
            setup::ensure(Need::Build)?;
            image::build(&root, xdp_version).map(|_| ())
        }
        Cmd::BuildAndLoad { iface, vips, mode } => {
            setup::ensure(Need::Build)?;
            cargo(&root, &["build", "--release", "-p", "announcer"])?;
            let bin = root.join("target/release/announcer");
            run(Command::new(&bin).args(["load", "--iface", &iface, "--mode", &mode]))?;
            for vip in &vips {
                run(Command::new(&bin).args([
                    "vip",
                    "add",
                    vip,
                    "--iface",
                    &iface,
                    "--permanent",
                    "--announce",
                ]))?;
            }
            run(Command::new(&bin).args(["vip", "list", "--iface", &iface]))
        }
        Cmd::Test { no_smoke, args } => {
            require_root("the test suite attaches XDP programs in network namespaces")?;
            setup::ensure(Need::Everything)?;
            // Build the workspace's tests first (the test run would anyway) so that the old
            // agent's build reuses its dependencies; a build error is reported by the run.
            let _ = cargo(&root, &["test", "--workspace", "--no-run", "--quiet"]);
            let old = upgrade_from::ensure(&root)?;
            // SAFETY: single-threaded here; the test run inherits it.
            unsafe { std::env::set_var("ANNOUNCER_OLD_BIN", &old) };
            // The upgrade test (tests/tests/testbed/install.rs) rolls from the image to one
            // whose XDP program differs; built first, so that the agent crate's last build
            // (the image's) is the one the benches reuse.
            let next = image::build(&root, Some(NEXT_XDP_VERSION))?;
            // The image test (tests/tests/deploy/image.rs) unpacks and runs this archive.
            let image = image::build(&root, None)?;
            // SAFETY: as above.
            unsafe {
                std::env::set_var("ANNOUNCER_IMAGE", &image.archive);
                std::env::set_var("ANNOUNCER_IMAGE_NEXT", &next.archive);
            }
            test(&root, &args, !no_smoke)
        }
        Cmd::Bench {
            which,
            mut json,
            mut args,
        } => {
            require_root("benchmarks load BPF programs")?;
            setup::ensure(Need::Everything)?;
            // `--json` may also come after the benchmark's name, among its own arguments.
            let before = args.len();
            args.retain(|a| a != "--json");
            json |= args.len() != before;
            if args.first().is_some_and(|a| a == "--") {
                args.remove(0);
            }
            let bin = match which.as_str() {
                "xdp" => "bench-xdp",
                "control-plane" => "bench-control-plane",
                "failover" => "bench-failover",
                "mass-failover" => "bench-mass-failover",
                // T1/T2: one real agent among N-1 hollow peers.
                "hollow" => "bench-hollow",
                // T6: the allocator on the real kube-apiserver, from the release binary.
                "allocator" => "bench-allocator",
                // Pure CPU (no BPF, no agents): nothing more to build.
                "heartbeat" => return run_tests_bin(&root, "bench-heartbeat", json, &args),
                "core" => return run_tests_bin(&root, "bench-core", json, &args),
                "scale" => {
                    // It runs the other benchmarks' binaries, and real agents for some parts.
                    release_agent(&root, None)?;
                    cargo(
                        &root,
                        &[
                            "build",
                            "--release",
                            "--quiet",
                            "-p",
                            "announcer-tests",
                            "--bins",
                        ],
                    )?;
                    return run_tests_bin(&root, "bench-scale", json, &args);
                }
                other => {
                    bail!(
                        "unknown benchmark {other:?}; available: xdp, control-plane, failover, mass-failover, hollow, heartbeat, core, allocator, scale"
                    )
                }
            };
            if bin != "bench-xdp" {
                // The benchmark starts agents from the release binary.
                release_agent(&root, None)?;
            }
            run_tests_bin(&root, bin, json, &args)
        }
        Cmd::Soak { json, args } => run_tests_bin(&root, "soak", json, &args),
        Cmd::Kube { action } => {
            require_root("the testbed creates network namespaces and attaches XDP")?;
            if action == kube_env::Action::Up {
                setup::ensure(Need::ControlPlane)?;
                build_with_agent(&root, "kube-env")?;
            }
            kube_env::run(&root, action)
        }
        Cmd::Demo { apiserver } => {
            require_root("the demo creates network namespaces and attaches XDP")?;
            // The embedded API server needs no Go program; a real one needs the control plane.
            setup::ensure(if apiserver == "kube" {
                Need::ControlPlane
            } else {
                Need::Build
            })?;
            build_with_agent(&root, "demo")?;
            run(Command::new(root.join("target/release/demo")).args(["--apiserver", &apiserver]))
        }
    }
}

/// The failover smoke that ends `cargo xtask test`: the agent at its defaults on the testbed,
/// the scenarios whose targets docs/benchmarks.md states ("Targets"), 5 trials each, judged by the regression
/// bounds (`--regression`: the speed targets belong to `cargo xtask bench failover`). It fails
/// (non-zero exit) when crash or link-down p99 exceeds 1 s, or SIGTERM / restart within grace
/// lose a probe or end with the wrong owner, so a real-time regression of 4× or more turns CI
/// red.
const SMOKE_ARGS: &[&str] = &[
    "--regression",
    "--systems",
    "announcer-default",
    "--scenarios",
    "crash,link-down,sigterm,restart-in-grace",
    "--trials",
    "5",
    "--idle-vips",
    "0",
    "--plot",
    "target/bench/smoke/failover.svg",
];

/// `cargo test` over the workspace, then (if `smoke`) the failover smoke; one closing line
/// totals both, and every failure is listed by name above it.
fn test(root: &Path, args: &[String], smoke: bool) -> Result<()> {
    let mut a = vec!["test", "--workspace", "--no-fail-fast"];
    a.extend(args.iter().map(String::as_str));
    let (status, mut f) = test_summary::run(root, &a, test_summary::Timeouts::from_env())?;
    let mut passed = f.totals.passed;
    let mut failed = f.totals.failed + f.crashed;
    if !status.success() && failed == 0 {
        // cargo failed without a failing test (a build error): say so rather than "0 failed".
        f.failures.push(format!("cargo test: {status} (see above)"));
        failed += 1;
    }
    if smoke {
        println!(
            "\nxtask: failover smoke: bench-failover {}",
            SMOKE_ARGS.join(" ")
        );
        match failover_smoke(root) {
            Ok(()) => passed += 1,
            Err(e) => {
                failed += 1;
                f.failures.push(format!(
                    "failover smoke (cargo xtask bench failover): {e:#}"
                ));
            }
        }
    }
    if !f.failures.is_empty() {
        println!("\nfailures:");
        for l in &f.failures {
            println!("    {l}");
        }
    }
    // The closing line CI reads: "N passed, N failed" with ignored tests as "skipped".
    println!(
        "\ntests: {passed} passed, {failed} failed, {} skipped",
        f.totals.ignored
    );
    if failed > 0 {
        bail!("{failed} failed");
    }
    if passed == 0 {
        bail!("cargo test ran no test");
    }
    Ok(())
}

fn failover_smoke(root: &Path) -> Result<()> {
    build_with_agent(root, "bench-failover")?;
    run(Command::new(root.join("target/release/bench-failover"))
        .args(SMOKE_ARGS)
        .current_dir(root))
}

/// Builds the agent and the `announcer-tests` binary `bin`, release profile (what a binary
/// that starts agents needs).
fn build_with_agent(root: &Path, bin: &str) -> Result<()> {
    cargo(
        root,
        &[
            "build",
            "--release",
            "--quiet",
            "-p",
            "announcer",
            "-p",
            "announcer-tests",
            "--bin",
            "announcer",
            "--bin",
            bin,
        ],
    )
}

/// Runs a binary of the `announcer-tests` crate in release, with `--json` if asked and then
/// `args`.
fn run_tests_bin(root: &Path, bin: &str, json: bool, args: &[String]) -> Result<()> {
    let mut a = vec![
        "run",
        "--release",
        "--quiet",
        "-p",
        "announcer-tests",
        "--bin",
        bin,
        "--",
    ];
    if json {
        a.push("--json");
    }
    a.extend(args.iter().map(String::as_str));
    cargo(root, &a)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

fn require_root(why: &str) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc_geteuid() } != 0 {
        bail!("run as root: {why}");
    }
    Ok(())
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}

/// Builds the release `announcer` binary (target/release/announcer). `xdp_version` sets the
/// embedded XDP program's version constant (`ANNOUNCER_XDP_VERSION`); `None` builds this
/// tree's, whatever the environment says.
fn release_agent(root: &Path, xdp_version: Option<u32>) -> Result<()> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "announcer",
            "--bin",
            "announcer",
        ])
        .current_dir(root);
    match xdp_version {
        Some(v) => cargo.env("ANNOUNCER_XDP_VERSION", v.to_string()),
        None => cargo.env_remove("ANNOUNCER_XDP_VERSION"),
    };
    run(&mut cargo)
}

fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    run(
        Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(args)
            .current_dir(root),
    )
}

pub(crate) fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

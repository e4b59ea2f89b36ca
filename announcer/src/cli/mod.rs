//! The `announcer` command line: one module per subcommand, each a thin layer over the
//! library below it ([`crate::dataplane`] for `load`, `unload`, `cleanup`, `vip`, `announce` and `logs`;
//! [`crate::agent::run`] for `agent`; [`crate::allocator::run`] for `allocator`; [`crate::withdrawer::run`] for `withdrawer`; the maps and [`crate::state`] for `status`;
//! [`crate::ipam`] for `migrate`).
//!
//! Why in the library rather than in `main.rs`: the subcommands' output and exit codes are
//! part of the interface operators script against, and here they are unit-tested like the
//! rest. `main.rs` only parses and dispatches.
//!
//! Every failure prints what went wrong, what to do about it, and exits with a `sysexits.h`
//! code ([`crate::dataplane::Error::exit_code`]), so scripts can tell a typo from a kernel
//! without XDP.

pub mod agent;
pub mod allocator;
pub mod announce;
pub mod cleanup;
pub mod load;
pub mod logs;
pub mod migrate;
pub mod service;
pub mod status;
pub mod vip;
pub mod withdrawer;

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand, ValueEnum};

use crate::{
    dataplane::{Error, announce::BurstConfig, pins::DEFAULT_PIN_ROOT},
    wire::MacAddr,
};

// No doc comment: clap would take it for the long help.
#[derive(Parser)]
#[command(
    version,
    about = "Layer-2 announcer: answers ARP and NDP for VIPs from XDP"
)]
pub struct Cli {
    /// Where the per-interface pins live (a directory on bpffs).
    #[arg(long, global = true, env = "ANNOUNCER_PIN_ROOT", default_value = DEFAULT_PIN_ROOT)]
    pub pin_root: PathBuf,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The subcommand.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// `--log-format`. (The variants have no doc comments: clap would print them in `--help`.)
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    // Human-readable lines.
    Text,
    // One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Cmd {
    /// Attach the responder to an interface and pin it (a second run reuses the pins, swaps a
    /// differing program in place and re-attaches in another mode if asked).
    Load(load::LoadArgs),
    /// Detach the responder from an interface and remove exactly its pins.
    Unload(load::UnloadArgs),
    /// Uninstall's last step: detach the responder from every interface with pins under the
    /// pin root, remove all of them (and optionally the agent's state directory).
    Cleanup(cleanup::CleanupArgs),
    /// Manage VIPs.
    #[command(subcommand)]
    Vip(vip::VipCmd),
    /// Send the announcement burst for a VIP (gratuitous ARP / unsolicited NA).
    Announce(announce::AnnounceArgs),
    /// Follow the program's log (malformed requests for VIPs, address conflicts) on stderr.
    Logs(logs::LogsArgs),
    /// Run the Kubernetes agent: watch Services, elect owners, drive the data plane.
    Agent(Box<crate::agent::config::AgentArgs>),
    /// Run the address allocator (the `announcer-allocator` Deployment): one replica at a time
    /// assigns addresses from the AddressPools to Services.
    Allocator(crate::allocator::AllocatorArgs),
    /// Run the withdrawal controller (the `announcer-withdrawal` Deployment): every replica
    /// sets `Ready` False on the Pods of a node a quorum of agents proved unreachable, in
    /// namespaces labelled `announcer.dev/fast-endpoint-withdrawal=true`.
    Withdrawer(crate::withdrawer::WithdrawerArgs),
    /// This node's view: the VIPs its data plane answers (MAC, expiry, counters), their owner
    /// and Service per the agent, and the agent's peers with their heartbeat age. With
    /// `--cluster`: every VIP of the cluster, from the API.
    Status(status::StatusArgs),
    /// Convert another load balancer's configuration (MetalLB's layer-2 pools) to
    /// AddressPools, printed for `kubectl apply -f -`.
    #[command(subcommand)]
    Migrate(migrate::MigrateCmd),
}

/// Where a VIP is answered: interface, VLAN, MAC (`vip add`, `vip del`, `announce`).
#[derive(clap::Args)]
pub struct At {
    /// Interface.
    #[arg(long)]
    pub iface: String,
    /// 802.1Q VLAN id (1-4094) for tagged frames; omit for untagged.
    #[arg(long)]
    pub vlan: Option<u16>,
    /// MAC to answer with (default: the interface's).
    #[arg(long)]
    pub mac: Option<MacAddr>,
}

/// The announcement burst's flags (`vip add --announce`, `announce`).
#[derive(clap::Args)]
pub struct BurstArgs {
    /// Announcement rounds (IPv6: at most 3, RFC 4861 §7.2.6).
    #[arg(long, default_value_t = BurstConfig::default().count)]
    pub count: u32,
    /// Time between rounds (IPv6: at least 1 s, RFC 4861 §7.2.6).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    pub interval: Duration,
}

impl BurstArgs {
    fn config(&self) -> BurstConfig {
        BurstConfig {
            count: self.count,
            interval: self.interval,
        }
    }
}

/// Sets up `tracing` on stderr, filtered by `RUST_LOG` (default `info`).
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

/// Prints `e` and its chain of causes on stderr.
fn print_error(e: &dyn std::error::Error) {
    eprintln!("error: {e}");
    let mut src = e.source();
    while let Some(s) = src {
        eprintln!("  caused by: {s}");
        src = s.source();
    }
}

/// Prints a data-plane error with its fix, and its exit code.
fn fail(e: &Error) -> ExitCode {
    print_error(e);
    if let Some(h) = e.hint() {
        eprintln!("  fix: {h}");
    }
    ExitCode::from(e.exit_code())
}

/// The exit code of a data-plane command, its error printed.
fn exit(result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

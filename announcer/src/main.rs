//! `announcer`: load the XDP responder, manage its VIPs, send announcements, show status.
//!
//! Every failure prints what went wrong, what to do about it, and exits with a `sysexits.h`
//! code (see `announcer::dataplane::Error::exit_code`), so scripts can tell a typo from a kernel
//! without XDP.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use announcer::{
    dataplane::{
        Dataplane, Error, Lifetime, Vip, VipStatus,
        announce::{self, BurstConfig, PacketSocket},
        loader::{self, Mode},
        logs,
        pins::{DEFAULT_PIN_ROOT, PinLayout, pinned_interfaces},
        sys::netif,
    },
    wire::MacAddr,
};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(
    version,
    about = "Layer-2 announcer: answers ARP and NDP for VIPs from XDP"
)]
struct Cli {
    /// Where the per-interface pins live (a directory on bpffs).
    #[arg(long, global = true, env = "ANNOUNCER_PIN_ROOT", default_value = DEFAULT_PIN_ROOT)]
    pin_root: PathBuf,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum ModeArg {
    /// Native, falling back to generic with a logged reason.
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode only.
    Generic,
}

#[derive(Subcommand)]
enum Cmd {
    /// Attach the responder to an interface and pin it (a second run reuses the pins: no gap).
    Load {
        /// Interface.
        #[arg(long)]
        iface: String,
        /// Attach mode.
        #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
        mode: ModeArg,
        /// If already attached, swap in this build's program atomically (upgrade without a gap;
        /// link, pins and VIPs stay).
        #[arg(long)]
        replace: bool,
    },
    /// Detach the responder from an interface and remove exactly its pins.
    Unload {
        /// Interface.
        #[arg(long)]
        iface: String,
    },
    /// Manage VIPs.
    #[command(subcommand)]
    Vip(VipCmd),
    /// Send the announcement burst for a VIP (gratuitous ARP / unsolicited NA).
    Announce {
        /// The VIP.
        vip: IpAddr,
        #[command(flatten)]
        at: At,
        #[command(flatten)]
        burst: BurstArgs,
    },
    /// Follow the program's log (malformed requests for VIPs, address conflicts) on stderr.
    Logs {
        /// Interface.
        #[arg(long)]
        iface: String,
        /// Stop after this long (default: until interrupted).
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
    },
    /// Run the Kubernetes agent: watch Services, elect owners, drive the data plane.
    Agent(Box<announcer::agent::config::AgentArgs>),
    /// This node's view: the VIPs its data plane answers (MAC, expiry, counters), their owner
    /// and Service per the agent, and the agent's peers with their heartbeat age.
    Status {
        /// Only this interface (default: every interface with pins).
        #[arg(long)]
        iface: Option<String>,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// The agent's HTTP address. Without it the default (http://127.0.0.1:9746) is asked
        /// and an unreachable agent is only reported; given, an unreachable agent also makes
        /// the command exit 69 (after printing what the maps say).
        #[arg(long, env = "ANNOUNCER_AGENT")]
        agent: Option<String>,
        /// Do not ask the agent: the data plane only.
        #[arg(long, conflicts_with = "agent")]
        no_agent: bool,
    },
}

#[derive(Subcommand)]
enum VipCmd {
    /// Answer for a VIP (one map write); with --announce, then send the burst.
    Add {
        /// The VIP (IPv4 or IPv6).
        vip: IpAddr,
        #[command(flatten)]
        at: At,
        /// Lifetime of the entry; the agent refreshes it. Ignored with --permanent.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        ttl: Duration,
        /// Never expire (static use without an agent).
        #[arg(long)]
        permanent: bool,
        /// Send the announcement burst after the map write.
        #[arg(long)]
        announce: bool,
        #[command(flatten)]
        burst: BurstArgs,
    },
    /// Stop answering for a VIP at once.
    Del {
        /// The VIP.
        vip: IpAddr,
        #[command(flatten)]
        at: At,
    },
    /// List VIPs with MAC, time to expiry and counters.
    List {
        /// Only this interface (default: every interface with pins).
        #[arg(long)]
        iface: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct At {
    /// Interface.
    #[arg(long)]
    iface: String,
    /// 802.1Q VLAN id (1-4094) for tagged frames; omit for untagged.
    #[arg(long)]
    vlan: Option<u16>,
    /// MAC to answer with (default: the interface's).
    #[arg(long)]
    mac: Option<MacAddr>,
}

#[derive(clap::Args)]
struct BurstArgs {
    /// Announcement rounds (IPv6: at most 3, RFC 4861 §7.2.6).
    #[arg(long, default_value_t = BurstConfig::default().count)]
    count: u32,
    /// Time between rounds (IPv6: at least 1 s, RFC 4861 §7.2.6).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "1s")]
    interval: Duration,
}

impl BurstArgs {
    fn config(&self) -> BurstConfig {
        BurstConfig {
            count: self.count,
            interval: self.interval,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.log_format);
    if let Cmd::Agent(args) = cli.cmd {
        return agent(*args, cli.pin_root);
    }
    if let Cmd::Status {
        iface,
        json,
        agent,
        no_agent,
    } = &cli.cmd
    {
        return status(
            &cli.pin_root,
            iface.as_deref(),
            *json,
            agent.as_deref(),
            *no_agent,
        );
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&e);
            if let Some(h) = e.hint() {
                eprintln!("  fix: {h}");
            }
            ExitCode::from(e.exit_code())
        }
    }
}

/// `announcer agent`: runs until SIGTERM or SIGINT, then hands its VIPs over and exits 0.
fn agent(args: announcer::agent::config::AgentArgs, pin_root: PathBuf) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(71);
        }
    };
    let result = rt.block_on(async move {
        let shutdown = async {
            use tokio::signal::unix::{SignalKind, signal};
            let (mut term, mut int) = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) {
                (Ok(t), Ok(i)) => (t, i),
                _ => return std::future::pending().await,
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        };
        announcer::agent::run(args, pin_root, shutdown).await
    });
    // Background tasks (bursts in flight, watches) end with the runtime.
    rt.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            print_error(&e);
            // EX_CONFIG for configuration problems, EX_UNAVAILABLE otherwise.
            ExitCode::from(match e {
                announcer::agent::AgentError::Config(_)
                | announcer::agent::AgentError::Selector(_)
                | announcer::agent::AgentError::SelectorSyntax(_)
                | announcer::agent::AgentError::KubeConfig(_)
                | announcer::agent::AgentError::Key(_)
                | announcer::agent::AgentError::Identity(_) => 78,
                announcer::agent::AgentError::State(_) => 73, // EX_CANTCREAT
                _ => 69,
            })
        }
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

fn init_tracing(format: LogFormat) {
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

fn run(cli: Cli) -> Result<(), Error> {
    let root = cli.pin_root.as_path();
    match cli.cmd {
        Cmd::Load {
            iface,
            mode,
            replace,
        } => {
            if replace && PinLayout::new(root, &iface).is_loaded() {
                match loader::replace(root, &iface) {
                    Ok(id) => {
                        println!(
                            "replaced the program on {iface} in place: program id {id}; link, pins and VIPs kept"
                        );
                        return Ok(());
                    }
                    // A stale pin (interface recreated): the plain load below re-attaches.
                    Err(Error::NotLoaded(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            let mode = match mode {
                ModeArg::Auto => Mode::Auto,
                ModeArg::Native => Mode::Native,
                ModeArg::Generic => Mode::Generic,
            };
            let r = loader::load(root, &iface, mode)?;
            if let Some(old) = r.stale_ifindex {
                println!(
                    "replaced a stale attachment (was on ifindex {old}: the interface was recreated); VIPs kept"
                );
                let now = netif::mac(&iface)?;
                for v in Dataplane::open(root, &iface)?
                    .list()?
                    .iter()
                    .filter(|v| v.mac != now)
                {
                    println!(
                        "warning: {} answers with {}, but {iface} is now {now}: re-add it if that was the old interface's MAC",
                        v.vip.addr, v.mac
                    );
                }
            }
            match r.attached {
                Some(m) => println!(
                    "attached to {} (ifindex {}) in {m} mode, program id {}{}",
                    r.iface,
                    r.ifindex,
                    r.program_id,
                    r.fallback_reason
                        .map(|w| format!(" (native failed: {w})"))
                        .unwrap_or_default()
                ),
                None => println!(
                    "already attached to {} (program id {}); pins reused, nothing changed",
                    r.iface, r.program_id
                ),
            }
            println!("pins: {}", PinLayout::new(root, &iface).dir().display());
        }
        Cmd::Unload { iface } => {
            let r = loader::unload(root, &iface)?;
            println!("detached from {iface}; removed {} pins", r.removed.len());
        }
        Cmd::Vip(VipCmd::Add {
            vip,
            at,
            ttl,
            permanent,
            announce,
            burst,
        }) => {
            let v = Vip::new(vip, at.vlan)?;
            let mac = match at.mac {
                Some(m) => m,
                None => netif::mac(&at.iface)?,
            };
            let lifetime = if permanent {
                Lifetime::Permanent
            } else {
                Lifetime::Ttl(ttl)
            };
            Dataplane::open(root, &at.iface)?.upsert(v, mac, lifetime)?;
            println!(
                "answering for {vip} on {} as {mac}",
                describe(&at.iface, v.vlan)
            );
            if v.vlan != 0 && netif::rx_vlan_offload(&at.iface) == Some(true) {
                eprintln!(
                    "note: {iface} has rx-vlan-offload on; NICs that strip 802.1Q tags in hardware hide them \
                     from XDP (veth does not). If tagged requests go unanswered: ethtool -K {iface} rxvlan off",
                    iface = at.iface
                );
            }
            if announce {
                send_burst(&at, vip, mac, &burst.config())?;
            }
        }
        Cmd::Vip(VipCmd::Del { vip, at }) => {
            let v = Vip::new(vip, at.vlan)?;
            Dataplane::open(root, &at.iface)?.remove(v)?;
            println!(
                "stopped answering for {vip} on {}",
                describe(&at.iface, v.vlan)
            );
        }
        Cmd::Vip(VipCmd::List { iface, json }) => {
            let rows = collect(root, iface.as_deref())?;
            print_vips(&rows, json);
        }
        Cmd::Announce { vip, at, burst } => {
            let mac = match at.mac {
                Some(m) => m,
                None => netif::mac(&at.iface)?,
            };
            Vip::new(vip, at.vlan)?;
            send_burst(&at, vip, mac, &burst.config())?;
        }
        Cmd::Agent(_) | Cmd::Status { .. } => unreachable!("handled in main"),
        Cmd::Logs { iface, duration } => {
            let mut log = logs::attach(root, &iface)?;
            let until = duration.map(|d| std::time::Instant::now() + d);
            logs::follow(&mut log, Duration::from_millis(200), || {
                until.is_none_or(|t| std::time::Instant::now() < t)
            })?;
        }
    }
    Ok(())
}

fn describe(iface: &str, vlan: u16) -> String {
    if vlan == 0 {
        iface.to_owned()
    } else {
        format!("{iface} vlan {vlan}")
    }
}

fn send_burst(at: &At, vip: IpAddr, mac: MacAddr, cfg: &BurstConfig) -> Result<(), Error> {
    let ifindex = netif::ifindex(&at.iface)?;
    let sock = PacketSocket::open(ifindex).map_err(|e| match e {
        announce::AnnounceError::Open { source, .. }
            if source.raw_os_error() == Some(libc::EPERM) =>
        {
            Error::Privileges {
                action: "open a raw packet socket",
                source,
            }
        }
        other => Error::Io {
            context: "announcing".into(),
            source: std::io::Error::other(other),
        },
    })?;
    let r = announce::burst_blocking(&sock, mac, vip, at.vlan, cfg);
    println!(
        "announced {vip} from {mac}: {} frames sent, {} failed",
        r.sent, r.failed
    );
    Ok(())
}

/// Interfaces with pins under `root`, or just `only`.
fn interfaces(root: &Path, only: Option<&str>) -> Vec<String> {
    match only {
        Some(i) => vec![i.to_owned()],
        None => pinned_interfaces(root),
    }
}

fn collect(root: &Path, only: Option<&str>) -> Result<Vec<(String, VipStatus)>, Error> {
    let mut rows = Vec::new();
    for iface in interfaces(root, only) {
        for r in Dataplane::open(root, &iface)?.list()? {
            rows.push((iface.clone(), r));
        }
    }
    Ok(rows)
}

fn expiry(r: &VipStatus) -> String {
    match r.expires_in {
        None => "permanent".into(),
        Some(d) if d.is_zero() => "EXPIRED".into(),
        Some(d) => format!("{:.1}s", d.as_secs_f64()),
    }
}

fn vip_json(iface: &str, r: &VipStatus) -> serde_json::Value {
    serde_json::json!({
        "iface": iface,
        "vip": r.vip.addr.to_string(),
        "vlan": r.vip.vlan,
        "mac": r.mac.to_string(),
        "live": r.is_live(),
        "expires_in_s": r.expires_in.map(|d| d.as_secs_f64()),
        "answered": r.stats.answered,
        "expired": r.stats.expired,
        "malformed": r.stats.malformed,
    })
}

fn print_vips(rows: &[(String, VipStatus)], json: bool) {
    if json {
        let v: Vec<_> = rows.iter().map(|(i, r)| vip_json(i, r)).collect();
        println!("{}", serde_json::Value::Array(v));
        return;
    }
    println!(
        "{:<10} {:<28} {:>4} {:<17} {:>10} {:>10} {:>8} {:>9}",
        "IFACE", "VIP", "VLAN", "MAC", "EXPIRES", "ANSWERED", "EXPIRED", "MALFORMED"
    );
    for (iface, r) in rows {
        println!(
            "{:<10} {:<28} {:>4} {:<17} {:>10} {:>10} {:>8} {:>9}",
            iface,
            r.vip.addr,
            r.vip.vlan,
            r.mac,
            expiry(r),
            r.stats.answered,
            r.stats.expired,
            r.stats.malformed
        );
    }
}

/// `announcer status`: the maps, merged with the agent's `/state` (see `announcer::status`).
fn status(
    root: &Path,
    only: Option<&str>,
    json: bool,
    agent: Option<&str>,
    no_agent: bool,
) -> ExitCode {
    let url = (!no_agent).then(|| agent.unwrap_or(announcer::status::DEFAULT_AGENT));
    let report = match announcer::status::gather(root, only, url) {
        Ok(r) => r,
        Err(e) => {
            print_error(&e);
            if let Some(h) = e.hint() {
                eprintln!("  fix: {h}");
            }
            return ExitCode::from(e.exit_code());
        }
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(70);
            }
        }
    } else {
        print!("{}", announcer::status::render(&report));
    }
    if report.agent_unreachable() && agent.is_some() {
        // EX_UNAVAILABLE: the maps were shown, the agent asked for did not answer.
        return ExitCode::from(69);
    }
    ExitCode::SUCCESS
}

//! `apiserver`: the in-repo kube-apiserver stand-in as a process, for benchmarks and demos that
//! run agents as separate processes. Prints the listening address (`127.0.0.1:PORT`) as the
//! first line of stdout, writes kubeconfigs if asked, and serves until SIGTERM or SIGINT.
//! Faults and counters are driven through `/_admin/` (see `tests/APISERVER.md`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use announcer_tests::apiserver::ApiServer;
use anyhow::Context;
use clap::Parser;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Parser, Debug)]
#[command(about = "A kube-apiserver stand-in for the announcer agent's tests and benchmarks")]
struct Args {
    /// Address to listen on (port 0: pick a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig here (user = the first token, or "admin").
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
    /// Client tokens: with --kubeconfig-out, also write one kubeconfig per token as `PATH.<token>`.
    #[arg(long, value_delimiter = ',')]
    tokens: Vec<String>,
    /// YAML/JSON multi-document file of objects to create at start.
    #[arg(long)]
    seed: Option<PathBuf>,
    /// Interval of watch BOOKMARK events (e.g. "1s", "60s").
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    bookmark_interval: Duration,
    /// Watch events retained for resuming watches.
    #[arg(long, default_value_t = 10_000)]
    history: usize,
    /// Seed of the error-fault RNG.
    #[arg(long, default_value_t = 0)]
    fault_seed: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut builder = ApiServer::builder()
        .listen(args.listen)
        .bookmark_interval(args.bookmark_interval)
        .history(args.history)
        .fault_seed(args.fault_seed);
    if let Some(seed) = &args.seed {
        builder = builder.seed_file(seed)?;
    }
    let server = builder.start().await?;
    if let Some(path) = &args.kubeconfig_out {
        let tokens: Vec<&str> = args.tokens.iter().map(String::as_str).collect();
        let all = if tokens.is_empty() {
            vec!["admin"]
        } else {
            tokens.clone()
        };
        std::fs::write(path, server.kubeconfig(&all))
            .with_context(|| format!("writing {}", path.display()))?;
        for token in tokens {
            let mut per_token = path.clone().into_os_string();
            per_token.push(format!(".{token}"));
            server.write_kubeconfig(PathBuf::from(per_token), token)?;
        }
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", server.addr())?;
    stdout.flush()?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    server.shutdown().await;
    Ok(())
}

//! `announcer logs`: follow the program's rare events on stderr ([`crate::dataplane::logs`]).

use std::{path::Path, process::ExitCode, time::Duration};

use crate::dataplane::{Error, logs};

/// `announcer logs`' flags.
#[derive(clap::Args)]
pub struct LogsArgs {
    /// Interface.
    #[arg(long)]
    pub iface: String,
    /// Stop after this long (default: until interrupted).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub duration: Option<Duration>,
}

/// `announcer logs`.
pub fn run(root: &Path, args: LogsArgs) -> ExitCode {
    super::exit(try_run(root, args))
}

fn try_run(root: &Path, LogsArgs { iface, duration }: LogsArgs) -> Result<(), Error> {
    let mut log = logs::attach(root, &iface)?;
    let until = duration.map(|d| std::time::Instant::now() + d);
    logs::follow(&mut log, Duration::from_millis(200), || {
        until.is_none_or(|t| std::time::Instant::now() < t)
    })
}

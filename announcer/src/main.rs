//! `announcer`: load the XDP responder, manage its VIPs, send announcements, run the agent,
//! show status. Parses the command line and hands it to [`announcer::cli`].

use std::process::ExitCode;

use announcer::cli::{self, Cli, Cmd};
use clap::Parser;

fn main() -> ExitCode {
    let Cli {
        pin_root,
        log_format,
        cmd,
    } = Cli::parse();
    cli::init_tracing(log_format);
    match cmd {
        Cmd::Load(args) => cli::load::load(&pin_root, args),
        Cmd::Unload(args) => cli::load::unload(&pin_root, args),
        Cmd::Cleanup(args) => cli::cleanup::run(&pin_root, args),
        Cmd::Vip(cmd) => cli::vip::run(&pin_root, cmd),
        Cmd::Announce(args) => cli::announce::run(args),
        Cmd::Logs(args) => cli::logs::run(&pin_root, args),
        Cmd::Agent(args) => cli::agent::run(*args, pin_root),
        Cmd::Allocator(args) => cli::allocator::run(args),
        Cmd::Withdrawer(args) => cli::withdrawer::run(args),
        Cmd::Status(args) => cli::status::run(&pin_root, args),
        Cmd::Migrate(cmd) => cli::migrate::run(cmd),
    }
}

//! `announcer cleanup`: the last step of an uninstall. Detaches the responder from every
//! interface that has pins under the pin root, removes every pin there (and the root), and
//! with `--state-dir` the agent's state directory, printing each thing it removed.
//!
//! Why a command of its own rather than `unload` per interface: after `kubectl delete` nobody
//! remembers which interfaces the agent attached to, and stale pins (interfaces since
//! deleted) must go too. Running it twice is harmless: the second run finds nothing and says
//! so (exit 0), so a one-shot per node can be retried blindly.

use std::{
    io,
    path::{Path, PathBuf},
    process::ExitCode,
};

use crate::dataplane::{Error, loader};

/// `announcer cleanup`'s flags.
#[derive(clap::Args)]
pub struct CleanupArgs {
    /// Also remove the agent's state directory (its node identity and last VIP set), e.g.
    /// `/var/lib/announcer`.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Then keep running until SIGTERM or SIGINT: the main container of the uninstall
    /// DaemonSet (`deploy/uninstall/`), so that it counts as available once its node is clean.
    #[arg(long)]
    pub wait: bool,
}

/// `announcer cleanup`.
pub fn run(root: &Path, args: CleanupArgs) -> ExitCode {
    let wait = args.wait;
    // Blocked before any work so that a SIGTERM arriving meanwhile is kept for the wait below.
    let signals = wait.then(block_termination).flatten();
    let code = super::exit(try_run(root, args));
    if let Some(set) = signals {
        println!("waiting for SIGTERM");
        let _ = set.wait();
    }
    code
}

/// Blocks SIGTERM and SIGINT in this (single-threaded) process, to be waited for.
fn block_termination() -> Option<nix::sys::signal::SigSet> {
    use nix::sys::signal::{SigSet, Signal};
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    set.thread_block().ok().map(|()| set)
}

fn try_run(root: &Path, CleanupArgs { state_dir, .. }: CleanupArgs) -> Result<(), Error> {
    let r = loader::cleanup(root)?;
    for (iface, id) in &r.detached {
        println!("detached the program (id {id}) from {iface}");
    }
    for p in &r.removed {
        println!("removed {}", p.display());
    }
    let mut removed_state = false;
    if let Some(dir) = state_dir {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {
                println!("removed {}", dir.display());
                removed_state = true;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("removing {}", dir.display()), e)),
        }
    }
    if r.detached.is_empty() && r.removed.is_empty() && !removed_state {
        println!("nothing to remove under {}", root.display());
    }
    Ok(())
}

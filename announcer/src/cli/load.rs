//! `announcer load` and `announcer unload`: attach the responder to an interface and pin it,
//! or detach it and remove its pins ([`crate::dataplane::loader`]).

use std::{path::Path, process::ExitCode};

use clap::ValueEnum;

use crate::dataplane::{
    Dataplane, Error,
    loader::{self, Mode},
    pins::PinLayout,
    sys::netif,
};

/// `announcer load`'s flags.
#[derive(clap::Args)]
pub struct LoadArgs {
    /// Interface.
    #[arg(long)]
    pub iface: String,
    /// Attach mode.
    #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
    pub mode: ModeArg,
    /// If already attached, swap in this build's program atomically (upgrade without a gap;
    /// link, pins and VIPs stay).
    #[arg(long)]
    pub replace: bool,
}

/// `announcer unload`'s flags.
#[derive(clap::Args)]
pub struct UnloadArgs {
    /// Interface.
    #[arg(long)]
    pub iface: String,
}

/// `--mode`.
#[derive(Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Native, falling back to generic with a logged reason.
    Auto,
    /// Native (driver) mode only.
    Native,
    /// Generic (skb) mode only.
    Generic,
}

/// `announcer load`.
pub fn load(root: &Path, args: LoadArgs) -> ExitCode {
    super::exit(try_load(root, args))
}

/// `announcer unload`.
pub fn unload(root: &Path, args: UnloadArgs) -> ExitCode {
    super::exit(try_unload(root, args))
}

fn try_load(
    root: &Path,
    LoadArgs {
        iface,
        mode,
        replace,
    }: LoadArgs,
) -> Result<(), Error> {
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
    Ok(())
}

fn try_unload(root: &Path, UnloadArgs { iface }: UnloadArgs) -> Result<(), Error> {
    let r = loader::unload(root, &iface)?;
    println!("detached from {iface}; removed {} pins", r.removed.len());
    Ok(())
}

//! `announcer load` and `announcer unload`: attach the responder to an interface and pin it
//! (or bring a running one up to this build: swap a differing program, re-attach in another
//! mode, migrate maps), or detach it and remove its pins ([`crate::dataplane::loader`]).

use std::{path::Path, process::ExitCode};

use clap::ValueEnum;

use crate::dataplane::{
    Dataplane, Error,
    loader::{self, LoadOptions, Mode, Object},
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
    /// Swap in this build's program even if the running one is identical (a plain `load`
    /// already swaps a program that differs, atomically; link, pins and VIPs stay).
    #[arg(long)]
    pub replace: bool,
    /// Run this build's program with another version stamped in (its tag differs): upgrade
    /// drills and tests.
    #[arg(long, hide = true)]
    pub program_version: Option<u32>,
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
        program_version,
    }: LoadArgs,
) -> Result<(), Error> {
    let mode = match mode {
        ModeArg::Auto => Mode::Auto,
        ModeArg::Native => Mode::Native,
        ModeArg::Generic => Mode::Generic,
    };
    let opts = LoadOptions {
        object: match program_version {
            Some(v) => Object::with_version(v)?,
            None => Object::embedded(),
        },
        force_swap: replace,
    };
    let r = loader::load_with(root, &iface, mode, &opts)?;
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
    for m in &r.migrated {
        println!(
            "migrated map {} ({}): {} entries copied, {} dropped",
            m.map, m.why, m.copied, m.dropped
        );
    }
    match (&r.mode_change, r.attached, &r.swapped) {
        (Some(c), Some(m), _) => println!(
            "re-attached to {} (ifindex {}) in {m} mode (was {}), program id {}, tag {}; {:.1} ms without XDP",
            r.iface,
            r.ifindex,
            c.from.as_str(),
            r.program_id,
            r.tag,
            c.gap.as_secs_f64() * 1e3
        ),
        (_, Some(m), _) => println!(
            "attached to {} (ifindex {}) in {m} mode, program id {}, tag {}{}",
            r.iface,
            r.ifindex,
            r.program_id,
            r.tag,
            r.fallback_reason
                .as_ref()
                .map(|w| format!(" (native failed: {w})"))
                .unwrap_or_default()
        ),
        (_, None, Some(s)) => println!(
            "replaced the program on {} in place: program id {} (tag {}) was {} (tag {}); link, pins and VIPs kept",
            r.iface,
            r.program_id,
            r.tag,
            s.from_id,
            s.from_tag
                .map_or("unreadable".to_owned(), |t| t.to_string())
        ),
        (_, None, None) => println!(
            "already attached to {} (program id {}, tag {}): same program, pins reused, nothing changed",
            r.iface, r.program_id, r.tag
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

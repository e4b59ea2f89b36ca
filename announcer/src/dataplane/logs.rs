//! Carries the XDP program's rare events (aya-log records: a malformed request for a VIP, an
//! address conflict, a failed resize) into this process's `tracing` output.
//!
//! The program writes records to its `AYA_LOGS` ring buffer only off the answer path and at most
//! once per second per CPU; nothing is lost if nobody reads for a while (the ring holds 128 KiB).
//! The records arrive through the `log` facade, which `tracing-subscriber` forwards with its
//! target set to the program's module (`announcer_xdp::program`).

use std::{os::fd::AsFd, path::Path, time::Duration};

use aya_log::EbpfLogger;

use super::{
    error::{Error, Result},
    pins::PinLayout,
};

/// A reader of one interface's program log.
pub type ProgramLog = EbpfLogger<&'static dyn log::Log>;

/// Attaches to the log of the program pinned for `iface` under `root`.
pub fn attach(root: &Path, iface: &str) -> Result<ProgramLog> {
    let pins = PinLayout::new(root, iface);
    if !pins.is_loaded() {
        return Err(Error::NotLoaded(iface.to_owned()));
    }
    let program_id = pins.program_id()?;
    EbpfLogger::init_from_id(program_id).map_err(|e| Error::bpf("attaching to the program log", e))
}

/// Forwards records until `keep_going` returns false, waking at least every `tick`.
pub fn follow(
    log: &mut ProgramLog,
    tick: Duration,
    mut keep_going: impl FnMut() -> bool,
) -> Result<()> {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let timeout =
        PollTimeout::try_from(tick.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::MAX);
    while keep_going() {
        let mut fds = [PollFd::new(log.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::io("polling the program log", e.into())),
        }
        log.flush();
    }
    log.flush();
    Ok(())
}

/// The agent's form: forwards records as they arrive until `shutdown` completes.
pub async fn forward(
    log: ProgramLog,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    // SAFETY: the logger owns the ring buffer's fd and keeps it open, unreplaced, for as long as
    // the AsyncFd owns the logger.
    let mut fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(log, tokio::io::Interest::READABLE)
    }
    .map_err(|e| Error::io("registering the program log", e.into()))?;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            guard = fd.readable_mut() => {
                let mut guard = guard.map_err(|e| Error::io("waiting for the program log", e))?;
                guard.get_inner_mut().flush();
                guard.clear_ready();
            }
        }
    }
}

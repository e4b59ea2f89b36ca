//! One way to run a child process in a test world: [`Guarded`]; and the local ports the
//! worlds' processes listen on ([`free_port`]).
//!
//! Why one type: the worlds used to kill their processes in different ways (one set a
//! parent-death signal, two only killed on drop), so a test process that died by a signal could
//! leave agents running in one world and not in another. A `Guarded` child gets
//! `PR_SET_PDEATHSIG(SIGKILL)` at spawn (the kernel kills it if the spawning thread dies
//! first, even by SIGKILL) and is SIGKILLed and reaped on drop, also when the test panics.
//!
//! Pitfall: the parent-death signal follows the *thread* that spawned the child, not the
//! process; spawn from a thread that lives as long as the world (the test's thread, or a
//! runtime worker that is not torn down early).

use std::{
    io,
    net::TcpListener,
    ops::{Deref, DerefMut},
    os::unix::process::{CommandExt, ExitStatusExt},
    process::{Child, Command, ExitStatus},
};

/// A child process that dies with the spawning thread, and is SIGKILLed and reaped on drop.
/// Derefs to the [`Child`] for pipes, `id()` and waiting.
#[derive(Debug)]
pub struct Guarded {
    child: Child,
    exited: Option<ExitStatus>,
}

impl Guarded {
    /// Spawns `cmd` with a parent-death SIGKILL.
    pub fn spawn(cmd: &mut Command) -> io::Result<Self> {
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(Self {
            child: cmd.spawn()?,
            exited: None,
        })
    }

    /// SIGKILLs and reaps it (idempotent); how it ended.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
        self.exited
    }

    /// Sends `signal` unless it was reaped already.
    pub fn signal(&self, signal: i32) {
        if self.exited.is_none() {
            // SAFETY: kill(2) on our own child, not yet reaped, so its pid is not reused.
            unsafe { libc::kill(self.child.id() as i32, signal) };
        }
    }

    /// Whether it has exited (reaping it if so); how, once it has.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }
}

/// The exit code, or 128 + the signal number if a signal ended the process (as shells do).
pub fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// A free TCP port on 127.0.0.1 (also used for UDP heartbeats), never one this process handed
/// out before: the kernel may offer a port again as soon as its probe socket closes, before the
/// agent it was meant for has bound it, and two agents would then share it.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        if GIVEN.lock().expect("port set").insert(port) {
            return port;
        }
    }
}

impl Deref for Guarded {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Guarded {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn dropping_a_guarded_child_kills_and_reaps_it() {
        let g = Guarded::spawn(Command::new("sleep").arg("100")).expect("spawn sleep");
        let pid = g.id();
        drop(g);
        // Reaped: no /proc entry (a zombie would still have one).
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_killed_child_reports_sigkill_as_137() {
        let mut g = Guarded::spawn(Command::new("sleep").arg("100")).expect("spawn sleep");
        assert_eq!(g.kill().map(exit_code), Some(137));
        assert_eq!(g.kill().map(exit_code), Some(137));
    }
}

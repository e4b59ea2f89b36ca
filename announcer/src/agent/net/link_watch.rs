//! Noticing that this node's interfaces changed, without polling them.
//!
//! Why: the agent must know when a link it announces on goes down or comes back, or gains or
//! loses an address (the interface a VIP goes on, and the links it publishes in its Lease,
//! depend on them). Re-reading every interface four times a second found that out within
//! 250 ms but cost an idle agent an eighth of its CPU (a netlink dump each time). The kernel
//! announces every such change on the rtnetlink multicast groups (`RTMGRP_LINK`,
//! `RTMGRP_IPV4_IFADDR`, `RTMGRP_IPV6_IFADDR`, rtnetlink(7)); [`LinkWatch`] listens to them and
//! says only *that* something changed. The caller then re-reads the interfaces
//! ([`super::iface::snapshot`]), so no message is parsed here.
//!
//! Pitfalls it handles:
//! * a full socket buffer drops messages (`ENOBUFS`): counted as a change;
//! * a storm of changes (a busy node creating and deleting pods' veths) is coalesced: at most
//!   one wake-up per [`MIN_GAP`];
//! * a change the kernel does not announce on these groups (or a socket that could not be
//!   opened at all) is still seen by a slow re-read every [`FALLBACK`] (every [`POLL`] without
//!   the socket, as before).

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, socket,
};
use tokio::{
    io::{Interest, unix::AsyncFd},
    time::{Instant, Interval, MissedTickBehavior},
};

/// The least time between two wake-ups: a storm of netlink messages costs at most this many
/// re-reads a second.
pub const MIN_GAP: Duration = Duration::from_millis(100);
/// How often the interfaces are re-read even if the kernel said nothing.
pub const FALLBACK: Duration = Duration::from_secs(2);
/// How often they are re-read when the netlink socket could not be opened.
pub const POLL: Duration = Duration::from_millis(250);

/// Wakes when the interfaces may have changed ([`LinkWatch::changed`]); the first call returns
/// at once, so the caller reads them at start.
pub struct LinkWatch {
    /// The rtnetlink socket, bound to the link and address groups; `None`: polling only.
    sock: Option<AsyncFd<OwnedFd>>,
    fallback: Interval,
    last: Option<Instant>,
}

impl LinkWatch {
    /// Subscribes to link and address changes. Never fails: without a netlink socket (an
    /// error is returned alongside for the caller to log) it polls every [`POLL`].
    pub fn new() -> (Self, Option<io::Error>) {
        Self::with_fallback(FALLBACK)
    }

    /// [`LinkWatch::new`] with another re-read period than [`FALLBACK`] (a test that must see
    /// the kernel's message, not the re-read, sets it long).
    pub fn with_fallback(every: Duration) -> (Self, Option<io::Error>) {
        let (sock, err) = match subscribe() {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        let mut fallback = tokio::time::interval(if sock.is_some() { every } else { POLL });
        fallback.set_missed_tick_behavior(MissedTickBehavior::Delay);
        (
            LinkWatch {
                sock,
                fallback,
                last: None,
            },
            err,
        )
    }

    /// Whether it listens to the kernel (else it polls).
    pub fn subscribed(&self) -> bool {
        self.sock.is_some()
    }

    /// Returns when the interfaces may have changed since the last return: the kernel sent a
    /// link or address message, or [`FALLBACK`] passed. Cancel-safe (a message not yet drained
    /// wakes the next call).
    pub async fn changed(&mut self) {
        if let Some(last) = self.last {
            tokio::time::sleep_until(last + MIN_GAP).await;
        }
        match &self.sock {
            Some(sock) => {
                tokio::select! {
                    r = sock.readable() => {
                        if let Ok(mut ready) = r {
                            drain(ready.get_inner());
                            ready.clear_ready();
                        }
                    }
                    _ = self.fallback.tick() => {}
                }
            }
            None => {
                self.fallback.tick().await;
            }
        }
        self.last = Some(Instant::now());
    }
}

/// A non-blocking rtnetlink socket subscribed to link and IPv4/IPv6 address changes.
fn subscribe() -> io::Result<AsyncFd<OwnedFd>> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )?;
    let groups = (libc::RTMGRP_LINK | libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))?;
    // SAFETY: the OwnedFd is open, owned by the AsyncFd from here on, and always returns the
    // same descriptor.
    unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }.map_err(|e| e.into_parts().1)
}

/// Reads and drops every message waiting (their content does not matter: the caller re-reads
/// the interfaces), until the socket would block. `ENOBUFS` (messages were lost) only means
/// that something changed, which the caller assumes anyway.
fn drain(fd: &OwnedFd) {
    let mut buf = [0u8; 8192];
    loop {
        match recv(fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return,
            Ok(_) | Err(nix::errno::Errno::ENOBUFS) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

//! The heartbeat socket: sends this node's sealed heartbeats to its peers and feeds verified
//! ones to the election.
//!
//! Why a plain UDP socket: heartbeats must keep flowing when the API server does not, and
//! must cost next to nothing at ten per second per peer. Everything that makes them safe
//! (authentication, replay protection, the wire format) is in the sans-IO
//! [`crate::heartbeat`]; this module only moves datagrams and counts what happened to them,
//! so the counters can become metrics.
//!
//! Sending is best effort and never waits: a heartbeat that cannot be sent now is worth
//! nothing later, the next one follows within a period. Receiving runs on a thread of its own
//! ([`HeartbeatSocket::spawn_receiver`]) until the agent stops.
//!
//! # Hundreds of peers
//!
//! A node seals one datagram per peer and period, and hears one from each. Both ways go in
//! batches ([`mmsg`]): a round to 1,000 peers is 16 `sendmmsg(2)` calls rather than 1,000
//! `sendto(2)`, and the receiver reads up to 64 datagrams per `recvmmsg(2)`. The socket's
//! buffers are sized for such rounds ([`RECV_BUFFER`], [`SEND_BUFFER`]).
//!
//! # Floods
//!
//! Anyone on the segment can send datagrams to the heartbeat port, and each costs the receiver
//! a look at its header (and, from a known sender, an HMAC). What a flood can still do is fill
//! the socket's queue, so that the kernel drops real heartbeats with the noise and owners
//! become suspects; the probe of their data plane then keeps their VIPs where they are. To keep
//! that rare, and the rest of the agent unaffected:
//!
//! * Rejections cost no log line each. A stranger's flood used to write one debug line per
//!   datagram, which was most of the receive cost: at 70,000 datagrams a second the agent read
//!   fewer than half and the kernel dropped up to 11,600 in five seconds, real heartbeats among
//!   them (`flood_from_client_namespace_moves_no_vip`). Rejections are now counted (the
//!   `announcer_heartbeats_rejected_total` metric) and summed up at debug level at most once
//!   per [`REJECT_SUMMARY_EVERY`] ([`RejectSummary`]); the same flood now loses a few hundred
//!   and heartbeats almost never. Rejections from a known peer (its tag verified) still warn,
//!   at most once a minute per reason.
//! * The receive loop has its own thread, so a flood costs that thread, not the election's,
//!   whose runtime also reads probe answers and runs the core's timers.

use std::{
    fmt, io,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    os::fd::AsFd,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use nix::{
    errno::Errno,
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::socket::{GetSockOpt, SetSockOpt, getsockopt, setsockopt, sockopt},
};

use tokio::sync::mpsc;

use crate::{
    election::NodeName,
    heartbeat::{Keyring, Reject, Verified, Verifier},
};

mod mmsg;

/// The receive buffer asked for (`SO_RCVBUF`; the kernel doubles it for its bookkeeping):
/// a few rounds from 1,000 peers. Each datagram is charged its buffer's true size: 832 bytes
/// for a heartbeat on loopback (measured, 6.x kernel), up to 2.3 KB through NIC drivers that
/// give each frame half a page, so the default 208 KiB holds 90 to 250 of them. A round from
/// 1,000 peers arrives within one period, and a receiving thread held up for a millisecond
/// or two would lose heartbeats. 4 MiB (8 MiB charged) holds at least 3,500.
pub const RECV_BUFFER: usize = 4 << 20;

/// The send buffer asked for (`SO_SNDBUF`): a round to 1,000 peers at once. A sent
/// heartbeat (80 to 200 bytes, by the two node names' lengths) is charged 832 to 1,280 bytes
/// until the NIC has sent it, so the default 208 KiB holds 160 to 250, and a batched round
/// queues all of them within microseconds, far faster than a 1 Gb/s link drains them: the
/// rest would fail with `EAGAIN`. 1 MiB (2 MiB charged) holds at least 1,600.
pub const SEND_BUFFER: usize = 1 << 20;

/// The default heartbeat port: next to the agent's HTTP port (9746), and not 7946, which is
/// MetalLB's memberlist port, so the agent can run beside MetalLB during a migration.
pub const DEFAULT_PORT: u16 = 9747;

/// The default bind address: every IPv4 address, [`DEFAULT_PORT`]. Bind `[::]:9747` for a
/// dual-stack socket when peers have IPv6 addresses.
pub const DEFAULT_BIND: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, DEFAULT_PORT));

/// Why the heartbeat socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    /// `bind(2)` failed: the port is taken, or the address is not local.
    #[error(
        "cannot bind the heartbeat socket to {addr} (is another agent running, or the port taken?)"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The error from `bind(2)`.
        #[source]
        source: io::Error,
    },
}

/// Counters of the heartbeat socket, shared with whoever exports metrics.
#[derive(Debug, Default)]
pub struct HeartbeatStats {
    sent: AtomicU64,
    send_errors: AtomicU64,
    accepted: AtomicU64,
    receive_errors: AtomicU64,
    rejected: [AtomicU64; Reject::ALL.len()],
}

impl HeartbeatStats {
    /// A consistent-enough copy of every counter (each is read atomically on its own).
    pub fn snapshot(&self) -> HeartbeatStatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        HeartbeatStatsSnapshot {
            sent: get(&self.sent),
            send_errors: get(&self.send_errors),
            accepted: get(&self.accepted),
            receive_errors: get(&self.receive_errors),
            rejected: std::array::from_fn(|i| get(&self.rejected[i])),
        }
    }

    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// The counters at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HeartbeatStatsSnapshot {
    /// Datagrams the kernel accepted for sending.
    pub sent: u64,
    /// Datagrams that could not be sent (one per peer and failure).
    pub send_errors: u64,
    /// Heartbeats verified and forwarded.
    pub accepted: u64,
    /// Failed `recvmmsg(2)` calls.
    pub receive_errors: u64,
    /// Rejected datagrams, indexed by [`Reject::index`].
    pub rejected: [u64; Reject::ALL.len()],
}

impl HeartbeatStatsSnapshot {
    /// Datagrams rejected for `reason`.
    pub fn rejected(&self, reason: Reject) -> u64 {
        self.rejected[reason.index()]
    }

    /// `(reason label, count)` for every reason, for metrics.
    pub fn rejects(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        Reject::ALL.iter().map(|r| (r.reason(), self.rejected(*r)))
    }
}

/// What one [`HeartbeatSocket::send`] or [`HeartbeatSocket::send_batch`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Peers the datagram went to.
    pub sent: u32,
    /// Peers it could not be sent to (each logged at debug level).
    pub failed: u32,
}

/// The UDP socket heartbeats travel on. Cheap to clone: clones share the socket and the
/// counters, so one thread can receive while another sends.
#[derive(Clone, Debug)]
pub struct HeartbeatSocket {
    /// The socket, non-blocking: the receiving thread polls it with `poll(2)`, and sends go
    /// out on it directly and never wait (tokio's `try_send_to` would refuse until a reactor
    /// had seen the socket writable).
    sock: Arc<std::net::UdpSocket>,
    stats: Arc<HeartbeatStats>,
    /// Told of each authenticated rejection, if set.
    on_rejected_from: Option<RejectedFrom>,
}

/// Told of each rejected heartbeat whose sender is known (its tag verified): the sender and
/// the reason ([`Reject::reason`]). A hook rather than a metrics handle, so that the socket
/// needs nothing from the agent's metrics (which read the socket's counters).
#[derive(Clone)]
struct RejectedFrom(Arc<RejectedFromFn>);

/// The hook's signature: the sender, and the reason.
type RejectedFromFn = dyn Fn(&NodeName, &'static str) + Send + Sync;

impl fmt::Debug for RejectedFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RejectedFrom(..)")
    }
}

impl HeartbeatSocket {
    /// Binds to `addr` (usually [`DEFAULT_BIND`]), with buffers of at least [`RECV_BUFFER`]
    /// and [`SEND_BUFFER`] where the kernel allows.
    pub fn bind(addr: SocketAddr) -> Result<Self, HeartbeatError> {
        let err = |source| HeartbeatError::Bind { addr, source };
        let sock = std::net::UdpSocket::bind(addr).map_err(err)?;
        sock.set_nonblocking(true).map_err(err)?;
        grow_buffer(&sock, Buffer::Receive, RECV_BUFFER);
        grow_buffer(&sock, Buffer::Send, SEND_BUFFER);
        Ok(Self {
            sock: Arc::new(sock),
            stats: Arc::default(),
            on_rejected_from: None,
        })
    }

    /// Calls `hook` with the sender and reason of each rejected heartbeat whose sender is known
    /// (its tag verified); the agent counts them per peer and reason
    /// (`announcer_heartbeats_rejected_from_total`).
    pub fn on_rejected_from(
        mut self,
        hook: impl Fn(&NodeName, &'static str) + Send + Sync + 'static,
    ) -> Self {
        self.on_rejected_from = Some(RejectedFrom(Arc::new(hook)));
        self
    }

    /// The address actually bound (the port, if 0 was asked for).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The counters.
    pub fn stats(&self) -> Arc<HeartbeatStats> {
        Arc::clone(&self.stats)
    }

    /// Sends `datagram` (from [`crate::heartbeat::Sealer::seal`]) to every address in
    /// `peers`, without waiting: a full send buffer counts as a failure for that peer. A
    /// sealed datagram names its one recipient, so `peers` is that node's address (a slice,
    /// for a node reachable at more than one).
    pub fn send(&self, datagram: &[u8], peers: &[SocketAddr]) -> SendReport {
        let mut report = SendReport::default();
        for &peer in peers {
            let result = self.sock.send_to(datagram, peer);
            self.count_send(&mut report, peer, datagram.len(), result.as_ref().copied());
        }
        report
    }

    /// Sends each datagram of `batch` to its address, up to 64 per `sendmmsg(2)`, without
    /// waiting; counted per datagram as [`send`](Self::send) does. The shell seals one
    /// datagram per peer, so this is a whole round of heartbeats.
    ///
    /// The kernel stops a call at the first datagram it cannot send; the next call starts
    /// with that one, and if it fails alone it is counted failed and the rest go on (an
    /// address the socket cannot reach must not cost the other peers their heartbeat). A full
    /// send buffer (`EAGAIN`) counts every datagram left as failed: waiting for room would
    /// hold up the election's thread for heartbeats that the next round replaces.
    pub fn send_batch<B: AsRef<[u8]>>(&self, batch: &[(B, SocketAddr)]) -> SendReport {
        self.send_batch_with(batch, |rest| mmsg::send(self.sock.as_fd(), rest))
    }

    /// [`send_batch`](Self::send_batch), sending with `send_some` (the tests' stand-in for a
    /// full send buffer, which loopback never has).
    fn send_batch_with<B: AsRef<[u8]>>(
        &self,
        batch: &[(B, SocketAddr)],
        mut send_some: impl FnMut(&[(B, SocketAddr)]) -> io::Result<mmsg::Sent>,
    ) -> SendReport {
        let mut report = SendReport::default();
        let mut rest = batch;
        while let Some(((first, peer), after)) = rest.split_first() {
            match send_some(rest) {
                Ok(sent) => {
                    for ((bytes, peer), &n) in rest.iter().zip(sent.lens()) {
                        self.count_send(&mut report, *peer, bytes.as_ref().len(), Ok(n));
                    }
                    rest = &rest[sent.count()..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    for (bytes, peer) in rest {
                        self.count_send(&mut report, *peer, bytes.as_ref().len(), Err(&e));
                    }
                    break;
                }
                Err(e) => {
                    self.count_send(&mut report, *peer, first.as_ref().len(), Err(&e));
                    rest = after;
                }
            }
        }
        report
    }

    /// Counts what sending `len` bytes to `peer` came to, in `report` and the counters.
    fn count_send(
        &self,
        report: &mut SendReport,
        peer: SocketAddr,
        len: usize,
        result: Result<usize, &io::Error>,
    ) {
        match result {
            Ok(n) if n == len => {
                report.sent += 1;
                HeartbeatStats::bump(&self.stats.sent);
            }
            result => {
                report.failed += 1;
                HeartbeatStats::bump(&self.stats.send_errors);
                let error = match result {
                    Ok(n) => format!("short send of {n} bytes"),
                    Err(e) => e.to_string(),
                };
                tracing::debug!(%peer, error, "heartbeat not sent");
            }
        }
    }

    /// Receives on a new thread named `heartbeats` until `stopped()` says so (checked at least
    /// every 200 ms) or `out` is closed: verifies each datagram with `verifier` against the
    /// peers' keys in `keyring`, and forwards the heartbeats that pass, counting the others by
    /// reason.
    ///
    /// The thread blocks in `poll(2)` (no runtime of its own: at 26 heartbeats a second, one
    /// was 0.25 % of a core), so that a flood on the heartbeat port costs that thread, not the
    /// election's (see the module docs), and then reads what is queued, up to 64 datagrams per
    /// `recvmmsg(2)`.
    ///
    /// Both are shared so that the caller can [`forget`](Verifier::forget) peers and
    /// [`set_peer`](Keyring::set_peer)/[`remove_peer`](Keyring::remove_peer) from the Leases
    /// meanwhile; the locks are held only while one datagram is checked (the keyring's for
    /// reading, so the sender may hold it too). A full `out` channel holds the loop back (the
    /// kernel then queues, and eventually drops, datagrams), which is right: the election
    /// would only see stale beats.
    ///
    /// A rejection whose sender is known (its tag verified: a peer's clock or incarnation is
    /// wrong, not a stranger's noise) is logged at warning level, at most once a minute per
    /// reason, e.g. "heartbeats from node-b are rejected: ... (its clock is 10.2 s ahead)".
    /// Every other rejection is only counted, and summed up at debug level at most once per
    /// [`REJECT_SUMMARY_EVERY`].
    pub fn spawn_receiver(
        &self,
        verifier: Arc<Mutex<Verifier>>,
        keyring: Arc<RwLock<Keyring>>,
        out: mpsc::Sender<Verified>,
        stopped: impl Fn() -> bool + Send + 'static,
    ) -> io::Result<thread::JoinHandle<()>> {
        let socket = self.clone();
        thread::Builder::new()
            .name("heartbeats".into())
            .spawn(move || {
                let mut batch = mmsg::RecvBatch::new();
                let mut judge = Judge::new(&socket, verifier, keyring);
                let fd = socket.sock.as_fd();
                while !stopped() && !out.is_closed() {
                    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
                    match poll(&mut fds, PollTimeout::from(200u16)) {
                        Ok(0) | Err(Errno::EINTR) => continue,
                        Ok(_) => {}
                        Err(e) => {
                            judge.receive_error(&e.into());
                            thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    }
                    // Everything queued, then back to poll (the socket is non-blocking).
                    loop {
                        match batch.recv(fd) {
                            Ok(n) => {
                                for (datagram, from) in batch.datagrams() {
                                    if let Some(v) = judge.datagram(datagram, from)
                                        && out.blocking_send(v).is_err()
                                    {
                                        return;
                                    }
                                }
                                // A short batch emptied the queue: `poll` says when more
                                // comes, without a call that would only say `EAGAIN`.
                                if n < mmsg::BATCH {
                                    break;
                                }
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => {
                                judge.receive_error(&e);
                                break;
                            }
                        }
                    }
                }
            })
    }
}

/// A socket buffer [`grow_buffer`] sizes.
#[derive(Clone, Copy, Debug)]
enum Buffer {
    Receive,
    Send,
}

/// Grows `sock`'s `which` buffer to `want` bytes (the kernel charges twice that), never
/// shrinks it, and logs what it got. With `CAP_NET_ADMIN`, which the agent has for its data
/// plane, the `SO_*BUFFORCE` options go past `net.core.rmem_max`/`wmem_max` (208 KiB on most
/// kernels, which would make the request moot); without it the kernel caps the size there,
/// which is logged, not an error: heartbeats still flow, a burst may just lose some.
fn grow_buffer(sock: &std::net::UdpSocket, which: Buffer, want: usize) {
    let (now, forced, got) = match which {
        Buffer::Receive => set_buffer(sock, sockopt::RcvBufForce, sockopt::RcvBuf, want),
        Buffer::Send => set_buffer(sock, sockopt::SndBufForce, sockopt::SndBuf, want),
    };
    if got < want {
        tracing::info!(
            buffer = ?which,
            asked = want,
            bytes = got,
            "the heartbeat socket's buffer is capped (raise net.core.rmem_max/wmem_max, or grant CAP_NET_ADMIN); bursts from many peers may lose heartbeats"
        );
    } else {
        tracing::debug!(buffer = ?which, was = now, bytes = got, forced, "heartbeat socket buffer sized");
    }
}

/// Sets the buffer `normal` reads to `want` unless it is that big already, with `force` if
/// allowed, else `normal`: its size before, whether `force` did it, and its size after (0
/// where it cannot be read).
fn set_buffer<F, N>(
    sock: &std::net::UdpSocket,
    force: F,
    normal: N,
    want: usize,
) -> (usize, bool, usize)
where
    F: SetSockOpt<Val = usize>,
    N: SetSockOpt<Val = usize> + GetSockOpt<Val = usize> + Copy,
{
    let now = getsockopt(sock, normal).unwrap_or(0);
    if now >= want {
        return (now, false, now);
    }
    let forced = setsockopt(sock, force, &want).is_ok();
    if !forced && let Err(e) = setsockopt(sock, normal, &want) {
        tracing::debug!(error = %e, "cannot size the heartbeat socket's buffer");
    }
    (now, forced, getsockopt(sock, normal).unwrap_or(0))
}

/// What the receive loop does with each datagram: verify, count, forward or log.
struct Judge<'a> {
    socket: &'a HeartbeatSocket,
    verifier: Arc<Mutex<Verifier>>,
    keyring: Arc<RwLock<Keyring>>,
    warned: [Option<Instant>; Reject::ALL.len()],
    quiet: RejectSummary,
}

impl<'a> Judge<'a> {
    fn new(
        socket: &'a HeartbeatSocket,
        verifier: Arc<Mutex<Verifier>>,
        keyring: Arc<RwLock<Keyring>>,
    ) -> Self {
        Self {
            socket,
            verifier,
            keyring,
            warned: [None; Reject::ALL.len()],
            quiet: RejectSummary::new(Instant::now()),
        }
    }

    fn receive_error(&self, error: &io::Error) {
        HeartbeatStats::bump(&self.socket.stats.receive_errors);
        tracing::debug!(%error, "receiving a heartbeat failed");
    }

    /// The verified heartbeat in `datagram` from `from`, if it is one; otherwise counted (and
    /// logged as the module docs say).
    fn datagram(&mut self, datagram: &[u8], from: SocketAddr) -> Option<Verified> {
        if let Some(summary) = self.quiet.take_due(Instant::now()) {
            tracing::debug!(
                rejected = summary.total(),
                over_ms = summary.over.as_millis() as u64,
                reasons = %summary,
                last_from = ?summary.last_from,
                "heartbeat datagrams rejected (counted in announcer_heartbeats_rejected_total)"
            );
        }
        let stats = &self.socket.stats;
        let verdict = {
            let keyring = self.keyring.read().unwrap_or_else(|e| e.into_inner());
            self.verifier
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .open(&keyring, datagram, unix_ms_now())
        };
        match verdict {
            Ok(v) => {
                HeartbeatStats::bump(&stats.accepted);
                Some(v)
            }
            Err(rejected) => {
                let reason = rejected.reason;
                HeartbeatStats::bump(&stats.rejected[reason.index()]);
                if let (Some(hook), Some(peer)) = (&self.socket.on_rejected_from, &rejected.sender)
                {
                    (hook.0)(peer, reason.reason());
                }
                let warned = &mut self.warned[reason.index()];
                if rejected.sender.is_some() && warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    *warned = Some(Instant::now());
                    tracing::warn!(%from, reason = reason.reason(), "{rejected}");
                } else {
                    self.quiet.add(reason, from);
                }
                None
            }
        }
    }
}

/// How often a rejection from an authenticated peer is logged at warning level, per reason.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The shortest interval between two debug summaries of rejected datagrams.
pub const REJECT_SUMMARY_EVERY: Duration = Duration::from_secs(1);

/// Rejected datagrams not worth a line each, summed up for one debug line per
/// [`REJECT_SUMMARY_EVERY`]: a stranger flooding the port at line rate must not make the agent
/// write a log line per datagram (which once cost more than the rejection itself). Pure; the
/// clock is passed in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RejectSummary {
    /// Since when these were counted.
    since: Instant,
    /// Per [`Reject::index`].
    counts: [u64; Reject::ALL.len()],
    /// The source of the last one.
    pub last_from: Option<SocketAddr>,
    /// How long they were counted over (set when the summary is taken).
    pub over: Duration,
}

impl RejectSummary {
    /// Nothing counted yet, from `now`.
    pub fn new(now: Instant) -> Self {
        Self {
            since: now,
            counts: [0; Reject::ALL.len()],
            last_from: None,
            over: Duration::ZERO,
        }
    }

    /// Counts one datagram rejected for `reason`, from `from`.
    pub fn add(&mut self, reason: Reject, from: SocketAddr) {
        self.counts[reason.index()] += 1;
        self.last_from = Some(from);
    }

    /// Datagrams counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Datagrams counted for `reason`.
    pub fn count(&self, reason: Reject) -> u64 {
        self.counts[reason.index()]
    }

    /// The summary to log if anything was counted and [`REJECT_SUMMARY_EVERY`] has passed
    /// since counting started; counting then starts afresh at `now`.
    pub fn take_due(&mut self, now: Instant) -> Option<RejectSummary> {
        let over = now.saturating_duration_since(self.since);
        if self.total() == 0 {
            // Nothing to say; the next rejection opens a new window.
            self.since = now;
            return None;
        }
        if over < REJECT_SUMMARY_EVERY {
            return None;
        }
        let mut summary = std::mem::replace(self, Self::new(now));
        summary.over = over;
        Some(summary)
    }
}

/// `reason=count` for each reason counted, e.g. `bad_magic=14209 unsupported_version=3`.
impl fmt::Display for RejectSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut sep = "";
        for r in Reject::ALL.iter().filter(|r| self.count(**r) > 0) {
            write!(f, "{sep}{}={}", r.reason(), self.count(*r))?;
            sep = " ";
        }
        Ok(())
    }
}

/// The wall clock in milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// An incarnation for an agent starting now: the wall clock in nanoseconds since the Unix
/// epoch, which grows across restarts while the clock does not step back.
pub fn incarnation_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;

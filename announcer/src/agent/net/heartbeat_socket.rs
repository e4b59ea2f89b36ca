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
//! nothing later, the next one follows within a period. Receiving runs as a task
//! ([`HeartbeatSocket::receive`]) until its shutdown future completes, like
//! [`crate::dataplane::logs::forward`].

use std::{
    fmt,
    future::Future,
    io,
    net::{Ipv4Addr, SocketAddr, SocketAddrV4},
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{SystemTime, UNIX_EPOCH},
};

use tokio::{net::UdpSocket, sync::mpsc};

use crate::{
    election::NodeName,
    heartbeat::{Keyring, MAX_DATAGRAM, Reject, Verified, Verifier},
};

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
    /// Failed `recvfrom(2)` calls.
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

/// What one [`HeartbeatSocket::send`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Peers the datagram went to.
    pub sent: u32,
    /// Peers it could not be sent to (each logged at debug level).
    pub failed: u32,
}

/// The UDP socket heartbeats travel on. Cheap to clone: clones share the socket and the
/// counters, so one task can receive while another sends.
#[derive(Clone, Debug)]
pub struct HeartbeatSocket {
    /// Receives, through the tokio reactor.
    rx: Arc<UdpSocket>,
    /// The same socket (a duplicated descriptor), non-blocking, for sends that never wait:
    /// tokio's `try_send_to` would refuse until the reactor has seen the socket writable.
    tx: Arc<std::net::UdpSocket>,
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
    /// Binds to `addr` (usually [`DEFAULT_BIND`]). Must be called within a tokio runtime.
    pub fn bind(addr: SocketAddr) -> Result<Self, HeartbeatError> {
        let err = |source| HeartbeatError::Bind { addr, source };
        let sock = std::net::UdpSocket::bind(addr).map_err(err)?;
        sock.set_nonblocking(true).map_err(err)?;
        let tx = sock.try_clone().map_err(err)?;
        let rx = UdpSocket::from_std(sock).map_err(err)?;
        Ok(Self {
            rx: Arc::new(rx),
            tx: Arc::new(tx),
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
        self.rx.local_addr()
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
            match self.tx.send_to(datagram, peer) {
                Ok(n) if n == datagram.len() => {
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
        report
    }

    /// Receives until `shutdown` completes or `out` is closed: verifies each datagram with
    /// `verifier` against the peers' keys in `keyring`, and forwards the heartbeats that
    /// pass, counting the others by reason.
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
    pub async fn receive(
        &self,
        verifier: Arc<Mutex<Verifier>>,
        keyring: Arc<RwLock<Keyring>>,
        out: mpsc::Sender<Verified>,
        shutdown: impl Future<Output = ()>,
    ) {
        tokio::pin!(shutdown);
        // One byte more than the largest heartbeat, so an oversized datagram is not read as
        // a complete one.
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        let mut warned: [Option<std::time::Instant>; Reject::ALL.len()] = [None; Reject::ALL.len()];
        loop {
            let (n, from) = tokio::select! {
                () = &mut shutdown => return,
                () = out.closed() => return,
                r = self.rx.recv_from(&mut buf) => match r {
                    Ok(r) => r,
                    Err(error) => {
                        HeartbeatStats::bump(&self.stats.receive_errors);
                        tracing::debug!(%error, "receiving a heartbeat failed");
                        continue;
                    }
                },
            };
            let verdict = {
                let keyring = keyring
                    .read()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                verifier
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .open(&keyring, &buf[..n], unix_ms_now())
            };
            match verdict {
                Ok(v) => {
                    HeartbeatStats::bump(&self.stats.accepted);
                    if out.send(v).await.is_err() {
                        return;
                    }
                }
                Err(rejected) => {
                    let reason = rejected.reason;
                    HeartbeatStats::bump(&self.stats.rejected[reason.index()]);
                    if let (Some(hook), Some(peer)) = (&self.on_rejected_from, &rejected.sender) {
                        (hook.0)(peer, reason.reason());
                    }
                    if rejected.sender.is_some()
                        && warned[reason.index()]
                            .is_none_or(|at: std::time::Instant| at.elapsed() >= WARN_EVERY)
                    {
                        warned[reason.index()] = Some(std::time::Instant::now());
                        tracing::warn!(%from, reason = reason.reason(), "{rejected}");
                    } else {
                        tracing::debug!(%from, reason = reason.reason(), "{rejected}");
                    }
                }
            }
        }
    }
}

/// How often a rejection from an authenticated peer is logged at warning level, per reason.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

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

//! The client's view: single questions (`ask`, `arp_macs`) and a continuous [`Prober`].
//!
//! Why probes from a separate client namespace: that is where a user stands. Its neighbour
//! cache, its ARP/NDP retries and the MAC it learnt decide where packets go, so an outage
//! measured there includes everything the announcer can get wrong (a late gratuitous ARP, a
//! stale answer from a dead node's data plane), not only the election.
//!
//! The UDP prober sends `"<seq> <target>"` to every target each interval from one unconnected
//! dual-stack socket; a receiver thread matches replies (`"<node> <seq> <target>"`) by payload,
//! never by source address (a node answers from its own address, not the VIP). The TCP prober
//! starts a non-blocking connect to `target:7778` each interval and polls all in flight. A probe
//! not answered within [`PROBE_TIMEOUT`] is lost.

use std::{
    collections::HashMap,
    io::ErrorKind,
    net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket},
    os::fd::{AsFd, AsRawFd, OwnedFd},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use nix::{
    poll::{PollFd, PollFlags, PollTimeout, poll},
    sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrStorage, connect, getsockopt, setsockopt,
        socket, sockopt,
    },
};

use super::timeline::{Mark, ProbeKind, Sample, Timeline};
use super::{IFACE, TCP_PORT, Testbed, UDP_PORT};
use crate::tools::{arping, ndisc6_all};

/// A probe unanswered after this long is lost.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// The default probe interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(10);

/// Thread state shared by the probe threads and [`Prober`].
struct Shared {
    start: Instant,
    samples: Mutex<Vec<Sample>>,
    /// (target, seq) → index into `samples`, UDP only.
    udp: Mutex<HashMap<(IpAddr, u64), usize>>,
    marks: Mutex<Vec<Mark>>,
    /// Stop sending new probes.
    sending: AtomicBool,
    /// Stop everything (after the last probes had their chance).
    running: AtomicBool,
}

impl Shared {
    fn record(&self, target: IpAddr, kind: ProbeKind, seq: u64, sent: Instant) -> usize {
        let mut samples = self.samples.lock().expect("samples");
        samples.push(Sample {
            target,
            kind,
            seq,
            sent: sent - self.start,
            rtt: None,
            node: None,
        });
        samples.len() - 1
    }

    fn answer(&self, idx: usize, rtt: Duration, node: Option<String>) {
        let mut samples = self.samples.lock().expect("samples");
        let s = &mut samples[idx];
        if s.rtt.is_none() && rtt <= PROBE_TIMEOUT {
            s.rtt = Some(rtt);
            s.node = node;
        }
    }
}

/// Probes running in the client namespace; [`Self::stop`] returns the [`Timeline`].
pub struct Prober {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

/// Socket address as the dual-stack sockets want it (IPv4 as v4-mapped IPv6).
fn dual(ip: IpAddr, port: u16) -> SocketAddr {
    match ip {
        IpAddr::V4(v4) => SocketAddr::from((v4.to_ipv6_mapped(), port)),
        IpAddr::V6(v6) => SocketAddr::from((v6, port)),
    }
}

/// Sleeps until `next` (if in the future); returns the following tick, skipping missed ones
/// rather than bursting to catch up.
fn pace(next: Instant, interval: Duration) -> Instant {
    let now = Instant::now();
    if next > now {
        std::thread::sleep(next - now);
        next + interval
    } else {
        now + interval
    }
}

fn udp_sender(sh: Arc<Shared>, sock: UdpSocket, targets: Vec<IpAddr>, interval: Duration) {
    let mut seq = 0u64;
    let mut next = Instant::now();
    while sh.sending.load(Ordering::SeqCst) {
        for &t in &targets {
            let sent = Instant::now();
            let idx = sh.record(t, ProbeKind::Udp, seq, sent);
            sh.udp.lock().expect("udp index").insert((t, seq), idx);
            // A send error (no route, neighbour failed) is a lost probe.
            let _ = sock.send_to(format!("{seq} {t}").as_bytes(), dual(t, UDP_PORT));
        }
        seq += 1;
        next = pace(next, interval);
    }
}

fn udp_receiver(sh: Arc<Shared>, sock: UdpSocket) {
    sock.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("read timeout");
    let mut buf = [0u8; 512];
    while sh.running.load(Ordering::SeqCst) {
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => continue,
        };
        let now = Instant::now();
        let text = String::from_utf8_lossy(&buf[..n]);
        let mut parts = text.split_whitespace();
        let (Some(node), Some(seq), Some(target)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (Ok(seq), Ok(target)) = (seq.parse::<u64>(), target.parse::<IpAddr>()) else {
            continue;
        };
        let Some(idx) = sh
            .udp
            .lock()
            .expect("udp index")
            .get(&(target, seq))
            .copied()
        else {
            continue;
        };
        let sent = sh.start + sh.samples.lock().expect("samples")[idx].sent;
        sh.answer(idx, now - sent, Some(node.to_owned()));
    }
}

/// Starts a non-blocking connect; `None` if it failed at once (a lost probe).
fn tcp_connect(target: IpAddr) -> Option<OwnedFd> {
    let family = match target {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .ok()?;
    // Close with RST: no TIME_WAIT sockets pile up at 100 connects a second.
    let _ = setsockopt(
        &fd,
        sockopt::Linger,
        &libc::linger {
            l_onoff: 1,
            l_linger: 0,
        },
    );
    let addr = SockaddrStorage::from(SocketAddr::new(target, TCP_PORT));
    match connect(fd.as_raw_fd(), &addr) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => Some(fd),
        Err(_) => None,
    }
}

fn tcp_loop(sh: Arc<Shared>, targets: Vec<IpAddr>, interval: Duration) {
    let mut seq = 0u64;
    let mut next = Instant::now();
    let mut in_flight: Vec<(OwnedFd, usize, Instant)> = Vec::new();
    loop {
        let sending = sh.sending.load(Ordering::SeqCst);
        if !sending && (in_flight.is_empty() || !sh.running.load(Ordering::SeqCst)) {
            return;
        }
        let now = Instant::now();
        if sending && now >= next {
            for &t in &targets {
                let sent = Instant::now();
                let idx = sh.record(t, ProbeKind::Tcp, seq, sent);
                if let Some(fd) = tcp_connect(t) {
                    in_flight.push((fd, idx, sent));
                }
            }
            seq += 1;
            next = if next + interval > now {
                next + interval
            } else {
                now + interval
            };
        }
        // Drop the expired ones (lost).
        let now = Instant::now();
        in_flight.retain(|(_, _, sent)| now - *sent <= PROBE_TIMEOUT);
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50));
        if in_flight.is_empty() {
            std::thread::sleep(wait);
            continue;
        }
        let mut fds: Vec<PollFd> = in_flight
            .iter()
            .map(|(fd, _, _)| PollFd::new(fd.as_fd(), PollFlags::POLLOUT))
            .collect();
        let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::ZERO);
        if poll(&mut fds, timeout).unwrap_or(0) <= 0 {
            continue;
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|p| p.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        let now = Instant::now();
        let mut i = 0;
        in_flight.retain(|(fd, idx, sent)| {
            let done = ready[i];
            i += 1;
            if done && getsockopt(fd, sockopt::SocketError) == Ok(0) {
                sh.answer(*idx, now - *sent, None);
            }
            !done
        });
    }
}

impl Prober {
    /// Records an event now; returns its offset (for [`Timeline::outage`]).
    pub fn mark(&self, label: &str) -> Duration {
        let at = self.shared.start.elapsed();
        self.shared.marks.lock().expect("marks").push(Mark {
            at,
            label: label.into(),
        });
        at
    }

    /// Now, as an offset of the timeline.
    pub fn now(&self) -> Duration {
        self.shared.start.elapsed()
    }

    /// Stops sending, waits [`PROBE_TIMEOUT`] for the last answers, and returns the timeline.
    pub fn stop(mut self) -> Timeline {
        self.shared.sending.store(false, Ordering::SeqCst);
        std::thread::sleep(PROBE_TIMEOUT + Duration::from_millis(50));
        self.join();
        let mut samples = std::mem::take(&mut *self.shared.samples.lock().expect("samples"));
        samples.sort_by_key(|s| s.sent);
        Timeline {
            start: self.shared.start,
            samples,
            marks: std::mem::take(&mut *self.shared.marks.lock().expect("marks")),
        }
    }

    fn join(&mut self) {
        self.shared.sending.store(false, Ordering::SeqCst);
        self.shared.running.store(false, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Prober {
    fn drop(&mut self) {
        self.join();
    }
}

static ASKS: AtomicU64 = AtomicU64::new(0);

impl Testbed {
    /// Probes `targets` from the client every `interval` (UDP echo and TCP connect; see the
    /// module docs) until [`Prober::stop`].
    pub fn start_prober(&self, targets: &[IpAddr], interval: Duration) -> Prober {
        let shared = Arc::new(Shared {
            start: Instant::now(),
            samples: Mutex::default(),
            udp: Mutex::default(),
            marks: Mutex::default(),
            sending: AtomicBool::new(true),
            running: AtomicBool::new(true),
        });
        let sock = self.client.enter(|| {
            UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).expect("prober socket")
        });
        let rx = sock.try_clone().expect("clone socket");
        let mut threads = Vec::new();
        let sh = shared.clone();
        threads.push(
            self.client
                .spawn("probe-udp-rx", move || udp_receiver(sh, rx)),
        );
        let (sh, t) = (shared.clone(), targets.to_vec());
        threads.push(
            self.client
                .spawn("probe-udp-tx", move || udp_sender(sh, sock, t, interval)),
        );
        let (sh, t) = (shared.clone(), targets.to_vec());
        threads.push(
            self.client
                .spawn("probe-tcp", move || tcp_loop(sh, t, interval)),
        );
        Prober { shared, threads }
    }

    /// Asks `vip`'s UDP echo from the client (resending every 200 ms) until one answer comes
    /// or `timeout` passes: the name of the node that answered.
    pub fn ask(&self, vip: IpAddr, timeout: Duration) -> Option<String> {
        let nonce = format!("ask-{}", ASKS.fetch_add(1, Ordering::Relaxed));
        self.client.enter(|| {
            let sock =
                UdpSocket::bind(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))).expect("ask socket");
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("read timeout");
            let end = Instant::now() + timeout;
            let mut buf = [0u8; 512];
            while Instant::now() < end {
                let _ = sock.send_to(nonce.as_bytes(), dual(vip, UDP_PORT));
                let resend = Instant::now() + Duration::from_millis(200);
                while Instant::now() < resend.min(end) {
                    let Ok(n) = sock.recv(&mut buf) else { break };
                    let text = String::from_utf8_lossy(&buf[..n]);
                    if let Some((node, rest)) = text.split_once(' ')
                        && rest == nonce
                    {
                        return Some(node.to_owned());
                    }
                }
            }
            None
        })
    }

    /// Whether `from` reaches `to` over the LAN right now: a UDP echo from inside `from`'s
    /// namespace to `to`'s IPv4 address, answered within `timeout` (sent every 200 ms). For
    /// checking faults such as [`Testbed::partition`].
    pub fn reachable(&self, from: &str, to: &str, timeout: Duration) -> bool {
        let dst = SocketAddr::from((self.node_ip4(to), UDP_PORT));
        self.node_ns(from).enter(|| {
            let sock = UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0))).expect("socket");
            sock.set_read_timeout(Some(Duration::from_millis(200)))
                .expect("read timeout");
            let end = Instant::now() + timeout;
            let mut buf = [0u8; 512];
            while Instant::now() < end {
                let _ = sock.send_to(b"reachable", dst);
                if let Ok(n) = sock.recv(&mut buf)
                    && buf[..n].starts_with(to.as_bytes())
                {
                    return true;
                }
            }
            false
        })
    }

    /// ARP (IPv4, `arping`) or a Neighbor Solicitation (IPv6, `ndisc6 -m`) for `vip` from the
    /// client (on `eth1` for the second NIC's VIPs), listening for `timeout`: every distinct
    /// MAC that answered.
    pub fn arp_macs(&self, vip: IpAddr, timeout: Duration) -> Vec<[u8; 6]> {
        // The second NIC's VIPs are asked on the client's leg on that bridge.
        let iface = if super::resolve::on_second_nic(vip) {
            super::IFACE2
        } else {
            IFACE
        };
        match vip {
            IpAddr::V4(v4) => arping(&self.client, iface, v4, 3, timeout).unique_macs(),
            IpAddr::V6(v6) => {
                let mut macs = ndisc6_all(&self.client, v6, iface, timeout);
                macs.sort_unstable();
                macs.dedup();
                macs
            }
        }
    }

    /// The nodes whose MACs answered ARP/NDP for `vip` (unknown MACs as `??:..`).
    pub fn arp_nodes(&self, vip: IpAddr, timeout: Duration) -> Vec<String> {
        self.arp_macs(vip, timeout)
            .into_iter()
            .map(|m| {
                self.node_by_mac(m)
                    .unwrap_or_else(|| format!("unknown {}", crate::netns::fmt_mac(m)))
            })
            .collect()
    }
}

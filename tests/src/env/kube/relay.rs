//! A TCP relay from a listener in another network namespace to an address of this process's
//! namespace: how the node namespaces of the testbed reach the API server, which runs beside
//! the test process. Bytes are copied as they are (TLS passes through), one thread per
//! direction per connection; the API server's load here is a handful of connections.
//!
//! Every relay counts the bytes it copied each way ([`Relay::bytes`], readable while it
//! runs): the control-plane benchmark puts one in front of each agent (on 127.0.0.1) to see
//! the watch traffic that kube-apiserver's audit log cannot.
//!
//! A relay can also be faulted ([`Relay::set_fault`]): an outage (new connections are reset
//! at once, open ones are closed) or latency (every chunk a client sends is held back for a
//! while before the server gets it). That is how the testbed's API outages and slow API
//! server work on the real control plane, whose server has no fault hooks of its own: every
//! process in a node namespace reaches it only through the relay.

use std::{
    io,
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

/// A fault of the path through a relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RelayFault {
    /// New connections are accepted and reset at once (as a crashed or unreachable server
    /// looks to a client), and every open connection is closed when the outage starts.
    Outage,
    /// Every chunk a client sends is forwarded this much later (a slow or overloaded server:
    /// each request, and the TLS handshake, arrives late; throughput is unchanged).
    Latency(Duration),
}

type SharedFault = Arc<Mutex<Option<RelayFault>>>;

/// A running relay; dropping it closes the listener and every relayed connection.
pub(crate) struct Relay {
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<Arc<TcpStream>>>>,
    accept: Option<JoinHandle<()>>,
    counts: Arc<Counts>,
    fault: SharedFault,
}

/// Bytes copied so far, over every connection of a relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Bytes {
    /// From the clients to the server.
    pub(crate) to_server: u64,
    /// From the server to the clients.
    pub(crate) from_server: u64,
}

#[derive(Debug, Default)]
struct Counts {
    to_server: AtomicU64,
    from_server: AtomicU64,
}

impl Relay {
    /// Relays every connection accepted on `listener` to `to`.
    pub(crate) fn start(listener: TcpListener, to: SocketAddr) -> io::Result<Relay> {
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<Arc<TcpStream>>>> = Arc::default();
        let counts: Arc<Counts> = Arc::default();
        let fault: SharedFault = Arc::default();
        let accept = {
            let (listener, stop, conns, counts, fault) = (
                listener.clone(),
                stop.clone(),
                conns.clone(),
                counts.clone(),
                fault.clone(),
            );
            std::thread::Builder::new()
                .name("kube-relay".into())
                .spawn(move || {
                    for inbound in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let Ok(inbound) = inbound else { continue };
                        if *fault.lock().expect("relay fault") == Some(RelayFault::Outage) {
                            reset(&inbound);
                            continue;
                        }
                        // The API server down (killed for a restart): drop the connection, as
                        // a refused connect would look to the client.
                        let Ok(outbound) = TcpStream::connect(to) else {
                            continue;
                        };
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        // One descriptor per socket, shared by both directions and the list:
                        // a busy agent opens a connection per request in flight.
                        let (inbound, outbound) = (Arc::new(inbound), Arc::new(outbound));
                        {
                            let mut list = conns.lock().expect("relay connections");
                            // Closed connections: only the list still holds them.
                            list.retain(|c| Arc::strong_count(c) > 1);
                            list.extend([inbound.clone(), outbound.clone()]);
                        }
                        pipe_delayed(inbound.clone(), outbound.clone(), &counts, fault.clone());
                        pipe(outbound, inbound, &counts, |c| &c.from_server);
                    }
                })?
        };
        Ok(Relay {
            listener,
            stop,
            conns,
            accept: Some(accept),
            counts,
            fault,
        })
    }

    /// Starts (`Some`) or ends (`None`) a fault; replaces the one before. Starting an outage
    /// closes every open connection.
    pub(crate) fn set_fault(&self, fault: Option<RelayFault>) {
        *self.fault.lock().expect("relay fault") = fault;
        if fault == Some(RelayFault::Outage) {
            for c in self.conns.lock().expect("relay connections").drain(..) {
                reset(&c);
            }
        }
    }

    /// The port the relay listens on.
    pub(crate) fn port(&self) -> u16 {
        self.listener.local_addr().map_or(0, |a| a.port())
    }

    /// The bytes copied so far each way, over every connection (closed ones included).
    pub(crate) fn bytes(&self) -> Bytes {
        Bytes {
            to_server: self.counts.to_server.load(Ordering::Relaxed),
            from_server: self.counts.from_server.load(Ordering::Relaxed),
        }
    }
}

/// Copies `from` into `to` on a thread of its own, adding what it copied to the counter
/// `which` picks; half-closes `to` at EOF.
fn pipe(
    from: Arc<TcpStream>,
    to: Arc<TcpStream>,
    counts: &Arc<Counts>,
    which: fn(&Counts) -> &AtomicU64,
) {
    let counts = counts.clone();
    let _ = std::thread::Builder::new()
        .name("kube-relay-pipe".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match io::Read::read(&mut &*from, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if io::Write::write_all(&mut &*to, &buf[..n]).is_err() {
                    break;
                }
                which(&counts).fetch_add(n as u64, Ordering::Relaxed);
            }
            let _ = to.shutdown(Shutdown::Write);
        });
}

/// Resets `s`: linger 0 makes the close (when the last holder drops it) send a RST, and the
/// shutdown ends both directions now for whoever still reads or writes it.
fn reset(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket this relay owns, with a valid `linger` of the right size.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    let _ = s.shutdown(Shutdown::Both);
}

/// Copies client `from` to server `to` like [`pipe`], through a delay line: a reader thread
/// stamps each chunk, a writer thread forwards it once the fault's latency (read when the
/// chunk is due) has passed since its stamp.
fn pipe_delayed(
    from: Arc<TcpStream>,
    to: Arc<TcpStream>,
    counts: &Arc<Counts>,
    fault: SharedFault,
) {
    let counts = counts.clone();
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let _ = std::thread::Builder::new()
        .name("kube-relay-read".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match io::Read::read(&mut &*from, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        });
    let _ = std::thread::Builder::new()
        .name("kube-relay-write".into())
        .stack_size(128 * 1024)
        .spawn(move || {
            for (at, chunk) in rx {
                let delay = match *fault.lock().expect("relay fault") {
                    Some(RelayFault::Latency(d)) => d,
                    _ => Duration::ZERO,
                };
                let due = at + delay;
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
                if io::Write::write_all(&mut &*to, &chunk).is_err() {
                    break;
                }
                counts
                    .to_server
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
            }
            let _ = to.shutdown(Shutdown::Write);
        });
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // SAFETY: shutdown(2) on a socket this relay owns; it wakes the blocked accept(2).
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        for c in self.conns.lock().expect("relay connections").drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

//! The services behind the VIPs: a UDP echo that names the node, and a TCP port that accepts.
//!
//! Why threads of the test process and not a server binary: a socket belongs to the network
//! namespace it was created in, whatever thread later uses it, so a thread that `setns`es once,
//! binds and loops is a complete per-node server — nothing to build, start, or leak. The
//! sockets bind the wildcard address, dual stack, so every VIP that the node's local routes
//! accept reaches them; the UDP answer `"<node> <request>"` tells the client which node its
//! packet actually reached.

use std::{
    io::ErrorKind,
    net::{Ipv6Addr, SocketAddr, TcpListener, UdpSocket},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use crate::netns::Netns;

/// UDP echo port on every node.
pub const UDP_PORT: u16 = 7777;
/// TCP accept-and-close port on every node.
pub const TCP_PORT: u16 = 7778;

/// How often the loops look at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// The echo threads of all nodes; [`Self::stop`] (also on drop) ends them.
pub(super) struct EchoServers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl EchoServers {
    /// Starts both services in every `(node name, namespace)`; returns once they are bound.
    pub fn start<'a>(nodes: impl Iterator<Item = (&'a str, &'a Netns)>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for (name, ns) in nodes {
            let (udp, tcp) = ns.enter(|| {
                let any = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
                let udp = UdpSocket::bind(SocketAddr::new(any.ip(), UDP_PORT))
                    .unwrap_or_else(|e| panic!("bind UDP echo in {name}: {e}"));
                let tcp = TcpListener::bind(SocketAddr::new(any.ip(), TCP_PORT))
                    .unwrap_or_else(|e| panic!("bind TCP echo in {name}: {e}"));
                (udp, tcp)
            });
            let node = name.to_owned();
            let s = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("echo-udp {name}"))
                    .spawn(move || udp_loop(&node, udp, &s))
                    .expect("spawn echo"),
            );
            let s = stop.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("echo-tcp {name}"))
                    .spawn(move || tcp_loop(tcp, &s))
                    .expect("spawn echo"),
            );
        }
        Self { stop, threads }
    }

    /// Stops and joins the threads (idempotent).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for EchoServers {
    fn drop(&mut self) {
        self.stop();
    }
}

fn udp_loop(node: &str, sock: UdpSocket, stop: &AtomicBool) {
    sock.set_read_timeout(Some(TICK)).expect("read timeout");
    let mut buf = [0u8; 2048];
    let mut reply = Vec::with_capacity(2048 + node.len());
    while !stop.load(Ordering::SeqCst) {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                reply.clear();
                reply.extend_from_slice(node.as_bytes());
                reply.push(b' ');
                reply.extend_from_slice(&buf[..n]);
                // A failed send (e.g. the link is down) is a lost probe, as on a real node.
                let _ = sock.send_to(&reply, from);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

fn tcp_loop(listener: TcpListener, stop: &AtomicBool) {
    // Non-blocking accept with a short sleep: the kernel completes handshakes on its own (the
    // client's connect succeeds before accept), so accepting only has to keep the backlog
    // from filling.
    listener.set_nonblocking(true).expect("non-blocking");
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((conn, _)) => drop(conn),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => std::thread::sleep(TICK),
        }
    }
}

//! A TCP relay from a listener in another network namespace to an address of this process's
//! namespace: how the node namespaces of the testbed reach the API server, which runs beside
//! the test process. Bytes are copied as they are (TLS passes through), one thread per
//! direction per connection; the API server's load here is a handful of connections.

use std::{
    io,
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    os::fd::AsRawFd,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
};

/// A running relay; dropping it closes the listener and every relayed connection.
pub(super) struct Relay {
    listener: Arc<TcpListener>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    accept: Option<JoinHandle<()>>,
}

impl Relay {
    /// Relays every connection accepted on `listener` to `to`.
    pub(super) fn start(listener: TcpListener, to: SocketAddr) -> io::Result<Relay> {
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let accept = {
            let (listener, stop, conns) = (listener.clone(), stop.clone(), conns.clone());
            std::thread::Builder::new()
                .name("kube-relay".into())
                .spawn(move || {
                    for inbound in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let Ok(inbound) = inbound else { continue };
                        // The API server down (killed for a restart): drop the connection, as
                        // a refused connect would look to the client.
                        let Ok(outbound) = TcpStream::connect(to) else {
                            continue;
                        };
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        if let (Ok(a), Ok(b)) = (inbound.try_clone(), outbound.try_clone()) {
                            let mut list = conns.lock().expect("relay connections");
                            list.retain(|c| c.peer_addr().is_ok());
                            list.extend([a, b]);
                        }
                        pipe(&inbound, &outbound);
                        pipe(&outbound, &inbound);
                    }
                })?
        };
        Ok(Relay {
            listener,
            stop,
            conns,
            accept: Some(accept),
        })
    }
}

/// Copies `from` into `to` on a thread of its own; half-closes `to` at EOF.
fn pipe(from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let _ = std::thread::Builder::new()
        .name("kube-relay-pipe".into())
        .spawn(move || {
            let _ = io::copy(&mut from, &mut to);
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

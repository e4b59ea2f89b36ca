//! A TCP listener whose connections a handler can reset, for the `refuse` outage mode.
//!
//! HTTP frameworks always answer; a dead or partitioned apiserver does not. Each accepted
//! stream carries a shared flag; the handler sets it through its [`ConnHandle`] (axum's connect
//! info), and the stream then turns on `SO_LINGER 0` and fails every read and write, so hyper
//! drops the connection and the kernel sends a RST instead of the response. The client sees a
//! reset / incomplete message, never an HTTP status.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// Per-connection info handed to handlers.
#[derive(Debug, Clone)]
pub(crate) struct ConnHandle {
    pub remote: SocketAddr,
    kill: Arc<AtomicBool>,
}

impl ConnHandle {
    /// Reset this connection instead of answering.
    pub fn refuse(&self) {
        tracing::debug!(remote = %self.remote, "apiserver: refusing connection (fault)");
        self.kill.store(true, Ordering::SeqCst);
    }
}

impl Connected<IncomingStream<'_, KillListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, KillListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The server's listeners (the first is the main one, whose address is reported); a connection
/// is accepted from whichever is ready first.
pub(crate) struct KillListener(pub Vec<TcpListener>);

impl Listener for KillListener {
    type Io = KillIo;
    type Addr = ConnHandle;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            // `TcpListener::accept` is cancel safe: the losers of the race keep no state.
            let accepts = self.0.iter().map(|l| Box::pin(l.accept()));
            let (accepted, _, _) = futures::future::select_all(accepts).await;
            match accepted {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    let kill = Arc::new(AtomicBool::new(false));
                    return (
                        KillIo {
                            inner: stream,
                            kill: kill.clone(),
                        },
                        ConnHandle { remote, kill },
                    );
                }
                // Out of file descriptors or an aborted handshake: back off briefly.
                Err(e) => {
                    tracing::warn!("apiserver accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(ConnHandle {
            remote: self
                .0
                .first()
                .ok_or_else(|| io::Error::other("no listener"))?
                .local_addr()?,
            kill: Arc::default(),
        })
    }
}

/// A TCP stream that fails once its connection has been refused.
pub(crate) struct KillIo {
    inner: TcpStream,
    kill: Arc<AtomicBool>,
}

impl KillIo {
    fn killed(&self) -> Option<io::Error> {
        if !self.kill.load(Ordering::SeqCst) {
            return None;
        }
        // Close with RST rather than FIN once dropped.
        let _ = self.inner.set_zero_linger();
        Some(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "connection refused by fault injection",
        ))
    }
}

impl AsyncRead for KillIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(e) = self.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for KillIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(e) = self.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(e) = self.killed() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

//! What the long-running subcommands (`agent`, `allocator`) share: a multi-threaded tokio
//! runtime, a shutdown future that resolves on SIGTERM or SIGINT, and a bounded wait for
//! background tasks once the work returns.

use std::{future::Future, process::ExitCode, time::Duration};

/// Runs `work(shutdown)` on a new runtime; `Err` carries the exit code when the runtime could
/// not start (EX_OSERR). Background tasks (bursts in flight, watches) get 0.5 s to end.
pub fn run_until_signal<F, T>(work: impl FnOnce(SignalShutdown) -> F) -> Result<T, ExitCode>
where
    F: Future<Output = T>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the runtime: {e}");
            ExitCode::from(71)
        })?;
    let out = rt.block_on(async move { work(signal_shutdown()).await });
    rt.shutdown_timeout(Duration::from_millis(500));
    Ok(out)
}

/// Resolves on the first SIGTERM or SIGINT (never, if the handlers cannot be installed).
pub type SignalShutdown = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

fn signal_shutdown() -> SignalShutdown {
    Box::pin(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            _ => return std::future::pending().await,
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

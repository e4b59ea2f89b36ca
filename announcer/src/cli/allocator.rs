//! `announcer allocator`: runs [`crate::allocator::run`] on a tokio runtime until SIGTERM or
//! SIGINT, then gives the Lease up and exits 0.

use std::{process::ExitCode, time::Duration};

use crate::allocator::{AllocatorArgs, AllocatorError};

/// `announcer allocator`.
pub fn run(args: AllocatorArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(71);
        }
    };
    let result = rt.block_on(async move {
        let shutdown = async {
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
        };
        crate::allocator::run(args, shutdown).await
    });
    rt.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            super::print_error(&e);
            // EX_CONFIG: both errors are configuration problems.
            ExitCode::from(match e {
                AllocatorError::KubeConfig(_) | AllocatorError::NoIdentity => 78,
            })
        }
    }
}

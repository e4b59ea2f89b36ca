//! `announcer agent`: runs [`crate::agent::run`] on a tokio runtime until SIGTERM or SIGINT,
//! then the handover, then exit 0.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use crate::agent::{AgentError, config::AgentArgs};

/// `announcer agent`.
pub fn run(args: AgentArgs, pin_root: PathBuf) -> ExitCode {
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
        crate::agent::run(args, pin_root, shutdown).await
    });
    // Background tasks (bursts in flight, watches) end with the runtime.
    rt.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            super::print_error(&e);
            ExitCode::from(exit_code(&e))
        }
    }
}

/// EX_CONFIG for configuration problems, EX_CANTCREAT for the state directory,
/// EX_UNAVAILABLE otherwise.
fn exit_code(e: &AgentError) -> u8 {
    match e {
        AgentError::Config(_)
        | AgentError::Selection(_)
        | AgentError::SelectorSyntax(_)
        | AgentError::KubeConfig(_)
        | AgentError::AdmissionPolicy(_)
        | AgentError::Key(_)
        | AgentError::Identity(_) => 78,
        AgentError::State(_) => 73,
        _ => 69,
    }
}

//! `announcer agent`: runs [`crate::agent::run`] on a tokio runtime until SIGTERM or SIGINT,
//! then the handover, then exit 0.

use std::{path::PathBuf, process::ExitCode};

use crate::agent::{AgentError, config::AgentArgs};

/// `announcer agent`.
pub fn run(args: AgentArgs, pin_root: PathBuf) -> ExitCode {
    let result = match super::service::run_until_signal(|shutdown| {
        crate::agent::run(args, pin_root, shutdown)
    }) {
        Ok(r) => r,
        Err(code) => return code,
    };
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

//! `announcer allocator`: runs [`crate::allocator::run`] on a tokio runtime until SIGTERM or
//! SIGINT, then gives the Lease up and exits 0.

use std::process::ExitCode;

use crate::allocator::{AllocatorArgs, AllocatorError};

/// `announcer allocator`.
pub fn run(args: AllocatorArgs) -> ExitCode {
    let result =
        match super::service::run_until_signal(|shutdown| crate::allocator::run(args, shutdown)) {
            Ok(r) => r,
            Err(code) => return code,
        };
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

//! `announcer withdrawer`: runs [`crate::withdrawer::run`] on a tokio runtime until SIGTERM or
//! SIGINT, then exits 0.

use std::process::ExitCode;

use crate::withdrawer::{WithdrawerArgs, WithdrawerError};

/// `announcer withdrawer`.
pub fn run(args: WithdrawerArgs) -> ExitCode {
    let result =
        match super::service::run_until_signal(|shutdown| crate::withdrawer::run(args, shutdown)) {
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

/// The `sysexits.h` code of `e`: EX_CONFIG for configuration, EX_UNAVAILABLE for a port.
fn exit_code(e: &WithdrawerError) -> u8 {
    match e {
        WithdrawerError::KubeConfig(_) | WithdrawerError::NoSlots => 78,
        WithdrawerError::Http(..) => 69,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Cmd};

    #[test]
    fn the_flags_override_the_tracker_defaults_and_the_rest_stay() {
        let cli = Cli::try_parse_from([
            "announcer",
            "withdrawer",
            "--max-withdrawn",
            "3",
            "--min-quorum",
            "4",
        ])
        .unwrap();
        let Cmd::Withdrawer(args) = cli.cmd else {
            panic!("not the withdrawer");
        };
        let c = args.tracker_config();
        assert_eq!((c.max_withdrawn, c.min_quorum), (3, 4));
        assert_eq!(c.reporter_fresh, std::time::Duration::from_secs(10));
    }

    #[test]
    fn zero_slots_is_a_configuration_error() {
        assert_eq!(
            super::exit_code(&crate::withdrawer::WithdrawerError::NoSlots),
            78
        );
    }
}

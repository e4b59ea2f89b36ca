//! The one way a test starts an `announcer withdrawer` (the `announcer-withdrawal`
//! Deployment's process): [`WithdrawerCommand`], its command line and environment, as
//! [`super::allocator_cmd::AllocatorCommand`] does for the allocator.

use std::{fmt::Display, path::Path, process::Command};

use super::{
    NAMESPACE,
    agent_cmd::{announcer_command, spawn_logged},
    process::Guarded,
};
use crate::{cli::announcer_bin, netns::Netns};

/// `announcer withdrawer --identity ID --namespace NS --kubeconfig K --http-address
/// 127.0.0.1:0 EXTRA…` with the tests' log settings (`RUST_LOG=info,announcer=debug`,
/// `NO_COLOR=1`).
#[derive(Clone, Debug)]
pub struct WithdrawerCommand {
    identity: String,
    kubeconfig: String,
    extra: Vec<String>,
}

impl WithdrawerCommand {
    /// The withdrawer replica `identity` in [`NAMESPACE`], reaching the API server through
    /// `kubeconfig`.
    pub fn new(identity: &str, kubeconfig: &Path) -> Self {
        WithdrawerCommand {
            identity: identity.to_owned(),
            kubeconfig: kubeconfig
                .to_str()
                .unwrap_or_else(|| panic!("{} is not UTF-8", kubeconfig.display()))
                .to_owned(),
            extra: Vec::new(),
        }
    }

    /// The test's own arguments, last (e.g. `--max-withdrawn 1`).
    pub fn extra(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// The arguments after the binary (its metrics on an ephemeral loopback port, so that
    /// replicas never collide).
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "withdrawer",
            "--identity",
            &self.identity,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            &self.kubeconfig,
            "--http-address",
            "127.0.0.1:0",
        ]
        .map(String::from)
        .to_vec();
        args.extend(self.extra.iter().cloned());
        args
    }

    /// The command, run in `netns` or in the test's own; stdin and stdout closed.
    pub fn command(&self, netns: Option<&Netns>) -> Command {
        announcer_command(&announcer_bin(), netns, self.args())
    }

    /// Starts it as a [`Guarded`] child, its stderr appended to `log`.
    pub fn spawn(&self, netns: Option<&Netns>, log: &Path) -> Guarded {
        spawn_logged(&mut self.command(netns), log, self)
    }
}

impl Display for WithdrawerCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.args().join(" "))
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn the_identity_namespace_kubeconfig_and_port_come_after_withdrawer_then_the_tests_own() {
        let cmd = WithdrawerCommand::new("w-0", Path::new("/k")).extra(&["--max-withdrawn", "1"]);
        assert_eq!(
            cmd.args(),
            [
                "withdrawer",
                "--identity",
                "w-0",
                "--namespace",
                NAMESPACE,
                "--kubeconfig",
                "/k",
                "--http-address",
                "127.0.0.1:0",
                "--max-withdrawn",
                "1"
            ]
        );
    }
}

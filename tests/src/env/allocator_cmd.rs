//! The one way a test starts an `announcer allocator` (the `announcer-allocator` Deployment's
//! process): [`AllocatorCommand`], its command line and environment.
//!
//! Why one builder, as for [`super::agent_cmd::AgentCommand`]: the process world, the LAN
//! testbed, the real control plane's stand-in kubelets and the demo all start allocators; each
//! says only who it is and how it reaches the API server.

use std::{fmt::Display, path::Path, process::Command};

use super::{
    NAMESPACE,
    agent_cmd::{announcer_command, spawn_logged},
    process::Guarded,
};
use crate::{cli::announcer_bin, netns::Netns};

/// `announcer allocator --identity ID --namespace NS --kubeconfig K EXTRA…` with the tests' log
/// settings (`RUST_LOG=info,announcer=debug`, `NO_COLOR=1`).
#[derive(Clone, Debug)]
pub struct AllocatorCommand {
    identity: String,
    kubeconfig: String,
    extra: Vec<String>,
}

impl AllocatorCommand {
    /// The allocator replica `identity` (its Pod's name on a real control plane) in
    /// [`NAMESPACE`], reaching the API server through `kubeconfig`.
    pub fn new(identity: &str, kubeconfig: &Path) -> Self {
        AllocatorCommand {
            identity: identity.to_owned(),
            kubeconfig: kubeconfig
                .to_str()
                .unwrap_or_else(|| panic!("{} is not UTF-8", kubeconfig.display()))
                .to_owned(),
            extra: Vec::new(),
        }
    }

    /// The test's own arguments, last (e.g. `--classless`).
    pub fn extra(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Its identity (the Lease holder it writes).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The arguments after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "allocator",
            "--identity",
            &self.identity,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            &self.kubeconfig,
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

impl Display for AllocatorCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.args().join(" "))
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn the_identity_namespace_and_kubeconfig_come_after_allocator_then_the_tests_own() {
        let cmd = AllocatorCommand::new("alloc-0", Path::new("/k")).extra(&["--classless"]);
        assert_eq!(
            cmd.args(),
            [
                "allocator",
                "--identity",
                "alloc-0",
                "--namespace",
                NAMESPACE,
                "--kubeconfig",
                "/k",
                "--classless"
            ]
        );
    }
}

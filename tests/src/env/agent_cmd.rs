//! The one way a test starts an `announcer agent`: [`AgentCommand`], its command line and
//! environment.
//!
//! Why one builder: the cluster world, the LAN world and the single-node tests each wrote the
//! command line by hand, so a flag every test agent needs (its namespace, its state directory,
//! debug logs without colour) had to be added in three places and drifted. Each world now says
//! only what differs (the data plane or not, the addresses, the pin root); the rest is here.
//!
//! Defaults a test overrides: a flag given again in [`AgentCommand::extra`] replaces the
//! world's value for it (clap would refuse it twice).

use std::{
    ffi::OsString,
    fmt::Display,
    fs::OpenOptions,
    net::IpAddr,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use super::{NAMESPACE, process::Guarded};
use crate::{cli::announcer_bin, netns::Netns};

/// Per-Service Leases (`--election lease-per-service`) short enough for a test to see them
/// change hands: 3 s, renewed within 2 s, retried every second.
pub const PER_SERVICE_ELECTION: [&str; 8] = [
    "--election",
    "lease-per-service",
    "--service-lease-duration",
    "3s",
    "--service-lease-renew-deadline",
    "2s",
    "--service-lease-retry",
    "1s",
];

/// `announcer [--pin-root ROOT] agent FLAGS… EXTRA…` with the tests' log settings
/// (`RUST_LOG=info,announcer=debug`, `NO_COLOR=1`).
#[derive(Clone, Debug)]
pub struct AgentCommand {
    /// Another `announcer` binary than the one under test (an older release, for upgrades).
    binary: Option<PathBuf>,
    pin_root: Option<PathBuf>,
    /// The world's flags, in order, each with its value if it takes one.
    flags: Vec<(&'static str, Option<String>)>,
    /// The test's own arguments, after the world's.
    extra: Vec<String>,
    /// Environment beyond the log settings (e.g. libfaketime's).
    env: Vec<(String, OsString)>,
}

fn utf8(path: &Path) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not UTF-8", path.display()))
        .to_owned()
}

impl AgentCommand {
    /// The agent of `node` in [`NAMESPACE`], reaching the API server through `kubeconfig`, with
    /// its identity and incarnation counter in `state_dir` (keep it across restarts, as a
    /// hostPath keeps it on a node).
    pub fn new(node: &str, kubeconfig: &Path, state_dir: &Path) -> Self {
        Self {
            binary: None,
            pin_root: None,
            flags: vec![
                ("--node-name", Some(node.to_owned())),
                ("--namespace", Some(NAMESPACE.to_owned())),
                ("--kubeconfig", Some(utf8(kubeconfig))),
                ("--state-dir", Some(utf8(state_dir))),
            ],
            extra: Vec::new(),
            env: Vec::new(),
        }
    }

    fn flag(mut self, flag: &'static str, value: Option<String>) -> Self {
        self.flags.push((flag, value));
        self
    }

    /// Runs `path` instead of the `announcer` under test (e.g. an older release).
    pub fn binary(mut self, path: &Path) -> Self {
        self.binary = Some(path.to_owned());
        self
    }

    /// Its own bpffs pin root (`--pin-root`, before `agent`).
    pub fn pin_root(mut self, root: &Path) -> Self {
        self.pin_root = Some(root.to_owned());
        self
    }

    /// Where `/state` and `/metrics` listen (`--http-address`).
    pub fn http_address(self, addr: impl Display) -> Self {
        self.flag("--http-address", Some(addr.to_string()))
    }

    /// The UDP heartbeat port (`--heartbeat-port`).
    pub fn heartbeat_port(self, port: u16) -> Self {
        self.flag("--heartbeat-port", Some(port.to_string()))
    }

    /// The address heartbeats are sent from (`--heartbeat-address`; without it, the Node's
    /// InternalIP).
    pub fn heartbeat_address(self, addr: IpAddr) -> Self {
        self.flag("--heartbeat-address", Some(addr.to_string()))
    }

    /// Election only, no XDP (`--no-dataplane`).
    pub fn no_dataplane(self) -> Self {
        self.flag("--no-dataplane", None)
    }

    /// XDP in `mode`, `generic` or `native` (`--xdp-mode`).
    pub fn xdp_mode(self, mode: &str) -> Self {
        self.flag("--xdp-mode", Some(mode.to_owned()))
    }

    /// The LAN interfaces it announces on (`--interface a,b`).
    pub fn interfaces(self, ifaces: &[&str]) -> Self {
        self.flag("--interface", Some(ifaces.join(",")))
    }

    /// The test's own arguments, last; a flag among them replaces the world's value for it.
    pub fn extra(mut self, args: &[&str]) -> Self {
        self.extra.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// An environment variable for the agent.
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Whether the test's arguments give `flag` (as `--flag` or `--flag=value`).
    fn overridden(&self, flag: &str) -> bool {
        self.extra
            .iter()
            .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
    }

    /// The arguments after the binary.
    pub fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(root) = &self.pin_root {
            args.extend(["--pin-root".to_owned(), utf8(root)]);
        }
        args.push("agent".to_owned());
        for (flag, value) in &self.flags {
            if !self.overridden(flag) {
                args.push((*flag).to_owned());
                args.extend(value.clone());
            }
        }
        args.extend(self.extra.iter().cloned());
        args
    }

    /// The command, run in `netns` (only the network namespace changes: the agent still sees
    /// the host's bpffs) or in the test's own; stdin and stdout closed, stderr left to the
    /// caller.
    pub fn command(&self, netns: Option<&Netns>) -> Command {
        let bin = self.binary.clone().unwrap_or_else(announcer_bin);
        let mut cmd = announcer_command(&bin, netns, self.args());
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Starts it (see [`Self::command`]) as a [`Guarded`] child, its stderr appended to `log`.
    /// Panics if it cannot start.
    pub fn spawn(&self, netns: Option<&Netns>, log: &Path) -> Guarded {
        spawn_logged(&mut self.command(netns), log, self)
    }
}

impl Display for AgentCommand {
    /// `--pin-root … agent --node-name …`: the arguments as a log line shows them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.args().join(" "))
    }
}

/// `bin ARGS…` with the tests' log settings (`RUST_LOG=info,announcer=debug`, `NO_COLOR=1`),
/// run in `netns` (only the network namespace changes: the process still sees the host's
/// bpffs) or in the test's own; stdin and stdout closed, stderr left to the caller. Agents and
/// allocators are started through this.
pub(crate) fn announcer_command(bin: &Path, netns: Option<&Netns>, args: Vec<String>) -> Command {
    let mut cmd = match netns {
        Some(ns) => ns.nsenter_cmd(&utf8(bin)),
        None => Command::new(bin),
    };
    cmd.args(args)
        .env("RUST_LOG", "info,announcer=debug")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    cmd
}

/// Starts `cmd` as a [`Guarded`] child, its stderr appended to `log`. Panics, naming
/// `announcer WHAT`, if it cannot start.
pub(crate) fn spawn_logged(cmd: &mut Command, log: &Path, what: &dyn Display) -> Guarded {
    let out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap_or_else(|e| panic!("open {}: {e}", log.display()));
    cmd.stderr(out);
    Guarded::spawn(cmd).unwrap_or_else(|e| panic!("spawn `announcer {what}`: {e}"))
}

#[cfg(test)]
mod unit {
    use super::*;

    fn base() -> AgentCommand {
        AgentCommand::new("node-a", Path::new("/k"), Path::new("/s"))
    }

    #[test]
    fn the_world_flags_come_after_agent_and_the_pin_root_before_it() {
        let cmd = base()
            .pin_root(Path::new("/sys/fs/bpf/p"))
            .http_address("127.0.0.1:9746")
            .no_dataplane()
            .extra(&["--grace", "5s"]);
        assert_eq!(
            cmd.args(),
            [
                "--pin-root",
                "/sys/fs/bpf/p",
                "agent",
                "--node-name",
                "node-a",
                "--namespace",
                NAMESPACE,
                "--kubeconfig",
                "/k",
                "--state-dir",
                "/s",
                "--http-address",
                "127.0.0.1:9746",
                "--no-dataplane",
                "--grace",
                "5s",
            ]
        );
    }

    #[test]
    fn a_flag_the_test_gives_replaces_the_worlds() {
        let cmd = base()
            .xdp_mode("generic")
            .extra(&["--xdp-mode=native", "--namespace", "other"]);
        let args = cmd.args();
        assert_eq!(args.iter().filter(|a| a.contains("--xdp-mode")).count(), 1);
        assert_eq!(args.iter().filter(|a| *a == "--namespace").count(), 1);
        assert!(args.ends_with(&["--xdp-mode=native", "--namespace", "other"].map(String::from)));
    }
}

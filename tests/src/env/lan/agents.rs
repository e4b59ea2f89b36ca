//! The agent processes (and other per-node processes such as keepalived).
//!
//! Why real processes under `nsenter --net`: SIGKILL, SIGTERM handover and restarts only mean
//! something for a process, and the agent must see the node's own `eth0`, addresses and
//! loopback. Only the network namespace changes, so the agents share the host's bpffs and pin
//! under `/sys/fs/bpf/anntest-<pid>-tb<n>/<node>` (a root of their own per node, removed when
//! the testbed drops, swept by [`crate::netns::sweep_stale`] if the test process dies).
//! `PR_SET_PDEATHSIG(SIGKILL)` makes the kernel kill them if the test process dies first.

use std::{
    fs::OpenOptions,
    io::Write,
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::PathBuf,
    process::Command,
    time::{Duration, Instant},
};

use super::Testbed;
use crate::{
    apiserver::kubeconfig_yaml,
    env::process::{Guarded, exit_code},
    env::{agent_cmd::AgentCommand, allocator_cmd::AllocatorCommand},
};

/// The agents' `/state` port inside their namespaces.
pub const AGENT_HTTP_PORT: u16 = 9746;

/// One running (or exited) agent.
pub(super) struct Agent {
    child: Guarded,
    /// How it was started, to restart it identically.
    cmd: AgentCommand,
    log: PathBuf,
    exited: Option<i32>,
}

impl Agent {
    /// Still running (not reaped, not exited).
    pub fn running(&self) -> bool {
        self.exited.is_none()
    }

    /// SIGKILL and reap (idempotent).
    pub fn kill(&mut self) {
        if self.exited.is_none() {
            self.exited = Some(self.child.kill().map_or(-1, exit_code));
        }
    }
}

impl Testbed {
    /// Starts `node`'s agent with the real data plane: `announcer --pin-root ROOT agent
    /// --node-name NODE --kubeconfig … --heartbeat-address <node IPv4> --http-address
    /// 0.0.0.0:9746 --xdp-mode generic|native --interface eth0[,eth1] EXTRA…` (a default flag
    /// is left out when `extra_args` has it; `eth1` with [`Self::add_second_nic`]). With a
    /// [`Self::set_clock_offset`] the agent runs under libfaketime. Logs go to
    /// `<dir>/agent-<node>.log`.
    pub fn start_agent(&mut self, node: &str, extra_args: &[&str]) {
        if let Some(a) = self.agents.get_mut(node) {
            assert!(
                a.exited.is_some() || a.child.try_wait().ok().flatten().is_some(),
                "the agent of {node} is still running"
            );
        }
        let kubeconfig = self.dir.join(format!("kubeconfig.{node}"));
        match &self.kube {
            None => std::fs::write(&kubeconfig, kubeconfig_yaml(&self.agent_url, &[node]))
                .expect("write kubeconfig"),
            // A token bound to the node's DaemonSet Pod, as the kubelet would project it.
            Some(cp) => {
                let (client, ca) = (cp.client(), cp.ca_cert().to_owned());
                let (node_name, url, path) =
                    (node.to_string(), self.agent_url.clone(), kubeconfig.clone());
                self.block_on(async move {
                    crate::env::kube::write_agent_kubeconfig(client, &ca, &node_name, &url, &path)
                        .await
                })
                .unwrap_or_else(|e| panic!("a kubeconfig for the agent of {node}: {e}"));
            }
        }
        let mode = if self.cfg.native_xdp {
            "native"
        } else {
            "generic"
        };
        // Kept across restarts of this node's agent (identity, incarnation), gone with the
        // testbed.
        let state = self.dir.join(format!("state-{node}"));
        let cmd = AgentCommand::new(node, &kubeconfig, &state)
            .pin_root(&self.pin_root.join(node))
            .heartbeat_address(self.node_ip4(node).into())
            .http_address(format!("0.0.0.0:{AGENT_HTTP_PORT}"))
            .xdp_mode(mode)
            .interfaces(self.node_ifaces())
            .extra(extra_args);
        self.spawn_agent(node, cmd);
    }

    /// Starts every node's agent with the same `extra_args`.
    pub fn start_agents(&mut self, extra_args: &[&str]) {
        for n in self.nodes() {
            self.start_agent(&n, extra_args);
        }
    }

    fn spawn_agent(&mut self, node: &str, cmd: AgentCommand) {
        let log = self.dir.join(format!("agent-{node}.log"));
        let mut out = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("agent log");
        let _ = writeln!(out, "===== testbed: starting announcer {cmd}");
        let mut run = cmd.clone();
        if let Some(offset) = self.clock_offsets.get(node) {
            let _ = writeln!(
                out,
                "===== testbed: wall clock offset {offset} (libfaketime)"
            );
            run = super::clock::apply(run, offset);
        }
        let child = run.spawn(Some(self.node_ns(node)), &log);
        self.agents.insert(
            node.into(),
            Agent {
                child,
                cmd,
                log,
                exited: None,
            },
        );
    }

    fn agent_mut(&mut self, node: &str) -> &mut Agent {
        self.agents
            .get_mut(node)
            .unwrap_or_else(|| panic!("no agent was started on {node}"))
    }

    /// SIGKILLs `node`'s agent and reaps it; its pins and XDP stay (as after a crash).
    pub fn kill_agent(&mut self, node: &str) {
        self.agent_mut(node).kill();
    }

    /// Sends SIGTERM to `node`'s agent and returns at once (see [`Self::wait_agent_exit`]).
    pub fn term_agent(&mut self, node: &str) {
        let a = self.agent_mut(node);
        if a.exited.is_none() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(a.child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
    }

    /// Sends SIGSTOP to `node`'s agent (a frozen process: a long GC-like pause, a stalled
    /// VM); its data plane keeps answering. [`Self::thaw_agent`] resumes it; dropping the
    /// testbed SIGKILLs it frozen or not.
    pub fn freeze_agent(&self, node: &str) {
        if let Some(a) = self.agents.get(node).filter(|a| a.running()) {
            a.child.signal(libc::SIGSTOP);
        }
    }

    /// Sends SIGCONT to `node`'s agent (after [`Self::freeze_agent`]).
    pub fn thaw_agent(&self, node: &str) {
        if let Some(a) = self.agents.get(node).filter(|a| a.running()) {
            a.child.signal(libc::SIGCONT);
        }
    }

    /// Waits up to `timeout` for `node`'s agent to exit: its exit code (128 + signal if a
    /// signal ended it), `None` if it is still running.
    pub fn wait_agent_exit(&mut self, node: &str, timeout: Duration) -> Option<i32> {
        let end = Instant::now() + timeout;
        let a = self.agent_mut(node);
        loop {
            if a.exited.is_some() {
                return a.exited;
            }
            if let Some(s) = a.child.try_wait().expect("try_wait") {
                a.exited = Some(exit_code(s));
                return a.exited;
            }
            if Instant::now() >= end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Starts `node`'s agent again with the arguments it had (SIGKILLing it first if it still
    /// runs).
    pub fn restart_agent(&mut self, node: &str) {
        let a = self.agent_mut(node);
        a.kill();
        let cmd = a.cmd.clone();
        self.spawn_agent(node, cmd);
    }

    /// The pid of `node`'s agent if it is running.
    pub fn agent_pid(&self, node: &str) -> Option<u32> {
        let a = self.agents.get(node)?;
        a.exited.is_none().then(|| a.child.id())
    }

    /// The whole log of `node`'s agent (empty if none).
    pub fn agent_log_text(&self, node: &str) -> String {
        self.agents
            .get(node)
            .and_then(|a| std::fs::read_to_string(&a.log).ok())
            .unwrap_or_default()
    }

    /// The last 25 lines of `node`'s agent log.
    pub fn agent_log_tail(&self, node: &str) -> String {
        let Some(a) = self.agents.get(node) else {
            return format!("(no agent started on {node})");
        };
        let text = std::fs::read_to_string(&a.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    /// Path of `node`'s agent log.
    pub fn agent_log(&self, node: &str) -> Option<PathBuf> {
        self.agents.get(node).map(|a| a.log.clone())
    }

    /// Starts the allocator Deployment's `n` replicas (`announcer allocator`), each in the
    /// network namespace of a node, as the kubelet of that node would run its Pod; returns their
    /// identities. On a real control plane they are the Deployment's Pods, each on the node the
    /// scheduler bound it to, with a token of the `announcer-allocator` ServiceAccount bound to
    /// it; on the in-repo server `allocator-0`, ... on the first nodes. Logs go to
    /// `<dir>/allocator-<id>.log`. Killed by [`Self::crash`] of their node.
    pub fn start_allocators(&mut self, n: usize) -> Vec<String> {
        let placed: Vec<(String, String)> = match &self.kube {
            None => (0..n)
                .map(|i| {
                    let id = format!("allocator-{i}");
                    let kc = self.dir.join(format!("kubeconfig.{id}"));
                    std::fs::write(&kc, kubeconfig_yaml(&self.agent_url, &[&id]))
                        .expect("write kubeconfig");
                    (id, super::node_name(i % self.nodes.len()))
                })
                .collect(),
            Some(cp) => {
                let (client, ca) = (cp.client(), cp.ca_cert().to_owned());
                let (url, dir) = (self.agent_url.clone(), self.dir.clone());
                let c2 = client.clone();
                let ids = self
                    .block_on(async move {
                        crate::env::kube::write_allocator_kubeconfigs(client, &ca, &url, &dir, n)
                            .await
                    })
                    .unwrap_or_else(|e| panic!("kubeconfigs for the allocator Pods: {e}"));
                let pods = self
                    .block_on(async move {
                        crate::env::kube::allocator_pods(c2, n, Duration::from_secs(60)).await
                    })
                    .unwrap_or_else(|e| panic!("the allocator Pods: {e}"));
                ids.into_iter()
                    .map(|id| {
                        let node = pods
                            .iter()
                            .find(|p| p.metadata.name.as_deref() == Some(id.as_str()))
                            .and_then(|p| p.spec.as_ref()?.node_name.clone())
                            .expect("a bound Pod");
                        (id, node)
                    })
                    .collect()
            }
        };
        for (id, node) in &placed {
            let kc = self.dir.join(format!("kubeconfig.{id}"));
            let log = self.dir.join(format!("allocator-{id}.log"));
            let out = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)
                .expect("allocator log");
            let mut cmd = AllocatorCommand::new(id, &kc).command(None);
            cmd.stderr(out);
            self.spawn_in_node(node, cmd);
        }
        placed.into_iter().map(|(id, _)| id).collect()
    }

    /// Spawns `cmd` inside `node`'s network namespace (entered between fork and exec, so the
    /// command's own stdio settings hold), with a parent-death SIGKILL. It is killed by
    /// [`Self::crash`] of that node and when the testbed drops.
    pub fn spawn_in_node(&mut self, node: &str, mut cmd: Command) {
        let ns = self.node_ns(node).open();
        let fd = ns.as_raw_fd();
        // SAFETY: setns and prctl are async-signal-safe syscalls; `ns` (moved into the
        // closure) keeps `fd` open until the command is dropped.
        unsafe {
            cmd.pre_exec(move || {
                let _keep_open = &ns;
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = Guarded::spawn(&mut cmd)
            .unwrap_or_else(|e| panic!("spawn {:?} in {node}: {e}", cmd.get_program()));
        self.spawned.entry(node.into()).or_default().push(child);
    }
}

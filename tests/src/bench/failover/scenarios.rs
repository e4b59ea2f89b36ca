//! The failures injected, and one system on one testbed ([`Bed`]): how to fail a node, how to
//! restore the testbed between trials, who announces what.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::IpAddr,
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;

use super::{
    measure::Expect,
    systems::{Keepalived, System, agent_owners, keepalived_owners},
};
use crate::env::lan::{Peer, PeerKind, Testbed};

/// One kind of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scenario {
    /// The owner's link goes down and its agent (keepalived) is SIGKILLed.
    Crash,
    /// The owner's link goes down; its agent keeps running.
    LinkDown,
    /// The owner's agent (keepalived) is SIGKILLed and not restarted.
    Sigkill,
    /// SIGKILL, restarted [`RESTART_AFTER`] later (within the agent's 5 s grace).
    Restart,
    /// The owner's agent (keepalived's processes) is SIGSTOPped for [`FREEZE_FOR`], then
    /// SIGCONTed: a paused process, not a dead one.
    Freeze,
    /// SIGTERM, as in a rolling update; not restarted during the trial.
    Sigterm,
    /// The API server refuses the agents, then the owner crashes. For keepalived the same as
    /// [`Scenario::Crash`] (it uses no API).
    ApiOutageCrash,
    /// The owner and its successor cannot reach each other for [`PARTITION_HOLD`], then heal.
    Partition,
    /// The owner crashes (as [`Scenario::Crash`]); once the VIP moved and settled
    /// ([`REJOIN_SETTLE`]) the node comes back (link up, agent restarted). Measured: what the
    /// client loses while the returning node rejoins, and whether the VIP moves back to it.
    Rejoin,
    /// Not a trial: one long run per system with every core busy (`stress-ng`) and, for the
    /// agents, every API request slowed down; counts ownership changes and double owners of
    /// [`STRESS_VIPS`] VIPs. Opt-in ([`Scenario::OPT_IN`]): it takes `--stress-duration` per
    /// system.
    Stress,
    /// The VIP owner's node crashes (as [`Scenario::Crash`], its kubelet and kube-proxy too)
    /// under a Service with `externalTrafficPolicy: Local`; measured end to end by HTTP through
    /// the real kube-proxy to real Pods ([`super::e2e`]). Opt-in: real control plane, ~1 min a
    /// trial.
    CrashE2eLocal,
    /// The same with `externalTrafficPolicy: Cluster` (the crashed node holds one of the
    /// three endpoints).
    CrashE2eCluster,
    /// Fast endpoint withdrawal's bad days ([`super::safety`]): one long run each, no node
    /// crashes, every withdrawn Pod a false one. Every CPU busy and the API slowed down.
    StressE2e,
    /// Two nodes cut from each other, on and off.
    PartitionE2e,
    /// The heartbeat port dropped on every node, the API fine.
    BlackoutE2e,
    /// One node's agent killed again and again, the node fine.
    AgentCrashloopE2e,
    /// A crash of the node that owns the most VIPs of a large set (100 probed).
    Crash100,
}

/// How long after the SIGKILL the restart scenario restarts the agent.
pub const RESTART_AFTER: Duration = Duration::from_secs(1);
/// How long the freeze scenario keeps the agent stopped.
pub const FREEZE_FOR: Duration = Duration::from_millis(500);
/// In the rejoin scenario: how long the VIP stays on the successor (after the takeover was
/// seen) before the crashed node comes back.
pub const REJOIN_SETTLE: Duration = Duration::from_secs(2);
/// In the rejoin scenario: how long the client keeps probing after the returning agent is
/// ready (keepalived: running), for a move back to show.
pub const REJOIN_WATCH: Duration = Duration::from_secs(4);
/// In the rejoin scenario: how long the returning agent may take to get ready.
pub const REJOIN_READY_BOUND: Duration = Duration::from_secs(30);
/// VIPs (one Service each, the main set included) of the stress scenario.
pub const STRESS_VIPS: usize = 300;
/// The latency added to every API request of the agents in the stress scenario.
pub const STRESS_API_LATENCY: Duration = Duration::from_millis(200);
/// How long the partition lasts before it heals.
pub const PARTITION_HOLD: Duration = Duration::from_secs(5);
/// In the API-outage scenario: outage start to crash, and how long the outage lasts after
/// the crash at most (the API comes back then if the VIPs have not failed over).
pub const API_OUTAGE_LEAD: Duration = Duration::from_secs(1);
pub const API_OUTAGE_HOLD: Duration = Duration::from_secs(10);

impl Scenario {
    /// The scenarios of a run without `--scenarios`, in run order (partition after crash: it
    /// uses the successor the crashes revealed; crash-100 last: it adds VIPs).
    pub const ALL: [Scenario; 10] = [
        Scenario::Crash,
        Scenario::LinkDown,
        Scenario::Sigkill,
        Scenario::Restart,
        Scenario::Freeze,
        Scenario::Sigterm,
        Scenario::ApiOutageCrash,
        Scenario::Partition,
        Scenario::Rejoin,
        Scenario::Crash100,
    ];

    /// Scenarios run only when `--scenarios` names them: stress takes `--stress-duration`
    /// (10 min by default) per system, which would make the default run 1 h longer.
    /// So do the end-to-end ones: they need the real control plane and wait for its node
    /// lifecycle controller in every trial.
    pub const OPT_IN: [Scenario; 7] = [
        Scenario::Stress,
        Scenario::CrashE2eLocal,
        Scenario::CrashE2eCluster,
        Scenario::StressE2e,
        Scenario::PartitionE2e,
        Scenario::BlackoutE2e,
        Scenario::AgentCrashloopE2e,
    ];

    /// Every scenario there is: [`Scenario::ALL`], then [`Scenario::OPT_IN`].
    pub fn known() -> impl Iterator<Item = Scenario> {
        Scenario::ALL.into_iter().chain(Scenario::OPT_IN)
    }

    /// Whether it runs trials (a Row of [`super::trial::Trial`]s); stress and the safety
    /// scenarios ([`super::safety`]) are one long run each.
    pub fn has_trials(self) -> bool {
        self != Scenario::Stress && !self.is_safety()
    }

    /// Fast endpoint withdrawal's safety runs ([`super::safety`]).
    pub const SAFETY: [Scenario; 4] = [
        Scenario::StressE2e,
        Scenario::PartitionE2e,
        Scenario::BlackoutE2e,
        Scenario::AgentCrashloopE2e,
    ];

    /// Whether it is one of [`Scenario::SAFETY`].
    pub fn is_safety(self) -> bool {
        Scenario::SAFETY.contains(&self)
    }

    /// Name in tables, JSON and `--scenarios`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Crash => "crash",
            Scenario::LinkDown => "link-down",
            Scenario::Sigkill => "sigkill",
            Scenario::Restart => "restart-in-grace",
            Scenario::Freeze => "freeze",
            Scenario::Sigterm => "sigterm",
            Scenario::ApiOutageCrash => "api-outage-crash",
            Scenario::Partition => "partition",
            Scenario::Rejoin => "rejoin",
            Scenario::Stress => "stress",
            Scenario::CrashE2eLocal => "crash-e2e-local",
            Scenario::CrashE2eCluster => "crash-e2e-cluster",
            Scenario::Crash100 => "crash-100",
            Scenario::StressE2e => "stress-e2e",
            Scenario::PartitionE2e => "partition-e2e",
            Scenario::BlackoutE2e => "blackout-e2e",
            Scenario::AgentCrashloopE2e => "agent-crashloop-e2e",
        }
    }

    /// Parses a name of [`Scenario::name`].
    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::known().find(|x| x.name() == s)
    }

    /// What the failure should do to the owner of the victim's VIPs on `system`; a trial
    /// that does not observe it failed, however little the client lost. Every failure moves
    /// them, except:
    /// * a restart within the grace: the agent's pinned entries answer while it is down and a
    ///   successor that finds them answering waits for the grace or the agent's return, so the
    ///   restarted agent keeps its VIPs (the Lease-per-Service agent too: its Lease does not
    ///   expire in the second it is down). keepalived has no grace (its VRRP process dies
    ///   with it) and, with `nopreempt`, whichever backup's timer fires first holds the VIP:
    ///   not judged;
    /// * a freeze: the frozen agent's data plane keeps answering, so a successor that probes it
    ///   waits, and the agent, back after [`FREEZE_FOR`], keeps its VIPs. keepalived's backups
    ///   take over once three adverts are missed (0.3 s tuned): not judged;
    /// * a partition: both sides may announce; judged by overlap and time to one owner;
    /// * a rejoin: whether the VIP moves back to the returning node is reported, not judged;
    /// * stress: no trials; judged by its ownership changes.
    pub fn expected_owner(self, system: System) -> Option<Expect> {
        match self {
            Scenario::Crash
            | Scenario::LinkDown
            | Scenario::Sigkill
            | Scenario::Sigterm
            | Scenario::ApiOutageCrash
            | Scenario::CrashE2eLocal
            | Scenario::CrashE2eCluster
            | Scenario::Crash100 => Some(Expect::Moves),
            Scenario::Restart | Scenario::Freeze if !system.is_agent() => None,
            Scenario::Restart | Scenario::Freeze => Some(Expect::Stays),
            Scenario::Partition
            | Scenario::Rejoin
            | Scenario::Stress
            | Scenario::StressE2e
            | Scenario::PartitionE2e
            | Scenario::BlackoutE2e
            | Scenario::AgentCrashloopE2e => None,
        }
    }
}

/// What runs on every node: the agents, keepalived, or a real peer (MetalLB, kube-vip).
enum Runner {
    Agents,
    Keepalived(Keepalived),
    Peer(Peer),
}

/// One system running on one testbed, reused across trials.
pub struct Bed {
    pub tb: Testbed,
    pub system: System,
    runner: Runner,
    /// The VIPs the trials probe.
    pub vips: Vec<IpAddr>,
    /// Nodes whose agent (keepalived, peer) is not running.
    stopped: BTreeSet<String>,
    /// Nodes whose agent got SIGTERM and may still be handing over.
    terminated: BTreeSet<String>,
    links_down: BTreeSet<String>,
    /// Nodes whose agent (keepalived, peer) is SIGSTOPped.
    frozen: BTreeSet<String>,
    partitions: Vec<(String, String)>,
    api_down: bool,
    /// Whether the agents' API requests are delayed ([`Bed::api_latency`]).
    api_slow: bool,
    /// Who took over from whom (learned from the trials; partitions pick their pair with it).
    pub successor: BTreeMap<String, String>,
}

impl Scenario {
    /// Whether `system` can run this scenario here; why not if it cannot (the run reports
    /// the cell as unsupported).
    pub fn supported_by(self, system: System) -> Result<(), &'static str> {
        if system.withdraws()
            && !self.is_safety()
            && !matches!(self, Scenario::CrashE2eLocal | Scenario::CrashE2eCluster)
        {
            return Err(
                "announcer-withdraw is announcer-default plus the withdrawer, which acts on \
                 endpoints only: see announcer-default's row",
            );
        }
        if self.is_safety() && !system.withdraws() {
            return Err(
                "the e2e safety scenarios judge fast endpoint withdrawal; this system does not \
                 withdraw endpoints",
            );
        }
        if matches!(self, Scenario::CrashE2eLocal | Scenario::CrashE2eCluster)
            && system.is_keepalived()
        {
            return Err(
                "the end-to-end scenarios need a LoadBalancer Service the system announces; \
                 keepalived knows no Services",
            );
        }
        match (self, system.peer()) {
            (Scenario::Stress, Some(_)) => Err(
                "stress counts ownership changes from the agents' /state and metrics; not \
                 measured for MetalLB and kube-vip",
            ),
            (Scenario::Crash100, Some(PeerKind::MetalLb)) => Err(
                "crash-100 needs 300 VIPs: MetalLB gives a Service one address per family, so \
                 300 Services with Pods on every node; not run",
            ),
            (Scenario::Crash100, Some(PeerKind::KubeVip(_))) => Err(
                "crash-100 needs 300 VIPs in Services of this peer's class; not implemented for \
                 kube-vip yet (one Lease per Service)",
            ),
            _ => Ok(()),
        }
    }
}

impl Bed {
    /// Starts `system` on every node of `tb`, announcing `vips` (the agents' and keepalived's
    /// Services created already; a peer's are created here, one per VIP, named `bench-<i>`,
    /// with endpoints on every node).
    pub fn new(
        tb: Testbed,
        system: System,
        agent_args: &[String],
        vips: &[IpAddr],
        tag: &str,
    ) -> Bed {
        let runner = if system.is_keepalived() {
            Runner::Keepalived(Keepalived::new(
                tag,
                system == System::KeepalivedTuned,
                vips,
            ))
        } else {
            Runner::Agents
        };
        for n in tb.nodes() {
            // keepalived puts its VIPs on eth0 itself.
            tb.add_local_routes(&n, !system.is_keepalived());
        }
        let mut bed = Bed {
            tb,
            system,
            runner,
            vips: vips.to_vec(),
            stopped: BTreeSet::new(),
            terminated: BTreeSet::new(),
            links_down: BTreeSet::new(),
            frozen: BTreeSet::new(),
            partitions: vec![],
            api_down: false,
            api_slow: false,
            successor: BTreeMap::new(),
        };
        if system.is_keepalived() {
            for n in bed.tb.nodes() {
                bed.start(&n);
            }
        } else if let Some(kind) = system.peer() {
            let peer = bed.tb.start_peer(kind);
            let nodes = bed.tb.nodes();
            let on: Vec<&str> = nodes.iter().map(String::as_str).collect();
            for (i, v) in vips.iter().enumerate() {
                peer.add_service(&bed.tb, &format!("bench-{i}"), *v, false, &on);
            }
            bed.runner = Runner::Peer(peer);
        } else {
            let args: Vec<&str> = agent_args.iter().map(String::as_str).collect();
            bed.tb.start_agents(&args);
        }
        bed
    }

    /// Who announces each of `vips` right now (agents: their `/state`; keepalived: the
    /// addresses on `eth0`; a peer: the MACs that answer ARP).
    pub fn owners(&self, vips: &[IpAddr]) -> BTreeMap<IpAddr, Vec<String>> {
        match &self.runner {
            Runner::Keepalived(_) => keepalived_owners(&self.tb, vips),
            Runner::Peer(p) => p.owners(&self.tb, vips),
            Runner::Agents => agent_owners(&self.tb, vips),
        }
    }

    /// Starts `node`'s agent (keepalived, peer). `fresh`: the node comes back from a crash
    /// or a kill that the restore undoes, so a peer's leftovers (kube-vip's VIPs on `eth0`,
    /// which a reboot would clear) are removed first.
    fn start_node(&mut self, node: &str, fresh: bool) {
        match &mut self.runner {
            Runner::Keepalived(k) => k.start(&mut self.tb, node),
            Runner::Peer(p) => {
                if fresh {
                    p.remove_leftover_vips(&self.tb, node);
                }
                p.start(&mut self.tb, node);
            }
            Runner::Agents => self.tb.restart_agent(node),
        }
        self.stopped.remove(node);
    }

    fn start(&mut self, node: &str) {
        self.start_node(node, true);
    }

    /// Starts `node`'s agent (keepalived, peer) after the node was crashed and booted again
    /// outside the bed (the end-to-end trials crash through [`Testbed::crash`]): like a
    /// reboot, a peer's leftover VIPs on `eth0` go first.
    pub fn start_after_reboot(&mut self, node: &str) {
        self.start_node(node, true);
    }

    /// SIGKILL of `node`'s agent (keepalived's whole process tree, the peer's process).
    pub fn kill(&mut self, node: &str) {
        match &mut self.runner {
            Runner::Keepalived(k) => {
                k.signal(node, Signal::SIGKILL);
                k.wait_gone(node, Duration::from_secs(5));
            }
            Runner::Peer(p) => p.kill(&mut self.tb, node),
            Runner::Agents => self.tb.kill_agent(node),
        }
        self.frozen.remove(node);
        self.stopped.insert(node.to_owned());
    }

    /// SIGTERM of `node`'s agent; returns at once.
    pub fn term(&mut self, node: &str) {
        match &self.runner {
            Runner::Keepalived(k) => k.signal(node, Signal::SIGTERM),
            Runner::Peer(p) => p.term(&self.tb, node),
            Runner::Agents => self.tb.term_agent(node),
        }
        self.stopped.insert(node.to_owned());
        self.terminated.insert(node.to_owned());
    }

    /// Restarts a stopped agent (keepalived, peer) as a supervisor would, the node's state
    /// as it is (kube-vip's VIP stays on `eth0`).
    pub fn restart(&mut self, node: &str) {
        self.start_node(node, false);
    }

    /// Link down plus SIGKILL.
    pub fn crash(&mut self, node: &str) {
        self.link_down(node);
        self.kill(node);
    }

    pub fn link_down(&mut self, node: &str) {
        self.tb.link_down(node);
        self.links_down.insert(node.to_owned());
    }

    /// A crashed node comes back: its link goes up and its agent (keepalived, peer) starts.
    pub fn rejoin(&mut self, node: &str) {
        self.tb.link_up(node);
        self.links_down.remove(node);
        self.start(node);
    }

    /// Waits up to `timeout` until `node`'s agent says it is ready (keepalived: its VRRP
    /// process runs; a peer: its process runs); whether it did.
    pub fn wait_ready(&self, node: &str, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            let ready = match &self.runner {
                Runner::Keepalived(k) => k.running(node),
                Runner::Peer(p) => p.running(&self.tb, node),
                Runner::Agents => self.tb.state(node).is_some_and(|s| s["ready"] == true),
            };
            if ready {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// SIGSTOP of `node`'s agent (keepalived's whole process group, the peer's process).
    pub fn freeze(&mut self, node: &str) {
        match &self.runner {
            Runner::Keepalived(k) => k.signal(node, Signal::SIGSTOP),
            Runner::Peer(p) => p.freeze(&self.tb, node),
            Runner::Agents => self.tb.freeze_agent(node),
        }
        self.frozen.insert(node.to_owned());
    }

    /// SIGCONT of `node`'s agent (keepalived, peer) after [`Bed::freeze`].
    pub fn thaw(&mut self, node: &str) {
        match &self.runner {
            Runner::Keepalived(k) => k.signal(node, Signal::SIGCONT),
            Runner::Peer(p) => p.thaw(&self.tb, node),
            Runner::Agents => self.tb.thaw_agent(node),
        }
        self.frozen.remove(node);
    }

    /// Delays every API request from the nodes by `delay`, or ends that (`None`); no-op for
    /// keepalived, which uses no API.
    pub fn api_latency(&mut self, delay: Option<Duration>) {
        if !matches!(self.runner, Runner::Keepalived(_)) {
            self.tb.api_latency(delay);
            self.api_slow = delay.is_some();
        }
    }

    pub fn partition(&mut self, a: &str, b: &str) {
        self.tb.partition(a, b);
        self.partitions.push((a.to_owned(), b.to_owned()));
    }

    pub fn heal_all(&mut self) {
        for (a, b) in std::mem::take(&mut self.partitions) {
            self.tb.heal(&a, &b);
        }
    }

    pub fn api_outage(&mut self, on: bool) {
        self.tb.api_outage(on);
        self.api_down = on;
    }

    /// Waits up to `timeout` until `node`'s agent (keepalived, peer) exited after a SIGTERM.
    fn wait_terminated(&mut self, node: &str, timeout: Duration) {
        match &mut self.runner {
            Runner::Keepalived(k) => {
                k.wait_gone(node, timeout);
            }
            Runner::Peer(p) => {
                p.wait_exit(&mut self.tb, node, timeout);
            }
            Runner::Agents => {
                self.tb.wait_agent_exit(node, timeout);
            }
        }
    }

    /// Undoes every fault, restarts what was stopped, and waits until every VIP in `vips` has
    /// one owner that answers the client, unchanged over two polls 2 s apart. Returns the
    /// owners, or `None` after `timeout`.
    pub fn restore(
        &mut self,
        vips: &[IpAddr],
        timeout: Duration,
    ) -> Option<BTreeMap<IpAddr, String>> {
        if self.api_down {
            self.api_outage(false);
        }
        if self.api_slow {
            self.api_latency(None);
        }
        for n in self.frozen.clone() {
            self.thaw(&n);
        }
        self.heal_all();
        for n in std::mem::take(&mut self.links_down) {
            self.tb.link_up(&n);
        }
        for n in std::mem::take(&mut self.terminated) {
            self.wait_terminated(&n, Duration::from_secs(10));
        }
        for n in self.stopped.clone() {
            self.start(&n);
        }
        self.converge(vips, timeout)
    }

    /// Waits until every VIP has exactly one owner, VIP 0's owner answers the client, and the
    /// owners did not change over 2 s.
    pub fn converge(&self, vips: &[IpAddr], timeout: Duration) -> Option<BTreeMap<IpAddr, String>> {
        let end = Instant::now() + timeout;
        let mut last: Option<(BTreeMap<IpAddr, String>, Instant)> = None;
        while Instant::now() < end {
            let single: Option<BTreeMap<IpAddr, String>> = self
                .owners(vips)
                .into_iter()
                .map(|(v, o)| (o.len() == 1).then(|| (v, o[0].clone())))
                .collect();
            let ok = single.filter(|m| {
                vips.first().is_none_or(|v| {
                    self.tb.ask(*v, Duration::from_millis(300)).as_ref() == m.get(v)
                })
            });
            match (ok, &last) {
                (Some(m), Some((prev, since))) if *prev == m => {
                    if since.elapsed() >= Duration::from_secs(2) {
                        return Some(m);
                    }
                }
                (Some(m), _) => last = Some((m, Instant::now())),
                (None, _) => last = None,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    /// Whether some node other than `victim` announces each of `vips`.
    pub fn announced_elsewhere(&self, vips: &[IpAddr], victim: &str) -> bool {
        self.owners(vips)
            .values()
            .all(|o| o.iter().any(|n| n != victim))
    }

    /// Log tails of every agent (keepalived, peer), for a failed convergence.
    pub fn log_tails(&self) -> String {
        match &self.runner {
            Runner::Keepalived(k) => self
                .tb
                .nodes()
                .iter()
                .map(|n| format!("--- keepalived {n}:\n{}", k.log_tail(n, 15)))
                .collect::<Vec<_>>()
                .join("\n"),
            Runner::Peer(p) => p.log_tails(&self.tb),
            Runner::Agents => self
                .tb
                .nodes()
                .iter()
                .map(|n| format!("--- {n}:\n{}", self.tb.agent_log_tail(n)))
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// SIGKILLs and restarts every node's agent (keepalived, peer): the last resort of a
    /// restore.
    pub fn restart_all(&mut self) {
        for n in self.tb.nodes() {
            self.kill(&n);
        }
        self.terminated.clear();
        for n in self.stopped.clone() {
            self.start(&n);
        }
    }

    /// Replaces keepalived's VIP set and restarts every keepalived (no-op for the agents and
    /// the peers, which follow the Services).
    pub fn set_keepalived_vips(&mut self, vips: &[IpAddr]) {
        let Runner::Keepalived(k) = &mut self.runner else {
            return;
        };
        k.set_vips(vips);
        for n in self.tb.nodes() {
            self.term(&n);
        }
        for n in std::mem::take(&mut self.terminated) {
            self.wait_terminated(&n, Duration::from_secs(10));
        }
        for n in self.stopped.clone() {
            self.start(&n);
        }
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn a_restart_in_grace_keeps_the_agents_vip_where_it_was() {
        assert_eq!(
            Scenario::Restart.expected_owner(System::AnnouncerDefault),
            Some(Expect::Stays)
        );
        assert_eq!(
            Scenario::Restart.expected_owner(System::KeepalivedTuned),
            None
        );
    }

    #[test]
    fn sigterm_and_crashes_move_the_vip() {
        for sc in [
            Scenario::Crash,
            Scenario::LinkDown,
            Scenario::Sigkill,
            Scenario::Sigterm,
            Scenario::ApiOutageCrash,
            Scenario::Crash100,
        ] {
            assert_eq!(
                sc.expected_owner(System::AnnouncerDefault),
                Some(Expect::Moves),
                "{}",
                sc.name()
            );
        }
    }

    #[test]
    fn names_round_trip() {
        for s in Scenario::known() {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::parse("meteor"), None);
    }

    #[test]
    fn the_new_scenarios_parse_by_their_names() {
        assert_eq!(Scenario::parse("freeze"), Some(Scenario::Freeze));
        assert_eq!(Scenario::parse("rejoin"), Some(Scenario::Rejoin));
        assert_eq!(Scenario::parse("stress"), Some(Scenario::Stress));
        assert_eq!(
            Scenario::parse("crash-e2e-local"),
            Some(Scenario::CrashE2eLocal)
        );
        assert_eq!(
            Scenario::parse("crash-e2e-cluster"),
            Some(Scenario::CrashE2eCluster)
        );
    }

    #[test]
    fn stress_is_opt_in_and_the_default_run_has_freeze_and_rejoin() {
        assert!(!Scenario::ALL.contains(&Scenario::Stress));
        assert!(Scenario::ALL.contains(&Scenario::Freeze));
        assert!(Scenario::ALL.contains(&Scenario::Rejoin));
        assert_eq!(
            Scenario::known().count(),
            Scenario::ALL.len() + Scenario::OPT_IN.len()
        );
        assert!(!Scenario::Stress.has_trials());
        assert!(Scenario::ALL.iter().all(|s| s.has_trials()));
    }

    #[test]
    fn the_safety_scenarios_are_long_runs_only_a_withdrawing_system_runs() {
        for sc in Scenario::SAFETY {
            assert!(!sc.has_trials(), "{}", sc.name());
            assert!(Scenario::OPT_IN.contains(&sc), "{}", sc.name());
            assert_eq!(sc.supported_by(System::AnnouncerWithdraw), Ok(()));
            assert!(sc.supported_by(System::AnnouncerDefault).is_err());
            assert_eq!(Scenario::parse(sc.name()), Some(sc));
        }
    }

    #[test]
    fn the_run_order_is_the_declaration_order_with_crash_100_last() {
        // The binary sorts `--scenarios`: the enum's order is the run order.
        let mut sorted: Vec<Scenario> = Scenario::known().collect();
        sorted.sort();
        assert_eq!(sorted.last(), Some(&Scenario::Crash100));
        let mut all = Scenario::ALL.to_vec();
        all.sort();
        assert_eq!(all, Scenario::ALL);
    }

    #[test]
    fn a_frozen_agent_keeps_its_vip() {
        for s in [System::AnnouncerDefault, System::AnnouncerFast] {
            assert_eq!(Scenario::Freeze.expected_owner(s), Some(Expect::Stays));
        }
    }

    #[test]
    fn a_frozen_keepalived_is_not_judged() {
        for s in [System::KeepalivedDefault, System::KeepalivedTuned] {
            assert_eq!(Scenario::Freeze.expected_owner(s), None);
        }
    }

    #[test]
    fn the_real_peers_skip_stress_and_crash_100_and_run_the_rest() {
        for s in [System::MetalLb, System::KubeVip, System::KubeVipFast] {
            assert!(Scenario::Stress.supported_by(s).is_err());
            assert!(Scenario::Crash100.supported_by(s).is_err());
            for sc in Scenario::ALL
                .into_iter()
                .filter(|sc| *sc != Scenario::Crash100)
            {
                assert_eq!(sc.supported_by(s), Ok(()), "{}", sc.name());
            }
        }
        assert!(
            Scenario::known()
                .filter(|sc| !sc.is_safety())
                .all(|sc| sc.supported_by(System::AnnouncerDefault).is_ok())
        );
    }

    #[test]
    fn keepalived_runs_every_layer_2_scenario_and_no_end_to_end_one() {
        for s in [System::KeepalivedTuned, System::KeepalivedDefault] {
            for sc in Scenario::known() {
                let e2e = matches!(sc, Scenario::CrashE2eLocal | Scenario::CrashE2eCluster)
                    || sc.is_safety();
                assert_eq!(sc.supported_by(s).is_err(), e2e, "{}", sc.name());
            }
        }
    }

    #[test]
    fn a_restarted_or_frozen_peer_is_not_judged() {
        for s in [System::MetalLb, System::KubeVip] {
            assert_eq!(Scenario::Restart.expected_owner(s), None);
            assert_eq!(Scenario::Freeze.expected_owner(s), None);
            assert_eq!(Scenario::Crash.expected_owner(s), Some(Expect::Moves));
        }
    }

    #[test]
    fn rejoin_and_stress_judge_no_owner_change() {
        for s in System::ALL {
            assert_eq!(Scenario::Rejoin.expected_owner(s), None);
            assert_eq!(Scenario::Stress.expected_owner(s), None);
        }
    }
}

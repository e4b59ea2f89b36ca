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
use crate::env::lan::Testbed;

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
    /// SIGTERM, as in a rolling update; not restarted during the trial.
    Sigterm,
    /// The API server refuses the agents, then the owner crashes. For keepalived the same as
    /// [`Scenario::Crash`] (it uses no API).
    ApiOutageCrash,
    /// The owner and its successor cannot reach each other for [`PARTITION_HOLD`], then heal.
    Partition,
    /// A crash of the node that owns the most VIPs of a large set (100 probed).
    Crash100,
}

/// How long after the SIGKILL the restart scenario restarts the agent.
pub const RESTART_AFTER: Duration = Duration::from_secs(1);
/// How long the partition lasts before it heals.
pub const PARTITION_HOLD: Duration = Duration::from_secs(5);
/// In the API-outage scenario: outage start to crash, and how long the outage lasts after
/// the crash at most (the API comes back then if the VIPs have not failed over).
pub const API_OUTAGE_LEAD: Duration = Duration::from_secs(1);
pub const API_OUTAGE_HOLD: Duration = Duration::from_secs(10);

impl Scenario {
    /// Every scenario, in run order (partition after crash: it uses the successor the crashes
    /// revealed).
    pub const ALL: [Scenario; 8] = [
        Scenario::Crash,
        Scenario::LinkDown,
        Scenario::Sigkill,
        Scenario::Restart,
        Scenario::Sigterm,
        Scenario::ApiOutageCrash,
        Scenario::Partition,
        Scenario::Crash100,
    ];

    /// Name in tables, JSON and `--scenarios`.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Crash => "crash",
            Scenario::LinkDown => "link-down",
            Scenario::Sigkill => "sigkill",
            Scenario::Restart => "restart-in-grace",
            Scenario::Sigterm => "sigterm",
            Scenario::ApiOutageCrash => "api-outage-crash",
            Scenario::Partition => "partition",
            Scenario::Crash100 => "crash-100",
        }
    }

    /// Parses a name of [`Scenario::name`].
    pub fn parse(s: &str) -> Option<Scenario> {
        Scenario::ALL.into_iter().find(|x| x.name() == s)
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
    /// * a partition: both sides may announce; judged by overlap and time to one owner.
    pub fn expected_owner(self, system: System) -> Option<Expect> {
        match self {
            Scenario::Crash
            | Scenario::LinkDown
            | Scenario::Sigkill
            | Scenario::Sigterm
            | Scenario::ApiOutageCrash
            | Scenario::Crash100 => Some(Expect::Moves),
            Scenario::Restart if system.is_keepalived() => None,
            Scenario::Restart => Some(Expect::Stays),
            Scenario::Partition => None,
        }
    }
}

/// One system running on one testbed, reused across trials.
pub struct Bed {
    pub tb: Testbed,
    pub system: System,
    keepalived: Option<Keepalived>,
    /// The VIPs the trials probe.
    pub vips: Vec<IpAddr>,
    /// Nodes whose agent (keepalived) is not running.
    stopped: BTreeSet<String>,
    /// Nodes whose agent got SIGTERM and may still be handing over.
    terminated: BTreeSet<String>,
    links_down: BTreeSet<String>,
    partitions: Vec<(String, String)>,
    api_down: bool,
    /// Who took over from whom (learned from the trials; partitions pick their pair with it).
    pub successor: BTreeMap<String, String>,
}

impl Bed {
    /// Starts `system` on every node of `tb`, announcing `vips` (Services created already).
    pub fn new(
        tb: Testbed,
        system: System,
        agent_args: &[String],
        vips: &[IpAddr],
        tag: &str,
    ) -> Bed {
        let keepalived = system
            .is_keepalived()
            .then(|| Keepalived::new(tag, system == System::KeepalivedTuned, vips));
        let mut bed = Bed {
            tb: {
                for n in tb.nodes() {
                    // keepalived puts its VIPs on eth0 itself.
                    tb.add_local_routes(&n, !system.is_keepalived());
                }
                tb
            },
            system,
            keepalived,
            vips: vips.to_vec(),
            stopped: BTreeSet::new(),
            terminated: BTreeSet::new(),
            links_down: BTreeSet::new(),
            partitions: vec![],
            api_down: false,
            successor: BTreeMap::new(),
        };
        if bed.keepalived.is_some() {
            for n in bed.tb.nodes() {
                bed.start(&n);
            }
        } else {
            let args: Vec<&str> = agent_args.iter().map(String::as_str).collect();
            bed.tb.start_agents(&args);
        }
        bed
    }

    /// Who announces each of `vips` right now.
    pub fn owners(&self, vips: &[IpAddr]) -> BTreeMap<IpAddr, Vec<String>> {
        if self.keepalived.is_some() {
            keepalived_owners(&self.tb, vips)
        } else {
            agent_owners(&self.tb, vips)
        }
    }

    fn start(&mut self, node: &str) {
        match &self.keepalived {
            Some(k) => k.start(&mut self.tb, node),
            None => self.tb.restart_agent(node),
        }
        self.stopped.remove(node);
    }

    /// SIGKILL of `node`'s agent (keepalived's whole process tree).
    pub fn kill(&mut self, node: &str) {
        match &self.keepalived {
            Some(k) => {
                k.signal(node, Signal::SIGKILL);
                k.wait_gone(node, Duration::from_secs(5));
            }
            None => self.tb.kill_agent(node),
        }
        self.stopped.insert(node.to_owned());
    }

    /// SIGTERM of `node`'s agent; returns at once.
    pub fn term(&mut self, node: &str) {
        match &self.keepalived {
            Some(k) => k.signal(node, Signal::SIGTERM),
            None => self.tb.term_agent(node),
        }
        self.stopped.insert(node.to_owned());
        self.terminated.insert(node.to_owned());
    }

    /// Restarts a stopped agent (keepalived).
    pub fn restart(&mut self, node: &str) {
        self.start(node);
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
        self.heal_all();
        for n in std::mem::take(&mut self.links_down) {
            self.tb.link_up(&n);
        }
        for n in std::mem::take(&mut self.terminated) {
            match &self.keepalived {
                Some(k) => {
                    k.wait_gone(&n, Duration::from_secs(10));
                }
                None => {
                    self.tb.wait_agent_exit(&n, Duration::from_secs(10));
                }
            }
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

    /// Log tails of every agent, for a failed convergence (empty for keepalived).
    pub fn log_tails(&self) -> String {
        if let Some(k) = &self.keepalived {
            return self
                .tb
                .nodes()
                .iter()
                .map(|n| format!("--- keepalived {n}:\n{}", k.log_tail(n, 15)))
                .collect::<Vec<_>>()
                .join("\n");
        }
        self.tb
            .nodes()
            .iter()
            .map(|n| format!("--- {n}:\n{}", self.tb.agent_log_tail(n)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGKILLs and restarts every node's agent (keepalived): the last resort of a restore.
    pub fn restart_all(&mut self) {
        for n in self.tb.nodes() {
            self.kill(&n);
        }
        self.terminated.clear();
        for n in self.stopped.clone() {
            self.start(&n);
        }
    }

    /// Replaces keepalived's VIP set and restarts every keepalived (no-op for the agents, which
    /// follow the Services).
    pub fn set_keepalived_vips(&mut self, vips: &[IpAddr]) {
        let Some(k) = self.keepalived.as_mut() else {
            return;
        };
        k.set_vips(vips);
        for n in self.tb.nodes() {
            self.term(&n);
        }
        for n in std::mem::take(&mut self.terminated) {
            if let Some(k) = &self.keepalived {
                k.wait_gone(&n, Duration::from_secs(10));
            }
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
        for s in Scenario::ALL {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert_eq!(Scenario::parse("meteor"), None);
    }
}

//! Scenarios: a seed becomes a cluster (nodes, VIPs, eligibility) and a fault schedule.
//!
//! Why generated: the failure modes that matter (a crash in the middle of a probe, a restart
//! just before the entries lapse, a partition that splits the candidates of one VIP…) come
//! from timing coincidences nobody would write down by hand. Every schedule is "settle, fault(s)
//! at random times, settle", so that the checker knows which windows must look steady.

use std::{fmt, net::IpAddr, str::FromStr, time::Duration};

use announcer::election::{Config, NodeName, rendezvous};
use rand::{Rng, SeedableRng, seq::IndexedRandom};
use rand_chacha::ChaCha8Rng;

use super::queue::VTime;

/// The kinds of schedules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// A node (an owner) crashes: agent gone, link down, data plane lost.
    Crash,
    /// An owner's announcing link goes down (its Lease keeps renewing); sometimes back later.
    LinkDown,
    /// An owner's agent is SIGKILLed and never restarted.
    Kill,
    /// An owner's agent is SIGKILLed and restarted before its data-plane entries lapse.
    KillRestart,
    /// An owner gets SIGTERM (drain), hands over, exits, its machine goes down, reboots later.
    Sigterm,
    /// The API server becomes unreachable for everyone, and a node crashes meanwhile.
    OutageCrash,
    /// The API server becomes unreachable for everyone, nothing else happens.
    Outage,
    /// Heartbeats are lost between two groups of nodes, then the partition heals.
    Partition,
    /// A node whose agent was not running joins.
    Join,
    /// The eligible nodes of some VIPs change (an `externalTrafficPolicy: Local` endpoint moves).
    Eligibility,
    /// One owner loses the API server (its Lease stops renewing) while its heartbeats flow.
    ApiIsolated,
}

impl Scenario {
    /// Every scenario, in the order seeds cycle through them.
    pub const ALL: [Scenario; 11] = [
        Scenario::Crash,
        Scenario::LinkDown,
        Scenario::Kill,
        Scenario::KillRestart,
        Scenario::Sigterm,
        Scenario::OutageCrash,
        Scenario::Outage,
        Scenario::Partition,
        Scenario::Join,
        Scenario::Eligibility,
        Scenario::ApiIsolated,
    ];

    /// The scenario a seed runs when all scenarios are cycled.
    pub fn for_seed(seed: u64) -> Scenario {
        Self::ALL[(seed % Self::ALL.len() as u64) as usize]
    }

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Crash => "crash",
            Scenario::LinkDown => "link-down",
            Scenario::Kill => "kill",
            Scenario::KillRestart => "kill-restart",
            Scenario::Sigterm => "sigterm",
            Scenario::OutageCrash => "outage-crash",
            Scenario::Outage => "outage",
            Scenario::Partition => "partition",
            Scenario::Join => "join",
            Scenario::Eligibility => "eligibility",
            Scenario::ApiIsolated => "api-isolated",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL.iter().map(|x| x.name()).collect();
                format!("unknown scenario {s:?} (one of: {})", names.join(", "))
            })
    }
}

/// Something that happens to the world at a planned time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start the node's agent (booting the machine first if it is down; killing a running
    /// agent first).
    Start(usize),
    /// Machine down: agent gone, link down, data plane lost.
    Crash(usize),
    /// SIGKILL: agent gone; the machine and its data plane stay.
    Kill(usize),
    /// SIGTERM: the agent hands over and exits; then the machine goes down (a drain).
    Term(usize),
    /// The node's announcing link goes down.
    LinkDown(usize),
    /// … and comes back.
    LinkUp(usize),
    /// The API server becomes unreachable from every node.
    ApiDown,
    /// … and reachable again.
    ApiUp,
    /// One node loses (`false`) or regains (`true`) the API server.
    NodeApi(usize, bool),
    /// Heartbeats and probes flow only between nodes of the same group (index = node).
    Partition(Vec<u8>),
    /// Everyone can reach everyone again.
    Heal,
    /// New eligible sets (bit `i` = node `i`) for some VIPs, by index.
    Eligibility(Vec<(usize, u16)>),
}

/// One VIP of the simulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipDef {
    /// The address.
    pub addr: IpAddr,
    /// Eligible nodes at the start (bit `i` = node `i`).
    pub eligible: u16,
}

/// A generated run: the cluster and what happens to it.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The seed everything comes from.
    pub seed: u64,
    /// The schedule kind.
    pub scenario: Scenario,
    /// Node names; index = node id.
    pub nodes: Vec<NodeName>,
    /// The VIPs.
    pub vips: Vec<VipDef>,
    /// Heartbeat loss probability.
    pub loss: f64,
    /// Timings every agent uses.
    pub timing: Config,
    /// Planned actions, in time order (initial agent starts included).
    pub steps: Vec<(VTime, Action)>,
    /// The node the fault is about, if any.
    pub victim: Option<usize>,
    /// When the (first) fault happens.
    pub fault_at: VTime,
    /// When the run ends.
    pub end: VTime,
}

fn secs(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> Duration {
    Duration::from_secs_f64(rng.random_range(lo..hi))
}

/// Bit mask of one node.
pub fn bit(i: usize) -> u16 {
    1 << i
}

/// The rendezvous owner of `vip` among the nodes in `mask`.
pub fn owner_in(nodes: &[NodeName], vip: IpAddr, mask: u16) -> Option<usize> {
    let cands = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & bit(*i) != 0)
        .map(|(_, n)| n);
    let o = rendezvous::owner(vip, cands)?;
    nodes.iter().position(|n| n == o)
}

impl Plan {
    /// The plan for `seed` running `scenario`.
    pub fn generate(seed: u64, scenario: Scenario) -> Plan {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = rng.random_range(3..=7usize);
        let m = rng.random_range(1..=40usize);
        let nodes: Vec<NodeName> = (0..n)
            .map(|i| NodeName::from(format!("node-{i}")))
            .collect();
        let all: u16 = (1 << n) - 1;
        let mut vips: Vec<VipDef> = Vec::new();
        while vips.len() < m {
            let addr: IpAddr = if rng.random_bool(0.6) {
                IpAddr::V4([10, 96, rng.random_range(0..4), rng.random_range(1..255)].into())
            } else {
                IpAddr::V6(
                    [
                        0xfd00,
                        0,
                        0,
                        0,
                        0,
                        0,
                        rng.random_range(0..4),
                        rng.random_range(1..0xffff),
                    ]
                    .into(),
                )
            };
            if vips.iter().any(|v| v.addr == addr) {
                continue;
            }
            let eligible = match rng.random_range(0..10) {
                0 => 0,
                1..=5 => all,
                _ => rng.random_range(1..=all),
            };
            vips.push(VipDef { addr, eligible });
        }
        let loss = if rng.random_bool(0.5) {
            0.0
        } else {
            rng.random_range(0.0..0.01)
        };
        let timing = Config::new("template");
        // The joiner (last node) starts late; everyone else within the first 300 ms.
        let initial: u16 = if scenario == Scenario::Join {
            all & !bit(n - 1)
        } else {
            all
        };
        let mut steps: Vec<(VTime, Action)> = (0..n)
            .filter(|i| initial & bit(*i) != 0)
            .map(|i| (secs(&mut rng, 0.0, 0.3), Action::Start(i)))
            .collect();
        // The victim: preferably a node that owns a VIP someone else could take over.
        let owners: Vec<usize> = vips
            .iter()
            .filter(|v| (v.eligible & initial).count_ones() >= 2)
            .filter_map(|v| owner_in(&nodes, v.addr, v.eligible & initial))
            .collect();
        let starters: Vec<usize> = (0..n).filter(|i| initial & bit(*i) != 0).collect();
        let victim = *owners
            .choose(&mut rng)
            .unwrap_or_else(|| starters.choose(&mut rng).expect("nodes"));
        let t1 = secs(&mut rng, 4.0, 6.0);
        let grace = timing.grace;
        let mut victim_opt = Some(victim);
        let end = match scenario {
            Scenario::Crash => {
                steps.push((t1, Action::Crash(victim)));
                t1 + secs(&mut rng, 5.0, 6.0)
            }
            Scenario::LinkDown => {
                steps.push((t1, Action::LinkDown(victim)));
                if rng.random_bool(0.5) {
                    let back = t1 + secs(&mut rng, 2.0, 4.0);
                    steps.push((back, Action::LinkUp(victim)));
                    back + secs(&mut rng, 4.0, 5.0)
                } else {
                    t1 + secs(&mut rng, 5.0, 6.0)
                }
            }
            Scenario::Kill => {
                steps.push((t1, Action::Kill(victim)));
                t1 + grace + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::KillRestart => {
                steps.push((t1, Action::Kill(victim)));
                steps.push((t1 + secs(&mut rng, 0.2, 2.0), Action::Start(victim)));
                t1 + grace + secs(&mut rng, 3.0, 4.0)
            }
            Scenario::Sigterm => {
                steps.push((t1, Action::Term(victim)));
                let reboot = t1 + timing.handover_timeout + secs(&mut rng, 1.0, 3.0);
                steps.push((reboot, Action::Start(victim)));
                reboot + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::OutageCrash => {
                let len = secs(&mut rng, 5.0, 15.0);
                steps.push((t1, Action::ApiDown));
                let crash = t1 + secs(&mut rng, 1.0, len.as_secs_f64() - 1.0);
                steps.push((crash, Action::Crash(victim)));
                steps.push((t1 + len, Action::ApiUp));
                (t1 + len).max(crash + Duration::from_secs(2)) + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::Outage => {
                victim_opt = None;
                let len = secs(&mut rng, 5.0, 20.0);
                steps.push((t1, Action::ApiDown));
                steps.push((t1 + len, Action::ApiUp));
                t1 + len + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::Partition => {
                victim_opt = None;
                let groups = loop {
                    let g: Vec<u8> = (0..n).map(|_| rng.random_range(0..2u8)).collect();
                    if g.contains(&0) && g.contains(&1) {
                        break g;
                    }
                };
                let heal = t1 + secs(&mut rng, 1.0, 6.0);
                steps.push((t1, Action::Partition(groups)));
                steps.push((heal, Action::Heal));
                heal + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::ApiIsolated => {
                let back = t1 + secs(&mut rng, 5.0, 20.0);
                steps.push((t1, Action::NodeApi(victim, false)));
                steps.push((back, Action::NodeApi(victim, true)));
                back + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::Join => {
                victim_opt = Some(n - 1);
                steps.push((t1, Action::Start(n - 1)));
                t1 + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::Eligibility => {
                victim_opt = None;
                let mut last = t1;
                let mut at = t1;
                for _ in 0..rng.random_range(1..=2) {
                    let changes: Vec<(usize, u16)> = (0..rng.random_range(1..=3))
                        .map(|_| {
                            let i = rng.random_range(0..vips.len());
                            // The endpoint moves: one eligible node swapped for another, or a
                            // fresh random set (possibly empty).
                            let mask = if rng.random_bool(0.7)
                                && vips[i].eligible != 0
                                && vips[i].eligible != all
                            {
                                let from = (0..n)
                                    .filter(|j| vips[i].eligible & bit(*j) != 0)
                                    .collect::<Vec<_>>();
                                let to = (0..n)
                                    .filter(|j| vips[i].eligible & bit(*j) == 0)
                                    .collect::<Vec<_>>();
                                vips[i].eligible & !bit(*from.choose(&mut rng).expect("nonempty"))
                                    | bit(*to.choose(&mut rng).expect("not all"))
                            } else {
                                rng.random_range(0..=all)
                            };
                            (i, mask)
                        })
                        .collect();
                    steps.push((at, Action::Eligibility(changes)));
                    last = at;
                    at += secs(&mut rng, 0.5, 2.0);
                }
                last + secs(&mut rng, 4.0, 5.0)
            }
        };
        steps.sort_by_key(|(t, _)| *t);
        Plan {
            seed,
            scenario,
            nodes,
            vips,
            loss,
            timing,
            steps,
            victim: victim_opt,
            fault_at: t1,
            end,
        }
    }

    /// The time of the first planned action matching `f`.
    pub fn when(&self, f: impl Fn(&Action) -> bool) -> Option<VTime> {
        self.steps.iter().find(|(_, a)| f(a)).map(|(t, _)| *t)
    }
}

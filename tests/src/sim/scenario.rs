//! Scenarios: a seed becomes a cluster (nodes, VIPs, eligibility) and a fault schedule.
//!
//! Why generated: the failure modes that matter (a crash in the middle of a probe, a restart
//! just before the entries lapse, a partition that splits the candidates of one VIP…) come
//! from timing coincidences nobody would write down by hand. Every schedule is "settle, fault(s)
//! at random times, settle", so that the checker knows which windows must look steady.

use std::{fmt, net::IpAddr, ops::RangeInclusive, str::FromStr, time::Duration};

use announcer::election::{ElectionConfig, NodeName, rendezvous};
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
    // ---- the adversary: faults the first eleven never produce ----
    /// Heartbeats are lost one way only (the victim is mute to everyone, deaf to everyone, or
    /// mute to one peer); Leases and probes are unaffected.
    HeartbeatLossOneWay,
    /// The victim's heartbeats are lost both ways; Leases and probes are unaffected.
    HeartbeatLossBothWays,
    /// The victim's heartbeats are lost both ways and 30% of all probe answers are lost.
    ProbeAnswerLoss,
    /// The victim's wall clock steps by more than the ±5 s skew window: every peer's verifier
    /// rejects its heartbeats and its verifier rejects theirs; its Lease keeps renewing.
    ClockOffset,
    /// The victim restarts after its wall clock stepped back; the shell's persisted counter
    /// still hands its core a higher incarnation (the fixed incarnation source).
    IncarnationRollback,
    /// The victim's heartbeat key differs from everyone's (a botched rotation): its
    /// heartbeats are rejected both ways.
    KeyMismatch,
    /// A node holding the cluster key sends heartbeats under random names that have no Lease.
    ForgedHeartbeats,
    /// Bursts of thousands of irrelevant inputs (forged-name heartbeats, probe answers for
    /// VIPs and MACs nobody probed) interleaved with normal traffic.
    Flood,
    /// Every node publishes two links (VIPs in subnet B answered only from MAC B) and an
    /// owner's agent is SIGKILLed, its data plane alive.
    TwoNics,
    /// A ConfigMap roll: nodes restart one by one with another config fingerprint and other
    /// eligible sets, so for a while two nodes rank the same VIP differently.
    ConfigSkew,
    /// One node's Lease and VIP watch events arrive 2 s late while VIPs move to it.
    WatchLag,
    /// Frames from one node to one peer are lost (heartbeats, probes, probe answers); the
    /// other way works.
    OneWayLink,
    /// Heartbeats are lost between every pair of nodes (a firewall change on the heartbeat
    /// port), while the API server and the data planes work: nobody exchanges heartbeats with
    /// anybody, so no node is better connected than another.
    HeartbeatBlackout,
    /// Not in the sweep: [`Scenario::IncarnationRollback`] with the old incarnation source
    /// (the wall clock at start), which hands the core a lower incarnation after the step.
    IncarnationRollbackWallClock,
}

impl Scenario {
    /// Every scenario, in the order seeds cycle through them.
    pub const ALL: [Scenario; 24] = [
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
        Scenario::HeartbeatLossOneWay,
        Scenario::HeartbeatLossBothWays,
        Scenario::ProbeAnswerLoss,
        Scenario::ClockOffset,
        Scenario::IncarnationRollback,
        Scenario::KeyMismatch,
        Scenario::ForgedHeartbeats,
        Scenario::Flood,
        Scenario::TwoNics,
        Scenario::ConfigSkew,
        Scenario::WatchLag,
        Scenario::OneWayLink,
        Scenario::HeartbeatBlackout,
    ];

    /// Scenarios that can be run by name but are not in the sweep: models of behaviour the
    /// agent no longer has, kept to show the invariants catch it.
    pub const MODELS: [Scenario; 1] = [Scenario::IncarnationRollbackWallClock];

    /// Faults whose cure is the isolated node stepping back (or no cure needed): under them,
    /// each VIP must have one owner from [`ISOLATION_BOUND`] after the fault began.
    pub fn bounded_by_isolation(self) -> bool {
        matches!(
            self,
            Scenario::HeartbeatLossOneWay
                | Scenario::HeartbeatLossBothWays
                | Scenario::ProbeAnswerLoss
                | Scenario::ClockOffset
                | Scenario::KeyMismatch
                | Scenario::OneWayLink
                | Scenario::HeartbeatBlackout
        )
    }

    /// Scenarios whose fault strikes a victim chosen among the VIP owners ([`Plan::victim`]):
    /// a run whose victim owns no VIP another node could take tests nothing of them.
    pub fn strikes_an_owner(self) -> bool {
        !matches!(
            self,
            Scenario::Outage
                | Scenario::Partition
                | Scenario::Join
                | Scenario::Eligibility
                | Scenario::ForgedHeartbeats
                | Scenario::Flood
                | Scenario::ConfigSkew
                | Scenario::WatchLag
                | Scenario::HeartbeatBlackout
        )
    }

    /// Scenarios that measure the failover from their victim (and fail a run whose victim
    /// owned a VIP if it is not within its budget).
    pub fn measures_failover(self) -> bool {
        matches!(
            self,
            Scenario::Crash
                | Scenario::LinkDown
                | Scenario::Kill
                | Scenario::OutageCrash
                | Scenario::TwoNics
        )
    }

    /// The adversary's scenarios (the last thirteen of [`Scenario::ALL`] and the models).
    pub fn adversary(self) -> bool {
        Self::ALL[11..].contains(&self) || Self::MODELS.contains(&self)
    }

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
            Scenario::HeartbeatLossOneWay => "heartbeat-loss-one-way",
            Scenario::HeartbeatLossBothWays => "heartbeat-loss-both-ways",
            Scenario::ProbeAnswerLoss => "probe-answer-loss",
            Scenario::ClockOffset => "clock-offset",
            Scenario::IncarnationRollback => "incarnation-rollback",
            Scenario::KeyMismatch => "key-mismatch",
            Scenario::ForgedHeartbeats => "forged-heartbeats",
            Scenario::Flood => "flood",
            Scenario::TwoNics => "two-nics",
            Scenario::ConfigSkew => "config-skew",
            Scenario::WatchLag => "watch-lag",
            Scenario::OneWayLink => "one-way-link",
            Scenario::HeartbeatBlackout => "heartbeat-blackout",
            Scenario::IncarnationRollbackWallClock => "incarnation-rollback-wall-clock",
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
            .chain(Self::MODELS)
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Self::ALL
                    .iter()
                    .chain(&Self::MODELS)
                    .map(|x| x.name())
                    .collect();
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
    Eligibility(Vec<(usize, NodeMask)>),
    /// Heartbeats from `.0` to each node in the mask `.1` are lost from now on (heartbeats
    /// only: Leases, probes and probe answers still flow).
    BeatCut(usize, NodeMask),
    /// Every heartbeat cut of [`Action::BeatCut`] is lifted.
    BeatHeal,
    /// Every frame from `.0` to `.1` is lost (heartbeats, probes, probe answers), one way.
    LinkCut(usize, usize),
    /// Every cut of [`Action::LinkCut`] is lifted.
    LinkHeal,
    /// The node's wall clock is now this many milliseconds off (heartbeat verifiers reject
    /// beats whose sender's clock is more than 5 s away from their own).
    Clock(usize, i64),
    /// The node's heartbeat key is now this one (verifiers reject other keys).
    Key(usize, u8),
    /// Each probe answer is lost with this probability (per mille) from now on.
    ProbeLoss(u16),
    /// SIGKILL and start again after the node's wall clock stepped back: the incarnation
    /// comes from the plan's source ([`Plan::wall_clock_incarnation`]).
    RestartAfterClockStep(usize),
    /// A key holder sends this many heartbeats under fresh random names, spread over the
    /// duration, to every node.
    Forge(u32, VTime),
    /// A burst of this many irrelevant inputs to each node within 20 ms (thousands across
    /// the cluster): heartbeats under a small pool of forged names and probe answers for VIPs
    /// and MACs nobody probed.
    Flood(u32),
    /// The node's watch events (Leases, VIPs, health) arrive this much later from now on.
    WatchLag(usize, VTime),
    /// The node's agent restarts with the new configuration: the latest eligible sets and
    /// another config fingerprint (a ConfigMap roll reaching it).
    Reconfigure(usize),
    /// A new configuration starts rolling out: these eligible sets (like
    /// [`Action::Eligibility`]) apply to each node once it is reconfigured.
    NewConfig(Vec<(usize, NodeMask)>),
}

/// One VIP of the simulated cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipDef {
    /// The address.
    pub addr: IpAddr,
    /// Eligible nodes at the start (bit `i` = node `i`).
    pub eligible: NodeMask,
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
    pub timing: ElectionConfig,
    /// Planned actions, in time order (initial agent starts included).
    pub steps: Vec<(VTime, Action)>,
    /// The node the fault is about, if any.
    pub victim: Option<usize>,
    /// When the (first) fault happens.
    pub fault_at: VTime,
    /// When the run ends.
    pub end: VTime,
    /// Probe answers lost (per mille) from the start; an adversary scenario may raise it.
    pub probe_loss: u16,
    /// Every node publishes two links in its Lease (VIPs in [`SUBNET_B`] on `eth1`).
    pub two_nics: bool,
    /// With `two_nics`: this node has only its first link, without fallback (it cannot
    /// announce VIPs outside [`SUBNET_A`]).
    pub one_nic: Option<usize>,
    /// With [`Action::RestartAfterClockStep`]: the incarnation is the wall clock at start (so
    /// it goes down), not a persisted counter.
    pub wall_clock_incarnation: bool,
    /// When the adversary's faults end (`None`: they last to the end of the run).
    pub fault_end: Option<VTime>,
    /// The victim cannot exchange heartbeats both ways with any peer from `fault_at` to
    /// `fault_end`, so it must step back.
    pub isolated: bool,
    /// Two answerers within the documented bound are tolerated (if counted when over 1 s):
    /// no node can tell them apart from a partition.
    pub overlap_tolerated: bool,
}

/// Subnets of the first link (v4 and v6): the VIPs' third octet / seventh group 0 or 1.
pub const SUBNET_A: [&str; 2] = ["10.96.0.0/23", "fd00::/111"];
/// Subnets of the second link: third octet / seventh group 2 or 3.
pub const SUBNET_B: [&str; 2] = ["10.96.2.0/23", "fd00::2:0/111"];

/// The documented bound for an isolated node: it has stepped back and each of its VIPs has a
/// single owner this long after the fault started (dead-after 0.3 s + Lease renewal 3 s +
/// slack).
pub const ISOLATION_BOUND: Duration = Duration::from_secs(6);

/// The configuration every simulated agent starts from (the world sets its node, MAC and
/// configuration fingerprint per node): the election core's defaults
/// ([`announcer::election::defaults`]), which are also the agent's flag defaults, so that the
/// simulator checks the timings that ship. `cli_defaults_are_the_simulated_defaults` in
/// `tests/tests/sim/election.rs` fails if `announcer agent` without flags runs anything else.
pub fn template_config() -> ElectionConfig {
    ElectionConfig::new("template")
}

fn secs(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> Duration {
    Duration::from_secs_f64(rng.random_range(lo..hi))
}

/// Whether `addr` is in [`SUBNET_B`] (announced on the second link when nodes have two).
pub fn in_subnet_b(addr: IpAddr) -> bool {
    SUBNET_B.iter().any(|s| {
        s.parse::<announcer::election::Subnet>()
            .expect("valid")
            .contains(addr)
    })
}

/// A set of the simulated nodes, one bit per node index: up to [`MAX_NODES`] nodes.
pub type NodeMask = u128;

/// The most nodes a simulated cluster may have (the bits of a [`NodeMask`]).
pub const MAX_NODES: usize = NodeMask::BITS as usize;

/// How many nodes [`Plan::generate`] picks from, unless told otherwise
/// ([`Plan::generate_sized`]): what `cargo xtask test` runs.
pub const DEFAULT_NODES: RangeInclusive<usize> = 3..=7;

/// Bit mask of one node.
pub fn bit(i: usize) -> NodeMask {
    1 << i
}

/// Every node of `n`.
pub fn all_of(n: usize) -> NodeMask {
    if n >= MAX_NODES {
        NodeMask::MAX
    } else {
        (1 << n) - 1
    }
}

/// A random mask in `range` over `n` nodes. Drawn as a `u16` when the cluster fits one, as
/// before masks were wider, so that every seed of a small cluster plans what it always did.
fn random_mask(rng: &mut ChaCha8Rng, range: RangeInclusive<NodeMask>, n: usize) -> NodeMask {
    if n <= 16 {
        let (lo, hi) = (*range.start() as u16, *range.end() as u16);
        NodeMask::from(rng.random_range(lo..=hi))
    } else {
        rng.random_range(range)
    }
}

/// The rendezvous owner of `vip` among the nodes in `mask`.
pub fn owner_in(nodes: &[NodeName], vip: IpAddr, mask: NodeMask) -> Option<usize> {
    let cands = nodes
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & bit(*i) != 0)
        .map(|(_, n)| n);
    let o = rendezvous::owner(vip, cands)?;
    nodes.iter().position(|n| n == o)
}

impl Plan {
    /// The plan for `seed` running `scenario`, on [`DEFAULT_NODES`] nodes.
    pub fn generate(seed: u64, scenario: Scenario) -> Plan {
        Self::generate_sized(seed, scenario, DEFAULT_NODES)
    }

    /// The plan for `seed` running `scenario` on a number of nodes drawn from `nodes` (at
    /// most [`MAX_NODES`]).
    pub fn generate_sized(seed: u64, scenario: Scenario, nodes: RangeInclusive<usize>) -> Plan {
        assert!(
            *nodes.end() <= MAX_NODES && *nodes.start() >= 2,
            "the simulator runs 2 to {MAX_NODES} nodes, not {nodes:?}"
        );
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let n = rng.random_range(nodes);
        let m = rng.random_range(1..=40usize);
        let nodes: Vec<NodeName> = (0..n)
            .map(|i| NodeName::from(format!("node-{i}")))
            .collect();
        let all = all_of(n);
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
                _ => random_mask(&mut rng, 1..=all, n),
            };
            vips.push(VipDef { addr, eligible });
        }
        let loss = if rng.random_bool(0.5) {
            0.0
        } else {
            rng.random_range(0.0..0.01)
        };
        let timing = template_config();
        // The joiner (last node) starts late; everyone else within the first 300 ms.
        let initial: NodeMask = if scenario == Scenario::Join {
            all & !bit(n - 1)
        } else {
            all
        };
        let mut steps: Vec<(VTime, Action)> = (0..n)
            .filter(|i| initial & bit(*i) != 0)
            .map(|i| (secs(&mut rng, 0.0, 0.3), Action::Start(i)))
            .collect();
        // The victim: a node that owns a VIP someone else could take over. A cluster without
        // such a VIP (every VIP with at most one eligible node: a few seeds in a hundred) gets
        // its first VIP made eligible everywhere when the fault strikes an owner, so that no
        // run of such a scenario is vacuous by construction.
        let owned = |vips: &[VipDef]| -> Vec<usize> {
            vips.iter()
                .filter(|v| (v.eligible & initial).count_ones() >= 2)
                .filter_map(|v| owner_in(&nodes, v.addr, v.eligible & initial))
                .collect()
        };
        let mut owners = owned(&vips);
        if owners.is_empty() && scenario.strikes_an_owner() {
            vips[0].eligible = all;
            owners = owned(&vips);
        }
        let starters: Vec<usize> = (0..n).filter(|i| initial & bit(*i) != 0).collect();
        let victim = *owners
            .choose(&mut rng)
            .unwrap_or_else(|| starters.choose(&mut rng).expect("nodes"));
        let t1 = secs(&mut rng, 4.0, 6.0);
        let grace = timing.grace;
        let mut victim_opt = Some(victim);
        let (mut probe_loss, mut two_nics, mut one_nic) = (0u16, false, None);
        let mut fault_end = None;
        let (mut isolated, mut overlap_tolerated) = (false, false);
        let others = all & !bit(victim);
        let each_other: Vec<usize> = (0..n).filter(|j| *j != victim).collect();
        // An adversary fault either lasts to the end (then the run covers the documented
        // bound and a few seconds of steady state) or is lifted, then a settle time.
        let mut lasts =
            |rng: &mut ChaCha8Rng, steps: &mut Vec<(VTime, Action)>, lift: Vec<Action>| {
                if rng.random_bool(0.5) {
                    fault_end = None;
                    t1 + ISOLATION_BOUND + secs(rng, 3.0, 4.0)
                } else {
                    let heal = t1 + secs(rng, 1.0, 10.0);
                    steps.extend(lift.into_iter().map(|a| (heal, a)));
                    fault_end = Some(heal);
                    heal + secs(rng, 6.0, 7.0)
                }
            };
        let end = match scenario {
            Scenario::HeartbeatLossOneWay => {
                overlap_tolerated = true;
                probe_loss = rng.random_range(10..=30);
                match rng.random_range(0..3) {
                    0 => {
                        // Mute: nobody hears it, it hears everyone.
                        isolated = true;
                        steps.push((t1, Action::BeatCut(victim, others)));
                    }
                    1 => {
                        // Deaf: it hears nobody, everyone hears it.
                        isolated = true;
                        for &j in &each_other {
                            steps.push((t1, Action::BeatCut(j, bit(victim))));
                        }
                    }
                    _ => {
                        let peer = *each_other.choose(&mut rng).expect("3+ nodes");
                        steps.push((t1, Action::BeatCut(victim, bit(peer))));
                    }
                }
                lasts(&mut rng, &mut steps, vec![Action::BeatHeal])
            }
            Scenario::HeartbeatLossBothWays | Scenario::ProbeAnswerLoss => {
                overlap_tolerated = true;
                isolated = true;
                probe_loss = if scenario == Scenario::ProbeAnswerLoss {
                    300
                } else {
                    rng.random_range(10..=30)
                };
                steps.push((t1, Action::BeatCut(victim, others)));
                for &j in &each_other {
                    steps.push((t1, Action::BeatCut(j, bit(victim))));
                }
                lasts(&mut rng, &mut steps, vec![Action::BeatHeal])
            }
            Scenario::ClockOffset => {
                overlap_tolerated = true;
                isolated = true;
                probe_loss = rng.random_range(10..=30);
                let ms =
                    rng.random_range(6_000..30_000i64) * if rng.random_bool(0.5) { 1 } else { -1 };
                steps.push((t1, Action::Clock(victim, ms)));
                lasts(&mut rng, &mut steps, vec![Action::Clock(victim, 0)])
            }
            Scenario::KeyMismatch => {
                overlap_tolerated = true;
                isolated = true;
                probe_loss = rng.random_range(10..=30);
                steps.push((t1, Action::Key(victim, 1)));
                lasts(&mut rng, &mut steps, vec![Action::Key(victim, 0)])
            }
            Scenario::IncarnationRollback | Scenario::IncarnationRollbackWallClock => {
                steps.push((t1, Action::Kill(victim)));
                let back = t1 + secs(&mut rng, 0.2, 10.0);
                steps.push((back, Action::RestartAfterClockStep(victim)));
                fault_end = Some(back);
                back + secs(&mut rng, 6.0, 7.0)
            }
            Scenario::ForgedHeartbeats => {
                victim_opt = None;
                let over = secs(&mut rng, 0.3, 1.0);
                steps.push((t1, Action::Forge(rng.random_range(60..150), over)));
                fault_end = Some(t1 + over);
                t1 + over + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::Flood => {
                victim_opt = None;
                let mut at = t1;
                for _ in 0..3 {
                    steps.push((at, Action::Flood(rng.random_range(300..700))));
                    at += secs(&mut rng, 0.3, 1.5);
                }
                fault_end = Some(at);
                at + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::TwoNics => {
                two_nics = true;
                // Preferably the owner of a VIP on the second link: the one probed at MAC B.
                let b: Vec<usize> = vips
                    .iter()
                    .filter(|v| in_subnet_b(v.addr) && (v.eligible & initial).count_ones() >= 2)
                    .filter_map(|v| owner_in(&nodes, v.addr, v.eligible & initial))
                    .collect();
                let victim = b.choose(&mut rng).copied().unwrap_or(victim);
                victim_opt = Some(victim);
                if rng.random_bool(0.3) {
                    let rest: Vec<usize> = (0..n).filter(|j| *j != victim).collect();
                    one_nic = rest.choose(&mut rng).copied();
                }
                steps.push((t1, Action::Kill(victim)));
                t1 + grace + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::ConfigSkew => {
                victim_opt = None;
                overlap_tolerated = true;
                let changes = (0..rng.random_range(1..=4))
                    .map(|_| {
                        let i = rng.random_range(0..vips.len());
                        (i, random_mask(&mut rng, 0..=all, n))
                    })
                    .collect();
                steps.push((t1, Action::NewConfig(changes)));
                let mut order: Vec<usize> = (0..n).collect();
                rand::seq::SliceRandom::shuffle(&mut order[..], &mut rng);
                let mut at = t1;
                for j in order {
                    at += secs(&mut rng, 0.7, 2.0);
                    steps.push((at, Action::Reconfigure(j)));
                }
                fault_end = Some(at);
                at + secs(&mut rng, 6.0, 7.0)
            }
            Scenario::WatchLag => {
                overlap_tolerated = true;
                let lagger = rng.random_range(0..n);
                victim_opt = Some(lagger);
                steps.push((
                    t1 - Duration::from_secs(1),
                    Action::WatchLag(lagger, Duration::from_secs(2)),
                ));
                // VIPs move to the lagging node from another owner: it tops their new
                // eligible sets. (A VIP nobody announced before has no owner to hold on to it
                // while the lagging node learns of it.)
                let movable: Vec<usize> = (0..vips.len())
                    .filter(|i| {
                        let e = vips[*i].eligible;
                        e != 0 && owner_in(&nodes, vips[*i].addr, e) != Some(lagger)
                    })
                    .collect();
                let mut changes = Vec::new();
                for _ in 0..rng.random_range(1..=3) {
                    let Some(&i) = movable.choose(&mut rng) else {
                        break;
                    };
                    for _ in 0..20 {
                        let mask = random_mask(&mut rng, 0..=all, n) | bit(lagger);
                        if owner_in(&nodes, vips[i].addr, mask) == Some(lagger) {
                            changes.push((i, mask));
                            break;
                        }
                    }
                }
                // None found at random: the first movable VIP that moves to the lagging node
                // when it joins the eligible set, or when it shares it with the owner alone.
                if changes.is_empty() {
                    changes.extend(movable.iter().find_map(|&i| {
                        let e = vips[i].eligible;
                        let o = owner_in(&nodes, vips[i].addr, e)?;
                        [e | bit(lagger), bit(o) | bit(lagger)]
                            .into_iter()
                            .find(|m| owner_in(&nodes, vips[i].addr, *m) == Some(lagger))
                            .map(|m| (i, m))
                    }));
                }
                steps.push((t1, Action::Eligibility(changes)));
                fault_end = Some(t1);
                t1 + secs(&mut rng, 6.0, 7.0)
            }
            Scenario::OneWayLink => {
                overlap_tolerated = true;
                let peer = *each_other.choose(&mut rng).expect("3+ nodes");
                steps.push((t1, Action::LinkCut(victim, peer)));
                lasts(&mut rng, &mut steps, vec![Action::LinkHeal])
            }
            Scenario::HeartbeatBlackout => {
                victim_opt = None;
                for j in 0..n {
                    steps.push((t1, Action::BeatCut(j, all & !bit(j))));
                }
                // It lasts past the bound: to the end, or lifted a few seconds after it.
                if rng.random_bool(0.5) {
                    t1 + ISOLATION_BOUND + secs(&mut rng, 3.0, 4.0)
                } else {
                    let heal = t1 + ISOLATION_BOUND + secs(&mut rng, 2.0, 6.0);
                    steps.push((heal, Action::BeatHeal));
                    fault_end = Some(heal);
                    heal + secs(&mut rng, 6.0, 7.0)
                }
            }
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
                // Anywhere within the grace: entries always have at least that long left.
                let back = secs(&mut rng, 0.2, grace.as_secs_f64() - 0.3);
                steps.push((t1 + back, Action::Start(victim)));
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
                let joiner = n - 1;
                victim_opt = Some(joiner);
                // The joiner must rank first for some VIP another node answers until it joins;
                // if it ranks first for none, the first VIP that it would win against one other
                // node is made eligible on the two of them.
                let wins = vips.iter().any(|v| {
                    v.eligible & initial != 0
                        && owner_in(&nodes, v.addr, v.eligible) == Some(joiner)
                });
                if !wins {
                    let pair = (0..vips.len())
                        .flat_map(|i| (0..joiner).map(move |j| (i, bit(j) | bit(joiner))))
                        .find(|(i, m)| owner_in(&nodes, vips[*i].addr, *m) == Some(joiner));
                    if let Some((i, mask)) = pair {
                        vips[i].eligible = mask;
                    }
                }
                steps.push((t1, Action::Start(n - 1)));
                t1 + secs(&mut rng, 4.0, 5.0)
            }
            Scenario::Eligibility => {
                victim_opt = None;
                let mut last = t1;
                let mut at = t1;
                for _ in 0..rng.random_range(1..=2) {
                    let changes: Vec<(usize, NodeMask)> = (0..rng.random_range(1..=3))
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
                                random_mask(&mut rng, 0..=all, n)
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
            probe_loss,
            two_nics,
            one_nic,
            wall_clock_incarnation: scenario == Scenario::IncarnationRollbackWallClock,
            fault_end,
            isolated,
            overlap_tolerated,
        }
    }

    /// The time of the first planned action matching `f`.
    pub fn when(&self, f: impl Fn(&Action) -> bool) -> Option<VTime> {
        self.steps.iter().find(|(_, a)| f(a)).map(|(t, _)| *t)
    }
}

//! The invariants, checked on a finished run's ground truth.
//!
//! Why after the fact: the world records what clients would see every 10 ms ([`Sample`]) and
//! every action the agents took ([`Record`]); checking afterwards keeps the world free of
//! judgement and lets one failure message show both the moment and the outputs leading to it.
//! Each check names the invariant it enforces (numbered as in the design brief):
//!
//! 1. steady state: each VIP answered by exactly the rendezvous owner among eligible live nodes;
//! 2. crash / link down: clients' traffic flows again within 1 s;
//! 3. SIGTERM handover and restart within grace: no lost traffic sample;
//! 4. SIGKILL: another node takes over within the entries' lifetime (`grace + grace / 5`)
//!    + 1 s;
//! 5. partition: overlap only while partitioned (+2 s), counted, one owner re-announced after heal;
//! 6. API outage: no ownership change (with a crash, failover still within 1 s);
//! 7. API cost: at most 0.5 Lease writes per second per node in steady state.
//!
//! And, for every scenario unless said otherwise (the adversary's invariants):
//!
//! 5. overlaps are counted exactly, per VIP ([`match_overlaps`]): every episode of two
//!    answerers or more lasting over 1 s (a partition's included) is counted by an `Overlap`
//!    Event of its own, raised from one sample before the episode to 2 s after it; every
//!    `Overlap` Event counts an episode (of any length) that way, at most one per node beyond
//!    the first that answered in it; and each node's overlap counter equals its Events.
//!    Shorter episodes need no Event because a make-before-break handover answers twice by
//!    design (under 500 ms outside partitions); an Event for one still counts it. Episodes
//!    come from the 10 ms samples, plus those too brief for a sample, from the log: a node
//!    that installed the VIP and removed it between two samples that both show another node
//!    answering it;
//! 1. under a fault that lasts ([`Plan::fault_end`] `None`), from the documented
//!    [`ISOLATION_BOUND`] after it started: exactly one answering data plane per VIP that has
//!    an eligible live node (and none for a VIP with no eligible node);
//! 8. an isolated node (it exchanges heartbeats both ways with no peer) has stepped back
//!    within [`ISOLATION_BOUND`]: it wrote `standby: true` or raised `Isolated`;
//! 9. no VIP with an eligible live node that can announce it is dark (answered by nobody)
//!    longer than [`DARK_BOUND`];
//! 10. bounded memory: no agent keeps more peers than there are Leases (forged-name
//!     scenarios), or than Leases and real nodes (the others: a real node's first heartbeat
//!     may arrive before its Lease);
//! 11. forged heartbeats and floods change no VIP's owner;
//! 12. a configuration roll is reported (`ConfigMismatch` node Event);
//! 13. under a heartbeat blackout (every node's heartbeats lost, the API fine), from
//!     [`ISOLATION_BOUND`] after it began while it lasts: no node answers more VIPs than
//!     rendezvous gives it among the live nodes plus [`PILE_UP_SLACK`] (no pile-up on one
//!     node); invariant 1 holds over the same window (exactly one answerer per VIP, a VIP
//!     pinned to a few nodes included), the scenario being
//!     [`Scenario::bounded_by_isolation`].
//!
//! During a configuration roll (its documented bound, see `roll_window`) 5 and 9 are checked
//! only outside it.

use std::{fmt::Write, time::Duration};

use announcer::election::{EventKind, NodeEventKind, Output};

use super::{
    agent::Agent,
    queue::VTime,
    scenario::{Action, ISOLATION_BOUND, NodeMask, Scenario, bit, owner_in},
    world::{Record, SAMPLE_EVERY, Sample, What, World},
};

/// What one run produced.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// The seed.
    pub seed: u64,
    /// Its scenario.
    pub scenario: Option<Scenario>,
    /// Broken invariants, each a self-contained message with a trace.
    pub violations: Vec<String>,
    /// Failover (or takeover) times measured, in milliseconds.
    pub failover_ms: Vec<f64>,
    /// (VIP, sample) pairs where some client's traffic was lost although a live eligible node
    /// existed, because the node its cache points to is down or cut off: a move that broke
    /// traffic.
    pub lost_samples: u64,
    /// (VIP, sample) pairs where a live eligible node existed and some client had not
    /// resolved the VIP yet (no client cut off): a VIP nobody could serve before (its first endpoint, or the only node it may
    /// use joining) waiting for its first owner. The world counts a node live from its
    /// start plus the warm-up, and an eligibility change from the instant it happens, while
    /// the agents learn both through their watches, so a few such samples are expected.
    pub unserved_samples: u64,
    /// Episodes of a VIP answered by two nodes or more ([`Episode`]).
    pub overlaps: u64,
    /// … of which an Overlap Event must count ([`Episode::required`]).
    pub overlaps_required: u64,
    /// … of which none of its own did ([`Matching::uncounted`]).
    pub overlaps_uncounted: u64,
    /// Overlaps the agents counted (`Stats::overlaps`, summed; the Overlap Events agree).
    pub overlaps_counted: u64,
    /// Overlap Events that counted no observed episode ([`Matching::unseen`]).
    pub overlap_events_unseen: u64,
    /// The highest steady-state Lease write rate of any node (per second).
    pub lease_writes_per_s: f64,
    /// Hash of the whole run (equal runs, equal hashes).
    pub trace_hash: u64,
    /// For scenarios with a victim: `true` if the run tested nothing of it (it answered no VIP
    /// another node could take when the fault struck; a joiner or lagging node took none).
    pub victim_idle: Option<bool>,
    /// The longest time a VIP with an eligible live node was answered by nobody (ms).
    pub max_dark_ms: f64,
}

impl RunReport {
    /// `seed:scenario`, how a list of failed runs names one.
    pub fn seed_and_scenario(&self) -> String {
        format!("{}:{}", self.seed, self.scenario.map_or("?", |s| s.name()))
    }

    /// The invariant each violation broke, as its message names it (`6 (…)`, up to the first
    /// closing parenthesis; `?)` if it names none).
    pub fn broken_invariants(&self) -> impl Iterator<Item = String> + '_ {
        self.violations.iter().map(|v| {
            let inv = v
                .split(" invariant ")
                .nth(1)
                .and_then(|x| x.split(')').next())
                .unwrap_or("?");
            format!("{inv})")
        })
    }
}

/// The longest a VIP with an eligible live node that can announce it may go unanswered.
pub const DARK_BOUND: Duration = Duration::from_secs(1);
/// Overlap episodes longer than this must be counted: twice the longest make-before-break
/// handover tolerated outside partitions (`SLACK_OVERLAP`), where two answerers are the design.
pub const COUNT_OVER: Duration = Duration::from_secs(1);
/// … by an `Overlap` Event at most this long after the episode ended.
pub const COUNT_WITHIN: Duration = Duration::from_secs(2);

/// Time after start from which clients are expected to be served.
pub const WARM: Duration = Duration::from_secs(3);
/// How many VIPs beyond its rendezvous share one node may answer under a heartbeat blackout
/// (invariant 13): the placement stays spread, one VIP of slack for a takeover under way.
pub const PILE_UP_SLACK: usize = 1;
const SLACK_OVERLAP: Duration = Duration::from_millis(500);
const HEAL_BUDGET: Duration = Duration::from_secs(2);
const FAILOVER_BUDGET: Duration = Duration::from_secs(1);

struct Ctx<'a, A> {
    w: &'a World<A>,
    out: Vec<String>,
}

fn names<A>(w: &World<A>, mask: NodeMask) -> String {
    let v: Vec<&str> = (0..w.nodes.len())
        .filter(|i| mask & bit(*i) != 0)
        .map(|i| w.nodes[i].name.as_str())
        .collect();
    if v.is_empty() {
        "nobody".into()
    } else {
        v.join(",")
    }
}

fn vip_of(out: &Output) -> Option<std::net::IpAddr> {
    match out {
        Output::Install { vip, .. }
        | Output::Remove { vip, .. }
        | Output::Announce { vip, .. }
        | Output::Probe { vip, .. }
        | Output::Event { vip, .. } => Some(*vip),
        _ => None,
    }
}

impl<'a, A: Agent> Ctx<'a, A> {
    fn fail(&mut self, inv: &str, vip: Option<usize>, t: VTime, msg: String) {
        let w = self.w;
        let scen = w.plan.scenario;
        let addr = vip.map(|v| w.plan.vips[v].addr);
        let mut s = format!("seed {} scenario {scen} invariant {inv}", w.plan.seed);
        if let Some(a) = addr {
            let _ = write!(s, " VIP {a}");
        }
        let _ = write!(s, " at {:.3}s: {msg}", t.as_secs_f64());
        let _ = write!(
            s,
            "\n  replay: cargo run -p announcer-tests --bin soak -- --seed {} --scenario {scen} --trace\n  trace:",
            w.plan.seed
        );
        let relevant = |r: &&Record| {
            r.t <= t + Duration::from_millis(200)
                && match &r.what {
                    What::Out { out, .. } => addr.is_some() && vip_of(out) == addr,
                    _ => true,
                }
        };
        let lines: Vec<&Record> = w.log.iter().filter(relevant).collect();
        for r in &lines[lines.len().saturating_sub(16)..] {
            let who = r.node.map_or("world", |i| w.nodes[i].name.as_str());
            let _ = write!(s, "\n    {:>9.4}s {who:>8} {:?}", r.t.as_secs_f64(), r.what);
        }
        self.out.push(s);
    }

    fn samples(&self, from: VTime, to: VTime) -> impl Iterator<Item = &'a Sample> + use<'a, A> {
        let w: &'a World<A> = self.w;
        w.samples.iter().filter(move |s| s.t >= from && s.t < to)
    }

    fn before(&self, t: VTime) -> Option<&'a Sample> {
        let w: &'a World<A> = self.w;
        w.samples.iter().rev().find(|s| s.t < t)
    }

    fn eligible(&self, s: &Sample, v: usize) -> NodeMask {
        self.w.eligibility[s.epoch][v]
    }

    fn expected(&self, s: &Sample, v: usize) -> NodeMask {
        let w = self.w;
        owner_in(
            &w.plan.nodes,
            w.plan.vips[v].addr,
            self.eligible(s, v) & s.live & w.capable[v],
        )
        .map_or(0, bit)
    }

    /// Eligible as the nodes see it: during a roll, each node by its own configuration.
    fn eligible_any(&self, s: &Sample, v: usize) -> NodeMask {
        match &s.mixed {
            Some(m) => m[v],
            None => self.eligible(s, v),
        }
    }

    /// Invariant 1 under a lasting fault, over `[from, to)`: exactly one answerer per VIP
    /// with an eligible live node, whichever it is; none for a VIP nobody may announce.
    fn single(&mut self, from: VTime, to: VTime, when: &str) {
        for s in self.samples(from, to) {
            for (v, st) in s.vips.iter().enumerate() {
                let elig = self.eligible_any(s, v);
                let servable = elig & s.live & self.w.capable[v] != 0;
                let ok = if servable {
                    st.answerers.count_ones() == 1
                } else if elig == 0 {
                    st.answerers == 0
                } else {
                    true
                };
                if !ok {
                    let msg = format!(
                        "{when}: answered by {} (eligible {}, live {})",
                        names(self.w, st.answerers),
                        names(self.w, elig),
                        names(self.w, s.live)
                    );
                    self.fail("1 (one owner per VIP)", Some(v), s.t, msg);
                    return;
                }
            }
        }
    }

    /// Invariant 13 over `[from, to)`: each node answers at most its rendezvous share of the
    /// VIPs (among the live nodes) plus [`PILE_UP_SLACK`].
    fn no_pile_up(&mut self, from: VTime, to: VTime) {
        let nodes = self.w.nodes.len();
        for s in self.samples(from, to) {
            for n in 0..nodes {
                let share = (0..s.vips.len())
                    .filter(|v| self.expected(s, *v) == bit(n))
                    .count();
                let answers = s
                    .vips
                    .iter()
                    .filter(|st| st.answerers & bit(n) != 0)
                    .count();
                if answers > share + PILE_UP_SLACK {
                    let msg = format!(
                        "{} answers {answers} VIPs, its share is {share} (+{PILE_UP_SLACK} slack); per node: {}",
                        self.w.nodes[n].name,
                        (0..nodes)
                            .map(|m| {
                                let k = s
                                    .vips
                                    .iter()
                                    .filter(|st| st.answerers & bit(m) != 0)
                                    .count();
                                format!("{}={k}", self.w.nodes[m].name)
                            })
                            .collect::<Vec<_>>()
                            .join(" ")
                    );
                    self.fail("13 (no pile-up under a heartbeat blackout)", None, s.t, msg);
                    return;
                }
            }
        }
    }

    /// Whether the node output something matching `f` within `[from, to]`.
    fn output(
        &self,
        node: Option<usize>,
        from: VTime,
        to: VTime,
        f: impl Fn(&Output) -> bool,
    ) -> Option<VTime> {
        self.w
            .log
            .iter()
            .filter(|r| r.t >= from && r.t <= to && (node.is_none() || r.node == node))
            .find(|r| matches!(&r.what, What::Out { out, .. } if f(out)))
            .map(|r| r.t)
    }

    /// Invariant 1 over `[from, to)`.
    fn steady(&mut self, from: VTime, to: VTime, when: &str) {
        for s in self.samples(from, to) {
            for (v, st) in s.vips.iter().enumerate() {
                let want = self.expected(s, v);
                if st.answerers != want {
                    let (t, elig, live) = (s.t, self.eligible(s, v), s.live);
                    let msg = format!(
                        "{when}: answered by {}, expected {} (eligible {}, live {})",
                        names(self.w, st.answerers),
                        names(self.w, want),
                        names(self.w, elig),
                        names(self.w, live)
                    );
                    self.fail("1 (steady state)", Some(v), t, msg);
                    return;
                }
            }
        }
    }

    /// VIPs the victim answered (or clients sent to it) just before `t`, that some other
    /// eligible node could serve afterwards.
    fn victims_vips(&self, victim: usize, t: VTime, cached: bool) -> Vec<usize> {
        let Some(pre) = self.before(t) else {
            return Vec::new();
        };
        let later = self.before(t + Duration::from_secs(1)).unwrap_or(pre);
        (0..pre.vips.len())
            .filter(|v| {
                let st = pre.vips[*v];
                let mask = if cached { st.cached } else { st.answerers };
                mask & bit(victim) != 0
                    && self.eligible(later, *v) & later.live & self.w.capable[*v] & !bit(victim)
                        != 0
            })
            .collect()
    }

    /// The first sample at or after `t` satisfying `f` for VIP `v`.
    fn first(&self, t: VTime, f: impl Fn(&Sample) -> bool) -> Option<VTime> {
        self.w
            .samples
            .iter()
            .filter(|s| s.t >= t)
            .find(|s| f(s))
            .map(|s| s.t)
    }

    fn no_loss(&mut self, inv: &str) {
        for s in self.samples(WARM, self.w.plan.end + Duration::from_secs(1)) {
            for (v, st) in s.vips.iter().enumerate() {
                if self.eligible(s, v) & s.live != 0 && !st.flows {
                    let msg = format!("traffic lost (clients cache {})", names(self.w, st.cached));
                    self.fail(inv, Some(v), s.t, msg);
                    return;
                }
            }
        }
    }
}

/// One overlap episode of a VIP: consecutive samples in which two nodes or more answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Episode {
    /// The first sample with two answerers or more.
    pub from: VTime,
    /// The last one.
    pub to: VTime,
    /// Every node that answered the VIP during the episode (bit `i` = node `i`).
    pub nodes: NodeMask,
    /// Whether an Overlap Event must count it: it lasted over [`COUNT_OVER`] (shorter ones
    /// can be a make-before-break handover, where two answerers are the design) and lies in
    /// no configuration roll (whose nodes rank differently by design, see `roll_window`).
    pub required: bool,
}

impl Episode {
    /// When an Overlap Event counts it: from one sample period before its first sample (the
    /// overlap may begin, and be noticed, up to that long before a sample shows it) to
    /// [`COUNT_WITHIN`] after its last.
    pub fn window(&self) -> (VTime, VTime) {
        (
            self.from.saturating_sub(SAMPLE_EVERY),
            self.to + COUNT_WITHIN,
        )
    }

    /// How many overlaps it holds: one per node beyond the first that answered.
    pub fn overlaps(&self) -> usize {
        (self.nodes.count_ones() as usize).saturating_sub(1).max(1)
    }
}

/// How one VIP's Overlap Events match its episodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matching {
    /// Required episodes (indices) that no Event of their own counts.
    pub uncounted: Vec<usize>,
    /// Events (indices) that count no observed episode: an overlap no client could see, or
    /// one counted more often than it had nodes beyond the first.
    pub unseen: Vec<usize>,
}

/// Matches one VIP's Overlap Events (`events`, in time order) to its overlap `episodes` (in
/// time order, disjoint): an Event counts an episode if it falls in the episode's
/// [`window`](Episode::window), and each episode takes at most
/// [`overlaps`](Episode::overlaps) Events. The counting is exact when both lists come back
/// empty: every required episode has an Event of its own, and every Event counts an episode.
///
/// Each half is a greedy matching of points to intervals whose starts and ends both grow
/// (earliest free point for each interval, earliest-ending free interval for each point),
/// which is a maximum matching; and by the Mendelsohn–Dulmage theorem, if one matching
/// covers every required episode and another every Event, a single one covers both.
pub fn match_overlaps(episodes: &[Episode], events: &[VTime]) -> Matching {
    let mut m = Matching::default();
    // Every required episode, its own Event.
    let mut next = 0;
    for (i, e) in episodes.iter().enumerate().filter(|(_, e)| e.required) {
        let (from, to) = e.window();
        while next < events.len() && events[next] < from {
            next += 1;
        }
        if next < events.len() && events[next] <= to {
            next += 1;
        } else {
            m.uncounted.push(i);
        }
    }
    // Every Event, an episode with room for it.
    let mut room: Vec<usize> = episodes.iter().map(Episode::overlaps).collect();
    let mut first = 0;
    for (k, &t) in events.iter().enumerate() {
        while first < episodes.len() && episodes[first].window().1 < t {
            first += 1;
        }
        let slot = (first..episodes.len())
            .take_while(|&i| episodes[i].window().0 <= t)
            .find(|&i| room[i] > 0);
        match slot {
            Some(i) => room[i] -= 1,
            None => m.unseen.push(k),
        }
    }
    m
}

/// VIP `v`'s overlap episodes up to `until`: those the samples show, and those too brief for
/// any sample ([`brief_episodes`]), merged where they touch.
fn episodes<A>(w: &World<A>, v: usize, until: VTime, roll: Option<(VTime, VTime)>) -> Vec<Episode> {
    let mut all = sampled_episodes(w, v, until, roll);
    all.extend(brief_episodes(w, v));
    all.sort_by_key(|e| e.from);
    let mut out: Vec<Episode> = Vec::with_capacity(all.len());
    for e in all {
        match out.last_mut() {
            Some(p) if e.from <= p.to => {
                p.to = p.to.max(e.to);
                p.nodes |= e.nodes;
                p.required |= e.required;
            }
            _ => out.push(e),
        }
    }
    out
}

/// Overlaps between two samples, which no sample shows: a node installed VIP `v` and removed
/// it again before the next sample (it took the VIP and gave it back at once), while another
/// node answered it in the samples on both sides. The log has the exact times.
fn brief_episodes<A>(w: &World<A>, v: usize) -> Vec<Episode> {
    let addr = w.plan.vips[v].addr;
    let mut since: Vec<Option<VTime>> = vec![None; w.nodes.len()];
    let mut out = Vec::new();
    for r in &w.log {
        let (
            Some(n),
            What::Out {
                out: o,
                changed: true,
            },
        ) = (r.node, &r.what)
        else {
            continue;
        };
        match o {
            Output::Install { vip, .. } if *vip == addr => since[n] = Some(r.t),
            Output::Remove { vip, .. } if *vip == addr => {
                let Some(from) = since[n].take() else {
                    continue;
                };
                let i = w.samples.partition_point(|s| s.t < from);
                let j = w.samples.partition_point(|s| s.t <= r.t);
                if i != j || i == 0 || j == w.samples.len() {
                    continue; // a sample saw it (or it is at the edge of the run)
                }
                let others =
                    w.samples[i - 1].vips[v].answerers & w.samples[j].vips[v].answerers & !bit(n);
                if others != 0 {
                    out.push(Episode {
                        from,
                        to: r.t,
                        nodes: others | bit(n),
                        required: false,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// VIP `v`'s overlap episodes as the samples show them, up to `until`.
fn sampled_episodes<A>(
    w: &World<A>,
    v: usize,
    until: VTime,
    roll: Option<(VTime, VTime)>,
) -> Vec<Episode> {
    let mut out = Vec::new();
    let mut open: Option<(VTime, NodeMask)> = None;
    let mut last = Duration::ZERO;
    let samples = w
        .samples
        .iter()
        .map(|s| (s.t, s.vips[v].answerers))
        .chain([(until, 0)]);
    for (t, answerers) in samples {
        match (answerers.count_ones() >= 2, &mut open) {
            (true, None) => open = Some((t, answerers)),
            (true, Some((_, nodes))) => *nodes |= answerers,
            (false, Some((from, nodes))) => {
                let (from, nodes) = (*from, *nodes);
                let in_roll = roll.is_some_and(|(r0, r1)| from >= r0 && last <= r1);
                out.push(Episode {
                    from,
                    to: last,
                    nodes,
                    required: last - from > COUNT_OVER && !in_roll,
                });
                open = None;
            }
            (false, None) => {}
        }
        last = t;
    }
    out
}

/// For a scenario whose fault is about a victim ([`super::scenario::Plan::victim`]), whether the run tested
/// nothing of what the scenario is for: the victim answered no VIP that another node could
/// serve when the fault struck (a joiner, or the node whose watch lags: it took no VIP it had
/// not answered before). `None`: the scenario has no victim.
fn victim_idle<A: Agent>(c: &Ctx<'_, A>, end: VTime) -> Option<bool> {
    let plan = &c.w.plan;
    let victim = plan.victim?;
    match plan.scenario {
        Scenario::Join | Scenario::WatchLag => {
            let (Some(pre), Some(post)) = (c.before(plan.fault_at), c.before(end)) else {
                return Some(true);
            };
            let took = (0..plan.vips.len()).any(|v| {
                post.vips[v].answerers & bit(victim) != 0
                    && pre.vips[v].answerers & bit(victim) == 0
            });
            Some(!took)
        }
        _ => {
            let tf = match plan.scenario {
                Scenario::OutageCrash => plan.when(|a| matches!(a, Action::Crash(_)))?,
                _ => plan.fault_at,
            };
            Some(c.victims_vips(victim, tf, false).is_empty())
        }
    }
}

/// After the last agent of a configuration roll restarted, how long until the usual
/// invariants hold again.
const ROLL_SETTLE: Duration = Duration::from_secs(2);

/// The documented bound of a configuration roll: from the new configuration to the last
/// agent's restart with it, plus [`ROLL_SETTLE`]. Meanwhile agents on the old and the new
/// configuration rank VIPs whose selection changed differently, so such a VIP can be answered
/// twice or by nobody until the roll reaches the nodes concerned (a `ConfigMismatch` Event
/// says so); the agents hand over only to a data plane that answers, so VIPs that both
/// configurations select keep one answerer.
fn roll_window(plan: &super::scenario::Plan) -> Option<(VTime, VTime)> {
    let start = plan
        .steps
        .iter()
        .find(|(_, a)| matches!(a, Action::NewConfig(_)))?
        .0;
    let last = plan
        .steps
        .iter()
        .filter(|(_, a)| matches!(a, Action::Reconfigure(_)))
        .map(|(t, _)| *t)
        .max()
        .unwrap_or(start);
    Some((start, last + ROLL_SETTLE))
}

/// Check every invariant that applies to the finished run in `w`.
pub fn check<A: Agent>(w: &World<A>) -> RunReport {
    let plan = &w.plan;
    let mut c = Ctx { w, out: Vec::new() };
    let mut rep = RunReport {
        seed: plan.seed,
        scenario: Some(plan.scenario),
        trace_hash: w.trace_hash(),
        ..Default::default()
    };
    let end = plan.end + Duration::from_millis(1);
    let roll = roll_window(plan);
    // A dead agent's entries answer for up to this long (at least `grace`).
    let entry_ttl = plan.timing.entry_ttl();

    for r in &w.log {
        if let What::Bad(m) = &r.what {
            c.fail("0 (well-formed outputs)", None, r.t, m.clone());
        }
    }

    // Lost traffic and overlap episodes, for every scenario.
    for s in c.samples(WARM, end) {
        for (v, st) in s.vips.iter().enumerate() {
            if c.eligible(s, v) & s.live != 0 && !st.flows {
                if st.cut_off {
                    rep.lost_samples += 1;
                } else {
                    rep.unserved_samples += 1;
                }
            }
        }
    }
    let window = match (
        plan.when(|a| matches!(a, Action::Partition(_))),
        plan.when(|a| *a == Action::Heal),
    ) {
        (Some(p), Some(h)) => Some((p, h)),
        _ => None,
    };
    let mut overlapped = Vec::new();
    let mut overlap_events: Vec<Vec<(VTime, usize)>> = vec![Vec::new(); plan.vips.len()];
    for r in &w.log {
        if let What::Out {
            out:
                Output::Event {
                    kind: EventKind::Overlap,
                    vip,
                    ..
                },
            ..
        } = &r.what
            && let Some(v) = plan.vips.iter().position(|x| x.addr == *vip)
        {
            overlap_events[v].push((r.t, r.node.expect("an agent's output")));
        }
    }
    for (v, raised) in overlap_events.iter().enumerate() {
        let episodes = episodes(w, v, end + Duration::from_secs(1), roll);
        rep.overlaps += episodes.len() as u64;
        rep.overlaps_required += episodes.iter().filter(|e| e.required).count() as u64;
        for e in &episodes {
            let (a, last) = (e.from, e.to);
            let in_partition = window.is_some_and(|(p, h)| last >= p && a <= h);
            if in_partition {
                overlapped.push(v);
                let h = window.expect("partition").1;
                if last >= h + HEAL_BUDGET {
                    c.fail(
                        "5 (partition heal)",
                        Some(v),
                        h + HEAL_BUDGET,
                        "still answered by two nodes 2 s after the heal".into(),
                    );
                }
            } else if last - a >= SLACK_OVERLAP && !plan.overlap_tolerated {
                let msg = format!(
                    "answered by two nodes for {:?} outside any partition",
                    last - a
                );
                c.fail("5 (no overlap outside partitions)", Some(v), a, msg);
            }
        }
        let events: Vec<VTime> = raised.iter().map(|(t, _)| *t).collect();
        let m = match_overlaps(&episodes, &events);
        rep.overlaps_uncounted += m.uncounted.len() as u64;
        rep.overlap_events_unseen += m.unseen.len() as u64;
        if let Some(&i) = m.uncounted.first() {
            let e = episodes[i];
            let msg = format!(
                "answered by {} from {:.3}s to {:.3}s and no Overlap Event of its own counts it by {:.3}s ({} Overlap Event(s) for this VIP, {} episode(s) over {COUNT_OVER:?} to count)",
                names(w, e.nodes),
                e.from.as_secs_f64(),
                e.to.as_secs_f64(),
                (e.to + COUNT_WITHIN).as_secs_f64(),
                events.len(),
                episodes.iter().filter(|e| e.required).count(),
            );
            c.fail("5 (overlap counted)", Some(v), e.to, msg);
        }
        if let Some(&i) = m.unseen.first() {
            let (t, node) = raised[i];
            let msg = format!(
                "{} raised an Overlap Event that counts no overlap clients saw: none from {:.3}s to {:.3}s not counted already ({} Event(s), {} episode(s) for this VIP)",
                w.nodes[node].name,
                t.saturating_sub(COUNT_WITHIN).as_secs_f64(),
                (t + SAMPLE_EVERY).as_secs_f64(),
                events.len(),
                episodes.len(),
            );
            c.fail("5 (overlap counted once)", Some(v), t, msg);
        }
    }
    // The counter (`announcer_partition_overlaps_total`) and the Events say the same.
    for n in 0..w.nodes.len() {
        let counted = w.stats(n).overlaps;
        let raised = overlap_events
            .iter()
            .flatten()
            .filter(|(_, node)| *node == n)
            .count() as u64;
        rep.overlaps_counted += counted;
        if counted != raised {
            let msg = format!(
                "{} counted {counted} overlaps but raised {raised} Overlap Events",
                w.nodes[n].name
            );
            c.fail("5 (overlap counter agrees with the Events)", None, end, msg);
        }
    }

    // 1: steady before the fault and at the end.
    c.steady(
        plan.fault_at.saturating_sub(Duration::from_secs(1)),
        plan.fault_at,
        "before the fault",
    );
    let lasting = plan.scenario.adversary() && plan.fault_end.is_none();
    if !lasting {
        c.steady(
            plan.end.saturating_sub(Duration::from_secs(1)),
            end,
            "at the end",
        );
    }
    if plan.scenario.bounded_by_isolation() {
        let from = plan.fault_at + ISOLATION_BOUND;
        let to = plan.fault_end.unwrap_or(end);
        c.single(from, to, "6 s after the fault began, while it lasts");
    }

    // 8: an isolated node steps back within the bound.
    if plan.isolated && plan.fault_end.unwrap_or(end) >= plan.fault_at + ISOLATION_BOUND {
        let v = plan.victim.expect("isolated victim");
        let stepped = c.output(
            Some(v),
            plan.fault_at,
            plan.fault_at + ISOLATION_BOUND,
            |o| {
                matches!(
                    o,
                    Output::WriteLease { standby: true, .. }
                        | Output::NodeEvent {
                            kind: NodeEventKind::Isolated,
                            ..
                        }
                )
            },
        );
        if stepped.is_none() {
            let msg = format!(
                "{} exchanged heartbeats with no peer from {:.3}s but neither wrote standby nor raised Isolated within {ISOLATION_BOUND:?}",
                w.nodes[v].name,
                plan.fault_at.as_secs_f64()
            );
            c.fail(
                "8 (isolated node steps back)",
                None,
                plan.fault_at + ISOLATION_BOUND,
                msg,
            );
        }
    }

    // 9: no VIP dark longer than the bound while someone could serve it. A node that lost the
    // API server alone for a Lease duration is fenced by design (it stops being a candidate
    // so that the cluster converges) until a little after it is back: it serves nothing.
    let fenced = |t: VTime| -> NodeMask {
        let mut m = 0;
        for (d, a) in &plan.steps {
            let Action::NodeApi(n, false) = a else {
                continue;
            };
            let back = plan
                .steps
                .iter()
                .find(|(u, b)| u >= d && *b == Action::NodeApi(*n, true))
                .map_or(end + Duration::from_secs(10), |(u, _)| *u);
            // Its last renewal was up to a renewal period before it lost the API.
            let from = (*d + plan.timing.lease_duration)
                .saturating_sub(plan.timing.lease_renew + Duration::from_millis(500));
            if t >= from && t < back + Duration::from_secs(2) {
                m |= bit(*n);
            }
        }
        m
    };
    for v in 0..plan.vips.len() {
        let mut dark_since: Option<VTime> = None;
        let mut reported = false;
        for s in c
            .samples(WARM, end + Duration::from_secs(1))
            .collect::<Vec<_>>()
        {
            let servers = c.eligible_any(s, v) & s.live & w.capable[v] & !fenced(s.t);
            let in_roll = roll.is_some_and(|(r0, r1)| s.t >= r0 && s.t <= r1);
            let dark = servers != 0 && s.vips[v].answerers == 0 && !in_roll;
            match (dark, dark_since) {
                (true, None) => dark_since = Some(s.t),
                (true, Some(a)) => {
                    let len = s.t - a;
                    rep.max_dark_ms = rep.max_dark_ms.max(len.as_secs_f64() * 1e3);
                    if len > DARK_BOUND && !reported {
                        reported = true;
                        let msg = format!(
                            "answered by nobody since {:.3}s although {} could (live {})",
                            a.as_secs_f64(),
                            names(w, servers),
                            names(w, s.live)
                        );
                        c.fail("9 (no VIP dark beyond the bound)", Some(v), s.t, msg);
                    }
                }
                (false, _) => dark_since = None,
            }
        }
    }

    // 10: bounded memory.
    let strict = matches!(plan.scenario, Scenario::ForgedHeartbeats | Scenario::Flood);
    let table = if strict { &w.mem_strict } else { &w.mem_loose };
    if let Some((n, (t, peers, leases))) = table
        .iter()
        .enumerate()
        .filter_map(|(n, x)| x.map(|x| (n, x)))
        .min_by_key(|(_, x)| {
            if strict {
                usize::MAX - (x.1 - x.2)
            } else {
                x.0.as_micros() as usize
            }
        })
    {
        let bound = if strict {
            "Leases"
        } else {
            "Leases or real nodes"
        };
        let msg = format!(
            "{} keeps state for {peers} peers with {leases} Leases and {} real nodes (bound: {bound})",
            w.nodes[n].name,
            w.nodes.len()
        );
        c.fail("10 (bounded memory)", None, t, msg);
    }

    // 11: forged names and floods change no owner.
    if let Some(from) = plan.when(|a| matches!(a, Action::Forge(..) | Action::Flood(_))) {
        let to = plan.fault_end.unwrap_or(end) + Duration::from_secs(1);
        let bad = w.log.iter().find(|r| {
            r.t >= from
                && r.t <= to
                && matches!(
                    &r.what,
                    What::Out {
                        out: Output::Install { .. } | Output::Remove { .. },
                        changed: true
                    }
                )
        });
        if let Some(r) = bad {
            let What::Out { out, .. } = &r.what else {
                unreachable!()
            };
            let vip = vip_of(out).and_then(|a| plan.vips.iter().position(|x| x.addr == a));
            let who = r.node.map_or("?", |n| w.nodes[n].name.as_str());
            c.fail(
                "11 (no ownership change under forged input)",
                vip,
                r.t,
                format!("{who} did {out:?}"),
            );
        }
    }

    // 13: a heartbeat blackout piles no VIPs onto one node.
    if plan.scenario == Scenario::HeartbeatBlackout {
        c.no_pile_up(
            plan.fault_at + ISOLATION_BOUND,
            plan.fault_end.unwrap_or(end),
        );
    }

    // 12: a configuration roll is reported.
    if plan.scenario == Scenario::ConfigSkew {
        let to = plan.fault_end.unwrap_or(end) + Duration::from_secs(2);
        let seen = c.output(None, plan.fault_at, to, |o| {
            matches!(
                o,
                Output::NodeEvent {
                    kind: NodeEventKind::ConfigMismatch,
                    ..
                }
            )
        });
        if seen.is_none() {
            c.fail(
                "12 (config mismatch reported)",
                None,
                to,
                "nodes ran with two config fingerprints and no node raised ConfigMismatch".into(),
            );
        }
    }

    let victim = plan.victim.unwrap_or(0);
    rep.victim_idle = victim_idle(&c, end);
    match plan.scenario {
        Scenario::Crash | Scenario::LinkDown | Scenario::OutageCrash => {
            let tf = plan
                .when(|a| matches!(a, Action::Crash(_) | Action::LinkDown(_)))
                .expect("fault");
            for v in c.victims_vips(victim, tf, true) {
                let back = c.first(tf, |s| {
                    s.vips[v].flows && s.vips[v].cached & !s.vips[v].answerers == 0
                });
                match back {
                    Some(t) if t - tf <= FAILOVER_BUDGET => {
                        rep.failover_ms.push((t - tf).as_secs_f64() * 1e3)
                    }
                    _ => {
                        let msg =
                            format!("traffic did not flow again within 1 s (back at {back:?})");
                        c.fail("2 (failover)", Some(v), tf + FAILOVER_BUDGET, msg);
                    }
                }
            }
        }
        Scenario::Kill | Scenario::TwoNics => {
            let tf = plan.fault_at;
            for v in c.victims_vips(victim, tf, false) {
                let took = c.first(tf, |s| s.vips[v].answerers & !bit(victim) != 0);
                match took {
                    Some(t) if t - tf <= entry_ttl + FAILOVER_BUDGET => {
                        rep.failover_ms.push((t - tf).as_secs_f64() * 1e3)
                    }
                    _ => c.fail(
                        "4 (takeover after SIGKILL)",
                        Some(v),
                        tf + entry_ttl + FAILOVER_BUDGET,
                        format!("nobody else took over (at {took:?})"),
                    ),
                }
            }
        }
        Scenario::KillRestart => {
            let tf = plan.fault_at;
            let vs = c.victims_vips(victim, tf, false);
            'outer: for s in c.samples(tf, end).cloned().collect::<Vec<_>>() {
                for &v in &vs {
                    if s.vips[v].answerers != bit(victim) {
                        let msg = format!(
                            "the restarting node's VIP answered by {}",
                            names(w, s.vips[v].answerers)
                        );
                        c.fail("3 (restart within grace is invisible)", Some(v), s.t, msg);
                        break 'outer;
                    }
                }
            }
            c.no_loss("3 (restart within grace is invisible)");
        }
        Scenario::Sigterm => {
            let tf = plan.fault_at;
            let exited = w.log.iter().find(|r| {
                r.t >= tf
                    && r.node == Some(victim)
                    && matches!(
                        &r.what,
                        What::Out {
                            out: Output::Exit,
                            ..
                        }
                    )
            });
            let limit = plan.timing.handover_timeout + FAILOVER_BUDGET;
            if exited.is_none_or(|r| r.t - tf > limit) {
                c.fail(
                    "3 (SIGTERM handover)",
                    None,
                    tf + limit,
                    format!(
                        "the leaver did not exit in time ({:?})",
                        exited.map(|r| r.t)
                    ),
                );
            }
            for v in c.victims_vips(victim, tf, false) {
                if let Some(t) = c.first(tf, |s| s.vips[v].answerers & !bit(victim) != 0) {
                    rep.failover_ms.push((t - tf).as_secs_f64() * 1e3);
                }
            }
            c.no_loss("3 (SIGTERM handover)");
        }
        Scenario::Partition => {
            let (_, th) = window.expect("partition");
            overlapped.sort();
            overlapped.dedup();
            let at = th + HEAL_BUDGET;
            if let Some(s) = c.before(at + Duration::from_millis(1)).cloned() {
                for v in overlapped {
                    let a = s.vips[v].answerers;
                    let last_announce = (a.count_ones() == 1)
                        .then(|| a.trailing_zeros() as usize)
                        .and_then(|o| {
                            w.log.iter().rev().find(|r| {
                                r.t <= at
                                    && r.node == Some(o)
                                    && matches!(&r.what, What::Out { out: Output::Announce { vip, .. }, .. } if *vip == plan.vips[v].addr)
                            })
                        })
                        .map(|r| r.t);
                    if a.count_ones() != 1 || last_announce.is_none_or(|t| t < th) {
                        let msg = format!(
                            "after the heal: answered by {}, last announcement at {last_announce:?}",
                            names(w, a)
                        );
                        c.fail("5 (single owner re-announced after heal)", Some(v), at, msg);
                    }
                }
            }
        }
        Scenario::ApiIsolated => {
            // Fenced or not, the isolated node's machine serves its clients until its VIPs
            // have moved (make before break).
            c.no_loss("3 (no loss when a node loses the API)");
        }
        Scenario::Outage | Scenario::Join | Scenario::Eligibility => {}
        // The adversary's scenarios are judged by the invariants above.
        _ => {}
    }

    // 6: no ownership change during an API outage (crashed node's VIPs excepted).
    if let (Some(down), Some(up)) = (
        plan.when(|a| *a == Action::ApiDown),
        plan.when(|a| *a == Action::ApiUp),
    ) {
        let crash = plan.when(|a| matches!(a, Action::Crash(_)));
        let exempt = crash
            .map(|t| (t, c.victims_vips(victim, t, false)))
            .unwrap_or_default();
        let bad = w.log.iter().find(|r| {
            let What::Out { out, changed } = &r.what else {
                return false;
            };
            // A re-announcement by the node that already answers is not a change of owner.
            let change = matches!(out, Output::Install { .. } | Output::Remove { .. }) && *changed;
            let v = vip_of(out).and_then(|a| plan.vips.iter().position(|x| x.addr == a));
            let exempted =
                crash.is_some_and(|t| r.t >= t) && v.is_some_and(|v| exempt.1.contains(&v));
            change && r.t >= down && r.t < up + Duration::from_secs(1) && !exempted
        });
        if let Some(r) = bad {
            let (t, v) = (r.t, r.node);
            let What::Out { out, .. } = &r.what else {
                unreachable!()
            };
            let vip = vip_of(out).and_then(|a| plan.vips.iter().position(|x| x.addr == a));
            let who = v.map_or("?", |n| w.nodes[n].name.as_str());
            let when = if t < up {
                "during the outage"
            } else {
                "in the first second after it ended"
            };
            c.fail(
                "6 (no flapping during an API outage)",
                vip,
                t,
                format!("{who} did {out:?} {when}"),
            );
        }
    }

    // 7: Lease writes per node, over steady stretches of at least 8 s.
    for n in 0..w.nodes.len() {
        // Windows without the API server for this node (retries there are not steady state).
        let down = |a: &Action| *a == Action::ApiDown || *a == Action::NodeApi(n, false);
        let up = |a: &Action| *a == Action::ApiUp || *a == Action::NodeApi(n, true);
        let outages: Vec<(VTime, VTime)> = plan
            .steps
            .iter()
            .filter(|(_, a)| down(a))
            .map(|(d, _)| {
                (
                    *d,
                    plan.steps
                        .iter()
                        .find(|(t, a)| t >= d && up(a))
                        .map_or(end, |(t, _)| *t),
                )
            })
            .collect();
        let mut runs: Vec<(VTime, VTime)> = Vec::new();
        for r in w.log.iter().filter(|r| r.node == Some(n)) {
            match r.what {
                // The first second after a start is no steady state (first write,
                // the watches' first list, maybe a 409 on a stale resourceVersion).
                What::Started { .. } => runs.push((r.t + Duration::from_secs(1), end)),
                What::Stopped => {
                    if let Some(last) = runs.last_mut() {
                        last.1 = r.t;
                    }
                }
                _ => {}
            }
        }
        let mut pieces = runs;
        for (d, u) in outages {
            let settle = u + Duration::from_secs(1);
            pieces = pieces
                .into_iter()
                .flat_map(|(a, b)| [(a, b.min(d)), (a.max(settle), b)])
                .collect();
        }
        for (a, b) in pieces
            .into_iter()
            .filter(|(a, b)| *b > *a && *b - *a >= Duration::from_secs(8))
        {
            let outputs = |is: fn(&Output) -> bool| {
                w.log
                    .iter()
                    .filter(|r| r.node == Some(n) && r.t >= a && r.t < b)
                    .filter(|r| matches!(&r.what, What::Out { out, .. } if is(out)))
                    .count()
            };
            let writes = outputs(|o| matches!(o, Output::WriteLease { .. }));
            // Stepping back and in again publish themselves at once: one write per event,
            // O(changes), not part of the steady-state renewal rate.
            let events = outputs(|o| {
                matches!(
                    o,
                    Output::NodeEvent {
                        kind: NodeEventKind::Isolated | NodeEventKind::Rejoined,
                        ..
                    }
                )
            });
            let writes = writes.saturating_sub(events);
            let rate = writes as f64 / (b - a).as_secs_f64();
            rep.lease_writes_per_s = rep.lease_writes_per_s.max(rate);
            if rate > 0.5 {
                let msg = format!(
                    "{} wrote its Lease {writes} times in {:.1} s",
                    w.nodes[n].name,
                    (b - a).as_secs_f64()
                );
                c.fail("7 (API cost)", None, b, msg);
            }
        }
    }

    rep.violations = c.out;
    rep
}

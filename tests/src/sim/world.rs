//! The simulated cluster: nodes (an [`Agent`] plus a simulated shell), the API server, the
//! network, the data planes and the clients, driven by one event queue in virtual time.
//!
//! Why so much world: the election is only correct if it is correct *as the clients see it*.
//! So the simulator keeps ground truth the agents cannot see (which nodes' data planes answer a
//! VIP, where each client's neighbour cache points, whether traffic flows) and samples it every
//! 10 ms for the checker ([`super::check`]). Everything random comes from one ChaCha8 stream
//! seeded from the run's seed, and ties in time are broken by push order, so a seed replays
//! exactly.

use std::{
    collections::{BTreeMap, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
    net::IpAddr,
    time::Duration,
};

use announcer::election::{
    Beat, IfaceName, Input, Instant, NodeName, Output, stats::ElectionStats as Stats,
};
use announcer_ebpf::wire::MacAddr;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{
    agent::Agent,
    queue::{Queue, VTime},
    scenario::{Action, NodeMask, Plan, all_of, bit, in_subnet_b},
};

/// The interface every simulated node announces on.
pub const IFACE: &str = "eth0";
/// The second link's interface, with [`Plan::two_nics`].
pub const IFACE_B: &str = "eth1";
/// Heartbeat verifiers reject a beat whose sender's clock is further than this from theirs.
pub const SKEW_WINDOW_MS: i64 = 5000;
/// How often ground truth is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(10);
/// How many clients watch the VIPs.
pub const CLIENTS: usize = 2;
/// A client re-resolves a VIP whose cached node stopped answering after this long (Linux: the
/// neighbour entry goes STALE, DELAY, then PROBE fails).
pub const CLIENT_STALE_AFTER: Duration = Duration::from_secs(5);

mod shell;
mod truth;

fn us(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_micros(rng.random_range(lo..hi))
}

/// What happened, for the checker and for traces (heartbeats are not recorded).
#[derive(Clone, Debug)]
pub enum What {
    /// A node's agent asked for this. `changed`: an `Install` of an entry that was absent or
    /// expired, or a `Remove` of a live one (a refresh is not a change).
    Out {
        /// The output.
        out: Output,
        /// Whether it changed the data plane.
        changed: bool,
    },
    /// A planned action took effect.
    Act(Action),
    /// A node's agent started (`run` identifies this run of it).
    Started {
        /// Agent generation on that node.
        run: u64,
    },
    /// A node's agent stopped (killed, crashed or exited).
    Stopped,
    /// The simulator itself found the agent misbehaving (unknown VIP, busy loop…).
    Bad(String),
}

/// One line of the run's log.
#[derive(Clone, Debug)]
pub struct Record {
    /// Virtual time.
    pub t: VTime,
    /// The node concerned, if any.
    pub node: Option<usize>,
    /// What.
    pub what: What,
}

/// Ground truth for one VIP at one sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VipState {
    /// Nodes whose data plane answers it (up, link up, unexpired entry).
    pub answerers: NodeMask,
    /// Nodes the clients' caches point to.
    pub cached: NodeMask,
    /// Every client's traffic reaches a node (its cached node is up with its link up).
    pub flows: bool,
    /// Some client's cached node is down or its link is: traffic it sent before now goes
    /// nowhere (as opposed to a client that has not resolved the VIP yet).
    pub cut_off: bool,
}

/// Ground truth at one instant.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Virtual time.
    pub t: VTime,
    /// Nodes counted as live: agent running past its warm-up and not leaving, machine and
    /// link up.
    pub live: NodeMask,
    /// Index into [`World::eligibility`]: the eligible sets in force.
    pub epoch: usize,
    /// During a configuration roll (nodes rank by different eligible sets), per VIP: the
    /// running nodes whose own configuration makes them eligible.
    pub mixed: Option<Vec<NodeMask>>,
    /// Per VIP, same order as the plan.
    pub vips: Vec<VipState>,
}

enum Ev {
    Timer {
        node: usize,
        run: u64,
        at: VTime,
    },
    Deliver {
        node: usize,
        run: Option<u64>,
        input: Input,
    },
    ApiWrite {
        node: usize,
        run: u64,
        rv: Option<String>,
        body: LeaseBody,
    },
    Garp {
        client: usize,
        vip: usize,
        node: usize,
    },
    Sample,
    Act(Action),
}

struct StoredLease {
    rv: u64,
    renew: String,
    body: LeaseBody,
}

/// What a Lease write says besides its renewal.
#[derive(Clone, Copy, Debug, Default)]
struct LeaseBody {
    released: bool,
    standby: bool,
    connected: Option<u32>,
}

struct Client {
    cache: Vec<Option<usize>>,
    stale_since: Vec<Option<VTime>>,
    next_resolve: Vec<VTime>,
}

/// One simulated machine.
pub struct SimNode<A> {
    /// Its name.
    pub name: NodeName,
    /// Its MAC (heartbeats, probes and announcements).
    pub mac: MacAddr,
    /// The MAC of its second link (with [`Plan::two_nics`]).
    pub mac_b: MacAddr,
    /// Per data-plane entry: installed on the second link.
    pub dp_b: BTreeMap<usize, bool>,
    /// Index into [`World::eligibility`] its agent ranks by.
    pub view: usize,
    /// Its agent's config fingerprint.
    pub config_hash: u64,
    /// Its next start follows a wall-clock step back.
    pub clock_stepped_back: bool,
    /// The running agent, if any.
    pub agent: Option<A>,
    /// Bumped whenever an agent starts or stops: answers meant for an earlier agent are dropped.
    pub run: u64,
    /// The running (or last) agent's incarnation.
    pub incarnation: u64,
    /// The machine (kernel, data plane) is up.
    pub up: bool,
    /// The announcing link is up.
    pub link: bool,
    /// SIGTERM received: not a candidate any more; the machine goes down on exit.
    pub leaving: bool,
    /// Data-plane entries: VIP index → expiry.
    pub dp: BTreeMap<usize, VTime>,
    /// Counters of agents that already stopped.
    pub retired: Stats,
    /// When the running agent started.
    pub started_at: VTime,
    timer_at: Option<VTime>,
}

/// The simulated cluster. See the module docs.
pub struct World<A> {
    /// The plan being run.
    pub plan: Plan,
    /// Current virtual time.
    pub now: VTime,
    origin: Instant,
    queue: Queue<Ev>,
    rng: ChaCha8Rng,
    /// The machines.
    pub nodes: Vec<SimNode<A>>,
    /// The eligible sets over time; samples point into it.
    pub eligibility: Vec<Vec<NodeMask>>,
    vip_index: BTreeMap<IpAddr, usize>,
    leases: BTreeMap<usize, StoredLease>,
    next_rv: u64,
    /// Per node: whether it can reach the API server.
    api: Vec<bool>,
    groups: Vec<u8>,
    clients: Vec<Client>,
    /// Everything but heartbeats.
    pub log: Vec<Record>,
    /// Ground truth every [`SAMPLE_EVERY`].
    pub samples: Vec<Sample>,
    /// Full trace lines (inputs and outputs), when enabled.
    pub trace: Option<Vec<String>>,
    /// Per VIP: the nodes that can announce it (all, unless a node lacks its link).
    pub capable: Vec<NodeMask>,
    /// Per node: the sample at which its agent kept the most peers beyond the Leases
    /// `(time, peers, leases)`, if it ever kept more.
    pub mem_strict: Vec<Option<(VTime, usize, usize)>>,
    /// Per node: the first sample at which its agent kept more peers than there are Leases
    /// or real nodes, whichever is more.
    pub mem_loose: Vec<Option<(VTime, usize, usize)>>,
    beat_cut: Vec<NodeMask>,
    link_cut: Vec<NodeMask>,
    clock_ms: Vec<i64>,
    key: Vec<u8>,
    probe_loss: u16,
    lag: Vec<VTime>,
    /// When the last watch delivery to each node arrives: a watch is one ordered stream, so
    /// nothing it brings may overtake what it brought before.
    watch_at: Vec<VTime>,
    flood_pool: Vec<NodeName>,
    hasher: DefaultHasher,
    same_instant: u64,
}

impl<A: Agent> World<A> {
    /// A world for `plan`; `trace` keeps a line per input and output for replays.
    pub fn new(plan: Plan, trace: bool) -> World<A> {
        let n = plan.nodes.len();
        let m = plan.vips.len();
        let nodes = plan
            .nodes
            .iter()
            .enumerate()
            .map(|(i, name)| SimNode {
                name: name.clone(),
                mac: MacAddr([0x02, 0, 0, 0, 0, i as u8 + 1]),
                mac_b: MacAddr([0x02, 0, 0, 0, 0x0b, i as u8 + 1]),
                dp_b: BTreeMap::new(),
                view: 0,
                config_hash: 0,
                clock_stepped_back: false,
                agent: None,
                run: 0,
                incarnation: 1000 * (i as u64 + 1),
                up: false,
                link: false,
                leaving: false,
                dp: BTreeMap::new(),
                retired: Stats::default(),
                started_at: Duration::ZERO,
                timer_at: None,
            })
            .collect();
        let mut queue = Queue::new();
        for (t, a) in &plan.steps {
            queue.push(*t, Ev::Act(a.clone()));
        }
        queue.push(Duration::ZERO, Ev::Sample);
        let client = Client {
            cache: vec![None; m],
            stale_since: vec![None; m],
            next_resolve: vec![Duration::ZERO; m],
        };
        let capable = plan
            .vips
            .iter()
            .map(|v| match plan.one_nic {
                Some(o) if plan.two_nics && in_subnet_b(v.addr) => all_of(n) & !bit(o),
                _ => all_of(n),
            })
            .collect();
        World {
            capable,
            mem_strict: vec![None; n],
            mem_loose: vec![None; n],
            beat_cut: vec![0; n],
            link_cut: vec![0; n],
            clock_ms: vec![0; n],
            key: vec![0; n],
            probe_loss: plan.probe_loss,
            lag: vec![Duration::ZERO; n],
            watch_at: vec![Duration::ZERO; n],
            flood_pool: (0..32)
                .map(|i| NodeName::from(format!("flood-{i}")))
                .collect(),
            eligibility: vec![plan.vips.iter().map(|v| v.eligible).collect()],
            vip_index: plan
                .vips
                .iter()
                .enumerate()
                .map(|(i, v)| (v.addr, i))
                .collect(),
            rng: ChaCha8Rng::seed_from_u64(plan.seed ^ 0x005e_ed0f_5111),
            plan,
            now: Duration::ZERO,
            origin: Instant::now(),
            queue,
            nodes,
            leases: BTreeMap::new(),
            next_rv: 1,
            api: vec![true; n],
            groups: vec![0; n],
            clients: (0..CLIENTS)
                .map(|_| Client {
                    cache: client.cache.clone(),
                    stale_since: client.stale_since.clone(),
                    next_resolve: client.next_resolve.clone(),
                })
                .collect(),
            log: Vec::new(),
            samples: Vec::new(),
            trace: trace.then(Vec::new),
            hasher: DefaultHasher::new(),
            same_instant: 0,
        }
    }

    /// Run the plan to its end.
    pub fn run(&mut self) {
        self.run_until(self.plan.end);
    }

    /// Run every event due at or before `t` (at most to the plan's end), to inspect the agents
    /// midway.
    pub fn run_until(&mut self, t: VTime) {
        let t = t.min(self.plan.end);
        while let Some(at) = self.queue.peek_time() {
            if at > t {
                break;
            }
            let (at, ev) = self.queue.pop().expect("peeked");
            if at == self.now {
                self.same_instant += 1;
                if self.same_instant > 200_000 {
                    self.bad(
                        None,
                        format!(
                            "livelock: over 200000 events at {at:?} (a timer that never moves on?)"
                        ),
                    );
                    return;
                }
            } else {
                self.same_instant = 0;
            }
            self.now = at;
            self.dispatch(ev);
        }
        self.now = t;
    }

    /// A hash of everything that happened (outputs, inputs, times): equal for equal runs.
    pub fn trace_hash(&self) -> u64 {
        self.hasher.finish()
    }

    /// Cumulative counters of every agent that ran on `node`.
    pub fn stats(&self, node: usize) -> Stats {
        let n = &self.nodes[node];
        let mut s = n.retired.clone();
        if let Some(a) = &n.agent {
            add_stats(&mut s, &a.stats());
        }
        s
    }

    fn instant(&self, t: VTime) -> Instant {
        self.origin + t
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Timer { node, run, at } => {
                let n = &mut self.nodes[node];
                if n.run == run && n.timer_at == Some(at) && n.agent.is_some() {
                    n.timer_at = None;
                    self.feed(node, Input::Tick);
                }
            }
            Ev::Deliver { node, run, input } => {
                if run.is_none_or(|g| g == self.nodes[node].run) && self.nodes[node].agent.is_some()
                {
                    self.feed(node, input);
                }
            }
            Ev::ApiWrite {
                node,
                run,
                rv,
                body,
            } => self.api_write(node, run, rv, body),
            Ev::Garp { client, vip, node } => {
                let c = &mut self.clients[client];
                c.cache[vip] = Some(node);
                c.stale_since[vip] = None;
            }
            Ev::Sample => {
                self.sample();
                self.queue.push(self.now + SAMPLE_EVERY, Ev::Sample);
            }
            Ev::Act(a) => self.act(a),
        }
    }

    fn record(&mut self, node: Option<usize>, what: What) {
        if let Some(tr) = &mut self.trace {
            let who = node.map_or("world".to_string(), |i| self.nodes[i].name.to_string());
            tr.push(format!(
                "{:>10.4}s {who:>8} {what:?}",
                self.now.as_secs_f64()
            ));
        }
        self.log.push(Record {
            t: self.now,
            node,
            what,
        });
    }

    fn bad(&mut self, node: Option<usize>, msg: String) {
        self.record(node, What::Bad(msg));
    }

    /// Give `input` to the node's agent, then carry out what it asks.
    fn feed(&mut self, node: usize, input: Input) {
        let now = self.instant(self.now);
        self.now.hash(&mut self.hasher);
        node.hash(&mut self.hasher);
        hash_input(&input, &mut self.hasher);
        if let Some(tr) = &mut self.trace
            && !matches!(input, Input::Heartbeat(_) | Input::Tick)
        {
            tr.push(format!(
                "{:>10.4}s {:>8} <- {input:?}",
                self.now.as_secs_f64(),
                self.nodes[node].name.as_str()
            ));
        }
        let Some(agent) = self.nodes[node].agent.as_mut() else {
            return;
        };
        agent.handle(now, input);
        let mut outs = Vec::new();
        while let Some(o) = agent.poll_output() {
            outs.push(o);
        }
        let timeout = agent.poll_timeout();
        for o in outs {
            self.output(node, o);
        }
        let n = &mut self.nodes[node];
        if n.agent.is_none() {
            return;
        }
        let at = timeout.map(|t| t.saturating_duration_since(self.origin).max(self.now));
        if let Some(at) = at
            && Some(at) != n.timer_at
        {
            n.timer_at = Some(at);
            let run = n.run;
            self.queue.push(at, Ev::Timer { node, run, at });
        }
    }

    fn deliver(&mut self, at: VTime, node: usize, run: Option<u64>, input: Input) {
        // A lagging watch: everything the watches bring arrives late, and in order (two Lease
        // writes 3 ms apart must not reach a watcher reversed, as kube-apiserver's watches
        // never do).
        let watched = matches!(
            input,
            Input::LeaseSeen(_) | Input::LeaseGone(_) | Input::Vips(_) | Input::WatchHealth(_)
        );
        let at = if watched {
            let at = (at + self.lag[node]).max(self.watch_at[node]);
            self.watch_at[node] = at;
            at
        } else {
            at
        };
        self.queue.push(at, Ev::Deliver { node, run, input });
    }

    fn start_agent(&mut self, node: usize) {
        self.stop_agent(node);
        let n = &mut self.nodes[node];
        if !n.up {
            n.up = true;
            n.link = true;
            n.dp.clear();
            n.dp_b.clear();
        }
        n.run += 1;
        if std::mem::take(&mut n.clock_stepped_back) && self.plan.wall_clock_incarnation {
            // The old source: the wall clock at start, now earlier than the last start.
            n.incarnation = n.incarnation.saturating_sub(500).max(1);
        } else {
            // A persisted counter (or a clock that only moves on).
            n.incarnation += 1;
        }
        n.started_at = self.now;
        n.leaving = false;
        let mut config = self.plan.timing.clone();
        config.node = n.name.clone();
        config.mac = n.mac;
        config.config_hash = n.config_hash;
        n.agent = Some(A::start(config, self.origin + self.now, n.incarnation));
        let run = n.run;
        let existing: Vec<(IpAddr, IfaceName)> =
            n.dp.iter()
                .filter(|(_, exp)| **exp > self.now)
                .map(|(v, _)| {
                    let b = n.dp_b.get(v).copied().unwrap_or(false);
                    (
                        self.plan.vips[*v].addr,
                        IfaceName::from(if b { IFACE_B } else { IFACE }),
                    )
                })
                .collect();
        self.record(Some(node), What::Started { run });
        self.feed(node, Input::Existing(existing));
        let at = self.now + us(&mut self.rng, 1000, 10_000);
        let specs = self.specs_for(node);
        self.deliver(at, node, Some(run), Input::Vips(specs));
        let at = at + us(&mut self.rng, 1000, 10_000);
        if self.api[node] {
            self.relist(node, run, at);
        } else {
            self.deliver(at, node, Some(run), Input::WatchHealth(false));
        }
    }

    fn stop_agent(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        if let Some(a) = n.agent.take() {
            add_stats(&mut n.retired, &a.stats());
            n.run += 1;
            n.timer_at = None;
            self.record(Some(node), What::Stopped);
        }
    }

    fn machine_down(&mut self, node: usize) {
        self.stop_agent(node);
        let n = &mut self.nodes[node];
        n.up = false;
        n.link = false;
        n.dp.clear();
        n.dp_b.clear();
    }

    /// The node loses or regains the API server: its watches notice within a second; on
    /// reconnecting they list everything again.
    fn set_api(&mut self, n: usize, up: bool) {
        if self.api[n] == up {
            return;
        }
        self.api[n] = up;
        let run = self.nodes[n].run;
        if up {
            let at = self.now + us(&mut self.rng, 10_000, 500_000);
            self.relist(n, run, at);
        } else {
            let at = self.now + us(&mut self.rng, 1000, 1_000_000);
            self.deliver(at, n, Some(run), Input::WatchHealth(false));
        }
    }

    fn act(&mut self, a: Action) {
        self.record(None, What::Act(a.clone()));
        format!("{a:?}").hash(&mut self.hasher);
        match a {
            Action::Start(n) => self.start_agent(n),
            Action::Crash(n) => self.machine_down(n),
            Action::Kill(n) => self.stop_agent(n),
            Action::Term(n) => {
                self.nodes[n].leaving = true;
                let run = self.nodes[n].run;
                self.deliver(self.now, n, Some(run), Input::Shutdown);
            }
            Action::LinkDown(n) | Action::LinkUp(n) => {
                let up = matches!(a, Action::LinkUp(_));
                self.nodes[n].link = up;
                let run = self.nodes[n].run;
                self.deliver(
                    self.now,
                    n,
                    Some(run),
                    Input::Link {
                        iface: IfaceName::from(IFACE),
                        up,
                    },
                );
            }
            Action::ApiDown | Action::ApiUp => {
                for n in 0..self.nodes.len() {
                    self.set_api(n, a == Action::ApiUp);
                }
            }
            Action::NodeApi(n, up) => self.set_api(n, up),
            Action::Partition(g) => self.groups = g,
            Action::Heal => self.groups.iter_mut().for_each(|g| *g = 0),
            Action::Eligibility(changes) => {
                let mut e = self.eligibility.last().expect("initial").clone();
                for (v, mask) in changes {
                    e[v] = mask;
                }
                self.eligibility.push(e);
                for n in 0..self.nodes.len() {
                    self.nodes[n].view = self.eligibility.len() - 1;
                    let at = self.now + us(&mut self.rng, 1000, 100_000);
                    let (run, specs) = (self.nodes[n].run, self.specs_for(n));
                    self.deliver(at, n, Some(run), Input::Vips(specs));
                }
            }
            Action::NewConfig(changes) => {
                let mut e = self.eligibility.last().expect("initial").clone();
                for (v, mask) in changes {
                    e[v] = mask;
                }
                self.eligibility.push(e);
            }
            Action::Reconfigure(n) => {
                let node = &mut self.nodes[n];
                node.view = self.eligibility.len() - 1;
                node.config_hash = 0xc0ff_ee00 + node.view as u64;
                if node.agent.is_some() {
                    self.start_agent(n);
                }
            }
            Action::BeatCut(from, mask) => self.beat_cut[from] |= mask,
            Action::BeatHeal => self.beat_cut.iter_mut().for_each(|m| *m = 0),
            Action::LinkCut(from, to) => self.link_cut[from] |= bit(to),
            Action::LinkHeal => self.link_cut.iter_mut().for_each(|m| *m = 0),
            Action::Clock(n, ms) => self.clock_ms[n] = ms,
            Action::Key(n, k) => self.key[n] = k,
            Action::ProbeLoss(p) => self.probe_loss = p,
            Action::WatchLag(n, d) => self.lag[n] = d,
            Action::RestartAfterClockStep(n) => {
                self.nodes[n].clock_stepped_back = true;
                self.start_agent(n);
            }
            Action::Forge(count, over) => {
                for _ in 0..count {
                    let at = self.now + us(&mut self.rng, 0, over.as_micros().max(1) as u64);
                    let name = NodeName::from(format!("forged-{:08x}", self.rng.random::<u32>()));
                    let beat = self.forged_beat(name);
                    self.spray(at, beat);
                }
            }
            Action::Flood(count) => {
                for node in 0..self.nodes.len() {
                    if self.nodes[node].agent.is_none() {
                        continue;
                    }
                    for _ in 0..count {
                        let at = self.now + us(&mut self.rng, 0, 20_000);
                        let input = if self.rng.random_bool(0.5) {
                            let i = self.rng.random_range(0..self.flood_pool.len());
                            let mut b = self.forged_beat(self.flood_pool[i].clone());
                            b.hears = vec![self.nodes[node].name.clone()];
                            Input::Heartbeat(b)
                        } else {
                            let vip = if self.rng.random_bool(0.5) {
                                let i = self.rng.random_range(0..self.plan.vips.len());
                                self.plan.vips[i].addr
                            } else {
                                IpAddr::V4([192, 0, 2, self.rng.random()].into())
                            };
                            Input::ProbeAnswered {
                                vip,
                                mac: self.stranger_mac(),
                            }
                        };
                        self.deliver(at, node, None, input);
                    }
                }
            }
        }
    }

    /// A MAC no simulated node has.
    fn stranger_mac(&mut self) -> MacAddr {
        let mut m: [u8; 6] = self.rng.random();
        m[0] = 0x0a;
        MacAddr(m)
    }

    /// A heartbeat under `name`, as a key holder would seal it.
    fn forged_beat(&mut self, name: NodeName) -> Beat {
        Beat {
            node: name,
            incarnation: self.rng.random(),
            mac: self.stranger_mac(),
            leaving: self.rng.random_bool(0.2),
            api_ok: true,
            ready: true,
            acks: Vec::new(),
            hears: Vec::new(),
            config: self.rng.random(),
            view: self.rng.random(),
        }
    }

    /// Deliver a forged beat to every running node, each sealed for its recipient (claiming
    /// to hear it).
    fn spray(&mut self, at: VTime, beat: Beat) {
        for node in 0..self.nodes.len() {
            if self.nodes[node].agent.is_some() {
                let mut b = beat.clone();
                b.hears = vec![self.nodes[node].name.clone()];
                self.deliver(at, node, None, Input::Heartbeat(b));
            }
        }
    }

    /// Whether heartbeats from `a` reach `b`'s core: its verifier accepts them (same key,
    /// clocks within the skew window) and no heartbeat-only loss applies.
    pub(super) fn beat_accepted(&self, a: usize, b: usize) -> bool {
        self.beat_cut[a] & bit(b) == 0
            && self.link_cut[a] & bit(b) == 0
            && (self.clock_ms[a] - self.clock_ms[b]).abs() <= SKEW_WINDOW_MS
            && self.key[a] == self.key[b]
    }

    /// Whether frames from `a` reach `b` (probes, probe answers).
    pub(super) fn frames_pass(&self, a: usize, b: usize) -> bool {
        self.reachable(a, b) && self.link_cut[a] & bit(b) == 0
    }
}

fn add_stats(to: &mut Stats, s: &Stats) {
    to.takeovers += s.takeovers;
    to.releases += s.releases;
    to.probes += s.probes;
    to.probes_answered += s.probes_answered;
    to.overlaps += s.overlaps;
    to.lease_writes += s.lease_writes;
    to.lease_conflicts += s.lease_conflicts;
    to.lease_failures += s.lease_failures;
}

fn hash_beat(b: &announcer::election::Beat, h: &mut DefaultHasher) {
    b.node.as_str().hash(h);
    (b.incarnation, b.mac.0, b.leaving, b.api_ok, b.ready).hash(h);
    for a in &b.acks {
        a.as_str().hash(h);
    }
}

fn hash_input(input: &Input, h: &mut DefaultHasher) {
    match input {
        Input::Heartbeat(b) => hash_beat(b, h),
        Input::Tick => 0u8.hash(h),
        other => format!("{other:?}").hash(h),
    }
}

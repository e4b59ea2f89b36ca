//! `cargo xtask bench core`: what the sans-IO election core costs one agent as the cluster
//! grows, measured on the real [`Core`] with synthetic peers in virtual time.
//!
//! For each cell (N nodes, V VIPs) one core (node 0) is brought up the way the shell brings it
//! up (watches healthy, its Lease written, every peer's Lease seen, the VIP set known, no
//! warm-up), every peer beats once, and then, in virtual time:
//!
//! - **heartbeat**: every peer beats every heartbeat interval (75 ms), evenly spread, as a
//!   healthy cluster does; each beat is what the shell does per datagram
//!   (`handle(Heartbeat)`, drain the outputs, `poll_timeout`). Timers that fall due between
//!   two beats are fed as `Tick`s and timed apart (**tick**).
//! - **lease**: a peer's Lease renewal (`LeaseSeen` with a new `resourceVersion`); every peer
//!   renews every 3 s, so an agent sees N/3 of them a second.
//! - **VIP-set change**: `handle(Vips)` with one VIP of V gone, its specs built afresh the way
//!   the agent's plan builds them (one new eligible set shared by every VIP): what a Service
//!   or EndpointSlice event costs the core.
//! - **VIP change**: `handle(VipsChanged)` with one VIP's eligible set changed, as the agent
//!   gives the core a watch event's change (the planner's delta).
//! - **node change**: `handle(Vips)` with one node gone from every VIP's eligible set (a Node
//!   turning NotReady), then back.
//! - **plan**: the placement (`eligibility::plan_placed`) of V Services (one VIP each; every
//!   tenth under `externalTrafficPolicy: Local`), V EndpointSlices (3 ready endpoints each)
//!   and N Nodes, as the agent computes it from its watch stores on every relevant event; and
//!   the heap those objects take as full API objects (what unstripped watch caches hold).
//! - **replan**: the same placement kept by a `placement::planner::Planner` fed every object,
//!   then one event and `replan`: a Service rewritten, an EndpointSlice whose endpoint moved
//!   to another node, a Node turning NotReady (the node set every `Cluster` VIP shares is
//!   swapped in place; `Local` VIPs are placed again).
//!
//! Bytes allocated and the live heap come from a counting global allocator. From the figures
//! the bench derives one agent's share of a core spent in the core alone (the heartbeat
//! sockets, sealing and the watches come on top): beats × (N − 1) × 13.3/s, plus renewals ×
//! N/3/s, plus ticks. The rule is a verdict: the cost of one heartbeat at the largest N
//! may be at most 2× the cost at 1,000 (per V).
//!
//! Needs no root and no network. A table on stdout; with `--json`, one JSON document as the
//! last stdout line.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    net::{IpAddr, Ipv4Addr},
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use announcer::{
    election::{
        Beat, Core, ElectionConfig, Input, LeaseView, LeaseWriteResult, NodeName, NodeSet, Output,
        ServiceRef, VipSpec, defaults,
    },
    placement::{
        eligibility::{self, SERVICE_NAME_LABEL, Selection},
        planner::Planner,
    },
    wire::MacAddr,
};
use announcer_tests::bench::verdict::{Verdict, any_failed, failed_names};
use anyhow::{Result, bail, ensure};
use clap::Parser;
use k8s_openapi::{
    api::{
        core::v1::{
            LoadBalancerIngress, LoadBalancerStatus, Node, NodeCondition, NodeStatus, Service,
            ServiceSpec, ServiceStatus,
        },
        discovery::v1::{Endpoint, EndpointConditions, EndpointSlice},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};

/// Counts what the process allocates: bytes live now, their high-water mark, and bytes
/// allocated in all. The figures are process-wide; the bench runs on one thread.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);

fn counted(add: usize) {
    let live = LIVE.fetch_add(add, Ordering::Relaxed) + add;
    PEAK.fetch_max(live, Ordering::Relaxed);
    TOTAL.fetch_add(add as u64, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; only counters move.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        counted(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[derive(Parser)]
#[command(about = "Benchmark the election core's cost per agent against cluster size")]
struct Args {
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Cluster sizes (nodes, this one included).
    #[arg(long, value_delimiter = ',', default_values_t = [50, 250, 1_000, 5_000])]
    nodes: Vec<usize>,
    /// VIP counts.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000])]
    vips: Vec<usize>,
    /// Heartbeat rounds timed per cell (one round: every peer beats once). Large cells stop
    /// after `--budget` seconds, at least one round done.
    #[arg(long, default_value_t = 4)]
    rounds: u32,
    /// Wall-clock seconds a cell's heartbeat phase may take before it stops early.
    #[arg(long, default_value_t = 20.0)]
    budget: f64,
    /// VIP-set changes timed per cell (the median is reported).
    #[arg(long, default_value_t = 3)]
    changes: u32,
}

fn progress(line: &str) {
    eprintln!("[bench-core] {line}");
}

/// A node name of a typical length (a cloud provider's, 26 to 28 characters).
fn name(i: usize) -> NodeName {
    format!(
        "ip-10-{}-{}-{}.ec2.internal",
        i / 62_500,
        i / 250 % 250,
        i % 250 + 1
    )
    .into()
}

fn vip(i: usize) -> IpAddr {
    let [_, b, c, d] = (i as u32).to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(10, 128 | (b & 0x3f), c, d))
}

fn spec(i: usize, eligible: &NodeSet) -> VipSpec {
    VipSpec {
        vip: vip(i),
        service: ServiceRef {
            namespace: "bench".into(),
            name: format!("svc-{i}"),
        },
        eligible: eligible.clone(),
        local: Some("eth0".into()),
        interfaces: vec![],
        preferred: NodeSet::default(),
    }
}

fn mac(i: usize) -> MacAddr {
    let [a, b, c, d] = (i as u32).to_be_bytes();
    MacAddr([2, 0, a, b, c, d])
}

/// One core, its virtual clock, and what a shell would answer at once (Lease writes succeed).
struct Host {
    core: Core,
    origin: Instant,
    now: Duration,
    rv: u64,
    outputs: u64,
}

impl Host {
    fn handle(&mut self, input: Input) {
        self.core.handle(self.origin + self.now, input);
        self.drain();
    }

    /// Drains the outputs; a Lease write is answered as written, as the API server would.
    fn drain(&mut self) {
        while let Some(out) = self.core.poll_output() {
            self.outputs += 1;
            if let Output::WriteLease { .. } = out {
                self.rv += 1;
                let written = LeaseWriteResult::Written {
                    resource_version: self.rv.to_string(),
                };
                self.core
                    .handle(self.origin + self.now, Input::LeaseWrite(written));
            }
            black_box(out);
        }
    }

    /// The next timer, as virtual time since the origin.
    fn next_timer(&mut self) -> Option<Duration> {
        self.core
            .poll_timeout()
            .map(|t| t.saturating_duration_since(self.origin))
    }
}

fn beat(from: &NodeName, to: &NodeName, incarnation: u64) -> Beat {
    Beat {
        node: from.clone(),
        incarnation,
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        leaving: false,
        api_ok: true,
        ready: true,
        acks: vec![],
        hears: vec![to.clone()],
        config: 0,
        view: 0,
    }
}

fn lease(node: &NodeName, rv: u64, peers: usize) -> LeaseView {
    LeaseView {
        node: node.clone(),
        resource_version: rv.to_string(),
        renew_time: Some(format!("renewed-{rv}")),
        duration: defaults::LEASE_DURATION,
        released: false,
        standby: false,
        connected: Some(peers as u32),
        links: None,
    }
}

/// One cell's figures.
#[derive(Clone, Debug, serde::Serialize)]
struct Cell {
    nodes: usize,
    vips: usize,
    setup_s: f64,
    heartbeats: u64,
    heartbeat_ns: f64,
    heartbeat_alloc_bytes: f64,
    tick_alloc_bytes: f64,
    ticks: u64,
    tick_ns: f64,
    lease_ns: f64,
    vip_change_ms: f64,
    vip_delta_us: f64,
    node_change_ms: f64,
    plan_ms: f64,
    replan_service_us: f64,
    replan_slice_us: f64,
    replan_node_ms: f64,
    objects_mib: f64,
    core_live_mib: f64,
    peak_mib: f64,
    owned: usize,
    /// The core's own work per agent at this size, in % of one core (derived).
    core_cpu_pct: f64,
}

/// How long the bench lets the cluster run before it measures: past the warm-up, the first
/// Lease writes and the takeovers of this node's share.
const SETTLE: Duration = Duration::from_millis(500);

/// What [`beat_round`] fed the core.
enum Fed {
    Beat,
    Tick,
}

/// One heartbeat interval of a healthy cluster: every peer beats once, `spacing` apart, and
/// the timers that fall due between two beats are fed as ticks first (as the shell does).
/// `seen` gets each input's wall time and bytes allocated.
fn beat_round(
    host: &mut Host,
    names: &[NodeName],
    spacing: Duration,
    seen: &mut impl FnMut(Fed, (Duration, u64)),
) {
    let me = &names[0];
    for peer in &names[1..] {
        host.now += spacing;
        while host.next_timer().is_some_and(|t| t <= host.now) {
            let (t, a) = (Instant::now(), TOTAL.load(Ordering::Relaxed));
            host.handle(Input::Tick);
            seen(Fed::Tick, (t.elapsed(), TOTAL.load(Ordering::Relaxed) - a));
        }
        let b = beat(peer, me, 1);
        let (t, a) = (Instant::now(), TOTAL.load(Ordering::Relaxed));
        host.handle(Input::Heartbeat(b));
        black_box(host.next_timer());
        seen(Fed::Beat, (t.elapsed(), TOTAL.load(Ordering::Relaxed) - a));
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A cluster's API objects as an agent's watch stores hold them.
struct Objects {
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    nodes: Vec<Node>,
}

impl Objects {
    fn new(names: &[NodeName], v: usize) -> Self {
        let nodes = names
            .iter()
            .map(|n| Node {
                metadata: ObjectMeta {
                    name: Some(n.to_string()),
                    ..Default::default()
                },
                status: Some(NodeStatus {
                    conditions: Some(vec![NodeCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        let meta = |i: usize| ObjectMeta {
            namespace: Some("bench".into()),
            name: Some(format!("svc-{i}")),
            ..Default::default()
        };
        let services = (0..v)
            .map(|i| Service {
                metadata: meta(i),
                spec: Some(ServiceSpec {
                    type_: Some("LoadBalancer".into()),
                    external_traffic_policy: Some(
                        if i % 10 == 0 { "Local" } else { "Cluster" }.into(),
                    ),
                    ..Default::default()
                }),
                status: Some(ServiceStatus {
                    load_balancer: Some(LoadBalancerStatus {
                        ingress: Some(vec![LoadBalancerIngress {
                            ip: Some(vip(i).to_string()),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                }),
            })
            .collect();
        let slices = (0..v)
            .map(|i| EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(format!("svc-{i}-abcde")),
                    labels: Some([(SERVICE_NAME_LABEL.to_owned(), format!("svc-{i}"))].into()),
                    ..meta(i)
                },
                address_type: "IPv4".into(),
                endpoints: Some(
                    (0..3)
                        .map(|k| Endpoint {
                            addresses: vec![format!("10.244.{}.{}", k, i % 250)],
                            node_name: Some(names[(i * 7 + k * 131) % names.len()].to_string()),
                            conditions: Some(EndpointConditions {
                                ready: Some(true),
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ports: None,
            })
            .collect();
        Objects {
            services,
            slices,
            nodes,
        }
    }
}

fn run_cell(n: usize, v: usize, args: &Args) -> Result<Cell> {
    ensure!(n >= 2, "a cell needs at least 2 nodes");
    let started = Instant::now();
    let live_before = LIVE.load(Ordering::Relaxed);
    PEAK.store(live_before, Ordering::Relaxed);
    let names: Vec<NodeName> = (0..n).map(name).collect();
    let me = names[0].clone();
    let mut config = ElectionConfig::new(me.clone());
    config.mac = mac(0);
    config.warmup = Duration::ZERO;
    let origin = Instant::now();
    let mut host = Host {
        core: Core::new(config, origin, 1),
        origin,
        now: Duration::ZERO,
        rv: 0,
        outputs: 0,
    };
    host.handle(Input::WatchHealth(true));
    for (i, peer) in names.iter().enumerate().skip(1) {
        host.handle(Input::LeaseSeen(lease(peer, i as u64, n - 1)));
    }
    // Every peer beating before the VIPs arrive: each first beat changes the peer's standing,
    // which would re-rank every VIP.
    for peer in &names[1..] {
        host.handle(Input::Heartbeat(beat(peer, &me, 1)));
    }
    // The plan's specs: one eligible set, shared by every VIP; built afresh per re-plan.
    let specs = |nodes: &[NodeName]| -> Vec<VipSpec> {
        let eligible: NodeSet = Arc::new(nodes.iter().cloned().collect());
        (0..v).map(|i| spec(i, &eligible)).collect()
    };
    host.handle(Input::Vips(specs(&names)));
    // Run the cluster until it settles (trusted, ready, this node's share of the VIPs taken).
    let interval = defaults::HEARTBEAT_INTERVAL;
    let spacing = interval / (n as u32 - 1).max(1);
    while host.now < SETTLE {
        beat_round(&mut host, &names, spacing, &mut |_, _| {});
    }
    let setup_s = started.elapsed().as_secs_f64();
    progress(&format!(
        "N={n} V={v}: set up in {setup_s:.1} s; {} VIPs owned here",
        host.core.owned().len()
    ));

    // Heartbeats, with the timers that fall due between them, timed apart.
    let (mut beat_time, mut beats) = (Duration::ZERO, 0u64);
    let (mut tick_time, mut ticks) = (Duration::ZERO, 0u64);
    let (mut beat_alloc, mut tick_alloc) = (0u64, 0u64);
    let (phase, phase_from) = (Instant::now(), host.now);
    for _ in 0..args.rounds {
        beat_round(
            &mut host,
            &names,
            spacing,
            &mut |what, (took, bytes)| match what {
                Fed::Beat => {
                    beat_time += took;
                    beat_alloc += bytes;
                    beats += 1;
                }
                Fed::Tick => {
                    tick_time += took;
                    tick_alloc += bytes;
                    ticks += 1;
                }
            },
        );
        if phase.elapsed().as_secs_f64() > args.budget {
            progress(&format!(
                "N={n} V={v}: heartbeat phase stopped after {beats} beats (--budget)"
            ));
            break;
        }
    }
    let phase_s = (host.now - phase_from).as_secs_f64();

    // Lease renewals.
    let mut lease_samples = Vec::new();
    for (k, peer) in names.iter().enumerate().skip(1).take(200) {
        let view = lease(peer, 1_000_000 + k as u64, n - 1);
        let t = Instant::now();
        host.handle(Input::LeaseSeen(view));
        lease_samples.push(t.elapsed().as_nanos() as f64);
    }

    // VIP-set changes: one VIP gone, then back.
    let mut change_samples = Vec::new();
    for k in 0..args.changes {
        let mut changed = specs(&names);
        changed.remove(k as usize % v);
        let back = specs(&names);
        let t = Instant::now();
        host.handle(Input::Vips(changed));
        change_samples.push(t.elapsed().as_secs_f64() * 1e3);
        host.handle(Input::Vips(back));
    }
    // VIP changes as the agent gives them: one VIP's eligible set changed, then back.
    let mut delta_samples = Vec::new();
    for k in 0..args.changes as usize {
        let i = (k * 7919 + 3) % v;
        let fewer: NodeSet = Arc::new(names.iter().skip(1 + k % (n - 1)).cloned().collect());
        let (changed, back) = (
            spec(i, &fewer),
            spec(i, &Arc::new(names.iter().cloned().collect())),
        );
        let t = Instant::now();
        host.handle(Input::VipsChanged {
            placed: vec![changed],
            gone: vec![],
        });
        delta_samples.push(t.elapsed().as_secs_f64() * 1e6);
        host.handle(Input::VipsChanged {
            placed: vec![back],
            gone: vec![],
        });
    }
    // Node changes: one peer gone from every eligible set, then back.
    let mut node_samples = Vec::new();
    for k in 0..args.changes {
        let gone = 1 + k as usize % (n - 1);
        let fewer: Vec<NodeName> = (0..n)
            .filter(|i| *i != gone)
            .map(|i| names[i].clone())
            .collect();
        let (changed, back) = (specs(&fewer), specs(&names));
        let t = Instant::now();
        host.handle(Input::Vips(changed));
        node_samples.push(t.elapsed().as_secs_f64() * 1e3);
        host.handle(Input::Vips(back));
    }

    let core_live = LIVE.load(Ordering::Relaxed).saturating_sub(live_before);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(live_before);

    // The placement from watch stores of this size.
    let before_objects = LIVE.load(Ordering::Relaxed);
    let objects = Objects::new(&names, v);
    let objects_mib = (LIVE.load(Ordering::Relaxed) - before_objects) as f64 / (1 << 20) as f64;
    let mut plan_samples = Vec::new();
    let sel = Selection::default();
    for _ in 0..args.changes {
        let t = Instant::now();
        let plan = eligibility::plan_placed::<_, _, _, announcer::ipam::AddressPool>(
            &objects.services,
            &objects.slices,
            &objects.nodes,
            &[],
            &sel,
        );
        plan_samples.push(t.elapsed().as_secs_f64() * 1e3);
        ensure!(
            plan.vips.len() == v,
            "the plan has {} VIPs of {v}",
            plan.vips.len()
        );
    }
    let plan_ms = median(plan_samples);
    // The same placement kept up to date, one event at a time.
    let mut planner = Planner::new(sel.clone());
    for n in &objects.nodes {
        planner.apply_node(Arc::new(n.clone()));
    }
    for s in &objects.services {
        planner.apply_service(Arc::new(s.clone()));
    }
    for s in &objects.slices {
        planner.apply_slice(s);
    }
    ensure!(
        planner.replan().placed.len() == v,
        "the planner placed fewer than {v} VIPs"
    );
    let (mut service_samples, mut slice_samples, mut flip_samples) = (vec![], vec![], vec![]);
    for k in 0..args.changes as usize {
        let i = (k * 7919 + 1) % v; // a Cluster-policy Service (every tenth is Local)
        let svc = Arc::new(objects.services[i].clone());
        let t = Instant::now();
        planner.apply_service(svc);
        black_box(planner.replan());
        service_samples.push(t.elapsed().as_secs_f64() * 1e6);

        let mut slice = objects.slices[i - i % 10].clone(); // a Local-policy Service's
        if let Some(ep) = slice.endpoints.as_mut().and_then(|e| e.first_mut()) {
            ep.node_name = Some(names[(k * 31 + 5) % n].to_string());
        }
        let t = Instant::now();
        planner.apply_slice(&slice);
        black_box(planner.replan());
        slice_samples.push(t.elapsed().as_secs_f64() * 1e6);

        let mut node = objects.nodes[1 + k % (n - 1)].clone();
        let flip = |node: &mut Node, status: &str| {
            if let Some(c) = node.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                c[0].status = status.into();
            }
        };
        flip(&mut node, "False");
        let t = Instant::now();
        planner.apply_node(Arc::new(node.clone()));
        let delta = planner.replan();
        flip_samples.push(t.elapsed().as_secs_f64() * 1e3);
        // Every Cluster-policy VIP; a Local one only where the node hosts an endpoint.
        ensure!(
            delta.placed.len() >= v - v.div_ceil(10),
            "a node flip re-placed {} of {v}",
            delta.placed.len()
        );
        flip(&mut node, "True");
        planner.apply_node(Arc::new(node));
        planner.replan();
    }
    let (replan_service_us, replan_slice_us, replan_node_ms) = (
        median(service_samples),
        median(slice_samples),
        median(flip_samples),
    );
    drop(planner);
    drop(objects);
    let heartbeat_ns = beat_time.as_nanos() as f64 / beats.max(1) as f64;
    let tick_ns = tick_time.as_nanos() as f64 / ticks.max(1) as f64;
    let lease_ns = median(lease_samples);
    // Per second of a healthy cluster: (N − 1) peers beat 1/interval times each; N − 1
    // renewals every lease_renew; the ticks seen per virtual second.
    let beats_per_s = (n - 1) as f64 / interval.as_secs_f64();
    let renewals_per_s = (n - 1) as f64 / defaults::LEASE_RENEW.as_secs_f64();
    let ticks_per_s = ticks as f64 / phase_s.max(1e-9);
    let core_cpu_pct =
        (beats_per_s * heartbeat_ns + renewals_per_s * lease_ns + ticks_per_s * tick_ns) / 1e7;
    let owned = host.core.owned().len();
    drop(host);
    Ok(Cell {
        nodes: n,
        vips: v,
        setup_s,
        heartbeats: beats,
        heartbeat_ns,
        heartbeat_alloc_bytes: beat_alloc as f64 / beats.max(1) as f64,
        tick_alloc_bytes: tick_alloc as f64 / ticks.max(1) as f64,
        ticks,
        tick_ns,
        lease_ns,
        vip_change_ms: median(change_samples),
        vip_delta_us: median(delta_samples),
        node_change_ms: median(node_samples),
        plan_ms,
        replan_service_us,
        replan_slice_us,
        replan_node_ms,
        objects_mib,
        core_live_mib: core_live as f64 / (1 << 20) as f64,
        peak_mib: peak as f64 / (1 << 20) as f64,
        owned,
        core_cpu_pct,
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        !args.nodes.is_empty() && !args.vips.is_empty(),
        "--nodes and --vips need at least one value each"
    );
    ensure!(
        args.rounds > 0 && args.changes > 0,
        "--rounds and --changes must be at least 1"
    );
    let mut cells = Vec::new();
    for &v in &args.vips {
        for &n in &args.nodes {
            progress(&format!("cell N={n} V={v}"));
            cells.push(run_cell(n, v, &args)?);
        }
    }

    println!(
        "{:>6} {:>6} {:>12} {:>10} {:>12} {:>10} {:>12} {:>12} {:>12} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "nodes",
        "vips",
        "heartbeat_ns",
        "alloc_B",
        "tick_ns",
        "lease_ns",
        "vip_set_ms",
        "vip_delta_us",
        "node_set_ms",
        "live_MiB",
        "peak_MiB",
        "plan_ms",
        "svc_us",
        "slice_us",
        "node_ms",
        "objects_MiB",
        "core_cpu_%"
    );
    for c in &cells {
        println!(
            "{:>6} {:>6} {:>12.0} {:>10.0} {:>12.0} {:>10.0} {:>12.2} {:>12.0} {:>12.2} {:>9.1} {:>9.1} {:>9.1} {:>10.0} {:>10.0} {:>10.1} {:>10.1} {:>10.2}",
            c.nodes,
            c.vips,
            c.heartbeat_ns,
            c.heartbeat_alloc_bytes,
            c.tick_ns,
            c.lease_ns,
            c.vip_change_ms,
            c.vip_delta_us,
            c.node_change_ms,
            c.core_live_mib,
            c.peak_mib,
            c.plan_ms,
            c.replan_service_us,
            c.replan_slice_us,
            c.replan_node_ms,
            c.objects_mib,
            c.core_cpu_pct
        );
    }
    println!(
        "heartbeat_ns = one received beat (handle, outputs, poll_timeout); alloc_B = bytes \
         allocated per beat; tick_ns = one timer tick; lease_ns = one peer Lease renewal seen; \
         vip_set_ms = one VIP-set change (one VIP of V gone); \
         vip_delta_us = one VIP changed, as the agent gives it (VipsChanged); node_set_ms = one node gone from \
         every VIP's eligible set; plan_ms = the placement from watch stores of N Nodes, V Services \
         and V EndpointSlices, from scratch; svc_us / slice_us / node_ms = the same kept by a \
         Planner, one Service rewritten / one endpoint moved to another node / one Node \
         NotReady (the shared set swapped, Local VIPs placed again), then replan; objects_MiB = those objects' heap, unstripped; live/peak = the core's heap after \
         the run / at most; core_cpu_% = the core's work per agent per second of a healthy \
         cluster, in % of one core (derived: beats, renewals and ticks at the defaults)."
    );

    // The rule: per-heartbeat cost at the largest N at most 2× that at 1,000.
    let mut verdicts = Vec::new();
    let largest = args.nodes.iter().copied().max().unwrap_or(0);
    for &v in &args.vips {
        let at = |n: usize| cells.iter().find(|c| c.nodes == n && c.vips == v);
        if let (Some(base), Some(top)) = (at(1_000), at(largest))
            && largest > 1_000
        {
            let ratio = top.heartbeat_ns / base.heartbeat_ns;
            verdicts.push(Verdict {
                name: format!("heartbeat_ns_ratio_{largest}_to_1000_v{v}"),
                text: format!(
                    "one heartbeat at N={largest} costs {ratio:.1}× one at N=1000 (V={v}), \
                     target ≤ 2×"
                ),
                value: Some(ratio),
                limit: Some(2.0),
                pass: Some(ratio <= 2.0),
            });
        }
    }
    for verdict in &verdicts {
        println!("{} {}", verdict.mark(), verdict.text);
    }
    if args.json {
        let doc = serde_json::json!({
            "bench": "core",
            "cells": cells,
            "verdicts": verdicts,
        });
        println!("{doc}");
    }
    if any_failed(&verdicts) {
        bail!("targets failed: {}", failed_names(&verdicts).join(", "));
    }
    Ok(())
}

//! `cargo xtask bench hollow`: one real agent among N−1 hollow peers (issue 29's T1 and T2
//! method). What an agent costs in a cluster of N nodes, measured on one core.
//!
//! The world: the testbed with one node (`node-a`, the real agent at its defaults, generic
//! XDP), the in-repo API server, and the hollow-peer generator
//! ([`announcer_tests::bench::hollow`]) in the client namespace: N−1 Nodes, N−1 node Leases
//! renewed every 3 s, N−1 peers beating the agent every 75 ms and answering its probes.
//! V Services of one IPv4 VIP each (`externalTrafficPolicy: Cluster`, two ready endpoints:
//! the agent's node and a hollow one), so the agent ranks every VIP over all N nodes. Churn
//! while measuring: N/300 Node status updates, 10 EndpointSlice changes and 1 Service change
//! per second.
//!
//! CPUs: the agent (every thread) is pinned to CPU 0; this process (generator, API server,
//! churn) to CPU 1, so the agent's figure is its own. Measured, after `--warmup-s`, over
//! `--measure-s`:
//! * the agent's CPU (`/proc/<pid>/stat`, user + system, all threads), as % of one core;
//! * its RSS at the end and its peak (`VmRSS`, `VmHWM`);
//! * its heartbeat peers (the addresses it sends to: every node with a Lease today);
//! * datagrams the kernel dropped on its heartbeat socket (`/proc/<pid>/net/udp`);
//! * false suspicions (probes it sent) and false takeovers (takeovers it counted), both 0
//!   when nothing failed;
//! * the generator's own rates: a run whose generator sent under 99 % of the beats due is
//!   void (reported, and no PASS).
//!
//! Then `--trials` crashes: a hollow peer that owns a VIP whose runner-up is the agent stops
//! (no beat, no probe answer, no renewal), and the client asks that VIP by fresh ARP requests
//! every 5 ms: failover = the agent's first answer − the hollow peer's last beat. The peer
//! restarts (new incarnation) and takes the VIP back before the next trial.
//!
//! Progress on stderr; a table on stdout; with `--json`, one JSON document as the last line.
//! Exits non-zero on a FAIL.

use std::{
    net::{IpAddr, SocketAddr},
    time::{Duration, Instant},
};

use announcer::{
    agent::kube::node_lease::{
        LINK_NAMES_ANNOTATION, LINKS_ANNOTATION, apply_link_names, parse_links, selector,
    },
    election::{NodeName, rendezvous},
    heartbeat::{LEASE_ANNOTATION, PublicKey},
};
use announcer_tests::{
    bench::{
        hollow::{
            AgentSide, ChurnRates, ChurnTargets, Counters, Generator, Timing, churn, hollow_mac,
            hollow_name, hollow_node_ip, node_lease, renew_leases, slice_endpoints,
        },
        verdict::{Verdict, any_failed, failed_names, table_header, table_row},
    },
    env::{
        lan::{
            CLIENT_V4, IFACE, LB_CLASS, SERVICE_NAMESPACE, Testbed, TestbedConfig,
            install_ctrlc_cleanup, vip4,
        },
        packet::PacketSocket,
    },
    netns::require_root,
};
use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::{
    coordination::v1::Lease,
    core::v1::{Node, Service},
    discovery::v1::EndpointSlice,
};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[derive(Parser)]
#[command(about = "One real agent among N-1 hollow peers: its CPU, memory, drops and failover")]
struct Args {
    /// Cluster sizes N (the agent plus N-1 hollow peers), comma-separated.
    #[arg(long, default_value = "1000", value_delimiter = ',')]
    nodes: Vec<usize>,
    /// VIPs, one per Service.
    #[arg(long, default_value_t = 10_000)]
    vips: u32,
    /// Seconds after the agent settled before measuring.
    #[arg(long, default_value_t = 15)]
    warmup_s: u64,
    /// Seconds measured.
    #[arg(long, default_value_t = 30)]
    measure_s: u64,
    /// Crash trials (hollow owners whose runner-up is the agent).
    #[arg(long, default_value_t = 20)]
    trials: usize,
    /// Extra agent flags, space-separated.
    #[arg(long, allow_hyphen_values = true, default_value = "")]
    agent_args: String,
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// T1's limits (N = 1,000), and T2's (N = 5,000).
const CPU_PCT_T1: f64 = 1.0;
const RSS_MIB_T1: f64 = 150.0;
const CPU_PCT_T2: f64 = 2.0;
const RSS_MIB_T2: f64 = 250.0;
const PEERS_MAX: f64 = 16.0;
const FAILOVER_P99_MS: f64 = 250.0;
/// A generator under this share of its beats voids the run.
const GENERATOR_MIN_SHARE: f64 = 0.99;
/// The heartbeat port (the agent's default).
const HEARTBEAT_PORT: u16 = 9747;
const ETH_P_ALL: u16 = 0x0003;

fn progress(line: &str) {
    eprintln!("[bench-hollow] {line}");
}

fn main() -> Result<()> {
    require_root();
    install_ctrlc_cleanup();
    let args = Args::parse();
    ensure!(
        args.vips <= 1 << 15,
        "--vips above 32,768 (the testbed's VIP range)"
    );
    // Every thread made from here on inherits CPU 1: the generator, the API server, churn.
    pin(nix::unistd::Pid::from_raw(0), 1).context("pinning the bench to CPU 1")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    for &n in &args.nodes {
        ensure!(n >= 2, "--nodes: at least 2");
        runs.push(rt.block_on(async { tokio::task::block_in_place(|| run(&args, n)) })?);
    }
    report(&args, &runs)
}

/// Pins thread (or process) `pid` to `cpu`.
fn pin(pid: nix::unistd::Pid, cpu: usize) -> Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu)?;
    nix::sched::sched_setaffinity(pid, &set)?;
    Ok(())
}

/// Pins every thread of process `pid` to `cpu`.
fn pin_process(pid: u32, cpu: usize) -> Result<usize> {
    let mut n = 0;
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let tid: i32 = t?.file_name().to_string_lossy().parse()?;
        pin(nix::unistd::Pid::from_raw(tid), cpu)?;
        n += 1;
    }
    Ok(n)
}

/// One size's results.
struct Run {
    nodes: usize,
    vips: u32,
    cpu_pct: f64,
    rss_mib: f64,
    hwm_mib: f64,
    heartbeat_peers: usize,
    known_peers: usize,
    drops: u64,
    probes: f64,
    takeovers: f64,
    generator_share: f64,
    received_share: f64,
    lease_writes_per_s: f64,
    churn_per_s: f64,
    churn_failures: u64,
    failovers_ms: Vec<f64>,
    unanswered: usize,
    settle_s: f64,
    /// It owned exactly what the ranking gives it, within 90 s.
    settled: bool,
    /// A muted hollow owner (beats stopped, data plane answering) kept its VIP.
    muted_kept: bool,
}

fn run(args: &Args, n: usize) -> Result<Run> {
    let rt = tokio::runtime::Handle::current();
    let hollow = n - 1;
    progress(&format!(
        "N={n}: starting the testbed (1 node, in-repo API server)"
    ));
    let mut tb = rt.block_on(Testbed::start(TestbedConfig {
        nodes: 1,
        tag: "hollow".into(),
        ..TestbedConfig::default()
    }));
    let agent_node = tb.nodes()[0].clone();
    let agent_ip = tb.node_ip4(&agent_node);
    let client = tb.kube();

    rt.block_on(create_nodes(client.clone(), hollow))?;
    let services: Vec<String> = (0..args.vips).map(|k| format!("h-{k}")).collect();
    let targets = ChurnTargets {
        namespace: SERVICE_NAMESPACE.into(),
        services: services.clone(),
        agent_node: agent_node.clone(),
        agent_ip,
        hollow,
    };
    let extra: Vec<&str> = args.agent_args.split_whitespace().collect();
    tb.start_agent(&agent_node, &extra);
    let pid = tb.agent_pid(&agent_node).context("the agent's pid")?;
    pin_process(pid, 0).context("pinning the agent to CPU 0")?;
    let agent = rt.block_on(agent_side(client.clone(), &agent_node))?;
    progress(&format!(
        "the agent publishes {} at {}",
        agent.key, agent.heartbeat
    ));

    let timing = Timing::default();
    let local = SocketAddr::from((CLIENT_V4, HEARTBEAT_PORT));
    let mut generator = Generator::new(hollow, &agent, timing)?;
    let leases = (0..hollow)
        .map(|i| {
            (
                node_lease(client.clone(), &agent, i, local, timing),
                generator.lease_contents(i, &agent),
            )
        })
        .collect();
    tb.spawn(renew_leases(
        client.clone(),
        generator.lease_handles(),
        agent.clone(),
        leases,
        timing,
        (n - 1) as u32,
        16,
    ));
    // Every Lease once (the first round is spread over one renewal period).
    let t = Instant::now();
    while Counters::get(&generator.counters().lease_writes) < hollow as u64 {
        ensure!(
            t.elapsed() < Duration::from_secs(120),
            "the hollow Leases were not all written within 120 s ({} of {hollow})",
            Counters::get(&generator.counters().lease_writes)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let client_ns = tb.client();
    client_ns.ip(&["link", "set", IFACE, "promisc", "on"]);
    let socket = client_ns
        .enter(|| std::net::UdpSocket::bind(local))
        .context("binding the generator's heartbeat socket in the client namespace")?;
    let responder = client_ns
        .enter(|| PacketSocket::open(IFACE, ETH_P_ALL))
        .context("the probe responder's packet socket")?;
    generator.start(socket, responder, &agent)?;
    // The agent joins a cluster whose peers it already hears: then the Services.
    let t = Instant::now();
    loop {
        let known = tb
            .metrics(&agent_node)
            .map_or(0.0, |m| metric_sum(&m, "announcer_peers_alive"));
        if known as usize >= hollow {
            break;
        }
        if t.elapsed() > Duration::from_secs(60) {
            progress(&format!(
                "the agent counts {known} of {hollow} hollow peers alive after 60 s: going on"
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let t = Instant::now();
    rt.block_on(create_services(client.clone(), &targets))?;
    progress(&format!(
        "the agent hears its {hollow} hollow peers; {} Services created in {:.1} s",
        args.vips,
        t.elapsed().as_secs_f64()
    ));
    tb.spawn(churn(
        client.clone(),
        targets,
        ChurnRates::issue(n),
        generator.counters_handle(),
        generator.stop_handle(),
    ));

    // Settled: the agent owns exactly what the rendezvous over all N nodes gives it.
    let names: Vec<NodeName> = std::iter::once(NodeName::from(agent_node.as_str()))
        .chain((0..hollow).map(|i| NodeName::from(hollow_name(i))))
        .collect();
    let vips: Vec<IpAddr> = (0..args.vips).map(|k| IpAddr::V4(vip4(k))).collect();
    let ranked: Vec<(IpAddr, NodeName, NodeName)> = vips
        .iter()
        .map(|&v| {
            let r = rendezvous::ranking(v, &names);
            (v, r[0].clone(), r[1].clone())
        })
        .collect();
    let mut expected: Vec<IpAddr> = ranked
        .iter()
        .filter(|(_, o, _)| o.as_str() == agent_node)
        .map(|(v, ..)| *v)
        .collect();
    expected.sort();
    let t = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let mut owned = tb.ownership().remove(&agent_node).unwrap_or_default();
        owned.sort();
        if owned == expected {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            progress(&format!(
                "waiting for the agent to settle: it owns {} VIPs, the ranking gives it {} (beats sent {}, received {})",
                owned.len(),
                expected.len(),
                Counters::get(&generator.counters().beats_sent),
                Counters::get(&generator.counters().beats_received),
            ));
            last_report = Instant::now();
        }
        if t.elapsed() > Duration::from_secs(90) {
            progress(&format!(
                "the agent did not settle within 90 s: it owns {} VIPs, the ranking gives it {}; measuring anyway",
                owned.len(),
                expected.len()
            ));
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let settle_s = t.elapsed().as_secs_f64();
    let settled = settle_s <= 90.0;
    if settled {
        progress(&format!(
            "settled in {settle_s:.1} s: the agent owns its {} VIPs; warming up {} s",
            expected.len(),
            args.warmup_s
        ));
    }
    std::thread::sleep(Duration::from_secs(args.warmup_s));
    pin_process(pid, 0)?;

    // The steady window.
    let before = Sample::take(&tb, &agent_node, pid, &generator)?;
    progress(&format!("measuring {} s", args.measure_s));
    std::thread::sleep(Duration::from_secs(args.measure_s));
    let after = Sample::take(&tb, &agent_node, pid, &generator)?;
    let secs = after.at.duration_since(before.at).as_secs_f64();
    let (rss_mib, hwm_mib) = memory_mib(pid)?;
    let beats_due = generator.beats_due(hollow as f64 * secs);
    let generator_share = (after.sent - before.sent) as f64 / beats_due;
    let received_share = (after.received - before.received) as f64 / beats_due;
    let cpu_pct = (after.cpu_s - before.cpu_s) / secs * 100.0;
    let c = generator.counters();
    progress(&format!(
        "probes to hollow peers seen {}, answered {}",
        Counters::get(&c.probes_seen),
        Counters::get(&c.probes_answered)
    ));
    progress(&format!(
        "agent {cpu_pct:.2} % of a core, RSS {rss_mib:.1} MiB (peak {hwm_mib:.1}); generator sent {:.1} % of the beats due, received {:.1} %",
        generator_share * 100.0,
        received_share * 100.0
    ));

    // The responder works: a hollow owner whose beats stop for a second while its data
    // plane answers keeps its VIP (the agent probes it and hears the answer).
    let (i, vip) = trials_of(&ranked, &agent_node)
        .first()
        .copied()
        .context("no VIP has the agent as runner-up to a hollow owner")?;
    let answered_before = tb
        .metrics(&agent_node)
        .map_or(0.0, |m| metric_sum(&m, "announcer_probes_answered_total"));
    generator.mute(i, true);
    let t = Instant::now();
    let mut taken = false;
    while t.elapsed() < Duration::from_secs(1) {
        taken |= tb.owners(vip).contains(&agent_node);
        std::thread::sleep(Duration::from_millis(50));
    }
    generator.mute(i, false);
    std::thread::sleep(Duration::from_millis(500));
    let probe_answers = tb
        .metrics(&agent_node)
        .map_or(0.0, |m| metric_sum(&m, "announcer_probes_answered_total"))
        - answered_before;
    let accepted = tb.metrics(&agent_node).map_or(0.0, |m| {
        metric_sum(&m, "announcer_probe_answers_accepted_total")
    });
    progress(&format!(
        "{} muted for 1 s: {} its VIP, {probe_answers} probe answers heard ({accepted} accepted by the listener so far)",
        hollow_name(i),
        if taken {
            "the agent took"
        } else {
            "the agent kept off"
        }
    ));
    let muted_kept = !taken && probe_answers > 0.0;

    // Crash trials.
    let trials = trials_of(&ranked, &agent_node);
    ensure!(
        !trials.is_empty(),
        "no VIP has the agent as runner-up to a hollow owner"
    );
    let mut failovers_ms = Vec::new();
    let mut unanswered = 0;
    for t in 0..args.trials {
        let (i, vip) = trials[t % trials.len()];
        let start = Instant::now();
        let asker = tb.first_answers(
            &[vip],
            hollow_mac(i).0,
            start,
            Duration::from_millis(5),
            Duration::from_secs(3),
        );
        std::thread::sleep(Duration::from_millis(20));
        let last = generator.crash(i).context("the victim never beat")?;
        let answers = asker.join().expect("the ARP asker");
        match answers.get(&vip).copied().flatten() {
            Some((d, _)) => {
                let ms = (start + d).saturating_duration_since(last).as_secs_f64() * 1e3;
                failovers_ms.push(ms);
                progress(&format!(
                    "trial {}/{}: {} crashed, {vip} answered by the agent {ms:.0} ms after its last beat",
                    t + 1,
                    args.trials,
                    hollow_name(i)
                ));
            }
            None => {
                unanswered += 1;
                progress(&format!("trial {}: {vip} not answered within 3 s", t + 1));
            }
        }
        generator.restart(i);
        let back = Instant::now();
        while tb.owners(vip).contains(&agent_node) && back.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    failovers_ms.sort_by(f64::total_cmp);
    let counters = generator.counters();
    let run = Run {
        nodes: n,
        vips: args.vips,
        cpu_pct,
        rss_mib,
        hwm_mib,
        // Datagrams per beat period: the peers it actually beats.
        heartbeat_peers: ((after.agent_sent - before.agent_sent) / secs
            * timing.heartbeat_interval.as_secs_f64())
        .round() as usize,
        known_peers: after.peers,
        drops: after.drops.saturating_sub(before.drops),
        probes: after.probes - before.probes,
        takeovers: after.takeovers - before.takeovers,
        generator_share,
        received_share,
        lease_writes_per_s: (after.lease_writes - before.lease_writes) as f64 / secs,
        churn_per_s: (after.churn - before.churn) as f64 / secs,
        churn_failures: Counters::get(&counters.churn_failures),
        failovers_ms,
        unanswered,
        settle_s,
        settled,
        muted_kept,
    };
    generator.stop();
    drop(tb);
    Ok(run)
}

/// The VIPs a hollow peer owns with the agent as runner-up: (peer, VIP).
fn trials_of(ranked: &[(IpAddr, NodeName, NodeName)], agent: &str) -> Vec<(usize, IpAddr)> {
    ranked
        .iter()
        .filter(|(_, _, second)| second.as_str() == agent)
        .filter_map(|(v, owner, _)| {
            let i: usize = owner.as_str().strip_prefix("hollow-")?.parse().ok()?;
            Some((i - 1, *v))
        })
        .collect()
}

/// Counters at one moment.
struct Sample {
    at: Instant,
    cpu_s: f64,
    drops: u64,
    probes: f64,
    takeovers: f64,
    peers: usize,
    agent_sent: f64,
    sent: u64,
    received: u64,
    lease_writes: u64,
    churn: u64,
}

impl Sample {
    fn take(tb: &Testbed, node: &str, pid: u32, g: &Generator) -> Result<Self> {
        let metrics = tb.metrics(node).context("the agent's /metrics")?;
        let c = g.counters();
        Ok(Self {
            at: Instant::now(),
            cpu_s: cpu_s(pid)?,
            drops: udp_drops(pid, HEARTBEAT_PORT)?,
            probes: metric_sum(&metrics, "announcer_probes_total"),
            takeovers: metric_sum(&metrics, "announcer_takeovers_total"),
            peers: metric_sum(&metrics, "announcer_peers") as usize,
            agent_sent: metric_sum(&metrics, "announcer_heartbeats_sent_total"),
            sent: Counters::get(&c.beats_sent),
            received: Counters::get(&c.beats_received),
            lease_writes: Counters::get(&c.lease_writes),
            churn: Counters::get(&c.churn_writes),
        })
    }
}

/// User + system CPU seconds of process `pid`, all threads.
fn cpu_s(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the comm: state(0) ... utime(11) stime(12).
    let ticks: f64 = f[11].parse::<f64>()? + f[12].parse::<f64>()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok(ticks / hz)
}

/// `VmRSS` and `VmHWM` of `pid`, MiB.
fn memory_mib(pid: u32) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| -> Option<f64> {
        status
            .lines()
            .find(|l| l.starts_with(key))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Ok((
        kib("VmRSS:").context("VmRSS")? / 1024.0,
        kib("VmHWM:").context("VmHWM")? / 1024.0,
    ))
}

/// Datagrams the kernel dropped on the UDP sockets bound to `port` in `pid`'s namespace.
fn udp_drops(pid: u32, port: u16) -> Result<u64> {
    let mut drops = 0;
    for file in ["udp", "udp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{file}")) else {
            continue;
        };
        let suffix = format!(":{port:04X}");
        for l in text.lines().skip(1) {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 12 && f[1].ends_with(&suffix) {
                drops += f[f.len() - 1].parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(drops)
}

/// The sum of every series of `name` in a Prometheus exposition.
fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|r| r.starts_with('{') || r.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Reads the agent's own Lease: its key, heartbeat address, links and namespace.
async fn agent_side(client: kube::Client, node: &str) -> Result<AgentSide> {
    let api: Api<Lease> = Api::all(client);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let list = api.list(&ListParams::default().labels(&selector())).await?;
        let ours = list
            .items
            .into_iter()
            .find(|l| l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()) == Some(node));
        if let Some(l) = ours {
            let ann = l.metadata.annotations.clone().unwrap_or_default();
            if let (Some(key), Some(hb), Some(links)) = (
                ann.get(LEASE_ANNOTATION),
                ann.get(announcer::agent::kube::node_lease::HEARTBEAT_ANNOTATION),
                ann.get(LINKS_ANNOTATION),
            ) {
                let mut links = parse_links(links).map_err(anyhow::Error::msg)?;
                if let Some(names) = ann.get(LINK_NAMES_ANNOTATION) {
                    apply_link_names(&mut links, names);
                }
                return Ok(AgentSide {
                    node: NodeName::from(node),
                    key: key.parse::<PublicKey>()?,
                    heartbeat: hb.parse()?,
                    links,
                    namespace: l.metadata.namespace.clone().unwrap_or_default(),
                });
            }
        }
        ensure!(
            Instant::now() < deadline,
            "the agent's Lease with key, address and links did not appear within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The hollow Nodes: Ready, an `InternalIP` off the LAN.
async fn create_nodes(client: kube::Client, hollow: usize) -> Result<()> {
    let api: Api<Node> = Api::all(client);
    let results: Vec<Result<()>> = futures::stream::iter(0..hollow)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = hollow_name(i);
                let node: Node = serde_json::from_value(json!({
                    "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                }))?;
                api.create(&PostParams::default(), &node).await?;
                let status = json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                    "addresses": [
                        {"type": "InternalIP", "address": hollow_node_ip(i).to_string()},
                        {"type": "Hostname", "address": name},
                    ],
                }});
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// The Services (one IPv4 VIP each, class ours, `Cluster`) and their slices.
async fn create_services(client: kube::Client, t: &ChurnTargets) -> Result<()> {
    let services: Api<Service> = Api::namespaced(client.clone(), &t.namespace);
    let slices: Api<EndpointSlice> = Api::namespaced(client, &t.namespace);
    let results: Vec<Result<()>> = futures::stream::iter(t.services.iter().enumerate())
        .map(|(k, name)| {
            let (services, slices) = (services.clone(), slices.clone());
            async move {
                let svc: Service = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {
                        "type": "LoadBalancer",
                        "loadBalancerClass": LB_CLASS,
                        "externalTrafficPolicy": "Cluster",
                        "ports": [{"name": "echo", "port": 7, "protocol": "UDP"}],
                    },
                }))?;
                services.create(&PostParams::default(), &svc).await?;
                let ingress = json!({"status": {"loadBalancer": {"ingress": [{"ip": vip4(k as u32).to_string()}]}}});
                services
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(ingress))
                    .await?;
                let slice: EndpointSlice = serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("{name}-slice"),
                        "labels": {"kubernetes.io/service-name": name},
                    },
                    "addressType": "IPv4",
                    "endpoints": slice_endpoints(t, k % t.hollow.max(1)),
                }))?;
                slices.create(&PostParams::default(), &slice).await?;
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Nearest-rank percentile `p` of sorted `v`.
fn pct(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[i.clamp(1, v.len()) - 1]
}

fn verdicts(r: &Run) -> Vec<Verdict> {
    let (cpu_limit, rss_limit) = if r.nodes >= 5_000 {
        (CPU_PCT_T2, RSS_MIB_T2)
    } else {
        (CPU_PCT_T1, RSS_MIB_T1)
    };
    let valid = r.generator_share >= GENERATOR_MIN_SHARE;
    let judged = |ok: bool| Some(valid && ok);
    let p99 = pct(&r.failovers_ms, 99.0);
    let n = r.nodes;
    vec![
        Verdict {
            name: format!("n{n}_generator_share_pct"),
            text: format!(
                "the generator sent {:.1} % of the beats due ({:.0}/s), received {:.1} % of the agent's; {:.0} Lease writes/s; churn {:.1} writes/s ({} failed); under {:.0} % the run is void",
                r.generator_share * 100.0,
                (n - 1) as f64 / Timing::default().heartbeat_interval.as_secs_f64(),
                r.received_share * 100.0,
                r.lease_writes_per_s,
                r.churn_per_s,
                r.churn_failures,
                GENERATOR_MIN_SHARE * 100.0
            ),
            value: Some(r.generator_share * 100.0),
            limit: Some(GENERATOR_MIN_SHARE * 100.0),
            pass: Some(valid),
        },
        Verdict {
            name: format!("n{n}_settled"),
            text: format!(
                "the agent owned exactly the VIPs the ranking over all {n} nodes gives it, {:.1} s after the Services appeared",
                r.settle_s
            ),
            value: Some(r.settle_s),
            limit: Some(90.0),
            pass: judged(r.settled),
        },
        Verdict {
            name: format!("n{n}_probe_answers_heard"),
            text: "a hollow owner muted for 1 s (beats stopped, its probe responder on) kept its VIP: the agent heard its answers".into(),
            value: Some(f64::from(u8::from(r.muted_kept))),
            limit: Some(1.0),
            pass: judged(r.muted_kept),
        },
        Verdict {
            name: format!("n{n}_agent_cpu_pct"),
            text: format!(
                "one agent among {} hollow peers, {} VIPs, churn, pinned to one CPU",
                n - 1,
                r.vips
            ),
            value: Some(r.cpu_pct),
            limit: Some(cpu_limit),
            pass: judged(r.cpu_pct <= cpu_limit),
        },
        Verdict {
            name: format!("n{n}_agent_rss_mib"),
            text: format!("RSS at the end; peak {:.1} MiB", r.hwm_mib),
            value: Some(r.rss_mib),
            limit: Some(rss_limit),
            pass: judged(r.hwm_mib <= rss_limit),
        },
        Verdict {
            name: format!("n{n}_heartbeat_peers"),
            text: format!(
                "peers the agent beats: every peer with a Lease (the full mesh); measured {} datagrams per beat period",
                r.heartbeat_peers
            ),
            value: Some(r.known_peers as f64),
            limit: Some(PEERS_MAX),
            pass: judged(r.known_peers as f64 <= PEERS_MAX),
        },
        Verdict {
            name: format!("n{n}_socket_drops"),
            text: "heartbeat datagrams the kernel dropped on the agent's socket".into(),
            value: Some(r.drops as f64),
            limit: Some(0.0),
            pass: judged(r.drops == 0),
        },
        Verdict {
            name: format!("n{n}_false_suspicions"),
            text: format!(
                "probes the agent sent while every peer was alive; takeovers: {}",
                r.takeovers
            ),
            value: Some(r.probes),
            limit: Some(0.0),
            pass: judged(r.probes == 0.0 && r.takeovers == 0.0),
        },
        Verdict {
            name: format!("n{n}_failover_p99_ms"),
            text: format!(
                "{} crashes of a hollow owner, the agent its runner-up: p50 {:.0} ms, max {:.0} ms, {} never answered",
                r.failovers_ms.len() + r.unanswered,
                pct(&r.failovers_ms, 50.0),
                r.failovers_ms.last().copied().unwrap_or(f64::NAN),
                r.unanswered
            ),
            value: Some(p99),
            limit: Some(FAILOVER_P99_MS),
            pass: judged(r.unanswered == 0 && p99 <= FAILOVER_P99_MS),
        },
    ]
}

fn report(args: &Args, runs: &[Run]) -> Result<()> {
    println!("{}", table_header(28));
    let mut all = Vec::new();
    let mut docs = Vec::new();
    for r in runs {
        let v = verdicts(r);
        for x in &v {
            println!("{}", table_row(x, 28, 2));
        }
        docs.push(json!({
            "nodes": r.nodes,
            "vips": r.vips,
            "agent_cpu_pct": r.cpu_pct,
            "agent_rss_mib": r.rss_mib,
            "agent_peak_rss_mib": r.hwm_mib,
            "heartbeat_peers": r.heartbeat_peers,
            "socket_drops": r.drops,
            "false_suspicions": r.probes,
            "false_takeovers": r.takeovers,
            "generator_share_pct": r.generator_share * 100.0,
            "received_share_pct": r.received_share * 100.0,
            "lease_writes_per_s": r.lease_writes_per_s,
            "churn_writes_per_s": r.churn_per_s,
            "failover_p50_ms": pct(&r.failovers_ms, 50.0),
            "failover_p99_ms": pct(&r.failovers_ms, 99.0),
            "failover_trials": r.failovers_ms.len() + r.unanswered,
            "failover_unanswered": r.unanswered,
            "settle_s": r.settle_s,
            "settled": r.settled,
            "muted_owner_kept": r.muted_kept,
            "verdicts": v,
        }));
        all.extend(v);
    }
    if args.json {
        let doc = json!({
            "bench": "hollow",
            "cpus": "agent pinned to CPU 0; generator, in-repo API server and churn on CPU 1",
            "runs": docs,
        });
        println!("{doc}");
    }
    if any_failed(&all) {
        bail!("targets failed: {}", failed_names(&all).join(", "));
    }
    Ok(())
}

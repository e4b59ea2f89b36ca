//! `cargo xtask demo`: three nodes, a client and the in-repo API server on one simulated L2
//! segment (network namespaces around a bridge); LoadBalancer Services with IPv4 and IPv6 VIPs;
//! the real agent with its XDP data plane on every node. It shows who announces what, crashes
//! the busiest node while the client probes every VIP every 10 ms, and prints (and plots) what
//! the client saw and when the successors announced. Everything it creates is removed at the
//! end, also on failure or Ctrl-C.

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::PathBuf,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};

use announcer::ipam::{AddressPool, AddressPoolSpec};
use announcer_tests::{
    env::ApiKind,
    env::lan::{ProbeKind, Testbed, TestbedConfig, install_ctrlc_cleanup, vip4, vip6},
    netns::{fmt_mac, require_root},
    plot::timeline::{Announcement, TimelinePlot, parse_announcements, write_timeline},
};

/// The Services of the demo: name and the address families it asks for. None has a fixed
/// address: the allocator (`announcer allocator`, the Deployment's process) assigns them from
/// the demo's `AddressPool`.
fn services() -> Vec<(&'static str, &'static [&'static str])> {
    const DUAL: &[&str] = &["IPv4", "IPv6"];
    const V4: &[&str] = &["IPv4"];
    const V6: &[&str] = &["IPv6"];
    vec![
        ("web", DUAL),
        ("api", V4),
        ("shop", DUAL),
        ("dns", V4),
        ("grafana", V4),
        ("mail", V6),
        ("git", V4),
        ("chat", DUAL),
    ]
}

/// The demo's `AddressPool`: 16 addresses of each family on the LAN.
fn pool() -> AddressPool {
    AddressPool::new(
        "demo",
        AddressPoolSpec {
            addresses: vec![
                format!("{}-{}", vip4(0), vip4(15)),
                format!("{}-{}", vip6(0), vip6(15)),
            ],
            auto_assign: true,
            ..Default::default()
        },
    )
}

fn step(n: u32, total: u32, what: &str) {
    println!("\n\x1b[1m[{n}/{total}] {what}\x1b[0m");
}

fn spinner(msg: &str) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("    {spinner} {elapsed_precise} {msg}").expect("template"),
    );
    pb.enable_steady_tick(Duration::from_millis(80));
    pb.set_message(msg.to_owned());
    pb
}

fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    target.join("demo")
}

/// `cargo xtask demo [--apiserver kube]`.
#[derive(Parser)]
struct Args {
    /// The API server: `in-repo` (embedded, starts at once) or `kube` (a real kube-apiserver,
    /// etcd, kube-controller-manager and kube-scheduler from `cargo xtask setup`, with
    /// `deploy/` applied; about 10 s more to start).
    #[arg(long, default_value = "in-repo")]
    apiserver: ApiKind,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    require_root();
    install_ctrlc_cleanup();
    let total = 6;
    let nodes = 3;

    step(
        1,
        total,
        "a LAN in network namespaces: a bridge, 3 nodes, a client, the API server",
    );
    let pb = spinner(match args.apiserver {
        ApiKind::InRepo => "creating namespaces, veths, the API server",
        ApiKind::Kube => {
            "creating namespaces, veths, and a real control plane (etcd, kube-apiserver, \
             kube-controller-manager, kube-scheduler; kubectl apply -k deploy/)"
        }
    });
    let mut tb = Testbed::start(TestbedConfig {
        nodes,
        native_xdp: false,
        tag: "demo".into(),
        api: args.apiserver,
    })
    .await;
    pb.finish_and_clear();
    for node in tb.nodes() {
        println!(
            "    {node}: eth0 {} {}  (agent with XDP, generic mode)",
            tb.node_ip4(&node),
            fmt_mac(tb.node_mac(&node))
        );
    }
    println!(
        "    client: eth0 10.78.0.250, probes the VIPs; API server on the bridge, 10.78.0.254"
    );
    if let Some(cp) = tb.kube_control_plane() {
        println!(
            "    API server: kube-apiserver (real), admin kubeconfig {}",
            cp.kubeconfig().display()
        );
    }

    step(
        2,
        total,
        "an AddressPool, one agent per node, and LoadBalancer Services without addresses",
    );
    let names = tb.nodes();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let pool = pool();
    kube::Api::<AddressPool>::all(tb.kube())
        .create(&Default::default(), &pool)
        .await
        .context("create the AddressPool")?;
    println!("    AddressPool demo: {}", pool.spec.addresses.join(", "));
    tb.start_agents(&[]);
    // The allocator Deployment's two replicas, as the kubelets would run them.
    tb.start_allocators(2);
    let pb = spinner("the allocator assigning addresses");
    let mut vips: Vec<(String, IpAddr)> = Vec::new();
    for (name, families) in services() {
        pb.set_message(format!("Service {name} ({})", families.join(" + ")));
        let ips = tb
            .add_allocated_service(name, families, &all, Duration::from_secs(30))
            .await;
        vips.extend(ips.iter().map(|ip| (name.to_string(), *ip)));
    }
    pb.finish_and_clear();
    for (name, families) in services() {
        let ips: Vec<String> = vips
            .iter()
            .filter(|(s, _)| s == name)
            .map(|(_, ip)| ip.to_string())
            .collect();
        println!(
            "    {name:<8} asked for {:<12} got {}",
            families.join("+"),
            ips.join(", ")
        );
    }
    let pb = spinner("agents electing owners");
    let started = Instant::now();
    loop {
        let owned = vips
            .iter()
            .filter(|(_, v)| tb.owners(*v).len() == 1)
            .count();
        pb.set_message(format!(
            "{owned}/{} VIPs announced by exactly one node",
            vips.len()
        ));
        if owned == vips.len() {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the agents did not converge in 30 s; agent logs:\n{}",
            names
                .iter()
                .map(|n| format!("--- {n}\n{}", tb.agent_log_tail(n)))
                .collect::<String>()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    pb.finish_and_clear();
    println!(
        "    all {} VIPs announced after {:.1} s",
        vips.len(),
        started.elapsed().as_secs_f64()
    );

    step(
        3,
        total,
        "who announces what: the agents' /state and what the client sees",
    );
    println!(
        "    {:<8} {:<14} {:<8} {:<27} {:<8}",
        "SERVICE", "VIP", "OWNER", "CLIENT ARP/NDP", "ECHO"
    );
    let mut by_owner: BTreeMap<String, Vec<IpAddr>> = BTreeMap::new();
    for (svc, vip) in &vips {
        let owner = tb.owners(*vip).join(",");
        let macs = tb.arp_macs(*vip, Duration::from_millis(600));
        let mac = macs
            .iter()
            .map(|m| {
                format!(
                    "{} ({})",
                    fmt_mac(*m),
                    tb.node_by_mac(*m).unwrap_or_else(|| "?".into())
                )
            })
            .collect::<Vec<_>>()
            .join(" ");
        let echo = tb
            .ask(*vip, Duration::from_millis(500))
            .unwrap_or_else(|| "-".into());
        println!(
            "    {svc:<8} {:<14} {owner:<8} {mac:<27} {echo:<8}",
            vip.to_string()
        );
        by_owner.entry(owner).or_default().push(*vip);
    }
    let (busiest, moved) = by_owner
        .iter()
        .max_by_key(|(_, v)| v.len())
        .map(|(n, v)| (n.clone(), v.clone()))
        .context("no owner")?;

    step(
        4,
        total,
        &format!(
            "crash {busiest} (link down, agent killed) while the client probes every VIP every 10 ms"
        ),
    );
    let targets: Vec<IpAddr> = vips.iter().map(|(_, v)| *v).collect();
    let capture = tb
        .client()
        .nsenter_cmd("tcpdump")
        .args(["-tt", "-n", "-e", "-l", "-i", "eth0", "arp or icmp6"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting tcpdump in the client namespace")?;
    let prober = tb.start_prober(&targets, Duration::from_millis(10));
    let pb = spinner("steady traffic for 1 s");
    std::thread::sleep(Duration::from_secs(1));
    let wall_at_crash = SystemTime::now();
    let crash_instant = Instant::now();
    prober.mark(&format!("crash {busiest}"));
    tb.crash(&busiest);
    let deadline = Duration::from_secs(15);
    loop {
        let elapsed = crash_instant.elapsed();
        let done = moved
            .iter()
            .filter(|v| {
                let o = tb.owners(**v);
                o.len() == 1 && o[0] != busiest
            })
            .count();
        pb.set_message(format!(
            "{:>5} ms after the crash: {done}/{} of {busiest}'s VIPs taken over",
            elapsed.as_millis(),
            moved.len()
        ));
        if done == moved.len() || elapsed > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    pb.set_message("1 s more of traffic");
    std::thread::sleep(Duration::from_secs(1));
    pb.finish_and_clear();
    let timeline = prober.stop();
    let mut capture = capture;
    let _ = capture.kill();
    let dump = capture
        .wait_with_output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let crash_at = crash_instant.saturating_duration_since(timeline.start);
    let wall_crash = wall_at_crash
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64();
    let announcements: Vec<Announcement> = parse_announcements(&dump)
        .into_iter()
        .filter(|(ts, _, _)| *ts >= wall_crash)
        .map(|(ts, vip, mac)| Announcement {
            at: crash_at + Duration::from_secs_f64(ts - wall_crash),
            vip,
            mac,
        })
        .collect();

    step(
        5,
        total,
        "the failover timeline, as the client saw it (ms after the crash)",
    );
    println!(
        "    {:<16} {:<8} {:<8} {:>10} {:>12} {:>10} {:>6}",
        "VIP", "BEFORE", "AFTER", "LAST OK", "ANNOUNCED", "FIRST OK", "LOST"
    );
    let rel = |d: Option<Duration>| match d {
        Some(d) => format!(
            "{:+.0}",
            d.as_secs_f64() * 1e3 - crash_at.as_secs_f64() * 1e3
        ),
        None => "-".into(),
    };
    let mut worst = Duration::ZERO;
    for vip in &targets {
        let o = timeline.outage(*vip, ProbeKind::Udp, crash_at);
        let announced = announcements
            .iter()
            .find(|a| a.vip == *vip && tb.node_by_mac(a.mac).as_deref() != Some(&busiest))
            .map(|a| a.at);
        if moved.contains(vip) {
            worst = worst.max(o.gap);
        }
        println!(
            "    {:<16} {:<8} {:<8} {:>10} {:>12} {:>10} {:>6}",
            vip.to_string(),
            o.before.clone().unwrap_or_else(|| "-".into()),
            o.after.clone().unwrap_or_else(|| "-".into()),
            rel(o.last_ok_before),
            if moved.contains(vip) {
                rel(announced)
            } else {
                "-".into()
            },
            rel(o.recovered_at),
            o.lost
        );
    }
    println!(
        "    the busiest node's {} VIPs moved; the slowest answered again {:.0} ms after the crash",
        moved.len(),
        worst.as_secs_f64() * 1e3
    );
    let svg = out_dir().join("failover-timeline.svg");
    let mut rows = moved.clone();
    rows.extend(targets.iter().filter(|v| !moved.contains(v)).take(2));
    let service_of = |vip: &IpAddr| {
        vips.iter()
            .find(|(_, v)| v == vip)
            .map(|(s, _)| s.clone())
            .unwrap_or_default()
    };
    let rows: Vec<(IpAddr, String)> = rows.iter().map(|v| (*v, service_of(v))).collect();
    write_timeline(
        &svg,
        &TimelinePlot {
            title: &format!("announcer demo: {busiest} crashes (link down + agent killed)"),
            timeline: &timeline,
            rows: &rows,
            nodes: &names,
            crash: crash_at,
            announcements: &announcements,
            window: (
                Duration::from_millis(300),
                worst + Duration::from_millis(500),
            ),
        },
    )?;
    println!("    plot: {}", svg.display());

    step(6, total, "tear down: agents, pins, namespaces");
    drop(tb);
    println!("    done: no namespace, link, pin or process is left behind.");
    Ok(())
}

//! `cargo xtask bench allocator`: issue 29's T6, the address allocator at scale. One pool and
//! `--services` (10,000) LoadBalancer Services of our class without an address are created
//! first; then the allocator Deployment's two replicas start (on the real kube-apiserver: its
//! Pods from `deploy/allocator.yaml`, with Pod-bound tokens and the real RBAC), and the bench
//! measures from that start to the last Service seen with its address.
//!
//! What it reports, and where each figure comes from:
//!
//! * `from_start_s`: allocator start to the last Service whose `status.loadBalancer.ingress`
//!   this bench's own watch saw filled;
//! * `peak_writes_per_s` (the most writes in any 1-s window) and `mean_writes_per_s`: on
//!   kube-apiserver from its audit log (every write of the allocator's account: Service and
//!   pool status patches, Events; not its Lease), on the in-repo server from the times the
//!   watch saw each Service's address appear;
//! * `lost_leaderships` (the Lease's holder changed after the first one took it) and
//!   `renewal_gap_max_s` (the longest time between two `renewTime`s of the holder), from a watch
//!   of the Lease;
//! * `standby_reads`: `get`s of the Lease by the replica that did not lead, beyond its first
//!   (its start-up decision): a standby watches the Lease instead of reading it;
//! * the allocators' CPU seconds and peak RSS (`VmHWM`), from `/proc` at the end.
//!
//! Verdicts: T6's time (≤ 120 s for 10,000 Services; scaled with `--services`, and only judged
//! on the real kube-apiserver) and its write rate (≤ 100 writes/s, or `--write-qps`), and no
//! leadership lost. Progress on stderr; the table on stdout; with `--json`, one JSON document
//! as the last stdout line.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use announcer::ipam::AddressPool;
use announcer_tests::{
    bench::verdict::{Verdict, any_failed, failed_names},
    env::{ApiKind, NAMESPACE, cluster::Cluster, kube::allocator_user},
};
use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Service},
    jiff::Timestamp,
};
use kube::{
    Api, ResourceExt,
    api::PostParams,
    runtime::{WatchStreamExt, watcher},
};
use serde_json::{Value, json};

const NS: &str = "bench";
const CLASS: &str = "announcer.dev/l2";
/// T6's Service count and time.
const T6_SERVICES: usize = 10_000;
const T6_SECONDS: f64 = 120.0;
/// T6's write rate, and the allocator's default `--write-qps`.
const T6_WRITES_PER_S: f64 = 100.0;

#[derive(Parser)]
#[command(about = "Issue 29's T6: the address allocator with 10,000 new Services")]
struct Args {
    /// Also print one JSON document as the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Which API server: `kube` (the real kube-apiserver, T6's) or `inrepo`.
    #[arg(long, default_value = "kube", value_parser = parse_api)]
    api: ApiKind,
    /// How many Services (T6: 10,000).
    #[arg(long, default_value_t = T6_SERVICES)]
    services: usize,
    /// The allocators' `--write-qps` (default: theirs, 100).
    #[arg(long)]
    write_qps: Option<u32>,
    /// Give up this long after the allocators started.
    #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

fn parse_api(s: &str) -> Result<ApiKind, String> {
    match s {
        "kube" => Ok(ApiKind::Kube),
        "inrepo" | "in-repo" => Ok(ApiKind::InRepo),
        _ => Err(format!("unknown API server {s:?}: kube or inrepo")),
    }
}

fn progress(line: &str) {
    eprintln!("[bench-allocator] {line}");
}

/// What the bench's watches saw.
#[derive(Default)]
struct Seen {
    /// Service name → when its address first appeared.
    allocated: HashMap<String, Instant>,
    /// The Lease's holder and renewTime, at each change.
    lease: Vec<(Option<String>, Option<Timestamp>)>,
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The pid of allocator `id` (`announcer allocator --identity ID ...`).
fn allocator_pid(id: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        let has = |s: &str| args.contains(&s.as_bytes());
        if has("allocator")
            && args
                .windows(2)
                .any(|w| w[0] == b"--identity" && w[1] == id.as_bytes())
        {
            return Some(pid);
        }
    }
    None
}

/// CPU seconds (user + system) and peak RSS in MiB of `pid`.
fn cpu_and_rss(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command (which may hold spaces) start after its ')'.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the ')'.
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| fields.get(*i)?.parse::<f64>().ok())
        .sum();
    // SAFETY: sysconf with a valid name has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let hwm_kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN);
    (ticks / hz, hwm_kib / 1024.0)
}

/// The most events in any window of `window` seconds (times in seconds, any order).
fn peak_in_window(times: &mut [f64], window: f64) -> usize {
    times.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..times.len() {
        while times[hi] - times[lo] >= window {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

/// The allocator account's writes in kube-apiserver's audit log (not its Lease): their
/// receive times, as seconds since the Unix epoch.
fn audit_writes(dir: &std::path::Path) -> Result<Vec<f64>> {
    let text = std::fs::read_to_string(dir.join("audit.log")).context("the audit log")?;
    let user = allocator_user();
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["user"]["username"] != user.as_str() {
            continue;
        }
        if !matches!(
            v["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete")
        ) || v["objectRef"]["resource"] == "leases"
        {
            continue;
        }
        let Some(at) = v["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok())
        else {
            continue;
        };
        out.push(at.as_millisecond() as f64 / 1e3);
    }
    Ok(out)
}

/// `get`s of the allocator Lease per allocator Pod, from the audit log.
fn audit_lease_gets(dir: &std::path::Path) -> Result<BTreeMap<String, u64>> {
    let text = std::fs::read_to_string(dir.join("audit.log")).context("the audit log")?;
    let user = allocator_user();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if v["user"]["username"] == user.as_str()
            && v["verb"] == "get"
            && v["objectRef"]["resource"] == "leases"
            && let Some(pod) =
                v["user"]["extra"]["authentication.kubernetes.io/pod-name"][0].as_str()
        {
            *out.entry(pod.to_owned()).or_default() += 1;
        }
    }
    Ok(out)
}

fn service(i: usize) -> Service {
    serde_json::from_value(json!({
        "metadata": {"name": format!("s{i:05}"), "namespace": NS},
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": CLASS,
            // 10,000 NodePorts do not exist (30000-32767): none are needed here.
            "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80, "protocol": "TCP"}],
        },
    }))
    .expect("a Service")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.services == 0 {
        bail!("--services must be at least 1");
    }
    let n = args.services;
    let load = load_average();
    progress(&format!(
        "{n} Services on the {} API server; load average {load:.2}",
        match args.api {
            ApiKind::Kube => "real kube",
            ApiKind::InRepo => "in-repo",
        }
    ));
    let mut c = Cluster::start_on(args.api, "bench-allocator").await;
    if args.api == ApiKind::Kube {
        // The allocator Pods need nodes to be bound to (nothing runs on them).
        for node in ["node-a", "node-b"] {
            c.add_node(node, &[], true).await;
        }
    }
    c.ensure_namespace(NS).await;
    let client = c.client.clone();
    let pool: AddressPool = serde_json::from_value(json!({
        "apiVersion": "announcer.dev/v1alpha1", "kind": "AddressPool",
        "metadata": {"name": "bench"},
        "spec": {"addresses": ["10.200.0.0/16"]},
    }))?;
    Api::<AddressPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .context("create the pool")?;

    let created_at = Instant::now();
    let services: Api<Service> = Api::namespaced(client.clone(), NS);
    {
        let mut made = 0usize;
        let mut creates = futures::stream::iter(0..n)
            .map(|i| {
                let services = services.clone();
                async move {
                    services
                        .create(&PostParams::default(), &service(i))
                        .await
                        .map(|_| ())
                }
            })
            .buffer_unordered(16);
        while let Some(r) = creates.next().await {
            r.context("create a Service")?;
            made += 1;
            if made.is_multiple_of(1000) || made == n {
                progress(&format!(
                    "created {made}/{n} Services ({:.0} s)",
                    created_at.elapsed().as_secs_f64()
                ));
            }
        }
    }

    // The bench's own watches: the Services' addresses and the allocator Lease.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s2 = seen.clone();
    let svc_watch = tokio::spawn(async move {
        let stream = watcher(services, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let objs = match ev {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => vec![s],
                _ => continue,
            };
            let now = Instant::now();
            let mut g = s2.lock().expect("seen");
            for s in objs {
                let has = s
                    .status
                    .as_ref()
                    .and_then(|st| st.load_balancer.as_ref())
                    .and_then(|lb| lb.ingress.as_ref())
                    .is_some_and(|i| !i.is_empty());
                if has {
                    g.allocated.entry(s.name_any()).or_insert(now);
                }
            }
        }
    });
    let s3 = seen.clone();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let lease_watch = tokio::spawn(async move {
        let cfg = watcher::Config::default().fields("metadata.name=announcer-allocator");
        let stream = watcher(leases, cfg).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) = ev {
                let spec = l.spec.unwrap_or_default();
                s3.lock()
                    .expect("seen")
                    .lease
                    .push((spec.holder_identity, spec.renew_time.map(|t| t.0)));
            }
        }
    });

    let extra: Vec<String> = args
        .write_qps
        .map(|q| vec![format!("--write-qps={q}")])
        .unwrap_or_default();
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    progress("starting the allocator's two replicas");
    let ids = c.start_allocators(2, &extra);
    let started = Instant::now();
    let mut last_report = Instant::now();
    loop {
        let done = seen.lock().expect("seen").allocated.len();
        if done >= n {
            break;
        }
        if started.elapsed() > args.timeout {
            eprintln!("{}", c.log_tails());
            bail!(
                "only {done}/{n} Services had an address {:.0} s after the allocators started",
                args.timeout.as_secs_f64()
            );
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            let s = started.elapsed().as_secs_f64();
            progress(&format!(
                "{done}/{n} Services allocated after {s:.0} s ({:.0}/s)",
                done as f64 / s
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A few renewals more, so a starved renewal at the end would show.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let (allocated, lease) = {
        let g = seen.lock().expect("seen");
        (g.allocated.clone(), g.lease.clone())
    };
    svc_watch.abort();
    lease_watch.abort();
    let times: Vec<f64> = allocated
        .values()
        .map(|t| t.duration_since(started).as_secs_f64())
        .collect();
    let from_start_s = times.iter().copied().fold(0.0, f64::max);
    let first_s = times.iter().copied().fold(f64::INFINITY, f64::min);

    // Writes per second.
    let (mut write_times, writes_source) = match c.kube() {
        Some(cp) => (audit_writes(cp.dir())?, "kube-apiserver's audit log"),
        None => (
            times.clone(),
            "the Services' addresses as a watch saw them appear",
        ),
    };
    let writes = write_times.len();
    let peak = peak_in_window(&mut write_times, 1.0);
    let span = match (write_times.first(), write_times.last()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => f64::NAN,
    };
    let mean = writes as f64 / span;

    // The Lease: who held it, how often it was renewed.
    let holders: Vec<&str> = lease
        .iter()
        .filter_map(|(h, _)| h.as_deref())
        .filter(|h| !h.is_empty())
        .collect();
    let leader = holders.first().map(|h| (*h).to_owned());
    let lost = holders.windows(2).filter(|w| w[0] != w[1]).count();
    let mut renewals: Vec<Timestamp> = lease
        .iter()
        .filter(|(h, _)| h.is_some() && h.as_deref() == leader.as_deref())
        .filter_map(|(_, t)| *t)
        .collect();
    renewals.dedup();
    let gap_max = renewals
        .windows(2)
        .map(|w| w[1].duration_since(w[0]).as_secs_f64())
        .fold(0.0, f64::max);

    // The standby's reads of the Lease, beyond its start-up decision.
    let standby = ids.iter().find(|i| Some(*i) != leader.as_ref()).cloned();
    let standby_reads = match (&standby, c.kube()) {
        (Some(id), Some(cp)) => audit_lease_gets(cp.dir())?
            .get(id)
            .copied()
            .unwrap_or(0)
            .saturating_sub(1),
        (Some(id), None) => c
            .api()
            .counts()
            .count(
                Some(id),
                Some(announcer_tests::apiserver::Verb::Get),
                Some("leases"),
            )
            .saturating_sub(1),
        (None, _) => 0,
    };

    let usage = |id: Option<&String>| {
        id.and_then(|i| allocator_pid(i))
            .map_or((f64::NAN, f64::NAN), cpu_and_rss)
    };
    let (cpu_s, rss_mib) = usage(leader.as_ref());
    let (standby_cpu_s, standby_rss_mib) = usage(standby.as_ref());

    let qps_limit = args.write_qps.map_or(T6_WRITES_PER_S, f64::from);
    let time_limit = T6_SECONDS * n as f64 / T6_SERVICES as f64;
    let real = args.api == ApiKind::Kube;
    let verdicts = vec![
        Verdict {
            name: "t6_time".into(),
            text: format!(
                "{n} Services allocated {from_start_s:.1} s after the allocator started{}",
                match (real, n == T6_SERVICES) {
                    (false, _) => " (in-repo API server: T6 is judged on the real kube-apiserver)",
                    (true, false) => " (limit scaled from 120 s for 10,000 Services)",
                    (true, true) => "",
                }
            ),
            value: Some(from_start_s),
            limit: Some(time_limit),
            pass: real.then_some(from_start_s <= time_limit),
        },
        Verdict {
            name: "t6_peak_writes_per_s".into(),
            text: format!(
                "at most {peak} writes in any 1-s window (mean {mean:.1}/s, {writes} writes; {writes_source})"
            ),
            value: Some(peak as f64),
            limit: Some(qps_limit),
            pass: Some(peak as f64 <= qps_limit),
        },
        Verdict {
            name: "no_lost_leadership".into(),
            text: format!(
                "{lost} leadership changes; longest gap between two Lease renewals {gap_max:.1} s"
            ),
            value: Some(lost as f64),
            limit: Some(0.0),
            pass: Some(lost == 0),
        },
    ];

    println!("bench-allocator: {n} Services, one pool, two allocator replicas");
    println!(
        "  API server                 {}",
        if real {
            "real kube-apiserver"
        } else {
            "in-repo"
        }
    );
    println!("  load average at start      {load:.2}");
    println!("  first Service allocated    {first_s:.1} s");
    println!("  last Service allocated     {from_start_s:.1} s");
    println!("  writes                     {writes} ({writes_source})");
    println!("  peak writes in 1 s         {peak}");
    println!("  mean writes per second     {mean:.1}");
    println!("  lost leaderships           {lost}");
    println!("  longest renewal gap        {gap_max:.1} s");
    println!("  standby Lease reads        {standby_reads}");
    println!("  allocator CPU              {cpu_s:.1} s (standby {standby_cpu_s:.1} s)");
    println!("  allocator peak RSS         {rss_mib:.0} MiB (standby {standby_rss_mib:.0} MiB)");
    for v in &verdicts {
        println!("  {:<4} {:<22} {}", v.mark(), v.name, v.text);
    }
    if args.json {
        let num = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
        let doc = json!({
            "bench": "allocator",
            "api": if real { "kube" } else { "inrepo" },
            "services": n,
            "write_qps": qps_limit,
            "load_average_at_start": num(load),
            "outcome": {
                "from_start_s": num(from_start_s),
                "first_allocated_s": num(first_s),
                "writes": writes,
                "writes_source": writes_source,
                "peak_writes_per_s": peak,
                "mean_writes_per_s": num(mean),
                "lost_leaderships": lost,
                "renewal_gap_max_s": num(gap_max),
                "standby_reads": standby_reads,
                "allocator_cpu_s": num(cpu_s),
                "allocator_peak_rss_mib": num(rss_mib),
                "standby_cpu_s": num(standby_cpu_s),
                "standby_peak_rss_mib": num(standby_rss_mib),
            },
            "verdicts": verdicts,
        });
        println!("{doc}");
    }
    drop(c);
    if any_failed(&verdicts) {
        bail!("failed: {}", failed_names(&verdicts).join(", "));
    }
    Ok(())
}

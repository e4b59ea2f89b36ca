//! `cargo xtask bench control-plane`: API reads and writes per second that the agents cause,
//! against the in-repo API server, for both election modes side by side.
//!
//! Why: the node-lease design claims that its API cost is a node Lease renewal per node every
//! few seconds (≤ 0.5 writes/s per node), whatever the number of Services, and that it reads
//! only through watches; the lease-per-service baseline (Cilium's and kube-vip's way, with
//! Cilium's 15s/5s/2s timings) GETs every Lease every retry period from every eligible node and
//! renews every held Lease, so its cost grows with Services × nodes. Only counting requests at
//! the server shows both, so every case starts a fresh [`Cluster`] (the server in-process, real
//! `announcer agent --no-dataplane` processes, one token per node), waits until every VIP has
//! exactly one owner, resets the server's counters and counts for a fixed window.
//!
//! * [`fixture`]: the Nodes and Services of a case, created concurrently, and the ownership
//!   check through every agent's `/state`.
//! * [`report`]: the table, the verdicts and the JSON document.
//! * [`plot`]: requests per second against Services, one line per mode and agent count (SVG).
//!
//! On a small machine the heaviest lease-per-service cases demand far more requests than the
//! server and the agents can serve (50 agents × 1,000 Services is 25,000 GETs/s). The benchmark
//! measures what is achieved, reports the demanded rate next to it and marks the case
//! saturated; it never waits unboundedly. Those cases ([`Case::heavy`]) run only with
//! `--include-heavy`. A case that does not converge (every agent ready and every VIP with
//! exactly one owner within the timeout) is not saturation but a broken election: it fails.

pub mod fixture;
pub mod plot;
pub mod report;

use std::time::{Duration, Instant};

use crate::{
    apiserver::{Counts, Verb},
    bench::cpu,
    env::{
        ApiKind,
        cluster::Cluster,
        kube::{AuditRecord, agent_user},
    },
};

/// The lease-per-service retry period used (Cilium's default): every eligible node GETs every
/// Lease this often.
pub const SERVICE_LEASE_RETRY: Duration = Duration::from_secs(2);
/// The node Lease renewal period (the agent's default `--lease-renew`).
pub const NODE_LEASE_RENEW: Duration = Duration::from_secs(3);
/// Target: steady-state API writes per node per second in node-lease mode.
pub const MAX_NODE_LEASE_WRITES_PER_NODE: f64 = 0.5;
/// A case is saturated when it achieves less than this fraction of its demanded rate.
pub const SATURATION: f64 = 0.8;
/// Lease-per-service cases demanding more GETs per second than this are heavy: on a 2-core
/// machine they only measure the saturation, so they run only on request (`--include-heavy`).
/// Of the default matrix that is lease-per-service 50 agents × 1,000 Services (25,000 GETs/s).
pub const HEAVY_READS_PER_S: f64 = 10_000.0;
/// The client the benchmark itself uses (not counted as agent traffic).
pub const ADMIN: &str = "admin";
/// Most to wait, on a real API server, for the DaemonSet Pods of a case's nodes (their tokens
/// name them) before starting the agents.
pub const AGENT_POD_TIMEOUT: Duration = Duration::from_secs(180);

/// An election mode, as `announcer agent --election` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    NodeLease,
    LeasePerService,
}

impl Mode {
    /// Both, in report order.
    pub const ALL: [Mode; 2] = [Mode::NodeLease, Mode::LeasePerService];

    /// The `--election` value.
    pub fn name(self) -> &'static str {
        match self {
            Mode::NodeLease => "node-lease",
            Mode::LeasePerService => "lease-per-service",
        }
    }

    /// The mode named `name` (as [`Mode::name`] spells it).
    pub fn parse(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The agent flags of this mode (lease-per-service with Cilium's defaults, spelled out).
    pub fn agent_args(self) -> &'static [&'static str] {
        match self {
            Mode::NodeLease => &["--election", "node-lease"],
            Mode::LeasePerService => &[
                "--election",
                "lease-per-service",
                "--service-lease-duration",
                "15s",
                "--service-lease-renew-deadline",
                "5s",
                "--service-lease-retry",
                "2s",
            ],
        }
    }
}

/// One cell of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Case {
    pub mode: Mode,
    pub agents: usize,
    pub services: usize,
}

impl Case {
    /// GETs per second the mode asks for in steady state: none in node-lease mode (watches
    /// only); every node × every Lease per retry period in lease-per-service mode.
    pub fn demanded_reads_per_s(&self) -> f64 {
        match self.mode {
            Mode::NodeLease => 0.0,
            Mode::LeasePerService => {
                (self.agents * self.services) as f64 / SERVICE_LEASE_RETRY.as_secs_f64()
            }
        }
    }

    /// Writes per second the mode asks for in steady state: one node Lease renewal per node per
    /// renewal period; one renewal per Service Lease per retry period.
    pub fn demanded_writes_per_s(&self) -> f64 {
        match self.mode {
            Mode::NodeLease => self.agents as f64 / NODE_LEASE_RENEW.as_secs_f64(),
            Mode::LeasePerService => self.services as f64 / SERVICE_LEASE_RETRY.as_secs_f64(),
        }
    }

    /// Run only with `--include-heavy` (see [`HEAVY_READS_PER_S`]).
    pub fn heavy(&self) -> bool {
        self.demanded_reads_per_s() > HEAVY_READS_PER_S
    }

    /// `node-lease 10×100`.
    pub fn label(&self) -> String {
        format!(
            "{} {} agents × {} services",
            self.mode.name(),
            self.agents,
            self.services
        )
    }
}

/// Which cases run and which are left out, and why.
#[derive(Clone, Debug, Default)]
pub struct Matrix {
    pub cases: Vec<Case>,
    /// Left-out cases with the reason (and the flag that brings them back).
    pub skipped: Vec<(Case, String)>,
}

/// Every mode of `modes` × `agents` × `services`, minus the cases above the limits and, unless
/// `include_heavy`, the [`Case::heavy`] ones. Ordered by mode, then agents, then services.
pub fn matrix(
    modes: &[Mode],
    agents: &[usize],
    services: &[usize],
    max_agents: Option<usize>,
    max_services: Option<usize>,
    include_heavy: bool,
) -> Matrix {
    let mut m = Matrix::default();
    for mode in Mode::ALL.into_iter().filter(|m| modes.contains(m)) {
        for &a in agents {
            for &s in services {
                let case = Case {
                    mode,
                    agents: a,
                    services: s,
                };
                if max_agents.is_some_and(|m| a > m) {
                    m.skipped
                        .push((case, format!("--max-agents {}", max_agents.unwrap_or(0))));
                } else if max_services.is_some_and(|m| s > m) {
                    m.skipped.push((
                        case,
                        format!("--max-services {}", max_services.unwrap_or(0)),
                    ));
                } else if case.heavy() && !include_heavy {
                    m.skipped.push((
                        case,
                        format!(
                            "heavy: demands {:.0} GETs/s (> {HEAVY_READS_PER_S:.0}); run with --include-heavy",
                            case.demanded_reads_per_s()
                        ),
                    ));
                } else {
                    m.cases.push(case);
                }
            }
        }
    }
    m
}

/// How long to measure and to wait, and extra agent flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The measurement window.
    pub window: Duration,
    /// Most to wait for every agent ready and every VIP with exactly one owner.
    pub converge_timeout: Duration,
    /// Concurrent requests while creating Nodes and Services.
    pub create_concurrency: usize,
    /// Flags added to every agent's command line (after the mode's).
    pub agent_args: Vec<String>,
}

/// One case's result.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub case: Case,
    /// Creating the Nodes and Services.
    pub setup_s: f64,
    /// From starting the agents until every one was ready and every VIP had one owner
    /// (`None`: not within the timeout).
    pub converge_s: Option<f64>,
    /// How long the case waited for that at most.
    pub converge_timeout_s: f64,
    /// Ownership at the last poll of that wait (when it timed out: how far it got).
    pub converge_state: fixture::Ownership,
    /// The measurement window as it really lasted.
    pub window_s: f64,
    /// The agents' requests in the window.
    pub requests: Requests,
    /// Busy cores of the whole machine in the window.
    pub busy_cores: f64,
    /// Cores used by this process (the API server, mostly) in the window.
    pub apiserver_cores: f64,
    /// Cores used by the agent processes together in the window.
    pub agents_cores: f64,
    /// Ownership at the end of the window.
    pub end: fixture::Ownership,
    /// The API server counted at.
    pub api: ApiKind,
    /// Bytes through the agents' relays in the window, summed over the agents (real API
    /// server only: the in-repo one is reached directly).
    pub relay: Option<crate::env::cluster::RelayBytes>,
}

/// Agent requests counted in a window.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Requests {
    pub gets: u64,
    pub lists: u64,
    pub watches: u64,
    /// create + update + patch + delete + deletecollection.
    pub writes: u64,
    pub lease_writes: u64,
    pub event_writes: u64,
    /// Most writes by one agent.
    pub max_node_writes: u64,
}

const WRITES: [Verb; 5] = [
    Verb::Create,
    Verb::Update,
    Verb::Patch,
    Verb::Delete,
    Verb::DeleteCollection,
];

impl Requests {
    /// Sums the counters of every client but [`ADMIN`].
    pub fn from_counts(counts: &Counts) -> Requests {
        let mut r = Requests::default();
        let mut per_node = std::collections::BTreeMap::<&str, u64>::new();
        for e in counts.entries.iter().filter(|e| e.client != ADMIN) {
            match e.verb {
                Verb::Get => r.gets += e.count,
                Verb::List => r.lists += e.count,
                Verb::Watch => r.watches += e.count,
                v if WRITES.contains(&v) => {
                    r.writes += e.count;
                    *per_node.entry(&e.client).or_default() += e.count;
                    match e.resource.as_str() {
                        "leases" => r.lease_writes += e.count,
                        "events" => r.event_writes += e.count,
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        r.max_node_writes = per_node.values().copied().max().unwrap_or(0);
        r
    }

    /// Counts the audit records of the agents (their ServiceAccount, with a node claim),
    /// one per request (a watch when it started).
    pub fn from_audit(records: &[AuditRecord]) -> Requests {
        // Audit records of other users (the benchmark, the controllers, the stand-in
        // kubelets) are not agent traffic.
        let agent = agent_user();
        let mut r = Requests::default();
        let mut per_node = std::collections::BTreeMap::<&str, u64>::new();
        for (rec, node) in records
            .iter()
            .filter(|rec| rec.user == agent)
            .filter_map(|rec| Some((rec, rec.node.as_deref()?)))
        {
            match rec.verb.as_str() {
                "get" => r.gets += 1,
                "list" => r.lists += 1,
                "watch" => r.watches += 1,
                "create" | "update" | "patch" | "delete" | "deletecollection" => {
                    r.writes += 1;
                    *per_node.entry(node).or_default() += 1;
                    match rec.resource.as_str() {
                        "leases" => r.lease_writes += 1,
                        "events" => r.event_writes += 1,
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        r.max_node_writes = per_node.values().copied().max().unwrap_or(0);
        r
    }

    /// GETs + LISTs.
    pub fn reads(&self) -> u64 {
        self.gets + self.lists
    }
}

impl Measurement {
    fn rate(&self, n: u64) -> f64 {
        if self.window_s > 0.0 {
            n as f64 / self.window_s
        } else {
            0.0
        }
    }

    pub fn reads_per_s(&self) -> f64 {
        self.rate(self.requests.reads())
    }

    pub fn watch_opens_per_s(&self) -> f64 {
        self.rate(self.requests.watches)
    }

    pub fn writes_per_s(&self) -> f64 {
        self.rate(self.requests.writes)
    }

    /// Mean writes per second per agent.
    pub fn writes_per_s_per_node(&self) -> f64 {
        self.writes_per_s() / self.case.agents.max(1) as f64
    }

    pub fn max_node_writes_per_s(&self) -> f64 {
        self.rate(self.requests.max_node_writes)
    }

    pub fn lease_writes_per_s(&self) -> f64 {
        self.rate(self.requests.lease_writes)
    }

    pub fn event_writes_per_s(&self) -> f64 {
        self.rate(self.requests.event_writes)
    }

    /// Every request (reads, watch opens, writes) per second.
    pub fn requests_per_s(&self) -> f64 {
        self.reads_per_s() + self.watch_opens_per_s() + self.writes_per_s()
    }

    /// Mean bytes per second from the API server to one agent in the window (TLS bytes at the
    /// agent's relay; real API server only).
    pub fn from_api_bytes_per_s_per_node(&self) -> Option<f64> {
        self.relay
            .map(|b| self.rate(b.from_api) / self.case.agents.max(1) as f64)
    }

    /// Mean bytes per second from one agent to the API server in the window.
    pub fn to_api_bytes_per_s_per_node(&self) -> Option<f64> {
        self.relay
            .map(|b| self.rate(b.to_api) / self.case.agents.max(1) as f64)
    }

    /// Every agent ready and every VIP with exactly one owner within the timeout.
    pub fn converged(&self) -> bool {
        self.converge_s.is_some()
    }

    /// Converged, but achieved less than [`SATURATION`] of the demanded GETs
    /// (lease-per-service) or Lease renewals: the numbers show what the machine could do, not
    /// what the mode asks for. The demand is counted in whole periods that fit in the window (a
    /// 3 s window holds one 2 s round for sure, not 1.5), so a short window is not mistaken for
    /// saturation. A case that never converged is not saturated but failed (see
    /// [`Measurement::converged`]).
    pub fn saturated(&self) -> bool {
        let rounds = |period: Duration| (self.window_s / period.as_secs_f64()).floor();
        let short = |got: u64, per_s: f64, period: Duration| {
            let want = per_s * period.as_secs_f64() * rounds(period);
            want > 0.0 && (got as f64) < SATURATION * want
        };
        let write_period = match self.case.mode {
            Mode::NodeLease => NODE_LEASE_RENEW,
            Mode::LeasePerService => SERVICE_LEASE_RETRY,
        };
        self.converged()
            && (short(
                self.requests.reads(),
                self.case.demanded_reads_per_s(),
                SERVICE_LEASE_RETRY,
            ) || short(
                self.requests.lease_writes,
                self.case.demanded_writes_per_s(),
                write_period,
            ))
    }
}

/// The node names of a case: `node-00`, `node-01`…
pub fn node_names(agents: usize) -> Vec<String> {
    (0..agents).map(|i| format!("node-{i:02}")).collect()
}

/// Runs one case on a fresh [`Cluster`] on `api`; every agent is killed (and on a real API
/// server the control plane stopped) before this returns. On the in-repo server the requests
/// are its own counts; on kube-apiserver they are the audit records of the agents'
/// ServiceAccount written in the window, and each agent reaches the server through a
/// counting relay of its own (bytes both ways).
pub async fn run_case(
    case: Case,
    api: ApiKind,
    s: &Settings,
    progress: &dyn Fn(&str),
) -> Measurement {
    let started = Instant::now();
    let name = format!(
        "bench-{}-{}x{}",
        case.mode.name(),
        case.agents,
        case.services
    );
    let mut c = match api {
        ApiKind::InRepo => Cluster::start(&name).await,
        ApiKind::Kube => {
            progress("  starting etcd, kube-apiserver, controllers (deploy/ applied)");
            let mut c = Cluster::start_on(ApiKind::Kube, &name).await;
            c.relay_agents(true);
            progress(&format!(
                "  control plane up in {:.1} s",
                started.elapsed().as_secs_f64()
            ));
            c
        }
    };
    let nodes = node_names(case.agents);
    let vips = fixture::vips(case.services);
    fixture::create_nodes(&c, &nodes, s.create_concurrency).await;
    fixture::create_services(&c, &vips, &nodes[0], s.create_concurrency).await;
    if let Some(cp) = c.kube() {
        progress(&format!(
            "  {} Nodes and {} Services created in {:.1} s; waiting for the {} agent Pods",
            case.agents,
            case.services,
            started.elapsed().as_secs_f64(),
            case.agents
        ));
        // The agents' tokens are bound to their DaemonSet Pods: wait for every Pod here, so
        // the convergence time is the agents' and not the scheduler's.
        let pods =
            futures::future::join_all(nodes.iter().map(|n| cp.agent_pod(n, AGENT_POD_TIMEOUT)))
                .await;
        if let Some(e) = pods.into_iter().find_map(Result::err) {
            progress(&format!("  an agent Pod did not come: {e}"));
        }
    }
    let setup_s = started.elapsed().as_secs_f64();

    let agents_started = Instant::now();
    for (i, n) in nodes.iter().enumerate() {
        let args: Vec<&str> = case
            .mode
            .agent_args()
            .iter()
            .copied()
            .chain(s.agent_args.iter().map(String::as_str))
            .collect();
        c.start_agent(n, &args);
        if api == ApiKind::Kube && (i + 1) % 10 == 0 && i + 1 < nodes.len() {
            progress(&format!(
                "  {} of {} agents started ({:.1} s)",
                i + 1,
                nodes.len(),
                agents_started.elapsed().as_secs_f64()
            ));
        }
    }
    let mut last_report = Instant::now();
    let (converge_s, converge_state) = loop {
        let last = fixture::ownership(&c, &vips);
        if last.converged(case.agents) {
            break (Some(agents_started.elapsed().as_secs_f64()), last);
        }
        if agents_started.elapsed() >= s.converge_timeout {
            progress(&format!(
                "  not converged after {:?} ({last}); measuring anyway",
                s.converge_timeout
            ));
            break (None, last);
        }
        if last_report.elapsed() >= Duration::from_secs(10) {
            progress(&format!(
                "  converging ({:.0} s): {last}",
                agents_started.elapsed().as_secs_f64()
            ));
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    // Node-lease owners then write each Service's Announced condition (20 writes/s per
    // node at most): converging too, so wait for it before the window opens.
    let mut converge_s = converge_s;
    if converge_s.is_some() && case.mode == Mode::NodeLease {
        loop {
            let done = fixture::announced_services(&c).await;
            if done >= vips.len() {
                converge_s = Some(agents_started.elapsed().as_secs_f64());
                break;
            }
            if agents_started.elapsed() >= s.converge_timeout {
                progress(&format!(
                    "  {done} of {} Announced conditions after {:?}; measuring anyway",
                    vips.len(),
                    s.converge_timeout
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    if let Some(t) = converge_s {
        progress(&format!(
            "  converged in {t:.1} s ({converge_state}, Announced conditions written); measuring {:?}",
            s.window
        ));
    }

    let server_cpu = || match api {
        ApiKind::InRepo => 0.0,
        ApiKind::Kube => fixture::children_cpu_s(&["kube-apiserver", "etcd"]),
    };
    let relay_total = |c: &Cluster| {
        nodes.iter().filter_map(|n| c.relay_bytes(n)).fold(
            None,
            |acc: Option<crate::env::cluster::RelayBytes>, b| {
                let a = acc.unwrap_or_default();
                Some(crate::env::cluster::RelayBytes {
                    to_api: a.to_api + b.to_api,
                    from_api: a.from_api + b.from_api,
                })
            },
        )
    };
    let audit_len = |c: &Cluster| {
        c.kube().map(|cp| {
            cp.audit()
                .unwrap_or_else(|e| panic!("reading the audit log: {e}"))
                .len()
        })
    };
    let cpu_before = cpu::Snapshot::take().ok();
    let agents_before = fixture::agents_cpu_s();
    let server_before = server_cpu();
    let audit_before = audit_len(&c);
    let relay_before = relay_total(&c);
    if api == ApiKind::InRepo {
        c.api().reset_counts();
    }
    let window_start = Instant::now();
    tokio::time::sleep(s.window).await;
    let requests = match c.kube() {
        None => Requests::from_counts(&c.api().counts()),
        Some(cp) => {
            let records = cp
                .audit()
                .unwrap_or_else(|e| panic!("reading the audit log: {e}"));
            Requests::from_audit(&records[audit_before.unwrap_or(0).min(records.len())..])
        }
    };
    let relay = relay_total(&c).map(|after| {
        let before = relay_before.unwrap_or_default();
        crate::env::cluster::RelayBytes {
            to_api: after.to_api - before.to_api,
            from_api: after.from_api - before.from_api,
        }
    });
    let window_s = window_start.elapsed().as_secs_f64();
    let agents_cpu = fixture::agents_cpu_s() - agents_before;
    let server_used = server_cpu() - server_before;
    let used = cpu_before.and_then(|b| b.since().ok()).unwrap_or_default();
    let end = fixture::ownership(&c, &vips);
    drop(c);
    let per = |x: f64| {
        if used.wall_s > 0.0 {
            x / used.wall_s
        } else {
            0.0
        }
    };
    Measurement {
        case,
        setup_s,
        converge_s,
        converge_timeout_s: s.converge_timeout.as_secs_f64(),
        converge_state,
        window_s,
        requests,
        busy_cores: per(used.machine_s),
        // The in-repo server runs in this process; kube-apiserver and etcd are children.
        apiserver_cores: match api {
            ApiKind::InRepo => per(used.process_s),
            ApiKind::Kube => per(server_used),
        },
        agents_cores: per(agents_cpu),
        end,
        api,
        relay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::CountEntry;

    fn entry(client: &str, verb: Verb, resource: &str, count: u64) -> CountEntry {
        CountEntry {
            client: client.into(),
            verb,
            group: String::new(),
            resource: resource.into(),
            count,
        }
    }

    #[test]
    fn requests_leave_out_the_benchmark_and_split_writes() {
        let counts = Counts {
            entries: vec![
                entry(ADMIN, Verb::Create, "services", 100),
                entry("node-00", Verb::Update, "leases", 7),
                entry("node-01", Verb::Update, "leases", 6),
                entry("node-01", Verb::Create, "events", 2),
                entry("node-01", Verb::Get, "leases", 40),
                entry("node-00", Verb::List, "services", 1),
                entry("node-00", Verb::Watch, "services", 3),
            ],
        };
        let r = Requests::from_counts(&counts);
        assert_eq!(
            r,
            Requests {
                gets: 40,
                lists: 1,
                watches: 3,
                writes: 15,
                lease_writes: 13,
                event_writes: 2,
                max_node_writes: 8,
            }
        );
        assert_eq!(r.reads(), 41);
    }

    #[test]
    fn heavy_cases_are_left_out_unless_included() {
        let (agents, services) = ([3, 10, 50], [10, 100, 1000]);
        let m = matrix(&Mode::ALL, &agents, &services, None, None, false);
        assert_eq!(m.cases.len() + m.skipped.len(), 18);
        let skipped: Vec<Case> = m.skipped.iter().map(|(c, _)| *c).collect();
        assert_eq!(
            skipped,
            vec![Case {
                mode: Mode::LeasePerService,
                agents: 50,
                services: 1000
            }]
        );
        assert!(
            m.skipped[0].1.contains("--include-heavy"),
            "{}",
            m.skipped[0].1
        );
    }

    #[test]
    fn include_heavy_runs_the_whole_matrix() {
        let (agents, services) = ([3, 10, 50], [10, 100, 1000]);
        let all = matrix(&Mode::ALL, &agents, &services, None, None, true);
        assert_eq!(all.cases.len(), 18);
    }

    #[test]
    fn limits_leave_out_the_larger_cases() {
        let (agents, services) = ([3, 10, 50], [10, 100, 1000]);
        let small = matrix(&Mode::ALL, &agents, &services, Some(10), Some(100), false);
        assert_eq!(small.cases.len(), 8);
        let one = matrix(&[Mode::NodeLease], &[3], &[10], None, None, false);
        assert_eq!(one.cases.len(), 1);
    }

    fn measured(case: Case, window_s: f64, gets: u64, lease_writes: u64) -> Measurement {
        Measurement {
            case,
            setup_s: 0.0,
            converge_s: Some(1.0),
            converge_timeout_s: 60.0,
            converge_state: fixture::Ownership::default(),
            window_s,
            requests: Requests {
                gets,
                writes: lease_writes,
                lease_writes,
                ..Requests::default()
            },
            busy_cores: 0.0,
            apiserver_cores: 0.0,
            agents_cores: 0.0,
            end: fixture::Ownership::default(),
            api: ApiKind::InRepo,
            relay: None,
        }
    }

    #[test]
    fn saturation_counts_whole_rounds_only() {
        let case = Case {
            mode: Mode::LeasePerService,
            agents: 3,
            services: 10,
        };
        // A 3 s window holds one sure 2 s round: 30 GETs and 10 renewals are the demand met.
        assert!(!measured(case, 3.0, 30, 10).saturated());
        assert!(measured(case, 3.0, 20, 10).saturated());
        assert!(measured(case, 20.0, 150, 50).saturated());
        assert!(!measured(case, 20.0, 300, 100).saturated());
    }

    #[test]
    fn a_case_that_never_converged_is_not_saturated_but_unconverged() {
        let case = Case {
            mode: Mode::NodeLease,
            agents: 3,
            services: 10,
        };
        let mut unconverged = measured(case, 20.0, 0, 20);
        unconverged.converge_s = None;
        assert!(!unconverged.converged());
        assert!(!unconverged.saturated());
    }

    #[test]
    fn demanded_rates_follow_the_modes() {
        let lps = Case {
            mode: Mode::LeasePerService,
            agents: 50,
            services: 1000,
        };
        assert_eq!(lps.demanded_reads_per_s(), 25_000.0);
        assert_eq!(lps.demanded_writes_per_s(), 500.0);
        let nl = Case {
            mode: Mode::NodeLease,
            ..lps
        };
        assert_eq!(nl.demanded_reads_per_s(), 0.0);
        assert!(nl.demanded_writes_per_s() / 50.0 <= MAX_NODE_LEASE_WRITES_PER_NODE);
    }
}

//! `announcer status`: one node's view — what its data plane answers and what its agent
//! decided — as a table or one JSON document.
//!
//! Why both sources: the pinned maps are the truth about what the node answers *now* (the
//! XDP program answers from them even while the agent is down or restarting), and the agent
//! is the truth about *why*: which VIPs it owns, for which Service, and which peers it hears.
//! Reading the maps needs no agent, so an operator still sees the answering entries, their
//! expiry and counters when the agent is unreachable; the report says so, and the command
//! exits non-zero if the agent was asked for explicitly.
//!
//! `--cluster` is the other view, the whole cluster's from the API server instead of one
//! node's ([`cluster`]).

pub mod cluster;
mod table;
#[cfg(test)]
mod tests;

use std::{
    collections::BTreeMap,
    net::IpAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use serde::Serialize;

pub use self::table::render;
use crate::{
    dataplane::{Dataplane, Error, VipStatus, pins::pinned_interfaces},
    state::{AgentState, PeerState},
};

/// Where the agent serves `/state` by default (its `--http-address`; `/state` answers loopback
/// only, see the agent's `http` module).
pub const DEFAULT_AGENT: &str = "http://127.0.0.1:9746";

/// `announcer status`' flags.
#[derive(clap::Args)]
pub struct StatusArgs {
    /// Only this interface (default: every interface with pins).
    #[arg(long)]
    pub iface: Option<String>,
    /// One JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The agent's HTTP address. Without it the default (http://127.0.0.1:9746) is asked
    /// and an unreachable agent is only reported; given, an unreachable agent also makes
    /// the command exit 69 (after printing what the maps say). The agent serves `/state` on
    /// loopback only: run this on the node, or through `kubectl port-forward`.
    #[arg(long, env = "ANNOUNCER_AGENT")]
    pub agent: Option<String>,
    /// Do not ask the agent: the data plane only.
    #[arg(long, conflicts_with = "agent")]
    pub no_agent: bool,
    /// The whole cluster instead of this node: every LoadBalancer VIP with its Service, pool,
    /// announcing node, interface and age, read from the API server (the Services'
    /// `announcer.dev/Announced` condition), not from the maps or the agent.
    #[arg(long, conflicts_with_all = ["iface", "no_agent"])]
    pub cluster: bool,
    /// With --cluster: the kubeconfig to use (default: in-cluster, $KUBECONFIG, ~/.kube/config).
    #[arg(long, requires = "cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// With --cluster: only this namespace's Services (default: all namespaces).
    #[arg(short = 'n', long, requires = "cluster")]
    pub namespace: Option<String>,
}

/// `announcer status`: the maps, merged with the agent's `/state`; with `--cluster`, the
/// cluster's view ([`cluster::run`]).
pub fn run(root: &Path, args: StatusArgs) -> ExitCode {
    let StatusArgs {
        iface,
        json,
        agent,
        no_agent,
        cluster: whole_cluster,
        kubeconfig,
        namespace,
    } = args;
    if whole_cluster {
        return cluster::run(kubeconfig.as_deref(), namespace.as_deref(), json);
    }
    let url = (!no_agent).then(|| agent.as_deref().unwrap_or(DEFAULT_AGENT));
    let report = match gather(root, iface.as_deref(), url) {
        Ok(r) => r,
        Err(e) => return super::fail(&e),
    };
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("error: cannot encode the report: {e}");
                return ExitCode::from(70);
            }
        }
    } else {
        print!("{}", render(&report));
    }
    if report.agent_unreachable() && agent.is_some() {
        // EX_UNAVAILABLE: the maps were shown, the agent asked for did not answer.
        return ExitCode::from(69);
    }
    ExitCode::SUCCESS
}

/// How long to wait for the agent: it answers from memory, so this is generous.
const AGENT_TIMEOUT: Duration = Duration::from_secs(3);

/// One interface's data plane.
#[derive(Clone, Debug, Serialize)]
pub struct InterfaceReport {
    /// Interface name.
    pub iface: String,
    /// Its index (what the map keys carry).
    pub ifindex: u32,
    /// The program's per-outcome frame counters, summed over CPUs.
    pub counters: BTreeMap<String, u64>,
    /// Its entries.
    pub vips: Vec<VipRow>,
}

/// One VIP: a map entry, an agent-owned VIP, or both.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VipRow {
    /// The VIP.
    pub vip: IpAddr,
    /// Interface it is answered on.
    pub iface: String,
    /// 802.1Q VLAN (0: untagged).
    pub vlan: u16,
    /// MAC answered with; `None` when not in the data plane (`--no-dataplane`).
    pub mac: Option<String>,
    /// The program answers it now.
    pub live: bool,
    /// Seconds before the entry expires unless refreshed; `None` if permanent or not in the
    /// data plane.
    pub expires_in_s: Option<f64>,
    /// The entry never expires (`vip add --permanent`).
    pub permanent: bool,
    /// ARP requests / Neighbor Solicitations answered.
    pub answered: u64,
    /// Requests seen after the entry expired.
    pub expired: u64,
    /// Malformed requests for it.
    pub malformed: u64,
    /// The node whose agent announces it: this node if its agent says it owns it; `None` if
    /// the agent does not (an entry added by hand, or left to expire) or is unreachable.
    pub owner: Option<String>,
    /// `namespace/name` of its Service, from the agent.
    pub service: Option<String>,
    /// In this node's pinned maps.
    pub in_dataplane: bool,
}

impl VipRow {
    fn from_map(iface: &str, r: &VipStatus) -> Self {
        VipRow {
            vip: r.vip.addr,
            iface: iface.to_owned(),
            vlan: r.vip.vlan,
            mac: Some(r.mac.to_string()),
            live: r.is_live(),
            expires_in_s: r.expires_in.map(|d| d.as_secs_f64()),
            permanent: r.expires_in.is_none(),
            answered: r.stats.answered,
            expired: r.stats.expired,
            malformed: r.stats.malformed,
            owner: None,
            service: None,
            in_dataplane: true,
        }
    }
}

/// What the agent said, or why it could not be asked.
#[derive(Clone, Debug, Serialize)]
pub struct AgentReport {
    /// Where it was asked.
    pub url: String,
    /// It answered `/state`.
    pub reachable: bool,
    /// Why not, if it did not.
    pub error: Option<String>,
    /// Its `/state`.
    pub state: Option<AgentState>,
}

/// The whole report (the `--json` document).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// This node, per its agent.
    pub node: Option<String>,
    /// The pin root read.
    pub pin_root: PathBuf,
    /// The agent (`None`: not asked).
    pub agent: Option<AgentReport>,
    /// Per interface with pins: counters and entries.
    pub interfaces: Vec<InterfaceReport>,
    /// Every VIP, map entries and agent-owned VIPs merged, sorted.
    pub vips: Vec<VipRow>,
    /// The agent's peers and their heartbeat age.
    pub peers: Vec<PeerState>,
    /// Problems found on the way (stale pins), for stderr.
    pub warnings: Vec<String>,
}

impl Report {
    /// The agent was asked and did not answer.
    pub fn agent_unreachable(&self) -> bool {
        self.agent.as_ref().is_some_and(|a| !a.reachable)
    }
}

/// GETs `/state` from the agent at `base` (e.g. [`DEFAULT_AGENT`]).
pub fn fetch_agent(base: &str) -> Result<AgentState, String> {
    let url = format!("{}{}", base.trim_end_matches('/'), crate::state::PATH);
    let body = ureq::get(&url)
        .timeout(AGENT_TIMEOUT)
        .call()
        .map_err(|e| match e {
            // The agent says why (e.g. 403: `/state` is served on loopback only).
            ureq::Error::Status(code, r) => {
                let why = r.into_string().unwrap_or_default();
                format!("{url}: status code {code}: {}", why.trim())
            }
            e => e.to_string(),
        })?
        .into_string()
        .map_err(|e| format!("reading the answer: {e}"))?;
    serde_json::from_str(&body).map_err(|e| format!("not an agent's /state: {e}"))
}

/// Reads the maps of every interface with pins under `root` (or only `only`), asks the agent
/// at `agent` (unless `None`), and merges the two.
pub fn gather(root: &Path, only: Option<&str>, agent: Option<&str>) -> Result<Report, Error> {
    let ifaces = match only {
        Some(i) => vec![i.to_owned()],
        None => pinned_interfaces(root),
    };
    let mut interfaces = Vec::new();
    let mut warnings = Vec::new();
    for iface in ifaces {
        let dp = match Dataplane::open(root, &iface) {
            Ok(dp) => dp,
            Err(Error::NoSuchInterface(_)) if only.is_none() => {
                warnings.push(format!(
                    "pins for {iface} remain but the interface is gone; \
                     remove them with `announcer unload --iface {iface}`"
                ));
                continue;
            }
            Err(e) => return Err(e),
        };
        let counters = dp
            .counters()?
            .iter()
            .map(|(o, n)| (o.name().to_owned(), *n))
            .collect();
        let vips = dp
            .list()?
            .iter()
            .map(|r| VipRow::from_map(&iface, r))
            .collect();
        interfaces.push(InterfaceReport {
            iface: iface.clone(),
            ifindex: dp.ifindex(),
            counters,
            vips,
        });
    }
    let agent = agent.map(|url| match fetch_agent(url) {
        Ok(state) => AgentReport {
            url: url.to_owned(),
            reachable: true,
            error: None,
            state: Some(state),
        },
        Err(e) => AgentReport {
            url: url.to_owned(),
            reachable: false,
            error: Some(e),
            state: None,
        },
    });
    let mut report = merge(root, interfaces, agent);
    report.warnings = warnings;
    Ok(report)
}

/// Joins the map rows with the agent's ownership: a map entry the agent owns gets its owner
/// and Service; an owned VIP missing from the maps (no data plane) gets a row of its own.
pub fn merge(
    root: &Path,
    mut interfaces: Vec<InterfaceReport>,
    agent: Option<AgentReport>,
) -> Report {
    let state = agent.as_ref().and_then(|a| a.state.as_ref());
    let node = state.map(|s| s.node.clone());
    let owned: BTreeMap<(IpAddr, &str), Option<String>> = state
        .map(|s| {
            s.owned
                .iter()
                .map(|o| ((o.vip, o.iface.as_str()), o.service.clone()))
                .collect()
        })
        .unwrap_or_default();
    for i in &mut interfaces {
        for r in &mut i.vips {
            if let Some(service) = owned.get(&(r.vip, r.iface.as_str())) {
                r.owner = node.clone();
                r.service = service.clone();
            }
        }
    }
    let mut vips: Vec<VipRow> = interfaces.iter().flat_map(|i| i.vips.clone()).collect();
    for ((vip, iface), service) in &owned {
        if !vips.iter().any(|r| r.vip == *vip && r.iface == *iface) {
            vips.push(VipRow {
                vip: *vip,
                iface: (*iface).to_owned(),
                vlan: 0,
                mac: None,
                live: false,
                expires_in_s: None,
                permanent: false,
                answered: 0,
                expired: 0,
                malformed: 0,
                owner: node.clone(),
                service: service.clone(),
                in_dataplane: false,
            });
        }
    }
    vips.sort_by(|a, b| (a.vip, &a.iface, a.vlan).cmp(&(b.vip, &b.iface, b.vlan)));
    let peers = state.map(|s| s.peers.clone()).unwrap_or_default();
    Report {
        node,
        pin_root: root.to_owned(),
        agent,
        interfaces,
        vips,
        peers,
        warnings: Vec::new(),
    }
}

//! The Kubernetes agent (`announcer agent`): the thin tokio shell around the election.
//!
//! Why thin: every decision (who owns a VIP, when to take over, when to let go) lives in the
//! sans-IO [`crate::election::Core`], tested over thousands of simulated schedules. This module
//! only connects it to the world: watches ([`watch`]), the eligibility rules ([`eligibility`]),
//! interface choice ([`iface`]), the node Lease ([`node_lease`]), heartbeats ([`heartbeat`]),
//! probes of an old owner's data plane ([`probe`]), the data plane itself ([`plane`]), Events
//! ([`events`]) and the health/state/metrics endpoint ([`http`], [`crate::metrics`]). The lease-per-service mode
//! ([`per_service`]) is the comparison baseline, built the way Cilium and kube-vip elect.

pub mod config;
pub mod eligibility;
pub mod events;
pub mod heartbeat;
pub mod http;
pub mod iface;
pub mod node_lease;
pub mod per_service;
pub mod persist;
pub mod plane;
pub mod probe;
pub mod selector;
pub mod watch;

mod node_mode;
mod service_mode;

use std::{
    collections::{BTreeMap, BTreeSet},
    future::Future,
    net::IpAddr,
    path::PathBuf,
    sync::Arc,
};

use kube::{Client, runtime::events::EventType};
use tokio::sync::watch as tokio_watch;

use self::{
    config::{AgentArgs, ConfigError, Election},
    eligibility::{Plan, Selection, SelectorError},
    events::Events,
    heartbeat::HeartbeatError,
    http::Shared,
    iface::{IfaceConfig, LocalIface},
    plane::Plane,
    probe::Probes,
    watch::Watches,
};
use crate::{
    election::{Core, EventKind, IfaceName, NodeEventKind, VipSpec},
    heartbeat::{IdentityError, KeyError},
    metrics::{Metrics, Recorder, Sources},
    state::AgentState,
    wire::MacAddr,
};

/// Why the agent could not start (or had to stop).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Flags that do not fit together.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A label selector flag that cannot be used.
    #[error(transparent)]
    Selector(#[from] SelectorError),
    /// A label selector flag that does not parse.
    #[error(transparent)]
    SelectorSyntax(#[from] selector::SelectorError),
    /// No usable kubeconfig / in-cluster configuration.
    #[error("no Kubernetes configuration: {0}")]
    KubeConfig(String),
    /// The Kubernetes client failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The heartbeat socket.
    #[error(transparent)]
    Heartbeat(#[from] HeartbeatError),
    /// The heartbeat identity (its node name cannot be sent, or a key is unusable).
    #[error(transparent)]
    Key(#[from] KeyError),
    /// This node's heartbeat identity file.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The state directory (identity, incarnation counter).
    #[error(transparent)]
    State(#[from] persist::PersistError),
    /// This node's Node object says nothing to announce from.
    #[error("node {0}: {1}")]
    Node(String, String),
    /// Local interfaces could not be read.
    #[error(transparent)]
    Interfaces(#[from] crate::dataplane::Error),
}

/// Runs the agent until `shutdown` completes (SIGTERM) and the handover is done.
pub async fn run(
    args: AgentArgs,
    pin_root: PathBuf,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AgentError> {
    args.validate()?;
    let selection = selection_from(&args)?;
    let client = client(&args).await?;
    let (stop_tx, stop_rx) = tokio_watch::channel(false);
    let (term_tx, term_rx) = tokio_watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = term_tx.send(true);
    });
    let shared = Shared::default();
    let metrics = Arc::new(Metrics::new());
    metrics.sources().set_state(shared.clone());
    if !args.no_dataplane {
        metrics.sources().set_dataplane(pin_root.clone());
    }
    {
        let (addr, shared, mut stop) = (args.http_address, shared.clone(), stop_rx.clone());
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let stop = async move { watch::until_true(&mut stop).await };
            if let Err(e) = http::serve(addr, shared, metrics, stop).await {
                tracing::error!(%addr, error = %e, "health endpoint failed");
            }
        });
    }
    // Node Leases (the lease-per-service mode has none, so its watch stays empty).
    let lease_selector = node_lease::selector();
    let watches = Watches::start(
        client.clone(),
        &args.namespace,
        &lease_selector,
        stop_rx.clone(),
    );
    metrics.sources().set_watches(watches.counters.clone());
    let events = Events::new(client.clone(), &args.node_name.as_str().into())
        .with_services(watches.services.clone());
    metrics.sources().set_events(events.clone());
    let mut ctx = Context {
        events,
        recorder: metrics.recorder(),
        sources: metrics.sources().clone(),
        plane: Plane::new(
            pin_root,
            args.xdp_mode.into(),
            args.burst(),
            !args.no_dataplane,
        ),
        client,
        watches,
        selection,
        iface_cfg: IfaceConfig {
            allow: args.interfaces.clone(),
            internal_ips: Vec::new(),
        },
        ifaces: Vec::new(),
        used_ifaces: BTreeSet::new(),
        heartbeat_ip: IpAddr::from([0, 0, 0, 0]),
        heartbeat_mac: None,
        synced: false,
        reported: BTreeSet::new(),
        shared,
        stop_rx,
        term_rx,
        args,
    };
    let result = match ctx.start().await {
        Ok(true) => match ctx.args.election {
            Election::NodeLease => node_mode::run(ctx).await,
            Election::LeasePerService => service_mode::run(ctx).await,
        },
        Ok(false) => Ok(()),
        Err(e) => Err(e),
    };
    let _ = stop_tx.send(true);
    result
}

async fn client(args: &AgentArgs) -> Result<Client, AgentError> {
    kube_client(args.kubeconfig.as_deref())
        .await
        .map_err(AgentError::KubeConfig)
}

/// A client from `kubeconfig`, else from the in-cluster configuration, `$KUBECONFIG` or
/// `~/.kube/config` (the agent and `announcer keygen` share it); the error says why in words.
pub(crate) async fn kube_client(kubeconfig: Option<&std::path::Path>) -> Result<Client, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| e.to_string())?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| e.to_string())?
        }
        None => kube::Config::infer().await.map_err(|e| e.to_string())?,
    };
    Client::try_from(config).map_err(|e| e.to_string())
}

/// The (Kubernetes) Event type and reason for a core event.
fn announce_event_type(kind: &EventKind) -> (EventType, &'static str) {
    match kind {
        EventKind::Announcing => (EventType::Normal, "Announcing"),
        EventKind::Released => (EventType::Normal, "Released"),
        EventKind::NoEligibleNode => (EventType::Warning, "NoEligibleNode"),
        EventKind::NoInterface => (EventType::Warning, "NoInterface"),
        EventKind::Overlap => (EventType::Warning, "Overlap"),
    }
}

/// The (Kubernetes) Event type and reason for a core event about this node.
fn node_event_type(kind: &NodeEventKind) -> (EventType, &'static str) {
    match kind {
        NodeEventKind::Isolated => (EventType::Warning, "Isolated"),
        NodeEventKind::Rejoined => (EventType::Normal, "Rejoined"),
        NodeEventKind::ConfigMismatch => (EventType::Warning, "ConfigMismatch"),
        NodeEventKind::Fenced => (EventType::Warning, "Fenced"),
    }
}

/// An interface's name, state and addresses, compared to notice changes.
type IfaceFingerprint = (String, bool, Vec<(IpAddr, u8)>);

/// What both election modes share: the client, watches, configuration, interfaces, data
/// plane, Events and the state endpoint.
pub(crate) struct Context {
    args: AgentArgs,
    client: Client,
    watches: Watches,
    events: Events,
    /// Durations and heartbeat loss, as they happen.
    recorder: Recorder,
    /// What `/metrics` reads at scrape time (the modes add their parts).
    sources: Sources,
    plane: Plane,
    selection: Selection,
    iface_cfg: IfaceConfig,
    ifaces: Vec<LocalIface>,
    /// Interfaces VIPs have been placed on: their link state is reported to the core.
    used_ifaces: BTreeSet<String>,
    heartbeat_ip: IpAddr,
    heartbeat_mac: Option<MacAddr>,
    synced: bool,
    /// Problems already logged (each once while it lasts).
    reported: BTreeSet<String>,
    shared: Shared,
    stop_rx: tokio_watch::Receiver<bool>,
    term_rx: tokio_watch::Receiver<bool>,
}

impl Context {
    /// Waits for the watches' first lists, then learns this node's addresses and interfaces.
    /// `false`: shutdown came first.
    async fn start(&mut self) -> Result<bool, AgentError> {
        let mut healthy = self.watches.healthy.clone();
        let mut term = self.term_rx.clone();
        let mut waited = 0u32;
        loop {
            if *healthy.borrow_and_update() {
                break;
            }
            tokio::select! {
                _ = healthy.changed() => {}
                () = watch::until_true(&mut term) => return Ok(false),
                () = tokio::time::sleep(std::time::Duration::from_secs(5)) => {
                    waited += 5;
                    tracing::warn!(waited_s = waited, "waiting for the API server (first list of Services, EndpointSlices, Nodes, Leases)");
                }
            }
        }
        self.synced = true;
        // The kubelet registers the Node and fills its addresses a moment later: wait for an
        // InternalIP to send heartbeats from (unless one was given), as the log promises.
        let mut changed = self.watches.changed.clone();
        let mut waited = 0u32;
        let internal = loop {
            let node = self
                .watches
                .nodes
                .state()
                .into_iter()
                .find(|n| n.metadata.name.as_deref() == Some(self.args.node_name.as_str()));
            let internal = node.as_deref().map(iface::internal_ips).unwrap_or_default();
            if self.args.heartbeat_address.is_some() || !internal.is_empty() {
                break internal;
            }
            if waited.is_multiple_of(30) {
                if node.is_none() {
                    tracing::warn!(node = %self.args.node_name, "no Node object with this name (check NODE_NAME); announcing nothing until it appears");
                } else {
                    tracing::warn!(node = %self.args.node_name, "the Node has no InternalIP yet (the kubelet fills it in after registering); waiting for it, or set --heartbeat-address");
                }
            }
            tokio::select! {
                _ = changed.changed() => {}
                () = watch::until_true(&mut term) => return Ok(false),
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => waited += 1,
            }
        };
        self.iface_cfg.internal_ips = internal.clone();
        self.heartbeat_ip = match self.args.heartbeat_address {
            Some(ip) => ip,
            None => internal
                .iter()
                .copied()
                .min_by_key(|ip| ip.is_ipv6())
                .expect("waited for one"),
        };
        self.refresh_interfaces();
        self.heartbeat_mac = self
            .ifaces
            .iter()
            .find(|i| i.addrs.iter().any(|a| a.ip == self.heartbeat_ip))
            .and_then(|i| i.mac);
        // The interfaces VIPs are known to land on (the InternalIP's, and `--interface` names
        // that are not globs) get the program before the election starts; see
        // `Plane::prepare`.
        let early: Vec<String> = self
            .ifaces
            .iter()
            .filter(|i| {
                i.addrs.iter().any(|a| a.ip == self.heartbeat_ip)
                    || self.args.interfaces.contains(&i.name)
            })
            .map(|i| i.name.clone())
            .collect();
        self.plane.prepare(&early);
        tracing::info!(
            node = %self.args.node_name,
            heartbeat = %self.heartbeat_ip,
            mac = ?self.heartbeat_mac,
            election = ?self.args.election,
            dataplane = self.plane.enabled(),
            "agent started"
        );
        Ok(true)
    }

    /// Entries still answering from a previous run on interfaces we have.
    fn existing(&mut self) -> Vec<(IpAddr, IfaceName)> {
        let names: Vec<String> = self.ifaces.iter().map(|i| i.name.clone()).collect();
        self.plane.existing(&names)
    }

    fn refresh_interfaces(&mut self) {
        match iface::snapshot() {
            Ok(s) => self.ifaces = s,
            Err(e) => tracing::warn!(error = %e, "cannot list interfaces"),
        }
    }

    /// What decides interface choice and link state, to notice changes.
    fn iface_fingerprint(&self) -> Vec<IfaceFingerprint> {
        self.ifaces
            .iter()
            .map(|i| {
                (
                    i.name.clone(),
                    i.up,
                    i.addrs.iter().map(|a| (a.ip, a.prefix)).collect(),
                )
            })
            .collect()
    }

    /// The links to publish in our Lease (`None` without a data plane: then every VIP is
    /// "announced" nowhere, and peers need not know where).
    fn links(&self) -> Option<Vec<crate::election::Link>> {
        self.plane
            .enabled()
            .then(|| iface::links(&self.ifaces, &self.iface_cfg))
    }

    /// Link state of the interfaces VIPs were placed on.
    fn link_states(&self) -> Vec<(IfaceName, bool)> {
        self.used_ifaces
            .iter()
            .map(|name| {
                let up = self.ifaces.iter().any(|i| i.name == *name && i.up);
                (IfaceName::from(name.as_str()), up)
            })
            .collect()
    }

    /// The eligibility plan from the watch stores (`None` before the first lists).
    fn plan(&self) -> Option<Plan> {
        if !self.synced {
            return None;
        }
        let services = self.watches.services.state();
        let slices = self.watches.slices.state();
        let nodes = self.watches.nodes.state();
        Some(eligibility::plan(
            &services,
            &slices,
            &nodes,
            &self.selection,
        ))
    }

    /// The interface for `vip` on this node, or why there is none.
    fn choose(&mut self, vip: IpAddr) -> Option<IfaceName> {
        if !self.plane.enabled() {
            // No interface: the core's Events then say "(no data plane)".
            return Some(IfaceName::from(""));
        }
        match iface::choose(vip, &self.ifaces, &self.iface_cfg) {
            Ok(c) => {
                self.used_ifaces.insert(c.iface.to_string());
                Some(c.iface)
            }
            Err(e) => {
                if self.reported.insert(format!("noiface {vip}")) {
                    tracing::warn!(%vip, "{e}");
                }
                None
            }
        }
    }

    /// The core's VIP specs, with problems reported (by one node per Service).
    fn specs(
        &mut self,
        core: &Core,
        services: &mut BTreeMap<IpAddr, String>,
    ) -> Option<Vec<VipSpec>> {
        let plan = self.plan()?;
        self.report_problems(&plan, |key| {
            core.is_reporter(key, std::time::Instant::now())
        });
        services.clear();
        let mut specs = Vec::with_capacity(plan.vips.len());
        for v in &plan.vips {
            services.insert(v.vip, v.service.to_string());
            let local = self.choose(v.vip);
            specs.push(v.spec(local));
        }
        Some(specs)
    }

    /// Logs each problem once, and raises it as an Event if `reporter` says this node is
    /// the one to (so that N nodes do not raise the same Event N times).
    fn report_problems(&mut self, plan: &Plan, reporter: impl Fn(&str) -> bool) {
        let mut now_seen = BTreeSet::new();
        for p in &plan.problems {
            let key = format!("{}|{}", p.service, p.message);
            now_seen.insert(key.clone());
            if self.reported.contains(&key) {
                continue;
            }
            self.reported.insert(key);
            tracing::warn!(service = %p.service, vip = ?p.vip, reason = p.reason.event_reason(), "{}", p.message);
            if reporter(&p.service.to_string()) {
                self.events.publish(
                    &p.service,
                    EventType::Warning,
                    p.reason.event_reason(),
                    &p.message,
                );
            }
        }
        // Forget problems that went away, so a recurrence is reported again.
        self.reported
            .retain(|k| !k.contains('|') || now_seen.contains(k));
    }

    /// Sends a probe of `mac` for `vip` on `iface` (its prober and answer listener are opened
    /// on first use); answerable for the core's probe timeout. A failure is logged: silence,
    /// the core takes over after its timeout.
    fn probe(&mut self, probes: &mut Probes, iface: &IfaceName, vip: IpAddr, mac: MacAddr) {
        if !self.plane.enabled() {
            return; // No data plane to ask: silence, the core takes over after its timeout.
        }
        let Some(li) = self.ifaces.iter().find(|i| *i.name == **iface) else {
            return;
        };
        let src = probe::Source {
            mac: li.mac.unwrap_or(MacAddr::ZERO),
            ipv4: li.addrs.iter().find_map(|a| match a.ip {
                IpAddr::V4(v) => Some(v),
                _ => None,
            }),
            ipv6: li.addrs.iter().find_map(|a| match a.ip {
                IpAddr::V6(v) if v.is_unicast_link_local() => Some(v),
                _ => None,
            }),
            vlan: None,
        };
        let window = self.args.probe_timeout;
        if let Err(e) = probes.send(iface, li.index, src, vip, mac, window) {
            tracing::warn!(%vip, %iface, error = %e, "probe not sent; taking over on silence");
        }
    }

    fn publish(&self, state: AgentState) {
        self.shared.set(state);
    }
}

/// The fingerprint of what in this agent's configuration changes how it ranks VIPs, sent in
/// heartbeats so that a node left on another configuration during a ConfigMap roll is
/// noticed (a `ConfigMismatch` Event on the Node).
pub fn config_fingerprint(args: &AgentArgs) -> u64 {
    let relevant = format!(
        "{:?}|{:?}|{:?}|{}|{}|{:?}|{:?}|{}|{:?}",
        args.service_selector,
        args.node_selector,
        args.load_balancer_class,
        args.no_ipv4,
        args.no_ipv6,
        args.interfaces,
        args.heartbeat_interval,
        args.heartbeat_misses,
        args.grace,
    );
    xxhash_rust::xxh3::xxh3_64(relevant.as_bytes())
}

/// The Services and Nodes the flags select.
pub fn selection_from(args: &AgentArgs) -> Result<Selection, AgentError> {
    Ok(Selection {
        ipv4: !args.no_ipv4,
        ipv6: !args.no_ipv6,
        load_balancer_class: Some(args.load_balancer_class.clone()),
        ..Selection::with_selectors(
            args.service_selector
                .as_deref()
                .map(selector::parse)
                .transpose()?,
            args.node_selector
                .as_deref()
                .map(selector::parse)
                .transpose()?,
        )?
    })
}
